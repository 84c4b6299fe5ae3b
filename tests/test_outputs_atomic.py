"""The one atomic file write (secemb.outputs.atomic_write_bytes): permission bits, durability
(the file and its folder are fsync-ed), the temporary's name that a store removes after a crash,
and the server's wrapper that maps the disk's refusal to StorageError."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from secemb import outputs
from secemb.outputs import TEMP_MARK, atomic_write_bytes
from secemb.server.persist import StorageError, atomic_write, remove_stale_temporaries


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_mode_is_exact_when_given_and_follows_the_umask_otherwise(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        assert _mode(atomic_write_bytes(tmp_path / "secret.npz", b"s", mode=0o600)) == 0o600
        assert _mode(atomic_write_bytes(tmp_path / "result.json", b"r")) == 0o644
        (tmp_path / "replaced").write_bytes(b"old")
        os.chmod(tmp_path / "replaced", 0o644)
        assert _mode(atomic_write_bytes(tmp_path / "replaced", b"new", mode=0o600)) == 0o600
    finally:
        os.umask(old)
    assert (tmp_path / "replaced").read_bytes() == b"new"


def test_the_file_and_then_its_folder_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "a" / "b.bin", b"x" * 10)  # a missing folder is created
    assert synced == ["file", "dir"]
    assert (tmp_path / "a" / "b.bin").read_bytes() == b"x" * 10


def test_a_short_write_is_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data)[:3]))
    atomic_write_bytes(tmp_path / "f", b"0123456789")
    assert (tmp_path / "f").read_bytes() == b"0123456789"


def test_a_full_disk_keeps_the_file_leaves_no_temporary_and_the_server_sees_storage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint.npz"
    path.write_bytes(b"earlier")

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs.os, "write", full)
    with pytest.raises(OSError, match="No space"):
        atomic_write_bytes(path, b"new")
    with pytest.raises(StorageError, match="could not write file checkpoint.npz: ENOSPC"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"earlier" and [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]


def test_a_killed_writers_temporary_is_what_the_store_removes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def killed(src: str, dst: str) -> None:  # the process dies between the write and the rename
        raise SystemExit(9)

    monkeypatch.setattr(os, "unlink", lambda p: None)  # ... so its cleanup never runs
    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(SystemExit):
        atomic_write_bytes(tmp_path / "checkpoint.npz", b"half")
    monkeypatch.undo()
    (left,) = [p.name for p in tmp_path.iterdir()]
    assert left.startswith(".checkpoint.npz" + TEMP_MARK)
    (tmp_path / "notes.txt").write_text("the operator's")
    assert remove_stale_temporaries(tmp_path) == [left]
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
