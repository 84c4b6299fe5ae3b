"""Issue 37: a server hashes the key digests and challenge seeds of a range of requests at once
(``checks.key_digests`` / ``checks.challenge_seeds``): each equal to the one-user functions'
(``key_digest`` of the serialized shared part and check words, ``challenge_seed``)."""

from __future__ import annotations

import hashlib

import numpy as np

from secemb import fss
from secemb.protocols.secemb.checks import challenge_seed, challenge_seeds, key_digest, key_digests
from secemb.randomness import CtrDrbg

M, K, D = 300, 3, 1


def test_batched_digests_and_seeds_equal_the_one_user_functions() -> None:
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
    assert digests == [key_digest(s, c) for s, c in zip(shared, checks, strict=True)]
    assert digests[0] == hashlib.sha256(shared[0] + checks[0]).digest()  # the documented formula
    seeds = challenge_seeds(7, digests)
    assert seeds.dtype == np.uint64 and seeds.shape == (4, 2)
    for d, s in zip(digests, seeds, strict=True):
        assert np.array_equal(s, challenge_seed(7, d))
    assert challenge_seeds(7, []).shape == (0, 2)
