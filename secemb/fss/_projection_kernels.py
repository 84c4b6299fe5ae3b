"""The compiled loop of :func:`secemb.fss.projections.project_each` (hazmat, numba).

It reads the ternary entries straight off the packed AES-CTR streams, two bits per entry
(:mod:`secemb.fss.projections` specifies the layout), without expanding them to an array.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def ternary_products(stream: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[d, i] = <r_i^(d), x[d]> mod 2^64`` for streams uint8 (c, >= ceil(2 rows L / 8)),
    ring ``x`` (c, L) uint32 or uint64 and ``out`` uint64 (c, rows).

    Entry ``(i, j)`` of device ``d``'s rows is ``b_{2e} - b_{2e+1}`` with ``e = i L + j`` and
    ``b_s = (stream[d, s >> 3] >> (s & 7)) & 1``; both bits of an entry lie in one byte (``2e``
    is even).  Sums wrap modulo 2^64, so reducing ``out`` to ``x``'s dtype gives the result
    modulo ``2^32`` as well.
    """
    devices, length = x.shape
    rows = out.shape[1]
    for d in range(devices):
        for i in range(rows):
            acc = np.uint64(0)
            base = 2 * i * length
            for j in range(length):
                p = base + 2 * j
                v = stream[d, p >> 3] >> (p & 7)
                xv = np.uint64(x[d, j])
                acc += xv * np.uint64(v & 1)
                acc -= xv * np.uint64((v >> 1) & 1)
            out[d, i] = acc
