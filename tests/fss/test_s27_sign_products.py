"""secemb.fss._projection_kernels.sign_products (session 27, helper F): the projections' products by
AVX2's ``vpsignd``, two rows and four devices a pass, against Python integers and against
:func:`~secemb.fss._projection_kernels.ternary_products`, at lengths below, at and around its pass
of 32 entries and at ML-100K's 16,251; odd row counts; 1 to 9 devices in any order, into any rows
of the output; and through :func:`~secemb.fss.projections.project_each` on a non-contiguous ring
array."""

from __future__ import annotations

import os

import numpy as np
import pytest

from secemb.fss import kernels
from secemb.fss.projections import project_each, project_reference

pytestmark = pytest.mark.skipif(not kernels.compiled(), reason="needs the compiled kernels (numba)")


def _signs_here() -> bool:
    from secemb.fss._projection_kernels import SIGNS

    return SIGNS


needs_signs = pytest.mark.skipif(not kernels.compiled() or not _signs_here(), reason="needs AVX2")


def _python(t: np.ndarray, x: np.ndarray, at: np.ndarray) -> list[list[int]]:
    """out[m, i] = sum_j t[i, j] x[at[m], j] mod 2^32, in Python ints."""
    length = x.shape[1]
    return [[sum(int(e) * int(v) for e, v in zip(row[:length].tolist(), x[d].tolist(), strict=True)) % 2**32
             for row in t] for d in at.tolist()]


@needs_signs
@pytest.mark.parametrize("length", [1, 7, 31, 32, 33, 64, 95, 100])
@pytest.mark.parametrize("rows", [1, 2, 3, 5])
@pytest.mark.parametrize("devices", [1, 4, 5, 9])
def test_sign_products_match_python_ints(length: int, rows: int, devices: int) -> None:
    from secemb.fss._projection_kernels import sign_products, ternary_products

    gen = np.random.default_rng(length * 100 + rows * 10 + devices)  # test data only, not secrets
    x = gen.integers(0, 2**32, (devices, length), dtype=np.uint64).astype(np.uint32)
    x[0] = 2**32 - 1  # every sum wraps
    t = gen.integers(-1, 2, (rows, 4 * -(-length // 4))).astype(np.int8)
    t[0, :length] = -1
    at = gen.permutation(devices)
    to = gen.permutation(devices + 2)[:devices]  # some output rows stay untouched
    out = np.full((devices + 2, rows), 7, np.uint32)
    sign_products(t, x, at, out, to)
    assert out[to].tolist() == _python(t, x, at)
    untouched = np.setdiff1d(np.arange(devices + 2), to)
    assert (out[untouched] == 7).all()
    other = np.full_like(out, 7)
    ternary_products(t, x, at, other, to)
    assert np.array_equal(out, other)


@needs_signs
def test_sign_products_at_the_round_size() -> None:
    from secemb.fss._projection_kernels import sign_products

    gen = np.random.default_rng(5)
    length, rows, devices = 16_251, 40, 6
    x = gen.integers(0, 2**32, (devices, length), dtype=np.uint64).astype(np.uint32)
    t = gen.integers(-1, 2, (rows, 16_252)).astype(np.int8)
    at = np.arange(devices)
    out = np.empty((devices, rows), np.uint32)
    sign_products(t, x, at, out, at)
    expected = (t[:, :length].astype(np.int64) @ x.T.astype(np.int64)).T % 2**32  # |sum| < 2^47: exact
    assert np.array_equal(out, expected.astype(np.uint32))


@needs_signs
def test_sign_products_refuse_rows_that_are_not_contiguous() -> None:
    from secemb.fss._projection_kernels import sign_products

    x = np.zeros((2, 64), np.uint32)
    t = np.zeros((2, 64), np.int8)
    at = np.arange(2)
    with pytest.raises(ValueError, match="contiguous"):
        sign_products(t, x[:, ::2], at, np.empty((2, 2), np.uint32), at)
    with pytest.raises(ValueError, match="contiguous"):
        sign_products(t[:, ::2], x[:, :32], at, np.empty((2, 2), np.uint32), at)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_project_each_of_a_strided_ring_array(dtype: type) -> None:
    gen = np.random.default_rng(9)
    wide = gen.integers(0, np.iinfo(dtype).max, (3, 2 * 70), dtype=dtype, endpoint=True)
    x = wide[:, ::2]  # not C-contiguous: each row's words two apart
    seeds = [os.urandom(16), os.urandom(16), os.urandom(16)]
    got = project_each(seeds, x, 5)
    for d, seed in enumerate(seeds):
        assert np.array_equal(got[d], project_reference(seed, x[d : d + 1], 5)[0])
