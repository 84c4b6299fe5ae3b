"""The round's own messages (model sync, dense download, Eq. 11 count shares), in the one
framing of every secemb message (the 24-byte SEMB header, protocol id 0)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.protocols.wire import HEADER_BYTES
from secemb.round import messages as msg


def _mutations(data: bytes):
    yield data[:-1]
    yield data + b"\0"
    yield b""
    yield data[:7]
    yield b"XXXX" + data[4:]
    yield data[:4] + bytes([data[4] + 1]) + data[5:]  # version
    yield data[:5] + bytes([data[5] + 1]) + data[6:]  # protocol id (0: the round's own)
    yield data[:6] + bytes([data[6] % 9 + 1]) + data[7:]  # kind
    yield data[:7] + bytes([data[7] ^ 1]) + data[8:]  # flags (docs/wire-format.md offsets)
    yield data[:8] + bytes([data[8] ^ 1]) + data[9:]  # party
    yield data[:12] + bytes([data[12] ^ 1]) + data[13:]  # peer
    yield data[:16] + struct.pack("<Q", struct.unpack_from("<Q", data, 16)[0] + 1) + data[24:]  # round / version
    yield data[:24] + struct.pack("<Q", struct.unpack_from("<Q", data, 24)[0] + 1) + data[32:]  # body length


def test_model_round_trip_and_validation():
    rng = np.random.default_rng(0)
    table, dense = rng.normal(size=(7, 3)), rng.normal(size=2)
    data = msg.encode_model(4, table, dense)
    # header, num_items and width, then the float64 values: the size of the old SETR framing
    assert len(data) == HEADER_BYTES + 8 + 8 * (21 + 2) == msg.model_bytes(7, 3, 2)
    assert data[:4] == b"SEMB" and data[5] == 0 and msg.model_version(data) == 4
    t, d = msg.decode_model(data, version=4, num_items=7, width=3, dense_size=2)
    assert np.array_equal(t, table) and np.array_equal(d, dense)
    t[0, 0] = 99.0  # writable copy
    for bad in _mutations(data):
        with pytest.raises(InvalidMessage):
            msg.decode_model(bad, version=4, num_items=7, width=3, dense_size=2)
    for kw in ({"version": 5}, {"num_items": 6}, {"width": 4}, {"dense_size": 1}):
        args = {"version": 4, "num_items": 7, "width": 3, "dense_size": 2, **kw}
        with pytest.raises(InvalidMessage):
            msg.decode_model(data, **args)
    # same body length, other shape: refused by the shape fields
    with pytest.raises(InvalidMessage, match="shape"):
        msg.decode_model(msg.encode_model(4, rng.normal(size=(3, 7)), dense), version=4, num_items=7, width=3,
                         dense_size=2)
    nan = msg.encode_model(4, np.full((7, 3), np.nan), dense)
    with pytest.raises(InvalidMessage):
        msg.decode_model(nan, version=4, num_items=7, width=3, dense_size=2)
    with pytest.raises(InvalidMessage):
        msg.model_version(b"SEMB")


@pytest.mark.parametrize("bits,dtype", [(32, np.uint32), (64, np.uint64)])
def test_dense_and_count_round_trip(bits, dtype):
    dense = np.array([1, 2**bits - 1, 7], dtype=dtype)
    data = msg.encode_dense(9, dense, bits)
    assert len(data) == HEADER_BYTES + 3 * bits // 8
    out = msg.decode_dense(data, round_id=9, dense_size=3, ring_bits=bits)
    assert out.dtype == dtype and np.array_equal(out, dense)
    for bad in _mutations(data):
        with pytest.raises(InvalidMessage):
            msg.decode_dense(bad, round_id=9, dense_size=3, ring_bits=bits)
    with pytest.raises(InvalidMessage):
        msg.decode_dense(data, round_id=8, dense_size=3, ring_bits=bits)
    for party in (0, 1):
        c = msg.encode_count(np.array([12345], dtype=dtype), bits, party)
        assert len(c) == HEADER_BYTES + bits // 8
        assert msg.decode_count(c, ring_bits=bits, party=party)[0] == 12345
        for bad in _mutations(c):
            with pytest.raises(InvalidMessage):
                msg.decode_count(bad, ring_bits=bits, party=party)
        with pytest.raises(InvalidMessage, match="party"):  # a share for the other server
            msg.decode_count(c, ring_bits=bits, party=1 - party)
    other = 64 if bits == 32 else 32
    with pytest.raises(InvalidMessage):
        msg.decode_count(c, ring_bits=other, party=1)
    with pytest.raises(InvalidParameters):
        msg.encode_count(np.array([1, 2], dtype=dtype), bits, 0)
    with pytest.raises(InvalidParameters):
        msg.encode_count(np.array([1], dtype=dtype), bits, 2)
