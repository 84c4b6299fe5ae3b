"""secemb.fss.rangeproof (session 27, helper F): the joint randomness each verifier message ends
with, and the parameters' sizes computed once an instance.

The joint randomness is recomputed here from the devices' message bytes with hashlib alone
(``SHA-256(domain || "joint" || framed(context, part_0, part_1))``, the module docstring's
definition), not with the module's helpers."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np

from secemb.fss import rangeproof as R
from secemb.randomness import CtrDrbg

K = 32
PARAMS = R.RangeParams(rows=5, bits=10, ring_bits=K)
DOMAIN = b"secemb/fss/rangeproof/v1/"


def _framed(*items: bytes) -> bytes:
    return b"".join(len(x).to_bytes(8, "little") + x for x in items)


def _batch(n: int):
    """n honest proofs of small values: (msg0s, msg1s, a rows, b rows, contexts)."""
    gen = np.random.default_rng(11)  # the statements' values only, not secrets
    out: tuple[list, list, list, list, list] = ([], [], [], [], [])
    for i in range(n):
        values = gen.integers(-(2**8), 2**8, PARAMS.rows)
        a = gen.integers(0, 2**K, PARAMS.rows).astype(np.uint64)
        b = ((values - a.astype(np.int64)) % 2**K).astype(np.uint64)
        ctx = b"round 3 device %d" % i
        m0, m1 = R.prove(PARAMS, a, b, ctx, _rng=CtrDrbg(100 + i))
        for acc, v in zip(out, (m0, m1, a, b, ctx), strict=True):
            acc.append(v)
    return out


def test_each_verifier_message_ends_with_the_devices_joint_randomness():
    msg0, msg1, a, b, ctx = _batch(3)
    s0, s1 = R.parse(PARAMS, 0, msg0), R.parse(PARAMS, 1, msg1)
    query = b"q" * 16
    expected = []
    for m0, m1, c in zip(msg0, msg1, ctx, strict=True):
        part1, part0 = m0[16:48], m1[16:48]  # msg0 = blind_0 || part_1 || ...; msg1 = seed_1 || part_0
        expected.append(np.frombuffer(hashlib.sha256(DOMAIN + b"joint" + _framed(c, part0, part1)).digest(), "<u8"))
    want = np.stack(expected)
    hints = [R.hint_of(PARAMS, c, m) for c, m in zip(ctx, msg0, strict=True)]
    seeds = [R.seed_part(c, m[:16]) for c, m in zip(ctx, msg1, strict=True)]
    v0 = R.verifier_messages(PARAMS, 0, s0, np.stack(a), ctx, query)
    v1 = R.verifier_messages(PARAMS, 1, s1, np.stack(b), ctx, query)
    assert np.array_equal(v0[:, PARAMS.opened_length :], want)
    assert np.array_equal(v1[:, PARAMS.opened_length :], want)
    # the parts passed in (as the servers do) give the same messages, and the batch passes
    assert np.array_equal(R.verifier_messages(PARAMS, 0, s0, np.stack(a), ctx, query, parts=hints), v0)
    assert np.array_equal(R.verifier_messages(PARAMS, 1, s1, np.stack(b), ctx, query, parts=seeds), v1)
    assert R.decide(PARAMS, v0, v1).tolist() == [True] * 3
    # one device's messages alone are its row of the batch's
    one = R.verifier_messages(PARAMS, 0, s0.rows(1, 2), np.stack(a)[1:2], ctx[1:2], query)
    assert np.array_equal(one, v0[1:2])


def test_sizes_are_computed_once_and_do_not_change_equality():
    p = R.RangeParams(rows=40, bits=26, ring_bits=32)
    m = (26 + 1) // 2
    n = 40 * (m + 1)
    c = p.chunk
    half = -(-n // c)
    sizes = (p.witness_length, p.half_calls, p.calls, p.wires, p.gadget_nodes, p.proof_length,
             p.message_bytes(0), p.message_bytes(1), p.opened_length, p.verifier_length, p.verifier_bytes)
    proof = 2 * 2 * c + 4 * 2 * half + 5
    assert sizes == (n, half, 2 * half, 2 * c, 4 * 2 * half + 5, proof, 16 + 32 + 8 * (n + proof), 48,
                     2 * 2 * c + 3, 2 * 2 * c + 7, 8 * (2 * 2 * c + 7))
    fresh = R.RangeParams(rows=40, bits=26, ring_bits=32)
    assert fresh == p and hash(fresh) == hash(p)  # the cached sizes are not fields
    assert pickle.loads(pickle.dumps(p)) == p
    assert (p.witness_length, p.message_bytes(0)) == sizes[:1] + sizes[6:7]  # read again: the same
