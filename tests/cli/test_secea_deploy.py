"""SecEA deployed by hand (docs/secea.md, "Silos as secemb client processes"): ``secemb admin
init --protocol secea``, ``secemb serve`` (one server, TLS), three ``secemb client`` silos and
``secemb admin open-round`` twice -- the set-up, then an aggregation round -- on 127.0.0.1; then
the three silo processes start again from their state files (``devices/device-U.state``) and
run a third round without a new set-up, and a state file of another silo or altered is refused
(exit 2, the file unchanged)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import time
from pathlib import Path

from cli_helpers import admin, init_one_server, kill, serve, start_clients, stop
from typer.testing import CliRunner

from secemb.cli import app


def _wait_state(root: Path, round_id: int, timeout: float = 400.0) -> dict:
    """``secemb admin status``'s round document once round ``round_id`` is no longer open.  The wait
    polls the round document over the admin API, one signed GET a 0.25 s (session 37: polled through
    the CLI in process, each poll built the whole command line again, 0.1-0.2 s of CPU every 0.5 s
    for the tens of seconds the silos take); the document returned is the CLI's."""
    from secemb.server.exchange_deploy import ExchangeDeployment
    from secemb.transport.errors import RemoteError
    from secemb.transport.http import HttpStageAdmin

    deadline = time.monotonic() + timeout
    with ExchangeDeployment.load(root).admin() as api:
        link = HttpStageAdmin(api)
        while True:
            try:
                doc = link.round_info()
            except RemoteError as exc:  # 409: no round yet
                assert exc.status == 409, exc
                doc = None
            if doc and doc["round_id"] == round_id and doc["state"] != "open":
                break
            assert time.monotonic() < deadline, doc
            time.sleep(0.25)
    doc = admin("status", "--deployment", str(root))["server"]
    assert doc["round_id"] == round_id and doc["state"] != "open", doc
    return doc


def test_serve_and_three_silos_run_the_set_up_and_a_round_by_hand(tmp_path: Path) -> None:
    root = tmp_path / "dep"
    init_one_server(root, "--protocol", "secea", "--dataset", "synthetic", "--users-per-round", "3",
                    "--option", "secea_key_bits=1024", "--option", "secea_items=6", "--stage-deadline", "150")
    server = serve(root)
    clients: list[subprocess.Popen] = []
    try:
        clients = start_clients(root, "--rounds", "2", "--wait", "90")
        setup = admin("open-round", "--deployment", str(root), "--participants", "0-2")
        assert setup["setup"] and setup["stages"][0] == "secea-keys" and setup["users"] == [0, 1, 2]
        assert _wait_state(root, setup["round_id"])["state"] == "committed"
        rnd = admin("open-round", "--deployment", str(root), "--participants", "0-2")
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
        assert admin("status", "--deployment", str(root))["server"]["state"] == "committed"
        state = root / "devices" / "device-2.state"
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        clients = start_clients(root, "--rounds", "1", "--wait", "90")  # every silo's process started again
        again = admin("open-round", "--deployment", str(root), "--participants", "0-2")
        assert not again["setup"] and again["round_id"] == rnd["round_id"] + 1
        for u, proc in enumerate(clients):
            out, err = proc.communicate(timeout=400)
            assert proc.returncode == 0, (out, err)
            last = json.loads(out.decode().strip().splitlines()[-1])
            assert last["user"] == u and last["round_id"] == again["round_id"] and last["outcome"] == "committed"
        _refused_state(root, tmp_path)
    finally:
        kill(clients)
        stop(server)


def _refused_state(root: Path, tmp_path: Path) -> None:
    """``secemb client`` with silo 0's state file beside silo 1's credentials, then with its own
    file altered: exit 2, one JSON line naming the refusal, the file unchanged (in process: the
    refusal comes before any connection; the silos above are the real processes)."""
    swap = tmp_path / "swap"
    swap.mkdir()
    shutil.copy(root / "devices" / "device-1.json", swap / "device-1.json")
    shutil.copy(root / "devices" / "device-0.state", swap / "device-1.state")
    own = root / "devices" / "device-1.state"
    data = bytearray(own.read_bytes())
    data[len(data) // 2] ^= 1
    own.write_bytes(bytes(data))
    for creds, state, reason in ((swap / "device-1.json", swap / "device-1.state", "device differs"),
                                 (root / "devices" / "device-1.json", own, "authentication tag")):
        before = state.read_bytes()
        res = CliRunner().invoke(app, ["client", "--user", "1", "--credentials", str(creds), "--rounds", "1",
                                       "--wait", "5"])
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit), (res.output, res.exception)
        assert reason in json.loads(res.stdout.strip())["error"] and "Traceback" not in res.stderr
        assert state.read_bytes() == before
