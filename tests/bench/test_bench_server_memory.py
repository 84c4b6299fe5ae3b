"""``secemb bench memory --server`` (issue 37, goal 5): server 0's peak memory over one round,
by the number of devices; its refusals."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from secemb.bench.memory import server_round
from secemb.cli import app

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


@pytest.mark.parametrize("protocol", ["secemb", "secfedrec", "dp-fedrec", "plaintext"])
def test_server_round_reports_the_peak_of_a_round_with_a_tenth_left_out(protocol):
    res = server_round("mf", "ml-100k", 4, 3, protocol)
    assert res["left_out"] == 1 and res["dense_size"] >= 1
    assert 0 < res["rss_round_start_mib"] <= res["peak_rss_mib"]
    assert res["growth_mib"] == pytest.approx(res["peak_rss_mib"] - res["rss_round_start_mib"])


@pytest.mark.parametrize("args", [["--protocols", "sfsl"], ["--protocols", "secemb,kvsagg"], ["--devices", "1"],
                                  ["--devices", "ten"], ["--datasets", "ml-2m"], ["--models", "din"]])
def test_bad_server_options_exit_2_before_any_work(tmp_path, args):
    result = CliRunner().invoke(app, ["bench", "memory", "--server", "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "out" / "server_memory.csv").exists()
