"""AES-128 rounds as numba intrinsics over the AES-NI / VAES instructions (internal).

Hazmat layer, imported only when numba is installed and the CPU has AES-NI
(:func:`secemb.fss.kernels.available`), by the callers of the kernels right before the first
call: importing it loads numba's registries (:func:`~secemb.fss._kernel_cache.load_numba_registries`).  The
instructions are the hardware's constant-time AES round; there is no table-based software AES
here.  The round keys of the public fixed keys
(:func:`secemb.fss.prg.fixed_key`) are expanded with ``AESKEYGENASSIST`` (:func:`round_keys`),
and every intrinsic is checked against OpenSSL in ``tests/fss/test_fss_kernels.py``.

With VAES (256-bit AES rounds) a vector holds ``W = 2`` blocks, otherwise ``W = 1``; round-key
arrays store each 128-bit round key ``W`` times so that one vector load broadcasts it.  All
pointer arguments are addresses (``arr.ctypes.data``) of C-contiguous ``uint64`` buffers; blocks
are two little-endian ``uint64`` (16 bytes), loads and stores are unaligned.

Intrinsics (``B`` = :data:`BLOCKS` blocks in flight per call, enough to fill the AES pipelines):

* ``expand8(rk, x, cw, out, groups)``: one BGI tree level for ``8 groups`` parents ``x[0..]`` of
  one row: ``out[2j + c] = AES_c(x_j) ^ x_j ^ (t_j ? cw_c : 0)`` with the schedules of
  :func:`walk_keys` at ``rk`` and the row's corrections at ``cw``: ``cw_L``, ``cw_R`` (4 words).
  With VAES a parent is one vector ``[x_j | x_j]`` under the pair schedule (left round keys in
  the low lane, right in the high): both children in one AES instruction, already in their
  order; without, ``x_j`` under each schedule.  A loop over the groups, the round keys and the
  row's corrections loaded once before it (in registers: 11 keys, 8 vectors in flight, the two
  last-round keys); the MMO's ``^ x_j`` and the correction are folded into the last round's key
  (``AESENCLAST`` ends with its key's XOR), ``x_j ^ (t_j ? rk_10 ^ cw : rk_10)``, the control bit
  a broadcast load tested into a mask register.  ``expand8_rows(rk, x, cws, out, groups)``: the
  same with parent ``j``'s corrections at address ``cws[j]`` (an int64 array of ``8 groups``
  addresses: parents of different rows).
* ``halftree16(rk, x, cw, out, groups)``: one Half-Tree level for ``16 groups`` parents of one row:
  ``out[2j] = H(x_j) ^ (t_j ? cw : 0)``, ``out[2j + 1] = out[2j] ^ x_j`` with the circular
  correlation robust hash ``H(x) = AES(sigma(x)) ^ sigma(x)``, ``sigma(w0, w1) = (w0 ^ w1, w0)``
  (one schedule ``rk`` (11, 2W); the correction ``cw``: 2 words), a loop as ``expand8``'s.
  ``halftree16_rows(rk, x, cws, out, groups)``: per-parent corrections as for ``expand8_rows``.
* ``mmo_blocks(rk, src, dst)``: ``dst[i] = AES(src[i]) ^ src[i]`` for ``B`` consecutive blocks.
* ``mmo_ctr(rk, word, j0, dst)``: ``dst[i] = MMO(word ^ (0, j0 + i))`` for ``i < B``, ``j0`` a
  multiple of ``B`` (the payload conversion's counter blocks of one leaf).
* ``aes_ctr(rk, j0, dst)``: ``dst[i] = AES(j0 + i)`` for ``i < B``, ``j0 + i`` the 128-bit
  big-endian counter block (NIST SP 800-38A's CTR keystream; the projections' row stream,
  :func:`secemb.fss._projection_kernels.ctr_streams`).
* ``sum_keys(vals, vstride, acc, astride, rows, keys, count, per, vectors, lanes, store, sample)``
  (``sum_keys1`` for one key, ``sum_keys4`` for ``G =`` :data:`KEY_GROUP` keys): the payload
  conversion's both sums over ``vectors`` (``1..``:data:`SUM_VECTORS`) vectors of
  :data:`SUM_BITS` bits of each value (ring words, uint32 or uint64 as the type of ``sample``
  says), the last one's first ``lanes`` lanes only (``1..`` the lanes of a vector; masked loads
  and stores: nothing past them is read or written), for ``count`` positions ``i`` staged ``per``
  words a position (key ``j``'s value at ``vals + (per i + j) vstride``, the position's row index
  at the int64 ``rows[per i]``): ``acc row += sum_j value`` (one pass over the row for the ``G``
  values: row ``r`` at ``acc + r astride``) and ``key_j += value`` with each key's sum held in
  vector registers across the positions and added to its values (at the int64 address
  ``keys[j]``) once at the end -- or, with ``store`` non-zero, written over them (a key's first
  run of positions: nothing need zero its values first).  Added, not stored, the sums are
  increments: the rows and keys may share memory, and each gets every one.  With AVX-512 four keys
  of up to six 512-bit vectors each (a value of 96 uint32 or 48 uint64) are 24 of the 32
  registers; on 16 registers, two 256-bit vectors a key.
* ``sketch_leaves(rk, leaves, r, r2, mask, chunks, out)`` (only where :data:`IFMA`): the sketch
  check's sums ``(sum r z, sum r^2 z, sum z) mod p`` of up to :data:`SKETCH_CHUNKS` times ``B``
  leaves of one key (:func:`secemb.fss._sketch_kernels.sketch_accumulate_ifma` calls it): the
  keyed MMO blocks two a 256-bit vector (VAES), the F_p products four leaves a vector as 52-bit
  limb multiply-adds (AVX-512 IFMA), summed unreduced in vector registers (its docstring).
* ``sketch_rows(rk, leaves, r, r2, chunks, keys, out)`` (only where :data:`IFMA`):
  ``sketch_leaves`` of ``keys`` consecutive runs of leaves with the same coefficients under one
  schedule, each run's sums to its own slot (a device's short keys, one row a key).
* ``key_expand(key, out)``: the AES-128 key schedule of a 16-byte key (any key: the fixed keys'
  :func:`round_keys` and the sketch's per-device keys).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import llvmlite
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from secemb.fss._kernel_cache import load_numba_registries
from secemb.fss.kernels import host_cpu_features
from secemb.fss.prg import fixed_key

if TYPE_CHECKING:
    from numba.core.typing.templates import Signature

__all__ = ["BLOCKS", "LANES", "round_keys", "expand8", "expand8_rows", "halftree16", "halftree16_rows",
           "mmo_blocks", "mmo_ctr", "aes_ctr", "KEY_GROUP", "SUM_BITS", "SUM_VECTORS", "sum_keys1", "sum_keys4", "IFMA",
           "SKETCH_CHUNKS", "sketch_leaves", "sketch_rows", "key_expand", "walk_keys", "BGI_PARENTS",
           "HALFTREE_PARENTS"]

#: blocks encrypted per intrinsic call of :func:`mmo_blocks` / :func:`mmo_ctr`
BLOCKS = 16
#: parents of a group of :func:`expand8` (16 AES blocks) and of :func:`halftree16` (16 blocks)
BGI_PARENTS, HALFTREE_PARENTS = 8, 16

load_numba_registries()  # numba's registries without scipy.linalg (also at any kernel's first load: _kernel_cache)

_VAES = bool(host_cpu_features().get("vaes")) and bool(host_cpu_features().get("avx2"))
#: whether :func:`sketch_leaves` can run here: VAES and AVX-512 IFMA on 256-bit vectors (AVX-512 VL)
IFMA = _VAES and bool(host_cpu_features().get("avx512ifma")) and bool(host_cpu_features().get("avx512vl"))
#: blocks per vector register: 2 with VAES, else 1
LANES = 2 if _VAES else 1
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_VEC = ir.VectorType(_I64, 2 * LANES)
_V2 = ir.VectorType(_I64, 2)
_SUFFIX = ".256" if _VAES else ""


def _const(v: int) -> ir.Constant:
    return ir.Constant(_I64, v)


def _vptr(builder: ir.IRBuilder, addr: ir.Value) -> ir.Value:
    return builder.inttoptr(addr, _VEC.as_pointer())


def _load(builder: ir.IRBuilder, ptr: ir.Value, i: int) -> ir.Value:
    """Vector ``i`` (``W`` blocks) at ``ptr``."""
    return builder.load(builder.gep(ptr, [_const(i)]), align=1)


def _store(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value, i: int) -> None:
    builder.store(value, builder.gep(ptr, [_const(i)]), align=1)


def _schedule(builder: ir.IRBuilder, addr: ir.Value) -> list[ir.Value]:
    ptr = _vptr(builder, addr)
    return [_load(builder, ptr, r) for r in range(11)]


def _encrypt(builder: ir.IRBuilder, jobs: list[tuple[list[ir.Value], ir.Value]],
             last_keys: list[ir.Value] | None = None) -> list[ir.Value]:
    """AES-128 of every ``(schedule, vector)`` job, rounds interleaved across jobs; the last
    round's key is the schedule's, or job ``i``'s ``last_keys[i]`` (which ``AESENCLAST`` XORs in
    last: an XOR into the result folded into the key)."""
    fnty = ir.FunctionType(_VEC, [_VEC, _VEC])
    enc = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.aesni.aesenc" + _SUFFIX)
    last = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.aesni.aesenclast" + _SUFFIX)
    out = [builder.xor(b, rks[0]) for rks, b in jobs]
    for r in range(1, 10):
        out = [builder.call(enc, [b, rks[r]]) for (rks, _), b in zip(jobs, out, strict=True)]
    keys = last_keys or [rks[10] for rks, _ in jobs]
    return [builder.call(last, [b, k]) for k, b in zip(keys, out, strict=True)]


def _shuffle(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, idx: list[int]) -> ir.Value:
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, len(idx)), idx))


def _sig(nargs: int) -> Signature:
    return types.void(*([types.uintp] * nargs))


def _word(builder: ir.IRBuilder, addr: ir.Value, offset: int) -> ir.Value:
    """The block (2 words) at ``addr + offset``."""
    return builder.load(builder.inttoptr(builder.add(addr, _const(offset)), _V2.as_pointer()), align=1)


def _run(builder: ir.IRBuilder, count: ir.Value, body: Callable[[ir.Value], None]) -> None:
    """``body(g)`` for ``g`` in ``range(count)``, a loop of the IR (nothing where ``count <= 0``):
    what ``body`` reads outside it (the round keys) is loaded once, before the loop."""
    pre = builder.block
    loop, done = builder.append_basic_block("run_loop"), builder.append_basic_block("run_done")
    builder.cbranch(builder.icmp_signed(">", count, _const(0)), loop, done)
    builder.position_at_end(loop)
    g = builder.phi(_I64)
    g.add_incoming(_const(0), pre)
    body(g)
    nxt = builder.add(g, _const(1))
    g.add_incoming(nxt, builder.block)
    builder.cbranch(builder.icmp_signed("<", nxt, count), loop, done)
    builder.position_at_end(done)


def _level(parents: int, per_parent: bool, schedules: int,
           corrections: Callable[[ir.IRBuilder, ir.Value], list[ir.Value]],
           group: Callable[..., None]):  # noqa: ANN202 - a codegen callback
    """The codegen of a level intrinsic ``(rk, x, cw, out, groups)``: ``group(builder, scheds, xp,
    cws, op)`` emits one group of ``parents`` parents at ``xp`` (children to ``op``) under the
    ``schedules`` consecutive schedules at ``rk`` (``scheds``, loaded once, before the loop),
    ``cws(j)`` parent ``j``'s corrections as ``corrections(builder, address)`` returns them -- one
    row's at ``cw`` (loaded before the loop too) or, ``per_parent``, each parent's at its address
    in the int64 array at ``cw``; ``groups`` groups one after the other."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        rk, xp, cw, op, count = args
        scheds = [_schedule(builder, builder.add(rk, _const(c * 11 * 16 * LANES))) for c in range(schedules)]
        row = None if per_parent else corrections(builder, cw)
        ptr = builder.inttoptr(cw, _I64.as_pointer())

        def body(g: ir.Value) -> None:
            first = builder.mul(g, _const(parents))

            def cws(j: int) -> list[ir.Value]:
                if row is not None:
                    return row
                at = builder.load(builder.gep(ptr, [builder.add(first, _const(j))]), align=8)
                return corrections(builder, at)

            group(builder, scheds, builder.add(xp, builder.mul(first, _const(16))), cws,
                  builder.add(op, builder.mul(first, _const(32))))

        _run(builder, count, body)

    return codegen


