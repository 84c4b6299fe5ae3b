"""secemb.fss._projection_kernels.affine_part / affine_planes / plane_products (session 33, helper V): the
byte planes of project_affine's vectors formed straight from their affine parts, a pass of devices at a time,
and their AMX products.  Against numpy: the vectors ``((-1)^negate (base + count words)).ravel() || tail`` in
numpy's wrapping unsigned arithmetic, their bytes transposed by a byte-level construction, and the products as
numpy's wrapping matmul of the specification's rows; at slot widths below, at and above the 256-word buffer,
with and without a dense tail, 1 to a pass's devices, counts of several integer dtypes up to their extremes, both
rings and both signs; the refusals before raw addresses; project_affine on the tile path and on the row kernels
(the flag the session 32 tests use), 1 to 9 devices at lengths around the tile steps, and with parts that are
not C-contiguous (the vectors' path)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from projection_spec import random_ring, spec_rows

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not kernels.compiled(), reason="needs the compiled kernels (numba)")
DTYPES = [np.uint32, np.uint64]
COUNTS = [np.int64, np.uint8, np.uint64, np.int32]


def _tiles_here() -> bool:
    from secemb.fss._projection_kernels import tiles

    return tiles()


needs_tiles = pytest.mark.skipif(not kernels.compiled() or not _tiles_here(), reason="needs AMX (and Linux's leave)")


def _garbage(a: np.ndarray) -> None:
    a.view(np.uint8).reshape(-1)[:] = np.frombuffer(os.urandom(a.nbytes), np.uint8)


def _random_count(slots: int, dtype: type) -> np.ndarray:
    info = np.iinfo(dtype)
    raw = np.frombuffer(os.urandom(8 * slots), np.uint64).astype(object)
    count = np.array([int(v) % (int(info.max) - int(info.min) + 1) + int(info.min) for v in raw], dtype)
    if slots:
        count[0] = info.max
        count[-1] = info.min
    return count


def _part(slots: int, width: int, dense: int, dtype: type, count_dtype: type) -> tuple[np.ndarray, ...]:
    return (random_ring((slots, width), dtype), _random_count(slots, count_dtype), random_ring((slots, width), dtype),
            random_ring((dense,), dtype))


def _vector(part: tuple[np.ndarray, ...], negate: bool) -> np.ndarray:
    """The vector in numpy's wrapping unsigned arithmetic (counts reduced modulo 2^64 first)."""
    base, count, words, tail = part
    dtype = base.dtype
    c = np.array([int(v) % 2**64 for v in count.tolist()], np.uint64).astype(dtype)
    with np.errstate(over="ignore"):
        sparse = base + c[:, None] * words
        if negate:
            sparse = np.zeros_like(sparse) - sparse
    return np.concatenate([sparse.ravel(), tail])


def _planes_reference(x: np.ndarray, rows: int) -> np.ndarray:
    """uint8 (rows, 4 P n): byte p of x[m, 4 k + q] at [k, 4 P m + 4 p + q], zero past L."""
    per = x.itemsize
    padded = np.zeros((x.shape[0], 4 * rows), x.dtype)
    padded[:, : x.shape[1]] = x
    raw = padded.view(np.uint8).reshape(x.shape[0], rows, 4, per)
    return raw.transpose(1, 0, 3, 2).reshape(rows, 4 * per * x.shape[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("negate", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 0), (3, 5, 1), (5, 13, 3), (250, 65, 1), (7, 64, 0), (4, 300, 17),
                                   (2, 257, 2), (0, 5, 9), (3, 0, 4), (1, 255, 1)])
