"""secemb.fss._projection_kernels.tile_products (session 32, helper V): the projections' products as AMX
tile matrix products of the rows' int8 entries by the devices' byte planes.  Against Python integers and
numpy's wrapping unsigned matmul on uint32 and uint64 rings, at lengths around the 4-word plane blocks and
the 64-entry tile steps, row counts around the 48-row pass, 1 to 5 devices (partial passes of 4 uint32 or
2 uint64 devices) in any order into any output rows, with scratches full of garbage; the planes' layout
against a byte-level construction; the choice of the kernel; and project_each / project_affine with and
without it, also on two threads at once."""

from __future__ import annotations

import os

import numpy as np
import pytest
from projection_spec import garbage, projections_on_two_threads, python_products, random_ring, spec_rows

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not kernels.compiled(), reason="needs the compiled kernels (numba)")


def _tiles_here() -> bool:
    from secemb.fss._projection_kernels import tiles

    return tiles()


needs_tiles = pytest.mark.skipif(not kernels.compiled() or not _tiles_here(), reason="needs AMX (and Linux's leave)")
DTYPES = [np.uint32, np.uint64]


@needs_tiles
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [1, 3, 4, 5, 63, 64, 65, 130])
@pytest.mark.parametrize("rows", [1, 7, 48, 49])
@pytest.mark.parametrize("devices", [1, 2, 3, 4, 5])
def test_tile_products_match_python_ints(dtype: type, length: int, rows: int, devices: int) -> None:
    from secemb.fss._projection_kernels import Products
    from secemb.fss.projections import _stream_bytes, _streams, row_key

    k = 8 * np.dtype(dtype).itemsize
    seed = os.urandom(16)
    x = random_ring((devices, length), dtype)
    x[0] = np.iinfo(dtype).max  # every sum wraps
    products = Products(np.dtype(dtype), rows, length)
    assert products.tiles and products.group == 16 // np.dtype(dtype).itemsize
    for scratch in (products.t, products.planes, products.sums):
        garbage(scratch)
    products.expand(_streams([row_key(seed)], _stream_bytes(rows, length)), 0)
    at = np.random.default_rng().permutation(devices)  # test data order only
    to = np.random.default_rng().permutation(devices + 2)[:devices]  # some output rows stay untouched
    out = np.full((devices + 2, rows), 7, dtype)
    products.project(x, at, out, to)
    assert out[to].tolist() == python_products(spec_rows(seed, rows, length), x, at, k)
    assert (out[np.setdiff1d(np.arange(devices + 2), to)] == 7).all()


