"""The state directory's hold, second pass (issue 34, session 25, helper M; red team K1-K3 of
tests/review/test_session25_redteam2.py).

K2: an existing state directory was held whatever its owner and mode; whoever can write in it can
rename ``server.lock`` away under the running server or swap its checkpoint, journal or binding
between restarts.  Now the hold refuses (``StorageError``, exit 2 at ``secemb serve``'s start,
nothing written) a directory not owned by the server's effective uid or writable by its group or
others; 0700 and 0755 are held.

K3: a write checked the held name, then wrote by name.  Now every write in a held directory goes
through the descriptor the hold opened (``dir_fd=``): it lands in the held directory even if the
name was pointed elsewhere right after the check.

K1: ``DiskStore.drop_staged`` removed ``staged.npz`` by name, unchecked.  Now it is checked and
goes through the held descriptor; a refusal is logged, the file left (best effort, as before).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import ENV, SECEMB  # type: ignore[import-not-found]  # noqa: E402
from _server_template import run  # type: ignore[import-not-found]  # noqa: E402

from secemb.server import persist  # noqa: E402
from secemb.server.config import ServerConfig, config_document  # noqa: E402
from secemb.server.persist import (  # noqa: E402
    LOCK, Journal, StorageError, atomic_write, hold_state_dir, remove, remove_stale_temporaries,
)
from secemb.server.store import STAGED, Checkpoint, DiskStore  # noqa: E402

FP = "f" * 64


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _refusal(path: Path, uid: int, mode: int) -> str:
    return (f"state directory {path} can be written by others than this server's user (owner uid {uid}, mode "
            f"{mode:04o}; wanted owner uid {os.geteuid()}, no write for group or others, e.g. 0700): whoever can "
            f"write in it can replace the server's state. Give it to the server's user alone (chown {os.geteuid()} "
            "and chmod go-w, checking its files first) or use a new state directory")


@pytest.mark.parametrize("mode", [0o770, 0o775, 0o707, 0o757, 0o777, 0o1777])
def test_a_state_directory_its_group_or_others_can_write_in_is_refused_and_nothing_written(
        mode: int, tmp_path: Path) -> None:
    """Group- or other-writable (umask 002's 0775, a shared group folder, a sticky 1777 like
    ``/tmp``): refused before the lock file is made, the message naming owner and mode; no
    descriptor left open; ``chmod go-w`` (as the message says) and it is held."""
    path = tmp_path / "state"
    path.mkdir()
    os.chmod(path, mode)
    (path / "journal.jsonl").write_bytes(b"kept")
    fds = _open_fds()
    with pytest.raises(StorageError) as refused:
        with hold_state_dir(path):
            pytest.fail("held a directory others can write in")
    assert str(refused.value) == _refusal(path, os.geteuid(), mode)
    assert _names(path) == ["journal.jsonl"] and (path / "journal.jsonl").read_bytes() == b"kept"
    assert _open_fds() == fds
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) & ~0o022)
    with hold_state_dir(path):
        assert _names(path) == ["journal.jsonl", LOCK]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_a_state_directory_of_another_user_is_refused_even_0700(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    os.chown(path, 65534, 65534)
    with pytest.raises(StorageError) as refused:
        with hold_state_dir(path):
            pytest.fail("held another user's directory")
    assert str(refused.value) == _refusal(path, 65534, 0o700)
    assert _names(path) == []


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o750, 0o500])
def test_a_state_directory_of_the_servers_user_only_it_writes_in_is_held(mode: int, tmp_path: Path) -> None:
    """0700 (what the hold makes), 0755 (a two-server ``state_dir`` made under umask 022), 0750:
    held, and released with every descriptor the hold opened closed.  0500 (the user cannot
    write either): not refused for its mode, but the lock file cannot be made (``EACCES``)."""
    path = tmp_path / "state"
    path.mkdir()
    os.chmod(path, mode)
    fds = _open_fds()
    if mode & 0o200 or os.geteuid() == 0:  # root writes in a 0500 directory
        with hold_state_dir(path):
            assert len(_open_fds() - fds) == 2  # the lock file and the directory
        assert _open_fds() == fds
    else:
        with pytest.raises(StorageError, match=f"could not write lock file {LOCK}: EACCES"):
            with hold_state_dir(path):
                pytest.fail("held without a lock file")
        assert _open_fds() == fds


def test_secemb_serve_exits_2_on_a_group_writable_state_directory(tmp_path: Path) -> None:
    """A two-server server whose ``state_dir`` exists 0775 (made under umask 002): exit 2, one
    ``error:`` line naming owner and mode, no traceback, nothing written in it."""
    state = tmp_path / "state0"
    state.mkdir()
    os.chmod(state, 0o775)
    cfg = ServerConfig(party=0, state_dir=state, peer_url="http://127.0.0.1:1", peer_secret="11" * 32,
                       admin_secret="22" * 32, user_secret="33" * 32, num_items=50, num_users=20, insecure_http=True,
                       port=0)
    config = tmp_path / "server0.json"
    config.write_text(json.dumps(config_document(cfg)))
    res = run([*SECEMB, "serve", "--config", str(config)], timeout=120, env=ENV)  # forked where it can be
    assert res.returncode == 2, res
    stderr = res.stderr.decode()
    assert [line for line in stderr.splitlines() if line.startswith("error: ")] == [
        f"error: {_refusal(state, os.geteuid(), 0o775)}"], res
    assert "Traceback" not in stderr and _names(state) == []


def _swap_after_the_check(monkeypatch: pytest.MonkeyPatch, path: Path, aside: Path) -> None:
    """Move the held directory ``path`` aside and make a new one at its name right after the
    next held-name check passes (what a process that can write in the parent can win)."""
    real = persist._check_held

    def check_then_swap(directory: Path) -> int | None:
        held = real(directory)
        if not aside.exists():
            path.rename(aside)
            path.mkdir(mode=0o700)
        return held

    monkeypatch.setattr(persist, "_check_held", check_then_swap)


@pytest.mark.parametrize("write", ["checkpoint", "binding", "journal open", "journal append", "stale temporaries",
                                   "remove"])
def test_each_write_lands_in_the_held_directory_when_the_name_moves_right_after_its_check(
        write: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The name pointed at a new directory between the check and the write: the write happens
    in the held directory (moved aside), the new directory stays empty.  Before, each of these
    went by name (the journal's append then refused, ENOENT: its file is not in the new one)."""
    path, aside = tmp_path / "state", tmp_path / "aside"
    with hold_state_dir(path):
        journal = Journal(path / "journal.jsonl")
        (path / ".checkpoint.npz.tmp.left").write_bytes(b"a dead writer's")
        (path / "staged.npz").write_bytes(b"stale")
        actions: dict[str, Callable[[], object]] = {
            "checkpoint": lambda: atomic_write(path / "checkpoint.npz", b"ck"),
            "binding": lambda: atomic_write(path / "binding.json", b"{}"),
            "journal open": lambda: Journal(path / "other.jsonl"),
            "journal append": lambda: journal.append({"event": "open", "round_id": 1}),
            "stale temporaries": lambda: remove_stale_temporaries(path),
            "remove": lambda: remove(path / "staged.npz"),
        }
        before = set(_names(path))
        _swap_after_the_check(monkeypatch, path, aside)
        actions[write]()
        assert aside.exists() and _names(path) == []
        after = set(_names(aside))
    want = {"checkpoint": before | {"checkpoint.npz"}, "binding": before | {"binding.json"},
            "journal open": before | {"other.jsonl"}, "journal append": before,
            "stale temporaries": before - {".checkpoint.npz.tmp.left"}, "remove": before - {"staged.npz"}}[write]
    assert after == want
    if write == "checkpoint":
        assert (aside / "checkpoint.npz").read_bytes() == b"ck"
        assert stat.S_IMODE((aside / "checkpoint.npz").stat().st_mode) == 0o600
    if write == "journal append":
        assert Journal(aside / "journal.jsonl").records() == [{"event": "open", "round_id": 1}]


