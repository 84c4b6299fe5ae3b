"""One server a state directory (issue 34, session 25, helper A).

Before, nothing stopped two ``secemb serve`` processes started on one state directory at once --
two starts of one deployment (a second ``--port``), or two two-server configurations naming one
``state_dir`` -- and their journal records interleaved in one ``journal.jsonl`` (round ids used
twice, one server's strikes counted by the other; the binding only tells configurations apart).
Now ``secemb serve`` holds its state directory while it runs
(:func:`secemb.server.persist.hold_state_dir`: an exclusive, non-blocking ``flock`` on the lock
file ``server.lock`` in it -- the directory itself until helper J's change (red team F4) -- empty,
0600, the one thing the hold writes): the second server exits 2 with one line naming the holder's
pid, before it reads or writes anything else there, and the first goes on.  The kernel
releases the lock when its process ends, ``kill -9`` included, so a restart is never blocked by
a dead server; a process the server forked (its backend's worker pool) does not keep it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import ENV, SECEMB, admin, init_one_server, serve, stop  # type: ignore[import-not-found]  # noqa: E402
from _server_template import run  # type: ignore[import-not-found]  # noqa: E402

from secemb.server.config import ServerConfig, config_document  # noqa: E402
from secemb.server.persist import LOCK, StateInUse, StorageError, hold_state_dir  # noqa: E402

#: Linux lists the holder of an flock in /proc/locks: the message names its pid
LISTS_HOLDERS = Path("/proc/locks").exists()


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def _in_use(pid: int) -> str:
    return "is in use by another server" + (f" (pid {pid})" if LISTS_HOLDERS else "")


def test_a_held_directory_refuses_a_second_hold_naming_the_holder_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "journal.jsonl").write_bytes(b"x")
    with hold_state_dir(tmp_path) as held:
        assert held == tmp_path
        with pytest.raises(StateInUse) as refused:
            with hold_state_dir(tmp_path):
                pytest.fail("a second hold of a held directory")
        assert str(refused.value) == (f"state directory {tmp_path} {_in_use(os.getpid())}: stop it first, or give "
                                      "this server its own state directory")
    assert _files(tmp_path) == {"journal.jsonl": b"x", LOCK: b""}  # the hold's empty lock file, nothing else
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.jsonl", LOCK]
    with hold_state_dir(tmp_path):  # released at the end of the block
        pass


def test_a_missing_directory_is_created_0700(tmp_path: Path) -> None:
    with hold_state_dir(tmp_path / "a" / "state") as held:
        assert held.is_dir() and held.stat().st_mode & 0o777 == 0o700


def _flock_fails(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    def flock(fd: int, operation: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", flock)


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_file_system_that_cannot_lock_a_directory_is_served_unlocked_with_a_warning(
        code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _flock_fails(monkeypatch, code)
    with caplog.at_level(logging.WARNING, logger="secemb.server.persist"):
        with hold_state_dir(tmp_path):
            pass
    assert [r.getMessage() for r in caplog.records] == [
        f"state directory {tmp_path} cannot be locked on its file system ({os.strerror(code)}): a second server "
        "started on it would not be refused"]


def test_another_failure_to_lock_refuses_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _flock_fails(monkeypatch, errno.EIO)
    with pytest.raises(StorageError, match=f"could not write state directory {tmp_path.name}: EIO"):
        with hold_state_dir(tmp_path):
            pytest.fail("held after an I/O error")


def test_the_lock_of_a_process_killed_with_sigkill_is_released(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom secemb.server.persist import hold_state_dir\n"
        f"with hold_state_dir({str(tmp_path)!r}):\n    print('held', flush=True)\n    time.sleep(120)\n")],
        stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(StateInUse, match=_in_use(holder.pid).replace("(", r"\(").replace(")", r"\)")):
            with hold_state_dir(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert holder.returncode == -signal.SIGKILL
    with hold_state_dir(tmp_path):  # the kernel released it
        pass


def test_a_worker_forked_while_the_directory_is_held_does_not_keep_it(tmp_path: Path) -> None:
    """The server's backend forks its worker pool lazily, while it holds the state directory: the
    workers close their copy of the lock's descriptor at once, so they cannot keep the directory
    locked after the server is gone (an flock lasts while any copy is open)."""
    pool = ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork"))
    try:
        with hold_state_dir(tmp_path):
            worker = pool.submit(os.getpid).result(timeout=60)  # a worker forked now
        assert worker != os.getpid()
        with hold_state_dir(tmp_path):  # the live worker holds nothing
            assert pool.submit(os.getpid).result(timeout=60) == worker
    finally:
        pool.shutdown()


def test_secemb_serve_refuses_a_state_directory_another_server_holds_two_servers(tmp_path: Path) -> None:
    """A two-server server (``--party 0``) whose ``state_dir`` a process holds (here the test):
    exit 2, one error line naming the holder (after the lines it prints as it starts: its address,
    its payload bounds), nothing written (the lock file is the test's hold's)."""
    state = tmp_path / "state0"
    cfg = ServerConfig(party=0, state_dir=state, peer_url="http://127.0.0.1:1", peer_secret="11" * 32,
                       admin_secret="22" * 32, user_secret="33" * 32, num_items=50, num_users=20, insecure_http=True,
                       port=0)
    config = tmp_path / "server0.json"
    config.write_text(json.dumps(config_document(cfg)))
    state.mkdir()
    with hold_state_dir(state):
        res = run([*SECEMB, "serve", "--config", str(config)], timeout=120, env=ENV)  # forked where it can be
    assert res.returncode == 2, res
    stderr = res.stderr.decode()
    assert [line for line in stderr.splitlines() if line.startswith("error: ")] == [  # after its start-up lines
        f"error: state directory {state} {_in_use(os.getpid())}: stop it first, or give this server its own state "
        "directory"], res
    assert "Traceback" not in stderr and _files(state) == {LOCK: b""}  # the test's hold's lock file only


def test_two_one_server_servers_on_one_directory_the_second_refused_and_restarts_after_a_stop_and_a_kill(
        tmp_path: Path) -> None:
    """``secemb serve`` of one deployment started twice (the second on another port): the second
    exits 2 with one line naming the first's pid and writes nothing; the first goes on serving.
    Stopped (Ctrl-C) or killed (SIGKILL), the next start takes the directory."""
    root = tmp_path / "dep"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                    "--option", "sfsl_preset=CPP1", "--option", "batch=8")
    state = root / "state"
    servers: list[subprocess.Popen] = []
    try:
        servers.append(serve(root))
        before = _files(state)
        second = run([*SECEMB, "serve", "--config", str(root / "exchange.json"), "--port", "0"], timeout=120,
                     env=ENV)  # forked from the suite's warm template where it can be
        assert second.returncode == 2, second
        assert second.stderr.decode().splitlines() == [
            f"error: state directory {state} {_in_use(servers[0].pid)}: stop it first, or give this server its "
            "own state directory"], second
        assert _files(state) == before
        assert servers[0].poll() is None
        admin("status", "--deployment", str(root))  # the first answers (exit 0)
        stop(servers[0])  # Ctrl-C: uvicorn's shutdown, then the process ends
        servers.append(serve(root))  # the stop released it
        servers[1].send_signal(signal.SIGKILL)
        servers[1].wait(timeout=30)
        servers.append(serve(root))  # so did the kernel, at the kill
    finally:
        for server in servers:
            stop(server)
