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
"""

from __future__ import annotations

import errno
import json
import os
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from secemb.errors import SecembError
from secemb.outputs import TEMP_MARK, atomic_write_bytes, write_all
from secemb.packing import MalformedPack, arrays_bytes, arrays_from_bytes, meta_bytes, meta_from_bytes

__all__ = [
    "CorruptState", "Journal", "StorageError", "atomic_write", "load_checkpoint", "remove_stale_temporaries",
    "save_checkpoint",
]

_META = "__meta__"


class CorruptState(SecembError):
    """A state file exists but cannot be read back."""


class StorageError(SecembError):
    """The disk refused a write (full, read-only, I/O error); the state on disk is unchanged.

    A server answers it with 503: the request may be retried once the operator freed space."""


def _storage_error(what: str, path: Path, exc: OSError) -> StorageError:
    reason = errno.errorcode.get(exc.errno or 0, "EIO") if exc.errno else type(exc).__name__
    return StorageError(f"could not write {what} {path.name}: {reason} ({exc.strerror or exc})")


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably, mode 0600
    (:func:`secemb.outputs.atomic_write_bytes`: write temp, fsync, rename, fsync the directory).

    Raises
    ------
    StorageError
        The disk refused the write (what is left on disk: ``atomic_write_bytes``'s ``OSError``).
    """
    try:
        atomic_write_bytes(path, data, mode=0o600)
    except OSError as exc:
        raise _storage_error("file", Path(path), exc) from None


def remove_stale_temporaries(directory: str | os.PathLike) -> list[str]:
    """Delete the temporary files :func:`atomic_write` left in ``directory`` when its process
    died mid-write (``.NAME.tmp.`` + a suffix, :data:`secemb.outputs.TEMP_MARK`); return their
    names.  Call only while no other process writes there (a server owns its state directory)."""
    removed = []
    for p in Path(directory).iterdir():
        if p.name.startswith(".") and TEMP_MARK in p.name and p.is_file():
            p.unlink(missing_ok=True)
            removed.append(p.name)
    return sorted(removed)


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

    Raises
    ------
    CorruptState
        At open: a record other than the last is damaged.
    StorageError
        At open (cutting a torn tail) or :meth:`append`: the disk refused the write.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._records, self._size = self._read()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size != self._size:  # a torn tail: cut it off durably
                    os.ftruncate(fd, self._size)
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _storage_error("journal", self.path, exc) from None

    def _read(self) -> tuple[list[dict[str, Any]], int]:
        """The complete records and the byte length they occupy."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [], 0
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
            records (what :meth:`records` returns is unchanged).
        """
        line = _frame(record)
        with self._lock:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except OSError as exc:
                raise _storage_error("journal", self.path, exc) from None
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
