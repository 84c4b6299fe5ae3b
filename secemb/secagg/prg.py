"""Mask expansion: a 16-byte seed stands for a pseudorandom ``uint32`` matrix with random access
to its rows (hazmat layer).

The matrix of a seed is the word stream of AES-128-CTR keyed by the seed from IV 0, read as
little-endian ``uint32`` in row-major order: word ``i = j * width + k`` (row ``j``, column
``k``) is word ``i mod 4`` of the block ``E_seed(i div 4)``, the counter a 128-bit big-endian
integer.  A contiguous range of rows is one CTR pass; any other rows cost one ECB call over the
counters of the blocks each row spans.  So two parties holding the same seed
derive the same mask on any common subset of rows, and a whole vector (all rows) costs one CTR
pass.  All AES work is one ``cryptography`` (OpenSSL) ECB call over the counter blocks.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters
from secemb.randomness import SEED_BYTES

__all__ = ["SEED_BYTES", "mask_rows"]


def mask_rows(seed: bytes, rows: np.ndarray, width: int) -> np.ndarray:
    """The rows ``rows`` (int64, any order, shape ``(k,)``) of the seed's pseudorandom matrix:
    ``uint32`` of shape ``(k, width)``, uniform in Z_2^32 to anyone without ``seed``."""
    if len(seed) != SEED_BYTES:
        raise InvalidParameters(f"mask seed must be {SEED_BYTES} bytes, got {len(seed)}")
    if width < 1:
        raise InvalidParameters(f"width must be >= 1, got {width}")
    r = np.asarray(rows, dtype=np.int64)
    if r.ndim != 1 or (r.size and int(r.min()) < 0):
        raise InvalidParameters("rows must be a 1-D array of non-negative row numbers")
    if r.size == 0:
        return np.zeros((0, width), np.uint32)
    if r.size == 1 + int(r[-1]) - int(r[0]) and np.all(np.diff(r) == 1):
        # a contiguous range of rows: one CTR pass from the block of its first word
        first, last = int(r[0]) * width, (int(r[-1]) + 1) * width  # words [first, last)
        b0, b1 = first >> 2, (last + 3) >> 2
        enc = Cipher(algorithms.AES(bytes(seed)), modes.CTR(b0.to_bytes(16, "big"))).encryptor()
        words = np.frombuffer(enc.update(bytes(16 * (b1 - b0))), dtype="<u4")
        return words[first - 4 * b0 : last - 4 * b0].reshape(r.size, width).copy()
    # any rows: the blocks of each row (a row of `width` words spans at most `span` blocks)
    span = ((width + 2) >> 2) + 1
    start = r * width
    ctr = np.zeros((r.size, span, 2), dtype=">u8")
    ctr[:, :, 1] = (start >> 2)[:, None] + np.arange(span, dtype=np.int64)
    enc = Cipher(algorithms.AES(bytes(seed)), modes.ECB()).encryptor()
    words = np.frombuffer(enc.update(ctr.tobytes()), dtype="<u4").reshape(r.size, 4 * span)
    # a row's words start at word (start mod 4) of its blocks: one strided copy per offset
    off = start & 3
    out = np.empty((r.size, width), np.uint32)
    for o in range(4):
        at = np.flatnonzero(off == o)
        out[at] = words[at, o : o + width]
    return out
