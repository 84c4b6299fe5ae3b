"""The compiled verifier of :func:`secemb.fss.rangeproof.verifier_messages`, the Lagrange
rows of its query (:func:`secemb.fss.field.lagrange_coefficients`) and the AES-256-CTR streams of
server 1's proof seeds (:func:`ctr_streams`, for :func:`secemb.fss.field.expand_many`) (hazmat, numba).

One call a block of devices (:func:`verifier_batch`, since session 33: their coefficients, the query
and the pass below; before, three calls and the allocations between them), one pass over a batch's
witness and proof shares, the devices the innermost loop (since session 26;
one pass a device before), in ``F_p`` (``p = 2^61 - 1``) with the
arithmetic of :mod:`secemb.fss.field` (32-bit limbs, Mersenne reduction): the same linear maps as
the numpy reference (``_verify_reference``'s matrix products), so the same field elements, bit for bit
(``tests/fss/test_rangeproof.py``, ``tests/fss/test_s33_verifier_batch.py``).  The reference's
products go through float64 BLAS in limbs, fast for large batches but a few hundred microseconds of
fixed cost a call; here a device costs ``O(Q (N + 2L + 4M))`` multiply-adds and a batch nothing more.
"""

from __future__ import annotations

import operator

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from secemb.fss._keccak import _shake_rows
from secemb.fss.kernels import read_only

_P = np.uint64((1 << 61) - 1)
_LO32 = np.uint64(0xFFFFFFFF)
_LO29 = np.uint64((1 << 29) - 1)
_S3, _S29, _S32, _S61 = np.uint64(3), np.uint64(29), np.uint64(32), np.uint64(61)


@njit(inline="always")
def _add(a, b):  # noqa: ANN001, ANN202
    """``a + b mod p`` for ``a, b`` in ``[0, p)``."""
    s = a + b
    return s - _P if s >= _P else s


@njit(inline="always")
def _mul(a, b):  # noqa: ANN001, ANN202
    """``a b mod p`` for ``a, b`` in ``[0, p)`` (:func:`secemb.fss.field.mul`)."""
    a0, a1 = a & _LO32, a >> _S32
    b0, b1 = b & _LO32, b >> _S32
    lo = a0 * b0
    mid = a0 * b1 + a1 * b0
    y = (a1 * b1 << _S3) + (mid >> _S29) + ((mid & _LO29) << _S32) + (lo >> _S61) + (lo & _P)  # < 2^63
    y = (y & _P) + (y >> _S61)
    return y - _P if y >= _P else y


