"""``secemb bench noise`` (issue 15): it times the samplers it names and reports rates that agree
with its own times; bad input exits 2."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from secemb.cli import app


def test_bench_noise_reports_each_sampler(tmp_path):
    out = tmp_path / "noise.json"
    r = CliRunner().invoke(app, ["bench", "noise", "--sigma", "300", "--n", "5000", "--repeats", "2",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert (result["sigma"], result["n"], result["repeats"]) == (300.0, 5000, 2)
    assert set(result["samplers"]) == {"cdt", "rejection", "os_randomness"}
    for s in result["samplers"].values():
        assert 0 < s["min_s"] <= s["median_s"]
        assert abs(s["samples_per_s"] * s["median_s"] - 5000) < 1e-6 * 5000


def test_bench_noise_without_rejection_and_bad_input(tmp_path):
    out = tmp_path / "noise.json"
    r = CliRunner().invoke(app, ["bench", "noise", "--sigma", "50", "--n", "100", "--repeats", "1",
                                 "--no-rejection", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert set(json.loads(out.read_text())["samplers"]) == {"cdt", "os_randomness"}
    for bad in (["--n", "0"], ["--sigma", "100000"], ["--sigma", "-1"]):
        r = CliRunner().invoke(app, ["bench", "noise", *bad, "--out", str(out)])
        assert r.exit_code == 2, (bad, r.output)
