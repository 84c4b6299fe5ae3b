"""The plaintext protocol: a full round, exact sums, message validation, stage order (the
registry: tests/protocols/test_registry.py)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols import RoundConfig
from secemb.protocols.plaintext import PlaintextProtocol

CFG = RoundConfig(round_id=3, num_items=20, width=5, dense_size=2, m_prime=6, ring_bits=32)


def _servers(cfg=CFG, seed=0):
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 2**32, size=(cfg.num_items, cfg.width), dtype=np.uint64).astype(
        cfg.dtype
    )
    proto = PlaintextProtocol()
    s0, s1 = proto.make_server(0), proto.make_server(1)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    return proto, s0, s1, table, rng


def _retrieve(proto, s0, s1, uid, indices, cfg=CFG):
    user = proto.make_user(cfg)
    q0, q1 = user.retrieval_request(indices)
    rows = user.retrieval_result(s0.handle_retrieval(uid, q0), s1.handle_retrieval(uid, q1))
    return user, rows


def test_round_retrieves_rows_and_sums_exactly():
    proto, s0, s1, table, rng = _servers()
    direct = np.zeros((CFG.num_items, CFG.width), CFG.dtype)
    direct_dense = np.zeros(CFG.dense_size, CFG.dtype)
    for uid in range(4):
        idx = rng.choice(CFG.num_items, CFG.m_prime, replace=False)
        user, rows = _retrieve(proto, s0, s1, uid, idx)
        assert rows.dtype == CFG.dtype and np.array_equal(rows, table[idx])
        grads = rng.integers(0, 2**32, size=(CFG.m_prime, CFG.width), dtype=np.uint64).astype(
            CFG.dtype
        )
        dense = rng.integers(0, 2**32, size=CFG.dense_size, dtype=np.uint64).astype(CFG.dtype)
        u0, u1 = user.upload(grads, dense)
        s0.handle_upload(uid, u0)
        s1.handle_upload(uid, u1)
        np.add.at(direct, idx, grads)
        direct_dense += dense
    sparse, dense_sum = s0.combine(s1.aggregate_share())
    assert np.array_equal(sparse, direct) and np.array_equal(dense_sum, direct_dense)


def test_sixty_four_bit_ring():
    cfg = RoundConfig(0, 10, 3, 1, 4, ring_bits=64)
    proto, s0, s1, table, _rng = _servers(cfg)
    _user, rows = _retrieve(proto, s0, s1, 9, np.array([0, 9, 4, 2]), cfg)
    assert rows.dtype == np.uint64 and np.array_equal(rows, table[[0, 9, 4, 2]])


def test_message_sizes_are_fixed_by_the_round():
    proto, s0, s1, _, _ = _servers()
    user = proto.make_user(CFG)
    q0, q1 = user.retrieval_request(np.arange(6))
    assert len(q0) == 32 + 4 * CFG.m_prime and len(q1) == 32  # the 32-byte header (docs/wire-format.md)
    r0, r1 = s0.handle_retrieval(1, q0), s1.handle_retrieval(1, q1)
    assert len(r0) == 32 + 4 * CFG.m_prime * CFG.width and len(r1) == 32
    user.retrieval_result(r0, r1)
    u0, u1 = user.upload(np.zeros((6, 5), np.uint32), np.zeros(2, np.uint32))
    assert len(u0) == 32 + 4 * (6 * 5 + 2) and len(u1) == 32
    assert len(s1.aggregate_share()) == 32 + 4 * (20 * 5 + 2)


def _mutations(msg: bytes):
    yield "truncated", msg[:-1]
    yield "oversized", msg + b"\0"
    yield "empty", b""
    yield "header only", msg[:10]
    yield "magic", b"XXXX" + msg[4:]
    yield "version", msg[:4] + bytes([msg[4] + 1]) + msg[5:]
    yield "protocol", msg[:5] + bytes([2]) + msg[6:]
    yield "kind", msg[:6] + bytes([msg[6] % 6 + 1]) + msg[7:]
    yield "party", msg[:7] + bytes([1 - msg[7]]) + msg[8:]
    yield "round", msg[:8] + bytes([msg[8] + 1]) + msg[9:]
    yield "body length", msg[:16] + bytes([msg[16] + 1]) + msg[17:]


def test_bad_retrieval_requests_raise_invalid_message_and_change_nothing():
    proto, s0, s1, _, _ = _servers()
    user = proto.make_user(CFG)
    q0, q1 = user.retrieval_request(np.arange(6))
    for name, bad in _mutations(q0):
        with pytest.raises(InvalidMessage):
            s0.handle_retrieval(1, bad)
    for name, bad in _mutations(q1):
        with pytest.raises(InvalidMessage):
            s1.handle_retrieval(1, bad)
    # out-of-range index inside an otherwise valid frame
    bad_idx = q0[:24] + np.full(6, 20, np.uint32).tobytes()
    with pytest.raises(InvalidMessage):
        s0.handle_retrieval(1, bad_idx)
    with pytest.raises(InvalidMessage):
        s0.handle_retrieval(1, "not bytes")  # type: ignore[arg-type]
    # nothing was recorded: the real request still goes through
    user.retrieval_result(s0.handle_retrieval(1, q0), s1.handle_retrieval(1, q1))


def test_bad_replies_uploads_and_shares_raise_invalid_message():
    proto, s0, s1, _, _ = _servers()
    user = proto.make_user(CFG)
    q0, q1 = user.retrieval_request(np.arange(6))
    r0, r1 = s0.handle_retrieval(1, q0), s1.handle_retrieval(1, q1)
    for _, bad in _mutations(r0):
        with pytest.raises(InvalidMessage):
            user.retrieval_result(bad, r1)
    for _, bad in _mutations(r1):
        with pytest.raises(InvalidMessage):
            user.retrieval_result(r0, bad)
    user.retrieval_result(r0, r1)
    g = np.ones((6, 5), np.uint32)
    u0, u1 = user.upload(g, np.ones(2, np.uint32))
    for _, bad in _mutations(u0):
        with pytest.raises(InvalidMessage):
            s0.handle_upload(1, bad)
    for _, bad in _mutations(u1):
        with pytest.raises(InvalidMessage):
            s1.handle_upload(1, bad)
    s0.handle_upload(1, u0)
    s1.handle_upload(1, u1)
    share = s1.aggregate_share()
    for _, bad in _mutations(share):
        with pytest.raises(InvalidMessage):
            s0.combine(bad)
    sparse, dense = s0.combine(share)
    assert sparse.sum() == 30 and dense.sum() == 2  # each rejected upload changed nothing


def test_stage_order_is_enforced():
    proto, s0, s1, _, _ = _servers()
    user = proto.make_user(CFG)
    with pytest.raises(ProtocolError):
        user.retrieval_result(b"", b"")
    with pytest.raises(ProtocolError):
        user.upload(np.zeros((6, 5), np.uint32), np.zeros(2, np.uint32))
    q0, _q1 = user.retrieval_request(np.arange(6))
    with pytest.raises(ProtocolError):
        user.retrieval_request(np.arange(6))
    with pytest.raises(ProtocolError):
        s0.handle_upload(1, b"")  # before retrieval
    s0.handle_retrieval(1, q0)
    with pytest.raises(ProtocolError):
        s0.handle_retrieval(1, q0)  # twice
    with pytest.raises(InvalidMessage):
        s1.combine(b"")  # either server combines (issue 33); an empty share is malformed
    with pytest.raises(ProtocolError):
        s0.begin_round(RoundConfig(2, 20, 5, 2, 6), np.zeros((20, 5), np.uint32))  # going back
    with pytest.raises(ProtocolError):
        proto.make_server(0).handle_retrieval(1, q0)  # no round


def test_user_rejects_bad_local_arguments():
    proto = PlaintextProtocol()
    user = proto.make_user(CFG)
    with pytest.raises(InvalidParameters):
        user.retrieval_request(np.arange(5))
    with pytest.raises(InvalidParameters):
        user.retrieval_request(np.array([0, 1, 2, 3, 4, 20]))
    with pytest.raises(InvalidParameters):
        proto.make_server(2)
    _, s0, s1, _, _ = _servers()
    user, _ = _retrieve(proto, s0, s1, 1, np.arange(6))
    with pytest.raises(TypeError):
        user.upload(np.zeros((6, 5), np.float64), np.zeros(2, np.uint32))
    with pytest.raises(InvalidParameters):
        user.upload(np.zeros((5, 5), np.uint32), np.zeros(2, np.uint32))
