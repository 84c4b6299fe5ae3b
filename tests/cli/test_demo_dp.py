"""``secemb demo`` takes the DP options of ``secemb train`` (--dp-epsilon/--dp-delta/--dp-clip/
--dp-level): inconsistent combinations are refused with exit 2 before any server starts, and a
short networked DP demo trains, its servers noising their shares, with the privacy block of
``secemb train``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from secemb.cli import app

runner = CliRunner()
BASE = ["demo", "--dataset", "synthetic-mini", "--model", "mf", "--dim", "8", "--users-per-round", "60",
        "--epochs", "1", "--seed", "3", "--quiet"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--dp-epsilon", "2", "--verify"], "cannot run with DP"),
    (["--dp-epsilon", "2", "--protocol", "kvsagg"], "supports no differential privacy"),
    (["--dp-epsilon", "2", "--dp-level", "record"], "dp level must be 'user'"),
    (["--dp-epsilon", "0"], "dp epsilon (inf: no DP) must be a finite number > 0, got 0"),
    (["--dp-epsilon", "2", "--dp-delta", "1.5"], "dp delta must be a finite number in (0, 1), got 1.5"),
    (["--dp-epsilon", "2", "--dp-clip", "-1"], "dp clip must be a finite number > 0"),
])
@pytest.mark.parametrize("mode", ["--network", "--in-process"])
def test_inconsistent_dp_options_exit_2(tmp_path, mode, extra, message):
    res = runner.invoke(app, [*BASE, mode, *extra, "--workdir", str(tmp_path / "w")])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").glob("server*"))  # no server started


@pytest.mark.slow  # about 40 s: two server processes, 60 devices over HTTP
def test_a_networked_dp_demo_runs_and_accounts(tmp_path):
    out = tmp_path / "dp.json"
    res = runner.invoke(app, [*BASE, "--network", "--dp-epsilon", "8", "--dp-clip", "0.5", "--concurrency", "16",
                              "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["config"]["dp"] == {"epsilon": 8.0, "delta": 1e-5, "clip": 0.5, "level": "user"}
    assert doc["config"]["sampling"] == "poisson"
    p = doc["privacy"]
    assert 0 < p["epsilon"] <= 8.0 and p["delta"] == 1e-5 and p["noise_multiplier"] > 0
    assert p["sampling_rate"] == pytest.approx(60 / doc["config"]["active_users"])
