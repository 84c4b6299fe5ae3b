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


def test_batch_wait_ms_reaches_the_networked_run_and_is_refused_elsewhere(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    from secemb.training.experiment import run_experiment

    seen: dict = {}

    def networked(exp, **kwargs):  # noqa: ANN001, ANN003, ANN202
        seen.update(kwargs)
        return run_experiment(exp)

    monkeypatch.setattr("secemb.training.networked.run_networked_experiment", networked)
    common = ["demo", "--dataset", "synthetic-mini", "--epochs", "1", "--quiet"]
    res = CliRunner().invoke(app, [*common, "--network", "--batch-wait-ms", "0", "--workdir", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    assert seen["batch_wait_ms"] == 0
    seen.clear()
    assert CliRunner().invoke(app, [*common, "--network", "--workdir", str(tmp_path / "v")]).exit_code == 0
    assert seen["batch_wait_ms"] is None  # the servers' own default
    refused = ((["--in-process", "--batch-wait-ms", "3"], "applies with --network only"),
               (["--network", "--protocol", "sfsl", "--batch-wait-ms", "3"], "does not take --batch-wait-ms"),
               (["--network", "--batch-wait-ms", "1001"], "--batch-wait-ms"))
    for extra, message in refused:
        res = CliRunner().invoke(app, [*common, *extra])
        assert res.exit_code == 2 and message in " ".join(res.output.split()), (extra, res.output)


def test_a_networked_runs_batch_wait_is_each_servers_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from secemb.training import Experiment
    from secemb.training import networked as net

    got: dict = {}

    def on_cluster(model, protocol, train, test, config, **kwargs):  # noqa: ANN001, ANN003, ANN202, PLR0913
        got.update(kwargs["server_options"])

    monkeypatch.setattr(net, "train_on_local_cluster", on_cluster)
    net.run_networked_experiment(Experiment(dataset="synthetic-mini", epochs=1), batch_wait_ms=12.5)
    assert got == {"batch_wait_ms": 12.5}

    from secemb.sim.cluster import LocalCluster

    cluster = LocalCluster(tmp_path / "c", num_items=10, num_users=10, batch_wait_ms=12.5)
    assert [c.batch_wait_ms for c in cluster.configs] == [12.5, 12.5]