@njit(cache=True, nogil=True)
def verifier_core(x, proofs, calls, slots, ring, wire_rows, pads, gadget_columns, delta, witness_column,  # noqa: ANN001, ANN201, PLR0913
                  ring_column, constant, out):
    """Per device ``d`` the field part of its verifier message, written into ``out[d, :2L + 3]``:
    ``z``'s share, then for each query point ``q`` the ``L`` wire shares and the gadget share.

    Shapes (all ``uint64`` field elements, ``n`` devices): ``x`` (n, N) witness shares,
    ``proofs`` (n, 2L + 4M + 5) proof shares (both in any layout: each is read once, into a
    device-minor copy), ``calls`` (n, 2, M/2) and ``slots`` (n, 2, c)
    the devices' coefficients, ``ring`` (n, rows) ring shares (below ``2^58``); the query's
    ``wire_rows`` (Q, M + 2), ``pads`` (Q, c) (zeros for server 1), ``gadget_columns``
    (4M + 5, Q), ``delta``, ``witness_column`` (N,), ``ring_column`` (rows,), ``constant``
    (``0`` for server 1); ``out`` (n, >= 2L + 3).

    Wire ``2i`` at point ``q``: ``s_i (l_A x)_i + s'_i (l_B x)_i`` plus the seeds' terms, wire
    ``2i + 1``: ``(l_A x)_i + (l_B x)_i - pads_(q,i)`` plus the seeds' terms, with ``l_A, l_B``
    the point's Lagrange row at the calls of the two halves and ``(l x)_i = sum_k l_k x_(k c +
    i)`` over the calls ``k`` whose slot ``i`` holds an element (``k c + i < N``).

    The devices are the innermost loop (the shares copied device-minor first), so that each
    query weight is read once for all of them and the multiply-adds of several devices run in
    one vector (about 3 times faster than a pass a device at 20 devices); every sum is taken
    modulo ``p`` with canonical terms, so the order gives the same elements."""
    n, big_n = x.shape
    half, c = calls.shape[2], slots.shape[2]
    big_l = 2 * c
    n_calls = 2 * half
    n_points = wire_rows.shape[0]
    n_gadget = gadget_columns.shape[0]
    rows = ring.shape[1]
    xt = np.ascontiguousarray(x.T)  # (N, n)
    pt = np.ascontiguousarray(proofs.T)  # (2L + 4M + 5, n)
    a = np.empty(n, np.uint64)
    b = np.empty(n, np.uint64)
    for q in range(n_points):
        base = 1 + q * (big_l + 1)
        head, tail = wire_rows[q, 0], wire_rows[q, n_calls + 1]
        for i in range(c):
            a[:] = 0
            b[:] = 0
            for k in range(half):
                e = k * c + i
                if e >= big_n:
                    break
                wa, wb, row = wire_rows[q, 1 + k], wire_rows[q, 1 + half + k], xt[e]
                for d in range(n):
                    xe = row[d]
                    a[d] = _add(a[d], _mul(wa, xe))
                    b[d] = _add(b[d], _mul(wb, xe))
            pad = _P - pads[q, i] if pads[q, i] else pads[q, i]
            j = 2 * i
            for d in range(n):
                left = _add(_mul(slots[d, 0, i], a[d]), _mul(slots[d, 1, i], b[d]))
                right = _add(_add(a[d], b[d]), pad)
                out[d, base + j] = _add(left, _add(_mul(head, pt[j, d]), _mul(tail, pt[big_l + j, d])))
                out[d, base + j + 1] = _add(right, _add(_mul(head, pt[j + 1, d]), _mul(tail, pt[big_l + j + 1, d])))
        a[:] = 0
        for t in range(n_gadget):
            gc, row = gadget_columns[t, q], pt[2 * big_l + t]
            for d in range(n):
                a[d] = _add(a[d], _mul(row[d], gc))
        for d in range(n):
            out[d, base + big_l] = a[d]
    a[:] = 0
    b[:] = 0
    for k in range(half):
        ra, rb = pt[2 * big_l + 1 + k], pt[2 * big_l + 1 + half + k]
        for d in range(n):
            a[d] = _add(a[d], _mul(calls[d, 0, k], ra[d]))
            b[d] = _add(b[d], _mul(calls[d, 1, k], rb[d]))
    e_sum = np.zeros(n, np.uint64)
    for t in range(big_n):
        wc, row = witness_column[t], xt[t]
        for d in range(n):
            e_sum[d] = _add(e_sum[d], _mul(row[d], wc))
    for d in range(n):
        for r in range(rows):
            e_sum[d] = _add(e_sum[d], _mul(ring[d, r], ring_column[r]))
        out[d, 0] = _add(_add(_add(a[d], _mul(delta, b[d])), e_sum[d]), constant)


@njit(cache=True, nogil=True)
def lagrange_rows(points, weights, out):  # noqa: ANN001, ANN201
    """``out[r, j] = weights[j] prod_(m != j) (points[r] - m) mod p``: the Lagrange coefficients
    of the nodes ``0..n-1`` (``n = weights.size``, ``weights`` their barycentric weights) at each
    of the field elements ``points`` (none a node), ``out`` uint64 (points.size, n); prefix and
    suffix products of ``x - m``, no inversion (:func:`secemb.fss.field.lagrange_coefficients`)."""
    n = weights.size
    for r in range(points.size):
        x = points[r]
        acc = np.uint64(1)
        for j in range(n):  # out[r, j] = prod_(m < j) (x - m)
            out[r, j] = acc
            acc = _mul(acc, x - np.uint64(j))
        acc = np.uint64(1)
        for j in range(n - 1, -1, -1):  # times prod_(m > j) (x - m), times w_j
            out[r, j] = _mul(_mul(out[r, j], acc), weights[j])
            acc = _mul(acc, x - np.uint64(j))


