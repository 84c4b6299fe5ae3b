"""Triton kernels of the servers' full-domain DPF work (internal; imported only by
:mod:`secemb.fss.gpu.evaluate`, after :func:`secemb.fss.gpu.device` has found a CUDA device or
Triton's CPU interpreter).

Hazmat layer.  Every array crosses the kernel boundary as a signed integer tensor of the same
width and is reinterpreted inside (``bitcast``): 128-bit words are int64 ``(..., 2)`` (two
little-endian uint64, :mod:`secemb.fss.prg`), ring arrays int32 (``Z_2^32``) or int64
(``Z_2^64``).  AES-128 is the T-table form of :mod:`secemb.fss.gpu.tables`: ``rk`` is a
key's 44 round-key words, ``tab`` the int32 (5, 256) tables.  Ring sums wrap (unsigned
integer arithmetic), so every result is bit-identical to the CPU path's.

Kernels:

* :func:`mmo_kernel`: ``dst[i] = AES(src[i]) ^ src[i]`` (the raw AES rate and the tests);
* :func:`level_kernel`: one tree level, both children of every parent, with the correction
  words and control bits of :mod:`secemb.fss.tree`;
* :func:`retrieval_kernel`: retrieval shares ``(-1)^b [Convert_ret(s) + t CW]`` (payload 1)
  and control bits ``t`` at every leaf;
* :func:`convert_sum_kernel`: ``acc[g, p] += sum_u Convert_agg(s[u G + g, p])`` (the
  aggregation's conversion and scatter over keys: ``G = 1`` for the full layout, ``B``
  buckets for the cuckoo layout), one program per (leaf block, conversion block), no atomics;
* :func:`sketch_kernel`: the sketch values of :class:`secemb.fss.sketch.SketchCheck` from the
  same leaves (one MMO block per leaf under its device's key, reduced into ``F_p``, ``p = 2^61 -
  1``, then the products with the device's coefficients summed per key);
* :func:`ring_matmul_kernel`: ``out[u, g] = sum_p e[u, g, p] T[g, p]`` in the ring (the
  retrieval inner product with the table or with bucket ``g`` 's rows, and the aggregation's
  control-bit products).

Compile cost (docs/gpu.md, "First run on a GPU"): Triton compiles a kernel anew for every new
specialisation key, and by default an integer argument's key is its type plus ``== 1`` and
``% 16 == 0``, so sizes that change per launch (a level's parents, a batch's keys, a domain)
would compile variant after variant.  Every integer argument here is a runtime size, listed in
``do_not_specialize``: each kernel compiles once per ring (``RING64``) and block constants,
whatever the sizes.  Pointers keep their 16-byte alignment key (fresh device tensors always
have it) except the retrieval's per-key correction words, a slice of the batch's.  The AES
rounds are a runtime loop (:func:`aes128`).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def aes128(c0, c1, c2, c3, rk_ptr, tab_ptr):  # noqa: ANN001, ANN201
    """AES-128 of blocks given as four uint32 columns (little-endian); returns the four
    output columns.  Written out inline (no helper calls): Triton's interpreter pays for
    every call of a jit function, the compiler inlines either way.

    The nine full rounds are a runtime loop (``range``), not unrolled (``tl.static_range``):
    unrolled, one kernel took 4-18 s of CPU to compile for sm_90 (Triton 3.6), rolled 0.1-0.4 s,
    for about 6 % more SASS instructions per block and the same table loads."""
    s0 = c0 ^ tl.load(rk_ptr).to(tl.uint32, bitcast=True)
    s1 = c1 ^ tl.load(rk_ptr + 1).to(tl.uint32, bitcast=True)
    s2 = c2 ^ tl.load(rk_ptr + 2).to(tl.uint32, bitcast=True)
    s3 = c3 ^ tl.load(rk_ptr + 3).to(tl.uint32, bitcast=True)
    t_0, t_1, t_2, t_3 = tab_ptr, tab_ptr + 256, tab_ptr + 512, tab_ptr + 768
    for r in range(1, 10):
        # column j takes row i from column j + i (ShiftRows); T_i holds row i's MixColumns term
        t0 = (tl.load(t_0 + (s0 & 0xFF).to(tl.int32)) ^ tl.load(t_1 + ((s1 >> 8) & 0xFF).to(tl.int32))
              ^ tl.load(t_2 + ((s2 >> 16) & 0xFF).to(tl.int32)) ^ tl.load(t_3 + (s3 >> 24).to(tl.int32))
              ^ tl.load(rk_ptr + 4 * r))
        t1 = (tl.load(t_0 + (s1 & 0xFF).to(tl.int32)) ^ tl.load(t_1 + ((s2 >> 8) & 0xFF).to(tl.int32))
              ^ tl.load(t_2 + ((s3 >> 16) & 0xFF).to(tl.int32)) ^ tl.load(t_3 + (s0 >> 24).to(tl.int32))
              ^ tl.load(rk_ptr + 4 * r + 1))
        t2 = (tl.load(t_0 + (s2 & 0xFF).to(tl.int32)) ^ tl.load(t_1 + ((s3 >> 8) & 0xFF).to(tl.int32))
              ^ tl.load(t_2 + ((s0 >> 16) & 0xFF).to(tl.int32)) ^ tl.load(t_3 + (s1 >> 24).to(tl.int32))
              ^ tl.load(rk_ptr + 4 * r + 2))
        t3 = (tl.load(t_0 + (s3 & 0xFF).to(tl.int32)) ^ tl.load(t_1 + ((s0 >> 8) & 0xFF).to(tl.int32))
              ^ tl.load(t_2 + ((s1 >> 16) & 0xFF).to(tl.int32)) ^ tl.load(t_3 + (s2 >> 24).to(tl.int32))
              ^ tl.load(rk_ptr + 4 * r + 3))
        s0 = t0.to(tl.uint32, bitcast=True)
        s1 = t1.to(tl.uint32, bitcast=True)
        s2 = t2.to(tl.uint32, bitcast=True)
        s3 = t3.to(tl.uint32, bitcast=True)
    # last round: S-box (table 4, one byte per entry) without MixColumns
    sb = tab_ptr + 1024
    o0 = (tl.load(sb + (s0 & 0xFF).to(tl.int32)) | (tl.load(sb + ((s1 >> 8) & 0xFF).to(tl.int32)) << 8)
          | (tl.load(sb + ((s2 >> 16) & 0xFF).to(tl.int32)) << 16)
          | (tl.load(sb + (s3 >> 24).to(tl.int32)) << 24)) ^ tl.load(rk_ptr + 40)
    o1 = (tl.load(sb + (s1 & 0xFF).to(tl.int32)) | (tl.load(sb + ((s2 >> 8) & 0xFF).to(tl.int32)) << 8)
          | (tl.load(sb + ((s3 >> 16) & 0xFF).to(tl.int32)) << 16)
          | (tl.load(sb + (s0 >> 24).to(tl.int32)) << 24)) ^ tl.load(rk_ptr + 41)
    o2 = (tl.load(sb + (s2 & 0xFF).to(tl.int32)) | (tl.load(sb + ((s3 >> 8) & 0xFF).to(tl.int32)) << 8)
          | (tl.load(sb + ((s0 >> 16) & 0xFF).to(tl.int32)) << 16)
          | (tl.load(sb + (s1 >> 24).to(tl.int32)) << 24)) ^ tl.load(rk_ptr + 42)
    o3 = (tl.load(sb + (s3 & 0xFF).to(tl.int32)) | (tl.load(sb + ((s0 >> 8) & 0xFF).to(tl.int32)) << 8)
          | (tl.load(sb + ((s1 >> 16) & 0xFF).to(tl.int32)) << 16)
          | (tl.load(sb + (s2 >> 24).to(tl.int32)) << 24)) ^ tl.load(rk_ptr + 43)
    return (o0.to(tl.uint32, bitcast=True), o1.to(tl.uint32, bitcast=True), o2.to(tl.uint32, bitcast=True),
            o3.to(tl.uint32, bitcast=True))


@triton.jit
def _mmo(lo, hi, rk_ptr, tab_ptr):  # noqa: ANN001, ANN202
    """``AES(x) ^ x`` of 128-bit words ``(lo, hi)`` (uint64); returns the four uint32 columns."""
    c0 = lo.to(tl.uint32)
    c1 = (lo >> 32).to(tl.uint32)
    c2 = hi.to(tl.uint32)
    c3 = (hi >> 32).to(tl.uint32)
    o0, o1, o2, o3 = aes128(c0, c1, c2, c3, rk_ptr, tab_ptr)
    return o0 ^ c0, o1 ^ c1, o2 ^ c2, o3 ^ c3


@triton.jit
def _join(a, b):  # noqa: ANN001, ANN202
    return a.to(tl.uint64) | (b.to(tl.uint64) << 32)


@triton.jit
def _load_word(ptr, idx, mask):  # noqa: ANN001, ANN202
    lo = tl.load(ptr + 2 * idx, mask=mask, other=0).to(tl.uint64, bitcast=True)
    hi = tl.load(ptr + 2 * idx + 1, mask=mask, other=0).to(tl.uint64, bitcast=True)
    return lo, hi


@triton.jit
def _store_word(ptr, idx, lo, hi, mask):  # noqa: ANN001, ANN202
    tl.store(ptr + 2 * idx, lo.to(tl.int64, bitcast=True), mask=mask)
    tl.store(ptr + 2 * idx + 1, hi.to(tl.int64, bitcast=True), mask=mask)


@triton.jit(do_not_specialize=["n"])
def mmo_kernel(src_ptr, dst_ptr, n, rk_ptr, tab_ptr, BLOCK: tl.constexpr):  # noqa: ANN001, ANN201, N803
    """``dst[i] = AES(src[i]) ^ src[i]`` for ``n`` words (int64 (n, 2) each)."""
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    lo, hi = _load_word(src_ptr, idx, mask)
    o0, o1, o2, o3 = _mmo(lo, hi, rk_ptr, tab_ptr)
    _store_word(dst_ptr, idx, _join(o0, o1), _join(o2, o3), mask)


@triton.jit(do_not_specialize=["parents", "need", "level", "depth", "total"])
def level_kernel(  # noqa: ANN201
    x_ptr, out_ptr, cw_ptr, parents, need, level, depth, total,  # noqa: ANN001
    rkl_ptr, rkr_ptr, tab_ptr, BLOCK: tl.constexpr,  # noqa: ANN001, N803
):
    """Children of ``parents`` nodes per key: ``x`` int64 (K, parents, 2) -> ``out`` int64
    (K, need, 2), ``need`` in {2 parents - 1, 2 parents}; ``total = K parents``.

    ``child_c = AES_c(x) ^ x ^ (t ? (cw_lo | tCW_c, cw_hi) : 0)`` with ``t`` bit 0 of ``x``;
    ``cw`` int64 (K, depth, 3) holds per level ``(cw_hi, cw_lo | tCW_L, cw_lo | tCW_R)``.
    """
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < total
    key = idx // parents
    p = idx % parents
    lo, hi = _load_word(x_ptr, idx, mask)
    cw = cw_ptr + (key * depth + level) * 3
    cw_hi = tl.load(cw, mask=mask, other=0).to(tl.uint64, bitcast=True)
    cw_l = tl.load(cw + 1, mask=mask, other=0).to(tl.uint64, bitcast=True)
    cw_r = tl.load(cw + 2, mask=mask, other=0).to(tl.uint64, bitcast=True)
    t = (lo & 1) != 0
    corr_hi = tl.where(t, cw_hi, 0)
    child = key * need + 2 * p
    o0, o1, o2, o3 = _mmo(lo, hi, rkl_ptr, tab_ptr)
    _store_word(out_ptr, child, _join(o0, o1) ^ tl.where(t, cw_l, 0), _join(o2, o3) ^ corr_hi, mask)
    o0, o1, o2, o3 = _mmo(lo, hi, rkr_ptr, tab_ptr)
    right = mask & (2 * p + 1 < need)
    _store_word(out_ptr, child + 1, _join(o0, o1) ^ tl.where(t, cw_r, 0), _join(o2, o3) ^ corr_hi, right)


@triton.jit(do_not_specialize=["m", "stride", "total", "party"], do_not_specialize_on_alignment=["cw_ptr"])
def retrieval_kernel(  # noqa: ANN201
    leaf_ptr, cw_ptr, e_ptr, t_ptr, m, stride, total, party, rk_ptr, tab_ptr,  # noqa: ANN001
    RING64: tl.constexpr, BLOCK: tl.constexpr,  # noqa: N803
):
    """Retrieval shares of the first ``m`` leaves of each key (int64 (K, stride, 2), ``stride
    >= m``; ``total = K m``): ``e`` ring (K, m) = ``(-1)^party [Convert(s) + t CW[key]]``
    (payload 1: the first ring element of ``AES(s) ^ s``) with ``cw`` ring (K,), and ``t``
    uint8 (K, m)."""
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < total
    key = idx // m
    lo, hi = _load_word(leaf_ptr, idx + key * (stride - m), mask)
    o0, o1, _, _ = _mmo(lo, hi, rk_ptr, tab_ptr)
    t = (lo & 1) != 0
    if RING64:
        cw = tl.load(cw_ptr + key, mask=mask, other=0).to(tl.uint64, bitcast=True)
        v = _join(o0, o1) + tl.where(t, cw, 0)
        v = tl.where(party != 0, 0 - v, v)
        tl.store(e_ptr + idx, v.to(tl.int64, bitcast=True), mask=mask)
    else:
        cw32 = tl.load(cw_ptr + key, mask=mask, other=0).to(tl.uint32, bitcast=True)
        v32 = o0 + tl.where(t, cw32, 0)
        v32 = tl.where(party != 0, 0 - v32, v32)
        tl.store(e_ptr + idx, v32.to(tl.int32, bitcast=True), mask=mask)
    tl.store(t_ptr + idx, t.to(tl.uint8), mask=mask)


@triton.jit
def _add_out(acc_ptr, base, width, e, v, mask, RING64: tl.constexpr):  # noqa: ANN001, ANN202, N803
    """``acc[base + e] += v`` where ``e < width`` (``e`` a vector: the interpreter mishandles
    a vector mask and-ed with a scalar condition)."""
    ok = mask & (e < width)
    if RING64:
        old = tl.load(acc_ptr + base + e, mask=ok, other=0).to(tl.uint64, bitcast=True)
        tl.store(acc_ptr + base + e, (old + v).to(tl.int64, bitcast=True), mask=ok)
    else:
        old32 = tl.load(acc_ptr + base + e, mask=ok, other=0).to(tl.uint32, bitcast=True)
        tl.store(acc_ptr + base + e, (old32 + v).to(tl.int32, bitcast=True), mask=ok)


@triton.jit(do_not_specialize=["users", "groups", "m", "stride", "width"])
def convert_sum_kernel(  # noqa: ANN201
    leaf_ptr, acc_ptr, users, groups, m, stride, width, rk_ptr, tab_ptr,  # noqa: ANN001
    RING64: tl.constexpr, BLOCK: tl.constexpr,  # noqa: N803
):
    """``acc[g, p, j P : (j + 1) P] += sum_u MMO(s[u groups + g, p] ^ (0, j))`` truncated to
    ``width`` ring elements (``P = 128 / k`` per block) for ``p < m``: leaves int64 (users
    groups, stride, 2), ``stride >= m``, ``acc`` ring (groups, m, width).  Grid: (groups
    ceil(m / BLOCK), conversion blocks)."""
    blocks = tl.cdiv(m, BLOCK)
    g = tl.program_id(0) // blocks
    p = (tl.program_id(0) % blocks) * BLOCK + tl.arange(0, BLOCK)
    j = tl.program_id(1)
    mask = p < m
    a0 = tl.zeros((BLOCK,), tl.uint32)
    a1 = tl.zeros((BLOCK,), tl.uint32)
    a2 = tl.zeros((BLOCK,), tl.uint32)
    a3 = tl.zeros((BLOCK,), tl.uint32)
    w0 = tl.zeros((BLOCK,), tl.uint64)
    w1 = tl.zeros((BLOCK,), tl.uint64)
    for u in range(users):
        lo, hi = _load_word(leaf_ptr, (u * groups + g) * stride + p, mask)
        o0, o1, o2, o3 = _mmo(lo, hi ^ j.to(tl.uint64), rk_ptr, tab_ptr)
        if RING64:
            w0 += _join(o0, o1)
            w1 += _join(o2, o3)
        else:
            a0 += o0
            a1 += o1
            a2 += o2
            a3 += o3
    base = (g * m + p) * width
    jv = tl.zeros_like(p) + j
    if RING64:
        _add_out(acc_ptr, base, width, 2 * jv, w0, mask, RING64)
        _add_out(acc_ptr, base, width, 2 * jv + 1, w1, mask, RING64)
    else:
        _add_out(acc_ptr, base, width, 4 * jv, a0, mask, RING64)
        _add_out(acc_ptr, base, width, 4 * jv + 1, a1, mask, RING64)
        _add_out(acc_ptr, base, width, 4 * jv + 2, a2, mask, RING64)
        _add_out(acc_ptr, base, width, 4 * jv + 3, a3, mask, RING64)


@triton.jit
def _red64(w):  # noqa: ANN001, ANN202
    """``w mod p`` (``p = 2^61 - 1``) of uint64 ``w``, in ``[0, p)``."""
    s = (w & 0x1FFFFFFFFFFFFFFF) + (w >> 61)  # < 2^61 + 8
    return tl.where(s >= 0x1FFFFFFFFFFFFFFF, s - 0x1FFFFFFFFFFFFFFF, s)


@triton.jit
def _red128(hi, lo):  # noqa: ANN001, ANN202
    """``(hi 2^64 + lo) mod p`` of uint64 halves, in ``[0, p)`` (``2^64 = 8 mod p``)."""
    return _red64((hi >> 58) + (((hi << 3) | (lo >> 61)) & 0x1FFFFFFFFFFFFFFF) + (lo & 0x1FFFFFFFFFFFFFFF))


@triton.jit
def _mulp(a, b):  # noqa: ANN001, ANN202
    """``a b mod p`` of uint64 ``a, b < 2^64`` (the 128-bit product's halves: ``*`` and ``umulhi``)."""
    return _red128(tl.umulhi(a, b), a * b)


@triton.jit
def _addp(a, b):  # noqa: ANN001, ANN202
    """``a + b mod p`` of ``a, b`` in ``[0, p)``."""
    s = a + b
    return tl.where(s >= 0x1FFFFFFFFFFFFFFF, s - 0x1FFFFFFFFFFFFFFF, s)


@triton.jit
def _sum_p(v):  # noqa: ANN001, ANN202
    """The sum mod ``p`` of a block of uint64 ``v`` in ``[0, p)`` (at most 2^31 of them): the
    low and high 32-bit halves summed apart (no wrap), then joined mod ``p``."""
    lo = tl.sum(v & 0xFFFFFFFF, axis=0).to(tl.uint64)
    hi = tl.sum(v >> 32, axis=0).to(tl.uint64)
    return _addp(_mulp(_red64(hi), (1 << 32) + tl.zeros_like(hi)), _red64(lo))


@triton.jit(do_not_specialize=["key0", "stride", "per_user", "span"])
def sketch_kernel(  # noqa: ANN201
    leaf_ptr, rk_ptr, r_ptr, r2_ptr, out_ptr, key0, stride, per_user, span, tab_ptr,  # noqa: ANN001
    BLOCK: tl.constexpr,  # noqa: N803
):
    """The sketch (:class:`secemb.fss.sketch.SketchCheck`) of a chunk of keys, in ``F_p``,
    ``p = 2^61 - 1``: for the chunk's key ``i`` (``k = key0 + i``, device ``u = k // per_user``)
    over positions ``x`` of slice ``s``, ``z = (AES_{k_u}(w) ^ w) mod p`` of the leaf word ``w``
    read as ``hi 2^64 + lo`` and the sums ``(sum r_x z, sum r2_x z, sum z)`` mod ``p``.  Leaves
    int64 (chunk, stride, 2) (the padded domain); ``rk`` int32 (U, 44) each device's round keys
    (:func:`secemb.fss.gpu.tables.expand_keys`), ``r``, ``r2`` int64 (U, stride) in ``[0, p)``;
    ``out`` int64 (chunk, slices, 3): program ``(i, s)`` writes its three sums, in ``[0, p)``,
    to ``out[i, s]`` (no atomics: the caller adds the slices mod ``p``).

    Grid: (chunk, slices = ceil(stride / span)): program ``(i, s)`` sums positions ``[s span,
    (s + 1) span)`` (``span`` a multiple of ``BLOCK``)."""
    i = tl.program_id(0)
    s = tl.program_id(1)
    u = ((key0 + i) // per_user).to(tl.int64)
    x0 = s * span
    x1 = tl.minimum(x0 + span, stride)
    rk = rk_ptr + u * 44
    rows = u * stride
    a = tl.zeros((BLOCK,), tl.uint64)
    b = tl.zeros((BLOCK,), tl.uint64)
    c = tl.zeros((BLOCK,), tl.uint64)
    for p0 in range(x0, x1, BLOCK):
        x = p0 + tl.arange(0, BLOCK)
        mask = x < x1
        lo, hi = _load_word(leaf_ptr, i * stride + x, mask)
        o0, o1, o2, o3 = _mmo(lo, hi, rk, tab_ptr)
        z = tl.where(mask, _red128(_join(o2, o3), _join(o0, o1)), 0)
        # masked positions read r = 0 and z = 0 and add nothing
        rx = tl.load(r_ptr + rows + x, mask=mask, other=0).to(tl.uint64, bitcast=True)
        r2x = tl.load(r2_ptr + rows + x, mask=mask, other=0).to(tl.uint64, bitcast=True)
        a = _addp(a, _mulp(rx, z))
        b = _addp(b, _mulp(r2x, z))
        c = _addp(c, z)
    slot = out_ptr + (i * tl.num_programs(1) + s) * 3
    tl.store(slot, _sum_p(a).to(tl.int64, bitcast=True))
    tl.store(slot + 1, _sum_p(b).to(tl.int64, bitcast=True))
    tl.store(slot + 2, _sum_p(c).to(tl.int64, bitcast=True))


@triton.jit(do_not_specialize=["users", "groups", "m", "d", "m_split"])
def ring_matmul_kernel(  # noqa: ANN201
    e_ptr, tab_ptr, out_ptr, users, groups, m, d, m_split,  # noqa: ANN001
    RING64: tl.constexpr, BU: tl.constexpr, BD: tl.constexpr, BM: tl.constexpr,  # noqa: N803
):
    """``out[u, g] += sum_p e[u, g, p] T[g, p]`` in the ring: ``e`` ring (users, groups, m),
    ``T`` ring (groups, m, d), ``out`` ring (users, groups, d), zeroed by the caller.

    Grid: (groups, ceil(users / BU), ceil(d / BD) * ceil(m / m_split)): the inner dimension is
    split into slices of ``m_split`` (a multiple of ``BM``) so that a thin product (one group,
    few keys, a long domain) still fills the device; slices meet by integer atomic adds, exact
    and order-independent in the ring."""
    g = tl.program_id(0)
    us = tl.program_id(1) * BU + tl.arange(0, BU)
    d_blocks = tl.cdiv(d, BD)
    ds = (tl.program_id(2) % d_blocks) * BD + tl.arange(0, BD)
    lo = (tl.program_id(2) // d_blocks) * m_split
    hi = tl.minimum(lo + m_split, m)
    if RING64:
        acc = tl.zeros((BU, BD), tl.uint64)
    else:
        acc = tl.zeros((BU, BD), tl.uint32)
    for m0 in range(lo, hi, BM):
        ms = m0 + tl.arange(0, BM)
        a_mask = (us[:, None] < users) & (ms[None, :] < hi)
        b_mask = (ms[:, None] < hi) & (ds[None, :] < d)
        a = tl.load(e_ptr + (us[:, None] * groups + g) * m + ms[None, :], mask=a_mask, other=0)
        b = tl.load(tab_ptr + (g * m + ms[:, None]) * d + ds[None, :], mask=b_mask, other=0)
        if RING64:
            prod = a.to(tl.uint64, bitcast=True)[:, :, None] * b.to(tl.uint64, bitcast=True)[None, :, :]
        else:
            prod = a.to(tl.uint32, bitcast=True)[:, :, None] * b.to(tl.uint32, bitcast=True)[None, :, :]
        acc += tl.sum(prod, axis=1).to(acc.dtype)
    out_mask = (us[:, None] < users) & (ds[None, :] < d)
    dst = out_ptr + (us[:, None] * groups + g) * d + ds[None, :]
    if RING64:
        tl.atomic_add(dst, acc.to(tl.int64, bitcast=True), mask=out_mask)
    else:
        tl.atomic_add(dst, acc.to(tl.int32, bitcast=True), mask=out_mask)
