"""Crash-safe state on disk: atomic checkpoints and an append-only round journal.

Checkpoint (``checkpoint.npz``)
    The whole durable state of a server -- model version, public model, optimizer moments,
    m' -- as an uncompressed ``.npz`` (numpy arrays only, loaded with ``allow_pickle=False``)
    with a JSON metadata member.  Written by :func:`atomic_write`: a temporary file in the same
    directory, ``fsync``, ``rename`` over the old file, ``fsync`` of the directory.  A crash at
    any instant leaves either the old or the new checkpoint, never a mixture; writing it is the
    *commit point* of a round.

Journal (``journal.jsonl``)
    One JSON object per line, appended and ``fsync``-ed before the server acts on it (a round
    is announced only after its ``open`` record is durable).  A crash can tear at most the last
    line, which :meth:`Journal.records` drops; a malformed line elsewhere is corruption and
    raises.  The journal keeps round ids monotonic across restarts and records each round's
    outcome; the checkpoint stays the authority on the model.
"""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from secemb.errors import SecembError

__all__ = ["CorruptState", "Journal", "atomic_write", "load_checkpoint", "save_checkpoint"]

_META = "__meta__"


class CorruptState(SecembError):
    """A state file exists but cannot be read back."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably (write temp, fsync, rename,
    fsync the directory)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}.{threading.get_ident()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def save_checkpoint(path: str | os.PathLike, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Atomically write ``meta`` (JSON-able) and ``arrays`` to ``path``."""
    for name in (_META, "file", "allow_pickle"):  # ours, and np.savez's own parameters
        if name in arrays:
            raise ValueError(f"array name {name!r} is reserved")
    buf = io.BytesIO()
    meta_arr = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez(buf, allow_pickle=False, **{_META: meta_arr}, **arrays)
    atomic_write(path, buf.getvalue())


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
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays.pop(_META).tobytes().decode())
    except Exception as exc:  # zipfile/ValueError/KeyError/...: all mean "unreadable"
        raise CorruptState(f"checkpoint {path} is unreadable: {type(exc).__name__}: {exc}") from None
    if not isinstance(meta, dict):
        raise CorruptState(f"checkpoint {path}: metadata is not an object")
    return meta, arrays


class Journal:
    """Append-only JSON-lines log, each record fsync-ed (thread-safe)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._records = self._read()
        # drop a torn tail so that the next append starts on a fresh line
        clean = b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in self._records)
        if not self.path.exists() or self.path.read_bytes() != clean:
            atomic_write(self.path, clean)

    def _read(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_bytes().split(b"\n")
        except FileNotFoundError:
            return []
        if lines and lines[-1] == b"":
            lines.pop()
        records = []
        for i, line in enumerate(lines):
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError("not an object")
            except ValueError:
                if i == len(lines) - 1:  # torn by a crash while appending
                    break
                raise CorruptState(f"journal {self.path}: line {i + 1} is malformed") from None
            records.append(rec)
        return records

    def records(self) -> list[dict[str, Any]]:
        """All complete records, oldest first."""
        with self._lock:
            return list(self._records)

    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` durably (returns after fsync)."""
        line = json.dumps(record, sort_keys=True).encode() + b"\n"
        with self._lock:
            with open(self.path, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self._records.append(record)
