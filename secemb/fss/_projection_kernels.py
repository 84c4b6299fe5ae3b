"""The compiled loops of :func:`secemb.fss.projections.project_each` and
:func:`secemb.fss.projections.project_affine` (hazmat, numba).

A seed's packed AES-CTR stream (:mod:`secemb.fss.projections` specifies the layout, two bits an
entry) is expanded once into an int8 matrix of its ternary entries (:func:`expand_rows`: 650 KB
for 40 rows of 16,251 entries, which stays in a core's L2 cache), and every device of the seed is
projected on it, :data:`TILE` devices a pass (:func:`ternary_products`; :func:`affine_vector`
forms a device's vector from its affine parts first): a plain dot product in the ring's own
unsigned words, each entry sign-extended to the word (-1 becomes ``2^k - 1``), which wraps modulo
``2^k``; on a uint32 ring, eight lanes a 256-bit vector.  The loop this replaced (until session
23) read the packed bits again for every device, one device a pass, in uint64 words.

On a uint32 ring with AVX2 (:data:`SIGNS`), :func:`sign_products` gives the same words with no
multiply: the product of a word by an entry -1, 0 or +1 is AVX2's ``vpsignd`` of the word by the
entry (negate, zero or keep, one instruction for eight words), and :data:`SIGN_ROWS` rows are taken
a pass, so each vector of a device's words is loaded once for all of them.  :func:`ternary_products`
is bound by the multiply (``vpmulld``, 16 of them a pass of 32 entries and four devices) and by the
loads of the devices' words, read again for every row: for 20 devices of 16,251 entries and 40 rows
it takes 0.80 ms, ``vpsignd`` one row a pass 0.67, two rows a pass 0.40 (session 27, under load).
Four rows a pass (where AVX-512's 32 vector registers hold the 16 sums) read the words half as often
again: 460 -> 421 us alone, and the bench's two bound-check calls 0.24-0.27 ms less a round (session 29,
under load).

Where the CPU has AMX (AMX-TILE, AMX-INT8) and Linux grants the process its tile state (:func:`tiles`:
asked once, by the first :class:`Products` of the process, never at import; a permission of the whole
process, which also makes its signal frames larger),
:class:`Products` takes :func:`tile_products` instead, on either ring: the products as tile matrix
products.  A device's words are split into their ``P`` byte planes (``P = 4`` on a uint32 ring, 8 on a
uint64 one; :func:`word_planes`: one byte shuffle a four words), ``x = sum_p 2^(8 p) x_p`` with ``x_p``
the bytes ``p``; AMX's ``tdpbsud`` multiplies int8 by uint8 and adds in int32, so each plane's sums
``S_p = t x_p``, at most ``255 L`` in magnitude, are exact (``L <= 2^23``: :data:`TILE_LENGTH`), and
``sum_p 2^(8 p) S_p mod 2^k`` is the product in the ring.  One ``tdpbsud`` is 16 x 16 x 64 products (16
rows, 16 planes: four uint32 devices, 64 entries); a pass takes 48 rows and four devices (two on a
uint64 ring), three tiles of the rows' entries (stored a step's 64 entries of 48 rows at a time,
:func:`expand_steps`, so that a tile is 1 KiB in order) and one of the planes a step of 64 entries.
For 20 devices of 16,251 uint32 words and 40 rows on one seed (a cuckoo batch's challenge), expansion and
products together against :func:`expand_rows` and :func:`sign_products` (4 rows a pass), on the same
inputs, in 10 interleaved pairs (session 32, a ``/tmp`` script, 2 shared cores, load 5): medians 585 -> 197
us of thread CPU time (2.96x), 556 -> 220 us of wall time (2.51x); on a uint64 ring (:func:`ternary_products`
before) 4.26 -> 0.69 ms of thread CPU time (6.1x).  Alone (best of 7, thread CPU, load 7-10): the
expansion 32 us (63 with a table, as :func:`expand_rows`), the planes 64, the tile products and their
combination about 110.  In the bench's own flow (robust's rounds, tiles on and off in alternate rounds,
load 5), :func:`~secemb.fss.projections.project_affine` took 1.03 -> 0.81 ms of thread CPU time (medians
of 29 and 31 calls), the check's calls ``bound_answer`` 2.00 -> 1.80 ms and ``bound_rejected`` 1.94 ->
1.69: what is left of the projections is mostly :func:`affine_vector`, whose inputs (130 KB a device) come
from memory (12-15 us a device cold against 3.7 warm), and Python (about 0.1 ms a call of 20 devices).
A tile product takes 15-45 ns here, where AMX's throughput of one in 16 cycles would be 7; perhaps the
steps wait on the loads of tiles that the last step's products still read, but no other use of the 8 tile
registers tried (2 x 2 tiles of sums, 1 x 2 double-buffered) was reliably faster under load.  Not tried:
AVX-512's masked adds on bit planes of the entries, which two ports of 512-bit work bound at 16 terms a
cycle, by this arithmetic 1.33 times ``vpsignd``'s 12.

Session 33 (helper V; thread CPU, interleaved pairs, 2 shared cores at load 6-13) split a 20-device call in the
bench's flow (medians a call, the pieces timed inside it): project_affine 0.89-0.96 ms, the five tile_products
0.28-0.30 (planes included), the 20 affine_vector 0.27-0.31, the stream's AES 0.08-0.09, its expansion 0.06-0.07,
the checks of parts and seeds 0.06, the rest Python.  Tried, none reliably faster, none kept: a step of the tile
loop takes 100-165 ns whichever way the 8 tiles are used (3 x 1 as here; 2 x 2, 27-52 ns a product against
32-55 but for 32 rows only, so 40 rows need a second pass; 1 x 3; 3 x 1 with the B tile double-buffered, 150
against 97; the third tile of rows and of sums 8 rows high), with its tiles in L1 or L2 alike, so fewer passes
over ``t`` would not pay; software prefetch of the next devices' parts spread over the tile loop (16-32 lines a
step, to L1, L2 or L3: 1.01-1.15x slower) or 1-16 KiB ahead in :func:`affine_vector` (within noise); the byte
planes formed straight from the affine parts, no vector scratch (a device a call: 1.07-1.3x slower; a pass of
four devices a call, branch ``V-planes``: project_affine's median pair ratios 1.15, 1.08 and 0.99 in three runs
of the bench's flow, 1.03-1.06 alone); four blocks of planes a shuffle in :func:`word_planes` (0.79x on a
group's warm vectors); each thread keeping its :class:`Products` between calls (1.00x in the flow, where
``keeping_round_heap`` already spares the page faults).  What is left is bound by this machine's AMX issue rate
and by the parts' 2.6 MB read from L3 (about 10 GB/s here).

Session 35 (helper B): the row stream by AES-NI (:func:`ctr_streams`), a pass of devices formed and projected in
one compiled call (:func:`affine_tile_products`, :func:`affine_vectors`: ``literal_unroll`` over the pass's
parts, which may differ in layout) and the Python steps of a call made before its first kernel.  Python that
runs after a call's passes runs from cold caches: alone (a ``/tmp`` script, thread CPU, load 8) the range
proof's query draw took 16 us repeated, 65 after a 20-device projection, 151 after a pass over 32 MB; in the
bench's flow a server's verifier messages took 400 us right after its projections and 260 when computed again
at once.  So the bound check's servers prepare their verifier before projecting
(:func:`secemb.fss.rangeproof.prepare_verifier`).  Measured alone, the tile products of a call's five passes
took 433 us with the parts streamed just before and 330 run again at once (load 9): the passes' memory traffic
evicts part of the expanded rows from L2 too, a cost left here.

Session 36 (helper B3, thread CPU, medians, 2 shared cores at load 3.4-5.8; scripts in the session's notes): in the
bench's flow a pass of four devices took 121 us (:func:`affine_tile_products`), of which :func:`affine_vectors`
alone took 82 us on the parts as the flow leaves them and 28 run again at once (the parts' 520 KB read from L3 or
memory, about 6 GB/s); on warm inputs :func:`word_planes` 23 us and the tile loop 42 (:func:`tile_products` 66
less the planes).  The tile loop's step (four tile loads, three ``tdpbsud``) took 160-280 ns whatever the length:
168 at 1,024 steps, 160 at 254 and 278 at 16, where the 16 steps' rows (48 KB) stay in L1 or L2 -- which suggests
the loop is not bound by where ``t`` lies, so that reading ``t`` once a call for all passes (for which the 8 tile
registers cannot hold the sums: 3 of rows times 5 of devices) would gain little.

Where the CPU has AVX-512 VNNI and no AMX (:data:`DOTS`), :class:`Products` takes :func:`dot_products` (session 42):
the same byte planes, in the same layout (a step of four entries is one 64-byte row of 16 columns, four uint32
devices or two uint64 ones), and the rows in :func:`expand_rows`' layout; ``vpdpbusd`` multiplies a step's 64
plane bytes by the row's four entries, broadcast to every column, and adds each column's four products into its
int32 sum: one instruction a row a step, where :func:`sign_products` takes a ``vpsignd`` and an add for eight
words of one device.  For 20 devices of 16,251 uint32 words and 40 rows on this AMD EPYC (Zen 5;
/work/notes/s42/vnni/proto.py, thread CPU, medians of 30, load 0.5-1): 173-183 us (the planes 52 of it) against
``vpsignd``'s 267-279.
Forming the planes with 512-bit shuffles, four steps a load, took the same 52 us: it is bound by the words' and
planes' traffic, not by its shuffles.  In the bench's flow (100 devices a round, both servers, thread CPU, load 5)
a round's passes took 2.1 ms to form the vectors from their cold parts (0.8 run again at once), 1.0 their planes
and 1.3 the dot products; forming the planes straight from the affine parts, a slot at a time through a small
stage (no vector scratch), took 3.9 ms a round against 3.2 (16 alternating rounds): not kept, as on AMX (session
33's ``V-planes``).
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import literal_unroll, njit, types
from numba.extending import intrinsic, overload

from secemb.fss._aesni import BLOCKS, LANES, aes_ctr, key_expand
from secemb.fss.kernels import host_cpu_features


def _word(like, value):  # noqa: ANN001, ANN202
    """``value`` (an integer) as the unsigned word type of the array ``like``'s elements (uint32
    or uint64), sign-extended: a compile-time choice (the overload below); never called from Python."""
    raise NotImplementedError("_word is a numba intrinsic")


@overload(_word)
def _word_overload(like, value):  # noqa: ANN001, ANN202
    if like.dtype == types.uint32:
        return lambda like, value: np.uint32(value)
    return lambda like, value: np.uint64(value)


def _rings_agree(x, out, sums):  # noqa: ANN001, ANN202
    """Whether ring ``x`` (uint32 or uint64) and ``out`` share a dtype and ``sums`` is int32: the plane
    kernels' arrays (finding S42-S1: an ``out`` of another dtype got unreduced words, a ``sums`` of another
    4-byte dtype was read as its own); a compile-time answer (the overload below), never called from Python."""
    raise NotImplementedError("_rings_agree is a numba intrinsic")


@overload(_rings_agree)
def _rings_agree_overload(x, out, sums):  # noqa: ANN001, ANN202
    agree = x.dtype in (types.uint32, types.uint64) and out.dtype == x.dtype and sums.dtype == types.int32
    return lambda x, out, sums: agree


@njit(inline="always")
def _devices_within(x, at, out, to):  # noqa: ANN001, ANN202
    """Whether every device ``at[m]`` is a row of ``x`` and every ``to[m]`` a row of ``out``: the plane kernels
    check them all before their first pass, which reads and writes by address (finding S42-S2: ``at`` was
    checked pass by pass, after earlier passes had written their rows of ``out``)."""
    for m in range(at.size):
        if not (0 <= at[m] < x.shape[0] and 0 <= to[m] < out.shape[0]):
            return False
    return True


def _entry_words() -> np.ndarray:
    """uint32 (256,): word ``v`` holds the four int8 entries of a stream byte ``v`` (entry ``q``:
    ``a - b``, ``a = (v >> 2 q) & 1``, ``b = (v >> (2 q + 1)) & 1``) as the bytes it is made of,
    entry ``q`` at byte ``q`` in memory (native byte order, so writing the word writes the four
    entries in order)."""
    v = np.arange(256)
    entries = np.stack([((v >> (2 * q)) & 1) - ((v >> (2 * q + 1)) & 1) for q in range(4)], axis=1)
    return np.ascontiguousarray(entries, np.int8).view(np.uint32)[:, 0].copy()


#: the four ternary entries of each stream byte, as one word (:func:`_entry_words`)
ENTRY_WORDS = _entry_words()


@njit(cache=True, nogil=True)
def expand_rows(stream: np.ndarray, s: int, t: np.ndarray,
                entry_words: np.ndarray) -> None:  # pragma: no cover - compiled
    """``t[i, 4 k + q] = a - b`` with ``v = stream[s, i B + k]``, ``a = (v >> 2 q) & 1``,
    ``b = (v >> (2 q + 1)) & 1``: the ternary rows of stream ``s`` of the streams uint8
    (c, >= rows B), into int8 ``t`` (rows, 4 B), C-contiguous, ``B = ceil(L / 4)`` bytes a row (a
    row's last ``4 B - L`` entries are the stream's unused bits, which no product reads).  A byte's
    four entries are written as one word of ``entry_words`` (pass :data:`ENTRY_WORDS`; an argument,
    since numba's reads of a global array here were 4 times slower): a quarter of the stores of an
    entry at a time and no bit arithmetic, about 3 times faster at 40 rows of 16,251 entries."""
    words = t.view(np.uint32)  # (rows, B): word k of row i is entries 4 k .. 4 k + 3
    per_row = words.shape[1]
    for i in range(words.shape[0]):
        at = i * per_row
        for k in range(per_row):
            words[i, k] = entry_words[stream[s, at + k]]


#: bytes of a pass of :func:`ctr_streams`: the :data:`~secemb.fss._aesni.BLOCKS` blocks of one ``aes_ctr``
CTR_BYTES = 16 * BLOCKS


@njit(cache=True, nogil=True)
def ctr_streams(keys: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Row ``i`` of ``out`` (uint8 (k, W), ``W`` a multiple of :data:`CTR_BYTES`, each row contiguous) set to
    the first ``W`` bytes of the AES-128-CTR stream under the key ``keys[i]`` (uint8 (k, 16), each row
    contiguous) from counter block 0, block ``j`` the encryption of the 128-bit big-endian ``j``: the row
    stream of :mod:`secemb.fss.projections` (which :func:`secemb.fss.projections._streams` asks OpenSSL for
    without the kernels).  The key schedule by ``aeskeygenassist``, :data:`CTR_BYTES` bytes a pass
    (:func:`~secemb.fss._aesni.aes_ctr`), no counter blocks read from memory; the blocks are stored by
    address, so the shapes are checked first.  In the bench's flow (session 35, helper B, one run, rounds
    alternating, load 6) a server's :func:`~secemb.fss.projections.project_affine` of 20 devices took
    891 us of thread CPU (median) with this stream and no grouping of one seed's devices against 1031 with
    OpenSSL's ECB (whose ``Cipher`` objects alone took about 43 us a call there) and the grouping."""
    if (keys.shape[0] != out.shape[0] or keys.shape[1] != 16 or out.shape[1] % CTR_BYTES
            or (out.size and (keys.strides[1] != 1 or out.strides[1] != 1))):
        raise ValueError("ctr_streams: keys must be uint8 (k, 16) and out uint8 (k, a multiple of CTR_BYTES), "
                         "each row contiguous")
    schedule = np.empty((11, 2 * LANES), np.uint64)
    for i in range(keys.shape[0] if out.size else 0):
        key_expand(keys.ctypes.data + i * keys.strides[0], schedule.ctypes.data)  # type: ignore[call-arg]  # numba's stub
        row = out.ctypes.data + i * out.strides[0]
        for j in range(0, out.shape[1] // 16, BLOCKS):
            aes_ctr(schedule.ctypes.data, j, row + 16 * j)


#: devices a pass of :func:`ternary_products` projects together: each entry is read and widened once for
#: all of them (four accumulators; one device a pass was twice as slow, eight no faster than four)
TILE = 4


@njit(cache=True, nogil=True)
def ternary_products(t: np.ndarray, x: np.ndarray, at: np.ndarray, out: np.ndarray,
                     to: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[to[m]] = t x[at[m]] mod 2^k`` for each ``m``: int8 ``t`` (rows, >= L) (:func:`expand_rows`),
    ring ``x`` (n, L) and ``out`` (n', rows) of the same dtype, uint32 or uint64 (the words wrap
    modulo ``2^k``), ``at`` and ``to`` intp of one length, each entry a row of ``x`` and of ``out``
    (the other rows of ``out`` untouched).  :data:`TILE` devices a pass; a last pass with fewer
    repeats its last device."""
    zero = _word(x, 0)
    last = at.size - 1
    for m in range(0, at.size, TILE):
        k0, k1, k2, k3 = at[m], at[min(m + 1, last)], at[min(m + 2, last)], at[min(m + 3, last)]
        x0, x1, x2, x3 = x[k0], x[k1], x[k2], x[k3]
        for i in range(t.shape[0]):
            a0 = a1 = a2 = a3 = zero
            for j in range(x.shape[1]):
                e = _word(x, t[i, j])
                a0 += x0[j] * e
                a1 += x1[j] * e
                a2 += x2[j] * e
                a3 += x3[j] * e
            out[to[m], i] = a0
            out[to[min(m + 1, last)], i] = a1
            out[to[min(m + 2, last)], i] = a2
            out[to[min(m + 3, last)], i] = a3


#: whether :func:`sign_products` can run here: AVX2's ``vpsignd`` (a uint32 ring only)
SIGNS = bool(host_cpu_features().get("avx2"))
#: rows a pass of :func:`_sign_sums`: four where AVX-512 gives 32 vector registers (the 16 sums of four rows
#: and four devices stay in them), else two (8 sums: AVX2's 16 registers)
SIGN_ROWS = 4 if host_cpu_features().get("avx512vl") else 2
#: entries a pass of :func:`_sign_sums`' loop: two vectors of eight
SIGN_BLOCK = 16
_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_V8I8, _V8I32 = ir.VectorType(_I8, 8), ir.VectorType(_I32, 8)


def _summing_loop(builder: ir.IRBuilder, count: ir.Value, vector: ir.VectorType, n: int,
                  body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
    """Emit ``for step in range(count)`` (``count`` an i64) over ``n`` accumulators of type ``vector``, each from
    zero: ``body(step, accs)`` emits one step in the loop's block and returns the new accumulators (it adds no
    block).  Returns the final sums, zero where ``count <= 0``, in the block after the loop (where the builder
    is left).  The loop of :func:`_sign_sums` and :func:`_dot_sums`."""
    zero = ir.Constant(vector, None)
    start = builder.block
    loop, done = builder.append_basic_block("sums.loop"), builder.append_basic_block("sums.done")
    builder.cbranch(builder.icmp_signed(">", count, ir.Constant(_I64, 0)), loop, done)
    builder.position_at_end(loop)
    step = builder.phi(_I64)
    accs = [builder.phi(vector) for _ in range(n)]
    sums = body(step, accs)
    following = builder.add(step, ir.Constant(_I64, 1))
    step.add_incoming(ir.Constant(_I64, 0), start)
    step.add_incoming(following, loop)
    for acc, got in zip(accs, sums, strict=True):
        acc.add_incoming(zero, start)
        acc.add_incoming(got, loop)
    builder.cbranch(builder.icmp_signed("<", following, count), loop, done)
    builder.position_at_end(done)
    finals = []
    for got in sums:  # a block's phi nodes come first
        final = builder.phi(vector)
        final.add_incoming(zero, start)
        final.add_incoming(got, loop)
        finals.append(final)
    return finals


@intrinsic
def _sign_sums(typingctx, rows, words, blocks):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """The ``4 SIGN_ROWS`` sums ``sum_j t_r[j] x_d[j] mod 2^32`` over the first ``16 blocks`` entries of
    :data:`SIGN_ROWS` ternary rows ``t_r`` (int8 -1/0/+1; ``rows``: a UniTuple of four addresses, of
    which the first :data:`SIGN_ROWS` are read) and four devices' words ``x_d`` (uint32; ``words``: a
    UniTuple of their four addresses), each contiguous: a UniTuple of uint32, row ``r`` device ``d`` at
    ``4 r + d``.  A product is ``vpsignd(x, t)`` (``t`` sign-extended to the word): ``x``, ``0`` or
    ``-x`` as ``t`` is positive, zero or negative."""
    sig = types.UniTuple(types.uint32, 4 * SIGN_ROWS)(rows, words, blocks)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        psign = builder.module.declare_intrinsic("llvm.x86.avx2.psign.d",
                                                 fnty=ir.FunctionType(_V8I32, [_V8I32, _V8I32]))
        total = builder.module.declare_intrinsic("llvm.vector.reduce.add.v8i32", fnty=ir.FunctionType(_I32, [_V8I32]))
        tps = [builder.inttoptr(builder.extract_value(args[0], r), _V8I8.as_pointer()) for r in range(SIGN_ROWS)]
        xps = [builder.inttoptr(builder.extract_value(args[1], d), _V8I32.as_pointer()) for d in range(4)]

        def step(block: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            sums = list(accs)
            for u in range(SIGN_BLOCK // 8):
                at = builder.add(builder.mul(block, ir.Constant(_I64, SIGN_BLOCK // 8)), ir.Constant(_I64, u))
                entries = [builder.sext(builder.load(builder.gep(tp, [at]), align=1), _V8I32) for tp in tps]
                for d, xp in enumerate(xps):
                    x = builder.load(builder.gep(xp, [at]), align=4)
                    for r, e in enumerate(entries):
                        sums[4 * r + d] = builder.add(sums[4 * r + d], builder.call(psign, [x, e]))
            return sums

        finals = _summing_loop(builder, args[2], _V8I32, 4 * SIGN_ROWS, step)
        return context.make_tuple(builder, sig.return_type, [builder.call(total, [f]) for f in finals])

    return sig, codegen


@njit(cache=True, nogil=True)
def sign_products(t: np.ndarray, x: np.ndarray, at: np.ndarray, out: np.ndarray,
                  to: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`ternary_products` for a uint32 ring with AVX2 (:data:`SIGNS`; the caller checks): the
    same contract and the same words, ``t`` and ``x`` C-contiguous.  :data:`TILE` devices and
    :data:`SIGN_ROWS` rows a pass (a last pass with fewer repeats its last row), the first multiple of
    :data:`SIGN_BLOCK` entries through :func:`_sign_sums`, the rest in this loop."""
    if t.strides[1] != 1 or x.strides[1] != 4 or t.strides[0] < t.shape[1] or x.strides[0] < 4 * x.shape[1]:
        raise ValueError("sign_products reads rows of t and x as contiguous words")
    rows, length = t.shape[0], x.shape[1]
    blocks = length // SIGN_BLOCK
    last = at.size - 1
    for m in range(0, at.size, TILE):
        ks = (at[m], at[min(m + 1, last)], at[min(m + 2, last)], at[min(m + 3, last)])
        dests = (to[m], to[min(m + 1, last)], to[min(m + 2, last)], to[min(m + 3, last)])
        words = (x[ks[0]].ctypes.data, x[ks[1]].ctypes.data, x[ks[2]].ctypes.data, x[ks[3]].ctypes.data)
        for i in range(0, rows, SIGN_ROWS):
            pick = (i, min(i + 1, rows - 1), min(i + 2, rows - 1), min(i + 3, rows - 1))  # the first SIGN_ROWS read
            entries = (t[pick[0]].ctypes.data, t[pick[1]].ctypes.data, t[pick[2]].ctypes.data, t[pick[3]].ctypes.data)
            sums: tuple[int, ...] = _sign_sums(entries, words, blocks)  # type: ignore[call-arg]  # numba's stub keeps typingctx
            for r in range(SIGN_ROWS):
                row = pick[r]
                for d in range(TILE):
                    acc = sums[4 * r + d]
                    xd = x[ks[d]]
                    for j in range(blocks * SIGN_BLOCK, length):
                        acc += xd[j] * np.uint32(t[row, j])
                    out[dests[d], row] = acc


def products_for(dtype: np.dtype) -> Callable[..., None]:
    """The products kernel of a ring ``dtype``: :func:`sign_products` on a uint32 ring where AVX2
    is there (:data:`SIGNS`), else :func:`ternary_products`; the same contract and words."""
    return sign_products if SIGNS and dtype == np.uint32 else ternary_products


@njit(cache=True, nogil=True)
def affine_vector(base: np.ndarray, count: np.ndarray, words: np.ndarray, negate: bool, tail: np.ndarray,
                  xs: np.ndarray) -> None:  # pragma: no cover - compiled
    """``xs = ((-1)^negate (base + count[:, None] words)).ravel() || tail`` in the ring (modulo
    ``2^k``): ring ``base`` and ``words`` (S, w), integer ``count`` (S,), ring ``tail`` (P,), ring
    ``xs`` (S w + P,) of the same dtype, uint32 or uint64 (overwritten).  The affine part is
    written through a (S, w) view of ``xs``: indexed flat (``a w + e``, a signed sum numba wraps
    around), the stores were compiled as scatters, about 3 times slower (8.8 against 3.0 us a
    device of 250 x 65 uint32 words).  Refuses (``ValueError``) arrays whose shapes do not match each
    other and ``xs`` (numba checks no index: a caller that skips the parts' check in Python,
    :func:`~secemb.fss.projections.project_own_affine`, reads nothing outside them)."""
    slots, width = base.shape
    if (words.shape[0] != slots or words.shape[1] != width or count.shape[0] != slots
            or slots * width + tail.shape[0] != xs.shape[0]):
        raise ValueError("affine_vector: base, count, words and tail do not make a vector of xs's length")
    zero = _word(xs, 0)
    sparse = xs[: slots * width].reshape(slots, width)
    for a in range(slots):
        c = _word(xs, count[a])
        for e in range(width):
            v = base[a, e] + c * words[a, e]
            sparse[a, e] = zero - v if negate else v
    dense = xs[slots * width :]
    for p in range(tail.shape[0]):
        dense[p] = tail[p]


@njit(cache=True, nogil=True)
def affine_vectors(parts: tuple, real: int, negate: bool, xs: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`affine_vector` of each of the first ``real`` devices of ``parts`` (a tuple of
    :attr:`Products.group` devices' ``(base, count, words, tail)``, as
    :func:`~secemb.fss.projections.project_affine` takes them; a short group's tail repeats a device, not
    read) into row ``k`` of ``xs`` (ring (>= real, S w + P)): one call a pass of the products' devices,
    not one a device (``literal_unroll``: a device's arrays may differ in layout or writability from
    another's)."""
    k = 0
    for part in literal_unroll(parts):
        if k < real:
            affine_vector(part[0], part[1], part[2], negate, part[3], xs[k])
        k += 1


@njit(cache=True, nogil=True)
def affine_tile_products(parts: tuple, real: int, negate: bool, xs: np.ndarray, t: np.ndarray, rows: int,
                         out: np.ndarray, to: np.ndarray, planes: np.ndarray, sums: np.ndarray,
                         config: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`affine_vectors` of a pass's devices into ``xs``, then :func:`tile_products` of them
    (``out[to[k]] = t xs[k]``, ``k < real``; its arguments' contract): one call a pass."""
    affine_vectors(parts, real, negate, xs)
    tile_products(t, rows, xs, np.arange(real), out, to, planes, sums, config)


@njit(cache=True, nogil=True)
def affine_dot_products(parts: tuple, real: int, negate: bool, xs: np.ndarray, t: np.ndarray, rows: int,
                        out: np.ndarray, to: np.ndarray, planes: np.ndarray,
                        sums: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`affine_vectors` of a pass's devices into ``xs``, then :func:`dot_products` of them (its
    arguments' contract): one call a pass, as :func:`affine_tile_products`."""
    affine_vectors(parts, real, negate, xs)
    dot_products(t, rows, xs, np.arange(real), out, to, planes, sums)


# --- AMX: the products as tile matrix products ---------------------------------------------------------------

#: Linux x86-64's ``arch_prctl`` system call, its request for a permission to an extended state component
#: (``ARCH_REQ_XCOMP_PERM``) and AMX's tile data component (``XFEATURE_XTILEDATA``): ``arch_prctl(2)``,
#: the kernel's ``Documentation/arch/x86/xstate.rst``
_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18


def _tiles_permitted() -> bool:
    """Whether this process may run AMX's tile instructions: the CPU has AMX-TILE and AMX-INT8 and Linux
    grants the process the tile data state (a permission of the whole process, asked once; a kernel before
    5.16 or another system refuses it)."""
    features = host_cpu_features()
    if not (features.get("amx-tile") and features.get("amx-int8")) or sys.platform != "linux" \
            or platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0)


@functools.cache
def tiles() -> bool:
    """Whether :func:`tile_products` can run in this process (:func:`_tiles_permitted`, asked on the first
    call only: a process that never projects never asks Linux for the tile state)."""
    return _tiles_permitted()

#: a tile's rows and bytes a row, in every tile :func:`_tile_sums` configures (AMX's largest: 1 KiB)
TILE_ROWS, TILE_BYTES = 16, 64
#: projection rows a pass of :func:`_tile_sums`: three tiles of 16
TILE_COLUMNS = 3 * TILE_ROWS
#: the longest vector :func:`tile_products` takes: each of its int32 sums, at most ``255 L`` in magnitude,
#: stays exact (``255 * 2^23 < 2^31``), as the combination of the planes modulo ``2^64`` needs
TILE_LENGTH = 1 << 23
_VOID, _BYTES = ir.VoidType(), _I8.as_pointer()


def _tile_config() -> np.ndarray:
    """AMX's 64-byte tile configuration (palette 1) of :func:`_tile_sums`: tiles 0-2 the sums (16 rows of
    16 int32), tiles 3-5 the entries (16 rows of 64 int8), tile 6 the planes (16 rows of 16 x 4 uint8):
    every tile 16 rows of 64 bytes."""
    config = np.zeros(64, np.uint8)
    config[0] = 1
    config[16:30].view(np.uint16)[:] = TILE_BYTES
    config[48:55] = TILE_ROWS
    return config


#: :func:`_tile_config`
TILE_CONFIG = _tile_config()


@intrinsic
def _tile_sums(typingctx, config, entries, entry_stride, entry_step, planes, plane_stride, sums,  # noqa: ANN001, ANN201
               sum_stride, steps):
    """``C = A B`` by AMX's ``tdpbsud`` (the caller checks :func:`tiles`), in int32 (which no sum leaves if
    ``steps <= TILE_LENGTH / 64``): ``A`` (48, 64 steps) int8, its 64 columns of step ``k`` at ``entries + k
    entry_step`` (rows ``entry_stride`` bytes apart); ``B`` (64 steps, 16) uint8, ``B[4 k + q, n]`` byte ``q``
    of word ``n`` of row ``k`` of the uint32 at ``planes`` (rows ``plane_stride`` bytes apart: AMX's layout of
    a right operand); ``C`` (48, 16) int32 written at ``sums`` (rows ``sum_stride`` bytes apart); all addresses
    integers, ``config`` :data:`TILE_CONFIG`'s.  A step loads the three tiles of ``A``'s 64 columns and ``B``'s
    16 rows once and takes three ``tdpbsud`` (16 x 16 x 64 products each)."""
    sig = types.void(config, entries, entry_stride, entry_step, planes, plane_stride, sums, sum_stride, steps)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        module = builder.module
        load_config = module.declare_intrinsic("llvm.x86.ldtilecfg", fnty=ir.FunctionType(_VOID, [_BYTES]))
        load = module.declare_intrinsic("llvm.x86.tileloadd64", fnty=ir.FunctionType(_VOID, [_I8, _BYTES, _I64]))
        store = module.declare_intrinsic("llvm.x86.tilestored64", fnty=ir.FunctionType(_VOID, [_I8, _BYTES, _I64]))
        product = module.declare_intrinsic("llvm.x86.tdpbsud", fnty=ir.FunctionType(_VOID, [_I8, _I8, _I8]))
        zero = module.declare_intrinsic("llvm.x86.tilezero", fnty=ir.FunctionType(_VOID, [_I8]))
        release = module.declare_intrinsic("llvm.x86.tilerelease", fnty=ir.FunctionType(_VOID, []))
        config_at, entry_at, entry_stride, entry_step, plane_at, plane_stride, sum_at, sum_stride, steps = args
        config_at, entry_at, plane_at, sum_at = (builder.inttoptr(a, _BYTES) for a in (config_at, entry_at, plane_at,
                                                                                      sum_at))
        tile = [ir.Constant(_I8, r) for r in range(7)]
        rows = ir.Constant(_I64, TILE_ROWS)
        builder.call(load_config, [config_at])
        for c in range(3):
            builder.call(zero, [tile[c]])
        start = builder.block
        loop, done = builder.append_basic_block("tiles.loop"), builder.append_basic_block("tiles.done")
        builder.cbranch(builder.icmp_signed(">", steps, ir.Constant(_I64, 0)), loop, done)
        builder.position_at_end(loop)
        step = builder.phi(_I64)
        builder.call(load, [tile[6], builder.gep(plane_at, [builder.mul(step, builder.mul(plane_stride, rows))]),
                            plane_stride])
        columns = builder.gep(entry_at, [builder.mul(step, entry_step)])
        for c in range(3):
            at = builder.gep(columns, [builder.mul(entry_stride, ir.Constant(_I64, TILE_ROWS * c))])
            builder.call(load, [tile[3 + c], at, entry_stride])
            builder.call(product, [tile[c], tile[3 + c], tile[6]])
        following = builder.add(step, ir.Constant(_I64, 1))
        step.add_incoming(ir.Constant(_I64, 0), start)
        step.add_incoming(following, loop)
        builder.cbranch(builder.icmp_signed("<", following, steps), loop, done)
        builder.position_at_end(done)
        for c in range(3):
            at = builder.gep(sum_at, [builder.mul(sum_stride, ir.Constant(_I64, TILE_ROWS * c))])
            builder.call(store, [tile[c], at, sum_stride])
        builder.call(release, [])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _step_entries(typingctx, source, target):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """The 64 int8 entries of the 16 stream bytes at the address ``source``, written at the address ``target``:
    :data:`ENTRY_WORDS`' word of each byte computed in 16 lanes, ``a`` and ``b`` the byte's even and odd bits
    spread to the low bit of each byte of the word (``(v & 0x55) * 0x41041 & 0x01010101``: the four products'
    bits meet nowhere else) and the word ``(a ^ b) | ((b & ~a) * 0xFE)`` (1, -1 or 0 a byte)."""
    sig = types.void(source, target)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        lanes = ir.VectorType(_I32, TILE_ROWS)

        def splat(value: int) -> ir.Constant:
            return ir.Constant(lanes, [value] * TILE_ROWS)

        stream = builder.load(builder.inttoptr(args[0], ir.VectorType(_I8, TILE_ROWS).as_pointer()), align=1)
        v = builder.zext(stream, lanes)
        even = builder.and_(builder.mul(builder.and_(v, splat(0x55)), splat(0x41041)), splat(0x01010101))
        odd = builder.lshr(v, splat(1))
        odd = builder.and_(builder.mul(builder.and_(odd, splat(0x55)), splat(0x41041)), splat(0x01010101))
        minus = builder.mul(builder.and_(odd, builder.xor(even, splat(0xFFFFFFFF))), splat(0xFE))
        builder.store(builder.or_(builder.xor(even, odd), minus), builder.inttoptr(args[1], lanes.as_pointer()),
                      align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def expand_steps(stream: np.ndarray, s: int, rows: int, t: np.ndarray,
                 entry_words: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`expand_rows` into :func:`tile_products`' layout: entry ``j`` of row ``i < rows`` at ``t[j / 64, i,
    j mod 64]``, int8 ``t`` (steps, >= rows, 64), C-contiguous, ``64 steps >= 4 B``, ``B = stream.shape[1] /
    rows`` (a step's 64 entries of a tile's 16 rows are 1 KiB in order); its other entries untouched.  The
    steps are written in the order of ``t``, 16 stream bytes at a time (:func:`_step_entries`: no table), a
    last step of fewer through ``entry_words`` (pass :data:`ENTRY_WORDS`)."""
    if rows == 0:
        return
    words = t.view(np.uint32)  # word k of row i: words[k / 16, i, k mod 16], entries 4 k .. 4 k + 3
    per_row, height = stream.shape[1] // rows, t.shape[1]
    if (t.shape[2] != TILE_BYTES or height < rows or TILE_ROWS * t.shape[0] < per_row or stream.strides[1] != 1
            or t.strides[0] != TILE_BYTES * height or t.strides[1] != TILE_BYTES or t.strides[2] != 1
            or not 0 <= s < stream.shape[0]):
        raise ValueError("expand_steps: a scratch of too few rows or steps")
    whole, source = per_row // TILE_ROWS, stream.ctypes.data + s * stream.strides[0]
    for b in range(whole):
        for i in range(rows):
            _step_entries(source + i * per_row + TILE_ROWS * b,  # type: ignore[call-arg]  # numba's stub
                          t.ctypes.data + TILE_BYTES * (b * height + i))
    for i in range(rows):
        at = i * per_row
        for k in range(TILE_ROWS * whole, per_row):
            words[whole, i, k - TILE_ROWS * whole] = entry_words[stream[s, at + k]]


@intrinsic
def _plane_bytes(typingctx, like, source, target):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """The ``4 P`` bytes of four ring words (``P`` the bytes of a word of the array ``like``, 4 or 8) at the
    address ``source`` written at the address ``target`` transposed, byte ``p`` of word ``q`` to ``4 p + q``:
    one load, one shuffle (``vpshufb`` / ``vpermb``) and one store."""
    per = like.dtype.bitwidth // 8
    sig = types.void(like, source, target)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        vector = ir.VectorType(_I8, 4 * per)
        words = builder.load(builder.inttoptr(args[1], vector.as_pointer()), align=1)
        order = ir.Constant(ir.VectorType(_I32, 4 * per), [per * q + p for p in range(per) for q in range(4)])
        builder.store(builder.shuffle_vector(words, words, order), builder.inttoptr(args[2], vector.as_pointer()),
                      align=1)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def word_planes(x: np.ndarray, at: np.ndarray, planes: np.ndarray) -> None:  # pragma: no cover - compiled
    """The byte planes of the ring ``x`` (n, L)'s rows ``at`` (each contiguous) in AMX's layout of a right
    operand: ``planes[k, P m + p]`` (uint32 (>= ceil(L / 4), >= P at.size), C-contiguous; ``P`` the bytes of
    a word, 4 or 8) holds byte ``p`` of ``x[at[m], 4 k + q]`` as its byte ``q`` (a 4 x P transposition of
    the bytes of each four words: :func:`_plane_bytes`), zero where ``4 k + q >= L``, for every row ``k`` of
    ``planes``; its other columns untouched."""
    per, length = x.itemsize, x.shape[1]
    if x.strides[1] != per or planes.strides[1] != 4 or planes.strides[0] != 4 * planes.shape[1] \
            or planes.shape[0] < -(-length // 4) or planes.shape[1] < per * at.size:
        raise ValueError("word_planes: rows of x or planes of the wrong shape")
    for m in range(at.size):  # read at raw addresses: no row may leave x
        if not 0 <= at[m] < x.shape[0]:
            raise ValueError("word_planes: a device's row out of x's shape")
    whole = length // 4
    row, step, first = planes.strides[0], 4 * per, planes.ctypes.data
    for k in range(whole):
        for m in range(at.size):
            _plane_bytes(x, x.ctypes.data + at[m] * x.strides[0] + k * step,  # type: ignore[call-arg]  # numba's stub
                         first + k * row + m * step)
    bytes_in = planes.view(np.uint8)
    for k in range(whole, planes.shape[0]):
        for m in range(at.size):
            for p in range(per):
                for q in range(4):
                    j = 4 * k + q
                    bytes_in[k, step * m + 4 * p + q] = np.uint8(x[at[m], j] >> _word(x, 8 * p)) if j < length else 0


@njit(cache=True, nogil=True)
def tile_products(t: np.ndarray, rows: int, x: np.ndarray, at: np.ndarray, out: np.ndarray, to: np.ndarray,
                  planes: np.ndarray, sums: np.ndarray, config: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`ternary_products`'s ``out[to[m]] = t x[at[m]] mod 2^k`` (rows ``i < rows``) by AMX (:func:`tiles`;
    the caller checks) for ``x`` (n, L) of at most :data:`TILE_LENGTH` words, with ``t`` int8 (steps, R, 64),
    ``R`` a multiple of :data:`TILE_COLUMNS`, ``64 steps >= L``, C-contiguous (:func:`expand_steps`' rows in
    blocks of a step's 64 entries, so that a tile of 16 rows is 1 KiB read in order; its other entries any:
    they meet zero bytes or give sums no device reads), scratches ``planes`` uint32 (``16 steps``, a multiple
    of 16) and ``sums`` int32 (``R``, ``planes.shape[1]``), C-contiguous, and ``config`` :data:`TILE_CONFIG`.
    The devices go ``planes.shape[1] / P`` a pass (``P`` the bytes of a word): their byte planes
    (:func:`word_planes`), then for each :data:`TILE_COLUMNS` rows and 16 planes the int32 sums ``S_p =
    sum_j t_i[j] (x_m[j] >> 8 p & 255)`` (:func:`_tile_sums`; exact: ``|S_p| <= 255 L < 2^31``) and
    ``out[to[m], i] = sum_p 2^(8 p) S_p mod 2^k``."""
    per, width, steps, height = x.itemsize, planes.shape[1], t.shape[0], t.shape[1]
    if (height % TILE_COLUMNS or t.shape[2] != TILE_BYTES or steps * TILE_BYTES > TILE_LENGTH
            or x.shape[1] > steps * TILE_BYTES or width % TILE_ROWS or width < per
            or planes.shape[0] != TILE_ROWS * steps or rows > height or rows > out.shape[1] or sums.shape[0] != height
            or sums.shape[1] != width
            or t.strides[2] != 1 or t.strides[1] != TILE_BYTES or t.strides[0] != TILE_BYTES * height
            or planes.strides[1] != 4 or planes.strides[0] != 4 * width or sums.strides[1] != 4
            or sums.strides[0] != 4 * width or at.size != to.size):
        raise ValueError("tile_products: rows, planes or sums of the wrong shape")
    if not _rings_agree(x, out, sums):
        raise ValueError("tile_products: x and out of one ring's dtype and int32 sums only")
    if not _devices_within(x, at, out, to):  # numba checks no index: none may leave x or out
        raise ValueError("tile_products: a device's row out of x's or out's shape")
    group = width // per
    for lo in range(0, at.size, group):
        devices = min(group, at.size - lo)
        word_planes(x, at[lo : lo + devices], planes)
        for n in range(0, -(-per * devices // TILE_ROWS) * TILE_ROWS, TILE_ROWS):
            for i in range(0, height, TILE_COLUMNS):
                _tile_sums(config.ctypes.data, t.ctypes.data + i * TILE_BYTES, TILE_BYTES,  # type: ignore[call-arg]
                           TILE_BYTES * height, planes.ctypes.data + 4 * n, 4 * width,
                           sums.ctypes.data + 4 * (i * width + n), 4 * width, steps)
        plane_sums(sums, rows, per, devices, out, to[lo : lo + devices])


@njit(cache=True, nogil=True)
def plane_sums(sums: np.ndarray, rows: int, per: int, devices: int, out: np.ndarray,
               to: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[to[m], i] = sum_p 2^(8 p) sums[i, P m + p] mod 2^k`` for ``m < devices``, ``i < rows``: a pass's
    products from its planes' int32 sums ``S_p`` (``P = per`` the bytes of a word; each ``S_p`` sign-extended
    to the ring's word, so exact where ``|S_p| < 2^31``; on a uint32 ring only ``S_p mod 2^32`` matters).
    The callers check ``to`` against ``out`` and ``sums``' shape."""
    for m in range(devices):
        for i in range(rows):
            acc = _word(out, 0)
            for p in range(per):
                acc += _word(out, sums[i, per * m + p]) << _word(out, 8 * p)
            out[to[m], i] = acc


# --- AVX-512 VNNI: the products as byte dot products -----------------------------------------------------------

#: whether :func:`dot_products` can run here: AVX-512 VNNI (``vpdpbusd`` on 512-bit vectors)
DOTS = bool(host_cpu_features().get("avx512vnni"))
#: rows a pass of :func:`_dot_sums`: one 512-bit sum a row (ten of AVX-512's 32 registers); 8, 10, 20 and 40
#: rows a pass took 207-217, 173-177, 182-183 and 283-286 us for 20 devices of 16,251 words and 40 rows
#: (/work/notes/s42/vnni/proto.py, outside the repository; thread CPU, medians of 30, load 0.5-1, session 42)
DOT_ROWS = 10
_V16I32 = ir.VectorType(_I32, 16)


@intrinsic
def _dot_sums(typingctx, planes, steps, entries, entry_stride, sums):  # noqa: ANN001, ANN201
    """``sums[r, c] = sum_k sum_q t_r[4 k + q] B[k, c, q] mod 2^32`` for :data:`DOT_ROWS` rows ``r`` and the 16
    columns ``c`` of the planes: ``B`` uint8 (steps, 16, 4) at the address ``planes`` (:func:`word_planes`'
    layout, 64 bytes a step), ``t_r`` int8 at ``entries + r entry_stride`` (at least ``4 steps`` entries each),
    ``sums`` int32 (DOT_ROWS, 16) at its address, C-contiguous; all addresses integers.  A step loads the
    planes' 64 bytes once and takes one ``vpdpbusd`` a row, its four entries broadcast to every column (the
    unsigned bytes by the signed entries, four products a column summed into its int32)."""
    sig = types.void(planes, steps, entries, entry_stride, sums)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        dot = builder.module.declare_intrinsic("llvm.x86.avx512.vpdpbusd.512",
                                               fnty=ir.FunctionType(_V16I32, [_V16I32, _V16I32, _V16I32]))
        plane_at = builder.inttoptr(args[0], _V16I32.as_pointer())
        entry_at = [builder.inttoptr(builder.add(args[2], builder.mul(args[3], ir.Constant(_I64, r))),
                                     _I32.as_pointer()) for r in range(DOT_ROWS)]
        undefined, everywhere = ir.Constant(_V16I32, ir.Undefined), ir.Constant(_V16I32, [0] * 16)

        def step(at: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            plane = builder.load(builder.gep(plane_at, [at]), align=4)
            sums = []
            for acc, row in zip(accs, entry_at, strict=True):
                four = builder.insert_element(undefined, builder.load(builder.gep(row, [at]), align=1),
                                              ir.Constant(_I32, 0))
                sums.append(builder.call(dot, [acc, plane, builder.shuffle_vector(four, undefined, everywhere)]))
            return sums

        finals = _summing_loop(builder, args[1], _V16I32, DOT_ROWS, step)
        sum_at = builder.inttoptr(args[4], _V16I32.as_pointer())
        for r, final in enumerate(finals):
            builder.store(final, builder.gep(sum_at, [ir.Constant(_I64, r)]), align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def dot_products(t: np.ndarray, rows: int, x: np.ndarray, at: np.ndarray, out: np.ndarray, to: np.ndarray,
                 planes: np.ndarray, sums: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`ternary_products`' ``out[to[m]] = t x[at[m]] mod 2^k`` (rows ``i < rows``) by AVX-512 VNNI
    (:data:`DOTS`; the caller checks) for ``x`` (n, L) of at most :data:`TILE_LENGTH` words, with ``t`` int8
    (``R``, ``>= 4 ceil(L / 4)``) (:func:`expand_rows`' rows; ``R >= max(rows,`` :data:`DOT_ROWS` ``)``: a
    pass's rows past ``rows`` are read, their sums not used), C-contiguous, and scratches ``planes`` uint32
    (``>= ceil(L / 4)``, 16) and ``sums`` int32 (``R``, 16), C-contiguous.  The devices go ``16 / P`` a pass
    (``P`` the bytes of a word): their byte planes (:func:`word_planes`: zero past ``L``), then for each
    :data:`DOT_ROWS` rows the int32 sums ``S_p = sum_j t_i[j] (x_m[j] >> 8 p & 255)`` (:func:`_dot_sums`;
    exact: ``|S_p| <= 255 L < 2^31``) and :func:`plane_sums`.  The same words as :func:`tile_products`, with
    the rows in their own layout and 16 columns a pass instead of AMX's tiles."""
    per, height, steps = x.itemsize, t.shape[0], -(-x.shape[1] // 4)
    if (height < rows or height < DOT_ROWS or t.shape[1] < 4 * steps or x.shape[1] > TILE_LENGTH
            or planes.shape[0] < steps or planes.shape[1] != TILE_ROWS or sums.shape[0] != height
            or sums.shape[1] != TILE_ROWS or rows > out.shape[1] or at.size != to.size
            or t.strides[1] != 1 or t.strides[0] % 4 or planes.strides[1] != 4 or planes.strides[0] != 64
            or sums.strides[1] != 4 or sums.strides[0] != 64 or x.strides[1] != per):
        raise ValueError("dot_products: rows, planes or sums of the wrong shape")
    if not _rings_agree(x, out, sums):
        raise ValueError("dot_products: x and out of one ring's dtype and int32 sums only")
    if not _devices_within(x, at, out, to):  # numba checks no index: none may leave x or out
        raise ValueError("dot_products: a device's row out of x's or out's shape")
    group = TILE_ROWS // per
    for lo in range(0, at.size, group):
        devices = min(group, at.size - lo)
        word_planes(x, at[lo : lo + devices], planes)
        for i in range(0, rows, DOT_ROWS):
            first = min(i, height - DOT_ROWS)  # a last pass of fewer rows takes rows before it again
            _dot_sums(planes.ctypes.data, steps, t.ctypes.data + first * t.strides[0],  # type: ignore[call-arg]
                      t.strides[0], sums.ctypes.data + first * sums.strides[0])
        plane_sums(sums, rows, per, devices, out, to[lo : lo + devices])


def canonical_part(part: tuple) -> tuple:
    """A device's affine part ``(base, count, words, tail)`` (:func:`affine_vector`'s contract) in the
    layout its kernels are compiled for: every array C-contiguous, ``count`` int64; only an array in
    another layout or dtype is copied, with the same elements (a count as int64: the same word modulo
    ``2^k``).  numba compiles a kernel once for each mix of array layouts, dtypes and writability it is
    called with, and ``literal_unroll`` over a pass's devices multiplies the mixes: strided, Fortran
    and other-count views had compiled 58 signatures of :func:`affine_tile_products` in one test run (~3 s
    of CPU each, session 36).  Writability is left as it comes (a server's parts are writeable or read-only
    consistently; a read-only view costs ~2.4 us more a part by ``timeit``, and a 20-device bounded round
    has 40 parts, 20 a server)."""
    base, count, words, tail = part
    if (count.dtype == _INT64 and base.flags.c_contiguous and count.flags.c_contiguous and words.flags.c_contiguous
            and tail.flags.c_contiguous):
        return part
    return (np.ascontiguousarray(base), np.ascontiguousarray(count, np.int64), np.ascontiguousarray(words),
            np.ascontiguousarray(tail))


_INT64 = np.dtype(np.int64)


class Products:
    """The compiled products of one seed's rows at a time with its devices' vectors, with their scratch:
    :func:`tile_products` where AMX runs (:func:`tiles`) and ``L <=`` :data:`TILE_LENGTH`, else
    :func:`dot_products` where AVX-512 VNNI does (:data:`DOTS`, the same length bound), else
    :func:`products_for`'s kernel; the same words.

    ``expand(stream, s)`` expands stream ``s`` of ``rows`` ternary rows of length ``L`` (:func:`expand_steps` or
    :func:`expand_rows`);
    ``project(x, at, out, to)`` sets ``out[to[m]] = t x[at[m]] mod 2^k`` (``x`` ring (n, L) of ``dtype``,
    C-contiguous; ``at``, ``to`` intp of one length); :attr:`group` is the devices a pass, for a caller that
    forms their vectors in a scratch (:func:`affine_vector`) before it projects them."""

    def __init__(self, dtype: np.dtype, rows: int, length: int) -> None:
        self.rows, self.tiles = rows, length <= TILE_LENGTH and tiles()
        self.dots = not self.tiles and length <= TILE_LENGTH and DOTS
        if self.tiles:
            steps = max(1, -(-length // TILE_BYTES))
            self.t = np.empty((steps, -(-rows // TILE_COLUMNS) * TILE_COLUMNS, TILE_BYTES), np.int8)
            self.planes = np.empty((TILE_ROWS * steps, TILE_ROWS), np.uint32)
            self.sums = np.empty((self.t.shape[1], TILE_ROWS), np.int32)
            self.group = TILE_ROWS // np.dtype(dtype).itemsize
        elif self.dots:
            self.t = np.empty((max(rows, DOT_ROWS), 4 * -(-length // 4)), np.int8)
            self.planes = np.empty((-(-length // 4), TILE_ROWS), np.uint32)
            self.sums = np.empty((self.t.shape[0], TILE_ROWS), np.int32)
            self.group = TILE_ROWS // np.dtype(dtype).itemsize
        else:
            self.t = np.empty((rows, 4 * -(-length // 4)), np.int8)
            self.group = TILE
            self._products = products_for(dtype)

    def expand(self, stream: np.ndarray, s: int) -> None:
        """The rows of stream ``s`` of ``stream`` (uint8 (c, rows ceil(L / 4))) into the scratch."""
        if self.tiles:
            expand_steps(stream, s, self.rows, self.t, ENTRY_WORDS)
        else:
            expand_rows(stream, s, self.t[: self.rows], ENTRY_WORDS)

    def project_parts(self, parts: tuple, negate: bool, xs: np.ndarray, out: np.ndarray, to: np.ndarray) -> None:
        """``out[to[k], :rows] = t x_k mod 2^k`` on the rows last expanded, ``x_k`` the vector of the
        affine parts ``parts[k]`` (:func:`affine_vectors`; a tuple of :attr:`group` devices, of which the
        first ``to.size`` are real) formed in the scratch ``xs`` (ring (group, L)): one compiled call where
        AMX or VNNI runs (:func:`affine_tile_products`, :func:`affine_dot_products`), else two;
        :meth:`project`'s refusals.  The parts go to the kernels in one layout (:func:`canonical_part`): one
        compiled signature a ring, whatever layouts they came in."""
        parts = tuple(map(canonical_part, parts))
        if self.tiles:
            affine_tile_products(parts, to.size, negate, xs, self.t, self.rows, out, to, self.planes, self.sums,
                                 TILE_CONFIG)
            return
        if self.dots:
            affine_dot_products(parts, to.size, negate, xs, self.t, self.rows, out, to, self.planes, self.sums)
            return
        affine_vectors(parts, to.size, negate, xs)
        self.project(xs, np.arange(to.size), out, to)

    def project(self, x: np.ndarray, at: np.ndarray, out: np.ndarray, to: np.ndarray) -> None:
        """``out[to[m], :rows] = t x[at[m]] mod 2^k`` on the rows last expanded.  Both paths refuse
        (ValueError) a device index outside ``x`` or ``out``, ``at`` and ``to`` of other lengths, and
        ``x`` or ``out`` too wide or narrow for the rows (finding S32-X1: the row kernels index
        without bounds checks)."""
        if self.tiles:
            tile_products(self.t, self.rows, x, at, out, to, self.planes, self.sums, TILE_CONFIG)
            return
        if self.dots:
            dot_products(self.t, self.rows, x, at, out, to, self.planes, self.sums)
            return
        if (at.shape != to.shape or at.ndim != 1 or x.ndim != 2 or out.ndim != 2 or x.shape[1] > self.t.shape[1]
                or out.shape[1] < self.rows
                or (at.size and (int(at.min()) < 0 or int(at.max()) >= x.shape[0]
                                 or int(to.min()) < 0 or int(to.max()) >= out.shape[0]))):
            raise ValueError(f"project: device indices at {at.shape} and to {to.shape} must lie in x {x.shape} and "
                             f"out {out.shape}, x at most {self.t.shape[1]} words and out at least {self.rows} rows")
        self._products(self.t, x, at, out, to)
