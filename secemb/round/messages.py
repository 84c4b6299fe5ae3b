"""Byte formats of the round's own messages (not a protocol's): the public model, the round's
dense vector, and the Eq. 11 count shares.

They use the one framing of every secemb message (:mod:`secemb.protocols.wire`: the 24-byte
``SEMB`` header with magic, version, protocol id, kind, party, round id and body length),
with protocol id :data:`~secemb.protocols.registry.ENGINE_WIRE_ID` (0): they belong to the
round, whatever protocol runs it.  All integers little-endian.

MODEL (kind ``model_sync``; server 0 -> server 1 after each round's optimizer step, and the
answer to an operator's model request; party 0, the party that computes every version; the
header's round id is the model version)::

    num_items u32, width u32
    table  float64[num_items * width]  (row-major)
    dense  float64[dense_size]          (dense_size = the rest of the body)

DENSE (kind ``dense``; server 0 -> each participating user, start of its round; party 0)::

    dense  ring word[dense_size]  (uint32 or uint64: the round's public ring)

COUNT (kind ``count_share``; Eq. 11 of the paper: a user's share of its rating count to
server b, party b; and server 1's sum of the agreed users' shares to server 0, party 1; round
id 0, the count phase precedes the rounds)::

    value  ring word

RECEIPT (kind ``upload_receipt``; server 1 -> a device, the answer to its upload when devices upload to both
servers (no relay); party 1; the upload's round id), which the device appends, unchanged, to its upload to server 0
(:func:`split_receipt`)::

    user  u64
    mac   bytes[32]  HMAC-SHA256(K, "secemb/upload-receipt/v1" || round_id u64 || user u64),
                     K = HMAC-SHA256(peer_secret, "secemb/upload-receipt/v1 key")

The key is derived from the servers' peer secret (:func:`receipt_key`), which devices never hold: a device cannot
make a receipt, and one receipt names one user of one round of one deployment.

Parsers take the values the receiver expects, check the exact length and every field, and
raise :class:`~secemb.errors.InvalidMessage` on any mismatch.  No pickle anywhere.
"""

from __future__ import annotations

import hmac
import struct

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.framing import ROUND_ID_OFFSET
from secemb.protocols.wire import HEADER_BYTES, frame, open_message

__all__ = [
    "RECEIPT_BYTES",
    "check_receipt",
    "check_receipt_form",
    "decode_count",
    "decode_dense",
    "decode_model",
    "encode_count",
    "encode_dense",
    "encode_model",
    "encode_receipt",
    "model_bytes",
    "model_version",
    "receipt_key",
    "split_receipt",
]

_SHAPE = struct.Struct("<II")
_RING: dict[int, np.dtype] = {32: np.dtype("<u4"), 64: np.dtype("<u8")}
_F64 = np.dtype("<f8")
_U64 = struct.Struct("<Q")


def _ring_dtype(ring_bits: int) -> np.dtype:
    try:
        return _RING[ring_bits]
    except KeyError:
        raise InvalidParameters(f"ring_bits must be 32 or 64, got {ring_bits!r}") from None


def _party(party: int) -> int:
    if party not in (0, 1) or isinstance(party, bool):
        raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
    return party


# ---------------------------------------------------------------------- MODEL


def encode_model(version: int, table: np.ndarray, dense: np.ndarray) -> bytes:
    """Serialize model ``version`` (float64 ``table`` (m, width) and ``dense`` (P,)).  The
    arrays are copied once, into the message (no intermediate bytes where they are already
    contiguous little-endian float64: DeepFM's dense vector at d = 512 is 900 MB)."""
    table = np.asarray(table)
    dense = np.asarray(dense)
    if table.ndim != 2 or dense.ndim != 1:
        raise InvalidParameters(f"table must be 2-D and dense 1-D, got {table.shape}, {dense.shape}")
    m, w = table.shape
    return frame(
        None, "model_sync", 0, version, _SHAPE.pack(m, w),
        np.ascontiguousarray(table, dtype=_F64).data, np.ascontiguousarray(dense, dtype=_F64).data,
    )


