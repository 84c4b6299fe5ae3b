"""Uploads absorbed from the caller's buffer: a server keeps the correction words as a view only
of bytes (immutable); a buffer the caller may change afterwards is copied, so changing it does
not change the aggregate."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.randomness import CtrDrbg


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_changing_an_upload_buffer_after_the_call_leaves_the_aggregate(kind: type, secemb_round) -> None:
    proto, cfg, rng, table, s0, s1 = secemb_round(layout="cuckoo", relay=True, round_id=1, num_items=300, width=5,
                                                  dense_size=2, m_prime=12, seed=11)
    expected = np.zeros((300, 5), np.uint32)
    sent: list[bytes | bytearray] = []
    for u in range(3):
        user = proto.make_user(cfg, _rng=CtrDrbg(u))
        slots, _ = cfg.cuckoo().assign(rng.choice(300, 12, replace=False), rng)
        r0, r1 = user.retrieval_request(slots)
        assert s1.handle_retrieval(u, r1) is None
        fwd = s0.handle_retrieval(u, r0)
        reply = s0.complete_retrieval(u, s1.relay_retrieval(u, fwd))
        assert np.array_equal(user.retrieval_result(reply, None)[slots >= 0], table[slots[slots >= 0]])
        grads = np.zeros((cfg.slots, 5), np.uint32)
        real = slots >= 0
        grads[real] = rng.integers(0, 2**32, (int(real.sum()), 5), dtype=np.uint64).astype(np.uint32)
        np.add.at(expected, slots[real], grads[real])
        up0, _ = user.upload(grads, np.arange(2, dtype=np.uint32))
        sent.append(kind(up0))
        forward = s0.handle_upload(u, sent[-1])
        sent.append(kind(forward))
        s1.relay_upload(u, sent[-1])
    for buf in sent:  # the caller reuses its buffers
        if isinstance(buf, bytearray):
            buf[:] = bytes(len(buf))
    sparse, dense = s0.combine(s1.aggregate_share())
    assert np.array_equal(sparse, expected)
    assert np.array_equal(dense, np.arange(2, dtype=np.uint32) * 3)
