"""Arithmetic in the prime field Z_p of SecEA, vectorized over numpy ``uint64`` arrays.

The prime is the Mersenne prime ``p = 2^31 - 1``.  Why this one:

* every element fits in 31 bits, so a product of two elements is below ``2^62`` and one
  multiplication never leaves ``uint64`` (no object arrays, no Python ints per element);
* it is the largest prime below ``2^31``, so it leaves the widest fixed-point range:
  a decoded average ``L * S / c`` (``L = lcm(1..N)``, see :mod:`.codec`) must satisfy
  ``|L * S / c| < p / 2``, i.e. ``L * max|h| * 2^f < 2^30``;
* elements travel as 4-byte little-endian words.

Inner products over long axes (``M`` entities) use 16-bit limbs of one operand: a product of an
element and a limb is below ``2^47``, so up to ``2^17`` of them add up in ``uint64`` without
wrapping; longer axes are summed in chunks of that length.

Every array here is ``uint64`` with values in ``[0, p)`` unless a docstring says otherwise.
"""

from __future__ import annotations

import math

import numpy as np

from secemb.errors import InvalidParameters
from secemb.randomness import RandomBytes, random_words

__all__ = ["P", "FIELD_BYTES", "uniform", "matmul", "inverse", "to_signed", "as_field"]

P = (1 << 31) - 1
"""The field modulus: the Mersenne prime 2^31 - 1."""
FIELD_BYTES = 4
"""Bytes per element on the wire (little-endian uint32)."""

_CHUNK = 1 << 17  # products < 2^47, so 2^17 of them sum below 2^64


def as_field(values: np.ndarray) -> np.ndarray:
    """Signed or unsigned integers reduced into ``[0, p)`` as ``uint64`` (same shape)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise InvalidParameters(f"field elements must be integers, got dtype {arr.dtype}")
    return np.mod(arr.astype(np.int64), P).astype(np.uint64)


def uniform(rng: RandomBytes, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform elements of Z_p of ``shape`` from the byte source ``rng``, by rejection.

    31-bit words are drawn and the single value ``p = 2^31 - 1`` is rejected, so the result is
    exactly uniform.  Deterministic in ``rng``'s byte stream: two parties expanding the same
    seed (:func:`secemb.randomness.expand_seed`'s generator) obtain the same elements, which is
    how one-time pads are built.
    """
    count = math.prod(shape)
    out = np.empty(count, dtype=np.uint64)
    filled = 0
    while filled < count:
        need = count - filled
        words = random_words(rng, (need + need // 1024 + 8,), np.uint32) & np.uint32(P)
        keep = words[words != np.uint32(P)][:need]
        out[filled : filled + keep.size] = keep
        filled += keep.size
    return out.reshape(shape)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b mod p`` for 2-D field arrays ``a`` of shape (r, m) and ``b`` of shape (m, c).

    ``b`` is split into 16-bit limbs; each limb product is summed exactly in ``uint64`` over
    chunks of at most 2^17 along ``m``.
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise InvalidParameters(f"matmul shapes do not chain: {a.shape} @ {b.shape}")
    a = a.astype(np.uint64, copy=False)
    b = b.astype(np.uint64, copy=False)
    lo = b & np.uint64(0xFFFF)
    hi = b >> np.uint64(16)
    acc_lo = np.zeros((a.shape[0], b.shape[1]), dtype=np.uint64)
    acc_hi = np.zeros_like(acc_lo)
    for start in range(0, a.shape[1], _CHUNK):
        sl = slice(start, start + _CHUNK)
        acc_lo = (acc_lo + (a[:, sl] @ lo[sl]) % np.uint64(P)) % np.uint64(P)
        acc_hi = (acc_hi + (a[:, sl] @ hi[sl]) % np.uint64(P)) % np.uint64(P)
    return (acc_lo + (acc_hi << np.uint64(16)) % np.uint64(P)) % np.uint64(P)


def inverse(values: np.ndarray) -> np.ndarray:
    """Multiplicative inverses in Z_p (Fermat: ``x^(p-2)``), element-wise; zero has none."""
    x = np.asarray(values, dtype=np.uint64) % np.uint64(P)
    if np.any(x == 0):
        raise InvalidParameters("zero has no inverse in Z_p")
    result = np.ones_like(x)
    base = x.copy()
    e = P - 2
    while e:
        if e & 1:
            result = (result * base) % np.uint64(P)
        base = (base * base) % np.uint64(P)
        e >>= 1
    return result


def to_signed(values: np.ndarray) -> np.ndarray:
    """Field elements as ``int64`` in ``(-p/2, p/2)`` (the upper half read as negative)."""
    x = np.asarray(values, dtype=np.uint64).astype(np.int64)
    return np.where(x > P // 2, x - P, x)

