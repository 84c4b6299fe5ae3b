"""The compiled loop of the point-function check (internal, numba):
:func:`check_accumulate`, which :meth:`secemb.fss.verify.LeafCheck.add` calls with the compiled
kernels.  It equals the numpy reference there bit for bit (``tests/protocols/test_malicious_device.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from secemb.fss._aesni import BLOCKS, mmo_blocks

__all__ = ["check_accumulate"]


@njit(cache=True, nogil=True)
def check_accumulate(leaves, row0, frontier, per_user, rk, cs, offsets, r, acc):  # noqa: ANN001, ANN201
    """The point-function check of a leaf group (:class:`secemb.fss.verify.LeafCheck`), fused:
    ``acc[k] += sum_x r[k // per_user, x] * (F(w) ^ t (cs[k] ^ offsets[x]))`` word-wise mod
    2^64 over the group's rows ``row0 + i`` (key ``(row0 + i) // frontier``, positions
    ``((row0 + i) % frontier) * width + p``), with ``F(w)`` the two MMO counter blocks of the
    leaf word under ``rk`` (``Convert_leaf``) and ``t`` its bit 0; ``leaves`` uint64
    (g, width, 2), C-contiguous."""
    g, width = leaves.shape[0], leaves.shape[1]
    stage = np.empty((2, BLOCKS, 2), np.uint64)
    src, dst = stage[0], stage[1]
    srcp, dstp, rkp = np.int64(src.ctypes.data), np.int64(dst.ctypes.data), np.int64(rk.ctypes.data)
    one, zero = np.uint64(1), np.uint64(0)
    per = BLOCKS // 2  # leaves per AES call: two counter blocks each
    for i in range(g):
        row = row0 + i
        key = row // frontier
        u = key // per_user
        x0 = (row % frontier) * width
        a0 = a1 = a2 = a3 = zero
        c0, c1, c2, c3 = cs[key, 0], cs[key, 1], cs[key, 2], cs[key, 3]
        for p0 in range(0, width, per):
            q = min(per, width - p0)
            for e in range(per):  # past the row's end: its last leaf again (computed, not used)
                w0, w1 = leaves[i, p0 + min(e, q - 1), 0], leaves[i, p0 + min(e, q - 1), 1]
                src[2 * e, 0] = w0
                src[2 * e, 1] = w1
                src[2 * e + 1, 0] = w0
                src[2 * e + 1, 1] = w1 ^ one
            mmo_blocks(rkp, srcp, dstp)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
            for e in range(q):
                x = x0 + p0 + e
                v0, v1, v2, v3 = dst[2 * e, 0], dst[2 * e, 1], dst[2 * e + 1, 0], dst[2 * e + 1, 1]
                if leaves[i, p0 + e, 0] & one:
                    v0 ^= c0 ^ offsets[x, 0]
                    v1 ^= c1 ^ offsets[x, 1]
                    v2 ^= c2 ^ offsets[x, 2]
                    v3 ^= c3 ^ offsets[x, 3]
                a0 += v0 * r[u, x, 0]
                a1 += v1 * r[u, x, 1]
                a2 += v2 * r[u, x, 2]
                a3 += v3 * r[u, x, 3]
        acc[key, 0] += a0
        acc[key, 1] += a1
        acc[key, 2] += a2
        acc[key, 3] += a3
