"""secemb.fss._projection_kernels.dot_products (session 42, lead): the projections' products as AVX-512 VNNI
byte dot products (``vpdpbusd``) of the rows' int8 entries, four broadcast to 16 columns, by the devices'
byte planes.  Against Python integers on the specification's rows (``projection_spec``: no secemb code) on
uint32 and uint64 rings, at lengths around the 4-word plane steps, row counts around the 10-row pass, 1 to 9
devices (partial passes of 4 uint32 or 2 uint64 devices) in any order into any output rows, with scratches
full of garbage; at ML-100K's size against the row kernels and numpy's wrapping matmul with every plane's
sums at their largest magnitude; the refusals of scratches of the wrong shape; the choice of the kernel; and
project_each / project_affine with and without it, two calls at once on two threads."""

from __future__ import annotations

import os

import numpy as np
import pytest
from projection_spec import garbage, projections_on_two_threads, python_products, random_ring, spec_rows

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not kernels.compiled(), reason="needs the compiled kernels (numba)")


def _dots_here() -> bool:
    from secemb.fss._projection_kernels import DOTS, tiles

    return DOTS and not tiles()


needs_dots = pytest.mark.skipif(not kernels.compiled() or not _dots_here(),
                                reason="needs AVX-512 VNNI (and no AMX, whose tiles come first)")
DTYPES = [np.uint32, np.uint64]


@needs_dots
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [1, 3, 4, 5, 63, 65, 130])
@pytest.mark.parametrize("rows", [1, 9, 10, 11, 40, 41])
@pytest.mark.parametrize("devices", [1, 2, 4, 5, 9])
def test_dot_products_match_python_ints(dtype: type, length: int, rows: int, devices: int) -> None:
    from secemb.fss._projection_kernels import Products
    from secemb.fss.projections import _stream_bytes, _streams, row_key

    k = 8 * np.dtype(dtype).itemsize
    seed = os.urandom(16)
    x = random_ring((devices, length), dtype)
    x[0] = np.iinfo(dtype).max  # every sum wraps
    products = Products(np.dtype(dtype), rows, length)
    assert products.dots and not products.tiles and products.group == 16 // np.dtype(dtype).itemsize
    for scratch in (products.t, products.planes, products.sums):
        garbage(scratch)
    products.expand(_streams([row_key(seed)], _stream_bytes(rows, length)), 0)
    at = np.random.default_rng().permutation(devices)  # test data order only
    to = np.random.default_rng().permutation(devices + 2)[:devices]  # some output rows stay untouched
    out = np.full((devices + 2, rows), 7, dtype)
    products.project(x, at, out, to)
    assert out[to].tolist() == python_products(spec_rows(seed, rows, length), x, at, k)
    assert (out[np.setdiff1d(np.arange(devices + 2), to)] == 7).all()


