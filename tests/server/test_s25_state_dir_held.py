"""The state directory's hold and the writes (issue 34, session 25, helper J; red team F2 and F4 of
tests/review/test_session25_redteam.py).

F2: the hold locked the directory's inode while the state was written by name, so a state
directory moved aside, replaced or reached through a retargeted symlink while its server ran was
written by it -- the new directory another server may hold.  Now a :class:`Journal` appends only
to the file it opened, and the atomic writes (checkpoint, binding) and the removal of stale
temporaries in a held directory happen only while its name still gives it (its ``server.lock``
is the held lock file): otherwise ``StorageError`` (a 503 to the request), nothing written.

F4: the hold locked the directory itself, which any local user who can open it (0755) can lock
first.  Now it locks ``server.lock`` in it, made empty and 0600 without following a symlink, and
refuses one that is not a private regular file of the server's user.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from secemb.server.persist import (
    LOCK, Journal, StorageError, atomic_write, hold_state_dir, remove_stale_temporaries, save_checkpoint,
)

REPLACED = ("the state directory was moved, removed or replaced (or a symlink to it changed) since this server "
            "started; nothing written. Stop this server: its state is in the directory it started with")


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _replace(how: str, tmp_path: Path, path: Path) -> None:
    """Replace the directory ``path`` names, ``how``."""
    if how == "moved aside, made again":
        path.rename(tmp_path / "aside")
        path.mkdir()
    elif how == "symlink retargeted":
        path.unlink()
        path.symlink_to(tmp_path / "b")
    else:  # "its lock file removed": anyone could then lock the name's directory
        (path / LOCK).unlink()


@pytest.mark.parametrize("how", ["moved aside, made again", "symlink retargeted", "its lock file removed"])
def test_a_held_directory_its_name_no_longer_gives_is_not_written(how: str, tmp_path: Path) -> None:
    """A checkpoint, a binding (atomic writes), a journal append and the removal of stale
    temporaries, after the held directory's name was pointed elsewhere: each refused with the
    message the operator sees (the app's 503), nothing written or removed there; before the
    change, each went ahead (a fresh directory got the checkpoint)."""
    path = tmp_path / "state"
    if how == "symlink retargeted":
        for d in ("a", "b"):
            (tmp_path / d).mkdir(mode=0o700)
        path.symlink_to(tmp_path / "a")
    with hold_state_dir(path):
        journal = Journal(path / "journal.jsonl")
        journal.append({"event": "open", "round_id": 1})
        save_checkpoint(path / "checkpoint.npz", {"round": 1}, {})
        _replace(how, tmp_path, path)
        (path / ".checkpoint.npz.tmp.x").write_bytes(b"another server's")
        before = {p.name: p.read_bytes() for p in path.iterdir()}
        for write in (lambda: save_checkpoint(path / "checkpoint.npz", {"round": 2}, {}),
                      lambda: atomic_write(path / "binding.json", b"{}"),
                      lambda: journal.append({"event": "open", "round_id": 2}),
                      lambda: remove_stale_temporaries(path)):
            with pytest.raises(StorageError) as refused:
                write()
            assert str(refused.value).endswith(REPLACED), refused.value
        assert {p.name: p.read_bytes() for p in path.iterdir()} == before
        assert journal.records() == [{"event": "open", "round_id": 1}]
    with hold_state_dir(path):  # released: a new hold of the name writes there
        save_checkpoint(path / "checkpoint.npz", {"round": 2}, {})


def test_a_journal_appends_to_the_file_it_opened_only(tmp_path: Path) -> None:
    """Without a hold too: a journal whose file was replaced under it (another process's journal
    moved in) refuses to append and leaves that file as it is -- before, it cut it to the length
    it knew and wrote there; one whose file was removed refuses (``ENOENT``) and makes none."""
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append({"event": "open", "round_id": 1})
    other = Journal(tmp_path / "other.jsonl")
    other.append({"event": "open", "round_id": 5})
    other.append({"event": "open", "round_id": 6})
    os.replace(tmp_path / "other.jsonl", tmp_path / "journal.jsonl")
    kept = (tmp_path / "journal.jsonl").read_bytes()
    with pytest.raises(StorageError, match="is no longer the file this server opened"):
        journal.append({"event": "open", "round_id": 2})
    assert (tmp_path / "journal.jsonl").read_bytes() == kept
    (tmp_path / "journal.jsonl").unlink()
    with pytest.raises(StorageError, match="ENOENT"):
        journal.append({"event": "open", "round_id": 2})
    assert _names(tmp_path) == []


def test_the_directory_held_under_a_symlink_is_written_through_it_and_through_its_target(tmp_path: Path) -> None:
    """The check follows the name the writes use: a directory held under a symlink, written under
    the symlink (checked) and under its target (a name no hold of this process holds: not
    checked, and the same directory)."""
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with hold_state_dir(tmp_path / "link"):
        atomic_write(tmp_path / "link" / "binding.json", b"1")
        atomic_write(tmp_path / "real" / "checkpoint.npz", b"2")
    assert _names(tmp_path / "real") == ["binding.json", "checkpoint.npz", LOCK]


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    """``server.lock`` a symlink (planted by whoever could write in the directory): the hold does
    not follow it (``O_NOFOLLOW``: ``ELOOP``), so it neither makes nor locks its target."""
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    (path / LOCK).symlink_to(tmp_path / "target")
    with pytest.raises(StorageError, match=f"could not write lock file {LOCK}: ELOOP"):
        with hold_state_dir(path):
            pytest.fail("held through a symlinked lock file")
    assert _names(tmp_path) == ["state"]


@pytest.mark.parametrize("owner, mode, fifo", [(None, 0o644, False), (65534, 0o600, False), (None, 0o600, True)])
def test_a_lock_file_others_could_open_is_refused_naming_owner_and_mode(owner: int | None, mode: int, fifo: bool,
                                                                       tmp_path: Path) -> None:
    """A lock file another user owns (made in a directory others can write in; run as root to
    give it away) or that others can read: another process may have it open, and lock it
    whenever it likes; or a FIFO (opened without waiting for a writer).  Refused, the file left
    as it is."""
    if owner is not None and os.geteuid() != 0:
        pytest.skip("giving a file away needs root")
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    if fifo:
        os.mkfifo(path / LOCK)
    else:
        (path / LOCK).touch()
    os.chmod(path / LOCK, mode)
    if owner is not None:
        os.chown(path / LOCK, owner, owner)
    uid = os.geteuid() if owner is None else owner
    with pytest.raises(StorageError) as refused:
        with hold_state_dir(path):
            pytest.fail("held through a lock file others can open")
    kind = "not a regular file" if fifo else "a regular file"
    assert str(refused.value) == (
        f"lock file {path / LOCK} is not a private file of this server's user ({kind}, owner uid {uid}, mode "
        f"{mode:04o}; wanted a regular file, uid {os.geteuid()}, 0600): another user may hold it. Remove it (the "
        "server makes it again) and let only the server's user write in the state directory")
    st = (path / LOCK).lstat()
    assert (st.st_uid, st.st_mode & 0o777, stat.S_ISFIFO(st.st_mode)) == (uid, mode, fifo)
    (path / LOCK).unlink()
    with hold_state_dir(path):  # as the message says
        assert (path / LOCK).stat().st_mode & 0o777 == 0o600
