"""Byte layouts of SFSL's own messages (little-endian; docs/sfsl.md).  The private set union
and the secure sums travel in :mod:`secemb.secagg`'s messages.

Both are framed by the one framing (:mod:`secemb.framing`, 32-byte header): protocol id
:data:`WIRE_ID` (SFSL's registered wire id), kind :data:`KINDS`, party and peer 0, the round id.

Bodies::

    request   count uint32, count x goods id uint32 (strictly increasing)     client -> server
    reply     k x d float32 goods rows, c x d float32 category rows,
              m float32 dense layers                                          server -> client

``request`` names the perturbed set S''; ``reply`` is the submodel W_{S''}: its goods rows in
the order of the request, the rows of their categories (ascending category ids, derived from
S'' through the public goods -> category map by both sides) and the dense layers.  The shapes
are fixed by the request and public parameters, never read from the reply.  A parser raises
:class:`~secemb.errors.InvalidMessage` on any mismatch.
"""

from __future__ import annotations

import struct

import numpy as np

from secemb.errors import InvalidMessage
from secemb.framing import HEADER_BYTES, frame, open_frame
from secemb.protocols.names import wire_id

__all__ = ["HEADER_BYTES", "KINDS", "WIRE_ID", "open_reply", "open_request", "reply", "reply_bytes", "request"]

#: SFSL's wire id: the protocol byte of its messages, registered with ``sfsl`` (secemb.protocols)
WIRE_ID = wire_id("sfsl")
KINDS = {"request": 1, "reply": 2}


def _frame(kind: str, round_id: int, body: bytes) -> bytes:
    return frame(WIRE_ID, KINDS[kind], 0, 0, round_id, body)


def _open(data: bytes, kind: str, round_id: int) -> memoryview:
    return open_frame(data, WIRE_ID, KINDS[kind], f"sfsl {kind}", round_id, 0, 0)[3]


def request(round_id: int, goods: np.ndarray) -> bytes:
    """The client's request for the rows of ``goods`` (int64, strictly increasing)."""
    a = np.asarray(goods, dtype="<u4")
    return _frame("request", round_id, struct.pack("<I", a.size) + a.tobytes())


def open_request(data: bytes, round_id: int, num_goods: int) -> np.ndarray:
    """The goods ids of a request: int64, strictly increasing, below ``num_goods``."""
    body = _open(data, "request", round_id)
    if len(body) < 4:
        raise InvalidMessage("sfsl request: no count")
    (count,) = struct.unpack_from("<I", body)
    if len(body) != 4 + 4 * count:
        raise InvalidMessage(f"sfsl request: {len(body)} body bytes for {count} ids")
    ids = np.frombuffer(body[4:], dtype="<u4").astype(np.int64)
    if ids.size and (np.any(np.diff(ids) <= 0) or int(ids[-1]) >= num_goods):
        raise InvalidMessage(f"sfsl request: ids must be strictly increasing and below {num_goods}")
    return ids


def reply(round_id: int, goods_rows: np.ndarray, category_rows: np.ndarray, dense: np.ndarray) -> bytes:
    """The submodel: ``goods_rows`` (k, d), ``category_rows`` (c, d), ``dense`` (m,), sent as
    float32."""
    parts = [np.ascontiguousarray(a, dtype="<f4").tobytes() for a in (goods_rows, category_rows, dense)]
    return _frame("reply", round_id, b"".join(parts))


def reply_bytes(k: int, c: int, d: int, m: int) -> int:
    """The length of a reply of ``k`` goods rows and ``c`` category rows of ``d`` values and ``m``
    dense values: ``32 + 4 (k d + c d + m)``."""
    return HEADER_BYTES + 4 * (k * d + c * d + m)


def open_reply(data: bytes, round_id: int, k: int, c: int, d: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(goods_rows (k, d), category_rows (c, d), dense (m,))`` float64 of a reply whose shapes
    the client knows from its request."""
    body = _open(data, "reply", round_id)
    want = 4 * (k * d + c * d + m)
    if len(body) != want:
        raise InvalidMessage(f"sfsl reply: {len(body)} body bytes, expected {want}")
    a = np.frombuffer(body, dtype="<f4").astype(np.float64)
    if not np.isfinite(a).all():
        raise InvalidMessage("sfsl reply: non-finite parameters")
    return a[:k * d].reshape(k, d), a[k * d:(k + c) * d].reshape(c, d), a[(k + c) * d:]