@njit(inline="always")
def _uniform(lo, hi):  # noqa: ANN001, ANN202
    """``lo + 2^64 hi mod p`` for any 64-bit words (:func:`secemb.fss.field.from_uniform_bytes` of
    the 16 bytes ``lo || hi``, little-endian): ``2^64 = 8 (mod p)``, so ``hi`` mod ``p`` rotated left
    by 3 in 61 bits."""
    a = (lo & _P) + (lo >> _S61)  # < 2^61 + 8
    a = a - _P if a >= _P else a
    b = (hi & _P) + (hi >> _S61)
    b = b - _P if b >= _P else b
    return _add(a, ((b << _S3) & _P) | (b >> np.uint64(58)))


@njit(cache=True, nogil=True)
def query_columns(lag, half, chunk, n_real, rho_words, place, f, top, pads, witness, ring):  # noqa: ANN001, ANN201, PLR0913
    """The parts of a batch's query besides its Lagrange rows (:func:`secemb.fss.rangeproof._query`,
    whose numpy code is the reference): ``pads[q, i]`` (uint64 (Q, c)), the sum of ``lag[q]``
    (uint64 (Q, M + 2)) over the calls ``k < half`` of both halves whose slot ``i`` holds an element
    (``k c + i < n_real``); with ``rho[r] = rho_words[r, 0] + 2^64 rho_words[r, 1] mod p`` (uint64
    (rows, 2): the query's 16-byte little-endian integers, :func:`_uniform`), ``witness[r (D + 1) +
    j] = -(rho[r] place[j])`` (uint64 (rows (D + 1),), ``place`` (D + 1,)), ``ring[r] = rho[r] f``;
    returns ``sum(rho) top``.  All mod ``p``."""
    for q in range(lag.shape[0]):
        for i in range(chunk):
            s = np.uint64(0)
            for k in range(half):
                if k * chunk + i < n_real:
                    s = _add(s, _add(lag[q, 1 + k], lag[q, 1 + half + k]))
            pads[q, i] = s
    width = place.size
    total = np.uint64(0)
    for r in range(rho_words.shape[0]):
        rho = _uniform(rho_words[r, 0], rho_words[r, 1])
        for j in range(width):
            v = _mul(rho, place[j])
            witness[r * width + j] = _P - v if v else v
        ring[r] = _mul(rho, f)
        total = _add(total, rho)
    return _mul(total, top)


@njit(cache=True, nogil=True)
def query_core(points, wire_weights, gadget_weights, half, chunk, n_real, rho_words, place, f, top,  # noqa: ANN001, ANN201, PLR0913
               wire_rows, gadget_columns, pads, witness, ring):
    """A batch's whole query (:func:`secemb.fss.rangeproof._query`, whose numpy code is the
    reference) in one call: :func:`lagrange_rows` of the ``points`` (uint64 (Q,)) over the wire nodes
    into ``wire_rows`` (uint64 (Q, M + 2); ``wire_weights`` their barycentric weights) and over the
    gadget nodes into ``gadget_columns`` (uint64 (4M + 5, Q), transposed; ``gadget_weights``), then
    :func:`query_columns` of the wire rows (its arguments and answer)."""
    gadget_rows = np.empty((points.size, gadget_weights.size), np.uint64)
    lagrange_rows(points, wire_weights, wire_rows)
    lagrange_rows(points, gadget_weights, gadget_rows)
    gadget_columns[:, :] = gadget_rows.T
    return query_columns(wire_rows, half, chunk, n_real, rho_words, place, f, top, pads, witness, ring)


