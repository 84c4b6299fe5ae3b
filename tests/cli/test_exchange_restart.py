"""``secemb serve`` of a one-server deployment restarted between rounds (docs/deployment.md, "One
server", "What survives a restart"), on 127.0.0.1: SFSL, three ``secemb client`` devices.  The
model's SHA-256 is the same before and after the restart, ``secemb admin open-round`` goes on
with the next round id and that round commits; a corrupted checkpoint is refused with one
line, exit 2, and left as it was.  The stage deadline is generous (the server closes a stage as
soon as every device has sent, so it only matters on a loaded machine)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cli_helpers import admin, init_one_server, kill, serve, start_clients, stop
from typer.testing import CliRunner

from secemb.cli import app


def _round(root: Path, expected_id: int) -> None:
    """Three clients, ``admin open-round``: the round has ``expected_id`` and commits."""
    clients = start_clients(root, "--wait", "240")
    try:
        opened = admin("open-round", "--deployment", str(root), "--participants", "0-2")
        assert opened["round_id"] == expected_id
        for proc in clients:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, (out, err)
            line = json.loads(out.decode().strip().splitlines()[-1])
            assert (line["round_id"], line["outcome"]) == (expected_id, "committed")
    finally:
        kill(clients)


def _model_sha256(root: Path) -> str:
    from secemb.transport.http import HttpStageAdmin
    from secemb.server.exchange_deploy import ExchangeDeployment

    with ExchangeDeployment.load(root).admin() as api:
        return hashlib.sha256(HttpStageAdmin(api).model()).hexdigest()


def test_serve_restarted_between_rounds_goes_on_where_it_stopped(tmp_path: Path) -> None:
    root = tmp_path / "dep"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                    "--option", "sfsl_preset=CPP1", "--option", "batch=8", "--stage-deadline", "120")
    server = serve(root)
    try:
        initial = _model_sha256(root)
        _round(root, 1)
        trained = _model_sha256(root)
        assert trained != initial
    finally:
        stop(server)
    server = serve(root)
    try:
        assert _model_sha256(root) == trained
        last = admin("status", "--deployment", str(root))["server"]
        assert (last["round_id"], last["state"], last["stage"]) == (1, "committed", None)
        _round(root, 2)
        assert _model_sha256(root) not in (trained, initial)
    finally:
        stop(server)
    checkpoint = root / "state" / "checkpoint.npz"
    damaged = checkpoint.read_bytes()[:-9] + b"corrupted"
    checkpoint.write_bytes(damaged)
    res = CliRunner().invoke(app, ["serve", "--config", str(root / "exchange.json")])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "unreadable" in lines[0], res.output
    assert checkpoint.read_bytes() == damaged
