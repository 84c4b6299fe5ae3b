"""The training loop's own messages: model sync, dense download, Eq. 11 count shares."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage
from secemb.training import messages as msg


def _mutations(data: bytes):
    yield data[:-1]
    yield data + b"\0"
    yield b""
    yield data[:7]
    yield b"XXXX" + data[4:]
    yield data[:4] + bytes([data[4] + 1]) + data[5:]  # version
    yield data[:5] + bytes([data[5] % 3 + 1]) + data[6:]  # kind
    yield data[:6] + b"\1" + data[7:]  # reserved


def test_model_round_trip_and_validation():
    rng = np.random.default_rng(0)
    table, dense = rng.normal(size=(7, 3)), rng.normal(size=2)
    data = msg.encode_model(4, table, dense)
    assert len(data) == 8 + 24 + 8 * (21 + 2)
    t, d = msg.decode_model(data, round_id=4, num_items=7, width=3, dense_size=2)
    assert np.array_equal(t, table) and np.array_equal(d, dense)
    t[0, 0] = 99.0  # writable copy
    for bad in _mutations(data):
        with pytest.raises(InvalidMessage):
            msg.decode_model(bad, round_id=4, num_items=7, width=3, dense_size=2)
    for kw in ({"round_id": 5}, {"num_items": 6}, {"width": 4}, {"dense_size": 1}):
        args = {"round_id": 4, "num_items": 7, "width": 3, "dense_size": 2, **kw}
        with pytest.raises(InvalidMessage):
            msg.decode_model(data, **args)
    nan = msg.encode_model(4, np.full((7, 3), np.nan), dense)
    with pytest.raises(InvalidMessage):
        msg.decode_model(nan, round_id=4, num_items=7, width=3, dense_size=2)


@pytest.mark.parametrize("bits,dtype", [(32, np.uint32), (64, np.uint64)])
def test_dense_and_count_round_trip(bits, dtype):
    dense = np.array([1, 2**bits - 1, 7], dtype=dtype)
    data = msg.encode_dense(9, dense, bits)
    out = msg.decode_dense(data, round_id=9, dense_size=3, ring_bits=bits)
    assert out.dtype == dtype and np.array_equal(out, dense)
    for bad in _mutations(data):
        with pytest.raises(InvalidMessage):
            msg.decode_dense(bad, round_id=9, dense_size=3, ring_bits=bits)
    with pytest.raises(InvalidMessage):
        msg.decode_dense(data, round_id=8, dense_size=3, ring_bits=bits)
    c = msg.encode_count(np.array([12345], dtype=dtype), bits)
    assert msg.decode_count(c, ring_bits=bits)[0] == 12345
    for bad in _mutations(c):
        with pytest.raises(InvalidMessage):
            msg.decode_count(bad, ring_bits=bits)
    other = 64 if bits == 32 else 32
    with pytest.raises(InvalidMessage):
        msg.decode_count(c, ring_bits=other)
