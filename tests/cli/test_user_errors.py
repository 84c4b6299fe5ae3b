"""Issue 32, item 3: every user-reachable failure a new user met is one ``error:`` line and exit 2
(1 where a run failed a check), before any work; SFSL's training loss is finite."""

from __future__ import annotations

import json
import math
import os
import secrets
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
from _server_template import run  # type: ignore[import-not-found]
from typer.testing import CliRunner

from secemb.cli import app
from secemb.errors import InvalidParameters


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, list(args), terminal_width=120)


def _one_line_error(res, text: str, code: int = 2) -> None:  # noqa: ANN001
    """Exit ``code``, exactly one line on stderr, ``error: ...`` holding ``text``, no traceback,
    and no epoch trained."""
    assert res.exit_code == code, res.output
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert text in res.stderr, res.stderr
    assert "Traceback" not in res.output and "epoch" not in res.stdout


def test_download_offline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what requests raises without a network (a ConnectionError, an OSError); before: 361 lines of tracebacks
    def offline(url: str, dest: Path) -> None:
        raise ConnectionError("Failed to resolve 'files.grouplens.org'")

    monkeypatch.setattr("secemb.data.movielens._https_fetch", offline)
    res = _run("train", "--dataset", "ml-1m", "--download", "--data-dir", str(tmp_path), "--epochs", "1", "-q")
    _one_line_error(res, "could not download https://files.grouplens.org/datasets/movielens/ml-1m.zip "
                         "(ConnectionError")
    assert list(tmp_path.iterdir()) == []  # the temporary download folder is gone


def test_auc_on_a_rating_model_is_refused_before_training() -> None:
    # before: five epochs printing `auc n/a`, exit 0
    res = _run("train", "--metrics", "auc", "--epochs", "1", "-q")
    _one_line_error(res, "metric 'auc' scores 0/1 click labels, but the data's ratings range from 1 to 5")
    assert "metrics that fit 'mf': rmse, mae" in res.stderr


@pytest.mark.parametrize(("option", "value"), [("--dp-level", "item"), ("--dp-clip", "0.5"), ("--dp-delta", "1e-6")])
def test_a_dp_option_without_epsilon_is_refused(option: str, value: str) -> None:
    # before: silently ignored (a run without DP while the user asked for some)
    res = _run("train", option, value, "--epochs", "1", "-q")
    _one_line_error(res, "needs a finite dp_epsilon (--dp-epsilon)")


def test_the_python_api_refuses_a_dp_option_without_epsilon() -> None:
    from secemb import Experiment

    with pytest.raises(InvalidParameters, match=r"dp_level='item' needs a finite dp_epsilon"):
        Experiment(dp_level="item")
    Experiment(dp_epsilon=2.0, dp_clip=0.5)  # with an epsilon the options are taken


@pytest.mark.parametrize("protocol", ["quant8", "ternary"])
def test_demo_network_refuses_an_in_process_protocol_up_front(tmp_path: Path, protocol: str) -> None:
    # before: both server processes started, exited 1, and a traceback named a deleted log folder
    work = tmp_path / "w"
    res = _run("demo", "--network", "--protocol", protocol, "--dataset", "synthetic-mini", "--epochs", "1", "-q",
               "--workdir", str(work))
    _one_line_error(res, f"--protocol {protocol} runs in process only")
    assert "use --in-process, or --network with one of" in res.stderr and "secemb" in res.stderr
    assert not work.exists()  # no server was started


