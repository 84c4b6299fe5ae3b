"""Session 35 (issue 34, helper B): the projections' compiled row stream and one compiled call a pass
of devices give the same bytes and ring elements.

:func:`secemb.fss._projection_kernels.ctr_streams` (AES-NI, no counter blocks in memory) against
``cryptography``'s own AES-CTR mode; :func:`secemb.fss.projections._streams` on both kernel backends
against each other; :func:`secemb.fss.projections.project_affine` of one seed (a cuckoo batch's
challenge: no grouping by seed) and a pass's devices formed and projected in one call
(:meth:`~secemb.fss._projection_kernels.Products.project_parts`) against plain Python-integer
arithmetic on rows expanded from the module docstring's specification, with and without AMX tiles,
for device counts that fill passes and that leave a short one, and parts of mixed layouts.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.fss import kernels, projections
from secemb.fss.projections import project_affine, project_each

from projection_spec import random_ring, spec_rows

needs_kernels = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels do not run here")


def _ctr(key: bytes, nbytes: int) -> bytes:
    return Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(nbytes))


@needs_kernels
@pytest.mark.parametrize("keys", [0, 1, 3])
@pytest.mark.parametrize("passes", [0, 1, 3])
def test_ctr_streams_are_aes_ctr_of_each_key(keys: int, passes: int) -> None:
    from secemb.fss._projection_kernels import CTR_BYTES, ctr_streams

    raw = np.frombuffer(os.urandom(16 * keys), np.uint8).reshape(keys, 16)
    out = np.full((keys, passes * CTR_BYTES), 0xA5, np.uint8)
    ctr_streams(raw, out)
    assert [bytes(row) for row in out] == [_ctr(bytes(k), passes * CTR_BYTES) for k in raw]


@needs_kernels
def test_ctr_streams_write_strided_rows_and_refuse_partial_passes() -> None:
    from secemb.fss._projection_kernels import CTR_BYTES, ctr_streams

    raw = np.frombuffer(os.urandom(32), np.uint8).reshape(2, 16)
    wide = np.zeros((2, 3 * CTR_BYTES), np.uint8)
    ctr_streams(raw, wide[:, CTR_BYTES:])  # rows of a wider array: each row contiguous, rows apart
    assert not wide[:, :CTR_BYTES].any()
    assert [bytes(row) for row in wide[:, CTR_BYTES:]] == [_ctr(bytes(k), 2 * CTR_BYTES) for k in raw]
    with pytest.raises(ValueError, match="multiple of CTR_BYTES"):
        ctr_streams(raw, np.zeros((2, CTR_BYTES + 16), np.uint8))
    with pytest.raises(ValueError, match="multiple of CTR_BYTES"):
        ctr_streams(raw, np.zeros((3, CTR_BYTES), np.uint8))


@needs_kernels
@pytest.mark.parametrize("nbytes", [0, 1, 17, 4063 * 40])
def test_streams_are_the_same_bytes_on_both_backends(nbytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [projections.row_key(os.urandom(16)) for _ in range(3)]
    got = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        got[backend] = projections._streams(keys, nbytes)
    assert got["numba"].shape == got["numpy"].shape == (3, nbytes)
    assert np.array_equal(got["numba"], got["numpy"])
    assert [bytes(row) for row in got["numba"]] == [_ctr(k, nbytes) for k in keys]


def _python_projections(seed: bytes, part: tuple[np.ndarray, ...], negate: bool, rows: int, k: int) -> list[int]:
    base, count, words, tail = part
    sign = -1 if negate else 1
    x = [sign * (int(b) + int(c) * int(w)) for brow, c, wrow in zip(base, count, words, strict=True)
         for b, w in zip(brow, wrow, strict=True)] + [int(t) for t in tail]
    return [sum(a * v for a, v in zip(row, x, strict=True)) % (1 << k) for row in spec_rows(seed, rows, len(x))]


def _mixed_parts(n: int, slots: int, width: int, dense: int, dtype: type) -> list[tuple[np.ndarray, ...]]:
    """n devices' affine parts: a batch's views (as the walk keeps them), one device's base a strided view
    and its words read-only, one whose every product and sum wraps."""
    batch = random_ring((n, slots, width), dtype)
    counts = np.array([[(7 * d + 3 * a) % 40 for a in range(slots)] for d in range(n)], np.int64)
    parts = []
    for d in range(n):
        base, words, tail = batch[d], random_ring((slots, width), dtype), random_ring((dense,), dtype)
        if d == 1:
            base = random_ring((slots, 2 * width), dtype)[:, ::2]  # not contiguous
            words.flags.writeable = False
        if d == 2:
            base, words = np.full_like(base, np.iinfo(dtype).max), np.full_like(words, np.iinfo(dtype).max)
        parts.append((base, counts[d], words, tail))
    return parts


@needs_kernels
@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("n", [1, 3, 4, 5, 9])
@pytest.mark.parametrize("negate", [False, True])
def test_one_seed_passes_match_python_ints(tiles: bool, dtype: type, n: int, negate: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from secemb.fss import _projection_kernels

    if tiles and not _projection_kernels.tiles():
        pytest.skip("AMX tiles do not run here")
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    monkeypatch.setattr(_projection_kernels, "tiles", lambda: tiles)
    k, rows, seed = 8 * np.dtype(dtype).itemsize, 5, os.urandom(16)
    parts = _mixed_parts(n, 3, 5, 2, dtype)
    got = project_affine([seed] * n, negate, parts, rows)
    assert got.dtype == dtype
    assert got.tolist() == [_python_projections(seed, p, negate, rows, k) for p in parts]
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    assert np.array_equal(project_affine([seed] * n, negate, parts, rows), got)


@needs_kernels
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_no_rows_no_tail_and_no_length(dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    seed = os.urandom(16)
    parts = _mixed_parts(5, 3, 4, 0, dtype)  # tail 0
    k = 8 * np.dtype(dtype).itemsize
    assert project_affine([seed] * 5, True, parts, 3).tolist() == [_python_projections(seed, p, True, 3, k)
                                                                   for p in parts]
    assert project_affine([seed] * 5, True, parts, 0).shape == (5, 0)
    empty = [(np.empty((0, 4), dtype), np.empty(0, np.int64), np.empty((0, 4), dtype), np.empty(0, dtype))] * 2
    assert np.array_equal(project_affine([seed] * 2, False, empty, 3), np.zeros((2, 3), dtype))
    formed = np.zeros((2, 0), dtype)
    assert np.array_equal(project_each([seed] * 2, formed, 3), np.zeros((2, 3), dtype))


class _Marked(np.ndarray):
    """An ndarray subclass: parts of it take the part-by-part checks, not the batch's maps."""


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_parts_checked_by_maps_as_one_at_a_time(dtype: type) -> None:
    parts = _mixed_parts(5, 3, 4, 2, dtype)
    assert projections._affine_uniform(parts) == (np.dtype(dtype), 3 * 4 + 2)
    assert projections._affine_checked(parts) == (np.dtype(dtype), 3 * 4 + 2)
    marked = [(p[0].view(_Marked), *p[1:]) for p in parts]
    assert projections._affine_uniform(marked) is None  # not exact ndarrays: checked one part at a time
    assert projections._affine_checked(marked) == (np.dtype(dtype), 3 * 4 + 2)
    seed = os.urandom(16)
    assert np.array_equal(project_affine([seed] * 5, False, marked, 3), project_affine([seed] * 5, False, parts, 3))
    faults = [
        [*parts[:4], (parts[4][0], parts[4][1].astype(np.float64), parts[4][2], parts[4][3])],  # a float count
        [*parts[:4], (parts[4][0], parts[4][1], parts[4][2].astype(np.int64), parts[4][3])],  # words of another dtype
        [*parts[:4], (parts[4][0][:2], parts[4][1], parts[4][2], parts[4][3])],  # a base of other rows
        [*parts[:4], (parts[4][0], parts[4][1][:2], parts[4][2], parts[4][3])],  # a count of other rows
        [*parts[:4], (parts[4][0], parts[4][1], parts[4][2], parts[4][3][:1])],  # a shorter tail
        [*parts[:4], list(parts[4])],  # a list, not a tuple
    ]
    for bad in faults:
        assert projections._affine_uniform(bad) is None
        with pytest.raises(projections.InvalidParameters):
            project_affine([seed] * 5, False, bad, 3)
