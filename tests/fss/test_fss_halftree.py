"""Half-Tree DPF keys (``secemb.fss.halftree``): the point function on both kernel backends,
point evaluation against the full domain, the numba walk against the numpy reference bit for
bit, and the tree hash against its definition computed with OpenSSL directly."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from fss_strategies import EDGE_DOMAINS, point_function, random_ring

from secemb.errors import InvalidParameters
from secemb.fss import halftree, kernels
from secemb.fss.prg import fixed_key
from secemb.randomness import CtrDrbg

BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])
needs_kernels = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("m", EDGE_DOMAINS + (3883,))
@pytest.mark.parametrize("ring_bits", [32, 64])
def test_shares_add_up_to_the_point_function(monkeypatch: pytest.MonkeyPatch, backend: str, m: int,
                                             ring_bits: int) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(m * ring_bits)
    k, d = 4, 3
    alphas = gen.integers(0, m, k)
    betas = random_ring(gen, (k, d), ring_bits)
    k0, k1 = halftree.gen(alphas, betas, m, ring_bits=ring_bits, _rng=CtrDrbg(bytes(32)))
    assert k0.path.cw.shape == (k, (m - 1).bit_length(), 2)  # one 128-bit word a level
    truth = point_function(alphas, betas, m)
    assert np.array_equal(halftree.eval_full(k0, 0) + halftree.eval_full(k1, 1), truth)
    xs = gen.integers(0, m, 9)
    assert np.array_equal(halftree.eval_points(k0, 0, xs) + halftree.eval_points(k1, 1, xs), truth[:, xs])


@needs_kernels
@pytest.mark.parametrize(("m", "keys"), [(1, 3), (2, 5), (129, 7), (1682, 40), (3000, 50), (93386, 2)])
def test_numba_walk_equals_the_numpy_reference(monkeypatch: pytest.MonkeyPatch, m: int, keys: int) -> None:
    """Every leaf word of every group, and the shares, bit for bit; (3000, 50) spans two row
    groups and keys that cut the 16-row blocks of the kernel."""
    gen = np.random.default_rng(m)
    k0, _ = halftree.gen(gen.integers(0, m, keys), np.ones((keys, 1), np.uint32), m)
    got = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        groups = [(r0, r1, leaves.copy()) for r0, r1, leaves in halftree.leaf_groups(k0.path)]
        got[backend] = (groups, halftree.eval_full(k0, 0))
    (ref, ref_shares), (fast, fast_shares) = got["numpy"], got["numba"]
    assert [g[:2] for g in ref] == [g[:2] for g in fast]
    for (_, _, a), (_, _, b) in zip(ref, fast, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(ref_shares, fast_shares)


def test_tree_hash_is_aes_of_sigma_xor_sigma() -> None:
    """H(x) = AES(sigma(x)) ^ sigma(x) with sigma(w0, w1) = (w0 ^ w1, w0), against OpenSSL."""
    x = np.random.default_rng(0).integers(0, 2**63, (5, 2), dtype=np.uint64) * np.uint64(3)
    enc = Cipher(algorithms.AES(fixed_key(halftree.HASH_KEY)), modes.ECB()).encryptor()
    for row, h in zip(x, halftree.ccr_hash(x), strict=True):
        sigma = np.array([row[0] ^ row[1], row[0]], np.uint64)
        expect = np.frombuffer(enc.update(sigma.tobytes()), np.uint64) ^ sigma
        assert np.array_equal(h, expect)


def test_parties_share_their_correction_words_and_differ_in_the_root_by_delta() -> None:
    k0, k1 = halftree.gen(np.array([0, 5]), np.ones((2, 1), np.uint32), 8)
    assert np.array_equal(k0.path.cw, k1.path.cw)
    delta = k0.path.roots ^ k1.path.roots
    assert np.array_equal(delta[:, 0] & 1, [1, 1])  # the roots' control bits differ
    assert np.array_equal(k0.path.roots[:, 0] & 1, [0, 0])


def test_a_key_refuses_the_other_party() -> None:
    k0, _ = halftree.gen(np.array([1]), np.ones((1, 1), np.uint32), 4)
    with pytest.raises(InvalidParameters):
        halftree.eval_full(k0, 1)
    with pytest.raises(InvalidParameters):
        halftree.gen(np.array([4]), np.ones((1, 1), np.uint32), 4)
