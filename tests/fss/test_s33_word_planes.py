"""secemb.fss._projection_kernels.word_planes (session 33, helper V): the byte planes of each four-word block
(one shuffle a block), then the partial block byte by byte.  Against a byte-level numpy construction at every
length from 1 to 70 (each remainder of 4 and 16 words, and the partial block) and at ML-100K's 16,251 words, for
1 to 9 devices in any order (repeats too) on both rings, with the session 32 checks before raw addresses; and
the AMX products that read them (:func:`tile_products`, and project_each with and without tiles) against numpy's
wrapping unsigned matmul of the specification's rows, 1 to 9 devices, at lengths around 16 and 64 words.  (Written
for a wider shuffle, four blocks a shuffle, which came out slower: session 33, helper V; the tests stay for the
kernel as it is.)"""

from __future__ import annotations

import os

import numpy as np
import pytest
from projection_spec import random_ring, spec_rows

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not kernels.compiled(), reason="needs the compiled kernels (numba)")
DTYPES = [np.uint32, np.uint64]


def _tiles_here() -> bool:
    from secemb.fss._projection_kernels import tiles

    return tiles()


needs_tiles = pytest.mark.skipif(not kernels.compiled() or not _tiles_here(), reason="needs AMX (and Linux's leave)")


def _garbage(a: np.ndarray) -> None:
    a.view(np.uint8).reshape(-1)[:] = np.frombuffer(os.urandom(a.nbytes), np.uint8)


def _planes_reference(x: np.ndarray, at: np.ndarray, rows: int) -> np.ndarray:
    """uint8 (rows, 4 P at.size): byte p of x[at[m], 4 k + q] at [k, 4 P m + 4 p + q], zero past L."""
    per = x.itemsize
    padded = np.zeros((x.shape[0], 4 * rows), x.dtype)
    padded[:, : x.shape[1]] = x
    raw = padded.view(np.uint8).reshape(x.shape[0], rows, 4, per)  # device, k, word q, byte p
    return raw[at].transpose(1, 0, 3, 2).reshape(rows, 4 * per * at.size)  # k, (m, p, q)


@pytest.mark.parametrize("dtype", DTYPES)
def test_word_planes_at_every_length_to_70_and_ml100k(dtype: type) -> None:
    from secemb.fss._projection_kernels import word_planes

    per = np.dtype(dtype).itemsize
    for length in [*range(1, 71), 16251]:
        for devices in (1, 4, 9):
            x = random_ring((7, length), dtype)
            at = np.frombuffer(os.urandom(devices), np.uint8).astype(np.intp) % 7  # any rows, repeats too
            rows = -(-length // 4) + length % 3  # some scratch rows past the vector: zero planes
            planes = np.empty((rows, per * devices + 5), np.uint32)
            _garbage(planes)
            before = planes.copy()
            word_planes(x, at, planes)
            got = planes.view(np.uint8)[:, : 4 * per * devices]
            assert np.array_equal(got, _planes_reference(x, at, rows)), (length, devices)
            assert np.array_equal(planes[:, per * devices :], before[:, per * devices :])  # other columns untouched


@pytest.mark.parametrize("dtype", DTYPES)
def test_word_planes_keep_their_checks(dtype: type) -> None:
    """The shape and index checks before raw addresses (session 32): a device row out of x, planes too short or
    too narrow, a non-contiguous x."""
    from secemb.fss._projection_kernels import word_planes

    per = np.dtype(dtype).itemsize
    x = random_ring((3, 67), dtype)
    good = np.zeros((17, 2 * per), np.uint32)
    for at, planes, xs in ((np.array([0, 3]), good, x), (np.array([-1, 0]), good, x),
                           (np.array([0, 1]), np.zeros((16, 2 * per), np.uint32), x),
                           (np.array([0, 1]), np.zeros((17, 2 * per - 1), np.uint32), x),
                           (np.array([0, 1]), good, random_ring((3, 134), dtype)[:, ::2])):
        with pytest.raises(ValueError, match="word_planes"):
            word_planes(xs, at, planes)
    word_planes(x, np.array([2, 0]), good)


@needs_tiles
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [15, 16, 17, 19, 20, 63, 67, 68, 255, 256, 257])
def test_tile_products_around_the_blocks_and_steps(dtype: type, length: int) -> None:
    from secemb.fss._projection_kernels import Products
    from secemb.fss.projections import _stream_bytes, _streams, row_key

    rows, seed = 40, os.urandom(16)
    t = np.array(spec_rows(seed, rows, length), np.int64).astype(dtype)  # -1 as 2^k - 1
    for devices in range(1, 10):
        x = random_ring((devices, length), dtype)
        x[-1] = np.iinfo(dtype).max
        products = Products(np.dtype(dtype), rows, length)
        for scratch in (products.t, products.planes, products.sums):
            _garbage(scratch)
        products.expand(_streams([row_key(seed)], _stream_bytes(rows, length)), 0)
        at = np.random.default_rng().permutation(devices)  # test data order only
        out = np.zeros((devices, rows), dtype)
        products.project(x, at, out, at[::-1].copy())
        assert np.array_equal(out[at[::-1]], np.matmul(x[at], t.T)), (length, devices)


@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_project_each_with_and_without_tiles(tiles: bool, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """project_each of 9 devices on two seeds at lengths around 16 and 64 words, on the tile path and on the
    row kernels (the flag the session 32 tests use), against the specification's rows."""
    from secemb.fss import _projection_kernels as pk
    from secemb.fss.projections import project_each

    if tiles and not _tiles_here():
        pytest.skip("needs AMX (and Linux's leave)")
    monkeypatch.setattr(pk, "tiles", lambda: tiles)
    rows, which = 40, [0, 1, 1, 0, 1, 1, 1, 0, 1]
    seeds = [os.urandom(16) for _ in range(2)]
    for length in (17, 64, 81):
        x = random_ring((len(which), length), dtype)
        spec = [np.array(spec_rows(s, rows, length), np.int64).astype(dtype) for s in seeds]
        want = np.stack([np.matmul(x[d], spec[w].T) for d, w in enumerate(which)])
        assert np.array_equal(project_each([seeds[w] for w in which], x, rows), want), length