@njit(cache=True, nogil=True)
def verifier_batch(coefficient_prefix, joints, points, wire_weights, gadget_weights, rho_words, place, f, top,  # noqa: ANN001, ANN201, PLR0913
                   delta, server0, x, proofs, ring, out):
    """A block's verifier messages in one call (:func:`secemb.fss.rangeproof.verifier_messages`' compiled
    path; :func:`secemb.fss.rangeproof._verify_reference` of :func:`secemb.fss.rangeproof._coefficients`
    and :func:`secemb.fss.rangeproof._query` is its reference), the same words:

    * each device's coefficients from its joint randomness ``joints[d]`` (uint8 (n, 32)): the top 60
      bits of the little-endian words of ``SHAKE-128(coefficient_prefix || jr)``
      (:func:`secemb.fss._keccak._shake_rows`), ``r, r'`` (``M/2`` each) then ``s, s'`` (``c``
      each, ``c`` from ``out``'s width ``4c + 7``);
    * the query of the ``points`` (uint64 (Q,)) and the ``rho_words`` (:func:`query_core`, over the wire
      and gadget nodes of the ``wire_weights`` (M + 2,) and ``gadget_weights`` (4M + 5,), with ``place``,
      ``f`` and ``top``); the slot sums and the constant are server 0's (``server0``), zeros for server 1;
    * :func:`verifier_core` of the devices' shares ``x``, ``proofs`` and ``ring`` (uint64) under them,
      with ``delta``, into ``out[:, :4c + 3]`` (the caller writes each ``jr``'s 4 words after them).

    One call a block instead of the coefficients' and the query's calls and allocations."""
    n, width = joints.shape[0], out.shape[1]
    half, c = (wire_weights.size - 2) // 2, (width - 7) // 4
    words = np.empty((n, 2 * (half + c)), np.uint64)
    _shake_rows(coefficient_prefix, joints, words)
    calls = np.empty((n, 2, half), np.uint64)
    slots = np.empty((n, 2, c), np.uint64)
    four = np.uint64(4)
    for d in range(n):
        for h in range(2):
            for k in range(half):
                calls[d, h, k] = words[d, h * half + k] >> four
            for i in range(c):
                slots[d, h, i] = words[d, 2 * half + h * c + i] >> four
    n_points = points.size
    wire_rows = np.empty((n_points, wire_weights.size), np.uint64)
    gadget_columns = np.empty((gadget_weights.size, n_points), np.uint64)
    pads = np.empty((n_points, c), np.uint64)
    witness = np.empty(rho_words.shape[0] * place.size, np.uint64)
    ring_column = np.empty(rho_words.shape[0], np.uint64)
    constant = query_core(points, wire_weights, gadget_weights, half, c, x.shape[1], rho_words, place, f,
                          top, wire_rows, gadget_columns, pads, witness, ring_column)
    if not server0:  # server 1's share of the wires' 1 and of the relation's constant is 0
        pads[:, :] = 0
        constant = np.uint64(0)
    verifier_core(x, proofs, calls, slots, ring, wire_rows, pads, gadget_columns, delta, witness, ring_column,
                  constant, out)


@njit(cache=True, nogil=True)
def top_bits(words, held):  # noqa: ANN001, ANN201
    """Each of ``words`` (uint64 (n, W), in place) shifted right by 3 -- its top 61 bits, as
    :func:`secemb.fss.field.expand` reads a stream's words -- and ``held[i]`` (bool (n,)) set to
    whether row ``i`` then holds ``p`` (a word ``expand`` skips): one pass (numpy's shift and
    comparison are two over the rows, and a temporary)."""
    three = np.uint64(3)
    for i in range(words.shape[0]):
        hit = False
        for j in range(words.shape[1]):
            v = words[i, j] >> three
            words[i, j] = v
            hit |= v == _P
        held[i] = hit


@njit(inline="always")
def _below_p(v, width):  # noqa: ANN001, ANN202
    """Whether the first ``width`` words of every row of ``v`` (uint64 (n, >= width)) are below ``p``."""
    for d in range(v.shape[0]):
        for k in range(width):
            if v[d, k] >= _P:
                return False
    return True


@njit(cache=True, nogil=True)
def decide_core(v0, v1, wires, ok):  # noqa: ANN001, ANN201
    """:func:`secemb.fss.rangeproof.decide`'s verdict per device ``d`` (its numpy code is the
    reference) into ``ok[d]`` (bool (n,)), for verifier messages ``v0, v1`` uint64 (n, 2L + 3 +
    4), ``L = wires``: ``z = 0``, at both query points ``sum_j y_2j y_2j+1' (y_2j+1' - 1)
    (y_2j+1' - 2) = g`` with ``y`` the summed wires (``y' = y_2j+1``) and ``g`` the summed gadget
    value, and the joint randomness equal.  First it checks that their field elements (the first
    ``2L + 3`` words of a row) are below ``p``: it returns 1 if one of ``v0``'s is not, else 2 if
    one of ``v1``'s is not (then ``ok`` is not written), else 0 -- the check the caller's numpy
    path makes with two reductions."""
    n = v0.shape[0]
    opened = 2 * wires + 3
    if not _below_p(v0, opened):
        return 1
    if not _below_p(v1, opened):
        return 2
    one, two = np.uint64(1), np.uint64(2)
    for d in range(n):
        good = _add(v0[d, 0], v1[d, 0]) == 0
        for q in range(2):
            base = 1 + q * (wires + 1)
            g = np.uint64(0)
            for j in range(0, wires, 2):
                y = _add(v0[d, base + j], v1[d, base + j])
                x = _add(v0[d, base + j + 1], v1[d, base + j + 1])
                falling = _mul(_mul(x, _add(x, _P - one)), _add(x, _P - two))
                g = _add(g, _mul(y, falling))
            good = good and g == _add(v0[d, base + wires], v1[d, base + wires])
        for k in range(opened, v0.shape[1]):
            good = good and v0[d, k] == v1[d, k]
        ok[d] = good
    return 0


