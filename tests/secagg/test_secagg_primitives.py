"""Shamir sharing, X25519/HKDF agreement, the AES-GCM channel and the mask PRG."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.randomness import CtrDrbg
from secemb.secagg import keys, shamir
from secemb.secagg.prg import mask_rows


def test_field_is_the_smallest_prime_above_2_256():
    sympy = pytest.importorskip("sympy")
    assert sympy.isprime(shamir.PRIME)
    assert sympy.nextprime(2**256) == shamir.PRIME


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.data())
def test_any_t_shares_reconstruct(t, data):
    n = data.draw(st.integers(t, 10))
    xs = data.draw(st.lists(st.integers(1, 2**32), min_size=n, max_size=n, unique=True))
    secrets = data.draw(st.lists(st.integers(0, shamir.PRIME - 1), min_size=1, max_size=3))
    table = shamir.split(secrets, t, xs)
    for subset in itertools.islice(itertools.combinations(range(n), t), 5):
        for k, s in enumerate(secrets):
            assert shamir.combine([xs[i] for i in subset], [table[i][k] for i in subset], t) == s


def test_sharing_is_randomized_by_the_injected_rng():
    xs = [1, 2, 3]
    assert shamir.split([5], 2, xs, _rng=CtrDrbg(1)) == shamir.split([5], 2, xs, _rng=CtrDrbg(1))
    assert shamir.split([5], 2, xs, _rng=CtrDrbg(1)) != shamir.split([5], 2, xs, _rng=CtrDrbg(2))
    assert all(row[0] != 5 for row in shamir.split([5], 2, xs))


def test_fewer_than_t_shares_refused_and_bad_params():
    table = shamir.split([7], 3, [1, 2, 3])
    with pytest.raises(InvalidMessage):
        shamir.combine([1, 2], [table[0][0], table[1][0]], 3)
    with pytest.raises(InvalidParameters):
        shamir.split([7], 4, [1, 2, 3])
    with pytest.raises(InvalidParameters):
        shamir.split([7], 2, [1, 1, 3])
    with pytest.raises(InvalidParameters):
        shamir.split([shamir.PRIME], 2, [1, 2])


def test_agreement_is_symmetric_and_bound_to_purpose_round_and_ids():
    a, b = keys.KeyPair.generate(), keys.KeyPair.generate()
    k1 = keys.agree(a.private, b.public, keys.MASK, 3, (1, 2))
    assert k1 == keys.agree(b.private, a.public, keys.MASK, 3, (2, 1))
    assert k1 != keys.agree(a.private, b.public, keys.CHANNEL, 3, (1, 2))
    assert k1 != keys.agree(a.private, b.public, keys.MASK, 4, (1, 2))
    assert k1 != keys.agree(a.private, b.public, keys.MASK, 3, (1, 5))
    assert len(k1) == 16


def test_low_order_public_key_refused():
    a = keys.KeyPair.generate()
    with pytest.raises(InvalidMessage):
        keys.agree(a.private, bytes(32), keys.MASK, 0, (0, 1))
    with pytest.raises(InvalidMessage):
        keys.agree(a.private, bytes(31), keys.MASK, 0, (0, 1))


def test_channel_round_trip_and_binding():
    key = bytes(range(16))
    ct = keys.seal(key, 5, 1, 2, b"secret shares")
    assert len(ct) == len(b"secret shares") + keys.TAG_BYTES
    assert keys.open_sealed(key, 5, 1, 2, ct) == b"secret shares"
    for args in ((5, 2, 1), (6, 1, 2), (5, 1, 3)):
        with pytest.raises(InvalidMessage):
            keys.open_sealed(key, *args, ct)


def _ctr_stream(seed, words):
    n = -(-words // 4)
    raw = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor().update(bytes(16 * n))
    return np.frombuffer(raw, "<u4")[:words]


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 19])
def test_mask_rows_is_aes_ctr_with_random_row_access(width):
    seed = bytes(range(16))
    ref = _ctr_stream(seed, 41 * width).reshape(41, width)
    assert np.array_equal(mask_rows(seed, np.arange(41), width), ref)
    assert np.array_equal(mask_rows(seed, np.arange(7, 30), width), ref[7:30])
    for pick in (np.array([40, 0, 13, 14, 2]), np.array([1, 2, 3, 5, 8, 13, 21, 34])):
        assert np.array_equal(mask_rows(seed, pick, width), ref[pick])
    assert mask_rows(seed, np.zeros(0, np.int64), width).shape == (0, width)


def test_key_pair_from_private_bytes():
    pair = keys.KeyPair.generate(_rng=CtrDrbg(1))
    assert keys.KeyPair.from_private(pair.private) == pair
    with pytest.raises(InvalidParameters):
        keys.KeyPair.from_private(b"short")
