"""The compiled loops of :func:`secemb.fss.projections.project_each` and
:func:`secemb.fss.projections.project_affine` (hazmat, numba).

They read the ternary entries straight off the packed AES-CTR streams, two bits per entry
(:mod:`secemb.fss.projections` specifies the layout), without expanding them to an array.  A
device's vector is first laid out by phase, ``xq[q, k] = x[4 k + q]`` (zeros past ``L``: the row's
unused last entries), so that the loop over a row's bytes ``k`` reads the stream and ``xq[q]``
contiguously for each phase ``q``.  The +1 and -1 terms go to two sums through a mask
(``x & -a``), which vectorizes; sums wrap modulo 2^64, so reducing a result to a 32-bit ring
gives it modulo ``2^32`` as well.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(inline="always")
def _rows_products(stream, s, xq, out, d):  # noqa: ANN001, ANN202  # pragma: no cover - compiled
    """``out[d, i] = <r_i, x> mod 2^64`` for every row ``i`` of stream ``s``, ``x`` laid out by
    phase in ``xq`` uint64 (4, ceil(L / 4))."""
    per_row = xq.shape[1]
    zero = np.uint64(0)
    for i in range(out.shape[1]):
        plus = zero
        minus = zero
        base = i * per_row
        for q in range(4):
            shift = 2 * q
            for k in range(per_row):
                v = stream[s, base + k] >> shift
                xv = xq[q, k]
                plus += xv & (zero - np.uint64(v & 1))
                minus += xv & (zero - np.uint64((v >> 1) & 1))
        out[d, i] = plus - minus


@njit(cache=True, nogil=True)
def ternary_products(stream: np.ndarray, devices: np.ndarray, which: np.ndarray, x: np.ndarray,
                     out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[d, i] = <r_i^(d), x[d]> mod 2^64`` for each device ``d = devices[m]`` (intp (c,)), its
    rows those of stream ``which[m]`` (intp (c,), each in ``[0, s)``) of the streams uint8
    (s, >= rows * ceil(L / 4)); ring ``x`` (n, L) uint32 or uint64, ``out`` uint64 (n, rows) (the
    other devices' rows untouched).

    Entry ``(i, j)`` of device ``d``'s rows is ``a - b`` with ``v = stream[which[m], i B + j // 4]``,
    ``B = ceil(L / 4)``, ``a = (v >> 2 (j mod 4)) & 1``, ``b = (v >> (2 (j mod 4) + 1)) & 1``.
    """
    length = x.shape[1]
    xq = np.zeros((4, (length + 3) // 4), np.uint64)
    for m in range(devices.size):
        d = devices[m]
        for j in range(length):
            xq[j & 3, j >> 2] = np.uint64(x[d, j])
        _rows_products(stream, which[m], xq, out, d)


@njit(cache=True, nogil=True)
def affine_products(stream: np.ndarray, s: int, base: np.ndarray, count: np.ndarray, words: np.ndarray,
                    negate: bool, tail: np.ndarray, xs: np.ndarray, xq: np.ndarray, out: np.ndarray,
                    d: int) -> None:  # pragma: no cover - compiled
    """``out[d, i] = <r_i, x> mod 2^64`` for the rows of stream ``s`` and the vector
    ``x = ((-1)^negate (base + count[:, None] words)).ravel() || tail``, computed here (modulo 2^64,
    which is modulo the ring's ``2^k`` too): ring ``base`` and ``words`` (S, w), integer ``count``
    (S,), ring ``tail`` (P,); scratch ``xs`` uint64 (L,), ``L = S w + P``, and ``xq`` uint64 (4,
    ceil(L / 4)) (both overwritten); ``out`` uint64 (n, rows).  ``x`` is computed in order into
    ``xs`` (a loop that vectorizes), then laid out by phase."""
    zero = np.uint64(0)
    slots, width = base.shape
    sign = zero - np.uint64(1) if negate else np.uint64(1)
    for a in range(slots):
        c = np.uint64(count[a])
        at = a * width
        for e in range(width):
            xs[at + e] = sign * (np.uint64(base[a, e]) + c * np.uint64(words[a, e]))
    at = slots * width
    for p in range(tail.shape[0]):
        xs[at + p] = np.uint64(tail[p])
    length = xs.shape[0]
    for j in range(length):
        xq[j & 3, j >> 2] = xs[j]
    for j in range(length, 4 * xq.shape[1]):
        xq[j & 3, j >> 2] = zero
    _rows_products(stream, s, xq, out, d)
