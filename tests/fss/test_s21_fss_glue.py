"""Issue 37 (session 21): the data movement around the DPF kernels, compiled paths against the numpy
reference and against values computed another way (Python integers from per-leaf conversions).

* ``dpf.convert_gen``'s fused kernel (both conversions and the sign in one pass) gives the correction
  words ``(-1)^{t_1} (beta - Convert(s_0) + Convert(s_1))`` of SecEmb Algorithm 5, bit for bit as the
  numpy passes, for both rings, payload widths around the AES block and key counts across the
  kernel's steps; it writes over ``betas`` only where asked.
"""

from __future__ import annotations

import numpy as np
import pytest
from fss_strategies import random_ring

from secemb.fss import dpf, kernels
from secemb.fss.convert import convert
from secemb.randomness import CtrDrbg

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")


def _expected_words(state: dpf.GenState, betas: np.ndarray, ring_bits: int, tag: str) -> np.ndarray:
    """The correction words from each leaf's conversion, in Python integers."""
    modulus = 1 << ring_bits
    c0 = convert(state.leaf0, betas.shape[1], ring_bits, tag)
    c1 = convert(state.leaf1, betas.shape[1], ring_bits, tag)
    out = np.empty_like(betas)
    for i in range(betas.shape[0]):
        sign = -1 if int(state.leaf1[i, 0]) & 1 else 1
        for e in range(betas.shape[1]):
            out[i, e] = sign * (int(betas[i, e]) - int(c0[i, e]) + int(c1[i, e])) % modulus
    return out


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize(("keys", "width"), [(1, 1), (5, 3), (70, 4), (9, 65), (3, 130), (2100, 2), (600, 65)])
def test_convert_gen_fused_kernel_equals_reference(monkeypatch: pytest.MonkeyPatch, ring_bits: int, keys: int,
                                                   width: int) -> None:
    gen = np.random.default_rng(keys * 1000 + width + ring_bits)
    alphas = gen.integers(0, 300, keys)
    betas = random_ring(gen, (keys, width), ring_bits)
    _, _, state = dpf.gen_path(alphas, 300, _rng=CtrDrbg(b"s21-convert-gen"))
    got = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        given = betas.copy()
        got[backend] = dpf.convert_gen(state, given, ring_bits=ring_bits, tag="s21")
        assert np.array_equal(given, betas)  # not overwritten unless asked
        again = betas.copy()
        assert dpf.convert_gen(state, again, ring_bits=ring_bits, tag="s21", overwrite_betas=True) is again
        assert np.array_equal(again, got[backend])
    assert got["numba"].dtype == betas.dtype
    assert np.array_equal(got["numba"], got["numpy"])
    if keys * width <= 3000:
        assert np.array_equal(got["numba"], _expected_words(state, betas, ring_bits, "s21"))
