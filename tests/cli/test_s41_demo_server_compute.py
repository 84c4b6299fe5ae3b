"""``secemb demo --network``'s summary names its server figure for what it is: the slower server's
seconds in its protocol role's calls a round (the servers' round outcomes, ``server_s``), as
``secemb train`` does.  Before session 41 the networked table called it "round wall time", which a
round of 100 devices over HTTP exceeds about ten times (0.23 s against ~2 s a round)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from secemb.cli import app


def test_networked_summary_labels_the_slower_servers_compute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from secemb.training.experiment import run_experiment

    seen = {}

    def networked(exp, **kwargs):  # noqa: ANN001, ANN003, ANN202 - the real run's signature
        result = run_experiment(exp)  # an in-process run of the same experiment stands in for the servers
        result.server_s_per_round = 0.2345
        seen["result"] = result
        return result

    monkeypatch.setattr("secemb.training.networked.run_networked_experiment", networked)
    res = CliRunner().invoke(app, ["demo", "--network", "--dataset", "synthetic-mini", "--epochs", "1", "--quiet",
                                   "--workdir", str(tmp_path / "w")], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "round wall time" not in res.output
    (line,) = [x for x in res.output.splitlines() if "server compute / round" in x]
    assert "(slower server)" in line and "0.2345 s" in line
