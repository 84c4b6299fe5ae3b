"""Per-device shares a server keeps out of memory until its round closes (issue 37, goal 5).

A server folds each device's dense share (a full-model protocol: its whole upload) into the
round's running aggregate on arrival, but must be able to take it out again if the device is
left out at the close (silent at the other server, failed verification).  A share the server
can recompute (server 1's relay share: the expansion of a 16-byte seed) is kept as its seed;
an explicit share is written here, to an anonymous temporary file with ``write()`` -- not a
memory map, so its pages are the kernel's page cache, not this process's resident set -- and
read back only for a device left out.  The server's memory is then O(model) whatever the
number of devices; the disk holds O(devices x share) until the next round.  A large array is
written without its all-zero blocks of :data:`_BLOCK_BYTES` (read back as zeros): the plaintext
server's share is the device's gradient itself, mostly zeros for DeepFM (the deep tower's rows
of the user features the device does not have): at d = 512 on ML-100K a 449 MB share (32-bit
ring) is ~90 MB of non-zero blocks, and a round of 100 devices spilled 8.9 GB, not 45 GB.

The file is unlinked from the start (:func:`tempfile.TemporaryFile`, in ``$TMPDIR``): nothing
of it outlives the process, which is right for round state a restarted server never resumes
(it ends an open round as aborted, :mod:`secemb.server.state`).
"""

from __future__ import annotations

import io
import tempfile
import threading
from typing import cast

import numpy as np

__all__ = ["SpilledShares"]

#: arrays smaller than this are joined (in memory: up to about this many bytes) and written together
_JOIN_BYTES = 1 << 20
#: a larger array is written in blocks of this many bytes, its all-zero blocks left out
_BLOCK_BYTES = 1 << 18


