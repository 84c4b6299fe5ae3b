"""Session 23 (issue 34): the projections' compiled loop expands a seed's rows once and projects
its devices four at a time (:data:`secemb.fss._projection_kernels.TILE`).  One challenge shared
by 1 to 9 devices (partial and full passes, a batch's shape), and mixed with other seeds, gives
bit for bit what plain Python-integer arithmetic modulo ``2^k`` gives on rows expanded here from
the module docstring's specification with ``cryptography``'s own AES-CTR mode, on both kernel
backends, for :func:`~secemb.fss.projections.project_each` and
:func:`~secemb.fss.projections.project_affine`.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from projection_spec import random_ring, spec_rows

from secemb.fss import kernels
from secemb.fss.projections import project_affine, project_each

BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])


def _python(seeds: list[bytes], vectors: list[list[int]], rows: int, k: int) -> list[list[int]]:
    return [[sum(a * v for a, v in zip(row, x, strict=True)) % (1 << k) for row in spec_rows(s, rows, len(x))]
            for s, x in zip(seeds, vectors, strict=True)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9])
def test_one_challenge_for_n_devices_matches_python_ints(backend: str, dtype: type, n: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    k, rows, slots, width, dense = 8 * np.dtype(dtype).itemsize, 5, 3, 4, 2
    seed = os.urandom(16)
    parts = [(random_ring((slots, width), dtype), np.array([d, 1, 0], np.int64), random_ring((slots, width), dtype),
              random_ring((dense,), dtype)) for d in range(n)]
    parts[-1][0][:] = np.iinfo(dtype).max  # the last device (a partial pass's repeated one): every sum wraps
    vectors = [[(-(int(b) + int(c) * int(w))) % (1 << k) for brow, c, wrow in zip(base, count, words, strict=True)
                for b, w in zip(brow, wrow, strict=True)] + [int(t) for t in tail]
               for base, count, words, tail in parts]
    expected = _python([seed] * n, vectors, rows, k)
    assert project_affine([seed] * n, True, parts, rows).tolist() == expected
    assert project_each([seed] * n, np.array(vectors, dtype), rows).tolist() == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shared_challenge_interleaved_with_others_matches_python_ints(backend: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # six devices on one challenge (a pass of four, then two) between devices on their own seeds
    monkeypatch.setattr(kernels, "BACKEND", backend)
    shared, a, b = (os.urandom(16) for _ in range(3))
    seeds = [a, shared, shared, b, shared, shared, shared, a, shared]
    x = random_ring((len(seeds), 23), np.uint32)
    expected = _python(seeds, [[int(v) for v in row] for row in x], 7, 32)
    assert project_each(seeds, x, 7).tolist() == expected
    parts = [(row[:20].reshape(4, 5), np.zeros(4, np.int64), np.zeros((4, 5), np.uint32), row[20:]) for row in x]
    assert project_affine(seeds, False, parts, 7).tolist() == expected
