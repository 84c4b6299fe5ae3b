"""What the CLI tests share: running ``secemb`` in process, checking a one-line usage error, and a one-server
deployment run as real processes (admin init, ``secemb serve`` until it answers, clients, stopping them)."""

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

from _server_template import popen_secemb
from secemb.cli import app


def run_cli(*args: str):  # noqa: ANN201 - click's Result
    """``secemb ARGS`` in process, on a wide terminal (no folded tables)."""
    return CliRunner().invoke(app, list(args), terminal_width=200)


def assert_usage_error(res, text: str) -> None:  # noqa: ANN001
    """``res`` is exit 2 with one line ``error: ...`` naming ``text`` on stderr, no traceback."""
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and text in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output


# --- one-server deployments run as real processes on 127.0.0.1 (test_sfsl_deploy, test_secea_deploy,
# test_exchange_restart) ---

SECEMB = [sys.executable, "-m", "secemb"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def admin(*args: str) -> dict:
    """``secemb admin ARGS`` in process; asserts exit 0 and returns its JSON document."""
    res = CliRunner().invoke(app, ["admin", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def init_one_server(root: Path, *args: str) -> list[str]:
    """``secemb admin init --out ROOT --host0 127.0.0.1 --port0 <free port> ARGS`` and ``admin add-devices
    --users 0-2``, both asserted to exit 0; returns the device credential files written."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    res = CliRunner().invoke(app, ["admin", "init", "--out", str(root), "--host0", "127.0.0.1", "--port0", str(port),
                                   *args])
    assert res.exit_code == 0, res.output
    return list(admin("add-devices", "--deployment", str(root), "--users", "0-2")["written"])


def serve(root: Path) -> subprocess.Popen:
    """``secemb serve`` of the deployment at ``root`` (forked from the suite's template where it can be:
    tests/_server_template.py), returned once ``admin status`` answers (at most 60 s; asserts the server has not
    exited meanwhile; asked every 0.1 s: a forked server answers within ~0.3 s, and a refused ``admin status``
    costs a few milliseconds)."""
    server = popen_secemb([*SECEMB, "serve", "--config", str(root / "exchange.json"), "--log-level", "warning"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV)
    deadline = time.monotonic() + 60
    while (res := CliRunner().invoke(app, ["admin", "status", "--deployment", str(root)])).exit_code != 0:
        assert server.poll() is None and time.monotonic() < deadline, res.output
        time.sleep(0.1)
    return server


def start_clients(root: Path, *args: str) -> list[subprocess.Popen]:
    """``secemb client --user U --credentials ROOT/devices/device-U.json ARGS`` for users 0, 1, 2 (forked from the
    suite's template where they can be)."""
    return [popen_secemb([*SECEMB, "client", "--user", str(u), "--credentials",
                          str(root / "devices" / f"device-{u}.json"), *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV) for u in range(3)]


def stop(proc: subprocess.Popen) -> None:
    """End ``proc`` if it still runs: SIGINT and 20 s to exit, then kill."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def kill(procs: list[subprocess.Popen]) -> None:
    """Kill every process of ``procs`` still running."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
