"""Crash-safe state on disk: atomic checkpoints and an append-only round journal.

Checkpoint (``checkpoint.npz``)
    The whole durable state of a server -- model version, public model, optimizer moments,
    m' -- as an uncompressed ``.npz`` (numpy arrays only, loaded with ``allow_pickle=False``)
    with a JSON metadata member ``__meta__`` (its UTF-8 bytes as ``uint8``; both packed by
    :mod:`secemb.packing`).  Written by :func:`atomic_write`: a temporary file in the same
    directory, ``fsync``, ``rename`` over the old file, ``fsync`` of the directory.  A crash at
    any instant leaves either the old or the new checkpoint, never a mixture; writing it is the
    *commit point* of a round.

Journal (``journal.jsonl``)
    One framed record per line, ``<crc32 as 8 hex digits> <JSON object>\\n``, appended with
    ``O_APPEND`` and ``fsync``-ed before the server acts on it (a round is announced only after
    its ``open`` record is durable).  The CRC-32 covers the JSON bytes.  A crash or a full disk
    can tear at most the last record: an append that fails truncates the file back to its last
    complete record before raising :class:`StorageError`, and on start a torn tail (no newline,
    or a frame or checksum that does not match) is cut off with ``ftruncate`` + ``fsync``.  A
    bad record *before* the last one is corruption and raises :class:`CorruptState`.  The
    journal keeps round ids monotonic across restarts and records each round's outcome; the
    checkpoint stays the authority on the model.

Write failures (disk full, read-only file system, I/O error) raise :class:`StorageError` with
nothing changed: a failed checkpoint write removes its temporary file, a failed append leaves
the journal as it was.  Stale temporary files of a process that died while writing are removed
by :func:`remove_stale_temporaries` when a store opens.

One server a state directory (session 25)
    ``secemb serve`` holds the state directory for its life (:func:`hold_state_dir`: an
    exclusive, non-blocking ``flock`` on the lock file ``server.lock`` in it, empty, 0600, the
    server user's): a second server started on it is refused (:class:`StateInUse`) before it
    reads or writes anything else there, instead of interleaving its journal records with the
    first's.  The kernel releases the lock when the process ends, however it ends (``kill -9``
    included), so a lock never outlives its server.  The lock is a private file, not the
    directory, so that another local user who can open the directory (0755) cannot take it
    first (session 25 red team, F4).  The directory itself must be the server user's alone:
    one owned by another uid, or that its group or others can write in (0775, 0777, 1777), is
    refused (:class:`StorageError`, nothing written), since whoever writes there could rename the
    lock file away under the server or swap its checkpoint, journal or binding between restarts
    (second red team, K2); 0700 (what the hold makes) and 0755 are held.

    The hold keeps the directory's descriptor (``O_DIRECTORY``), and every write of this module
    in a held directory goes through it (``dir_fd=``): :meth:`Journal.append` and a journal's
    open, :func:`atomic_write` (checkpoints, the binding: temporary file, rename and the
    directory's ``fsync``), :func:`remove` (the staged checkpoint) and
    :func:`remove_stale_temporaries`.  So a write lands in the directory held, never in one put
    at its name, even right after the check below (K3).  Before each, the name is checked too:
    a state directory moved aside, removed or replaced (or a symlink to it retargeted) while its
    server runs is no longer written by it (F2): the write is refused (:class:`StorageError`,
    nothing written: a 503 to the request) while the name no longer gives the held directory
    (its :data:`LOCK` is not the held lock file), so that the operator learns of it.  A journal
    also appends only to the file it opened (the same ``st_dev``/``st_ino``, checked on the open
    descriptor, held or not).  What a hold does not cover: reads (the checkpoints and the
    binding are read by name, at the start, right after the hold), and two holds of one name in
    one process (tests only), which the name check cannot tell apart.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from secemb.errors import SecembError
from secemb.outputs import TEMP_MARK, atomic_write_bytes, write_all
from secemb.packing import MalformedPack, arrays_bytes, arrays_from_bytes, meta_bytes, meta_from_bytes

__all__ = [
    "LOCK", "CorruptState", "Journal", "StateInUse", "StorageError", "atomic_write", "hold_state_dir",
    "load_checkpoint", "remove", "remove_stale_temporaries", "save_checkpoint",
]

_META = "__meta__"
#: the lock file :func:`hold_state_dir` holds in a state directory (empty, 0600)
LOCK = "server.lock"
#: what ``flock`` answers on a file system that cannot lock a file (e.g. some network file
#: systems): :func:`hold_state_dir` warns and goes on unlocked
_NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.EBADF, errno.EINVAL})

log = logging.getLogger(__name__)


class CorruptState(SecembError):
    """A state file exists but cannot be read back."""


class StorageError(SecembError):
    """The disk refused a write (full, read-only, I/O error); the state on disk is unchanged.

    A server answers it with 503: the request may be retried once the operator freed space."""


class StateInUse(SecembError):
    """Another live process holds the state directory (:func:`hold_state_dir`)."""


def _storage_error(what: str, path: Path, exc: OSError) -> StorageError:
    reason = errno.errorcode.get(exc.errno or 0, "EIO") if exc.errno else type(exc).__name__
    return StorageError(f"could not write {what} {path.name}: {reason} ({exc.strerror or exc})")


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably, mode 0600
    (:func:`secemb.outputs.atomic_write_bytes`: write temp, fsync, rename, fsync the directory).
    In a state directory this process holds, through the held directory's descriptor: the file
    lands in the held directory only, whatever its name gives by the time of the write.

    Raises
    ------
    StorageError
        The disk refused the write (what is left on disk: ``atomic_write_bytes``'s ``OSError``),
        or ``path``'s folder is a state directory this process holds whose name no longer gives
        it (nothing written; the module docstring).
    """
    dir_fd = _check_held(Path(path).parent)
    try:
        atomic_write_bytes(path, data, mode=0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise _storage_error("file", Path(path), exc) from None


def remove_stale_temporaries(directory: str | os.PathLike) -> list[str]:
    """Delete the temporary files :func:`atomic_write` left in ``directory`` when its process
    died mid-write (``.NAME.tmp.`` + a suffix, :data:`secemb.outputs.TEMP_MARK`); return their
    names.  Call only while no other process writes there (a server owns its state directory).
    In a state directory this process holds, listed and removed through the held directory's
    descriptor.

    Raises
    ------
    StorageError
        ``directory`` is a state directory this process holds whose name no longer gives it
        (nothing removed).
    OSError
        The directory cannot be listed, or a temporary file cannot be removed.
    """
    dir_fd = _check_held(Path(directory))
    removed = []
    with os.scandir(os.fspath(directory)) if dir_fd is None else os.scandir(dir_fd) as entries:
        for entry in entries:
            if entry.name.startswith(".") and TEMP_MARK in entry.name and entry.is_file():
                try:
                    os.unlink(_in(directory, entry.name, dir_fd), dir_fd=dir_fd)
                except FileNotFoundError:
                    continue
                removed.append(entry.name)
    return sorted(removed)


def remove(path: str | os.PathLike) -> None:
    """Delete the file ``path`` if it is there (a server's staged checkpoint); in a state
    directory this process holds, through the held directory's descriptor.  Not durable (no
    ``fsync`` of the directory): for a file whose return after a crash is harmless.

    Raises
    ------
    StorageError
        The disk refused (``EACCES``, ``EROFS``, ...), or ``path``'s folder is a state directory
        this process holds whose name no longer gives it (nothing removed; the module docstring).
    """
    path = Path(path)
    dir_fd = _check_held(path.parent)
    try:
        os.unlink(_in(path.parent, path.name, dir_fd), dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _storage_error("file", path, exc) from None


def _in(directory: str | os.PathLike, name: str, dir_fd: int | None) -> str:
    """How to name the file ``name`` of ``directory`` for a call given ``dir_fd``: the bare name
    relative to the held directory's descriptor, or the path when there is none."""
    return name if dir_fd is not None else os.path.join(directory, name)


def save_checkpoint(path: str | os.PathLike, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Atomically write ``meta`` (JSON-able) and ``arrays`` to ``path`` (the module docstring's
    layout).

    Raises
    ------
    ValueError
        An array is named ``__meta__`` (or as :func:`secemb.packing.arrays_bytes` refuses), or
        ``meta`` holds a non-finite number.
    StorageError
        The disk refused the write (the old checkpoint is intact).
    """
    if _META in arrays:
        raise ValueError(f"array name {_META!r} is reserved")
    meta_arr = np.frombuffer(meta_bytes(meta), dtype=np.uint8)
    atomic_write(path, arrays_bytes({_META: meta_arr, **arrays}))


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """``(meta, arrays)`` of the checkpoint at ``path``, or ``None`` if there is none.

    Raises
    ------
    CorruptState
        The file exists but is not a readable checkpoint.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        arrays = arrays_from_bytes(data)
        if _META not in arrays:
            raise MalformedPack(f"no {_META} member")
        meta = meta_from_bytes(arrays.pop(_META).tobytes())
    except MalformedPack as exc:
        raise CorruptState(f"checkpoint {path} is unreadable: {exc}") from None
    return meta, arrays


def _frame(record: dict[str, Any]) -> bytes:
    """``<crc32 hex> <json>\\n`` of ``record``."""
    body = json.dumps(record, sort_keys=True, allow_nan=False).encode()
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def _unframe(line: bytes) -> dict[str, Any] | None:
    """The record of one line without its newline, or ``None`` if the frame, checksum or JSON
    object is wrong."""
    head, sep, body = line.partition(b" ")
    if not sep or len(head) != 8 or not all(c in b"0123456789abcdef" for c in head):
        return None
    if int(head, 16) != zlib.crc32(body):
        return None
    try:
        rec = json.loads(body)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


class Journal:
    """Append-only log of framed, checksummed records, each ``fsync``-ed (thread-safe).

    It appends to the file it opened only: a journal whose name gives another file (its state
    directory moved aside or replaced, a symlink to it retargeted) is not written; nor is one in
    a held state directory whose name no longer gives it (:func:`hold_state_dir`).  In a held
    state directory it is opened (at the open and at each append) through the held directory's
    descriptor.

    Raises
    ------
    CorruptState
        At open: a record other than the last is damaged (the file is left as it is).
    StorageError
        At open (making the file, cutting a torn tail) or :meth:`append`: the disk refused the
        write, or its folder is a state directory this process holds whose name no longer gives
        it, or (at :meth:`append`) the name gives another file than the one opened.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        dir_fd = _check_held(self.path.parent)
        try:
            fd = os.open(_in(self.path.parent, self.path.name, dir_fd), os.O_RDWR | os.O_CREAT, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            raise _storage_error("journal", self.path, exc) from None
        try:
            st = os.fstat(fd)
            #: the file this journal appends to (``st_dev``, ``st_ino``)
            self._file = (st.st_dev, st.st_ino)
            with open(fd, "rb", closefd=False) as fh:
                self._records, self._size = self._parse(fh.read())
            if st.st_size != self._size:  # a torn tail: cut it off durably
                os.ftruncate(fd, self._size)
                os.fsync(fd)
        except OSError as exc:
            raise _storage_error("journal", self.path, exc) from None
        finally:
            os.close(fd)

    def _parse(self, data: bytes) -> tuple[list[dict[str, Any]], int]:
        """The complete records of the file's bytes ``data`` and the byte length they occupy."""
        records: list[dict[str, Any]] = []
        pos = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            rec = None if end < 0 else _unframe(data[pos:end])
            if rec is None:
                if end < 0 or end == len(data) - 1:  # the last record, torn by a crash or a full disk
                    break
                raise CorruptState(f"journal {self.path}: record {len(records) + 1} (byte {pos}) is damaged")
            records.append(rec)
            pos = end + 1
        return records, pos

    def records(self) -> list[dict[str, Any]]:
        """All complete records, oldest first."""
        with self._lock:
            return list(self._records)

    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` durably (returns after ``fsync``).

        Raises
        ------
        StorageError
            The write or ``fsync`` failed; the journal was truncated back to its previous
            records (what :meth:`records` returns is unchanged).  Or ``path`` gives another
            file than the one this journal opened, or its folder is a state directory this process
            holds whose name no longer gives it: nothing written.
        """
        line = _frame(record)
        with self._lock:
            dir_fd = _check_held(self.path.parent)
            try:  # made at the open: no new file
                fd = os.open(_in(self.path.parent, self.path.name, dir_fd), os.O_WRONLY | os.O_APPEND, dir_fd=dir_fd)
            except OSError as exc:
                raise _storage_error("journal", self.path, exc) from None
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._file:  # checked before the ftruncate below touches it
                os.close(fd)
                raise StorageError(f"journal {self.path} is no longer the file this server opened: {_REPLACED}")
            try:
                if os.fstat(fd).st_size != self._size:  # an earlier failed append left bytes
                    os.ftruncate(fd, self._size)
                write_all(fd, line)
                os.fsync(fd)
            except OSError as exc:
                try:
                    os.ftruncate(fd, self._size)
                    os.fsync(fd)
                except OSError:  # the next append (or the next start) cuts it instead
                    pass
                raise _storage_error("journal", self.path, exc) from None
            finally:
                os.close(fd)
            self._size += len(line)
            self._records.append(record)


#: what a write refused in a state directory that its name no longer gives says (F2)
_REPLACED = ("the state directory was moved, removed or replaced (or a symlink to it changed) since this server "
             "started; nothing written. Stop this server: its state is in the directory it started with")


class _Held(NamedTuple):
    """A state directory this process holds (:func:`hold_state_dir`)."""

    #: the name it was held under (``os.path.abspath``: the writes name it so)
    name: str
    #: its lock file's (``st_dev``, ``st_ino``): the directory is the one whose :data:`LOCK` that
    #: file is (held open, so its inode is not reused, unlike a removed directory's)
    ident: tuple[int, int]
    #: the directory's descriptor (``O_DIRECTORY``, opened at the hold): the writes go through it,
    #: so that they land in the held directory only (session 25 red team, K3)
    dir_fd: int


#: the state directories this process holds, by their lock file's descriptor; a child forked while
#: one is held closes its copies at once (:func:`_forget_held_in_child`)
_HELD: dict[int, _Held] = {}
_HELD_LOCK = threading.Lock()


def _forget_held_in_child() -> None:
    """In a process just forked (e.g. a :class:`~concurrent.futures.ProcessPoolExecutor` worker of
    the server's backend): close the copies of the held lock files' descriptors, so that a
    worker outliving a killed server does not keep its state directory locked (an ``flock``
    lasts while any copy of the descriptor is open; the parent's lock is untouched), and of the
    held directories' descriptors."""
    for fd, held in _HELD.items():
        for each in (fd, held.dir_fd):
            try:
                os.close(each)
            except OSError:
                pass
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_held_in_child)


def _check_held(directory: Path) -> int | None:
    """Before a write in ``directory``: if this process holds a state directory under its name
    (:func:`hold_state_dir`), the name must still give one it holds (its :data:`LOCK` the held
    lock file); returns that directory's descriptor, which the write goes through (so that a
    replacement after this check cannot take it elsewhere: session 25 red team, K3).  A name no
    hold of this process holds (a store used without a hold: the simulation, tests) is not
    checked: ``None``, the write goes by name.

    Raises
    ------
    StorageError
        The name gives another directory or none (moved aside, removed, replaced, a symlink
        retargeted), or its lock file was removed.
    """
    name = os.path.abspath(directory)
    with _HELD_LOCK:
        holds = {h.ident: h.dir_fd for h in _HELD.values() if h.name == name}
    if not holds:
        return None
    try:
        st = os.stat(os.path.join(name, LOCK))
    except OSError:
        st = None
    if st is None or (st.st_dev, st.st_ino) not in holds:
        raise StorageError(f"state directory {directory}: {_REPLACED}")
    return holds[(st.st_dev, st.st_ino)]


def _holder(st: os.stat_result) -> int | None:
    """The pid of the process holding an ``flock`` on the file of ``st``, as Linux's
    ``/proc/locks`` lists it (``1: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF``);
    ``None`` where there is no such list or it names none."""
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if "FLOCK" in parts and "->" not in parts and want in parts:  # "->": a waiter, not the holder
            pid = parts[parts.index(want) - 1]
            if pid.isdigit():
                return int(pid)
    return None


@contextmanager
def hold_state_dir(directory: str | os.PathLike) -> Iterator[Path]:
    """Hold the state directory ``directory`` (created 0700 if missing; one that exists must be
    the server user's alone: owned by this process's effective uid, not writable by group or
    others) for this process while the block runs: an exclusive, non-blocking ``flock`` on its
    lock file :data:`LOCK` (made empty, 0600, ``O_NOFOLLOW``, if missing; the one thing the hold
    writes), released when the block ends -- or by the kernel when the process dies, ``kill -9``
    included.  Two holds of one directory exclude each other in one process too.  While held,
    the writes of this module in the directory check that its name still gives it, and go
    through the directory's descriptor, opened here (the module docstring).  On a file system
    that cannot lock a file (``flock`` answers one of :data:`_NO_FLOCK`) it logs a warning and
    locks nothing (the lock file is still checked, and the writes still are).  Yields the
    directory.

    Raises
    ------
    StateInUse
        Another process (or another hold in this one) holds it; the message names the holder's
        pid where the system lists it (Linux: ``/proc/locks``).
    StorageError
        The directory cannot be created or opened; it is another user's or group or others can
        write in it (they could replace the state or the lock file: session 25 red team, K2;
        the message names its owner and mode; nothing written); its lock file cannot be made or
        opened (a symlink there included), or the lock file is not a private file of this
        process's user (another user could hold it): nothing else read or written; or ``flock``
        failed otherwise.
    """
    path = Path(directory)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        dir_fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise _storage_error("state directory", path, exc) from None
    try:
        fd, st = _lock_file(path, dir_fd)
    except BaseException:
        os.close(dir_fd)
        raise
    with _HELD_LOCK:
        _HELD[fd] = _Held(os.path.abspath(path), (st.st_dev, st.st_ino), dir_fd)
    try:
        yield path
    finally:
        with _HELD_LOCK:
            del _HELD[fd]
        os.close(fd)
        os.close(dir_fd)


def _lock_file(path: Path, dir_fd: int) -> tuple[int, os.stat_result]:
    """:func:`hold_state_dir`'s checks and lock, in the directory ``path`` open as ``dir_fd``:
    the directory the server user's alone, then its lock file opened (made if missing), checked
    and ``flock``-ed; returns the lock file's descriptor and ``fstat``.  Raises as the hold does
    (the lock file's descriptor closed)."""
    st = os.fstat(dir_fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise StorageError(
            f"state directory {path} can be written by others than this server's user (owner uid {st.st_uid}, "
            f"mode {stat.S_IMODE(st.st_mode):04o}; wanted owner uid {os.geteuid()}, no write for group or others, "
            f"e.g. 0700): whoever can write in it can replace the server's state. Give it to the server's user "
            f"alone (chown {os.geteuid()} and chmod go-w, checking its files first) or use a new state directory")
    try:
        # O_NONBLOCK | O_NOCTTY: a FIFO or a terminal planted there is opened without waiting or
        # side effects, then refused below (not a regular file)
        fd = os.open(LOCK, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, 0o600,
                     dir_fd=dir_fd)
    except OSError as exc:
        raise _storage_error("lock file", path / LOCK, exc) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise StorageError(
            f"lock file {path / LOCK} is not a private file of this server's user ({kind}, owner uid {st.st_uid}, "
            f"mode {stat.S_IMODE(st.st_mode):04o}; wanted a regular file, uid {os.geteuid()}, 0600): another user may "
            "hold it. Remove it (the server makes it again) and let only the server's user write in the state "
            "directory")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # EWOULDBLOCK: held
        holder = _holder(st)
        os.close(fd)
        who = "another server" + ("" if holder is None else f" (pid {holder})")
        raise StateInUse(f"state directory {path} is in use by {who}: stop it first, or give this server "
                         "its own state directory") from None
    except OSError as exc:
        if exc.errno not in _NO_FLOCK:
            os.close(fd)
            raise _storage_error("state directory", path, exc) from None
        log.warning("state directory %s cannot be locked on its file system (%s): a second server started on "
                    "it would not be refused", path, exc.strerror or exc)
    return fd, st
