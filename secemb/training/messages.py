"""Byte formats of the training loop's own messages (not the protocol's).

All integers little-endian.  Every message starts with an 8-byte header::

    magic   4 bytes  b"SETR"
    version u8       1
    kind    u8       1 = MODEL, 2 = DENSE, 3 = COUNT
    zero    u16      0

MODEL (server 0 -> server 1: the public model to use in round ``round_id``, sent once before
round 0 and after each round's optimizer step)::

    round_id u64, num_items u32, width u32, dense_size u32, zero u32
    table  float64[num_items * width]  (row-major)
    dense  float64[dense_size]

DENSE (server 0 -> each participating user, start of its round; the public dense vector,
fixed-point encoded as the table rows are)::

    round_id u64, dense_size u32, ring_bits u8, zero u8[3]
    dense  ring word[dense_size]  (uint32 or uint64)

COUNT (Eq. 11 of the paper: a user's share of its rating count to each server, and server 1's
share of the sum to server 0)::

    ring_bits u8, zero u8[7]
    value  ring word

Parsers take the values the receiver expects, check the exact length and every field, and
raise :class:`~secemb.errors.InvalidMessage` on any mismatch.  No pickle anywhere.
"""

from __future__ import annotations

import struct

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters

__all__ = [
    "VERSION",
    "decode_count",
    "decode_dense",
    "decode_model",
    "encode_count",
    "encode_dense",
    "encode_model",
    "model_bytes",
]

MAGIC = b"SETR"
VERSION = 1
KIND_MODEL, KIND_DENSE, KIND_COUNT = 1, 2, 3

_HEAD = struct.Struct("<4sBBH")
_MODEL = struct.Struct("<QIIII")
_DENSE = struct.Struct("<QIB3s")
_COUNT = struct.Struct("<B7s")
_RING = {32: np.dtype("<u4"), 64: np.dtype("<u8")}
_F64 = np.dtype("<f8")


def _head(kind: int) -> bytes:
    return _HEAD.pack(MAGIC, VERSION, kind, 0)


