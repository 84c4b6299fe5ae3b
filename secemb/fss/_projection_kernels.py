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
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload


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
