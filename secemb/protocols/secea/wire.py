"""SecEA's messages in the one framing (:mod:`secemb.framing`, 32-byte header; docs/secea.md,
"Messages"): protocol id :data:`WIRE_ID` (SecEA's registered wire id), kind, round id, the
sender in the party field and the receiver in the peer field (client index, or :data:`SERVER`
for the server).  Bodies:

======  ===========  ==========================================================================
kind    direction    body
======  ===========  ==========================================================================
HELLO   client->srv  X25519 public key (32) | certificate (120) | signature (64) | Paillier modulus
                     n (big-endian, rest of the body); unsigned (``signed=False``): no certificate
                     and signature (parties.py, :func:`~secemb.protocols.secea.parties.hello_statement`)
DIRECT  srv->client  u16 count, then per client: u16 id, X25519 key (32), certificate (120),
                     signature (64), u16 len(n), n; unsigned: no certificate and signature
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

from dataclasses import dataclass

from secemb.errors import InvalidMessage
from secemb.framing import frame, open_frame
from secemb.protocols.names import wire_id

__all__ = [
    "WIRE_ID", "SERVER", "HELLO", "DIRECTORY", "UPLOAD", "RELAY", "ANSWER", "RESULT",
    "Header", "pack", "unpack", "Reader",
]

#: SecEA's wire id: the protocol byte of its messages, registered with ``secea`` (secemb.protocols)
WIRE_ID = wire_id("secea")
SERVER = 0xFFFF
HELLO, DIRECTORY, UPLOAD, RELAY, ANSWER, RESULT = 1, 2, 3, 4, 5, 6


@dataclass(frozen=True)
class Header:
    """A parsed header."""

    kind: int
    round_id: int
    sender: int
    receiver: int


def pack(header: Header, body: bytes) -> bytes:
    """Header then body."""
    return frame(WIRE_ID, header.kind, header.sender, header.receiver, header.round_id, body)


def unpack(data: bytes, kind: int, round_id: int | None = None, receiver: int | None = None) -> tuple[Header, bytes]:
    """Parse and check a message of ``kind`` (and of ``round_id``/``receiver`` when given)."""
    sender, recv, rid, body = open_frame(data, WIRE_ID, kind, f"SecEA message (kind {kind})", round_id, None, receiver)
    return Header(kind, rid, sender, recv), bytes(body)


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
