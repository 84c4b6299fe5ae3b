"""Byte layouts of the secure-aggregation messages (all little-endian; ``docs/secagg.md``).

Every message is framed by the one framing (:mod:`secemb.framing`, 32-byte header): protocol
id :data:`~secemb.framing.SECAGG_WIRE_ID`, kind :data:`KINDS`, the sender in the party field
(client id, or :data:`SERVER` (0xFFFFFFFF) for what the server sends), peer 0, the round id.

Bodies (``id`` = uint32, ``key`` = 32-byte X25519 public key, ``share`` = 33-byte field
element, ``rows`` = ``count`` uint32 then ``count`` uint32 row numbers, strictly increasing)::

    advertise  key(c) key(s) [rows]                                  client -> server
    keys       count, count x (id key(c) key(s)) [count x bitmap]    server -> client (unsigned)
    shares     count, count x (id ciphertext)                        client -> server (to peers)
    relayed    count, count x (id ciphertext)                        server -> client (from peers)
    masked     k x width uint32                                      client -> server
    survivors  count, count x id                                     server -> client
    unmask     count, count x (id share), count, count x (id share)  client -> server
    union      rows                                                  server -> client (PSU)
    consistency  signature                                           client -> server (signed)
    signatures   count, count x (id signature)                       server -> client (signed)

``[rows]`` and ``[... bitmap]`` are present only in a sparse round: ``bitmap`` is
``ceil(k / 8)`` bytes over the recipient's ``k`` rows (bit ``i`` = bit ``i mod 8`` of byte
``i div 8``), set where the listed client holds the row too.

In a *signed* round (:attr:`~secemb.secagg.config.SecAggConfig.signed`, resisting an active
server) an advertise message is ``key(c) key(s) commitment certificate signature [rows]`` and
each key-list entry ``id key(c) key(s) commitment certificate signature [signed bitmap]``
(commitment: 32 bytes, SHA-256 of the client's self-mask seed,
:func:`~secemb.secagg.client.seed_commitment`; certificate: 120 bytes,
:mod:`secemb.secagg.identity`; signature: 64 bytes, Ed25519): in a sparse round the listed
client's row set as a bitmap of ``ceil(|candidates| / 8)`` bytes over the round's candidate rows
(:meth:`~secemb.secagg.config.SecAggConfig.row_bitmap`), which its signature covers; the key list
is the same for every client and carries no per-recipient bitmaps.  A signed round's ``shares``
record is ``id ciphertext commitment(s) commitment(b)`` and the message ends with the sender's
``commitment(s) commitment(b)`` to its own shares; a ``relayed`` record is ``id ciphertext
commitment(s) commitment(b)`` (commitment: 16 bytes,
:func:`~secemb.secagg.client.share_commitment`, of the share of ``s^SK`` / ``b`` the ciphertext
carries).  Parsers check every length
exactly and raise :class:`~secemb.errors.InvalidMessage` on any mismatch.
"""

from __future__ import annotations

import struct

import numpy as np

from secemb.errors import InvalidMessage
from secemb.framing import HEADER_BYTES, SECAGG_WIRE_ID, Buffer
from secemb.framing import open_frame as _open_frame
from secemb.framing import frame as _frame

__all__ = ["HEADER_BYTES", "KINDS", "SERVER", "frame", "open_frame", "Reader", "ids_bytes", "rows_bytes"]

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
    "consistency": 9,
    "signatures": 10,
}


def frame(kind: str, round_id: int, sender: int, *parts: Buffer) -> bytes:
    """Header followed by the concatenated ``parts``."""
    return _frame(SECAGG_WIRE_ID, KINDS[kind], sender, 0, round_id, *parts)


def open_frame(data: bytes, kind: str, round_id: int, sender: int | None = None) -> tuple[int, memoryview]:
    """Check the header of ``data`` (magic, version, protocol id, kind, flags, round, body
    length, peer 0 and, if given, the sender) and return ``(sender, body)``.

    Raises
    ------
    InvalidMessage: anything differs from what is expected.
    """
    snd, _, _, body = _open_frame(data, SECAGG_WIRE_ID, KINDS[kind], f"{kind} message", round_id, None, 0)
    if sender is not None and snd != sender:
        raise InvalidMessage(f"{kind} message claims sender {snd}, expected {sender}")
    return snd, body


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
