"""secemb.fss._projection_kernels.affine_vector (session 27, helper F): the compiled loop that forms a
device's vector ``((-1)^negate (base + count[:, None] words)).ravel() || tail`` for the bound's
projections, against Python integers, at sizes where its loop runs vectorized (ML-100K's 250 x 65
slots and a width that is no multiple of 8) and where it runs not at all (no slots)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not kernels.compiled(), reason="needs the compiled kernels (numba)")


def _python(base: np.ndarray, count: np.ndarray, words: np.ndarray, negate: bool, tail: np.ndarray,
            k: int) -> list[int]:
    sign = -1 if negate else 1
    sparse = [sign * (int(b) + int(c) * int(w)) for row_b, c, row_w in zip(base.tolist(), count.tolist(),
                                                                          words.tolist(), strict=True)
              for b, w in zip(row_b, row_w, strict=True)]
    return [v % (1 << k) for v in sparse + [int(t) for t in tail]]


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("negate", [False, True])
@pytest.mark.parametrize(("slots", "width", "dense"), [(250, 65, 1), (3, 17, 0), (0, 5, 3), (5, 1, 2)])
def test_affine_vector_matches_python_ints(dtype: type, negate: bool, slots: int, width: int, dense: int) -> None:
    from secemb.fss._projection_kernels import affine_vector

    gen = np.random.default_rng(slots * 100 + width)  # test data only, not secrets
    info = np.iinfo(dtype)
    base = gen.integers(0, info.max, (slots, width), dtype=dtype, endpoint=True)
    words = gen.integers(0, info.max, (slots, width), dtype=dtype, endpoint=True)
    count = gen.integers(0, 2**40, slots, dtype=np.int64)  # wider than a uint32 word: taken modulo 2^k
    if slots:
        base[0], words[0], count[0] = info.max, info.max, 2**40 - 1  # every product and sum wraps
        count[-1] = 0
    tail = gen.integers(0, info.max, dense, dtype=dtype, endpoint=True)
    xs = np.full(slots * width + dense, 7, dtype)  # overwritten
    affine_vector(base, count, words, negate, tail, xs)
    assert xs.tolist() == _python(base, count, words, negate, tail, 8 * np.dtype(dtype).itemsize)
