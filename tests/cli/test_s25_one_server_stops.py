"""A one-server ``secemb serve`` exits 0 on SIGTERM and SIGINT, as the two-server one does
(tests/server/test_net_shutdown.py): uvicorn raises the signal again after its graceful shutdown,
and the one-server path ran uvicorn without the stand-in handler, so a supervisor's stop ended it by
SIGTERM (-15) and Ctrl-C with 130 (found by helper A, session 25)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from cli_helpers import init_one_server, serve


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_one_server_serve_stops_cleanly(sig: signal.Signals, tmp_path: Path) -> None:
    init_one_server(tmp_path, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3")
    server = serve(tmp_path)
    try:
        server.send_signal(sig)
        out, _ = server.communicate(timeout=30)
    finally:
        server.kill()
    assert server.returncode == 0, out