def _checkpoint(version: int) -> Checkpoint:
    return Checkpoint(version, version, [], None, None, np.zeros((2, 2)), np.zeros(2), "0" * 64)


def test_drop_staged_in_a_moved_state_directory_removes_nothing_and_logs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Server 1's state directory moved aside and a directory with a ``staged.npz`` at its name:
    ``drop_staged`` removes neither file and logs the refusal (it raises nothing: the follower
    drops a staged model as best effort); moved back, it removes its own.  Before (K1) it
    removed the new directory's file."""
    path, aside = tmp_path / "state", tmp_path / "aside"
    with hold_state_dir(path):
        store = DiskStore(path, 1, FP)
        store.save(_checkpoint(1), staged=True)
        path.rename(aside)
        path.mkdir(mode=0o700)
        (path / STAGED).write_bytes(b"another server's")
        with caplog.at_level(logging.ERROR, logger="secemb.server.store"):
            store.drop_staged()
        assert (path / STAGED).read_bytes() == b"another server's" and (aside / STAGED).exists()
        assert any("the staged checkpoint was not removed" in r.getMessage() and "since this server started"
                   in r.getMessage() for r in caplog.records), caplog.records
        (path / STAGED).unlink()
        path.rmdir()
        aside.rename(path)
        store.drop_staged()
        assert not (path / STAGED).exists()


def test_a_worker_forked_while_held_closes_the_held_directorys_descriptor(tmp_path: Path) -> None:
    """The held directory's descriptor is closed in a forked child, as the lock file's is."""
    with hold_state_dir(tmp_path):
        (dir_fd,) = {h.dir_fd for h in persist._HELD.values()}
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report whether the descriptor is still open
            try:
                os.fstat(dir_fd)
                os.write(write, b"open")
            except OSError:
                os.write(write, b"closed")
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        assert os.read(read, 16) == b"closed"
        os.close(read)


def test_writes_without_a_hold_go_by_name(tmp_path: Path) -> None:
    """A store used without a hold (the simulation, tests): the writes go by name as before, the
    folder made if missing."""
    atomic_write(tmp_path / "new" / "checkpoint.npz", b"x")
    remove(tmp_path / "new" / "missing")
    assert _names(tmp_path / "new") == ["checkpoint.npz"]
