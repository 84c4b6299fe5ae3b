"""SecAggMask, TopkSecAgg and CKKS message builders: aggregates and message sizes."""

import numpy as np
import pytest

from secemb.protocols.sparse_secagg import SecAggMaskRound, TopkSecAggRound, mask_probability


def _grads(n=6, m=40, w=3, seed=0):
    g = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a = np.zeros((m, w), np.uint32)
        rows = g.choice(m, 5, replace=False)
        a[rows] = g.integers(1, 2**32, (5, w), dtype=np.uint64).astype(np.uint32)
        out.append(a)
    dense = [g.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32) for _ in range(n)]
    return out, dense


def test_mask_probability():
    q = mask_probability(0.6, 100)
    assert abs(1 - (1 - q) ** 99 - 0.6) < 1e-12


def test_secaggmask_masks_cancel_and_bitmap_size():
    grads, dense = _grads()
    r = SecAggMaskRound(len(grads), grads[0].size, 2)
    msgs = [r.upload(u, g.reshape(-1), d) for u, (g, d) in enumerate(zip(grads, dense))]
    total, dsum = r.aggregate(msgs)
    assert np.array_equal(total, np.sum(grads, axis=0, dtype=np.uint32).reshape(-1))
    assert np.array_equal(dsum, np.sum(dense, axis=0, dtype=np.uint32))
    for msg, g in zip(msgs, grads):
        sent = np.unpackbits(np.frombuffer(msg, np.uint8, -(-g.size // 8)))[: g.size].astype(bool)
        assert np.all(sent[g.reshape(-1) != 0])  # every non-zero coordinate is sent
        assert len(msg) == -(-g.size // 8) + 4 * int(sent.sum()) + 4 * 2


def test_topksecagg_union_and_sizes():
    grads, dense = _grads()
    rng = np.random.default_rng(1)
    r = TopkSecAggRound(len(grads), 40, 3, 2)
    idx = [r.index_message(u, np.flatnonzero(g.any(1)), rng) for u, g in enumerate(grads)]
    assert all(len(b) == 4 * (5 + 1) for b in idx)  # 5 rows + ceil(0.1 * 5) extra
    union = r.publish_union()
    vals = [r.value_message(u, g, d) for u, (g, d) in enumerate(zip(grads, dense))]
    assert all(len(v) == 4 * (len(union) // 4 * 3 + 2) for v in vals)
    total, dsum = r.aggregate(vals)
    assert np.array_equal(total, np.sum(grads, axis=0, dtype=np.uint32))
    assert np.array_equal(dsum, np.sum(dense, axis=0, dtype=np.uint32))


def test_ckks_aggregate_within_documented_error():
    pytest.importorskip("tenseal")
    from secemb.protocols.sparse_secagg import CkksAggregator

    agg = CkksAggregator()
    g = np.random.default_rng(0)
    vecs = [g.normal(0, 0.01, 5000) for _ in range(3)]
    cts = [agg.encrypt(v) for v in vecs]
    assert len(cts[0]) == 2  # 4096 slots per ciphertext
    out, secs = agg.aggregate(cts)
    assert np.abs(agg.decrypt(out, 5000) - np.sum(vecs, axis=0)).max() < 1e-5
    assert secs > 0
