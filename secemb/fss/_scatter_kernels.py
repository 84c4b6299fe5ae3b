"""The compiled loop of :meth:`secemb.fss.cuckoo.CuckooLayout.scatter` (hazmat, numba).

An item's row of the result is the sum of its (one to three) rows of the bucket form, summed
straight into the row: each row of the bucket form an item occupies is read once, each row of the
result written once, with no temporary.  The numpy reference gathers one table-sized array a hash
(23 MB at the Yelp stand-in) and adds them; it gives the same words (sums in the ring's own
unsigned words, modulo ``2^k``), bit for bit (``tests/fss/test_s27_scatter.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def scatter_rows(flat: np.ndarray, occurrences: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[i] = flat[a] + flat[b] + flat[c]`` for the rows ``a, b, c = occurrences[i]`` that
    are not -1, in the words' ring.

    ``flat`` the bucket form's rows (B M, w), ``occurrences`` int64 (n, 3) the rows of each of
    ``n`` items (:attr:`~secemb.fss.cuckoo.CuckooLayout.occurrences`: the first always a row, -1
    only after an item's last), ``out`` (n, w) of ``flat``'s dtype; all C-contiguous.  The rows are
    indexed unchecked: the caller passes a layout's occurrences and a bucket form of its shape.
    One loop for each count of rows, each writing the row once (a copy of the first row and an
    addition of each other, for any number of hashes, took a third longer at the Yelp stand-in)."""
    if occurrences.shape[1] != 3:
        raise ValueError("scatter_rows sums three hashes' rows")
    width = out.shape[1]
    for i in range(out.shape[0]):
        a, b, c = occurrences[i, 0], occurrences[i, 1], occurrences[i, 2]
        if c >= 0:
            for j in range(width):
                out[i, j] = flat[a, j] + flat[b, j] + flat[c, j]
        elif b >= 0:
            for j in range(width):
                out[i, j] = flat[a, j] + flat[b, j]
        else:
            for j in range(width):
                out[i, j] = flat[a, j]
