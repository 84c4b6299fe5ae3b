"""The compiled loop of the point-function check (internal, numba):
:func:`check_accumulate`, which :meth:`secemb.fss.verify.LeafCheck.add` calls with the compiled
kernels.  It equals the numpy reference there bit for bit (``tests/protocols/test_malicious_device.py``,
``tests/fss/test_s28_check_kernel.py``).

Per leaf word ``w`` the check needs ``F(w)``, the two MMO blocks of ``(w0, w1)`` and
``(w0, w1 ^ 1)`` (``Convert_leaf``'s first two counter blocks), which are the four check words
in order.  The AES intrinsic :func:`secemb.fss._aesni.check_leaves` folds :data:`LEAVES` leaves
into a key's sums with each leaf in vector registers; this loop hands it a row's leaves in place
and stages a row's remainder.  ``bench overhead``'s kernel clock times this module's loop
(``secemb.bench.overhead``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from secemb.fss import _kernel_cache  # noqa: F401 - first: the kernels' cache also covers _aesni's intrinsics
from secemb.fss._aesni import LEAVES, check_leaves

__all__ = ["check_accumulate"]


@njit(cache=True, nogil=True)
def check_accumulate(leaves, row0, frontier, per_user, rk, cs, offsets, r, acc):  # noqa: ANN001, ANN201
    """The point-function check of a leaf group (:class:`secemb.fss.verify.LeafCheck`), fused:
    ``acc[k] += sum_x r[k // per_user, x] * (F(w) ^ t (cs[k] ^ offsets[x]))`` word-wise mod
    2^64 over the group's rows ``row0 + i`` (key ``(row0 + i) // frontier``, positions
    ``((row0 + i) % frontier) * width + p``), with ``F(w)`` the two MMO counter blocks of the
    leaf word under ``rk`` (``Convert_leaf``) and ``t`` its bit 0; ``leaves`` uint64
    (g, width, 2), ``cs`` and ``acc`` uint64 (K, 4), ``offsets`` (mp, 4), ``r`` (U, mp, 4), all
    C-contiguous (read and written by address).  Indexes unchecked: the caller checks that the
    rows are rows of these keys' walk (``row0 + g <= K frontier``, ``frontier width <= mp``).

    A row's leaves go :data:`LEAVES` at a time to :func:`check_leaves`, in place; the rest of a
    row (``width`` not a multiple of :data:`LEAVES`) through a staging buffer whose unused slots
    hold challenge words 0, so they add nothing."""
    g, width, mp = leaves.shape[0], leaves.shape[1], r.shape[1]
    st_leaves = np.zeros((LEAVES, 2), np.uint64)
    st_offsets = np.zeros((LEAVES, 4), np.uint64)
    st_r = np.zeros((LEAVES, 4), np.uint64)  # slots past a tail's end stay 0: they add nothing
    rkp, lp, op = np.int64(rk.ctypes.data), np.int64(leaves.ctypes.data), np.int64(offsets.ctypes.data)
    rp, cp, ap = np.int64(r.ctypes.data), np.int64(cs.ctypes.data), np.int64(acc.ctypes.data)
    slp, sop, srp = np.int64(st_leaves.ctypes.data), np.int64(st_offsets.ctypes.data), np.int64(st_r.ctypes.data)
    full = width - width % LEAVES
    for i in range(g):
        row = row0 + i
        key = row // frontier
        x0 = (row % frontier) * width
        ux0 = (key // per_user) * mp + x0
        for p in range(0, full, LEAVES):
            check_leaves(rkp, lp + 16 * (i * width + p), op + 32 * (x0 + p), rp + 32 * (ux0 + p),  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
                         cp + 32 * key, ap + 32 * key)
        if full < width:
            for e in range(width - full):
                st_leaves[e, 0], st_leaves[e, 1] = leaves[i, full + e, 0], leaves[i, full + e, 1]
                for c in range(4):
                    st_offsets[e, c] = offsets[x0 + full + e, c]
                    st_r[e, c] = r[key // per_user, x0 + full + e, c]
            check_leaves(rkp, slp, sop, srp, cp + 32 * key, ap + 32 * key)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