class SpilledShares:
    """Arrays by device id, written to an anonymous temporary file and read back on demand.

    Each :meth:`put` appends the array's bytes; :meth:`get` reads one back as a new array
    (the same dtype and shape); :meth:`clear` forgets them all and truncates the file.  Safe to
    call from several threads.  The file is created by the first :meth:`put` and closed by
    :meth:`close` (or when the object is collected).
    """

    def __init__(self) -> None:
        self._file: io.RawIOBase | None = None
        # key -> (offset, dtype, shape, the written blocks: None for all of the array's bytes)
        self._where: dict[int, tuple[int, np.dtype, tuple[int, ...], np.ndarray | None]] = {}
        self._end = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def put(self, key: int, array: np.ndarray) -> None:
        """Keep ``array`` (any dtype and shape) for ``key``, in place of any kept before.

        Raises
        ------
        OSError: the file could not be created or written (what ``key`` held is unchanged).
        """
        self.put_many([(key, array)])

    def put_many(self, items: list[tuple[int, np.ndarray]]) -> None:
        """:meth:`put` of each ``(key, array)`` in order (a later one for the same key wins),
        all or nothing: recorded only once every write succeeded.  Small arrays are joined
        and written together (at most about :data:`_JOIN_BYTES` in memory at once); a large
        one is written as it is.

        Raises
        ------
        OSError: the file could not be created or written (nothing of ``items`` is kept; what
            their keys held is unchanged).
        """
        if not items:
            return
        with self._lock:
            if self._file is None:
                # unbuffered: a raw file (a wrapper of one where the OS cannot unlink an open file)
                self._file = cast("io.RawIOBase", tempfile.TemporaryFile(buffering=0))  # noqa: SIM115 - closed by close()
            self._file.seek(self._end)
            end = self._end
            placed: list[tuple[int, tuple[int, np.dtype, tuple[int, ...], np.ndarray | None]]] = []
            pending: list[memoryview] = []  # small arrays not written yet
            held = 0  # their bytes
            for key, array in items:
                data = np.ascontiguousarray(array)
                view = data.data.cast("B")
                blocks = _nonzero_blocks(view) if len(view) >= _JOIN_BYTES else None
                placed.append((key, (end, data.dtype, data.shape, blocks)))
                if held + len(view) > _JOIN_BYTES and pending:
                    self._write(b"".join(pending))
                    pending, held = [], 0
                if blocks is not None:
                    for lo, hi in _runs(blocks):
                        end += self._write(view[lo:hi])
                elif len(view) >= _JOIN_BYTES:
                    end += self._write(view)
                else:
                    end += len(view)
                    pending.append(view)
                    held += len(view)
            if pending:
                self._write(b"".join(pending))
            self._where.update(placed)
            self._end = end

    def _write(self, data: bytes | memoryview) -> int:
        """Write all of ``data`` at the file's position (a raw write may take part of a large
        buffer); its length."""
        assert self._file is not None  # put_many created it
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += self._file.write(view[done:]) or 0
        return done

    def get(self, key: int) -> np.ndarray:
        """A new array equal to the one kept for ``key``.

        Raises
        ------
        KeyError: nothing is kept for ``key``.
        OSError: the file could not be read, or ended early.
        """
        with self._lock:
            _, dtype, shape, _ = self._where[key]
            return self._read([key], dtype, shape)[0]

    def get_many(self, keys: list[int], dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The arrays kept for ``keys`` (each of ``dtype`` and ``shape``), in order, as the rows of
        one new array ``(len(keys), *shape)``: row ``i`` equal to ``get(keys[i])``.  Arrays that lie
        end to end in the file (a batch :meth:`put_many` joined) are read with one read, not one a key.

        Raises
        ------
        KeyError: nothing is kept for a key.
        ValueError: an array kept for a key is not of ``dtype`` and ``shape``.
        OSError: the file could not be read, or ended early.
        """
        with self._lock:
            return self._read(keys, np.dtype(dtype), tuple(shape))

    def _read(self, keys: list[int], dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """:meth:`get_many` with the lock held."""
        where = [self._where[k] for k in keys]
        if any(d != dtype or s != shape for _, d, s, _ in where):
            raise ValueError(f"the arrays kept for these keys are not all {dtype} {shape}")
        whole = all(b is None for *_, b in where)
        out = np.empty((len(keys), *shape), dtype) if whole else np.zeros((len(keys), *shape), dtype)
        view = out.reshape(-1).view(np.uint8).data  # its bytes (of no rows too)
        size = view.nbytes // max(1, len(keys))
        spans: list[tuple[int, int, int]] = []  # (offset in the file, start, end in out's bytes)
        for i, (offset, _, _, blocks) in enumerate(where):
            at = i * size
            if blocks is not None:  # its non-zero runs, written one after the other from its offset
                for lo, hi in _runs(blocks):
                    spans.append((offset, at + lo, at + min(hi, size)))
                    offset += min(hi, size) - lo
            elif spans and spans[-1][0] + spans[-1][2] - spans[-1][1] == offset and spans[-1][2] == at:
                spans[-1] = (spans[-1][0], spans[-1][1], at + size)  # right after the last span, in the file and out
            else:
                spans.append((offset, at, at + size))
        for offset, lo, hi in spans:
            assert self._file is not None  # created by the put that recorded the keys
            self._file.seek(offset)
            done = lo
            while done < hi:
                got = self._file.readinto(view[done:hi])
                if not got:
                    raise OSError(f"spilled share of device {keys[done // size]}: the file ended early")
                done += got
        return out

    def clear(self) -> None:
        """Forget every array and give the file's space back (the file stays open)."""
        with self._lock:
            self._where.clear()
            self._end = 0
            if self._file is not None:
                self._file.truncate(0)

    def close(self) -> None:
        """Forget every array and close (delete) the file."""
        with self._lock:
            self._where.clear()
            self._end = 0
            if self._file is not None:
                self._file.close()
                self._file = None


def _nonzero_blocks(view: memoryview) -> np.ndarray:
    """Which :data:`_BLOCK_BYTES` blocks of ``view``'s bytes (the last one possibly shorter)
    hold a non-zero byte: bool ``(ceil(len / _BLOCK_BYTES),)``."""
    raw = np.frombuffer(view, np.uint8)
    full = len(raw) // _BLOCK_BYTES
    words = raw[: full * _BLOCK_BYTES].view(np.uint64).reshape(full, _BLOCK_BYTES // 8)
    tail = [bool(raw[full * _BLOCK_BYTES :].any())] if len(raw) > full * _BLOCK_BYTES else []
    return np.concatenate([words.any(axis=1), np.array(tail, dtype=bool)])


def _runs(blocks: np.ndarray) -> list[tuple[int, int]]:
    """The byte ranges ``[lo, hi)`` of the runs of consecutive ``True`` blocks, in order (the
    last one's ``hi`` may pass the array's end: a slice stops there)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[False], blocks, [False]]).astype(np.int8)))
    return [(int(lo) * _BLOCK_BYTES, int(hi) * _BLOCK_BYTES) for lo, hi in zip(edges[::2], edges[1::2], strict=True)]
