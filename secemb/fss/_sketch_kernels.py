"""The compiled loops of the sketch check (internal, numba): :data:`sketch_accumulate`, which
:meth:`secemb.fss.sketch.SketchCheck.add` calls with the compiled kernels -- the vector loop
:func:`sketch_accumulate_ifma` where the CPU has VAES and AVX-512 IFMA
(:data:`secemb.fss._aesni.IFMA`), else the scalar loop :func:`sketch_accumulate_scalar` -- and
:func:`sketch_schedules`, the devices' AES-128 round keys, and :func:`shares_core`, the servers'
input shares of the sketches checked and (server 1) negated in one pass
(:func:`secemb.fss.sketch.server_inputs`).  Both loops equal the numpy reference there bit for bit,
and Python integers with OpenSSL's AES (``tests/fss/test_s29_sketch.py``, the scalar loop also in a
process that hides IFMA or VAES).

The IFMA loop hands each key's run of leaves (its rows in a group are consecutive leaves at
consecutive positions) to :func:`secemb.fss._aesni.sketch_leaves`, which keeps the AES blocks
and the F_p sums in vector registers (52-bit limb products, four leaves a 256-bit vector); on
session 28's captured ML-100K round it ran below the point-function check's cost (0.37-0.42 ms
a server, 0.93-0.96x ``check_accumulate``, the scalar loop 1.46-1.49x; on the full layout's
shape 0.80-0.89x, the scalar loop 1.22-1.49x; alternating runs, session 29, helper A, under
load).  A 512-bit variant, fresh partial sums a group and a 43-bit split of ``z`` (six
multiply-adds a product, the coefficients' high limbs precomputed) ran no faster.  Where a
group's rows are whole keys of whole chunks (``frontier`` 1, the cuckoo layout's 32-leaf
buckets), :func:`_sketch_short_keys` hands each device's keys to one
:func:`secemb.fss._aesni.sketch_rows` call (the schedule loaded once, a key's sums written to its
slot, reduced and added after): on the robust bench's captured round (2 groups of 2,500 keys x 32
leaves, 20 devices) 0.474 -> 0.393 ms a server, lower in 397 of 400 alternating pairs (thread
time, load 1.1-2.0; session 32, helper K).  The scalar
loop:

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
from secemb.fss._aesni import BLOCKS, IFMA, LANES, SKETCH_CHUNKS, key_expand, mmo_blocks, sketch_leaves, sketch_rows

_P = np.uint64(0x1FFFFFFFFFFFFFFF)

__all__ = ["LANES", "mac128", "red64", "fold128", "red128", "addp", "subp", "mulp", "sketch_accumulate",
           "sketch_accumulate_scalar", "sketch_accumulate_ifma", "sketch_schedules", "shares_core"]



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


@njit(inline="always")
def subp(a, b):  # noqa: ANN001, ANN201
    """``a - b mod p`` for ``a, b`` in ``[0, p)``."""
    return a - b if a >= b else a + np.uint64(0x1FFFFFFFFFFFFFFF) - b


@njit(inline="always")
def mulp(a, b):  # noqa: ANN001, ANN201
    """``a b mod p`` for ``a, b`` in ``[0, p)``: one 128-bit product (:func:`mac128`), reduced at once."""
    zero = np.uint64(0)
    hi, lo = zero, zero
    hi, lo = mac128(hi, lo, a, b)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    return red128(hi, lo)


@njit(cache=True, nogil=True)
def sketch_schedules(keys, out):  # noqa: ANN001, ANN201
    """The AES-128 round keys of ``n`` 16-byte keys ``keys`` uint8 (n, 16) into ``out`` uint64
    (n, 11, 2W) (each round key stored ``W`` times, :mod:`secemb.fss._aesni`'s layout); both
    C-contiguous (read and written by address)."""
    kp, op = np.int64(keys.ctypes.data), np.int64(out.ctypes.data)
    for u in range(keys.shape[0]):
        key_expand(kp + 16 * u, op + out.strides[0] * u)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter


@njit(cache=True, nogil=True)
def sketch_accumulate_scalar(leaves, row0, frontier, per_user, rks, r, r2, acc):  # noqa: ANN001, ANN201
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


@njit(cache=True, nogil=True)
def sketch_accumulate_ifma(leaves, row0, frontier, per_user, rks, r, r2, acc):  # noqa: ANN001, ANN201
    """:func:`sketch_accumulate_scalar`'s sums (the same arguments and contract; ``r`` and ``r2``
    C-contiguous too, read by address) through the IFMA intrinsic
    :func:`secemb.fss._aesni.sketch_leaves` (only where :data:`~secemb.fss._aesni.IFMA`): a
    key's rows in the group are consecutive leaves at consecutive positions, so each key's run
    goes to the intrinsic :data:`~secemb.fss._aesni.BLOCKS` leaves a chunk, at most
    :data:`~secemb.fss._aesni.SKETCH_CHUNKS` chunks a call, its remainder staged with the lanes
    past its end masked; the calls' exact sums are reduced mod ``p`` and added to ``acc``.  Arrays it
    would read by address in another layout are refused (ValueError), never read as if contiguous
    (finding S32-X2)."""
    if not (leaves.flags.c_contiguous and rks.flags.c_contiguous and r.flags.c_contiguous
            and r2.flags.c_contiguous and r2.shape == r.shape):
        raise ValueError("sketch_accumulate_ifma reads leaves, rks, r and r2 by address: they must be C-contiguous "
                         "(and r2 of r's shape)")
    g, width = leaves.shape[0], leaves.shape[1]
    if frontier == 1 and width % BLOCKS == 0 and width <= SKETCH_CHUNKS * BLOCKS:
        _sketch_short_keys(leaves, row0, per_user, rks, r, r2, acc)
        return
    flat = leaves.reshape(g * width, 2)
    src = np.zeros((BLOCKS, 2), np.uint64)
    rs = np.zeros(BLOCKS, np.uint64)
    r2s = np.zeros(BLOCKS, np.uint64)
    every = np.full(BLOCKS, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64)
    tail = np.zeros(BLOCKS, np.uint64)
    sums = np.empty(4, np.uint64)
    sp = np.int64(sums.ctypes.data)
    base, kbase, rstride = np.int64(leaves.ctypes.data), np.int64(rks.ctypes.data), np.int64(rks.strides[0])
    rbase, r2base, cstride = np.int64(r.ctypes.data), np.int64(r2.ctypes.data), np.int64(r.strides[0])
    # keys by index (no division carried from one key to the next): key k's rows [lo, hi) of the walk
    for key in range(row0 // frontier, (row0 + g - 1) // frontier + 1 if g else 0):
        lo, hi = max(row0, key * frontier), min(row0 + g, (key + 1) * frontier)
        u = key // per_user
        n, j0, x0 = (hi - lo) * width, (lo - row0) * width, (lo - key * frontier) * width
        rkp = kbase + u * rstride
        a = b = c = np.uint64(0)
        done = 0
        while done < n:
            chunks = min(SKETCH_CHUNKS, (n - done) // BLOCKS)
            if chunks:
                sketch_leaves(rkp, base + np.int64(16) * (j0 + done), rbase + u * cstride + np.int64(8) * (x0 + done),  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
                              r2base + u * cstride + np.int64(8) * (x0 + done), np.int64(every.ctypes.data), chunks, sp)
                done += chunks * BLOCKS
            else:  # fewer than BLOCKS leaves left: staged, the lanes past them masked
                q = n - done
                for e in range(BLOCKS):
                    live = e < q
                    src[e, 0] = flat[j0 + done + e, 0] if live else np.uint64(0)
                    src[e, 1] = flat[j0 + done + e, 1] if live else np.uint64(0)
                    rs[e] = r[u, x0 + done + e] if live else np.uint64(0)
                    r2s[e] = r2[u, x0 + done + e] if live else np.uint64(0)
                    tail[e] = np.uint64(0xFFFFFFFFFFFFFFFF) if live else np.uint64(0)
                sketch_leaves(rkp, np.int64(src.ctypes.data), np.int64(rs.ctypes.data), np.int64(r2s.ctypes.data),  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
                              np.int64(tail.ctypes.data), 1, sp)
                done = n
            a, b, c = addp(a, sums[0]), addp(b, sums[1]), addp(c, sums[2])
        acc[key, 0] = addp(acc[key, 0], a)
        acc[key, 1] = addp(acc[key, 1], b)
        acc[key, 2] = addp(acc[key, 2], c)


@njit(cache=True, nogil=True)
def _sketch_short_keys(leaves, row0, per_user, rks, r, r2, acc):  # noqa: ANN001, ANN201
    """:func:`sketch_accumulate_ifma` of a group whose rows are whole keys (``frontier`` 1: key
    ``row0 + i`` is row ``i``, its positions ``[0, width)``) of whole chunks (``width`` a multiple
    of :data:`~secemb.fss._aesni.BLOCKS`, at most :data:`~secemb.fss._aesni.SKETCH_CHUNKS` of
    them): each device's keys in one :func:`~secemb.fss._aesni.sketch_rows` call (its schedule
    loaded once, its coefficients ``r[u, :width]`` shared), the sums reduced mod ``p`` and added
    to ``acc``."""
    g, width = leaves.shape[0], leaves.shape[1]
    sums = np.empty((g, 4), np.uint64)
    base, kbase, rstride = np.int64(leaves.ctypes.data), np.int64(rks.ctypes.data), np.int64(rks.strides[0])
    rbase, r2base, cstride = np.int64(r.ctypes.data), np.int64(r2.ctypes.data), np.int64(r.strides[0])
    sp = np.int64(sums.ctypes.data)
    lo = row0
    while lo < row0 + g:  # the rows of device u: keys [lo, hi)
        u = lo // per_user
        hi = min(row0 + g, (u + 1) * per_user)
        i = lo - row0
        sketch_rows(kbase + u * rstride, base + np.int64(16) * i * width, rbase + u * cstride,  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
                    r2base + u * cstride, width // BLOCKS, hi - lo, sp + np.int64(32) * i)
        lo = hi
    for i in range(g):
        key = row0 + i
        acc[key, 0] = addp(acc[key, 0], sums[i, 0])
        acc[key, 1] = addp(acc[key, 1], sums[i, 1])
        acc[key, 2] = addp(acc[key, 2], sums[i, 2])


@njit(cache=True, nogil=True)
def shares_core(x, negate):  # noqa: ANN001, ANN201
    """Whether every element of ``x`` (uint64, 1-D) is below ``p``; with ``negate`` each of them
    is replaced by ``-x mod p`` (``p - x``, and 0 for 0) in the same pass (an element at or above
    ``p`` is left as it is; the caller refuses the array then).  :func:`secemb.fss.sketch.server_inputs`'
    check and server 1's negation (the numpy lines of ``sketch._shares``) in one pass."""
    below = True
    for i in range(x.size):
        v = x[i]
        if v >= _P:
            below = False
        elif negate and v:
            x[i] = _P - v
    return below


#: the loop :meth:`secemb.fss.sketch.SketchCheck.add` calls: the IFMA one where the CPU has it
sketch_accumulate = sketch_accumulate_ifma if IFMA else sketch_accumulate_scalar