def _check_head(data: bytes, kind: int, what: str) -> memoryview:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidMessage(f"{what}: expected bytes, got {type(data).__name__}")
    mv = memoryview(data).cast("B")
    if len(mv) < _HEAD.size:
        raise InvalidMessage(
            f"{what}: {len(mv)} bytes is shorter than the {_HEAD.size}-byte header"
        )
    magic, version, k, zero = _HEAD.unpack_from(mv)
    if magic != MAGIC:
        raise InvalidMessage(f"{what}: bad magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise InvalidMessage(f"{what}: unsupported version {version}, expected {VERSION}")
    if k != kind:
        raise InvalidMessage(f"{what}: message kind {k}, expected {kind}")
    if zero != 0:
        raise InvalidMessage(f"{what}: reserved header field is {zero}, expected 0")
    return mv


def _ring_dtype(ring_bits: int) -> np.dtype:
    try:
        return _RING[ring_bits]
    except KeyError:
        raise InvalidParameters(f"ring_bits must be 32 or 64, got {ring_bits!r}") from None


def _expect(what: str, field: str, got: int, want: int) -> None:
    if got != want:
        raise InvalidMessage(f"{what}: {field} is {got}, expected {want}")


# ---------------------------------------------------------------------- MODEL


def encode_model(round_id: int, table: np.ndarray, dense: np.ndarray) -> bytes:
    """Serialize the public model (float64 ``table`` (m, width) and ``dense`` (P,))."""
    table = np.asarray(table)
    dense = np.asarray(dense)
    if table.ndim != 2 or dense.ndim != 1:
        raise InvalidParameters(
            f"table must be 2-D and dense 1-D, got {table.shape}, {dense.shape}"
        )
    m, w = table.shape
    return b"".join(
        (
            _head(KIND_MODEL),
            _MODEL.pack(round_id, m, w, dense.shape[0], 0),
            np.ascontiguousarray(table, dtype=_F64).tobytes(),
            np.ascontiguousarray(dense, dtype=_F64).tobytes(),
        )
    )


def model_bytes(num_items: int, width: int, dense_size: int) -> int:
    """Length of the MODEL message of a model with these sizes."""
    return _HEAD.size + _MODEL.size + 8 * (num_items * width + dense_size)


def decode_model(
    data: bytes, *, round_id: int, num_items: int, width: int, dense_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Parse a MODEL message; return writable float64 ``(table, dense)`` copies.

    Raises
    ------
    InvalidMessage
        On a wrong header, round, shape, length, or a non-finite value.
    """
    what = "model message"
    mv = _check_head(data, KIND_MODEL, what)
    need = _HEAD.size + _MODEL.size
    if len(mv) < need:
        raise InvalidMessage(f"{what}: {len(mv)} bytes, shorter than its {need}-byte header")
    r, m, w, p, zero = _MODEL.unpack_from(mv, _HEAD.size)
    _expect(what, "round_id", r, round_id)
    _expect(what, "num_items", m, num_items)
    _expect(what, "width", w, width)
    _expect(what, "dense_size", p, dense_size)
    _expect(what, "reserved field", zero, 0)
    _expect(what, "length", len(mv), model_bytes(m, w, p))
    body = np.frombuffer(mv, dtype=_F64, offset=need)
    if not np.isfinite(body).all():
        raise InvalidMessage(f"{what}: non-finite parameter")
    table = body[: m * w].reshape(m, w).astype(np.float64)
    dense = body[m * w :].astype(np.float64)
    return table, dense


# ---------------------------------------------------------------------- DENSE


def encode_dense(round_id: int, dense: np.ndarray, ring_bits: int) -> bytes:
    """Serialize the ring-encoded dense vector (dtype uint32/uint64 matching ``ring_bits``)."""
    dt = _ring_dtype(ring_bits)
    dense = np.asarray(dense)
    if dense.ndim != 1 or dense.dtype != dt.newbyteorder("="):
        raise InvalidParameters(
            f"dense must be 1-D of dtype {dt.name}, got {dense.dtype} {dense.shape}"
        )
    return b"".join(
        (
            _head(KIND_DENSE),
            _DENSE.pack(round_id, dense.shape[0], ring_bits, b"\0\0\0"),
            np.ascontiguousarray(dense, dtype=dt).tobytes(),
        )
    )


def decode_dense(data: bytes, *, round_id: int, dense_size: int, ring_bits: int) -> np.ndarray:
    """Parse a DENSE message; return the ring vector (native uint32/uint64, writable)."""
    what = "dense message"
    dt = _ring_dtype(ring_bits)
    mv = _check_head(data, KIND_DENSE, what)
    need = _HEAD.size + _DENSE.size
    if len(mv) < need:
        raise InvalidMessage(f"{what}: {len(mv)} bytes, shorter than its {need}-byte header")
    r, p, bits, zero = _DENSE.unpack_from(mv, _HEAD.size)
    _expect(what, "round_id", r, round_id)
    _expect(what, "dense_size", p, dense_size)
    _expect(what, "ring_bits", bits, ring_bits)
    if zero != b"\0\0\0":
        raise InvalidMessage(f"{what}: reserved bytes are not zero")
    _expect(what, "length", len(mv), need + dt.itemsize * p)
    return np.frombuffer(mv, dtype=dt, offset=need).astype(dt.newbyteorder("="))


# ---------------------------------------------------------------------- COUNT


def encode_count(share: np.ndarray, ring_bits: int) -> bytes:
    """Serialize one ring word (a share of a count), shape ``(1,)`` or scalar."""
    dt = _ring_dtype(ring_bits)
    share = np.asarray(share)
    if share.size != 1 or share.dtype != dt.newbyteorder("="):
        raise InvalidParameters(
            f"count share must be one {dt.name} word, got {share.dtype} {share.shape}"
        )
    return _head(KIND_COUNT) + _COUNT.pack(ring_bits, bytes(7)) + share.astype(dt).tobytes()


def decode_count(data: bytes, *, ring_bits: int) -> np.ndarray:
    """Parse a COUNT message; return a ring array of shape ``(1,)``."""
    what = "count message"
    dt = _ring_dtype(ring_bits)
    mv = _check_head(data, KIND_COUNT, what)
    need = _HEAD.size + _COUNT.size
    _expect(what, "length", len(mv), need + dt.itemsize)
    bits, zero = _COUNT.unpack_from(mv, _HEAD.size)
    _expect(what, "ring_bits", bits, ring_bits)
    if zero != bytes(7):
        raise InvalidMessage(f"{what}: reserved bytes are not zero")
    return np.frombuffer(mv, dtype=dt, offset=need).astype(dt.newbyteorder("="))
