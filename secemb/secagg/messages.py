"""Byte layouts of the secure-aggregation messages (all little-endian; ``docs/secagg.md``).

Every message is a 22-byte header and a body::

    magic     4  b"SAGG"
    version   1  = 1
    kind      1  KINDS
    round_id  8
    sender    4  client id, or SERVER (0xFFFFFFFF) for what the server sends
    body_len  4  exact length of the body

Bodies (``id`` = uint32, ``key`` = 32-byte X25519 public key, ``share`` = 33-byte field
element, ``rows`` = ``count`` uint32 then ``count`` uint32 row numbers, strictly increasing)::

    advertise  key(c) key(s) [rows]                                  client -> server
    keys       count, count x (id key(c) key(s)) [count x bitmap]    server -> client
    shares     count, count x (id ciphertext)                        client -> server (to peers)
    relayed    count, count x (id ciphertext)                        server -> client (from peers)
    masked     k x width uint32                                      client -> server
    survivors  count, count x id                                     server -> client
    unmask     count, count x (id share), count, count x (id share)  client -> server
    union      rows                                                  server -> client (PSU)

``[rows]`` and ``[... bitmap]`` are present only in a sparse round: ``bitmap`` is
``ceil(k / 8)`` bytes over the recipient's ``k`` rows (bit ``i`` = bit ``i mod 8`` of byte
``i div 8``), set where the listed client holds the row too.  Parsers check every length exactly and raise
:class:`~secemb.errors.InvalidMessage` on any mismatch.
"""

from __future__ import annotations

import struct

import numpy as np

from secemb.errors import InvalidMessage

__all__ = ["HEADER_BYTES", "KINDS", "SERVER", "frame", "open_frame", "Reader", "ids_bytes", "rows_bytes"]

MAGIC = b"SAGG"
VERSION = 1
_HEADER = struct.Struct("<4sBBQII")
HEADER_BYTES = _HEADER.size
#: The sender id of every message the server sends.
SERVER = 0xFFFFFFFF

KINDS = {
    "advertise": 1,
    "keys": 2,
    "shares": 3,
    "relayed": 4,
    "masked": 5,
    "survivors": 6,
    "unmask": 7,
    "union": 8,
}
_NAMES = {v: k for k, v in KINDS.items()}


def frame(kind: str, round_id: int, sender: int, *parts: bytes) -> bytes:
    """Header followed by the concatenated ``parts``."""
    body = b"".join(parts)
    return _HEADER.pack(MAGIC, VERSION, KINDS[kind], round_id, sender, len(body)) + body


def open_frame(data: bytes, kind: str, round_id: int, sender: int | None = None) -> tuple[int, memoryview]:
    """Check the header of ``data`` (magic, version, kind, round, body length and, if given,
    the sender) and return ``(sender, body)``.

    Raises
    ------
    InvalidMessage: anything differs from what is expected.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidMessage(f"{kind} message must be bytes, got {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) < HEADER_BYTES:
        raise InvalidMessage(f"{kind} message is {len(view)} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, version, k, rnd, snd, body_len = _HEADER.unpack_from(view)
    if magic != MAGIC or version != VERSION:
        raise InvalidMessage(f"not a secagg v{VERSION} message (magic {bytes(magic)!r}, version {version})")
    if k != KINDS[kind]:
        raise InvalidMessage(f"expected a {kind} message, got kind {_NAMES.get(k, k)}")
    if rnd != round_id:
        raise InvalidMessage(f"{kind} message is for round {rnd}, expected round {round_id}")
    if sender is not None and snd != sender:
        raise InvalidMessage(f"{kind} message claims sender {snd}, expected {sender}")
    if body_len != len(view) - HEADER_BYTES:
        raise InvalidMessage(f"{kind} message body is {len(view) - HEADER_BYTES} bytes, header says {body_len}")
    return snd, view[HEADER_BYTES:]


def ids_bytes(ids: np.ndarray | list[int]) -> bytes:
    """``count`` then the ids, uint32."""
    a = np.asarray(ids, dtype="<u4")
    return struct.pack("<I", a.size) + a.tobytes()


def rows_bytes(rows: np.ndarray) -> bytes:
    """``count`` then the row numbers, uint32 (same layout as ids)."""
    return ids_bytes(rows)


class Reader:
    """Sequential parser of a body: every read checks that the bytes are there, :meth:`end`
    that nothing is left."""

    def __init__(self, body: memoryview, what: str) -> None:
        self.body = body
        self.pos = 0
        self.what = what

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.body):
            raise InvalidMessage(f"{self.what}: truncated (need {n} bytes at offset {self.pos} of {len(self.body)})")
        out = self.body[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def array(self, count: int, dtype: str = "<u4") -> np.ndarray:
        size = np.dtype(dtype).itemsize
        return np.frombuffer(self.take(count * size), dtype=dtype).astype(np.dtype(dtype).newbyteorder("="))

    def increasing(self, limit: int, name: str) -> np.ndarray:
        """``count`` then strictly increasing uint32 values below ``limit`` (int64)."""
        count = self.u32()
        a = self.array(count).astype(np.int64)
        if a.size and (np.any(np.diff(a) <= 0) or int(a[-1]) >= limit):
            raise InvalidMessage(f"{self.what}: {name} must be strictly increasing and below {limit}")
        return a

    def records(self, item: int, name: str) -> list[tuple[int, bytes]]:
        """``count`` then ``count`` records ``id || item bytes``; ids strictly increasing."""
        count = self.u32()
        raw = self.take(count * (4 + item))
        out = []
        last = -1
        for i in range(count):
            rec = raw[i * (4 + item) : (i + 1) * (4 + item)]
            ident = int.from_bytes(rec[:4], "little")
            if ident <= last:
                raise InvalidMessage(f"{self.what}: {name} ids must be strictly increasing (no duplicates)")
            last = ident
            out.append((ident, bytes(rec[4:])))
        return out

    def end(self) -> None:
        if self.pos != len(self.body):
            raise InvalidMessage(f"{self.what}: {len(self.body) - self.pos} trailing bytes")
