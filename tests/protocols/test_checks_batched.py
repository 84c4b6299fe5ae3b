"""Issue 37: a server hashes the key digests and challenge seeds of a range of requests at once
(``checks.key_digests`` / ``checks.challenge_seeds``): each the documented formula of one
user's (docs/security.md: SHA-256 of the serialized shared part and check words; the seed
``SHA-256(b"secemb-verify-challenge" || u64 round || K)[:16]``), computed here with hashlib."""

from __future__ import annotations

import hashlib

import numpy as np

from secemb import fss
from secemb.protocols.secemb.checks import challenge_seeds, key_digests
from secemb.randomness import CtrDrbg

M, K, D = 300, 3, 1


def test_batched_digests_and_seeds_are_the_documented_formulas() -> None:
    head = fss.DPFKeys.shared_header(M, K, D, 32)
    shared, checks, rest = [], [], []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        keys = fss.gen(rng.integers(0, M, K), np.ones((K, D), np.uint32), M, ring_bits=32, _rng=CtrDrbg(seed))[0]
        shared.append(keys.shared_bytes())
        checks.append(rng.integers(0, 256, 32 * K, dtype=np.uint8).tobytes())
        rest.append(shared[-1][len(head) :] + checks[-1])
    rows = np.frombuffer(b"".join(rest), np.uint8).reshape(4, -1)
    digests = key_digests(head, rows)
    assert digests == [hashlib.sha256(s + c).digest() for s, c in zip(shared, checks, strict=True)]
    seeds = challenge_seeds(7, digests)
    assert seeds.dtype == np.uint64 and seeds.shape == (4, 2)
    for d, s in zip(digests, seeds, strict=True):
        want = hashlib.sha256(b"secemb-verify-challenge" + (7).to_bytes(8, "little") + d).digest()[:16]
        assert s.tobytes() == want
    assert challenge_seeds(7, []).shape == (0, 2)