def test_sfsl_training_loss_is_finite_and_the_result_is_json() -> None:
    # before: `train loss nan` on every line and `"train_loss": NaN` in the JSON (the engine never computed it)
    import torch

    from secemb.data.ctr import TaobaoShaped, split_clicks
    from secemb.sim.player import train_exchange
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol

    torch.set_num_threads(1)
    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(20)))
    rounds: list[float] = []
    # lr = 0: the model stays at its initialization, whose click logits are near 0, so every
    # batch's binary cross-entropy is near ln 2 (the loss of a coin flip)
    run = ExchangeRun("taobao-mini", users_per_round=10, epochs=1, seed=4)
    res = train_exchange(SFSLProtocol(run, lr=0.0, data=clicks), on_round=lambda r: rounds.append(r.train_loss))
    assert len(rounds) == 2 and all(abs(v - math.log(2)) < 0.01 for v in rounds), rounds
    # the epoch's loss is the mean over its participations (10 devices in each of the 2 rounds)
    assert res.epochs[0].train_loss == pytest.approx(sum(rounds) / 2, rel=1e-12)
    doc = json.loads(res.to_json(), parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert doc["epochs"][0]["train_loss"] == pytest.approx(res.epochs[0].train_loss)
    # training moves the loss: a run that learns is not the lr = 0 run
    learnt = train_exchange(SFSLProtocol(run, lr=1.0, data=clicks))
    assert math.isfinite(learnt.epochs[0].train_loss) and learnt.epochs[0].train_loss != res.epochs[0].train_loss


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_on_a_busy_port_is_one_line_before_startup(tmp_path: Path) -> None:
    # before: uvicorn logged "Application startup complete", then exited 3
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        state = tmp_path / "state"
        (tmp_path / "s0.json").write_text(json.dumps({
            "server": {"party": 0, "host": "127.0.0.1", "port": port, "peer_url": "http://127.0.0.1:9",
                       "state_dir": str(state)},
            "protocol": {"name": "secemb", "layout": "cuckoo", "relay": True},
            "model": {"name": "mf", "num_items": 50, "num_users": 10, "hparams": {"dim": 4}},
            "training": {"m_prime": 5}}))
        env = dict(os.environ, **{f"SECEMB_{k}_SECRET": secrets.token_hex(32) for k in ("PEER", "ADMIN", "USER")})
        proc = run([sys.executable, "-c", "from secemb.cli import main; main()", "serve", "--config",
                    str(tmp_path / "s0.json"), "--insecure-http"], env=env, text=True, timeout=60)  # forked
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: cannot listen on 127.0.0.1:{port}: port in use (another process listens there)"]
    assert "startup complete" not in proc.stderr and "Traceback" not in proc.stderr
    assert not state.exists()  # refused before the state directory was touched


def test_client_with_server_0_down_says_server_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: "no open round for user 3 within ... s", as if the deployment were idle
    monkeypatch.setenv("SECEMB_DEVICE_KEY0", secrets.token_hex(32))
    monkeypatch.setenv("SECEMB_DEVICE_KEY1", secrets.token_hex(32))
    down = f"http://127.0.0.1:{_closed_port()}"
    res = _run("client", "--user", "3", "--server0", down, "--server1", f"http://127.0.0.1:{_closed_port()}",
               "--wait", "0.3")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)  # the client's one JSON line
    assert doc["user"] == 3 and doc["error"].startswith("server unreachable for 0.3 s: GET " + down), doc
    assert "no open round" not in doc["error"] and "Traceback" not in res.output


@pytest.mark.parametrize(("key", "says"), [
    ("ab" * 16, "SECEMB_DEVICE_KEY0 must be >= 32 bytes (64 hex digits), got 16"),  # taken before: one parser
    ("ab " * 32, "SECEMB_DEVICE_KEY0 must be hex"),
])
def test_client_refuses_a_device_key_that_is_no_secret(monkeypatch: pytest.MonkeyPatch, key: str, says: str) -> None:
    monkeypatch.setenv("SECEMB_DEVICE_KEY0", key)
    monkeypatch.setenv("SECEMB_DEVICE_KEY1", secrets.token_hex(32))
    res = _run("client", "--user", "3", "--server0", f"http://127.0.0.1:{_closed_port()}",
               "--server1", f"http://127.0.0.1:{_closed_port()}", "--wait", "0.3")
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert doc["error"].startswith(f"bad usage: {says}"), doc
    assert key.strip() not in res.output and "Traceback" not in res.output


def test_demo_reports_a_server_that_exited_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: a traceback naming the log in the temporary folder the demo had already removed
    from secemb.errors import SecembError

    def exited(*args: object, **kwargs: object) -> None:
        raise SecembError("server 0 exited with code 1; see /tmp/secemb-demo-x/server0.log")

    monkeypatch.setattr("secemb.training.networked.run_networked_experiment", exited)
    res = _run("demo", "--network", "--dataset", "synthetic-mini", "--epochs", "1", "-q")
    _one_line_error(res, "failed: server 0 exited with code 1; see /tmp/secemb-demo-x/server0.log "
                         "(--workdir DIR keeps the servers' logs)", code=1)
