"""SecEmb's protocol messages in the one framing (:mod:`secemb.framing`; spec: ``docs/wire-format.md``).

Every protocol message is ``header || body`` with the framing's 32-byte header: the protocol
byte is the wire id registered with the protocol (:mod:`secemb.protocols.names`), or
:data:`~secemb.framing.ENGINE_WIRE_ID` for the round's own messages; the kind is one of
:data:`KINDS`; the party field is the server (0, 1) the message is for or from; the peer
field is 0.

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

from secemb.errors import InvalidParameters, check_int
from secemb.framing import ENGINE_WIRE_ID, HEADER_BYTES, Buffer, header, open_frame
from secemb.framing import frame as _frame
from secemb.protocols.names import wire_id

if TYPE_CHECKING:
    from secemb.protocols.base import RoundConfig

__all__ = [
    "HEADER_BYTES",
    "KINDS",
    "frame",
    "frame_rows",
    "Framer",
    "open_message",
    "Opener",
    "array_bytes",
    "little",
    "read_array",
    "read_view",
    "read_rows",
    "check_user",
    "check_ring",
    "users_bytes",
]

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
    "bound_proof": 11,
    "bound_request": 12,
    "bound_answer": 13,
    "upload_receipt": 14,
}


def _wire_id(protocol: str | None) -> int:
    return ENGINE_WIRE_ID if protocol is None else wire_id(protocol)


def frame(protocol: str | None, kind: str, party: int, round_id: int, *parts: Buffer) -> bytes:
    """Header followed by the concatenated ``parts``; ``protocol`` is a registered name
    (its wire id goes in the header), or ``None`` for the round's own messages (model,
    dense vector, count shares: :mod:`secemb.round.messages`), which carry
    :data:`~secemb.framing.ENGINE_WIRE_ID`.  The parts are copied once, into the
    message (a 48 MB full-model upload costs one copy, not two)."""
    return _frame(_wire_id(protocol), KINDS[kind], party, 0, round_id, *parts)


def frame_rows(protocol: str | None, kind: str, party: int, round_id: int, body_len: int, count: int) -> np.ndarray:
    """``count`` messages with ``body_len``-byte bodies as the rows of one array, uint8
    (count, HEADER_BYTES + body_len): each row starts with the header :func:`frame` would
    write, and its body is left for the caller to fill (a batch of messages of one kind, each
    field of all of them written at once); a filled row's ``tobytes()`` is the message."""
    rows = np.empty((count, HEADER_BYTES + body_len), np.uint8)
    rows[:, :HEADER_BYTES] = np.frombuffer(header(_wire_id(protocol), KINDS[kind], party, 0, round_id, body_len),
                                           np.uint8)
    return rows


class Framer:
    """:func:`frame` of a batch's messages of one ``protocol``, ``kind``, ``party``, round and body
    ``size`` (a round's replies, forwards or uploads): their header, the same for all of them, is
    packed once; each message is it followed by its parts, copied once -- the bytes ``frame`` gives.

    Raises
    ------
    InvalidParameters: a header field does not fit its width (as :func:`frame`).
    """

    def __init__(self, protocol: str | None, kind: str, party: int, round_id: int, size: int) -> None:
        self._head = header(_wire_id(protocol), KINDS[kind], party, 0, round_id, size)
        self._total = HEADER_BYTES + size

    def __call__(self, *parts: Buffer) -> bytes:
        """The message whose body is the concatenated ``parts``.

        Raises
        ------
        InvalidParameters: the parts are not ``size`` bytes in all (nothing is returned).
        """
        message = b"".join((self._head, *parts))
        if len(message) != self._total:
            raise InvalidParameters(f"a message framed for a {self._total - HEADER_BYTES}-byte body got "
                                    f"{len(message) - HEADER_BYTES} bytes")
        return message


def open_message(
    data: bytes, protocol: str | None, kind: str, party: int, round_id: int, body_len: int
) -> memoryview:
    """Check the header of ``data`` against every expectation and return the body.

    Raises
    ------
    InvalidMessage
        Wrong type, truncated or oversized data, or any header field other than expected
        (the peer field must be 0).
    """
    return open_frame(data, _wire_id(protocol), KINDS[kind], kind, round_id, party, 0, body_len)[3]


class Opener:
    """:func:`open_message` of a batch's messages of one ``protocol``, ``kind``, ``party``,
    round and body ``size``: a message (bytes) whose header is byte for byte the one these
    expect -- exactly what passes every check of ``open_message``, since they fix every header
    field -- is taken without unpacking it; any other is checked by ``open_message``, which
    raises its error."""

    def __init__(self, protocol: str | None, kind: str, party: int, round_id: int, size: int) -> None:
        self._args = (protocol, kind, party, round_id, size)
        self._head = header(_wire_id(protocol), KINDS[kind], party, 0, round_id, size)
        self._total = HEADER_BYTES + size

    def __call__(self, message: bytes) -> memoryview:
        """The body of ``message``.

        Raises
        ------
        InvalidMessage: as ``open_message``.
        """
        if type(message) is bytes and len(message) == self._total and message.startswith(self._head):
            return memoryview(message)[HEADER_BYTES:]
        return open_message(message, *self._args)


def little(a: np.ndarray) -> memoryview:
    """:func:`array_bytes` of ``a`` (an unsigned integer array) as a view, without that copy --
    a copy only where ``a`` is not C-contiguous or the host big-endian -- for a message that
    copies it once (framing, hashing)."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).data


def array_bytes(a: np.ndarray) -> bytes:
    """Little-endian C-order bytes of an unsigned integer array."""
    return little(a).tobytes()


def read_array(body: memoryview, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """Read a little-endian array of ``shape`` at ``offset``; returns a native copy and the
    offset after it.  The caller has already checked the total length."""
    dt = np.dtype(dtype)
    return read_view(body, offset, dt, shape).astype(dt), offset + math.prod(shape) * dt.itemsize


def read_view(body: memoryview, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The little-endian array of ``shape`` at ``offset`` of ``body``, read in place: a view of
    ``body``'s memory (read-only over bytes), no copy; arithmetic into a native ``out`` gives
    native results on any host.  The caller has already checked the total length."""
    return np.frombuffer(body, np.dtype(dtype).newbyteorder("<"), math.prod(shape), offset).reshape(shape)


_U64 = struct.Struct("<Q")


def read_rows(body: memoryview, offset: int, dtype: np.dtype, shape: tuple[int, int], rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (int indices into the first axis) of the little-endian ``shape`` array at
    ``offset``, as a native copy of those rows only: ``read_array(...)[0][rows]`` without
    copying the whole array first.  The caller has already checked the total length."""
    return read_view(body, offset, dtype, shape)[rows].astype(dtype, copy=False)  # the fancy index has copied already


_USER_END = 2**64


def check_user(user_id: object) -> int:
    """A user id as the servers accept it: an int in ``[0, 2^64)``, else InvalidParameters
    (:func:`~secemb.errors.check_int`'s verdict and message; a plain ``int`` in range, what a batch
    holds, is taken without that call)."""
    if type(user_id) is int and 0 <= user_id < _USER_END:
        return user_id
    return check_int("user id", user_id, low=0, high=_USER_END - 1)


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