@needs_dots
@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_products_equal_the_row_kernels_at_ml100k(dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """20 devices of ML-100K's 16,251 words on 40 rows, against :func:`products_for`'s kernel (``vpsignd`` on
    a uint32 ring) and numpy's unsigned matmul; the extremes (words 2^k - 1, every entry -1 in a row) give
    each plane's sums their largest magnitude, 255 L."""
    from secemb.fss import _projection_kernels as pk
    from secemb.fss.projections import _stream_bytes, _streams, row_key

    rows, devices, length = 40, 20, 16251
    x = random_ring((devices, length), dtype)
    x[3] = np.iinfo(dtype).max
    stream = _streams([row_key(os.urandom(16))], _stream_bytes(rows, length))
    stream[0, : -(-length // 4)] = 0xAA  # row 0: every entry -1
    got = {}
    for dots in (True, False):
        monkeypatch.setattr(pk, "DOTS", dots)
        products = pk.Products(np.dtype(dtype), rows, length)
        assert products.dots == dots
        products.expand(stream, 0)
        got[dots] = np.zeros((devices, rows), dtype)
        products.project(x, np.arange(devices), got[dots], np.arange(devices))
    t = products.t[:rows, :length]
    assert np.array_equal(got[True], got[False])
    assert np.array_equal(got[True], np.matmul(x, t.T.astype(dtype)))
    assert got[True][3, 0] == (-(2**64 - 1 if dtype == np.uint64 else 2**32 - 1) * length) % (1 << 8 * x.itemsize)


@needs_dots
def test_dot_products_refuse_scratch_of_the_wrong_shape() -> None:
    from secemb.fss._projection_kernels import dot_products

    x, out, at = np.zeros((2, 100), np.uint32), np.zeros((2, 12), np.uint32), np.arange(2)
    good = (np.zeros((12, 100), np.int8), np.zeros((25, 16), np.uint32), np.zeros((12, 16), np.int32))
    bad = [
        (np.zeros((9, 100), np.int8), good[1], np.zeros((9, 16), np.int32)),  # fewer rows than a pass
        (np.zeros((11, 100), np.int8), good[1], np.zeros((11, 16), np.int32)),  # fewer rows than asked
        (np.zeros((12, 96), np.int8), good[1], good[2]),  # rows shorter than x
        (np.zeros((12, 200), np.int8)[:, ::2], good[1], good[2]),  # entries not contiguous
        (good[0], np.zeros((24, 16), np.uint32), good[2]),  # planes shorter than x
        (good[0], np.zeros((25, 8), np.uint32), good[2]),  # planes not 16 columns
        (good[0], np.zeros((25, 32), np.uint32)[:, :16], good[2]),  # planes not contiguous
        (good[0], good[1], np.zeros((13, 16), np.int32)),  # sums of other rows
    ]
    for t, planes, sums in bad:
        with pytest.raises(ValueError, match="wrong shape"):
            dot_products(t, 12, x, at, out, at, planes, sums)
    for wrong_at, wrong_to in ((np.array([0, 2]), at), (at, np.array([-1, 0])), (at, np.array([0, 2])), (at, at[:1])):
        with pytest.raises(ValueError, match="shape"):
            dot_products(good[0], 12, x, wrong_at, out, wrong_to, *good[1:])
    dot_products(good[0], 12, x, at, out, at, *good[1:])  # the good ones pass


def test_dots_need_the_cpu_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without AVX-512 VNNI (or past the planes' exact length, or where AMX's tiles run) the row kernels or
    the tiles are used; LLVM's feature string counts AVX-512 VNNI only with AVX-512F."""
    from secemb.fss import _projection_kernels as pk

    assert kernels._named_features("+avx512vnni,+avx512f,+avx2,+avx") == {
        "avx512vnni": True, "avx512f": True, "avx2": True, "avx": True}
    assert not kernels._named_features("+avx512vnni,-avx512f,+avx2,+avx")["avx512vnni"]
    monkeypatch.setattr(pk, "tiles", lambda: False)
    monkeypatch.setattr(pk, "DOTS", False)
    assert not pk.Products(np.dtype(np.uint32), 40, 100).dots
    monkeypatch.setattr(pk, "DOTS", True)
    assert pk.Products(np.dtype(np.uint32), 40, 100).dots
    assert not pk.Products(np.dtype(np.uint64), 40, pk.TILE_LENGTH + 1).dots
    monkeypatch.setattr(pk, "tiles", lambda: True)
    assert not pk.Products(np.dtype(np.uint32), 40, 100).dots


@needs_dots
@pytest.mark.parametrize("dots", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_projections_with_and_without_dots_on_two_threads(dots: bool, dtype: type,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """project_each and project_affine of 9 devices (two seeds) on both kernels, two calls at once on two
    threads (each call its own scratch), against Python ints on the specification's rows."""
    from secemb.fss import _projection_kernels as pk

    monkeypatch.setattr(pk, "DOTS", dots)
    projections_on_two_threads(dtype)
