"""SecEA's messages: bytes with a 17-byte versioned header (docs/secea.md, "Messages").

Header, little-endian: magic ``b"SEA"``, version (u8, 1), kind (u8), round id (u32), sender
(u16), receiver (u16; :data:`SERVER` for the server), body length (u32).  Bodies:

======  ===========  ==========================================================================
kind    direction    body
======  ===========  ==========================================================================
HELLO   client->srv  X25519 public key (32) | Paillier modulus n (big-endian, rest of the body)
DIRECT  srv->client  u16 count, then per client: u16 id, X25519 key (32), u16 len(n), n
UPLOAD  client->srv  u32 M, u16 w, u32 E, u16 count, then per recipient v: u16 v,
                     (M*w + E*M) u32 words, XOR-padded: the shares y_{n,v} then the queries
RELAY   srv->client  u32 M, u16 w, u16 count, then per sender n: u16 n, u32 E_n, the padded words
ANSWER  client->srv  u16 count, then per requester n: u16 n, u32 E_n, u16 C_n, E_n*C_n ciphertexts
RESULT  srv->client  u32 E, u16 C, u16 count, then per answerer v: u16 v, E*C ciphertexts
======  ===========  ==========================================================================

Ciphertexts are big-endian, each ``ceil(bits(n^2)/8)`` bytes for the requester's key.  Parsers
check every length exactly and raise :class:`secemb.errors.InvalidMessage` on any mismatch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from secemb.errors import InvalidMessage

__all__ = [
    "MAGIC", "VERSION", "SERVER", "HELLO", "DIRECTORY", "UPLOAD", "RELAY", "ANSWER", "RESULT",
    "Header", "pack", "unpack", "Reader",
]

MAGIC = b"SEA"
VERSION = 1
SERVER = 0xFFFF
HELLO, DIRECTORY, UPLOAD, RELAY, ANSWER, RESULT = 1, 2, 3, 4, 5, 6
_KINDS = {HELLO, DIRECTORY, UPLOAD, RELAY, ANSWER, RESULT}
_HEADER = struct.Struct("<3sBBIHHI")


@dataclass(frozen=True)
class Header:
    """A parsed header."""

    kind: int
    round_id: int
    sender: int
    receiver: int


def pack(header: Header, body: bytes) -> bytes:
    """Header then body."""
    return _HEADER.pack(MAGIC, VERSION, header.kind, header.round_id, header.sender, header.receiver, len(body)) + body


def unpack(data: bytes, kind: int, round_id: int | None = None, receiver: int | None = None) -> tuple[Header, bytes]:
    """Parse and check a message of ``kind`` (and of ``round_id``/``receiver`` when given)."""
    if len(data) < _HEADER.size:
        raise InvalidMessage(f"SecEA message too short: {len(data)} bytes, header is {_HEADER.size}")
    magic, version, got_kind, rid, sender, recv, length = _HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise InvalidMessage(f"not a SecEA v{VERSION} message (magic {magic!r}, version {version})")
    if got_kind not in _KINDS or got_kind != kind:
        raise InvalidMessage(f"expected message kind {kind}, got {got_kind}")
    if length != len(data) - _HEADER.size:
        raise InvalidMessage(f"body length field says {length}, message carries {len(data) - _HEADER.size}")
    if round_id is not None and rid != round_id:
        raise InvalidMessage(f"message is for round {rid}, expected round {round_id}")
    if receiver is not None and recv != receiver:
        raise InvalidMessage(f"message is addressed to {recv}, expected {receiver}")
    return Header(got_kind, rid, sender, recv), data[_HEADER.size :]


class Reader:
    """Sequential reads from a body; every read checks the remaining length."""

    def __init__(self, body: bytes) -> None:
        self._body = memoryview(body)
        self._pos = 0

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        if n < 0 or self._pos + n > len(self._body):
            raise InvalidMessage(f"message body truncated: need {n} bytes at offset {self._pos}")
        out = bytes(self._body[self._pos : self._pos + n])
        self._pos += n
        return out

    def u16(self) -> int:
        """A little-endian u16."""
        return int.from_bytes(self.take(2), "little")

    def u32(self) -> int:
        """A little-endian u32."""
        return int.from_bytes(self.take(4), "little")

    def done(self) -> None:
        """Refuse trailing bytes."""
        if self._pos != len(self._body):
            raise InvalidMessage(f"{len(self._body) - self._pos} trailing bytes in message body")
