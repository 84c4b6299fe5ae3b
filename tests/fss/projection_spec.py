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
