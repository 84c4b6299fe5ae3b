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
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

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
        zero = ir.Constant(_V8I32, None)
        start = builder.block
        loop, done = builder.append_basic_block("signs.loop"), builder.append_basic_block("signs.done")
        builder.cbranch(builder.icmp_signed(">", args[2], ir.Constant(_I64, 0)), loop, done)
        builder.position_at_end(loop)
        block = builder.phi(_I64)
        accs = [builder.phi(_V8I32) for _ in range(4 * SIGN_ROWS)]
        sums = list(accs)
        for u in range(SIGN_BLOCK // 8):
            at = builder.add(builder.mul(block, ir.Constant(_I64, SIGN_BLOCK // 8)), ir.Constant(_I64, u))
            entries = [builder.sext(builder.load(builder.gep(tp, [at]), align=1), _V8I32) for tp in tps]
            for d, xp in enumerate(xps):
                x = builder.load(builder.gep(xp, [at]), align=4)
                for r, e in enumerate(entries):
                    sums[4 * r + d] = builder.add(sums[4 * r + d], builder.call(psign, [x, e]))
        following = builder.add(block, ir.Constant(_I64, 1))
        block.add_incoming(ir.Constant(_I64, 0), start)
        block.add_incoming(following, loop)
        for acc, got in zip(accs, sums, strict=True):
            acc.add_incoming(zero, start)
            acc.add_incoming(got, loop)
        builder.cbranch(builder.icmp_signed("<", following, args[2]), loop, done)
        builder.position_at_end(done)
        finals = []
        for got in sums:
            final = builder.phi(_V8I32)
            final.add_incoming(zero, start)
            final.add_incoming(got, loop)
            finals.append(final)
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
    device of 250 x 65 uint32 words)."""
    slots, width = base.shape
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
