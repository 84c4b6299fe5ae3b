"""The compiled loop of the sketch check (internal, numba): :func:`sketch_accumulate`, which
:meth:`secemb.fss.sketch.SketchCheck.add` calls with the compiled kernels, and
:func:`sketch_schedules`, the devices' AES-128 round keys.  It equals the numpy reference there
bit for bit, and Python integers with OpenSSL's AES (``tests/fss/test_s29_sketch.py``).

Per leaf word ``w`` the sketch needs ``z = (AES_{k_u}(w) XOR w) mod p``, the keyed MMO block
of the leaf under its device's key, read as ``hi 2^64 + lo`` (word 1, word 0) and reduced mod
``p = 2^61 - 1``; then ``r_x z``, ``r_x^2 z`` and ``z`` are summed per key.  The row's leaves go
to the AES intrinsic :func:`secemb.fss._aesni.mmo_blocks` :data:`~secemb.fss._aesni.BLOCKS` at a
time in place (a row's remainder through a staging buffer).  ``z`` is only folded below
``2^62 + 2^6`` (:func:`fold128`, congruent to it mod ``p``), each product is 64 x 64 -> 128 bits
(an LLVM ``i128`` multiply, :func:`mac128`), summed unreduced over the ``BLOCKS = 16`` leaves of
an AES call (16 products below ``2^61 (2^62 + 2^6)`` stay below ``2^127 + 2^71 < 2^128``), with
one Mersenne reduction per sum and call.  Ported from session 28's prototype (helper E,
``sketch_accumulate``, which reduced ``z`` fully and summed 32 leaves); the fold instead of the
reduction took about 10 % off the loop on session 28's captured round (session 29, helper A).
``bench overhead``'s kernel clock times this module's loops (``secemb.bench.overhead``).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from secemb.fss import _kernel_cache  # noqa: F401 - first: the kernels' cache also covers _aesni's intrinsics
from secemb.fss._aesni import BLOCKS, LANES, _key_expand, mmo_blocks

__all__ = ["LANES", "mac128", "red64", "fold128", "red128", "addp", "sketch_accumulate", "sketch_schedules"]



@intrinsic
def mac128(typingctx, hi, lo, a, b):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """``(hi 2^64 + lo) + a b`` as a 128-bit integer (wrapping mod ``2^128``), returned as
    ``(hi, lo)`` uint64: one LLVM ``i128`` multiply-add."""
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        h, l_, x, y = args
        i128, i64 = ir.IntType(128), ir.IntType(64)
        acc = builder.or_(builder.shl(builder.zext(h, i128), ir.Constant(i128, 64)), builder.zext(l_, i128))
        s = builder.add(acc, builder.mul(builder.zext(x, i128), builder.zext(y, i128)))
        return context.make_tuple(builder, signature.return_type,
                                  [builder.trunc(builder.lshr(s, ir.Constant(i128, 64)), i64), builder.trunc(s, i64)])

    return sig, codegen


@njit(inline="always")
def red64(w):  # noqa: ANN001, ANN201
    """``w mod p`` in ``[0, p)`` for any uint64 ``w``."""
    m = np.uint64(0x1FFFFFFFFFFFFFFF)
    s = (w & m) + (w >> np.uint64(61))  # < 2^61 + 8
    return s - m if s >= m else s


@njit(inline="always")
def fold128(hi, lo):  # noqa: ANN001, ANN201
    """A uint64 below ``2^62 + 2^6`` congruent to ``hi 2^64 + lo`` mod ``p``, for any 128-bit
    value: ``2^64 = 8 (mod p)``, so the value is ``t 2^61 + (lo & m)`` with
    ``t = hi 8 + (lo >> 61)`` (67 bits), and ``t 2^61 = (t >> 61) + (t & m)``."""
    m = np.uint64(0x1FFFFFFFFFFFFFFF)
    return (hi >> np.uint64(58)) + (((hi << np.uint64(3)) | (lo >> np.uint64(61))) & m) + (lo & m)


@njit(inline="always")
def red128(hi, lo):  # noqa: ANN001, ANN201
    """``(hi 2^64 + lo) mod p`` in ``[0, p)`` for any 128-bit value (:func:`fold128`, then
    :func:`red64`)."""
    return red64(fold128(hi, lo))


@njit(inline="always")
def addp(a, b):  # noqa: ANN001, ANN201
    """``a + b mod p`` for ``a, b`` in ``[0, p)``."""
    m = np.uint64(0x1FFFFFFFFFFFFFFF)
    s = a + b
    return s - m if s >= m else s


@njit(cache=True, nogil=True)
def sketch_schedules(keys, out):  # noqa: ANN001, ANN201
    """The AES-128 round keys of ``n`` 16-byte keys ``keys`` uint8 (n, 16) into ``out`` uint64
    (n, 11, 2W) (each round key stored ``W`` times, :mod:`secemb.fss._aesni`'s layout); both
    C-contiguous (read and written by address)."""
    kp, op = np.int64(keys.ctypes.data), np.int64(out.ctypes.data)
    for u in range(keys.shape[0]):
        _key_expand(kp + 16 * u, op + out.strides[0] * u)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter


@njit(cache=True, nogil=True)
def sketch_accumulate(leaves, row0, frontier, per_user, rks, r, r2, acc):  # noqa: ANN001, ANN201
    """The sketch of a leaf group (:class:`secemb.fss.sketch.SketchCheck`), fused:
    ``acc[k] += (sum_x r[u, x] z(x), sum_x r2[u, x] z(x), sum_x z(x))`` mod ``p`` over the group's
    rows ``row0 + i`` (key ``k = (row0 + i) // frontier``, device ``u = k // per_user``, positions
    ``x = ((row0 + i) % frontier) * width + j``), ``z`` the leaf's keyed MMO block under ``rks[u]``
    reduced mod ``p`` (module docstring).  ``leaves`` uint64 (g, width, 2), ``rks`` uint64
    (n, 11, 2W), ``r`` and ``r2`` uint64 (n, mp) in ``[0, p)``, ``acc`` uint64 (K, 3) in
    ``[0, p)``, all C-contiguous (``leaves`` and ``rks`` read by address).  Indexes unchecked:
    the caller checks that the rows are rows of these keys' walk (``row0 + g <= K frontier``,
    ``frontier width <= mp``, ``K = n per_user``).

    A row's leaves go :data:`~secemb.fss._aesni.BLOCKS` at a time to ``mmo_blocks`` in place;
    a remainder shorter than that through a staging buffer padded with the row's last leaf (its
    blocks computed, not used)."""
    g, width = leaves.shape[0], leaves.shape[1]
    src = np.empty((BLOCKS, 2), np.uint64)
    dst = np.empty((BLOCKS, 2), np.uint64)
    srcp, dstp = np.int64(src.ctypes.data), np.int64(dst.ctypes.data)
    base, kbase, rstride = np.int64(leaves.ctypes.data), np.int64(rks.ctypes.data), np.int64(rks.strides[0])
    zero, one = np.uint64(0), np.uint64(1)
    for i in range(g):
        row = row0 + i
        key = row // frontier
        u = key // per_user
        x0 = (row % frontier) * width
        rkp = kbase + u * rstride
        for p0 in range(0, width, BLOCKS):
            q = min(BLOCKS, width - p0)
            if q == BLOCKS:  # whole blocks: the intrinsic reads the leaves in place
                mmo_blocks(rkp, base + np.int64(16) * (i * width + p0), dstp)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
            else:
                for e in range(BLOCKS):
                    src[e, 0] = leaves[i, p0 + min(e, q - 1), 0]
                    src[e, 1] = leaves[i, p0 + min(e, q - 1), 1]
                mmo_blocks(rkp, srcp, dstp)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
            # one unreduced sum a call: 16 products of r < 2^61 and z < 2^62 + 2^6 stay below 2^128;
            # BLOCKS steps, a constant (LLVM unrolls them: about 20 % faster than q steps), the
            # slots past a tail's end adding nothing (their position clamped to the row's last)
            ah = al = bh = bl = ch = cl = zero
            for e in range(BLOCKS):
                live, x = e < q, x0 + p0 + min(e, q - 1)
                z = fold128(dst[e, 1], dst[e, 0]) if live else zero  # z mod p, below 2^62 + 2^6
                ra = r[u, x] if live else zero
                rb = r2[u, x] if live else zero
                ah, al = mac128(ah, al, ra, z)
                bh, bl = mac128(bh, bl, rb, z)
                ch, cl = mac128(ch, cl, z, one)  # a 128-bit add (the multiply by 1 folds away)
            acc[key, 0] = addp(acc[key, 0], red128(ah, al))
            acc[key, 1] = addp(acc[key, 1], red128(bh, bl))
            acc[key, 2] = addp(acc[key, 2], red128(ch, cl))