# -- AES-256-CTR streams (AES-NI): server 1's expansion of a batch's proof seeds ------------------------

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_V2, _V4 = ir.VectorType(_I64, 2), ir.VectorType(_I32, 4)
#: round constants of AES-256's key schedule (FIPS 197, 5.2): seven rounds of ``aeskeygenassist``
_RCON = (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40)
#: counter blocks a pass of :func:`ctr_blocks` (their rounds interleaved)
CTR_BLOCKS = 8


def _shuffle(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, idx: list[int]) -> ir.Value:
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, len(idx)), idx))


def _prefix_xor(builder: ir.IRBuilder, k: ir.Value) -> ir.Value:
    """``k`` (16 bytes) as four 32-bit words, word ``j`` the xor of words ``0..j``: the key
    schedule's running xor (``_mm_slli_si128`` by 4, three times)."""
    k4 = builder.bitcast(k, _V4)
    zero = ir.Constant(_V4, None)
    acc = shifted = k4
    for _ in range(3):
        shifted = _shuffle(builder, zero, shifted, [0, 4, 5, 6])  # one word up
        acc = builder.xor(acc, shifted)
    return acc


@intrinsic
def schedule256(typingctx, key, out):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """The 15 round keys of AES-256 (FIPS 197, 5.2) of the 32 bytes at address ``key``, 16 bytes
    each, stored at address ``out``: ``aeskeygenassist`` with the round constants (words ``w[i]``
    for ``i`` a multiple of 8: ``SubWord(RotWord(w[i-1])) ^ rcon``, the last word of its result),
    and without (``i = 4 mod 8``: ``SubWord(w[i-1])``, its third word)."""
    sig = types.void(types.uintp, types.uintp)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        assist = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V2, [_V2, _I8]),
                                                "llvm.x86.aesni.aeskeygenassist")
        kp, op = builder.inttoptr(args[0], _V2.as_pointer()), builder.inttoptr(args[1], _V2.as_pointer())
        a = builder.load(kp, align=1)
        b = builder.load(builder.gep(kp, [ir.Constant(_I64, 1)]), align=1)
        keys = [a, b]
        for i, rcon in enumerate(_RCON):
            t = builder.bitcast(builder.call(assist, [b, ir.Constant(_I8, rcon)]), _V4)
            a = builder.bitcast(builder.xor(_prefix_xor(builder, a), _shuffle(builder, t, t, [3, 3, 3, 3])), _V2)
            keys.append(a)
            if i < len(_RCON) - 1:
                t = builder.bitcast(builder.call(assist, [a, ir.Constant(_I8, 0)]), _V4)
                b = builder.bitcast(builder.xor(_prefix_xor(builder, b), _shuffle(builder, t, t, [2, 2, 2, 2])), _V2)
                keys.append(b)
        for r, k in enumerate(keys):
            builder.store(k, builder.gep(op, [ir.Constant(_I64, r)]), align=1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def ctr_blocks(typingctx, schedule, first, dst):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """:data:`CTR_BLOCKS` keystream blocks ``AES-256_k(j)``, ``j = first, first + 1, ..`` (the
    128-bit big-endian counter block: ``first`` below ``2^64 - CTR_BLOCKS``, so the high 64 bits
    stay 0), under the 15 round keys at address ``schedule``, stored at address ``dst``."""
    sig = types.void(types.uintp, types.uint64, types.uintp)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        fnty = ir.FunctionType(_V2, [_V2, _V2])
        enc = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.aesni.aesenc")
        last = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.aesni.aesenclast")
        bswap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I64]), "llvm.bswap.i64")
        sp = builder.inttoptr(args[0], _V2.as_pointer())
        rks = [builder.load(builder.gep(sp, [ir.Constant(_I64, r)]), align=1) for r in range(15)]
        xs = []
        for i in range(CTR_BLOCKS):  # bytes 8..15 of the block: the counter, big-endian
            j = builder.call(bswap, [builder.add(args[1], ir.Constant(_I64, i))])
            xs.append(builder.xor(builder.insert_element(ir.Constant(_V2, None), j, ir.Constant(_I32, 1)), rks[0]))
        for r in range(1, 14):
            xs = [builder.call(enc, [x, rks[r]]) for x in xs]
        dp = builder.inttoptr(args[2], _V2.as_pointer())
        for i, x in enumerate(xs):
            builder.store(builder.call(last, [x, rks[14]]), builder.gep(dp, [ir.Constant(_I64, i)]), align=1)
        return context.get_dummy_value()

    return sig, codegen


