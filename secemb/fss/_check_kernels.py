"""The compiled loop of the point-function check (internal, numba):
:func:`check_accumulate`, which :meth:`secemb.fss.verify.LeafCheck.add` calls with the compiled
kernels.  It equals the numpy reference there bit for bit (``tests/protocols/test_malicious_device.py``,
``tests/fss/test_s28_check_kernel.py``).

Per leaf word ``w`` the check needs ``F(w)``, the two MMO blocks of ``(w0, w1)`` and
``(w0, w1 ^ 1)`` (``Convert_leaf``'s first two counter blocks), which are the four check words
in order.  The intrinsic :func:`check_leaves` keeps all of a leaf in vector registers: with VAES
one 256-bit vector holds both blocks (without it, two 128-bit vectors), so the AES output,
the control-bit mask ``-(w0 & 1)`` applied to ``cs ^ offsets[x]``, and the four 64-bit
multiply-adds with the challenge words are vector operations on it, with no staging through
memory; :data:`LEAVES` leaves a call put 16 AES vectors in flight (with VAES, 16 leaves a call
ran faster than 8 or 32).  The IR builders are :mod:`secemb.fss._aesni`'s.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit
from numba.extending import intrinsic

from secemb.fss._aesni import LANES, _I64, _VEC, _const, _encrypt, _load, _schedule, _shuffle, _sig, _store, _vptr

__all__ = ["LEAVES", "check_leaves", "check_accumulate"]

#: leaves a :func:`check_leaves` call folds in: 16 AES vectors (32 blocks with VAES, else 16)
LEAVES = 8 * LANES


@intrinsic
def check_leaves(typingctx, rk, leaves, offsets, r, cs, acc):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """``acc += sum_j r[j] * (F(w_j) ^ t_j (cs ^ offsets[j]))`` word-wise mod 2^64 for
    :data:`LEAVES` leaf words ``w_j`` at ``leaves`` (uint64 (LEAVES, 2)), ``t_j`` bit 0 of
    ``w_j``, ``F`` the MMO of the counter blocks ``(w0, w1)``, ``(w0, w1 ^ 1)`` under ``rk`` (an
    (11, 2W) schedule); ``offsets`` and ``r`` uint64 (LEAVES, 4), ``cs`` and ``acc`` uint64 (4,).
    All addresses of C-contiguous buffers."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        rks = _schedule(builder, args[0])
        v2 = ir.VectorType(_I64, 2)
        lp = builder.inttoptr(args[1], v2.as_pointer())
        op, rp, cp, ap = (_vptr(builder, a) for a in args[2:6])
        per = 2 // LANES  # vectors a leaf's four words fill
        cs = [_load(builder, cp, v) for v in range(per)]
        acc = [_load(builder, ap, v) for v in range(per)]
        zero = ir.Constant(_VEC, None)
        xs, masks = [], []
        for j in range(LEAVES):
            w = builder.load(builder.gep(lp, [_const(j)]), align=1)
            if LANES == 2:  # [w0, w1, w0, w1 ^ 1]
                xs.append([builder.xor(_shuffle(builder, w, w, [0, 1, 0, 1]), ir.Constant(_VEC, [0, 0, 0, 1]))])
            else:
                xs.append([w, builder.xor(w, ir.Constant(_VEC, [0, 1]))])
            t = builder.and_(w, ir.Constant(v2, [1, 0]))
            masks.append(builder.sub(zero, _shuffle(builder, t, t, [0] * (2 * LANES))))  # all ones where t
        enc = _encrypt(builder, [(rks, x) for leaf in xs for x in leaf])
        for j in range(LEAVES):
            for v in range(per):
                y = builder.xor(enc[j * per + v], xs[j][v])
                y = builder.xor(y, builder.and_(masks[j], builder.xor(cs[v], _load(builder, op, j * per + v))))
                acc[v] = builder.add(acc[v], builder.mul(y, _load(builder, rp, j * per + v)))
        for v in range(per):
            _store(builder, acc[v], ap, v)

    return _sig(6), codegen


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
