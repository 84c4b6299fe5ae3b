"""Issue 37: ``convert_gen(..., overwrite_betas=True)`` writes the correction words over the
payloads the caller gives up (a device's batch of gradient rows: no copy of them) -- the same
words as without, in the caller's array; a read-only or non-array payload is copied as before."""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.fss import kernels
from secemb.fss.convert import convert
from secemb.randomness import CtrDrbg


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_overwriting_gives_the_same_words_in_the_callers_array(ring_bits: int) -> None:
    dtype = np.uint32 if ring_bits == 32 else np.uint64
    alphas = np.array([0, 5, 9, 3, 7, 1])
    _, _, state = fss.gen_path(alphas, 12, _rng=CtrDrbg(7))
    betas = CtrDrbg(8).words((len(alphas), 5), dtype)
    kept = betas.copy()
    expected = fss.convert_gen(state, kept, ring_bits=ring_bits, tag="t")
    assert np.array_equal(kept, betas)  # without: the payloads are left as they were
    got = fss.convert_gen(state, betas, ring_bits=ring_bits, tag="t", overwrite_betas=True)
    assert got is betas and np.array_equal(got, expected)


def test_a_read_only_or_listed_payload_is_copied() -> None:
    _, _, state = fss.gen_path(np.array([1, 2]), 4, _rng=CtrDrbg(1))
    expected = fss.convert_gen(state, np.ones((2, 3), np.uint32))
    frozen = np.ones((2, 3), np.uint32)
    frozen.flags.writeable = False
    got = fss.convert_gen(state, frozen, overwrite_betas=True)
    assert got is not frozen and np.array_equal(got, expected) and np.array_equal(frozen, np.ones((2, 3), np.uint32))
    with pytest.raises(TypeError, match="dtype"):  # a list is checked as before (int64 is not the ring's)
        fss.convert_gen(state, [[1, 1, 1], [1, 1, 1]], overwrite_betas=True)


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_the_words_are_the_definition_on_either_kernel_backend(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``CW = (-1)^{t_1} [beta - Convert(s_0) + Convert(s_1)]`` computed here from
    ``fss.convert`` (no correction-word code), written over the payloads; no keys, no words."""
    if backend == "numpy":
        monkeypatch.setattr(kernels, "BACKEND", "numpy")
    elif not kernels.compiled():
        pytest.skip("no compiled kernels here")
    alphas = np.arange(9) % 5
    _, _, state = fss.gen_path(alphas, 6, _rng=CtrDrbg(3))
    betas = CtrDrbg(4).words((len(alphas), 4), np.uint32)
    c0, c1 = (convert(leaf, 4, 32, "t") for leaf in (state.leaf0, state.leaf1))
    expected = betas - c0 + c1
    t1 = (state.leaf1[:, 0] & np.uint64(1)).astype(bool)
    expected[t1] = 0 - expected[t1]
    got = fss.convert_gen(state, betas, tag="t", overwrite_betas=True)
    assert got is betas and np.array_equal(got, expected)
    none = fss.convert_gen(fss.GenState(6, np.zeros((0, 2), np.uint64), np.zeros((0, 2), np.uint64)),
                           np.zeros((0, 3), np.uint32), overwrite_betas=True)
    assert none.shape == (0, 3)
