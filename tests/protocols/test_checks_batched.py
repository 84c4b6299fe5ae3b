"""Issue 37 and 34: a server hashes the key digests of a range of requests at once
(``checks.key_digests``), and derives the sketch check's secrets per round and device
(``checks.round_secret``, ``sketch_seeds``, ``sketch_halves``, ``query_seeds``, ``binding``): each
the documented formula (docs/security.md, "A sound sketch with the challenge drawn at retrieval";
``key_digests``: SHA-256 of the serialized shared key part), computed here with hashlib and hmac."""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.protocols.secemb.checks import (
    binding,
    key_digests,
    query_seeds,
    relay_subkey,
    relay_subkeys,
    round_secret,
    seed_tag,
    seed_tags,
    sketch_halves,
    sketch_seeds,
)
from secemb.randomness import CtrDrbg

M, K, D = 300, 3, 1


def _u64(v: int) -> bytes:
    return v.to_bytes(8, "little")


def test_batched_digests_are_the_documented_formula() -> None:
    head = fss.DPFKeys.shared_header(M, K, D, 32)
    shared, rest = [], []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        keys = fss.gen(rng.integers(0, M, K), np.ones((K, D), np.uint32), M, ring_bits=32, _rng=CtrDrbg(seed))[0]
        shared.append(keys.shared_bytes())
        rest.append(shared[-1][len(head) :])
    rows = np.frombuffer(b"".join(rest), np.uint8).reshape(4, -1)
    assert key_digests(head, rows) == [hashlib.sha256(s).digest() for s in shared]


def test_sketch_secrets_are_the_documented_formulas() -> None:
    key = bytes(range(32))
    s_round = round_secret(key, 7)
    assert s_round == hmac.new(key, b"secemb-sketch-round" + _u64(7), "sha256").digest()
    assert round_secret(key, 8) != s_round
    users, digests = [3, 2**40 + 1], [b"D" * 32, b"E" * 32]
    seeds = sketch_seeds(s_round, 7, users, digests)
    assert seeds == [hmac.new(s_round, b"secemb-sketch" + _u64(7) + _u64(u) + d, "sha256").digest()[:16]
                     for u, d in zip(users, digests, strict=True)]
    halves = sketch_halves(s_round, 7, users, digests)
    for (h0, h1), u, d in zip(halves, users, digests, strict=True):
        for b, h in ((0, h0), (1, h1)):
            want = hmac.new(s_round, b"secemb-sketch-half" + bytes([b]) + _u64(7) + _u64(u) + d, "sha256").digest()
            assert h == want[:16]
    assert query_seeds(s_round, 7, users) == [
        hmac.new(s_round, b"secemb-sketch-query" + _u64(7) + _u64(u), "sha256").digest()[:16] for u in users]
    assert binding(7, b"c" * 16, b"s" * 16) == hashlib.sha256(b"secemb-sketch-bind" + _u64(7) + b"c" * 16
                                                              + b"s" * 16).digest()
    assert sketch_seeds(s_round, 7, [], []) == [] and sketch_halves(s_round, 7, [], []) == []


@pytest.mark.parametrize("key", [b"", b"k" * 31, b"k" * 33, "k" * 32])
def test_a_sketch_key_of_another_length_or_type_is_refused(key: object) -> None:
    with pytest.raises(InvalidParameters, match="32 bytes"):
        round_secret(key, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 20])
def test_batched_seed_tags_and_relay_subkeys_are_the_documented_formulas(n: int) -> None:
    """Server 1 tags a batch's sketch seeds at once (``checks.seed_tags``: the sub-keys one
    ``relay_subkeys`` batch, the tags one batch of HMACs under them): the bytes of ``seed_tag`` and
    ``relay_subkey`` a device, each computed here with hmac from its documented formula.  Mutation:
    the outer pad 0x36 in ``_shani._hmac_rows`` (a key a row) fails every n > 0."""
    keys = [bytes([i]) * 8 + bytes(range(i, i + 8)) for i in range(n)]
    seeds = [bytes([255 - i]) * 16 for i in range(n)]
    sub = [hmac.new(k, b"secemb-relay-subkey-seed-tag", "sha256").digest() for k in keys]
    want = [hmac.new(s, b"secemb-sketch-seed-tag" + _u64(9) + c, "sha256").digest()[:16]
            for s, c in zip(sub, seeds, strict=True)]
    assert seed_tags(keys, 9, seeds) == want == [seed_tag(k, 9, c) for k, c in zip(keys, seeds, strict=True)]
    for use, size in (("seed-tag", 32), ("upload-gmac", 16)):
        rows = relay_subkeys(keys, use)  # type: ignore[arg-type]
        assert rows.shape == (n, size)
        assert [bytes(r) for r in rows] == [relay_subkey(k, use) for k in keys]  # type: ignore[arg-type]


@pytest.mark.parametrize(("keys", "seeds"), [([b"k" * 15], [b"c" * 16]), ([b"k" * 16], [b"c" * 15]),
                                             ([b"k" * 16] * 2, [b"c" * 16]), ([b"k" * 17], [b"c" * 16])])
def test_batched_seed_tags_refuse_keys_and_seeds_of_other_lengths(keys: list[bytes], seeds: list[bytes]) -> None:
    with pytest.raises(InvalidParameters):
        seed_tags(keys, 9, seeds)


def test_batched_relay_subkeys_refuse_another_use() -> None:
    with pytest.raises(InvalidParameters, match="use"):
        relay_subkeys([b"k" * 16], "upload")  # type: ignore[arg-type]
