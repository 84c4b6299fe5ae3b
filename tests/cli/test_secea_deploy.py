"""SecEA deployed by hand (docs/secea.md, "Silos as secemb client processes"): ``secemb admin
init --protocol secea``, ``secemb serve`` (one server, TLS), three ``secemb client`` silos and
``secemb admin open-round`` twice -- the set-up, then an aggregation round -- on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from secemb.cli import app

SECEMB = [sys.executable, "-m", "secemb"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _admin(*args: str) -> dict:
    res = CliRunner().invoke(app, ["admin", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_state(root: Path, round_id: int, timeout: float = 400.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        doc = _admin("status", "--deployment", str(root))["server"]
        if doc and doc["round_id"] == round_id and doc["state"] != "open":
            return doc
        assert time.monotonic() < deadline, doc
        time.sleep(0.5)


def test_serve_and_three_silos_run_the_set_up_and_a_round_by_hand(tmp_path: Path) -> None:
    root = tmp_path / "dep"
    res = CliRunner().invoke(app, ["admin", "init", "--protocol", "secea", "--out", str(root), "--host0", "127.0.0.1",
                                   "--port0", str(_free_port()), "--dataset", "synthetic", "--users-per-round", "3",
                                   "--option", "secea_key_bits=1024", "--option", "secea_items=6",
                                   "--stage-deadline", "150"])
    assert res.exit_code == 0, res.output
    _admin("add-devices", "--deployment", str(root), "--users", "0-2")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen([*SECEMB, "serve", "--config", str(root / "exchange.json"), "--log-level", "warning"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    clients: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + 60
        while CliRunner().invoke(app, ["admin", "status", "--deployment", str(root)]).exit_code != 0:
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        clients = [subprocess.Popen([*SECEMB, "client", "--user", str(u), "--credentials",
                                     str(root / "devices" / f"device-{u}.json"), "--rounds", "2", "--wait", "90"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for u in range(3)]
        setup = _admin("open-round", "--deployment", str(root), "--participants", "0-2")
        assert setup["setup"] and setup["stages"][0] == "secea-keys" and setup["users"] == [0, 1, 2]
        assert _wait_state(root, setup["round_id"])["state"] == "committed"
        rnd = _admin("open-round", "--deployment", str(root), "--participants", "0-2")
        assert not rnd["setup"] and rnd["stages"] == ["secea-share", "secea-answer"] and rnd["union_size"] == 6
        lines = []
        for proc in clients:
            out, err = proc.communicate(timeout=400)
            assert proc.returncode == 0, (out, err)
            lines.append([json.loads(x) for x in out.decode().strip().splitlines()[-2:]])
        for u, (first, second) in enumerate(lines):
            assert first["user"] == second["user"] == u
            assert first["outcome"] == second["outcome"] == "committed"
            assert second["round_id"] == rnd["round_id"] and second["upload_bytes"] > 0
        assert _admin("status", "--deployment", str(root))["server"]["state"] == "committed"
    finally:
        for proc in clients:
            if proc.poll() is None:
                proc.kill()
        _stop(server)
