"""Conversion of leaf words into pseudorandom ring vectors (``Convert_G`` of SecEmb
Algorithms 4, 5 and 8).

Hazmat layer.  ``Convert_tag(s)`` for a leaf word ``s`` is the first ``d`` ring elements
(little-endian) of the blocks ``MMO_tag(s XOR j) = AES_tag(s XOR j) XOR s XOR j`` for
``j = 0 .. c-1`` (``j`` in the high 64 bits, ``c = ceil(d k / 128)``).  Distinct tags use
independent fixed AES keys (:func:`secemb.fss.prg.fixed_key`), so conversions of the same
leaf for different purposes are independent pseudorandom values.

Work proceeds in chunks of about 1 MiB of AES input held in reused per-thread buffers, and
callers consume each chunk in place, so large outputs are written exactly once.
:func:`convert_eval_into` (shares) and :func:`convert_accumulate` (sums of conversions over
keys, and optionally over each key's positions) are the consumers the servers run; with the compiled kernels
(:mod:`secemb.fss.kernels`) each of them is one fused pass, AES rounds inline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.prg import CHUNK_BLOCKS, aes_for

__all__ = ["ring_dtype", "convert_chunks", "convert", "convert_add", "kept_leaves", "convert_eval_into",
           "convert_accumulate"]

_ONE = np.uint64(1)
#: the rings' word dtypes (native byte order)
_RINGS = (np.dtype(np.uint32), np.dtype(np.uint64))

_tls = threading.local()


def ring_dtype(ring_bits: int) -> np.dtype:
    """uint32 for a 32-bit ring, uint64 for a 64-bit ring."""
    return np.dtype(np.uint32 if ring_bits == 32 else np.uint64)


def _scratch(blocks: int) -> tuple[np.ndarray, np.ndarray]:
    bufs = getattr(_tls, "bufs", None)
    if bufs is None or bufs[0].shape[0] < blocks:
        bufs = _tls.bufs = (np.empty((blocks, 2), np.uint64), np.empty((blocks, 2), np.uint64))
    return bufs


def convert_chunks(
    words: np.ndarray, width: int, ring_bits: int, tag: str
) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yield ``(lo, hi, values)``: ``values`` (hi - lo, width) is ``Convert_tag`` of
    ``words[lo:hi]``, a view of a scratch buffer valid until the next step.

    Parameters
    ----------
    words: uint64 (N, 2) leaf words.
    width: ``d >= 1`` ring elements per leaf.
    ring_bits: 32 or 64.
    tag: conversion domain.
    """
    dtype = ring_dtype(ring_bits)
    nb = -(-width * ring_bits // 128)
    per_block = 128 // ring_bits
    count = words.shape[0]
    step = max(1, CHUNK_BLOCKS // nb)
    inp, buf = _scratch(min(step, max(count, 1)) * nb)
    aes = aes_for("convert/" + tag)
    ctr = np.arange(nb, dtype=np.uint64)
    compiled = kernels.compiled()
    if compiled:
        from secemb.fss._aesni import round_keys
        from secemb.fss._numba_kernels import convert_blocks

        rk = round_keys(aes.name)[0]
        words = np.ascontiguousarray(words)
    for lo in range(0, count, step):
        hi = min(lo + step, count)
        c = hi - lo
        y = buf[: c * nb].reshape(c, nb, 2)
        if compiled:
            convert_blocks(words[lo:hi], nb, rk, y)
        else:
            x = inp[: c * nb].reshape(c, nb, 2)
            x[:, :, 0] = words[lo:hi, 0, None]
            np.bitwise_xor(words[lo:hi, 1, None], ctr[None, :], out=x[:, :, 1])
            aes.encrypt_into(x, y)
            np.bitwise_xor(y, x, out=y)
        yield lo, hi, y.view(dtype).reshape(c, nb * per_block)[:, :width]


def convert(words: np.ndarray, width: int, ring_bits: int, tag: str) -> np.ndarray:
    """``Convert_tag`` of every word: uint64 (..., 2) -> ring (..., width)."""
    flat = words.reshape(-1, 2)
    nb = -(-width * ring_bits // 128)
    if kernels.compiled() and flat.shape[0] * nb <= CHUNK_BLOCKS:  # one kernel call, no chunking
        from secemb.fss._aesni import round_keys
        from secemb.fss._numba_kernels import convert_blocks

        blocks = np.empty((flat.shape[0], nb, 2), np.uint64)
        convert_blocks(np.ascontiguousarray(flat), nb, round_keys("convert/" + tag)[0], blocks)
        vals = blocks.view(ring_dtype(ring_bits)).reshape(flat.shape[0], nb * 128 // ring_bits)[:, :width]
        return np.ascontiguousarray(vals).reshape(words.shape[:-1] + (width,))
    out = np.empty((flat.shape[0], width), ring_dtype(ring_bits))
    for lo, hi, vals in convert_chunks(flat, width, ring_bits, tag):
        out[lo:hi] = vals
    return out.reshape(words.shape[:-1] + (width,))


def _rows_of(arrays: Sequence[np.ndarray] | np.ndarray) -> bool:
    """Whether ``arrays`` is one array (N, ...) of at least two axes, to be taken as its rows
    (:func:`convert_add`)."""
    return isinstance(arrays, np.ndarray) and arrays.ndim >= 2


def _each(arrays: Sequence[np.ndarray] | np.ndarray, ok: Callable[[np.ndarray], bool]) -> bool:
    """Whether every array of a list passes ``ok``, or, for one array (N, ...), whether its rows
    do: its first row's verdict (the rows of one array share their dtype, size, strides and
    writeability)."""
    if isinstance(arrays, np.ndarray):
        return not len(arrays) or ok(arrays[0])
    return all(isinstance(a, np.ndarray) and ok(a) for a in arrays)


def _addresses(arrays: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
    """int64 (N,): the address of each array of a list, or of each row of one C-contiguous array
    (N, ...) (its address plus the rows' stride: no address looked up row by row)."""
    if isinstance(arrays, np.ndarray) and arrays.flags.c_contiguous:
        return arrays.ctypes.data + np.arange(len(arrays), dtype=np.int64) * arrays.strides[0]
    return np.array([a.ctypes.data for a in arrays], np.int64)


def _bounds(a: np.ndarray) -> tuple[int, int]:
    """The first byte and one past the last byte of a non-empty array's elements, in any layout
    (numpy's ``byte_bounds``, which numpy 1 and 2 keep in different modules)."""
    ends = [(n - 1) * s for n, s in zip(a.shape, a.strides, strict=True)]
    lo = a.ctypes.data + sum(e for e in ends if e < 0)
    return lo, a.ctypes.data + sum(e for e in ends if e > 0) + a.itemsize


def _spans(arrays: Sequence[np.ndarray] | np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """int64 (N,) twice: the first byte and one past the last byte of each array of a list, or of
    each row of one array (N, ...) (its first row's bounds plus the rows' stride), in any layout
    (a C-contiguous array of ``nbytes`` bytes: its address and ``nbytes`` on; the bounds of any
    other looked up one by one); and the indices of the arrays that are not C-contiguous.  The
    arrays hold at least one element."""
    if isinstance(arrays, np.ndarray):
        lo, hi = _bounds(arrays[0])
        step = np.arange(len(arrays), dtype=np.int64) * arrays.strides[0]
        return lo + step, hi + step, [] if arrays[0].flags.c_contiguous else list(range(len(arrays)))
    first = _addresses(arrays)
    end = first + nbytes
    odd = [i for i, a in enumerate(arrays) if not a.flags.c_contiguous]
    for i in odd:
        first[i], end[i] = _bounds(arrays[i])
    return first, end, odd


def _meets(starts: np.ndarray, nbytes: int, lo: np.ndarray | int, hi: np.ndarray | int) -> np.ndarray:
    """How many destinations ``[starts[j], starts[j] + nbytes)`` (``starts`` sorted) each range
    ``[lo, hi)`` shares a byte with: those starting before it ends less those ending at or before
    its start (every range non-empty).  Two binary searches."""
    return np.searchsorted(starts, hi, "left") - np.searchsorted(starts, np.subtract(lo, nbytes), "right")


def _apart(dst_at: np.ndarray, starts: np.ndarray, nbytes: int, src_lo: np.ndarray, src_hi: np.ndarray) -> bool:
    """Whether every source ``[src_lo[i], src_hi[i])`` shares no byte with any destination
    ``[dst_at[j], dst_at[j] + nbytes)`` but its own, and with its own only as exactly its bytes
    (``src[i]`` is ``dst[i]``, maybe read in another order); ``starts`` is ``dst_at`` sorted."""
    meets = _meets(starts, nbytes, src_lo, src_hi)
    return bool(np.array_equal(meets, (src_lo == dst_at) & (src_hi == dst_at + nbytes)))


def convert_add(words: np.ndarray, tag: str, dst: Sequence[np.ndarray] | np.ndarray,
                src: Sequence[np.ndarray] | np.ndarray | None = None, *,
                negate: bool = False) -> None:
    """``dst[i] = src[i] + Convert_tag(words[i])`` in the ring (``-`` with ``negate``), for every
    word: each array's ``w`` elements (in C order) and the first ``w`` ring elements of the word's
    conversion.  With the compiled kernels one pass per word adds each AES block as it is made
    (:func:`secemb.fss._numba_kernels.convert_add`): no array of the conversions is written or read
    again; the reference converts chunk by chunk (:func:`convert_chunks`) and adds.

    Parameters
    ----------
    words: uint64 (N, 2) leaf words (seeds), overlapping no destination.
    tag: conversion domain.
    dst: ``N`` writeable C-contiguous ring arrays (uint32 or uint64, one dtype, ``w`` elements
        each, any shape), overwritten; none overlapping another's memory.  Or one writeable
        C-contiguous ring array (N, ...) whose rows they are (a batch's: checked once, the rows'
        addresses computed from its own, not one array at a time).
    src: ``N`` ring arrays of ``dst``'s dtype and ``w`` elements, any layout, or one ring array
        (N, ...) whose rows they are, or ``None``: ``dst`` itself (added into in place).  Each
        ``src[i]`` overlaps no destination, or spans exactly ``dst[i]``'s bytes (``dst[i]``
        itself, or a view of it in another order: read whole before it is written) and no other.

    Raises
    ------
    InvalidParameters: arrays of other shapes, dtypes or sizes, a ``dst`` that is not writeable
        and C-contiguous (the kernel writes it at its address), or a ``src[i]`` that overlaps
        another ``dst`` or only part of ``dst[i]`` (S36-R3: the backends would read it before or
        after that is written, each its own way), judged by the arrays' first and last bytes,
        a sort and binary searches over the ``N`` ranges (a source interleaved with a destination's
        bytes counts as overlapping it), or ``words`` that overlap a destination (S40-R4: the
        kernel reads ``words[i]`` when it reaches row ``i``, numpy's path a chunk of them first).
        Nothing is written before a refusal.
    """
    # the arrays checked are the arrays whose addresses the kernel gets, held to its end: a batch
    # array's rows (checked as the array), else each array of the list
    dst = dst if _rows_of(dst) else list(dst)
    src = dst if src is None else src if _rows_of(src) else list(src)
    n = len(dst)
    dtype = dst[0].dtype if n else np.dtype(np.uint32)
    width = dst[0].size if n else 0
    if (words.shape != (n, 2) or words.dtype != np.uint64 or len(src) != n
            or dtype not in (np.dtype(np.uint32), np.dtype(np.uint64))
            or not _each(dst, lambda d: d.dtype == dtype and d.size == width and d.flags.c_contiguous
                         and d.flags.writeable)
            or not _each(src, lambda x: x.dtype == dtype and x.size == width)):
        raise InvalidParameters(f"convert_add: words uint64 ({n}, 2) and {n} writeable C-contiguous ring arrays (and "
                                f"as many sources) of one dtype and size, got words {words.dtype} {words.shape}, "
                                f"{len(src)} sources")
    if not n or not width:
        return
    nbytes = width * dtype.itemsize
    dst_at = _addresses(dst)  # C-contiguous: each destination's bytes are [dst_at, dst_at + nbytes)
    starts = np.sort(dst_at)
    if _meets(starts, nbytes, *_bounds(words)):
        # S40-R4: the kernel reads words[i] when it reaches row i, numpy's path a chunk of words first
        raise InvalidParameters("convert_add: the words must not overlap a destination")
    src_at, odd = dst_at, list[int]()
    if src is not dst:
        src_at, src_end, odd = _spans(src, nbytes)
        if not _apart(dst_at, starts, nbytes, src_at, src_end):
            # S36-R3: a source over another destination would be read before or after that destination
            # is written, as the backend happens to order it
            raise InvalidParameters("convert_add: a source must be its own destination, all of it, or overlap no "
                                    "destination")
    ring_bits = 8 * dtype.itemsize
    if kernels.compiled():
        from secemb.fss._aesni import BLOCKS, round_keys
        from secemb.fss._numba_kernels import STEP_BLOCKS, convert_add as kernel

        # a C-contiguous source is read where it is (its first byte its address), any other from a
        # C-contiguous copy, held while the kernel reads it
        copies = [np.ascontiguousarray(src[i]) for i in odd]
        if copies:
            src_at[odd] = [x.ctypes.data for x in copies]
        blocks = np.empty((STEP_BLOCKS // BLOCKS * BLOCKS, 2), np.uint64)
        kernel(np.ascontiguousarray(words), round_keys("convert/" + tag)[0], src_at, dst_at, width, bool(negate),
               blocks, blocks.reshape(-1).view(dtype))
        return
    op = np.subtract if negate else np.add
    for lo, hi, vals in convert_chunks(words, width, ring_bits, tag):
        for i in range(lo, hi):
            op(src[i].reshape(-1), vals[i - lo], out=dst[i].reshape(-1))


def _fused_scratch(nb: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Blocks of one step of the fused kernels, uint64 (S, nb, 2) with ``S nb`` about
    :data:`~secemb.fss._numba_kernels.STEP_BLOCKS`, and the same memory as ring (S, nb * 128 / k)."""
    from secemb.fss._numba_kernels import STEP_BLOCKS

    step = max(1, STEP_BLOCKS // nb)
    blocks = np.empty((step, nb, 2), np.uint64)
    return blocks, blocks.reshape(step, -1).view(dtype)


def kept_leaves(pos: int, period: int, valid: int) -> int:
    """How many of the flat positions ``[0, pos)`` of a (K, period) walk are in the domain,
    i.e. have ``pos % period < valid``."""
    return pos // period * valid + min(pos % period, valid)


def convert_eval_into(
    words: np.ndarray, cw: np.ndarray, pos0: int, period: int, party: int, tag: str, out: np.ndarray,
    valid: int | None = None, *, place: tuple[int, int, int] | None = None, bits: np.ndarray | None = None,
) -> None:
    """Shares ``(-1)^b [Convert_tag(words[i]) + t_i CW[key]]`` (SecEmb Algorithm 4) of the
    leaves at flat positions ``pos0 + i = key * period + p`` of a (K, period) walk.

    Parameters
    ----------
    words: uint64 (N, 2) leaf words, ``t_i`` = bit 0 of ``words[i, 0]``.
    cw: ring (K, d) output correction words (uint32 or uint64: the ring).
    pos0, period: flat position of ``words[0]`` and leaves per key.
    party: ``b``, 0 or 1.
    out: ring (N, d), same dtype as ``cw``, written; with ``valid``, ring (kept, d): only the
        leaves with ``p < valid`` are converted into it, one after the other (the others are
        padding; ``kept = kept_leaves(pos0 + N, ...) - kept_leaves(pos0, ...)``).
    place: ``(G, su, sg)``: write the share of key ``key``'s position ``p`` (``p < valid``) to row
        ``(key // G) su + (key % G) sg + p`` of ``out`` instead, ring (R, d) with a row for every
        position below ``valid`` of every key these words belong to, e.g. ``(B, M, U M)`` for key
        ``u B + i`` at ``[i, u, p]`` of a (B, U, M) array.
    bits: uint8 (N,), written with every word's control bit ``t_i`` (padding too), or ``None``.

    Raises
    ------
    InvalidParameters: arrays of other shapes or dtypes, a leaf whose key is not below ``K``, a
        row outside ``out``, ``pos0 < 0``, ``period < 1``, ``valid`` outside ``[0, period]`` (the
        compiled kernel indexes ``cw`` and ``out`` by them, unchecked), a read-only ``out`` or ``bits``.
    Nothing is done (nor checked) for no words.
    """
    dtype = cw.dtype
    ring_bits = 8 * dtype.itemsize
    valid = period if valid is None else valid
    n = words.shape[0]
    if n == 0:
        return
    if words.shape != (n, 2) or pos0 < 0 or period < 1 or not 0 <= valid <= period or cw.ndim != 2 or (
            (pos0 + n - 1) // period >= cw.shape[0]):
        raise InvalidParameters(f"convert_eval_into: words (N, 2) at pos0 >= 0 of a (K, period) walk, 0 <= valid <= "
                                f"period, cw (K, d); got words {words.shape}, pos0 {pos0}, period {period}, valid "
                                f"{valid}, cw {cw.shape}")
    if bits is not None and (bits.shape != (n,) or bits.dtype != np.uint8):
        raise InvalidParameters(f"convert_eval_into: bits must be uint8 ({n},), got {bits.dtype} {bits.shape}")
    width = cw.shape[1]
    if place is None:  # one after the other: key k's position p at row k valid + p - kept_leaves(pos0)
        kept = kept_leaves(pos0 + n, period, valid) - kept_leaves(pos0, period, valid)
        if out.shape != (kept, width) or out.dtype != dtype:
            raise InvalidParameters(f"convert_eval_into: out must be {dtype} ({kept}, {width}), got {out.dtype} "
                                    f"{out.shape}")
        rows = (-kept_leaves(pos0, period, valid), 1, valid, 0)
    else:
        group, by_major, by_minor = place
        if group < 1 or by_major < 0 or by_minor < 0 or out.ndim != 2 or out.shape[1] != width or out.dtype != dtype:
            raise InvalidParameters(f"convert_eval_into: place (G >= 1, su >= 0, sg >= 0) into out {dtype} (R, "
                                    f"{width}), got {place} and {out.dtype} {out.shape}")
        # the largest row of a position p < valid of a key k0..k1 of these words: (k // G) su + (k % G) sg
        # grows with k within a run of G keys, so it is at k1 or at the end of k1's run's predecessor
        k0, k1 = pos0 // period, (pos0 + n - 1) // period
        ends = [k1] + ([k1 - k1 % group - 1] if k1 - k1 % group - 1 >= k0 else [])
        top = max((k // group) * by_major + (k % group) * by_minor for k in ends) + valid - 1
        if top >= out.shape[0]:
            raise InvalidParameters(f"convert_eval_into: place {place} puts the positions below {valid} of keys "
                                    f"{k0}..{k1} up to row {top} of out, which has {out.shape[0]}")
        rows = (0, group, by_major, by_minor)
    if not out.flags.writeable or (bits is not None and not bits.flags.writeable):
        raise InvalidParameters("convert_eval_into: out and bits must be writeable")  # S37-R1: before either path
    if kernels.compiled():
        from secemb.fss._aesni import round_keys
        from secemb.fss._numba_kernels import convert_eval

        blocks, vals = _fused_scratch(-(-width * ring_bits // 128), dtype)
        rk = round_keys("convert/" + tag)[0]
        ro = kernels.read_only  # what it reads C-contiguous and read-only: one compiled signature a ring (session 37)
        convert_eval(ro(words), blocks.shape[1], rk, ro(cw), pos0, period, valid, party, out,
                     np.array(rows, np.int64), np.empty(0, np.uint8) if bits is None else bits, blocks, vals)
        return
    if bits is not None:
        np.bitwise_and(words[:, 0], _ONE, out=bits, casting="unsafe")
    for lo, hi, vals in convert_chunks(words, width, ring_bits, tag):
        pos = pos0 + np.arange(lo, hi)
        key, p = np.divmod(pos, period)
        keep = p < valid
        t = words[lo:hi, 0, None][keep] & _ONE
        part = np.add(vals[keep], (0 - t).astype(dtype) & cw[key[keep]])
        if party:
            np.negative(part, out=part)
        key, p = key[keep], p[keep]
        out[rows[0] + (key // rows[1]) * rows[2] + (key % rows[1]) * rows[3] + p] = part


def _contiguous(out: np.ndarray | None) -> np.ndarray | None:
    """``out`` itself where it is C-contiguous (or ``None``), else a C-contiguous copy of it to sum into
    (:func:`convert_accumulate` writes it back, and sums in no copy of an output that overlaps another)."""
    return out if out is None or out.flags.c_contiguous else np.ascontiguousarray(out)


def convert_accumulate(words: np.ndarray, tag: str, acc: np.ndarray | None, start: int,
                       live: np.ndarray | None = None, *, key_acc: np.ndarray | None = None,
                       period: int = 1, key_t: np.ndarray | None = None, fresh: bool = False) -> None:
    """``acc[(start + i) % M] += Convert_tag(words[i])`` in the ring, for every word: the
    servers' sum of conversions over keys (the aggregation stage's scatter); with ``key_acc``,
    also ``key_acc[(start + i) // period] += Convert_tag(words[i])`` for the same words: the
    sum of conversions over each key's positions, from the same conversions.

    Parameters
    ----------
    words: uint64 (N, 2) leaf words.
    acc: ring (M, w), updated in place (uint32 or uint64: the ring), or ``None`` for no sums
        by row (then ``key_acc`` and ``live`` are required).
    start: flat position of ``words[0]`` (row ``start % M``), ``>= 0``.
    live: bool (M,), or ``None`` for all rows: only the words of live rows are converted
        and added (the compiled kernel skips the others' AES work; rows not live are left
        as they are, and add nothing to ``key_acc``).
    key_acc: ring (K, w) of ``acc``'s dtype, or (U, G, w) (any strides: a batch's view, key ``k``
        at ``[k // G, k % G]``, ``K = U G``), updated in place, or ``None``; ``period``: positions
        per key (``>= 1``), so that every word's key ``(start + i) // period`` is below ``K``.
    key_t: with ``key_acc``, int64 of ``key_acc``'s keys' shape ((K,) or (U, G)), updated in place,
        or ``None``: each key's count of the same words' control bits ``words[i, 0] & 1``.
    fresh: the keys whose first position is among the words (``start + i`` a multiple of
        ``period``) have their ``key_acc`` values and ``key_t`` count set to these words' sums,
        not added to (keys cut at ``start`` are added to): calls that cover every key's positions
        in order sum into arrays that were not zeroed.  No effect without ``key_acc``; with it,
        ``acc``, ``key_acc`` and ``key_t`` must not overlap (a set value is no increment: the
        compiled kernel writes a key's first sums over its values).

    Raises
    ------
    InvalidParameters: arguments outside this contract -- among them an ``acc``/``key_acc`` that is
        no ring (native uint32 or uint64: the compiled kernel adds ring words into whatever it is
        given), a ``live`` that is not bool (the backends read other values differently), no
        rows (``M = 0``), or ``fresh`` sums into arrays whose memory may overlap: refused before
        anything is summed (findings S28-E2, S28-E3).
    """
    out = acc if acc is not None else key_acc
    if out is None or (acc is None and live is None) or period < 1 or start < 0 or words.ndim != 2 or (
            words.shape[1] != 2):
        raise InvalidParameters("convert_accumulate needs words (N, 2), acc or key_acc and live, period >= 1 and "
                                "start >= 0")
    if out.dtype not in _RINGS or (acc is not None and acc.ndim != 2):
        raise InvalidParameters(f"convert_accumulate sums into a ring: acc must be uint32 or uint64 (M, w) and "
                                f"key_acc of its dtype, got {out.dtype} {out.shape}")
    dtype, width = out.dtype, out.shape[-1]
    big_m = live.shape[0] if acc is None and live is not None else out.shape[0]
    ring_bits = 8 * dtype.itemsize
    if live is not None and (live.shape != (big_m,) or live.dtype != np.bool_):
        raise InvalidParameters(f"live must be bool ({big_m},), got {live.dtype} {live.shape}")
    if big_m < 1:
        raise InvalidParameters("convert_accumulate needs at least one row (M >= 1)")
    if width < 1:
        raise InvalidParameters(f"convert_accumulate needs rows of at least one word (w >= 1), got {out.shape}")
    by_key = None if key_acc is None else key_acc.reshape(1, *key_acc.shape) if key_acc.ndim == 2 else key_acc
    if by_key is not None and (
        by_key.dtype != dtype or by_key.ndim != 3 or by_key.shape[2] != width
        or (words.shape[0] > 0 and (start + words.shape[0] - 1) // period >= by_key.shape[0] * by_key.shape[1])
    ):
        raise InvalidParameters(f"key_acc must be {dtype} (K, {width}) or (U, G, {width}) with every word's key "
                                f"below K = U G, got {by_key.dtype} {by_key.shape}, period {period}")
    t_by_key = None if key_t is None else key_t.reshape(1, -1) if key_t.ndim == 1 else key_t
    if t_by_key is not None and (by_key is None or t_by_key.dtype != np.int64 or t_by_key.shape != by_key.shape[:2]):
        raise InvalidParameters(f"key_t must be int64 of key_acc's keys' shape, got {t_by_key.dtype} {t_by_key.shape}")
    if not all(a is None or a.flags.writeable for a in (acc, by_key, t_by_key)):  # S36-R2: before any sum
        raise InvalidParameters("convert_accumulate sums into acc, key_acc and key_t in place: they must be writeable")
    overlap = any(a is not None and b is not None and np.may_share_memory(a, b)
                  for a, b in ((acc, by_key), (acc, t_by_key), (by_key, t_by_key)))
    if fresh and by_key is not None and overlap:
        raise InvalidParameters("convert_accumulate with fresh sets the key sums: acc, key_acc and key_t must not "
                                "overlap")
    if kernels.compiled():
        # a strided acc, key_acc or key_t is summed in a C-contiguous copy, written back: one compiled signature
        # a ring for the servers' arrays and the callers' views alike, not one a mix of layouts (~10 s of CPU each,
        # cold; session 37: a batch's (U, G, w) view had compiled two more); the walk's callers pass C-contiguous
        # arrays (fused.retrieve_and_prepare_buckets walks a view in a buffer once a walk, not a copy once a call here)
        keys, sums, counts = _contiguous(by_key), _contiguous(acc), _contiguous(t_by_key)
        # outputs that overlap each other, one of them copied, take numpy's path, whose increments land in the
        # shared memory as they are made (S36-R1: the copies' write-backs dropped each other's sums)
        if not overlap or (keys is by_key and sums is acc and counts is t_by_key):
            from secemb.fss._aesni import round_keys
            from secemb.fss._numba_kernels import convert_accumulate as fused

            blocks, vals = _fused_scratch(-(-width * ring_bits // 128), dtype)
            rows = np.ones(big_m, np.uint8) if live is None else live.astype(np.uint8)
            none = np.empty((0, width), dtype)
            fused(np.ascontiguousarray(words), blocks.shape[1], round_keys("convert/" + tag)[0],
                  none if sums is None else sums, start, rows, none[None, :0] if keys is None else keys,
                  np.empty((0, 0), np.int64) if counts is None else counts, period, bool(fresh),
                  blocks, vals, np.empty((blocks.shape[0], 2), np.uint64))
            for given, summed in ((by_key, keys), (acc, sums), (t_by_key, counts)):
                if given is not None and summed is not given:
                    given[...] = summed
            return
    if fresh and by_key is not None and words.shape[0] > 0:  # the keys that start among the words
        starting = np.divmod(np.arange(-(-start // period), (start + words.shape[0] - 1) // period + 1),
                             by_key.shape[1])
        by_key[starting] = 0
        if t_by_key is not None:
            t_by_key[starting] = 0
    for lo, hi, vals in convert_chunks(words, width, ring_bits, tag):
        pos = start + np.arange(lo, hi)
        v = vals if live is None else vals * live[pos % big_m, None].astype(dtype)
        if by_key is not None:  # one segment per key, keys in increasing order
            keys = pos // period
            first = np.flatnonzero(np.diff(keys, prepend=-1))
            rows_of, at = np.divmod(keys[first], by_key.shape[1])
            by_key[rows_of, at] += np.add.reduceat(v, first, axis=0, dtype=dtype)
            if t_by_key is not None:
                bits = (words[lo:hi, 0] & np.uint64(1)).astype(np.int64)
                t_by_key[rows_of, at] += np.add.reduceat(bits if live is None else bits * live[pos % big_m], first)
        p = int(pos[0])
        while acc is not None and p < start + hi:  # rows wrap around at M
            j = p % big_m
            take = min(start + hi - p, big_m - j)
            acc[j : j + take] += v[p - start - lo : p - start - lo + take]
            p += take