def model_bytes(num_items: int, width: int, dense_size: int) -> int:
    """Length of the MODEL message of a model with these sizes."""
    return HEADER_BYTES + _SHAPE.size + 8 * (num_items * width + dense_size)


def model_version(data: bytes) -> int:
    """The version a MODEL message claims (read before :func:`decode_model` checks it).

    Raises
    ------
    InvalidMessage
        ``data`` is shorter than a header.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < HEADER_BYTES:
        raise InvalidMessage("model message: shorter than its header")
    return int(_U64.unpack_from(data, ROUND_ID_OFFSET)[0])


def decode_model(
    data: bytes, *, version: int, num_items: int, width: int, dense_size: int, copy: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Parse the MODEL message of ``version``; return writable float64 ``(table, dense)`` copies
    (``copy=False``: read-only views into ``data``, native float64, for a reader that only
    compares or hashes the model: no second copy of it).

    Raises
    ------
    InvalidMessage
        On a wrong header, version, shape, length, or a non-finite value.
    """
    what = "model message"
    body = open_message(data, None, "model_sync", 0, version, _SHAPE.size + 8 * (num_items * width + dense_size))
    m, w = _SHAPE.unpack_from(body)
    if (m, w) != (num_items, width):
        raise InvalidMessage(f"{what}: shape {m} x {w}, expected {num_items} x {width}")
    values = np.frombuffer(body, dtype=_F64, offset=_SHAPE.size)
    if not np.isfinite(values).all():
        raise InvalidMessage(f"{what}: non-finite parameter")
    table = values[: m * w].reshape(m, w).astype(np.float64, copy=copy)  # copy=False: views (little-endian host)
    dense = values[m * w :].astype(np.float64, copy=copy)
    if not copy:
        table.flags.writeable = dense.flags.writeable = False
    return table, dense


# ---------------------------------------------------------------------- DENSE


def encode_dense(round_id: int, dense: np.ndarray, ring_bits: int) -> bytes:
    """Serialize the ring-encoded dense vector (dtype uint32/uint64 matching ``ring_bits``)."""
    dt = _ring_dtype(ring_bits)
    dense = np.asarray(dense)
    if dense.ndim != 1 or dense.dtype != dt.newbyteorder("="):
        raise InvalidParameters(f"dense must be 1-D of dtype {dt.name}, got {dense.dtype} {dense.shape}")
    return frame(None, "dense", 0, round_id, np.ascontiguousarray(dense, dtype=dt).tobytes())


def decode_dense(data: bytes, *, round_id: int, dense_size: int, ring_bits: int) -> np.ndarray:
    """Parse a DENSE message; return the ring vector (native uint32/uint64, writable)."""
    dt = _ring_dtype(ring_bits)
    body = open_message(data, None, "dense", 0, round_id, dt.itemsize * dense_size)
    return np.frombuffer(body, dtype=dt).astype(dt.newbyteorder("="))


# ---------------------------------------------------------------------- COUNT


def encode_count(share: np.ndarray, ring_bits: int, party: int) -> bytes:
    """Serialize one ring word (a share of a count, shape ``(1,)`` or scalar) for or from
    server ``party``."""
    dt = _ring_dtype(ring_bits)
    arr = np.asarray(share).reshape(-1)
    if arr.size != 1 or arr.dtype != dt.newbyteorder("="):
        raise InvalidParameters(f"count share must be one {dt.name} word, got {arr.dtype} {arr.shape}")
    return frame(None, "count_share", _party(party), 0, arr.astype(dt).tobytes())


def decode_count(data: bytes, *, ring_bits: int, party: int) -> np.ndarray:
    """Parse a COUNT message for or from server ``party``; the ring word, shape ``(1,)``."""
    dt = _ring_dtype(ring_bits)
    body = open_message(data, None, "count_share", _party(party), 0, dt.itemsize)
    return np.frombuffer(body, dtype=dt).astype(dt.newbyteorder("="))


