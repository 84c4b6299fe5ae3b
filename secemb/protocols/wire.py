"""Framing of protocol messages (spec: ``docs/wire-format.md``).

Every protocol message is ``header || body``.  The 24-byte header (little-endian)::

    magic     4  b"SEMB"
    version   1  = 1
    protocol  1  wire id registered with the protocol (secemb.protocols.registry)
    kind      1  message kind (KINDS)
    party     1  the server the message is for or from (0, 1)
    round_id  8
    body_len  8  exact length of the body

A parser states what it expects (protocol, kind, party, round, body length) and
:func:`open_message` raises :class:`~secemb.errors.InvalidMessage` if anything differs.
Ring arrays travel as little-endian ``uint32``/``uint64`` in C order; their shapes are public
round parameters, never read from the message.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.protocols.registry import ENGINE_WIRE_ID, wire_id

if TYPE_CHECKING:
    from secemb.protocols.base import RoundConfig

__all__ = [
    "HEADER_BYTES",
    "KINDS",
    "frame",
    "open_message",
    "array_bytes",
    "read_array",
    "read_rows",
    "check_user",
    "check_ring",
    "users_bytes",
]

MAGIC = b"SEMB"
VERSION = 1
_HEADER = struct.Struct("<4sBBBBQQ")
HEADER_BYTES = _HEADER.size  # 24

KINDS = {
    "retrieval_request": 1,
    "retrieval_reply": 2,
    "upload": 3,
    "aggregate_share": 4,
    "model_sync": 5,
    "count_share": 6,
    "relay_keys": 7,
    "relay_answer": 8,
    "relay_upload": 9,
    "dense": 10,
}


def _wire_id(protocol: str | None) -> int:
    return ENGINE_WIRE_ID if protocol is None else wire_id(protocol)


def frame(protocol: str | None, kind: str, party: int, round_id: int, *parts: bytes) -> bytes:
    """Header followed by the concatenated ``parts``; ``protocol`` is a registered name
    (its wire id goes in the header), or ``None`` for the round's own messages (model,
    dense vector, count shares: :mod:`secemb.round.messages`), which carry
    :data:`~secemb.protocols.registry.ENGINE_WIRE_ID`.  The parts are copied once, into the
    message (a 48 MB full-model upload costs one copy, not two)."""
    size = sum(memoryview(p).nbytes for p in parts)
    return b"".join((_HEADER.pack(MAGIC, VERSION, _wire_id(protocol), KINDS[kind], party, round_id, size), *parts))


def open_message(
    data: bytes, protocol: str | None, kind: str, party: int, round_id: int, body_len: int
) -> memoryview:
    """Check the header of ``data`` against every expectation and return the body.

    Raises
    ------
    InvalidMessage
        Wrong type, truncated or oversized data, or any header field other than expected.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidMessage(f"message must be bytes, got {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) != HEADER_BYTES + body_len:
        raise InvalidMessage(f"{kind}: expected {HEADER_BYTES + body_len} bytes, got {len(view)}")
    magic, version, proto, got_kind, got_party, got_round, got_len = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise InvalidMessage(f"{kind}: not a secemb message (magic {bytes(magic)!r})")
    if version != VERSION:
        raise InvalidMessage(f"{kind}: unsupported message version {version}, expected {VERSION}")
    expected = _wire_id(protocol)
    if proto != expected:
        raise InvalidMessage(f"{kind}: protocol id {proto}, expected {expected} ({protocol or 'the round'})")
    if got_kind != KINDS[kind]:
        raise InvalidMessage(f"expected a {kind} message (kind {KINDS[kind]}), got kind {got_kind}")
    if got_party != party:
        raise InvalidMessage(f"{kind}: addressed to party {got_party}, this is party {party}")
    if got_round != round_id:
        raise InvalidMessage(f"{kind}: for round {got_round}, the current round is {round_id}")
    if got_len != body_len:
        raise InvalidMessage(f"{kind}: header body length {got_len}, expected {body_len}")
    return view[HEADER_BYTES:]


def array_bytes(a: np.ndarray) -> bytes:
    """Little-endian C-order bytes of an unsigned integer array."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def read_array(body: memoryview, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """Read a little-endian array of ``shape`` at ``offset``; returns a native copy and the
    offset after it.  The caller has already checked the total length."""
    count = math.prod(shape)
    dt = np.dtype(dtype)
    arr = np.frombuffer(body, dt.newbyteorder("<"), count, offset).reshape(shape).astype(dt)
    return arr, offset + count * dt.itemsize


_U64 = struct.Struct("<Q")


def read_rows(body: memoryview, offset: int, dtype: np.dtype, shape: tuple[int, int], rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (int indices into the first axis) of the little-endian ``shape`` array at
    ``offset``, as a native copy of those rows only: ``read_array(...)[0][rows]`` without
    copying the whole array first.  The caller has already checked the total length."""
    dt = np.dtype(dtype)
    arr = np.frombuffer(body, dt.newbyteorder("<"), math.prod(shape), offset).reshape(shape)
    return arr[rows].astype(dt, copy=False)  # the fancy index has copied already


def check_user(user_id: object) -> int:
    """A user id as the servers accept it: an int in ``[0, 2^64)``, else InvalidParameters."""
    if isinstance(user_id, bool) or not isinstance(user_id, (int, np.integer)) or not 0 <= user_id < 2**64:
        raise InvalidParameters(f"user id must be an int in [0, 2^64), got {user_id!r}")
    return int(user_id)


def users_bytes(users: list[int]) -> bytes:
    """``u64 count || count sorted u64 ids`` -- the user set an aggregate share covers."""
    return _U64.pack(len(users)) + b"".join(_U64.pack(u) for u in users)


def check_ring(name: str, a: np.ndarray, shape: tuple[int, ...], config: RoundConfig) -> None:
    """A caller's ring array: the round's dtype (else TypeError) and ``shape``."""
    if not isinstance(a, np.ndarray) or a.dtype != config.dtype:
        got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
        raise TypeError(f"{name} must be a numpy array of dtype {config.dtype}, got {got}")
    if a.shape != shape:
        raise InvalidParameters(f"{name} must have shape {shape}, got {a.shape}")
