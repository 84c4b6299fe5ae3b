"""The compiled loop of :func:`secemb.fss.projections.project_each` (hazmat, numba).

It reads the ternary entries straight off the packed AES-CTR streams, two bits per entry
(:mod:`secemb.fss.projections` specifies the layout), without expanding them to an array.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def ternary_products(stream: np.ndarray, devices: np.ndarray, which: np.ndarray, x: np.ndarray,
                     out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[d, i] = <r_i^(d), x[d]> mod 2^64`` for each device ``d = devices[m]`` (intp (c,)), its
    rows those of stream ``which[m]`` (intp (c,), each in ``[0, s)``) of the streams uint8
    (s, >= rows * ceil(L / 4)); ring ``x`` (n, L) uint32 or uint64, ``out`` uint64 (n, rows) (the
    other devices' rows untouched).

    Entry ``(i, j)`` of device ``d``'s rows is ``a - b`` with ``v = stream[which[m], i B + j // 4]``,
    ``B = ceil(L / 4)``, ``a = (v >> 2 (j mod 4)) & 1``, ``b = (v >> (2 (j mod 4) + 1)) & 1``.
    A device's ``x`` is first laid out by phase, ``xq[q, k] = x[4 k + q]`` (zeros past ``L``: the
    row's unused last entries), so that the loop over a row's bytes ``k`` reads the stream and
    ``xq[q]`` contiguously for each phase ``q``.  The +1 and -1 terms go to two sums through a mask
    (``x & -a``), which vectorizes; sums wrap modulo 2^64, so reducing ``out`` to ``x``'s dtype gives
    the result modulo ``2^32`` as well.
    """
    length = x.shape[1]
    rows = out.shape[1]
    per_row = (length + 3) // 4
    zero = np.uint64(0)
    xq = np.zeros((4, per_row), np.uint64)
    for m in range(devices.size):
        d = devices[m]
        s = which[m]
        for j in range(length):
            xq[j & 3, j >> 2] = np.uint64(x[d, j])
        for i in range(rows):
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