# ---------------------------------------------------------------------- RECEIPT

#: the label of the receipts' MACs, and of their key's derivation from the peer secret
_RECEIPT_LABEL = b"secemb/upload-receipt/v1"
_RECEIPT_BODY = struct.Struct("<Q32s")
#: bytes of a RECEIPT message: the header, the user, the MAC
RECEIPT_BYTES = HEADER_BYTES + _RECEIPT_BODY.size


def receipt_key(peer_secret: bytes) -> bytes:
    """The receipts' 32-byte MAC key, derived from the servers' peer secret (both servers hold it,
    no device does)."""
    return hmac.digest(peer_secret, _RECEIPT_LABEL + b" key", "sha256")


def _receipt_mac(key: bytes, round_id: int, user: int) -> bytes:
    return hmac.digest(key, _RECEIPT_LABEL + struct.pack("<QQ", round_id, user), "sha256")


def encode_receipt(key: bytes, round_id: int, user: int) -> bytes:
    """Server 1: the RECEIPT of ``user``'s upload, absorbed in round ``round_id``, under ``key``
    (:func:`receipt_key`)."""
    return frame(None, "upload_receipt", 1, round_id, _RECEIPT_BODY.pack(user, _receipt_mac(key, round_id, user)))


def split_receipt(body: bytes) -> tuple[bytes, bytes]:
    """Server 0: a device's upload as it arrives when devices upload to both servers -- the
    protocol's upload message followed by server 1's RECEIPT -- as ``(message, receipt)``.

    Raises
    ------
    InvalidMessage: the body is too short to end in a receipt.
    """
    if len(body) <= RECEIPT_BYTES:
        raise InvalidMessage(f"upload: {len(body)} bytes cannot hold an upload and server 1's receipt "
                             f"({RECEIPT_BYTES} bytes)")
    return body[:-RECEIPT_BYTES], body[-RECEIPT_BYTES:]


def check_receipt(key: bytes, data: bytes, *, round_id: int, user: int) -> None:
    """Server 0: refuse a RECEIPT that is not server 1's for ``user``'s upload in round
    ``round_id`` under ``key`` (the MAC compared in constant time).

    Raises
    ------
    InvalidMessage: malformed, another round, user or key.
    """
    try:
        body = open_message(data, None, "upload_receipt", 1, round_id, _RECEIPT_BODY.size)
    except InvalidMessage as exc:
        raise InvalidMessage(f"upload: it does not end in server 1's receipt of round {round_id} ({exc})") from None
    named, mac = _RECEIPT_BODY.unpack(body)
    good = hmac.compare_digest(mac, _receipt_mac(key, round_id, user))
    if named != user or not good:
        raise InvalidMessage(f"upload: server 1's receipt is not for user {user} in round {round_id} of this "
                             "deployment")


def check_receipt_form(data: object, *, round_id: int) -> bytes:
    """A device: server 1's answer to its upload if it is a well-formed RECEIPT of round
    ``round_id`` (its MAC the device cannot check; server 0 does).

    Raises
    ------
    InvalidMessage: server 1 sent no receipt, or a malformed one.
    """
    if not isinstance(data, bytes | bytearray) or len(data) != RECEIPT_BYTES:
        size = len(data) if isinstance(data, bytes | bytearray) else 0
        raise InvalidMessage(f"server 1 answered the upload with {size} bytes, not its {RECEIPT_BYTES}-byte receipt "
                             "(the upload is not sent to server 0)")
    try:
        open_message(bytes(data), None, "upload_receipt", 1, round_id, _RECEIPT_BODY.size)
    except InvalidMessage as exc:
        raise InvalidMessage(f"server 1 answered the upload with a malformed receipt ({exc}; the upload is not sent "
                             "to server 0)") from None
    return bytes(data)