def _opaque(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """``value`` (an int64 or a vector) through an empty inline assembly: the same bits, no
    instruction, but LLVM cannot see where they come from, so it cannot rewrite how they are made
    (e.g. take a word out of another load and spread it with a shuffle, where a broadcast load
    costs no vector port)."""
    return builder.asm(ir.FunctionType(value.type, [value.type]), "", "=r,0" if value.type == _I64 else "=v,0",
                       [value], False)


def _t_set(builder: ir.IRBuilder, addr: ir.Value) -> ir.Value:
    """Per lane of a vector: whether the control bit of the block at ``addr`` (bit 0 of its first
    word) is set -- the word broadcast from memory (``addr`` and the broadcast opaque,
    :func:`_opaque`: one load and one test, no shuffle)."""
    w = builder.load(builder.inttoptr(addr, _I64.as_pointer()), align=8)
    undef = ir.Constant(_VEC, ir.Undefined)
    splat = _shuffle(builder, builder.insert_element(undef, w, ir.Constant(_I32, 0)), undef, [0] * (2 * LANES))
    return builder.icmp_unsigned("!=", builder.and_(_opaque(builder, splat), ir.Constant(_VEC, [1] * (2 * LANES))),
                                 ir.Constant(_VEC, None))


def _bgi_corrections(builder: ir.IRBuilder, addr: ir.Value) -> list[ir.Value]:
    """A row's corrections ``cw_L``, ``cw_R`` at ``addr`` as the vectors of a BGI level: one, ``[cw_L |
    cw_R]``, with VAES (the lanes of :func:`walk_keys`' pair schedule), else two."""
    if LANES == 2:
        return [builder.load(_vptr(builder, addr), align=1)]
    return [_word(builder, addr, 0), _word(builder, addr, 16)]


def _bgi_group(builder: ir.IRBuilder, scheds: list[list[ir.Value]], xp: ir.Value,
               cws: Callable[[int], list[ir.Value]], op: ir.Value) -> None:
    """:data:`BGI_PARENTS` parents at ``xp``: parent ``j``'s children ``AES_c(x) ^ x ^ (t ? cw_c : 0)``
    to ``op + 32 j`` (left, right).  With VAES a vector ``[x | x]`` under the pair schedule (both
    children in one vector, in their order: no shuffle), else ``x`` under each schedule.  The MMO's
    ``^ x`` and the correction are folded into the last round's key (``AESENCLAST`` ends with the
    key's XOR): ``x ^ (t ? rk_10 ^ cw : rk_10)``, a select of two keys hoisted out of the loop."""
    tp = _opaque(builder, xp)  # the control bits' loads not merged into the blocks' (:func:`_t_set`)
    jobs, keys = [], []
    for j in range(BGI_PARENTS):
        x = _word(builder, xp, 16 * j)
        xv = _shuffle(builder, x, x, [0, 1] * LANES)
        t = _t_set(builder, builder.add(tp, _const(16 * j)))
        for rks, cw in zip(scheds, cws(j), strict=True):
            jobs.append((rks, xv))
            keys.append(builder.xor(xv, builder.select(t, builder.xor(rks[10], cw), rks[10])))
    out = _vptr(builder, op)
    for i, y in enumerate(_encrypt(builder, jobs, keys)):
        _store(builder, y, out, i)


def _sigma(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``sigma(w0, w1) = (w0 ^ w1, w0)`` per block: a linear orthomorphism (GKWY20)."""
    zero = ir.Constant(_VEC, None)
    dup_lo = _shuffle(builder, x, x, [i & ~1 for i in range(2 * LANES)])  # (w0, w0)
    hi_lo = _shuffle(builder, x, zero, [k for i in range(LANES) for k in (2 * i + 1, 2 * LANES)])  # (w1, 0)
    return builder.xor(dup_lo, hi_lo)


def _halftree_corrections(builder: ir.IRBuilder, addr: ir.Value) -> list[ir.Value]:
    """A row's correction ``CW`` (one block at ``addr``)."""
    return [_word(builder, addr, 0)]


def _t_masks(builder: ir.IRBuilder, xs: list[ir.Value]) -> list[ir.Value]:
    """All ones in both words of a block whose control bit (bit 0 of word 0) is set."""
    one = ir.Constant(_VEC, [1, 0] * LANES)
    zero = ir.Constant(_VEC, None)
    masks = []
    for v in xs:
        t = builder.and_(v, one)
        masks.append(builder.sub(zero, _shuffle(builder, t, t, [i & ~1 for i in range(2 * LANES)])))
    return masks


def _halftree_group(builder: ir.IRBuilder, scheds: list[list[ir.Value]], xp: ir.Value,
                    cws: Callable[[int], list[ir.Value]], op: ir.Value) -> None:
    """:data:`HALFTREE_PARENTS` parents at ``xp``, ``W`` a vector: ``out[2j] = H(x_j) ^ (t_j ? CW : 0)``,
    ``out[2j + 1] = out[2j] ^ x_j`` to ``op``; ``sigma(x)`` and the masked correction folded into the
    last round's key."""
    rks = scheds[0]
    xptr, out = _vptr(builder, xp), _vptr(builder, op)
    xs = [_load(builder, xptr, v) for v in range(HALFTREE_PARENTS // LANES)]
    sig_x = [_sigma(builder, x) for x in xs]
    keys = []
    for v, mask in enumerate(_t_masks(builder, xs)):
        words = [cws(LANES * v + i)[0] for i in range(LANES)]
        cw = words[0] if LANES == 1 else _shuffle(builder, words[0], words[1], [0, 1, 2, 3])
        keys.append(builder.xor(builder.xor(sig_x[v], builder.and_(mask, cw)), rks[10]))
    for v, lv in enumerate(_encrypt(builder, [(rks, sx) for sx in sig_x], keys)):
        _store_children(builder, out, v, lv, builder.xor(lv, xs[v]))


def _store_children(builder: ir.IRBuilder, op: ir.Value, v: int, lv: ir.Value, rv: ir.Value) -> None:
    """Vector ``v``'s left and right children, interleaved (``out[2j], out[2j + 1]``)."""
    if LANES == 1:
        _store(builder, lv, op, 2 * v)
        _store(builder, rv, op, 2 * v + 1)
    else:  # [L0 L1], [R0 R1] -> [L0 R0], [L1 R1]
        _store(builder, _shuffle(builder, lv, rv, [0, 1, 4, 5]), op, 2 * v)
        _store(builder, _shuffle(builder, lv, rv, [2, 3, 6, 7]), op, 2 * v + 1)


@intrinsic
def expand8(typingctx, rk, x, cw, out, groups):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """BGI children of ``8 groups`` parents of one row (see the module docstring)."""
    return _sig(5), _level(BGI_PARENTS, False, 2 // LANES, _bgi_corrections, _bgi_group)


@intrinsic
def expand8_rows(typingctx, rk, x, cws, out, groups):  # noqa: ANN001, ANN201
    """BGI children of ``8 groups`` parents with per-parent corrections (see the module docstring)."""
    return _sig(5), _level(BGI_PARENTS, True, 2 // LANES, _bgi_corrections, _bgi_group)


@intrinsic
def halftree16(typingctx, rk, x, cw, out, groups):  # noqa: ANN001, ANN201
    """Half-Tree children of ``16 groups`` parents of one row (see the module docstring)."""
    return _sig(5), _level(HALFTREE_PARENTS, False, 1, _halftree_corrections, _halftree_group)


@intrinsic
def halftree16_rows(typingctx, rk, x, cws, out, groups):  # noqa: ANN001, ANN201
    """Half-Tree children of ``16 groups`` parents with per-parent corrections."""
    return _sig(5), _level(HALFTREE_PARENTS, True, 1, _halftree_corrections, _halftree_group)


@intrinsic
def mmo_blocks(typingctx, rk, src, dst):  # noqa: ANN001, ANN201
    """``dst[i] = AES(src[i]) ^ src[i]`` for :data:`BLOCKS` blocks."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        rks = _schedule(builder, args[0])
        sp, dp = _vptr(builder, args[1]), _vptr(builder, args[2])
        xs = [_load(builder, sp, v) for v in range(BLOCKS // LANES)]
        for v, y in enumerate(_encrypt(builder, [(rks, x) for x in xs])):
            _store(builder, builder.xor(y, xs[v]), dp, v)

    return _sig(3), codegen


@intrinsic
def mmo_ctr(typingctx, rk, word, j0, dst):  # noqa: ANN001, ANN201
    """``dst[i] = MMO(word ^ (0, j0 + i))`` for ``i < BLOCKS``; ``j0`` a multiple of ``BLOCKS``
    (so ``j0 + i = j0 ^ i``)."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        rks = _schedule(builder, args[0])
        w = builder.load(builder.inttoptr(args[1], ir.VectorType(_I64, 2).as_pointer()), align=1)
        w = _shuffle(builder, w, w, [0, 1] * LANES)
        j0 = builder.insert_element(ir.Constant(_VEC, None), args[2], ir.Constant(_I32, 1))
        j0 = _shuffle(builder, j0, j0, [0, 1] * LANES)
        base = builder.xor(w, j0)
        xs = []
        for v in range(BLOCKS // LANES):
            ctr = ir.Constant(_VEC, [x for i in range(LANES) for x in (0, v * LANES + i)])
            xs.append(builder.xor(base, ctr))
        dp = _vptr(builder, args[3])
        for v, y in enumerate(_encrypt(builder, [(rks, x) for x in xs])):
            _store(builder, builder.xor(y, xs[v]), dp, v)

    return _sig(4), codegen


@intrinsic
def aes_ctr(typingctx, rk, j0, dst):  # noqa: ANN001, ANN201
    """``dst[i] = AES(j0 + i)`` for ``i < BLOCKS``: the AES-128 keystream blocks of the 128-bit
    big-endian counter blocks ``j0 + i`` (``j0 + BLOCKS <= 2^64``: their high 64 bits are 0), CTR
    mode's (NIST SP 800-38A) from counter block ``j0``, under the schedule ``rk`` (:func:`key_expand`)."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        rks = _schedule(builder, args[0])
        bswap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I64]), "llvm.bswap.i64")
        xs = []
        for v in range(BLOCKS // LANES):  # a block's bytes 8..15: its counter, big-endian; bytes 0..7 zero
            x = ir.Constant(_VEC, None)
            for lane in range(LANES):
                j = builder.call(bswap, [builder.add(args[1], _const(v * LANES + lane))])
                x = builder.insert_element(x, j, ir.Constant(_I32, 2 * lane + 1))
            xs.append(x)
        dp = _vptr(builder, args[2])
        for v, y in enumerate(_encrypt(builder, [(rks, x) for x in xs])):
            _store(builder, y, dp, v)

    return _sig(3), codegen


#: bits of the vectors :func:`sum_keys1` / :func:`sum_keys4` add: 512 where the CPU has AVX-512
#: (32 vector registers), else 256 (AVX2, 16; LLVM splits them where there is no AVX2)
SUM_BITS = 512 if host_cpu_features().get("avx512f") else 256


def _most_vectors(bits: int) -> int:
    """The most vectors of each value one ``sum_keys`` call of ``bits``-bit vectors adds: four keys'
    sums held in registers across the positions, with room for the loaded values and their sum
    (6 x 4 of AVX-512's 32 registers; 2 x 4 of 16 otherwise)."""
    return 6 if bits == 512 else 2


#: the most vectors of each value one ``sum_keys`` call adds here (:func:`_most_vectors`)
SUM_VECTORS = _most_vectors(SUM_BITS)
#: keys :func:`sum_keys4` sums at once (staged position by position)
KEY_GROUP = 4


def _sum_keys(size: int, vector_bits: int = SUM_BITS):  # noqa: ANN202 - an intrinsic factory
    """The ``sum_keys`` intrinsic (module docstring) for ``size`` keys staged position by position,
    in vectors of ``vector_bits`` (this host's :data:`SUM_BITS`; the other width for tests): one
    loop a vector count ``1..``:func:`_most_vectors`, picked by a switch on ``vectors`` (other
    counts: nothing done), each keeping its keys' sums in registers (phis) across the positions;
    the last vector's loads and stores masked to its first ``lanes`` lanes (``llvm.masked.load`` /
    ``llvm.masked.store``: nothing past the value is read or written)."""
    most = _most_vectors(vector_bits)

    def sum_keys(typingctx, vals, vstride, acc, astride, rows, keys, count, per, vectors, lanes, store, sample):  # noqa: ANN001, ANN202, PLR0913
        def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
            bits = sig.args[11].bitwidth
            nl = vector_bits // bits
            vec = ir.VectorType(ir.IntType(bits), nl)
            pty = vec.as_pointer()
            vals_p, vstride_v, acc_p, astride_v, rows_p, keys_p, count_v, per_v, vectors_v, lanes_v, store_v = args[:11]
            zero = ir.Constant(vec, None)  # the sums start at zero and are added at the end: key_acc may alias acc
            # the last vector's mask: lane l kept where l < lanes
            lane = builder.trunc(lanes_v, vec.element) if bits < 64 else lanes_v
            undef = ir.Constant(vec, ir.Undefined)
            splat = builder.shuffle_vector(builder.insert_element(undef, lane, _const(0)), undef,
                                           ir.Constant(ir.VectorType(_I32, nl), [0] * nl))
            mask = builder.icmp_unsigned("<", ir.Constant(vec, list(range(nl))), splat)
            mty, al = mask.type, ir.Constant(_I32, 1)
            # a pointer argument's mangling: ".p0" for LLVM's opaque pointers, ".p0v<n>i<b>" where llvmlite's IR
            # layer prints typed ones (LLVM 15 and later remangle the latter)
            typed = getattr(llvmlite, "ir_layer_typed_pointers_enabled", True)  # llvmlite < 0.44: typed only
            suffix = f"v{nl}i{bits}.p0" + (f"v{nl}i{bits}" if typed else "")
            mload = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [pty, _I32, mty, vec]),
                                                   "llvm.masked.load." + suffix)
            mstore = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [vec, pty, _I32, mty]), "llvm.masked.store." + suffix)

            def load(ptr: ir.Value, k: int, last: bool) -> ir.Value:
                at = builder.gep(ptr, [_const(k)])
                return builder.call(mload, [at, al, mask, zero]) if last else builder.load(at, align=1)

            def put(value: ir.Value, ptr: ir.Value, k: int, last: bool) -> None:
                at = builder.gep(ptr, [_const(k)])
                if last:
                    builder.call(mstore, [value, at, al, mask])
                else:
                    builder.store(value, at, align=1)

            kaddr = builder.inttoptr(keys_p, _I64.as_pointer())
            kptr = [builder.inttoptr(builder.load(builder.gep(kaddr, [_const(j)]), align=8), pty) for j in range(size)]
            rptr = builder.inttoptr(rows_p, _I64.as_pointer())
            setting = builder.icmp_signed("!=", store_v, _const(0))
            exit_ = builder.append_basic_block("sum_keys_exit")
            switch = builder.switch(vectors_v, exit_)
            for nv in range(1, most + 1):
                case = builder.append_basic_block(f"sum_keys_{nv}")
                switch.add_case(_const(nv), case)
                builder.position_at_end(case)
                loop = builder.append_basic_block(f"sum_keys_{nv}_loop")
                done = builder.append_basic_block(f"sum_keys_{nv}_done")
                builder.cbranch(builder.icmp_signed(">", count_v, _const(0)), loop, done)
                builder.position_at_end(loop)
                i = builder.phi(_I64)
                i.add_incoming(_const(0), case)
                k_sum = [[builder.phi(vec) for _ in range(nv)] for _ in range(size)]
                for j in range(size):
                    for k in range(nv):
                        k_sum[j][k].add_incoming(zero, case)
                q0 = builder.mul(i, per_v)
                row = builder.load(builder.gep(rptr, [q0]), align=8)
                ap = builder.inttoptr(builder.add(acc_p, builder.mul(row, astride_v)), pty)
                vps = [builder.inttoptr(builder.add(vals_p, builder.mul(builder.add(q0, _const(j)), vstride_v)), pty)
                       for j in range(size)]
                k_out: list[list[ir.Value]] = [[] for _ in range(size)]
                for k in range(nv):
                    last = k == nv - 1
                    xs = [load(vp, k, last) for vp in vps]
                    total = xs[0]
                    for x in xs[1:]:
                        total = builder.add(total, x)
                    put(builder.add(load(ap, k, last), total), ap, k, last)
                    for j in range(size):
                        k_out[j].append(builder.add(k_sum[j][k], xs[j]))
                nxt = builder.add(i, _const(1))
                end = builder.block
                i.add_incoming(nxt, end)
                for j in range(size):
                    for k in range(nv):
                        k_sum[j][k].add_incoming(k_out[j][k], end)
                builder.cbranch(builder.icmp_signed("<", nxt, count_v), loop, done)
                builder.position_at_end(done)
                final = [[builder.phi(vec) for _ in range(nv)] for _ in range(size)]  # phis first in their block
                for j in range(size):
                    for k in range(nv):
                        final[j][k].add_incoming(zero, case)
                        final[j][k].add_incoming(k_out[j][k], end)
                set_ = builder.append_basic_block(f"sum_keys_{nv}_set")
                add = builder.append_basic_block(f"sum_keys_{nv}_add")
                builder.cbranch(setting, set_, add)
                builder.position_at_end(set_)
                for j in range(size):
                    for k in range(nv):
                        put(final[j][k], kptr[j], k, k == nv - 1)
                builder.branch(exit_)
                builder.position_at_end(add)
                for j in range(size):
                    for k in range(nv):
                        put(builder.add(load(kptr[j], k, k == nv - 1), final[j][k]), kptr[j], k, k == nv - 1)
                builder.branch(exit_)
            builder.position_at_end(exit_)

        return types.void(*([types.int64] * 11), sample), codegen

    sum_keys.__name__ = sum_keys.__qualname__ = f"sum_keys{size}_{vector_bits}"  # distinct symbols for each
    sum_keys.__doc__ = f"``sum_keys`` (module docstring) for {size} key(s) staged position by position."
    return intrinsic(sum_keys)


sum_keys1 = _sum_keys(1)
sum_keys4 = _sum_keys(KEY_GROUP)


#: chunks of :data:`BLOCKS` leaves one :func:`sketch_leaves` call may take (its sums stay below 2^64)
SKETCH_CHUNKS = 64
_P = (1 << 61) - 1
_M52 = (1 << 52) - 1


def _madd52(builder: ir.IRBuilder, half: str, acc: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    """``acc +`` the low (``half = "l"``) or high (``"h"``) 52 bits of the 104-bit product of
    ``a``'s and ``b``'s low 52 bits, per 64-bit lane: ``vpmadd52luq`` / ``vpmadd52huq``."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3),
                                        f"llvm.x86.avx512.vpmadd52{half}.uq.256")
    return builder.call(fn, [acc, a, b])


def _splat(v: int) -> ir.Constant:
    return ir.Constant(_VEC, [v] * 4)


def _lane_sums(builder: ir.IRBuilder, vs: list[ir.Value]) -> ir.Value:
    """Four vectors' lane sums ``[sum vs[0], ..., sum vs[3]]`` as one vector (wrapping mod ``2^64``)."""
    pairs = [builder.add(_shuffle(builder, a, b, [0, 4, 2, 6]), _shuffle(builder, a, b, [1, 5, 3, 7]))
             for a, b in ((vs[0], vs[1]), (vs[2], vs[3]))]
    return builder.add(_shuffle(builder, pairs[0], pairs[1], [0, 1, 4, 5]),
                       _shuffle(builder, pairs[0], pairs[1], [2, 3, 6, 7]))


def _times_pow2(builder: ir.IRBuilder, x: ir.Value, k: int) -> ir.Value:
    """A value below ``2^61 + 2^(k + 3)`` congruent to ``x 2^k`` mod ``p`` per lane, for any
    ``x`` (``2^61 = 1``): ``((x << k) & p) + (x >> (61 - k))``; ``k = 0`` folds ``x``."""
    low = builder.and_(builder.shl(x, _splat(k)), _splat(_P)) if k else builder.and_(x, _splat(_P))
    return builder.add(low, builder.lshr(x, _splat(61 - k)))


def _canonical(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``x mod p`` in ``[0, p)`` per lane for ``x`` below ``2 p``: ``min(x, x - p)`` unsigned."""
    y = builder.sub(x, _splat(_P))
    return builder.select(builder.icmp_unsigned("<", x, y), x, y)


def _sketch_sums(builder: ir.IRBuilder, rks: list[ir.Value], masks: list[ir.Value], lp0: ir.Value, rp0: ir.Value,
                 r2p0: ir.Value, count: ir.Value) -> ir.Value:
    """:func:`sketch_leaves`' loop over ``count`` chunks of leaves at ``lp0`` with coefficients at
    ``rp0``, ``r2p0`` under the loaded schedule ``rks`` and lane ``masks``: its sums ``[A, B, C, 0]``
    mod ``p`` in ``[0, p)`` as a vector (the builder left after the loop)."""
    zero = ir.Constant(_VEC, None)
    pre = builder.block
    loop, done = builder.append_basic_block("sketch_loop"), builder.append_basic_block("sketch_done")
    builder.branch(loop)
    builder.position_at_end(loop)
    i = builder.phi(_I64)
    i.add_incoming(_const(0), pre)
    # two sets of (A_0, A_52, A_104, B_0, B_52, B_104), then C_0, C_52
    accs = [builder.phi(_VEC) for _ in range(14)]
    for acc in accs:
        acc.add_incoming(zero, pre)
    lp = _vptr(builder, builder.add(lp0, builder.mul(i, _const(16 * BLOCKS))))
    cps = [_vptr(builder, builder.add(c, builder.mul(i, _const(8 * BLOCKS)))) for c in (rp0, r2p0)]
    xs = [_load(builder, lp, v) for v in range(BLOCKS // LANES)]
    ys = [builder.xor(y, x) for y, x in zip(_encrypt(builder, [(rks, x) for x in xs]), xs, strict=True)]
    new: list[ir.Value] = list(accs)
    for g in range(BLOCKS // 4):
        lo = _shuffle(builder, ys[2 * g], ys[2 * g + 1], [0, 2, 4, 6])
        hi = _shuffle(builder, ys[2 * g], ys[2 * g + 1], [1, 3, 5, 7])
        mid = builder.or_(builder.shl(hi, _splat(3)), builder.lshr(lo, _splat(61)))
        z = builder.add(builder.add(builder.lshr(hi, _splat(58)), builder.and_(mid, _splat(_P))),
                        builder.and_(lo, _splat(_P)))
        z = builder.and_(z, masks[g])
        z1 = builder.lshr(z, _splat(52))
        for k, cp in ((6 * (g % 2), cps[0]), (6 * (g % 2) + 3, cps[1])):
            a = _load(builder, cp, g)
            a1 = builder.lshr(a, _splat(52))
            new[k] = _madd52(builder, "l", new[k], a, z)
            new[k + 1] = _madd52(builder, "h", new[k + 1], a, z)
            new[k + 1] = _madd52(builder, "l", new[k + 1], a, z1)
            new[k + 1] = _madd52(builder, "l", new[k + 1], a1, z)
            new[k + 2] = _madd52(builder, "h", new[k + 2], a, z1)
            new[k + 2] = _madd52(builder, "h", new[k + 2], a1, z)
            new[k + 2] = _madd52(builder, "l", new[k + 2], a1, z1)
        new[12] = builder.add(new[12], builder.and_(z, _splat(_M52)))
        new[13] = builder.add(new[13], z1)
    nxt = builder.add(i, _const(1))
    end = builder.block
    i.add_incoming(nxt, end)
    for acc, v in zip(accs, new, strict=True):
        acc.add_incoming(v, end)
    builder.cbranch(builder.icmp_signed("<", nxt, count), loop, done)
    builder.position_at_end(done)
    a0, a52, a104, b0, b52, b104 = (builder.add(new[k], new[k + 6]) for k in range(6))
    w0 = _lane_sums(builder, [a0, b0, new[12], zero])  # [A_0, B_0, C_0, 0], exact
    w52 = _lane_sums(builder, [a52, b52, new[13], zero])
    w104 = _lane_sums(builder, [a104, b104, zero, zero])
    t = builder.add(builder.add(_times_pow2(builder, w0, 0), _times_pow2(builder, w52, 52)),
                    _times_pow2(builder, w104, 43))  # below 3 2^61 + 2^56
    return _canonical(builder, _times_pow2(builder, t, 0))


@intrinsic
def sketch_leaves(typingctx, rk, leaves, r, r2, mask, chunks, out):  # noqa: ANN001, ANN201, PLR0913
    """The sketch of ``chunks`` (1 to :data:`SKETCH_CHUNKS`) times :data:`BLOCKS` leaf words
    ``w_j`` at ``leaves`` (uint64 (chunks B, 2)) with coefficients ``r[j]``, ``r2[j]`` (uint64
    (chunks B,) below ``2^61``) and lane masks ``mask`` (uint64 (B,), all ones or zero, the same
    for every chunk: leaf ``j`` counts where ``mask[j mod B]`` is set), under the AES schedule
    ``rk`` (11, 4) (VAES layout; only where :data:`IFMA`): writes to ``out`` (uint64 (4,))
    ``[sum_j r[j] z_j, sum_j r2[j] z_j, sum_j z_j, 0]`` mod ``p = 2^61 - 1`` in ``[0, p)``, with
    ``z_j`` the keyed MMO block ``AES(w_j) ^ w_j`` read as ``hi 2^64 + lo`` and folded below
    ``2^62 + 2^6`` (congruent mod ``p``: ``(hi >> 58) + ((hi << 3 | lo >> 61) & p) + (lo & p)``),
    zero where masked.

    Four leaves a 256-bit vector: the AES blocks two a vector, their words gathered into a
    ``lo`` and a ``hi`` vector.  With 52-bit limbs ``z = z0 + 2^52 z1`` (``z1 <= 2^10``) and
    ``r = a0 + 2^52 a1`` (``a1 < 2^9``), a product is seven IFMA multiply-adds into three
    accumulators by weight ``2^0, 2^52, 2^104`` (``a0 z0`` both halves, ``a0 z1`` and ``a1 z0``
    both halves, ``a1 z1`` its low half), unreduced: each leaf adds below ``3 2^52`` to an
    accumulator (``2^52``'s), so :data:`SKETCH_CHUNKS` chunks (1,024 leaves) stay below
    ``2^64``.  Alternate groups of four leaves go to two sets of accumulators (shorter chains
    of dependent multiply-adds); at the end the sets are added, the lanes summed, the weights
    applied as rotations (``2^104 = 2^43 mod p``) and the sums reduced, in vector registers."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        masks = [_load(builder, _vptr(builder, args[4]), g) for g in range(BLOCKS // 4)]
        sums = _sketch_sums(builder, _schedule(builder, args[0]), masks, args[1], args[2], args[3], args[5])
        _store(builder, sums, _vptr(builder, args[6]), 0)

    return types.void(*([types.uintp] * 5), types.int64, types.uintp), codegen


@intrinsic
def sketch_rows(typingctx, rk, leaves, r, r2, chunks, keys, out):  # noqa: ANN001, ANN201, PLR0913
    """:func:`sketch_leaves` of ``keys`` runs of ``chunks`` (1 to :data:`SKETCH_CHUNKS`) times
    :data:`BLOCKS` leaves each, one after another at ``leaves`` (uint64 (keys chunks B, 2)), every
    run with the same coefficients ``r``, ``r2`` (uint64 (chunks B,)), no lane masked, under one
    schedule ``rk`` (only where :data:`IFMA`): run ``j``'s sums ``[A, B, C, 0]`` mod ``p`` to
    ``out[4 j : 4 j + 4]`` (uint64 (4 keys,)).  The keys of one device whose leaves fill whole rows
    of a walk's group (a short key: its positions all in one row) in one call, the schedule loaded
    once."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        rks = _schedule(builder, args[0])
        every = [_splat((1 << 64) - 1)] * (BLOCKS // 4)
        chunks = args[4]

        def run(j: ir.Value) -> None:
            lp = builder.add(args[1], builder.mul(j, builder.mul(chunks, _const(16 * BLOCKS))))
            sums = _sketch_sums(builder, rks, every, lp, args[2], args[3], chunks)
            builder.store(sums, builder.gep(_vptr(builder, args[6]), [j]), align=1)

        _run(builder, args[5], run)

    return types.void(*([types.uintp] * 4), types.int64, types.int64, types.uintp), codegen


@intrinsic
def key_expand(typingctx, key, out):  # noqa: ANN001, ANN201
    """AES-128 key schedule of the 16-byte ``key`` into 11 round keys, each stored ``W`` times."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        v2 = ir.VectorType(_I64, 2)
        v4 = ir.VectorType(_I32, 4)
        assist = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(v2, [v2, ir.IntType(8)]), "llvm.x86.aesni.aeskeygenassist"
        )
        k = builder.load(builder.inttoptr(args[0], v2.as_pointer()), align=1)
        op = builder.inttoptr(args[1], v2.as_pointer())
        zero = ir.Constant(v4, None)
        for r, rcon in enumerate((0, 1, 2, 4, 8, 16, 32, 64, 128, 27, 54)):
            if r:
                t = builder.bitcast(builder.call(assist, [k, ir.Constant(ir.IntType(8), rcon)]), v4)
                t = _shuffle(builder, t, t, [3, 3, 3, 3])
                k4 = builder.bitcast(k, v4)
                for _ in range(3):  # k ^= k << 32 bits (byte shift by 4), three times
                    k4 = builder.xor(k4, _shuffle(builder, zero, k4, [0, 4, 5, 6]))
                k = builder.bitcast(builder.xor(k4, t), v2)
            for lane in range(LANES):
                builder.store(k, builder.gep(op, [_const(r * LANES + lane)]), align=1)

    return _sig(2), codegen


@njit(cache=True, nogil=True)
def _schedule_of(key: np.ndarray, out: np.ndarray) -> None:
    key_expand(key.ctypes.data, out.ctypes.data)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter


@cache
def round_keys(*names: str) -> np.ndarray:
    """Round keys of the fixed keys ``names``: uint64 ``(len(names), 11, 2W)``, read-only."""
    out = np.empty((len(names), 11, 2 * LANES), np.uint64)
    for i, name in enumerate(names):
        _schedule_of(np.frombuffer(fixed_key(name), np.uint64).copy(), out[i])
    out.flags.writeable = False
    return out


@cache
def walk_keys(left: str, right: str) -> np.ndarray:
    """The round keys :func:`expand8` reads for the BGI children ``left`` and ``right``: with VAES
    one pair schedule uint64 (1, 11, 4), round ``r`` of ``left`` in the low 128-bit lane and of
    ``right`` in the high one (a vector ``[x | x]`` encrypts to both children); else
    :func:`round_keys` ``(left, right)`` (2, 11, 2).  Read-only."""
    rk = round_keys(left, right)
    if LANES == 1:
        return rk
    out = np.concatenate([rk[0, :, :2], rk[1, :, :2]], axis=1)[None]
    out.flags.writeable = False
    return out