def test_affine_planes_are_the_vectors_bytes(dtype: type, negate: bool, shape: tuple[int, int, int]) -> None:
    from secemb.fss._projection_kernels import TILE_ROWS, affine_part, affine_planes

    slots, width, dense = shape
    per, length = np.dtype(dtype).itemsize, slots * width + dense
    group = TILE_ROWS // per
    for devices in range(1, group + 1):
        parts = [_part(slots, width, dense, dtype, COUNTS[d % len(COUNTS)]) for d in range(devices)]
        addresses, counts, tails = (np.empty((group, 2), np.int64), np.empty((group, slots), dtype),
                                    np.empty((group, dense), dtype))
        for scratch in (counts, tails):
            _garbage(scratch)
        for k, part in enumerate(parts):
            assert affine_part(*part, width, addresses, counts, tails, k)
        rows = -(-length // 4) + 3  # rows past the vector: zero planes
        planes = np.empty((rows, TILE_ROWS + 3), np.uint32)
        _garbage(planes)
        before = planes.copy()
        affine_planes(addresses, width, counts, tails, devices, negate, planes)
        x = np.stack([_vector(part, negate) for part in parts]) if length else np.zeros((devices, 0), dtype)
        assert np.array_equal(planes.view(np.uint8)[:, : 4 * per * devices], _planes_reference(x, rows)), devices
        assert np.array_equal(planes[:, per * devices :], before[:, per * devices :])  # other columns untouched


@pytest.mark.parametrize("dtype", DTYPES)
def test_affine_part_notes_only_contiguous_parts_of_its_shape(dtype: type) -> None:
    """affine_part writes nothing and answers False for parts affine_planes could not read raw: base or words
    not C-contiguous, of another width or number of slots, a count or tail of another length, another ring, a
    row outside the scratches."""
    from secemb.fss._projection_kernels import affine_part

    slots, width, dense = 4, 6, 2
    good = _part(slots, width, dense, dtype, np.int64)
    other = np.uint64 if dtype == np.uint32 else np.uint32
    wide = random_ring((slots, 2 * width), dtype)
    bad = [
        (wide[:, ::2], *good[1:]),  # base strided
        (good[0], good[1], wide[:, :width], good[3]),  # words' rows apart
        (random_ring((slots, width + 1), dtype), *good[1:]),  # another width
        (random_ring((slots + 1, width), dtype), good[1], random_ring((slots + 1, width), dtype), good[3]),
        (good[0], good[1][:-1], *good[2:]),  # count too short
        (*good[:3], good[3][:-1]),  # tail too short
        (random_ring((slots, width), other), good[1], random_ring((slots, width), other), good[3]),
    ]
    addresses, counts, tails = np.zeros((4, 2), np.int64), np.zeros((4, slots), dtype), np.zeros((4, dense), dtype)
    for part in bad:
        assert not affine_part(*part, width, addresses, counts, tails, 0)
    for k in (-1, 4):
        assert not affine_part(*good, width, addresses, counts, tails, k)
    assert not addresses.any() and not counts.any() and not tails.any()
    assert affine_part(*good, width, addresses, counts, tails, 3)


def test_affine_planes_refuse_scratch_of_the_wrong_shape() -> None:
    from secemb.fss._projection_kernels import affine_part, affine_planes

    slots, width, dense = 3, 8, 1
    part = _part(slots, width, dense, np.uint32, np.int64)
    addresses, counts, tails = np.empty((4, 2), np.int64), np.empty((4, slots), np.uint32), np.empty((4, 1), np.uint32)
    affine_part(*part, width, addresses, counts, tails, 0)
    rows = -(-(slots * width + dense) // 4)
    for devices, planes in ((5, np.zeros((rows, 32), np.uint32)), (-1, np.zeros((rows, 32), np.uint32)),
                            (1, np.zeros((rows - 1, 16), np.uint32)), (2, np.zeros((rows, 7), np.uint32)),
                            (1, np.zeros((rows, 32), np.uint32)[:, ::2])):
        with pytest.raises(ValueError, match="wrong shape"):
            affine_planes(addresses, width, counts, tails, devices, False, planes)
    with pytest.raises(ValueError, match="wrong shape"):
        affine_planes(addresses, -1, counts, tails, 1, False, np.zeros((rows, 16), np.uint32))
    affine_planes(addresses, width, counts, tails, 1, False, np.zeros((rows, 4), np.uint32))


@needs_tiles
def test_plane_products_refuse_what_they_cannot_read() -> None:
    from secemb.fss._projection_kernels import TILE_CONFIG, plane_products

    t, planes, sums = np.zeros((2, 48, 64), np.int8), np.zeros((32, 16), np.uint32), np.zeros((48, 16), np.int32)
    out = np.zeros((3, 5), np.uint32)
    for to in (np.array([3]), np.array([-1]), np.arange(5)):  # out of out; more devices than planes' columns
        with pytest.raises(ValueError, match="shape"):
            plane_products(t, 5, out, to, planes, sums, TILE_CONFIG)
    with pytest.raises(ValueError, match="wrong shape"):
        plane_products(t, 6, out, np.arange(2), planes, sums, TILE_CONFIG)  # more rows than out has
    plane_products(t, 5, out, np.arange(3)[::-1].copy(), planes, sums, TILE_CONFIG)


def _want(seeds: list[bytes], which: list[int], parts: list[tuple[np.ndarray, ...]], negate: bool,
          rows: int) -> np.ndarray:
    length = parts[0][0].size + parts[0][3].size
    spec = [np.array(spec_rows(s, rows, length), np.int64).astype(parts[0][0].dtype) for s in seeds]
    return np.stack([np.matmul(_vector(part, negate), spec[w].T) for part, w in zip(parts, which, strict=True)])


@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 63, 1), (2, 32, 0), (4, 16, 1), (3, 43, 2), (5, 52, 1)])
def test_project_affine_on_both_paths(tiles: bool, dtype: type, shape: tuple[int, int, int],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """1 to 9 devices (partial passes of 4 uint32 or 2 uint64 devices) on two seeds at lengths 64, 64, 65, 131 and
    261 (around the tile steps of 64 entries), both signs, on the tile path and the row kernels."""
    from secemb.fss import _projection_kernels as pk
    from secemb.fss.projections import project_affine

    if tiles and not _tiles_here():
        pytest.skip("needs AMX (and Linux's leave)")
    monkeypatch.setattr(pk, "tiles", lambda: tiles)
    rows, seeds = 40, [os.urandom(16) for _ in range(2)]
    for devices in range(1, 10):
        which = [int(b) % 2 for b in os.urandom(devices)]
        parts = [_part(*shape, dtype, COUNTS[d % len(COUNTS)]) for d in range(devices)]
        for negate in (False, True):
            got = project_affine([seeds[w] for w in which], negate, parts, rows)
            assert np.array_equal(got, _want(seeds, which, parts, negate, rows)), (devices, negate)


@pytest.mark.parametrize("dtype", DTYPES)
def test_project_affine_with_parts_not_contiguous(dtype: type) -> None:
    """Parts that are views (a base with its rows apart, words reversed) go the vectors' path on the tile path
    too, in the same pass as contiguous ones; the same words."""
    from secemb.fss.projections import project_affine

    rows, seed, slots, width = 40, os.urandom(16), 5, 13
    parts = [_part(slots, width, 1, dtype, np.int64) for _ in range(6)]
    wide = random_ring((slots, 2 * width), dtype)
    parts[1] = (wide[:, :width], *parts[1][1:])
    parts[4] = (parts[4][0], parts[4][1], random_ring((slots, width), dtype)[::-1, ::-1], parts[4][3])
    got = project_affine([seed] * 6, True, parts, rows)
    assert np.array_equal(got, _want([seed], [0] * 6, parts, True, rows))
