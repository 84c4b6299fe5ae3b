"""SFSL deployed by hand (docs/deployment.md, "One server"): ``secemb admin init --protocol sfsl``,
``secemb serve`` (one server, TLS, no peer), three ``secemb client`` processes and ``secemb admin
open-round`` run a round on 127.0.0.1; the refusals exit 2 with one line; and ``secemb demo
--network`` trains ``secemb train``'s model (CPP1)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import admin, init_one_server, kill, serve, start_clients, stop
from typer.testing import CliRunner

from secemb.cli import app


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    root = tmp_path / "dep"
    written = init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                              "--option", "sfsl_preset=CPP1", "--option", "batch=8", "--stage-deadline", "150")
    assert oct((root / "exchange.json").stat().st_mode & 0o777) == "0o600"
    assert [Path(p).name for p in written] == ["device-0.json", "device-1.json", "device-2.json"]
    assert all(Path(p).stat().st_mode & 0o077 == 0 for p in written)
    return root


def test_serve_and_three_clients_run_an_sfsl_round_by_hand(deployment: Path) -> None:
    server = serve(deployment)
    clients: list[subprocess.Popen] = []
    try:
        # listening, no round yet, no strikes
        assert admin("status", "--deployment", str(deployment)) == {"server": None, "strikes": {}, "strike_limit": 3,
                                                                    "refused": [], "dropouts": {
                                                                        "dropouts": {}, "dropout_limit": 10,
                                                                        "dropout_window": 50, "refused": [],
                                                                        "let_in_after": {}}}
        clients = start_clients(deployment, "--wait", "90")
        opened = admin("open-round", "--deployment", str(deployment), "--participants", "0-2")
        assert opened["round_id"] == 1 and opened["users"] == [0, 1, 2] and opened["stages"][0] == "psu-advertise"
        lines = []
        for proc in clients:
            out, err = proc.communicate(timeout=400)
            assert proc.returncode == 0, (out, err)
            lines.append(json.loads(out.decode().strip().splitlines()[-1]))
        assert [d["user"] for d in lines] == [0, 1, 2]
        assert all(d["round_id"] == 1 and d["outcome"] == "committed" for d in lines)
        assert all(d["upload_bytes"] > 0 and d["download_bytes"] > 0 for d in lines)
        final = admin("status", "--deployment", str(deployment))["server"]
        assert final["state"] == "committed" and final["stage"] is None
        assert (final["reason"], final["bad_shares"], final["complaints"]) == (None, [], {})  # an honest round
    finally:
        kill(clients)
        stop(server)


def _one_line_exit_2(res) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_one_server_refusals_exit_2_with_one_line(deployment: Path) -> None:
    runner = CliRunner()
    config = str(deployment / "exchange.json")
    device = str(deployment / "devices" / "device-0.json")
    _one_line_exit_2(runner.invoke(app, ["serve", "--config", config, "--peer-url", "https://127.0.0.1:1"]))
    _one_line_exit_2(runner.invoke(app, ["serve", "--config", config, "--insecure-http"]))
    _one_line_exit_2(runner.invoke(app, ["client", "--user", "0", "--credentials", device, "--dataset", "ml-100k"]))
    _one_line_exit_2(runner.invoke(app, ["client", "--user", "1", "--credentials", device]))
    _one_line_exit_2(runner.invoke(app, ["admin", "count", "--deployment", str(deployment)]))
    _one_line_exit_2(runner.invoke(app, ["admin", "init", "--protocol", "sfsl", "--out", str(deployment / "again"),
                                         "--host0", "127.0.0.1", "--dataset", "taobao-mini", "--option",
                                         "sfsl_preset=CPP9"]))
    _one_line_exit_2(runner.invoke(app, ["admin", "init", "--protocol", "nope", "--out", str(deployment / "x"),
                                         "--host0", "127.0.0.1", "--dataset", "taobao-mini"]))


@pytest.mark.parametrize("args", [
    ["train", "--protocol", "no-such-protocol"],
    ["demo", "--protocol", "no-such-protocol"],
    ["train", "--protocol", "sfsl", "--dataset", "taobao-mini", "--layout", "full"],
    ["demo", "--network", "--protocol", "sfsl", "--dataset", "taobao-mini", "--reproducible"],
    ["train", "--protocol", "sfsl", "--dataset", "taobao-mini", "--sfsl-preset", "CPP0"],
    ["train", "--protocol", "plaintext", "--sfsl-preset", "CPP1"],
])
def test_a_bad_protocol_or_option_exits_2_with_one_line(args: list[str]) -> None:
    _one_line_exit_2(CliRunner().invoke(app, args))


@pytest.mark.slow
def test_demo_network_cpp1_is_train_cpp1(tmp_path: Path) -> None:
    # CPP1 perturbs nothing at random (S'' = S): the OS randomness of the devices does not enter
    # the model, so the networked run and the in-process run of one seed give the same model
    common = ["--protocol", "sfsl", "--sfsl-preset", "CPP1", "--dataset", "taobao-mini", "--users-per-round", "100",
              "--epochs", "1", "--seed", "2", "--quiet"]
    docs = []
    for i, cmd in enumerate((["train"], ["demo", "--network"])):
        out = tmp_path / f"r{i}.json"
        res = CliRunner().invoke(app, [*cmd, *common, "--json-out", str(out)])
        assert res.exit_code == 0, res.output
        docs.append(json.loads(out.read_text()))
    train, demo = docs
    assert demo["config"].get("network") is True and "network" not in train["config"]
    assert train["rounds"] == demo["rounds"] == 2
    assert train["model_sha256"] == demo["model_sha256"]
    assert train["comm"]["upload_bytes_per_user_round"] == demo["comm"]["upload_bytes_per_user_round"]
