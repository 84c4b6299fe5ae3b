"""Session 21 (issue 34): the bound check's faster paths give the same field and ring elements.

:func:`secemb.fss.projections.project_affine` (each device's vector computed straight into the
compiled loop, no (n, L) array) against plain Python-integer arithmetic modulo ``2^k`` on rows
expanded here from the module docstring's specification with ``cryptography``'s own AES-CTR
mode, on both kernel backends.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters
from secemb.fss import kernels, projections
from secemb.fss.projections import project_affine, project_each

BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])


def _spec_rows(seed: bytes, rows: int, length: int) -> list[list[int]]:
    key = hashlib.sha256(b"secemb/fss/projections" + seed).digest()[:16]
    per_row = -(-length // 4)
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(rows * per_row))
    byte = [[stream[i * per_row + j // 4] >> (2 * (j % 4)) for j in range(length)] for i in range(rows)]
    return [[(v & 1) - ((v >> 1) & 1) for v in row] for row in byte]


def _ring(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    dt = np.dtype(dtype)
    return np.frombuffer(os.urandom(int(np.prod(shape)) * dt.itemsize), dt).reshape(shape).copy()


def _python_vector(part: tuple[np.ndarray, ...], negate: bool, k: int) -> list[int]:
    base, count, words, tail = part
    sign = -1 if negate else 1
    sparse = [sign * (int(b) + int(c) * int(w)) for brow, c, wrow in zip(base, count, words, strict=True)
              for b, w in zip(brow, wrow, strict=True)]
    return [v % (1 << k) for v in sparse + [int(t) for t in tail]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("negate", [False, True])
@pytest.mark.parametrize(("slots", "width", "dense", "temp"), [(3, 5, 1, 1 << 20), (2, 7, 0, 1 << 20),
                                                                (4, 3, 2, 20)])
def test_project_affine_matches_python_ints(backend: str, dtype: type, negate: bool, slots: int, width: int,
                                            dense: int, temp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    monkeypatch.setattr(projections, "_TEMP_ENTRIES", temp)  # 20: one seed a chunk
    k, rows = 8 * np.dtype(dtype).itemsize, 6
    shared, other = os.urandom(16), os.urandom(16)
    seeds = [shared, other, shared, shared]  # a batch's challenge and one more
    parts = []
    for d in range(len(seeds)):
        base, words, tail = _ring((slots, width), dtype), _ring((slots, width), dtype), _ring((dense,), dtype)
        if d == 0:
            base[:], words[:] = np.iinfo(dtype).max, np.iinfo(dtype).max  # every product and sum wraps
        parts.append((base, np.array([d + 7, 0, 31, 5][:slots] + [3] * (slots - 4), np.int64), words, tail))
    length = slots * width + dense
    expected = []
    for seed, part in zip(seeds, parts, strict=True):
        x = _python_vector(part, negate, k)
        expected.append([sum(a * v for a, v in zip(row, x, strict=True)) % (1 << k)
                         for row in _spec_rows(seed, rows, length)])
    got = project_affine(seeds, negate, parts, rows)
    assert got.dtype == dtype and got.tolist() == expected
    formed = np.array([_python_vector(p, negate, k) for p in parts], dtype)
    assert np.array_equal(project_each(seeds, formed, rows), got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_project_affine_of_no_devices(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    assert project_affine([], False, [], 40).shape == (0, 40)


def test_project_affine_refuses_parts_that_do_not_match() -> None:
    good = (np.zeros((2, 3), np.uint32), np.zeros(2, np.int64), np.zeros((2, 3), np.uint32), np.zeros(1, np.uint32))
    bad = [
        (good[0], good[1], good[2].astype(np.uint64), good[3]),  # words of another ring
        (good[0], np.zeros(3, np.int64), good[2], good[3]),  # a count per slot: 2
        (good[0], good[1], good[2], np.zeros(2, np.uint32)),  # another dense length than the first device's
        (good[0], np.zeros(2, np.float64), good[2], good[3]),  # counts are integers
        (good[0], good[1], good[2]),  # three arrays
    ]
    for part in bad:
        with pytest.raises(InvalidParameters):
            project_affine([bytes(16)] * 2, False, [good, part], 4)  # type: ignore[list-item]
    with pytest.raises(InvalidParameters):
        project_affine([bytes(16)], False, [good, good], 4)  # one seed for two devices
    with pytest.raises(InvalidParameters):
        project_affine([bytes(16)], False, [(good[0].astype(np.int32), good[1], good[2], good[3])], 4)
