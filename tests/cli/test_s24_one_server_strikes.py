"""The operator's view of the one-server door (issue 34, session 24) through the commands, against a
real ``secemb serve``: its journal already records three rounds whose signed secure aggregations
proved device 0 cheating (``proven_bad_shares``, as tests/server/test_s24_strikes.py plays them);
``secemb admin status`` shows the strikes, ``open-round`` leaves device 0 out and says so, and
``secemb admin clear-alarms`` (refused for one server before) clears them, journaled."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cli_helpers import admin, init_one_server, serve, stop

from secemb.server.persist import Journal


def test_status_shows_the_strikes_open_round_leaves_the_device_out_and_clear_alarms_clears_them(
        tmp_path: Path) -> None:
    root = tmp_path / "dep"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                    "--option", "sfsl_preset=CPP1", "--option", "batch=8")
    os.mkdir(root / "state", 0o700)
    journal = Journal(root / "state" / "journal.jsonl")
    for r in (1, 2, 3):
        journal.append({"event": "open", "round_id": r, "users": [0, 1, 2]})
        journal.append({"event": "end", "round_id": r, "round": {
            "round_id": r, "users": [0, 1, 2], "stages": [], "stage": None, "state": "aborted", "reason": "test",
            "bad_shares": [0], "proven_bad_shares": [0], "complaints": {}}})
    server: subprocess.Popen | None = None
    try:
        server = serve(root)
        status = admin("status", "--deployment", str(root))
        assert status["server"]["round_id"] == 3 and status["server"]["proven_bad_shares"] == [0]
        assert (status["strikes"], status["strike_limit"], status["refused"]) == ({"0": 3}, 3, [0])
        opened = admin("open-round", "--deployment", str(root), "--participants", "0-2")
        assert (opened["round_id"], opened["users"], opened["refused"]) == (4, [1, 2], [0])
        assert admin("clear-alarms", "--deployment", str(root)) == {"server": {"cleared": {"0": 3}}}
        status = admin("status", "--deployment", str(root))
        assert (status["strikes"], status["refused"]) == ({}, [])
    finally:
        if server is not None:
            stop(server)
    cleared = [r for r in Journal(root / "state" / "journal.jsonl").records() if r["event"] == "strikes_cleared"]
    assert cleared == [{"event": "strikes_cleared", "through_round": 3, "strikes": {"0": 3}}]
