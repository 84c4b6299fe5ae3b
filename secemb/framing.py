"""The one message framing (spec: ``docs/wire-format.md``, "Message framing").

Every message secemb sends -- each protocol's messages, the round's own messages, the secure
aggregation's messages and DPF key batches -- is ``header || body`` with this 32-byte header
(little-endian)::

    offset  size  field
     0      4     magic     b"SEMB"
     4      1     version   2
     5      1     protocol  wire id: a registered protocol's (secemb.protocols.registry), or one of
                            ENGINE_WIRE_ID, SECAGG_WIRE_ID, KEYS_WIRE_ID below
     6      1     kind      message kind, numbered by its protocol
     7      1     flags     0 (reserved; anything else is refused)
     8      4     party     u32: the party the protocol names the message by (0 where none)
    12      4     peer      u32: a second party, where the protocol names two (0 where none)
    16      8     round_id  u64 (0 where the message belongs to no round)
    24      8     body_len  u64: exact length of the body

This module sits below every user of it (it imports only :mod:`secemb.errors`), so ``fss``,
``secagg``, ``round`` and ``protocols`` all frame with it.  :func:`open_frame` checks every
header field against the receiver's expectations and raises
:class:`~secemb.errors.InvalidMessage` (or the subclass the caller names) on any mismatch.
"""

from __future__ import annotations

import struct

from secemb.errors import InvalidMessage, InvalidParameters

__all__ = [
    "ENGINE_WIRE_ID",
    "HEADER_BYTES",
    "KEYS_WIRE_ID",
    "MAGIC",
    "RESERVED_WIRE_IDS",
    "ROUND_ID_OFFSET",
    "SECAGG_WIRE_ID",
    "VERSION",
    "Buffer",
    "frame",
    "header",
    "open_frame",
]

MAGIC = b"SEMB"
#: 2 since the five headers became this one (version 1 was the 24-byte SEMB header)
VERSION = 2
_HEADER = struct.Struct("<4sBBBBIIQQ")
HEADER_BYTES = _HEADER.size  # 32
_pack = _HEADER.pack
_unpack_from = _HEADER.unpack_from
#: offset of the round id in the header (for reading it before the message is checked)
ROUND_ID_OFFSET = 16

#: the round's own messages (model sync, dense vector, count shares), which belong to no protocol
ENGINE_WIRE_ID = 0
#: secure aggregation and private set union (:mod:`secemb.secagg.messages`)
SECAGG_WIRE_ID = 254
#: DPF key batches (:mod:`secemb.fss.keys`)
KEYS_WIRE_ID = 255
#: wire ids no protocol may register
RESERVED_WIRE_IDS = frozenset({ENGINE_WIRE_ID, SECAGG_WIRE_ID, KEYS_WIRE_ID})

#: what the parsers accept
Buffer = bytes | bytearray | memoryview


def header(protocol: int, kind: int, party: int, peer: int, round_id: int, body_len: int) -> bytes:
    """The header of a message whose body is ``body_len`` bytes: what :func:`frame` puts before
    the body.

    Raises
    ------
    InvalidParameters
        A field does not fit its width (negative, or a party above 2^32 - 1).
    """
    try:
        return _pack(MAGIC, VERSION, protocol, kind, 0, party, peer, round_id, body_len)
    except struct.error as exc:
        raise InvalidParameters(f"cannot frame message kind {kind!r} of protocol {protocol!r}: {exc}") from None


def frame(protocol: int, kind: int, party: int, peer: int, round_id: int, *parts: Buffer) -> bytes:
    """Header followed by the concatenated ``parts``, copied once into the message.

    Raises
    ------
    InvalidParameters
        A field does not fit its width (negative, or a party above 2^32 - 1).
    """
    size = sum(memoryview(p).nbytes for p in parts)
    return b"".join((header(protocol, kind, party, peer, round_id, size), *parts))


def open_frame(
    data: object,
    protocol: int,
    kind: int,
    what: str,
    round_id: int | None = None,
    party: int | None = None,
    peer: int | None = None,
    body_len: int | None = None,
    error: type[InvalidMessage] = InvalidMessage,
) -> tuple[int, int, int, memoryview]:
    """Check the header of ``data`` and return ``(party, peer, round_id, body)``.

    Always checked: the type, the magic, the version, ``protocol``, ``kind``, the flags and that
    the header's body length is the length that follows.  ``round_id``, ``party``, ``peer``
    and ``body_len`` are checked where given (``None``: the caller checks or does not care).
    ``what`` names the message in the error.

    Raises
    ------
    InvalidMessage (or ``error``)
        Not bytes, shorter than a header, or any field other than expected.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise error(f"{what} must be bytes, got {type(data).__name__}")
    view = memoryview(data).cast("B")
    size = len(view)
    if size < HEADER_BYTES:
        raise error(f"{what}: {size} bytes, too short for the {HEADER_BYTES}-byte header")
    magic, version, got_proto, got_kind, flags, got_party, got_peer, got_round, got_len = _unpack_from(view)
    if magic != MAGIC:
        raise error(f"not a secemb {what} (magic {bytes(magic)!r})")
    if version != VERSION:
        raise error(f"{what}: unsupported message version {version}, expected {VERSION}")
    if got_proto != protocol:
        raise error(f"{what}: protocol id {got_proto}, expected {protocol}")
    if got_kind != kind:
        raise error(f"{what}: message kind {got_kind}, expected kind {kind}")
    if flags:
        raise error(f"{what}: flags {flags:#04x}, expected 0")
    if body_len is not None and size != HEADER_BYTES + body_len:
        raise error(f"{what}: expected {HEADER_BYTES + body_len} bytes, got {size}")
    if got_len != size - HEADER_BYTES:
        raise error(f"{what}: header body length {got_len}, the message carries {size - HEADER_BYTES}")
    if round_id is not None and got_round != round_id:
        raise error(f"{what}: for round {got_round}, expected round {round_id}")
    if party is not None and got_party != party:
        raise error(f"{what}: for party {got_party}, expected party {party}")
    if peer is not None and got_peer != peer:
        raise error(f"{what}: peer {got_peer}, expected peer {peer}")
    return got_party, got_peer, got_round, view[HEADER_BYTES:]