def ctr_streams(keys: np.ndarray, out: np.ndarray, stride: int, nbytes: int) -> None:
    """Row ``i`` of the flat uint8 ``out``, bytes ``[i stride, i stride + nbytes)``, set to the first
    ``nbytes`` bytes of the AES-256-CTR stream under the 32-byte key ``keys[i]`` (uint8 (n, 32),
    C-contiguous), the counter block from 0 (what ``cryptography``'s ``modes.CTR(bytes(16))``
    gives, :class:`secemb.randomness.CtrDrbg`'s stream).  The rows are written in order, each in
    whole passes of :data:`CTR_BLOCKS` blocks, so a row's last pass may run into the next row's
    head (written after it) and the last row's past ``n stride``: ``out`` must hold ``(n - 1) stride
    + 16 CTR_BLOCKS ceil(nbytes / (16 CTR_BLOCKS))`` bytes.  The compiled loop stores the blocks by
    address, unchecked, so the layout is checked here first, in Python integers (no product can
    wrap, whatever ``stride``).

    Raises
    ------
    ValueError
        If ``keys`` or ``out`` is not uint8 C-contiguous of those shapes (``out`` writable),
        ``nbytes`` is negative, ``stride`` is below ``nbytes`` or (with keys) beyond ``out``, or
        ``out`` is too small for the rows' passes."""
    stride, nbytes = operator.index(stride), operator.index(nbytes)
    if (keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != 32 or not keys.flags.c_contiguous
            or out.dtype != np.uint8 or out.ndim != 1 or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError("ctr_streams: keys must be uint8 (n, 32) and out flat and writable, both C-contiguous")
    span = 16 * CTR_BLOCKS
    passes = -(-nbytes // span)
    n = len(keys)
    if not 0 <= nbytes <= stride:
        raise ValueError(f"ctr_streams: need 0 <= nbytes <= stride, got nbytes {nbytes}, stride {stride}")
    if n and (stride > out.size or out.size < (n - 1) * stride + passes * span):
        raise ValueError("ctr_streams: out is too small for the rows' passes")
    if n:  # stride, passes <= out.size: the loop's int64 offsets stay below out.size; the keys read-only (a
        # message's bytes come read-only, a server's own rows writeable): one compiled signature (session 37)
        _ctr_rows(read_only(keys), out, stride, passes)


@njit(cache=True, nogil=True)
def _ctr_rows(keys, out, stride, passes):  # noqa: ANN001, ANN201
    """:func:`ctr_streams`' loop: ``passes`` passes of :data:`CTR_BLOCKS` blocks a row, row ``i``
    from byte ``i stride`` of ``out``; no bound checked (the caller's)."""
    span = 16 * CTR_BLOCKS
    schedule = np.empty(15 * 16, np.uint8)
    for i in range(keys.shape[0]):
        schedule256(keys[i].ctypes.data, schedule.ctypes.data)  # type: ignore[call-arg]  # numba's stub keeps typingctx
        at = out.ctypes.data + i * stride
        for p in range(passes):
            ctr_blocks(schedule.ctypes.data, np.uint64(p * CTR_BLOCKS), at + p * span)