@needs_tiles
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [16251, 16320])
def test_tile_products_equal_the_row_kernels_at_ml100k(dtype: type, length: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """20 devices of ML-100K's 16,251 words (and a whole number of tile steps) on 40 rows, against
    :func:`products_for`'s kernel and numpy's unsigned matmul; the extremes (words 2^k - 1, every entry -1
    in a row) give each plane's sums their largest magnitude, 255 L."""
    from secemb.fss import _projection_kernels as pk
    from secemb.fss.projections import _stream_bytes, _streams, row_key

    rows, devices = 40, 20
    x = random_ring((devices, length), dtype)
    x[3] = np.iinfo(dtype).max
    stream = _streams([row_key(os.urandom(16))], _stream_bytes(rows, length))
    stream[0, : -(-length // 4)] = 0xAA  # row 0: every entry -1
    got = {}
    for tiles in (True, False):
        monkeypatch.setattr(pk, "tiles", lambda tiles=tiles: tiles)
        products = pk.Products(np.dtype(dtype), rows, length)
        assert products.tiles == tiles
        products.expand(stream, 0)
        got[tiles] = np.zeros((devices, rows), dtype)
        products.project(x, np.arange(devices), got[tiles], np.arange(devices))
    t = products.t[:rows, :length]
    assert np.array_equal(got[True], got[False])
    assert np.array_equal(got[True], np.matmul(x, t.T.astype(dtype)))
    assert got[True][3, 0] == (-(2**64 - 1 if dtype == np.uint64 else 2**32 - 1) * length) % (1 << 8 * x.itemsize)


@needs_tiles
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [1, 4, 6, 67])
def test_word_planes_are_each_words_bytes_transposed(dtype: type, length: int) -> None:
    from secemb.fss._projection_kernels import word_planes

    per = np.dtype(dtype).itemsize
    x = random_ring((3, length), dtype)
    at = np.array([2, 0])
    planes = np.empty((-(-length // 4) + 2, 16), np.uint32)
    garbage(planes)
    before = planes.copy()
    word_planes(x, at, planes)
    padded = np.zeros((3, 4 * planes.shape[0]), dtype)
    padded[:, :length] = x
    raw = padded.view(np.uint8).reshape(3, planes.shape[0], 4, per)  # device, k, word q, byte p
    want = raw[at].transpose(1, 0, 3, 2).reshape(planes.shape[0], 4 * per * at.size)  # k, (m, p, q)
    assert np.array_equal(planes.view(np.uint8)[:, : 4 * per * at.size], want)
    assert np.array_equal(planes[:, per * at.size :], before[:, per * at.size :])  # other columns untouched


@needs_tiles
def test_tile_products_refuse_scratch_of_the_wrong_shape() -> None:
    from secemb.fss._projection_kernels import TILE_CONFIG, tile_products

    x, out, at = np.zeros((2, 100), np.uint32), np.zeros((2, 5), np.uint32), np.arange(2)
    good = (np.zeros((2, 48, 64), np.int8), np.zeros((32, 16), np.uint32), np.zeros((48, 16), np.int32))
    bad = [
        (np.zeros((2, 40, 64), np.int8), good[1], np.zeros((40, 16), np.int32)),  # rows not a multiple of 48
        (np.zeros((2, 48, 32), np.int8), good[1], good[2]),  # steps not of 64 entries
        (np.zeros((1, 48, 64), np.int8), np.zeros((16, 16), np.uint32), good[2]),  # shorter than x
        (np.zeros((2, 48, 64), np.int8)[:, :, ::-1], good[1], good[2]),  # not C-contiguous
        (good[0], np.zeros((32, 8), np.uint32), np.zeros((48, 8), np.int32)),  # planes not a tile wide
        (good[0], np.zeros((16, 16), np.uint32), good[2]),  # planes of another length
        (good[0], good[1], np.zeros((96, 16), np.int32)),  # sums of other rows
    ]
    for t, planes, sums in bad:
        with pytest.raises(ValueError, match="wrong shape"):
            tile_products(t, 5, x, at, out, at, planes, sums, TILE_CONFIG)
    for wrong_at, wrong_to in ((np.array([0, 2]), at), (at, np.array([-1, 0])), (at, np.array([0, 2])), (at, at[:1])):
        with pytest.raises(ValueError, match="shape"):
            tile_products(*good[:1], 5, x, wrong_at, out, wrong_to, *good[1:], TILE_CONFIG)
    tile_products(*good[:1], 5, x, at, out, at, *good[1:], TILE_CONFIG)  # the good ones pass


def test_tiles_need_the_cpu_features(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without AMX-TILE and AMX-INT8 nothing asks Linux for the tile state and the row kernels are used."""
    from secemb.fss import _projection_kernels as pk

    monkeypatch.setattr(pk, "host_cpu_features", lambda: {"avx2": True, "amx-tile": True})
    assert not pk._tiles_permitted()
    monkeypatch.setattr(pk, "tiles", lambda: False)
    assert not pk.Products(np.dtype(np.uint32), 40, 100).tiles


@needs_tiles
@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_projections_with_and_without_tiles_on_two_threads(tiles: bool, dtype: type,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """project_each and project_affine of 9 devices (two seeds) on both kernels, two calls at once on two
    threads (each thread its own tile configuration), against Python ints on the specification's rows."""
    from secemb.fss import _projection_kernels as pk

    monkeypatch.setattr(pk, "tiles", lambda: tiles)
    projections_on_two_threads(dtype)


@pytest.mark.parametrize("length", [1, 5, 64, 65, 16251])
def test_expand_steps_writes_only_its_rows(length: int) -> None:
    """:class:`Products`' tile scratch is (steps, 48, 64): each step's 64 entries of the 48 rows in a block;
    expand_steps writes the first ``4 ceil(L / 4)`` entries of each of its rows as the specification gives
    them, nothing else; a scratch with too few entries or rows is refused."""
    from secemb.fss._projection_kernels import ENTRY_WORDS, expand_steps
    from secemb.fss.projections import _stream_bytes, _streams, row_key

    rows, seed, used = 5, os.urandom(16), 4 * -(-length // 4)
    stream = _streams([row_key(seed)], _stream_bytes(rows, length))
    steps = -(-length // 64) + 1
    t = np.full((steps, 48, 64), 9, np.int8)
    expand_steps(stream, 0, rows, t, ENTRY_WORDS)
    flat = t.transpose(1, 0, 2).reshape(48, 64 * steps)  # row i, entry j
    assert flat[:rows, :length].tolist() == spec_rows(seed, rows, length)
    assert set(np.unique(flat[:rows, :used]).tolist()) <= {-1, 0, 1}
    assert (flat[rows:] == 9).all() and (flat[:, used:] == 9).all()
    for small in (np.zeros((-(-used // 64) - 1, 48, 64), np.int8), np.zeros((steps, rows - 1, 64), np.int8)):
        with pytest.raises(ValueError, match="too few"):
            expand_steps(stream, 0, rows, small, ENTRY_WORDS)


def test_expand_steps_computes_every_byte_values_entries() -> None:
    """expand_steps computes the entries of whole steps (16 stream bytes) without the table: every byte
    value, in every lane, against the specification's ``a - b``; the last, partial step through the table."""
    from secemb.fss._projection_kernels import ENTRY_WORDS, expand_steps

    values = np.arange(256, dtype=np.uint8)
    stream = np.concatenate([values, np.roll(values, 7), values[:9]])[None, :]  # 32 whole steps and 9 bytes
    t = np.zeros((-(-stream.shape[1] // 16), 48, 64), np.int8)
    expand_steps(stream, 0, 1, t, ENTRY_WORDS)
    got = t[:, 0, :].reshape(-1)[: 4 * stream.shape[1]].tolist()
    assert got == [((v >> (2 * q)) & 1) - ((v >> (2 * q + 1)) & 1) for v in stream[0].tolist() for q in range(4)]
