"""numba kernels of the full-domain walk, the payload conversion and the devices' cuckoo
insertion (internal; see :mod:`secemb.fss.kernels` for the switch and :mod:`secemb.fss.tree` /
:mod:`secemb.fss.convert` / :meth:`secemb.fss.cuckoo.CuckooLayout.assign` for the numpy and
Python references these equal bit for bit).

Words are uint64 ``(..., 2)`` (128-bit, little-endian), ring arrays uint32 or uint64; ``rk``
arguments are round-key arrays of :func:`secemb.fss._aesni.round_keys` (the BGI walk's: of
:func:`secemb.fss._aesni.walk_keys`).
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from secemb.fss import _kernel_cache  # noqa: F401 - first: the kernels' cache also covers _aesni's intrinsics
from secemb.fss._aesni import (BLOCKS, KEY_GROUP, SUM_BITS, SUM_VECTORS, expand8, expand8_rows, halftree16,
                               halftree16_rows, mmo_blocks, mmo_ctr, sum_keys1, sum_keys4)

__all__ = [
    "bgi_corrections", "parse_path_fields", "expand_top", "subtrees", "convert_blocks", "convert_eval", "convert_add",
    "convert_gen", "convert_accumulate", "ring_matmul", "bits_accumulate", "unmask_slots",
    "cuckoo_assign", "STEP_BLOCKS", "mmo_repeat",
]

#: AES blocks per step of the fused conversion kernels (16 KiB: they stay in L1; a step's
#: fixed costs -- array views, reference counts -- are a few percent of its AES work)
STEP_BLOCKS = 1024
#: keys of a class :func:`convert_accumulate` stages position by position in class order
GROUP = KEY_GROUP


@njit(inline="always")
def _level_call(ht, per_parent, rkp, src, cw, dst, groups):  # noqa: ANN001, ANN202, PLR0913
    """One intrinsic call of a tree level: ``groups`` groups of 8 BGI or 16 Half-Tree parents at
    ``src``, their children to ``dst``; ``cw`` the address of their row's corrections, or
    (``per_parent``) of an int64 array of an address a parent.  Addresses are int64 throughout
    the kernels (numba types uint64 + int64 as a float)."""
    if ht:
        if per_parent:
            halftree16_rows(rkp, src, cw, dst, groups)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
        else:
            halftree16(rkp, src, cw, dst, groups)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    elif per_parent:
        expand8_rows(rkp, src, cw, dst, groups)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    else:
        expand8(rkp, src, cw, dst, groups)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter


@njit(cache=True, nogil=True)
def bgi_corrections(cw_seed, cw_tl, cw_tr, blocks, lo, out):  # noqa: ANN001, ANN201
    """BGI path keys' corrections as :func:`expand_top` and :func:`subtrees` read them, in one pass:
    ``out[r, i] = ((lo | tCW_L, hi), (lo | tCW_R, hi))`` uint64 (R, n, 2, 2) for the seed correction
    word ``(lo, hi) = cw_seed[key, i]`` (uint64 (K, n, 2)) and the control-bit ones ``cw_tl[key, i]``,
    ``cw_tr[key, i]`` (uint8 (K, n)) of key ``key = b S + lo + j`` for ``r = b G + j``: keys
    ``lo..lo+G-1`` of each of the ``blocks`` equal consecutive blocks of ``S = K / blocks`` keys
    (``G = R / blocks``; e.g. every user's keys of a range of buckets, read where they were
    parsed), block after block; ``blocks = 1, lo = 0`` and ``R = K``: every key.  Indexes
    unchecked: the caller checks the fields' shapes, ``blocks`` dividing ``K`` and ``R`` and
    ``0 <= lo <= lo + G <= S``."""
    size, width = cw_tl.shape[0] // blocks, out.shape[0] // blocks
    for r in range(out.shape[0]):
        key = (r // width) * size + lo + r % width
        for i in range(cw_tl.shape[1]):
            w0, w1 = cw_seed[key, i, 0], cw_seed[key, i, 1]
            out[r, i, 0, 0] = w0 | np.uint64(cw_tl[key, i])
            out[r, i, 0, 1] = w1
            out[r, i, 1, 0] = w0 | np.uint64(cw_tr[key, i])
            out[r, i, 1, 1] = w1


@njit(cache=True, nogil=True)
def parse_path_fields(seeds, trb, at, count, cw_seed, cw_tl, cw_tr):  # noqa: ANN001, ANN201
    """The per-level correction words of ``u`` serialized batches of ``count`` keys written to their
    blocks of a key batch, in one pass: row ``j`` of ``seeds`` uint64 (u, 2 count n) a batch's
    ``cw_seeds`` field as words (per key and level two words, bit 0 of the first ``tCW_L``), of
    ``trb`` uint8 (u, count ceil(n / 8)) its ``cw_tr`` field (per key, level ``i`` bit ``i % 8`` of
    byte ``i // 8``); row ``j``'s keys go to keys ``at[j] count ..`` of ``cw_seed`` uint64 (K, n, 2)
    (bit 0 cleared), ``cw_tl`` and ``cw_tr`` uint8 (K, n) (0 or 1).  Indexes unchecked: the caller
    checks the shapes and ``0 <= at[j] < K / count``."""
    n = cw_tl.shape[1]
    nb = (n + 7) // 8
    for j in range(seeds.shape[0]):
        for key in range(count):
            dst = at[j] * count + key
            for i in range(n):
                w0 = seeds[j, 2 * (key * n + i)]
                cw_seed[dst, i, 0] = w0 & ~np.uint64(1)
                cw_seed[dst, i, 1] = seeds[j, 2 * (key * n + i) + 1]
                cw_tl[dst, i] = np.uint8(w0 & np.uint64(1))
                cw_tr[dst, i] = (trb[j, key * nb + i // 8] >> np.uint8(i % 8)) & np.uint8(1)


@njit(cache=True, nogil=True)
def expand_top(roots, cwp, levels, m, rk, out):  # noqa: ANN001, ANN201
    """The top ``levels`` levels of every key, breadth-first: ``out[key]`` (F, 2) are its nodes
    at depth ``levels`` whose subtrees hold a leaf ``< m`` (``F = ceil(m / 2^(n - levels))``).

    ``roots`` uint64 (K, 2); ``cwp`` the keys' corrections, BGI ``((cw_lo | tCW_L, cw_hi),
    (cw_lo | tCW_R, cw_hi))`` uint64 (K, n, 2, 2) or Half-Tree ``CW`` uint64 (K, n, 2) (the
    scheme follows ``cwp.ndim``).  Whole calls only: parents past the needed ones are
    computed from scratch memory and dropped."""
    k, n = cwp.shape[0], cwp.shape[1]
    ht = cwp.ndim == 3
    per = 16 if ht else 8
    rec = 16 if ht else 32  # bytes of one level's corrections
    f = out.shape[1]
    buf = np.zeros((2, 2 * (f // per + 1) * per, 2), np.uint64)
    rkp, base = np.int64(rk.ctypes.data), np.int64(cwp.ctypes.data)
    for key in range(k):
        buf[1, 0, 0] = roots[key, 0]
        buf[1, 0, 1] = roots[key, 1]
        parents = 1
        for i in range(levels):
            src, dst = np.int64(buf[(i + 1) % 2].ctypes.data), np.int64(buf[i % 2].ctypes.data)
            _level_call(ht, False, rkp, src, base + rec * (key * n + i), dst, -(-parents // per))
            parents = -(-m >> (n - 1 - i))
        last = buf[(levels + 1) % 2]
        for j in range(f):
            out[key, j, 0] = last[j, 0]
            out[key, j, 1] = last[j, 1]


@njit(cache=True, nogil=True)
def subtrees(front, row0, frontier, cwp, top, depth, rk, out):  # noqa: ANN001, ANN201
    """Expand frontier nodes ``depth`` levels: ``out[g]`` (2^depth, 2) are the leaves below
    ``front[g]`` (2,), row ``row0 + g`` of the walk, of key ``(row0 + g) // frontier``, whose
    corrections are ``cwp[key, top:]`` (as in :func:`expand_top`).  ``front`` C-contiguous.

    ``P`` subtrees at a time (8 BGI, 16 Half-Tree: an intrinsic's group of parents), level by
    level in L1-resident buffers; the last level goes to ``out`` directly.  From ``P`` nodes a
    row, one intrinsic call a row and level (its groups in a loop, its corrections loaded once);
    below, one call a level, each parent reading its row's corrections through an address array
    -- no staging stores.  ``depth >= 1``."""
    total = front.shape[0]
    width = 1 << depth
    n = cwp.shape[1]
    ht = cwp.ndim == 3
    per = 16 if ht else 8
    rec = 16 if ht else 32
    buf = np.empty((2, per * width, 2), np.uint64)
    pad = np.empty((per, 2), np.uint64)
    addrs = np.empty(per * per, np.int64)
    rowcw = np.empty(per, np.int64)  # address of each row's corrections at level ``top``
    rkp, outp = np.int64(rk.ctypes.data), np.int64(out.ctypes.data)
    base = np.int64(cwp.ctypes.data) + rec * top
    bufp, frontp = np.int64(buf.ctypes.data), np.int64(front.ctypes.data)
    padp, addrp = np.int64(pad.ctypes.data), np.int64(addrs.ctypes.data)
    key, pos = row0 // frontier, row0 % frontier  # of row ``row0 + g0``: no division in the loop
    for g0 in range(0, total, per):
        nb = min(per, total - g0)
        for r in range(per):  # rows past the end repeat the last one (computed, not kept)
            rowcw[r] = base + rec * n * key
            if r < nb - 1:
                pos += 1
                if pos == frontier:
                    key, pos = key + 1, 0
        if nb == per:
            pos += 1
            if pos == frontier:
                key, pos = key + 1, 0
            src = frontp + 16 * g0
        else:
            for r in range(per):
                pad[r, 0] = front[g0 + min(r, nb - 1), 0]
                pad[r, 1] = front[g0 + min(r, nb - 1), 1]
            src = padp
        for lvl in range(depth):
            dst = outp + 16 * g0 * width if lvl == depth - 1 and nb == per else bufp + (lvl % 2) * 16 * per * width
            nodes = 1 << lvl
            if nodes >= per:
                for r in range(per):
                    _level_call(ht, False, rkp, src + 16 * r * nodes, rowcw[r] + rec * lvl, dst + 32 * r * nodes,
                                nodes // per)
            else:
                for q in range(per * nodes):
                    addrs[q] = rowcw[q >> lvl] + rec * lvl
                _level_call(ht, True, rkp, src, addrp, dst, nodes)
            src = dst
        if nb < per:
            last = buf[(depth - 1) % 2]
            for r in range(nb):
                for p in range(width):
                    out[g0 + r, p, 0] = last[r * width + p, 0]
                    out[g0 + r, p, 1] = last[r * width + p, 1]


@njit(cache=True, nogil=True)
def mmo_repeat(words, rk, reps, out):  # noqa: ANN001, ANN201
    """``out[i] = AES(words[i]) ^ words[i]``, ``reps`` times over: words and out uint64 (N, 2),
    C-contiguous, ``N`` a multiple of :data:`~secemb.fss._aesni.BLOCKS`.  The kernels' raw AES rate
    for ``secemb bench fss``: buffers that stay in L1, one call -- the rounds with nothing else."""
    rkp, wp, op = np.int64(rk.ctypes.data), np.int64(words.ctypes.data), np.int64(out.ctypes.data)
    for _ in range(reps):
        for i in range(0, words.shape[0], BLOCKS):
            mmo_blocks(rkp, wp + 16 * i, op + 16 * i)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter


@njit(cache=True, nogil=True)
def convert_blocks(words, nb, rk, out):  # noqa: ANN001, ANN201
    """``out[i, j] = MMO(words[i] ^ (0, j))`` for ``j < nb``: words uint64 (N, 2), out uint64
    (N, nb, 2), both C-contiguous."""
    stage = np.empty((3, BLOCKS, 2), np.uint64)
    _convert_blocks(words, nb, rk, out, stage)


@njit(cache=True, nogil=True)
def _convert_blocks(words, nb, rk, out, stage):  # noqa: ANN001, ANN202
    """:func:`convert_blocks` with a caller's scratch ``stage`` uint64 (3, BLOCKS, 2) (no
    allocation here: the fused kernels call this for every few dozen leaves)."""
    n = words.shape[0]
    total = n * nb
    rkp, outp = np.int64(rk.ctypes.data), np.int64(out.ctypes.data)  # int64: uint64 + int64 is a float
    src, tmp = stage[0], stage[1]
    tmpp, srcp = np.int64(tmp.ctypes.data), np.int64(src.ctypes.data)
    flat = out.reshape(total, 2)
    full = nb - nb % BLOCKS  # counters [0, full) of every leaf: counter mode in registers
    for i in range(n if full else 0):
        wp = np.int64(words[i].ctypes.data)
        for j0 in range(0, full, BLOCKS):
            mmo_ctr(rkp, wp, j0, outp + 16 * (i * nb + j0))  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    if full == nb:
        return
    first = 0
    if nb == 1:  # the words are the AES inputs
        first = n // BLOCKS * BLOCKS
        wp = np.int64(words.ctypes.data)
        for f0 in range(0, first, BLOCKS):
            mmo_blocks(rkp, wp + 16 * f0, outp + 16 * f0)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    # counters [full, nb) of the leaves from ``first`` on: BLOCKS (leaf, counter) inputs at a
    # time, staged, encrypted, and written to their places (contiguous when full = 0)
    pos = stage[2, :, 0]  # output block of each staged input
    i = first
    j = full
    q = 0
    while i < n:
        src[q, 0] = words[i, 0]
        src[q, 1] = words[i, 1] ^ np.uint64(j)
        pos[q] = np.uint64(i * nb + j)
        q += 1
        j += 1
        if j == nb:
            j = full
            i += 1
        if q == BLOCKS and full == 0:
            mmo_blocks(rkp, srcp, outp + 16 * np.int64(pos[0]))  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
            q = 0
        elif q == BLOCKS or i == n:
            mmo_blocks(rkp, srcp, tmpp)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
            for r in range(q):
                flat[np.int64(pos[r]), 0] = tmp[r, 0]
                flat[np.int64(pos[r]), 1] = tmp[r, 1]
            q = 0


@njit(cache=True, nogil=True)
def convert_eval(words, nb, rk, cw, pos0, period, valid, party, out, place, bits, blocks, vals):  # noqa: ANN001, ANN201, PLR0913
    """``(-1)^party [Convert(words[i]) + t_i cw[key]]`` for the leaf at flat position
    ``pos0 + i = key * period + p`` of a (K, period) walk, written where ``p < valid`` (the
    rest is padding, dropped) to row ``place[0] + (key // place[1]) place[2] + (key % place[1])
    place[3] + p`` of ``out``: words uint64 (N, 2), ``t_i`` bit 0 of ``words[i, 0]``, cw ring
    (K, d), out ring (R, d), place int64 (4,) (the caller keeps every row written below ``R``).
    ``bits`` uint8 (N,) (or (0,): not written): ``bits[i] = t_i`` for every word, padding too.
    Scratch: ``blocks`` uint64 (S, nb, 2) (``S`` leaves a step, ``S nb`` about
    :data:`STEP_BLOCKS`) and ``vals``, the same memory as ring (S, *)."""
    n, d = words.shape[0], out.shape[1]
    stage = np.empty((3, BLOCKS, 2), np.uint64)
    neg = np.uint64(0) - np.uint64(party)  # (v ^ neg) - neg = (-1)^party v
    key, p = pos0 // period, pos0 % period
    base, group, by_major, by_minor = place[0], place[1], place[2], place[3]
    step = blocks.shape[0]
    want_bits = bits.shape[0] > 0
    # control bits in a loop of their own: where ``0 - (w & 1)`` is computed from the word
    # itself, LLVM turns the mask into a branch on the (random) bit, mispredicted half the time
    tb = np.empty(step, np.uint64)
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        _convert_blocks(words[lo:hi], nb, rk, blocks[: hi - lo], stage)
        for j in range(hi - lo):
            tb[j] = words[lo + j, 0] & np.uint64(1)
        if want_bits:
            for j in range(hi - lo):
                bits[lo + j] = np.uint8(tb[j])
        i = lo
        while i < hi:  # segments of one key
            end = min(hi, i + period - p)
            keep = min(end, i + max(valid - p, 0))  # leaves [i, keep) are in the domain
            o = base + (key // group) * by_major + (key % group) * by_minor + p  # the row of leaf i
            if d == 1:  # the retrieval payload: no inner loop
                c = np.uint64(cw[key, 0])
                for j in range(i, keep):
                    v = np.uint64(vals[j - lo, 0]) + ((np.uint64(0) - tb[j - lo]) & c)
                    out[o + j - i, 0] = (v ^ neg) - neg
            else:
                for j in range(i, keep):
                    mask = np.uint64(0) - tb[j - lo]
                    for e in range(d):
                        v = np.uint64(vals[j - lo, e]) + (mask & np.uint64(cw[key, e]))
                        out[o + j - i, e] = (v ^ neg) - neg
            p += end - i
            if p == period:
                key += 1
                p = 0
            i = end


@njit(cache=True, nogil=True)
def convert_add(words, rk, src_at, dst_at, width, negate, blocks, vals):  # noqa: ANN001, ANN201, PLR0913
    """``dst_i = src_i + Convert(words[i])`` (``-`` with ``negate``) in the ring of ``vals``, for
    every word: the first ``width`` ring elements of the blocks ``MMO(words[i] ^ (0, j))``, each
    block added as it is made (no array of the conversions).  words uint64 (N, 2); src_at and
    dst_at int64 (N,), the addresses of C-contiguous ring arrays of ``width`` elements (``dst_i``
    may be ``src_i``; no ``dst_i`` overlaps another word's arrays).  Scratch: ``blocks`` uint64
    (S, 2), ``S`` a multiple of ``BLOCKS``, and ``vals``, the same memory as ring (S 128 / k,)."""
    n = words.shape[0]
    per = vals.shape[0] // blocks.shape[0]  # ring elements of a block
    nb = -(-width // per)
    step = blocks.shape[0]
    rkp, bp = np.int64(rk.ctypes.data), np.int64(blocks.ctypes.data)
    for i in range(n):
        dst = carray(_at(dst_at[i]), (width,), vals.dtype)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
        if src_at[i] != dst_at[i]:
            dst[:] = carray(_at(src_at[i]), (width,), vals.dtype)
        wp = np.int64(words[i].ctypes.data)
        for j0 in range(0, nb, step):
            for c in range(0, min(step, nb - j0), BLOCKS):  # whole calls: blocks past nb are dropped
                mmo_ctr(rkp, wp, j0 + c, bp + 16 * c)
            lo = j0 * per
            hi = min(width, lo + step * per)
            # in-place array expressions: an element loop over these addresses (or a ufunc with an
            # output, or a copy of src's chunk first) ran scalar, two to three times slower
            d = dst[lo:hi]
            if negate:
                d -= vals[: hi - lo]
            else:
                d += vals[: hi - lo]


@njit(cache=True, nogil=True)
def convert_gen(leaf0, leaf1, nb, rk, cw, blocks0, vals0, blocks1, vals1):  # noqa: ANN001, ANN201
    """``cw[i] = (-1)^{t_i} [cw[i] - Convert(leaf0[i]) + Convert(leaf1[i])]`` in ``cw``'s ring
    (the output correction words of SecEmb Algorithm 5, ``cw`` holding the payloads on entry):
    leaf0, leaf1 uint64 (N, 2) C-contiguous, ``t_i`` bit 0 of ``leaf1[i, 0]``, cw ring (N, d).
    Scratch, one set per leaf array: ``blocks`` uint64 (S, nb, 2) and ``vals``, the same memory
    as ring (S, *) (as :func:`convert_eval`'s)."""
    n, d = cw.shape
    stage = np.empty((3, BLOCKS, 2), np.uint64)
    step = blocks0.shape[0]
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        _convert_blocks(leaf0[lo:hi], nb, rk, blocks0[: hi - lo], stage)
        _convert_blocks(leaf1[lo:hi], nb, rk, blocks1[: hi - lo], stage)
        for j in range(hi - lo):
            neg = np.uint64(0) - (leaf1[lo + j, 0] & np.uint64(1))  # (v ^ neg) - neg = (-1)^t v
            for e in range(d):
                v = np.uint64(cw[lo + j, e]) - np.uint64(vals0[j, e]) + np.uint64(vals1[j, e])
                cw[lo + j, e] = (v ^ neg) - neg


@njit(cache=True, nogil=True)
def convert_accumulate(words, nb, rk, acc, start, live, key_acc, key_t, period, fresh, blocks, vals, staged):  # noqa: ANN001, ANN201, PLR0913
    """``acc[r] += Convert(words[i])`` in the ring for ``r = (start + i) % M`` where
    ``live[r]``, and ``key_acc[k // G, k % G] += Convert(words[i])`` for the same words'
    key ``k = (start + i) // period``: words uint64 (N, 2), live uint8 (M,), acc ring (M, w) or
    (0, w) (not summed by row), key_acc ring (U, G, w) (any strides on the first two axes: a
    batch's view; each key's ``w`` values contiguous) or (0, 0, w) (not summed by key), period
    >= 1; the words of rows not live are not converted.
    ``key_t`` int64 (U, G) (or (0, 0): not counted): ``key_t[k // G, k % G] += words[i, 0] & 1``
    for the same live words, each key's count of control bits 1.  ``fresh``: the keys whose first
    position is among the words (``start + i`` a multiple of ``period``) have their ``key_acc``
    values and ``key_t`` count set to these sums, not added to (calls that cover every key's
    positions need no zeroed arrays: :func:`_both_by_class` writes a key's first sums over its
    values, the other paths clear the keys first, in key order, each key's values through a
    C-contiguous view); a key cut at ``start`` is added to.  With ``fresh``, ``key_acc`` must
    not share memory with ``acc`` (the sums written over a key's values would drop the row sums
    added there before; memory-safe either way).  Scratch as in :func:`convert_eval`, and
    ``staged`` uint64 (S, 2) for the live words of a step.

    The words are taken in order, but summing by row, with ``M`` a multiple of ``period`` and
    keys ``k`` and ``k + M / period`` among them (they add to the same rows), in class order:
    :func:`_rows_by_class` by row only, :func:`_both_by_class` with both sums where each row's
    ``w`` values are contiguous.  Ring sums do not depend on the order of their terms."""
    n = words.shape[0]
    big_m = live.shape[0]
    by_class = acc.shape[0] > 0 and big_m % period == 0 and n > 0 and (
        (start + n - 1) // period - start // period >= big_m // period)
    if by_class and key_acc.shape[0] * key_acc.shape[1] == 0:
        _rows_by_class(words, nb, rk, acc, start, live, period, blocks, vals, staged)
        return
    if by_class and acc.strides[1] == acc.itemsize:
        _both_by_class(words, nb, rk, acc, start, live, key_acc, key_t, period, fresh, blocks, vals, staged)
        return
    if fresh and n > 0 and key_acc.shape[0] * key_acc.shape[1] > 0:  # the keys that start among the words, in order
        count_t = key_t.shape[0] * key_t.shape[1] > 0
        for key in range((start + period - 1) // period, (start + n - 1) // period + 1):
            _clear_key(key_acc, key_t, key, key_acc.shape[1], count_t)
    by_row, by_key = acc.shape[0] > 0, key_acc.shape[0] * key_acc.shape[1] > 0
    w = acc.shape[1] if by_row else key_acc.shape[2]
    g = max(1, key_acc.shape[1])  # keys per row of key_acc
    stage = np.empty((3, BLOCKS, 2), np.uint64)
    step = blocks.shape[0]
    rows = np.empty(step, np.int64)
    keys = np.empty(step, np.int64)
    row = start % big_m
    key, p = start // period, start % period
    held = np.zeros(w, key_acc.dtype)  # both sums: key held_key's sum so far, added to key_acc when its key ends
    held_key = -1
    count_t = by_key and key_t.shape[0] * key_t.shape[1] > 0
    t_row, t_col = key // g, key % g  # key's place in key_t (kept along as key advances)
    c = 0
    for i in range(n):
        if live[row]:
            if count_t:
                key_t[t_row, t_col] += np.int64(words[i, 0] & np.uint64(1))
            staged[c, 0] = words[i, 0]
            staged[c, 1] = words[i, 1]
            rows[c] = row
            keys[c] = key
            c += 1
        row += 1
        if row == big_m:
            row = 0
        p += 1
        if p == period:
            key, p = key + 1, 0
            t_col += 1
            if t_col == g:
                t_row, t_col = t_row + 1, 0
        if c == step or (i == n - 1 and c > 0):
            _convert_blocks(staged[:c], nb, rk, blocks[:c], stage)
            if by_row and by_key:  # both sums in one loop: each value loaded once, its key's sum kept local
                for q in range(c):
                    if keys[q] != held_key:
                        if held_key >= 0:
                            _add_held(key_acc, held_key, g, held)
                            held[:] = 0
                        held_key = keys[q]
                    a, v = acc[rows[q]], vals[q]
                    for e in range(w):
                        x = v[e]
                        a[e] += x
                        held[e] += x
            elif by_row:
                _add_rows(acc, rows, vals, c)
            else:
                for q in range(c):
                    kept = key_acc[keys[q] // g, keys[q] % g]
                    for e in range(w):
                        kept[e] += vals[q, e]
            c = 0
    if held_key >= 0:
        _add_held(key_acc, held_key, g, held)


@njit(inline="always")
def _group_at(key, last, spread, period, start, n, big_m):  # noqa: ANN001, ANN202, PLR0913
    """The group :func:`_rows_by_class` and :func:`_both_by_class` take at ``key``: its size --
    how many keys of ``key``'s class, ``key, key + spread, ..``, up to :data:`GROUP` and not past
    ``last``, whole keys only (not one cut by ``start`` or by the words' end ``start + n``), 1
    otherwise -- and ``key``'s flat positions ``[lo, hi)`` among the words and its first row
    ``lo mod big_m``."""
    size = 1
    while (size < GROUP and key + size * spread <= last and key * period >= start
           and (key + size * spread + 1) * period <= start + n):
        size += 1
    lo, hi = max(start, key * period), min(start + n, (key + 1) * period)
    return size, lo, hi, lo % big_m


@njit(cache=True, nogil=True)
def _rows_by_class(words, nb, rk, acc, start, live, period, blocks, vals, staged):  # noqa: ANN001, ANN202, PLR0913
    """:func:`convert_accumulate`'s rows-only sums class by class: keys ``k``, ``k + K``, ``k + 2 K``,
    ... (``K = M / period``, fewer than the words' keys) add to the same rows of ``acc`` (a bucket's
    rows, in the bucket layout: one class a bucket, every user's key of it in turn), so they are
    taken together, and the class's rows stay in the L1 cache while its keys are added rather than
    all of ``acc`` being swept once a user; :data:`GROUP` whole keys of a class at a time, position
    by position, so that four words of one row come one after the other and :func:`_add_rows` adds
    their sum to it at once (one pass over the row for four words: the add loops cost per row
    added, not per value)."""
    n, big_m, step = words.shape[0], live.shape[0], blocks.shape[0]
    stage = np.empty((3, BLOCKS, 2), np.uint64)
    rows = np.empty(step, np.int64)
    first, last = start // period, (start + n - 1) // period  # the words' keys
    spread = big_m // period
    c = 0
    for cls in range(spread):
        key = first + cls
        while key <= last:
            size, lo, hi, row = _group_at(key, last, spread, period, start, n, big_m)
            for i in range(lo - start, hi - start):
                if live[row]:
                    for j in range(size):  # the same position of the group's keys
                        at = i + j * spread * period
                        staged[c, 0] = words[at, 0]
                        staged[c, 1] = words[at, 1]
                        rows[c] = row
                        c += 1
                        if c == step:
                            _convert_blocks(staged, nb, rk, blocks, stage)
                            _add_rows(acc, rows, vals, c)
                            c = 0
                row += 1
            key += size * spread
    if c > 0:
        _convert_blocks(staged[:c], nb, rk, blocks[:c], stage)
        _add_rows(acc, rows, vals, c)


@njit(cache=True, nogil=True)
def _both_by_class(words, nb, rk, acc, start, live, key_acc, key_t, period, fresh, blocks, vals, staged):  # noqa: ANN001, ANN202, PLR0913
    """:func:`convert_accumulate`'s both sums (``key_t`` counted where it has keys) in
    :func:`_rows_by_class`'s order: :data:`GROUP` whole keys of a class position by position, so
    that each row gets the group's sum in one pass and each key's sum stays in vector registers
    across its positions (:func:`secemb.fss._aesni.sum_keys4`; a cut or lone key through
    ``sum_keys1``), written to (a ``fresh`` key's first run of positions) or added to its values
    in ``key_acc`` once a step: no pass zeroes the keys first (a group with no live position
    zeroes its own).  A step is converted before a position's ``G`` words would not fit in it, so
    that a step holds whole positions: its segments (a group's run of positions in the step: first
    staged word, positions, keys, whether the sums are written, the keys' addresses) go to
    :func:`_add_segments`.  A group's control bits are counted in locals and written to (fresh) or
    added to ``key_t`` once, and its keys' places come from one division a group.  Each row's
    ``w`` values contiguous.

    Session 32, a server's two bounded-walk calls at ML-100K size (20 devices, 2 x 50,000 live
    leaves of 65 uint32; captured from ``secemb bench robust``), thread CPU, alternating with the
    rows-only sums under load: both sums cost +1.10 ms over the rows alone with session 31's kernel
    (eight 256-bit vectors with spills and a scalar loop for the 65th word, the counts a divide and
    add a word, a clearing pass), +0.28 ms with this one.

    Session 34 (issue 34: the bench's sums calls cost 160-250 µs more than rows-only calls, 0-80 µs
    in isolation), in the bench's flow, per-round alternation, thread CPU, load 1.2-2.8: half of it
    is not this kernel's -- the rows-only call on the same arguments in the bounded round costs
    +95, -35, +222, +189 µs (four runs) over the checked round's (no CPU frequency change: a
    scalar probe is equal across rounds; reading the call's inputs just before took 50-130 µs of
    it back in one run set and nothing beyond noise in another: cause not found); the rest
    (+112, +235, +65, +170 over that round's rows-only call) is the sums, with ``key_acc`` the
    batch's (U, G, w) view costing 0-200 µs more than a private C-contiguous buffer (whose copy
    into the view costs ~110 µs: no gain).  Tried, not kept: ``prefetchw`` of each segment's key
    lines as it is staged (under the step's AES): the sums' extra in five interleaved bench pairs
    278/354/195/207/170 µs against main's 161/287/199/131/166; the keys' values warmed (written)
    just before the call: no change."""
    n, big_m, step = words.shape[0], live.shape[0], blocks.shape[0]
    g = key_acc.shape[1]
    count_t = key_t.shape[0] * key_t.shape[1] > 0
    stage = np.empty((3, BLOCKS, 2), np.uint64)
    rows = np.empty(step, np.int64)
    segs = np.empty((step, 4 + GROUP), np.int64)  # a segment's first staged word, positions, keys, set, addresses
    plan = _sum_plan(key_acc.shape[2], vals.itemsize)
    key_at = np.empty(GROUP, np.int64)  # a sum_keys call's key addresses
    at_u, at_c = np.empty(GROUP, np.int64), np.empty(GROUP, np.int64)  # the group's keys' [k // g, k % g]
    ones = np.empty(GROUP, np.int64)  # the group's counts of control bits 1
    kp, ku, kc = np.int64(key_acc.ctypes.data), np.int64(key_acc.strides[0]), np.int64(key_acc.strides[1])
    first, last = start // period, (start + n - 1) // period  # the words' keys
    spread = big_m // period
    c = nseg = 0
    for cls in range(spread):
        key = first + cls
        while key <= last:
            size, lo, hi, row = _group_at(key, last, spread, period, start, n, big_m)
            setting = fresh and key * period >= start  # its keys start among the words (whole, or cut at the end)
            u, col = key // g, key % g
            for j in range(size):  # key + j spread, one class apart
                at_u[j], at_c[j], ones[j] = u, col, 0
                col += spread
                while col >= g:
                    u, col = u + 1, col - g
            seg = -1  # this group's segment in the step, none yet
            written = False  # whether a segment of the group has been made (the first sets the sums)
            for i in range(lo - start, hi - start):
                if live[row]:
                    if c + size > step:
                        _convert_blocks(staged[:c], nb, rk, blocks[:c], stage)
                        _add_segments(acc, rows, vals, segs[:nseg], plan, key_at)
                        c = nseg = 0
                        seg = -1
                    if seg < 0:
                        seg, nseg = nseg, nseg + 1
                        segs[seg, 0], segs[seg, 1], segs[seg, 2] = c, 0, size
                        segs[seg, 3] = 1 if setting and not written else 0
                        for j in range(size):
                            segs[seg, 4 + j] = kp + at_u[j] * ku + at_c[j] * kc
                        written = True
                    segs[seg, 1] += 1
                    for j in range(size):  # the same position of the group's keys
                        at = i + j * spread * period
                        if count_t:
                            ones[j] += np.int64(words[at, 0] & np.uint64(1))
                        staged[c, 0] = words[at, 0]
                        staged[c, 1] = words[at, 1]
                        rows[c] = row
                        c += 1
                row += 1
            if setting and not written:  # no live position: the keys' sums are zero
                for j in range(size):
                    key_acc[at_u[j], at_c[j]] = 0
            if count_t:
                for j in range(size):
                    if setting:
                        key_t[at_u[j], at_c[j]] = ones[j]
                    else:
                        key_t[at_u[j], at_c[j]] += ones[j]
            key += size * spread
    if c > 0:
        _convert_blocks(staged[:c], nb, rk, blocks[:c], stage)
        _add_segments(acc, rows, vals, segs[:nseg], plan, key_at)


@njit(inline="always")
def _sum_plan(w, size):  # noqa: ANN001, ANN202
    """The ``sum_keys`` calls that cover a value of ``w`` ring words of ``size`` bytes, as few as
    :data:`~secemb.fss._aesni.SUM_VECTORS` vectors a call allow, their vectors spread evenly: int64
    (calls, 3) of (first word, vectors, lanes of the last vector) -- for w = 65 uint32 with AVX-512,
    one call of five vectors, the last one word."""
    lanes = SUM_BITS // (8 * size)
    left = -(-w // lanes)  # vectors
    calls = -(-left // SUM_VECTORS)
    plan = np.empty((calls, 3), np.int64)
    e0 = 0
    for p in range(calls):
        nv = -(-left // (calls - p))
        plan[p, 0], plan[p, 1], plan[p, 2] = e0, nv, min(lanes, w - e0 - (nv - 1) * lanes)
        e0 += (nv - 1) * lanes + plan[p, 2]
        left -= nv
    return plan


@njit(inline="always")
def _add_segments(acc, rows, vals, segs, plan, key_at):  # noqa: ANN001, ANN202, PLR0913
    """A step's both sums, segment by segment (:func:`_both_by_class`): the ``sum_keys`` calls of
    ``plan`` (:func:`_sum_plan`) over each segment's positions, its keys' sums written (``segs[s,
    3]``) or added at their addresses ``segs[s, 4:]`` (offset to each call's first word)."""
    size = vals.itemsize
    vp, vstride = np.int64(vals.ctypes.data), np.int64(vals.strides[0])
    ap, astride = np.int64(acc.ctypes.data), np.int64(acc.strides[0])
    rp, kp = np.int64(rows.ctypes.data), np.int64(key_at.ctypes.data)
    for s in range(segs.shape[0]):
        q, npos, keys, setting = segs[s, 0], segs[s, 1], segs[s, 2], segs[s, 3]
        for p in range(plan.shape[0]):
            off, nv, lanes = plan[p, 0] * size, plan[p, 1], plan[p, 2]
            for j in range(keys):
                key_at[j] = segs[s, 4 + j] + off
            if keys == GROUP:
                sum_keys4(vp + q * vstride + off, vstride, ap + off, astride, rp + 8 * q, kp, npos, keys, nv, lanes,
                          setting, vals[0, 0])
            else:
                for j in range(keys):
                    sum_keys1(vp + (q + j) * vstride + off, vstride, ap + off, astride, rp + 8 * q, kp + 8 * j, npos,
                              keys, nv, lanes, setting, vals[0, 0])


@njit(inline="always")
def _add_rows(acc, rows, vals, c):  # noqa: ANN001, ANN202
    """``acc[rows[q]] += vals[q]`` for ``q < c``, four values of one row in a row (a group's
    position, :func:`_rows_by_class`) added as their sum, in one pass over the row."""
    q = 0
    while q < c:
        r = rows[q]
        if q + 3 < c and rows[q + 1] == r and rows[q + 2] == r and rows[q + 3] == r:
            for e in range(acc.shape[1]):
                acc[r, e] += (vals[q, e] + vals[q + 1, e]) + (vals[q + 2, e] + vals[q + 3, e])
            q += 4
        else:
            for e in range(acc.shape[1]):
                acc[r, e] += vals[q, e]
            q += 1


@njit(inline="always")
def _add_held(key_acc, key, g, held):  # noqa: ANN001, ANN202
    """``key_acc[key // g, key % g] += held`` through a C-contiguous view of the key's row (its
    values contiguous, :func:`convert_accumulate`'s contract), so that the loop is vectorized: on
    the ``A``-layout view the add is scalar (2,500 keys of 65 values: 83 µs with their zeroing,
    30 µs here)."""
    kept = carray(_at(np.int64(key_acc[key // g, key % g].ctypes.data)), held.shape, key_acc.dtype)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    for e in range(held.shape[0]):
        kept[e] += held[e]


@njit(inline="always")
def _clear_key(key_acc, key_t, key, g, count_t):  # noqa: ANN001, ANN202
    """Zero ``key``'s values in ``key_acc`` (through a C-contiguous view, as :func:`_add_held`)
    and, with ``count_t``, its count in ``key_t``: :func:`convert_accumulate`'s ``fresh`` on its
    word-order paths."""
    kept = carray(_at(np.int64(key_acc[key // g, key % g].ctypes.data)), key_acc.shape[2], key_acc.dtype)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    kept[:] = 0
    if count_t:
        key_t[key // g, key % g] = 0


@njit(cache=True, nogil=True)
def gen_levels(alphas, s, rk, cw_seed, cw_tl, cw_tr):  # noqa: ANN001, ANN201
    """The level loop of :func:`secemb.fss.dpf.gen_path`: both parties' seeds ``s`` uint64
    (2, K, 2) walk down to the leaves at ``alphas`` (int64 (K,)), writing the correction words
    ``cw_seed`` uint64 (K, n, 2) and ``cw_tl``, ``cw_tr`` uint8 (K, n).  Branch-free in the
    secret bits of ``alphas`` (masks, no ``if`` on them)."""
    k = alphas.shape[0]
    n = cw_seed.shape[1]
    words = s.reshape(2 * k, 2)
    left = np.empty((2, k, 2), np.uint64)
    right = np.empty((2, k, 2), np.uint64)
    stage = np.empty((3, BLOCKS, 2), np.uint64)
    one = np.uint64(1)
    for i in range(n):
        _convert_blocks(words, 1, rk[0], left.reshape(2 * k, 1, 2), stage)
        _convert_blocks(words, 1, rk[1], right.reshape(2 * k, 1, 2), stage)
        for j in range(k):
            bit = np.uint64((alphas[j] >> (n - 1 - i)) & 1)
            go_r = np.uint64(0) - bit  # all ones where alpha_i = 1
            go_l = ~go_r
            lose0 = ((left[0, j, 0] ^ left[1, j, 0]) & go_r) | ((right[0, j, 0] ^ right[1, j, 0]) & go_l)
            lose1 = ((left[0, j, 1] ^ left[1, j, 1]) & go_r) | ((right[0, j, 1] ^ right[1, j, 1]) & go_l)
            scw0 = lose0 & ~one
            tcw_l = ((left[0, j, 0] ^ left[1, j, 0]) ^ bit ^ one) & one
            tcw_r = ((right[0, j, 0] ^ right[1, j, 0]) ^ bit) & one
            cw_seed[j, i, 0] = scw0
            cw_seed[j, i, 1] = lose1
            cw_tl[j, i] = np.uint8(tcw_l)
            cw_tr[j, i] = np.uint8(tcw_r)
            low = scw0 | (tcw_r & go_r) | (tcw_l & go_l)
            for b in range(2):
                mask = np.uint64(0) - (s[b, j, 0] & one)
                s[b, j, 0] = ((right[b, j, 0] & go_r) | (left[b, j, 0] & go_l)) ^ (mask & low)
                s[b, j, 1] = ((right[b, j, 1] & go_r) | (left[b, j, 1] & go_l)) ^ (mask & lose1)


@njit(inline="always")
def _add_scaled(s, x, rows, r):  # noqa: ANN001, ANN202
    """``s += x rows[r]`` in ``s``'s ring, nothing for ``r < 0`` (a padding row): :func:`ring_matmul`'s
    one column."""
    if r >= 0:
        for e in range(s.shape[0]):
            s[e] += x * rows[r, e]


@njit(cache=True, nogil=True)
def ring_matmul(a, rows, index, out, cols):  # noqa: ANN001, ANN201
    """``out[g] = a[g, :, :c] @ B_g[:c]`` for ``c = cols[g]`` in ``out``'s ring (uint32 or uint64
    arithmetic wraps), group ``g``'s right operand read through ``index``: ``B_g[j] =
    rows[index[g, j]]``, a zero row where ``index[g, j] = -1`` (a bucket's padding: nothing is
    gathered).  a unsigned (G, K, M) with entries below the ring's modulus, rows ring (N, D),
    index int64 (G, M) in ``[-1, N)`` (unchecked here), out ring (G, K, D) of any strides,
    overwritten (e.g. the transposed view of a user-major (K, G, D) array: the retrieval's
    answers, written where they belong), sharing no memory with ``a`` or ``rows``; cols int64
    (G,) at most M.  Four rows of ``a`` share each row of ``B_g`` read (1.5x the one-row loop),
    summed in a small contiguous buffer and written to ``out`` once; row blocks outside, groups
    inside, so that a user-major destination's rows are written in order (not one row per group
    ``K`` rows apart).  Fewer than four rows left (``K`` below 4: a batch of one device, the
    retrieval of a server that takes devices one at a time) are summed a row at a time, four
    columns at once (four rows of ``B_g`` a load and store of the sum, 1.9x the one-column loop
    for one row, session 42); ring sums do not depend on the order of their terms."""
    groups, k, m = a.shape
    d = rows.shape[1]
    acc = np.empty((4, d), out.dtype)
    for i in range(0, k, 4):
        nr = min(4, k - i)
        for g in range(groups):
            c = cols[g]
            acc[:] = 0
            if nr == 4:
                for j in range(c):
                    r = index[g, j]
                    if r < 0:
                        continue
                    x0, x1, x2, x3 = a[g, i, j], a[g, i + 1, j], a[g, i + 2, j], a[g, i + 3, j]
                    for e in range(d):
                        y = rows[r, e]
                        acc[0, e] += x0 * y
                        acc[1, e] += x1 * y
                        acc[2, e] += x2 * y
                        acc[3, e] += x3 * y
            else:
                for q in range(nr):
                    x, s = a[g, i + q], acc[q]
                    j = 0
                    while j + 4 <= c:
                        r0, r1, r2, r3 = index[g, j], index[g, j + 1], index[g, j + 2], index[g, j + 3]
                        if min(r0, r1, r2, r3) < 0:  # a padding row among them: each column on its own
                            for jj in range(j, j + 4):
                                _add_scaled(s, x[jj], rows, index[g, jj])
                        else:
                            x0, x1, x2, x3 = x[j], x[j + 1], x[j + 2], x[j + 3]
                            for e in range(d):
                                s[e] += x0 * rows[r0, e] + x1 * rows[r1, e] + x2 * rows[r2, e] + x3 * rows[r3, e]
                        j += 4
                    for jj in range(j, c):
                        _add_scaled(s, x[jj], rows, index[g, jj])
            for q in range(nr):
                for e in range(d):
                    out[g, i + q, e] = acc[q, e]


@intrinsic
def _at(typingctx, addr):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """The address ``addr`` (int64) as a ``void *``, for :func:`numba.carray`."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(types.int64), codegen


@njit(cache=True, nogil=True)
def bits_accumulate(t_at, cw_at, start, out, cols, negate):  # noqa: ANN001, ANN201
    """``out[g, i] = start[g, i] +- sum_u t_u[g, i] cw_u[g]`` for ``i < cols[g]`` (``-`` with
    ``negate``), ``out[g, i] = start[g, i]`` beyond, in ``out``'s ring: user ``u``'s control
    bits ``t_u`` uint8 (G, M) (0 or 1) and correction words ``cw_u`` ring (G, w) are the
    C-contiguous arrays at addresses ``t_at[u]`` and ``cw_at[u]`` (int64 (U,); each user's own
    array: nothing is stacked), start and out ring (G, M, w) (``start`` may be ``out``), cols
    int64 (G,) at most M.  A zero bit costs a test; a one bit adds a row.  Group-major, so that
    ``out[g]`` stays in cache while every user's bits of group ``g`` are added."""
    groups, m, w = out.shape
    for g in range(groups):
        for i in range(m):
            for e in range(w):
                out[g, i, e] = start[g, i, e]
        for u in range(t_at.shape[0]):
            t = carray(_at(t_at[u]), (groups, m), np.uint8)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
            cw = carray(_at(cw_at[u]), (groups, w), out.dtype)
            for i in range(cols[g]):
                if t[g, i] != 0:
                    if negate:
                        for e in range(w):
                            out[g, i, e] -= cw[g, e]
                    else:
                        for e in range(w):
                            out[g, i, e] += cw[g, e]


@njit(cache=True, nogil=True)
def fold_buckets(acc, rows, cols, negate):  # noqa: ANN001, ANN201
    """``acc[g, i] += rows[g, i]`` (``-=`` with ``negate``) in ``acc``'s ring for ``i < cols[g]``;
    the positions beyond are left as they are: acc ring (G, M, w), rows ring (G, R, w) with
    ``R >= M`` (a walk's padded row layout), not sharing memory; cols int64 (G,) at most M.  A
    bucket's rows are added where they are, its padding not read (numpy's add over the (G, M, w)
    view of a (G, R, w) array took about twice its time over a contiguous one)."""
    groups, w = acc.shape[0], acc.shape[2]
    for g in range(groups):
        for i in range(cols[g]):  # (indexed in place: a loop over views of the rows or a flat run ran 1.2-6x slower)
            if negate:
                for e in range(w):
                    acc[g, i, e] -= rows[g, i, e]
            else:
                for e in range(w):
                    acc[g, i, e] += rows[g, i, e]


@njit(cache=True, nogil=True)
def unmask_slots(answers, unmask, items, rows_at, suffix_items, suffix_rows, tags, filled):  # noqa: ANN001, ANN201
    """A device's reading of its reconstructed answers in one pass: for user ``u``'s slot ``s``,
    ``x = answers[u, s] * unmask[u, s]`` in the ring (answers ring (n, S, D), C-contiguous;
    unmask ring (n, S)); ``x[:w]`` to row ``s`` of the C-contiguous ring (S, w) array at address
    ``rows_at[u]`` (int64 (n,)); where ``items[u, s] >= 0`` (int64 (n, S); a real slot, the
    ``r``-th in (u, s) order) the item to ``suffix_items[r]`` (uint64 (R,)), ``x[:w]`` to
    ``suffix_rows[r]`` (ring (R, w)) and ``x[w:]`` to ``tags[r]`` (ring (R, D - w)), any
    strides; elsewhere (an empty slot) ``filled[u]`` (bool (n,)) set where ``answers[u, s]`` is
    not all zero."""
    n, slots, d = answers.shape
    width = suffix_rows.shape[1]
    r = 0
    for u in range(n):
        rows = carray(_at(rows_at[u]), (slots, width), answers.dtype)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
        for s in range(slots):
            f = unmask[u, s]
            for e in range(width):
                rows[s, e] = answers[u, s, e] * f
            if items[u, s] >= 0:
                suffix_items[r] = items[u, s]
                for e in range(width):
                    suffix_rows[r, e] = rows[s, e]
                for e in range(width, d):
                    tags[r, e - width] = answers[u, s, e] * f
                r += 1
            else:
                nonzero = answers[u, s, 0] != 0
                for e in range(1, d):
                    nonzero |= answers[u, s, e] != 0
                if nonzero:
                    filled[u] = True


@njit(cache=True)
def cuckoo_assign(cands, slots, items, max_kicks, rng, dropped):  # noqa: ANN001, ANN201
    """Cuckoo-insert ``items`` (distinct int64) into ``slots`` (int64 (B,), -1 free) with
    candidate buckets ``cands`` (int64 (m, 3)): an item takes its first free candidate, else
    evicts a candidate's occupant (not the bucket it was just evicted from, when it has
    another choice) drawn by ``rng.integers(0, n)`` from the numpy Generator ``rng``, up to
    ``max_kicks`` times; the item left over is written to ``dropped`` (int64, room for every
    item).  Returns how many were dropped.  The same placements and draws as
    :meth:`secemb.fss.cuckoo.CuckooLayout.assign`'s reference loop."""
    width = cands.shape[1]
    options = np.empty(width, np.int64)
    n_dropped = 0
    for i in range(items.shape[0]):
        cur = items[i]
        came_from = -1
        for _ in range(max_kicks):
            free = -1
            for j in range(width):
                if slots[cands[cur, j]] < 0:
                    free = cands[cur, j]
                    break
            if free >= 0:
                slots[free] = cur
                cur = -1
                break
            n = 0
            for j in range(width):
                if cands[cur, j] != came_from:
                    options[n] = cands[cur, j]
                    n += 1
            if n == 0:
                for j in range(width):
                    options[j] = cands[cur, j]
                n = width
            b = options[rng.integers(0, n)]
            evicted = slots[b]
            slots[b] = cur
            cur = evicted
            came_from = b
        if cur >= 0:
            dropped[n_dropped] = cur
            n_dropped += 1
    return n_dropped
