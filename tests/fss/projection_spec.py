"""The projections' row expansion written from its specification (``secemb/fss/projections.py``'s
module docstring), with plain Python and a fresh AES-128-CTR ``Cipher``: no secemb code, so the
compiled and numpy projections are checked against the spec rather than against themselves.
Shared by the projection tests of tests/fss/."""

from __future__ import annotations

import hashlib
import os

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def spec_rows(seed: bytes, rows: int, length: int) -> list[list[int]]:
    """The ``rows x length`` ternary matrix that ``seed`` expands to, entries -1, 0, +1."""
    key = hashlib.sha256(b"secemb/fss/projections" + seed).digest()[:16]
    per_row = -(-length // 4)
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(rows * per_row))
    byte = [[stream[i * per_row + j // 4] >> (2 * (j % 4)) for j in range(length)] for i in range(rows)]
    return [[(v & 1) - ((v >> 1) & 1) for v in row] for row in byte]


def random_ring(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Uniform ring elements of ``dtype`` (uint32 or uint64) from ``os.urandom``."""
    dt = np.dtype(dtype)
    return np.frombuffer(os.urandom(int(np.prod(shape)) * dt.itemsize), dt).reshape(shape).copy()


def python_products(rows: list[list[int]], x: np.ndarray, at: np.ndarray, k: int) -> list[list[int]]:
    """out[m, i] = sum_j rows[i][j] x[at[m], j] mod 2^k, in Python ints."""
    return [[sum(e * int(v) for e, v in zip(row, x[d].tolist(), strict=True)) % (1 << k) for row in rows]
            for d in at.tolist()]


def garbage(a: np.ndarray) -> None:
    """Fill a scratch with random bytes: whatever its last use left."""
    a.view(np.uint8).reshape(-1)[:] = np.frombuffer(os.urandom(a.nbytes), np.uint8)


def projections_on_two_threads(dtype: type) -> None:
    """project_each and project_affine of 9 devices (two seeds, 40 rows) on whichever kernels the caller set up,
    two calls at once on two threads (each call its own scratch), against Python ints on the specification's
    rows: the shared body of the kernels' thread tests."""
    from concurrent.futures import ThreadPoolExecutor

    from secemb.fss.projections import project_affine, project_each

    k, rows, slots, width, dense = 8 * np.dtype(dtype).itemsize, 40, 6, 13, 3
    seeds = [os.urandom(16) for _ in range(2)]
    which = [0, 1, 1, 0, 1, 1, 1, 0, 1]
    parts = [(random_ring((slots, width), dtype), np.frombuffer(os.urandom(slots), np.uint8).astype(np.int64),
              random_ring((slots, width), dtype), random_ring((dense,), dtype)) for _ in which]
    vectors = np.array([[(-(int(b) + int(c) * int(w))) % (1 << k)
                         for brow, c, wrow in zip(base, count, words, strict=True)
                         for b, w in zip(brow.tolist(), wrow.tolist(), strict=True)] + tail.tolist()
                        for base, count, words, tail in parts], dtype)
    spec = [spec_rows(s, rows, vectors.shape[1]) for s in seeds]
    want = [python_products(spec[w], vectors, np.array([d]), k)[0] for d, w in enumerate(which)]
    chosen = [seeds[w] for w in which]
    with ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(project_affine, chosen, True, parts, rows) for _ in range(3)]
        calls += [pool.submit(project_each, chosen, vectors, rows) for _ in range(3)]
        for call in calls:
            assert call.result().tolist() == want
