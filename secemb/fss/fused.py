"""Fused server-side evaluation for SecEmb: retrieval answers and path-shared aggregation.

Hazmat layer.  A server holding a user's ``K`` path keys (one per requested row) and their
retrieval output correction words walks each tree once (:func:`retrieve_and_prepare`) and

* answers the retrieval: ``a_i = sum_j Eval(k_i, j) * T[j]`` (SecEmb Eq. 3), and
* keeps what the aggregation stage needs from the leaves, summarized so that it is small:
  the control bits ``t[i, j]`` and ``C[j] = sum_i Convert_agg(s[i, j])``.

Because ``ConvertEval`` is linear in the output correction word, the aggregation share for
correction words ``CW`` (K, w) arriving later is
``v[j] = (-1)^b (C[j] + sum_i t[i, j] * CW[i])`` (:meth:`PreparedAggregation.apply`),
exactly ``sum_i ConvertEval(b, t[i, j], s[i, j], CW[i])`` of SecEmb Algorithm 4, without
walking the trees again and without storing per-leaf seeds.

On request the same pass also sums each key's conversions over its positions
(:class:`PayloadSums`), from which each server gets a share of every key's payload
(:func:`payload_shares`; issue 34 (b)); :func:`payload_sums_of` is the device's walk for them,
and :func:`aggregation_of` the walk for what a party's keys add to each row (the full layout's
bound, which proves per row).
The retrieval's other side is here too: :func:`unmask_slots`, a device's one pass over its
reconstructed answers (unmasked rows, what their tags hash, the empty slots' check).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.convert import convert_accumulate, convert_eval_into, ring_dtype
from secemb.fss.dpf import _ONE, _check_party
from secemb.fss.tree import leaf_groups, padded_leaves
from secemb.fss.keys import PathBlocks, PathKeys
from secemb.fss.linalg import LimbMatrix, ring_matmul
from secemb.fss.sketch import SketchCheck

__all__ = [
    "AGGREGATION_TAG",
    "RETRIEVAL_TAG",
    "PayloadSums",
    "PreparedAggregation",
    "aggregation_of",
    "bits_product",
    "bucket_shares",
    "fold_buckets",
    "payload_shares",
    "payload_sums_of",
    "retrieve_and_prepare",
    "retrieve_and_prepare_buckets",
    "unmask_slots",
]

RETRIEVAL_TAG = "secemb/retrieval"
AGGREGATION_TAG = "secemb/aggregation"


#: domain points per slice when applying correction words (bounds temporary memory)
APPLY_SLICE = 1 << 13
#: keys per block of :meth:`PreparedAggregation.apply_bits` (a few users' keys at once)
APPLY_KEYS = 1 << 12


@dataclass(eq=False)
class PayloadSums:
    """A party's per-key sums over the key's domain positions, from which it gets shares of
    every key's payload (issue 34 (b)) with :func:`payload_shares`.

    Attributes
    ----------
    key_conv: ring (K, w), ``sum_x Convert_agg(s[k, x])`` over key ``k``'s live positions
        ``x`` (the domain ``[0, m)``, or ``[0, sizes[i])`` for bucket ``i``'s keys: padding
        positions count in neither field).
    t_count: int64 (K,), how many of those positions have control bit ``t[k, x] = 1``.
    """

    key_conv: np.ndarray
    t_count: np.ndarray


def payload_shares(party: int, key_conv: np.ndarray, t_count: np.ndarray, cw: np.ndarray, *,
                   out: np.ndarray | None = None) -> np.ndarray:
    """Party ``b``'s shares of every key's payload: ``S_b = (-1)^b (key_conv + t_count * CW)``,
    ring (K, w), i.e. its aggregation shares summed over each key's positions; written into
    ``out`` (a writeable ring (K, w) array of ``cw``'s dtype, overwritten) if given, and returned.

    ``key_conv`` and ``t_count`` are a :class:`PayloadSums`' fields, ``cw`` ring (K, w) the
    keys' aggregation correction words.  ``S_0 + S_1`` is the sum over positions of each key's
    reconstructed outputs: its payload ``beta`` when its two parties' leaf states differ at one
    position at most (the point-function check (a)); a key differing at several positions
    gives the sum of its outputs there.
    """
    b = _check_party(party)
    if not all(isinstance(x, np.ndarray) for x in (key_conv, t_count, cw)):
        raise InvalidParameters("key_conv, t_count and cw must be numpy arrays")
    if (cw.dtype not in (np.uint32, np.uint64) or t_count.dtype.kind not in "ui" or cw.dtype != key_conv.dtype
            or cw.shape != key_conv.shape or cw.ndim != 2 or t_count.shape != (cw.shape[0],)):
        raise InvalidParameters(
            f"cw {cw.dtype} {cw.shape} must match key_conv {key_conv.dtype} {key_conv.shape} "
            f"and t_count {t_count.shape} (K,)"
        )
    if out is not None and (not isinstance(out, np.ndarray) or out.dtype != cw.dtype or out.shape != cw.shape
                            or not out.flags.writeable):
        raise InvalidParameters(f"out must be a writeable {cw.dtype} array of shape {cw.shape}")
    out = np.multiply(t_count.astype(cw.dtype)[:, None], cw, out=out)
    out += key_conv
    if b:
        np.negative(out, out=out)
    return out


@dataclass(eq=False)
class PreparedAggregation:
    """A server's leaf summary of one user's keys, waiting for aggregation correction words.

    The share for correction words ``CW`` is ``signed_conv() + apply_bits(CW)``
    (:meth:`apply`); a server may fold :meth:`signed_conv` into a running aggregate at once and
    keep only the control bits (:meth:`without_conv`).

    Attributes
    ----------
    party: 0 or 1.
    ring_bits: 32 or 64.
    domain_size: ``m``.
    width: ``w``, the aggregation payload width.
    t_bits: uint8 (K, ceil(m / 8)), the control bits at every leaf, packed (numpy
        ``packbits``, big bit order).
    conv_sum: ring (m, w), ``sum_i Convert_agg(s[i, j])``, or ``None`` once detached.
    payload: the keys' :class:`PayloadSums` (``retrieve_and_prepare(..., payload_sums=True)``),
        or ``None``.
    """

    party: int
    ring_bits: int
    domain_size: int
    width: int
    t_bits: np.ndarray
    conv_sum: np.ndarray | None
    payload: PayloadSums | None = None

    def signed_conv(self) -> np.ndarray:
        """``(-1)^b sum_i Convert_agg(s[i, j])``: ring (m, w)."""
        if self.conv_sum is None:
            raise InvalidParameters("the conversion sum was detached from this summary")
        return -self.conv_sum if self.party else self.conv_sum.copy()

    def without_conv(self) -> PreparedAggregation:
        """The same summary without its conversion sum (control bits, and payload sums if any)."""
        return PreparedAggregation(
            self.party, self.ring_bits, self.domain_size, self.width, self.t_bits, None, self.payload
        )

    def apply_bits(self, cw: np.ndarray) -> np.ndarray:
        """``(-1)^b sum_i t[i, j] CW[i]``: ring (m, w), for ``cw`` ring (K, w).  Temporary
        memory is bounded by slicing the domain."""
        k, m, dtype = self.t_bits.shape[0], self.domain_size, ring_dtype(self.ring_bits)
        if cw.dtype != dtype or cw.shape != (k, self.width):
            raise InvalidParameters(
                f"correction words must be {dtype} of shape ({k}, {self.width}), got {cw.dtype} {cw.shape}"
            )
        out = np.zeros((m, self.width), dtype)
        # blocks of at most APPLY_KEYS keys, so that a block's domain slices stay wide
        kc = min(k, APPLY_KEYS)
        step = max(8, APPLY_SLICE * 256 // max(kc, 256) // 8 * 8)  # about kc * 8192 / 256 bits
        for k0 in range(0, k, kc):
            bits, c = self.t_bits[k0 : k0 + kc], cw[k0 : k0 + kc]
            for j0 in range(0, m, step):
                j1 = min(j0 + step, m)
                t = np.unpackbits(bits[:, j0 // 8 : -(-j1 // 8)], axis=1)[:, : j1 - j0]
                out[j0:j1] += ring_matmul(t.T, c, self.ring_bits, a_bits=1)
        if self.party:
            np.negative(out, out=out)
        return out

    def apply(self, cw: np.ndarray) -> np.ndarray:
        """This server's share (ring (m, w)) of ``sum_i f_i`` for correction words ``cw``
        (ring (K, w)): the point functions ``f_i`` have the retrieval paths and payloads
        ``beta_i`` that ``cw`` encodes."""
        bits = self.apply_bits(cw)
        bits += self.signed_conv()
        return bits


def _check_inputs(
    path: PathKeys | PathBlocks, party: int, retrieval_cw: np.ndarray | None, dtype: np.dtype, agg_width: int
) -> int:
    b = _check_party(party)
    if b != path.party:
        raise InvalidParameters(f"keys belong to party {path.party}, not {party}")
    if dtype not in (np.dtype(np.uint32), np.dtype(np.uint64)):
        raise InvalidParameters(f"tables must be uint32 or uint64, got {dtype}")
    k = len(path)
    if retrieval_cw is not None and (retrieval_cw.dtype != dtype or retrieval_cw.shape != (k, 1)):
        raise InvalidParameters(
            f"retrieval_cw must be {dtype} of shape ({k}, 1), got {retrieval_cw.dtype} {retrieval_cw.shape}"
        )
    if agg_width < 1:
        raise InvalidParameters(f"agg_width must be >= 1, got {agg_width}")
    return b


def _bucket_rows(sizes: np.ndarray | None, buckets: int, big_m: int, mp: int) -> tuple[np.ndarray, np.ndarray]:
    """``(cols, live)``: int64 (B,) bucket sizes (all ``big_m`` for ``None``) and bool
    (B mp,), position ``x`` of bucket ``i``'s padded domain at ``i mp + x`` is live when
    ``x < cols[i]``."""
    if sizes is not None and np.asarray(sizes).dtype.kind not in "ui":
        raise InvalidParameters(f"sizes must be integers, got {np.asarray(sizes).dtype}")
    cols = np.full(buckets, big_m, np.int64) if sizes is None else np.asarray(sizes, np.int64)
    if cols.shape != (buckets,) or np.any((cols < 0) | (cols > big_m)):
        raise InvalidParameters(f"sizes must be ({buckets},) in [0, {big_m}], got {cols}")
    return cols, (np.arange(mp)[None, :] < cols[:, None]).reshape(-1)


def _walk_buffer(view: np.ndarray) -> np.ndarray:
    """``view`` where it is C-contiguous, else a new C-contiguous array of its shape and dtype, not
    initialized: where :func:`retrieve_and_prepare_buckets`' walk writes a caller's payload sums, which it
    sets whole (``fresh``) before they are copied into ``view``."""
    return view if view.flags.c_contiguous else np.empty(view.shape, view.dtype)


def _payload_sums(t: np.ndarray, live: np.ndarray, key_conv: np.ndarray) -> PayloadSums:
    """The :class:`PayloadSums` of a walk: its control bits ``t`` uint8 (K, mp), the live mask
    it was given (bool (B mp,), key ``k``'s at ``(k % B) mp``) and its ``key_conv``."""
    t_count = (t.reshape(-1, live.size) & live).reshape(t.shape).sum(axis=1, dtype=np.int64)
    return PayloadSums(key_conv, t_count)


def _walk(
    path: PathKeys | PathBlocks,
    party: int,
    retrieval: tuple[np.ndarray, np.ndarray, tuple[int, int, int]] | None,
    conv_sum: np.ndarray | None,
    retrieval_tag: str,
    aggregation_tag: str,
    live: np.ndarray,
    check: SketchCheck | None = None,
    key_conv: np.ndarray | None = None,
    key_t: np.ndarray | None = None,
) -> np.ndarray:
    """Walk every tree once.  Returns ``t``, uint8 (K, mp) over the padded domain
    (:func:`~secemb.fss.tree.padded_leaves`): the control bits.  ``retrieval = (cw, e, place)``:
    also write the retrieval shares ``(-1)^b [Convert_ret(s) + t cw]`` of the domain's positions
    (``p < m``; the padding's are dropped) into ``e`` (ring (R, 1)) where ``place`` puts them
    (:func:`~secemb.fss.convert.convert_eval_into`'s ``place``: key ``k``'s position ``p`` at row
    ``(k // G) su + (k % G) sg + p``), the control bits from the same pass.  Adds ``Convert_agg`` of
    the leaf at flat position ``j`` of (K, mp) to ``conv_sum[j % M]`` (ring (M, w), or ``None``) where
    ``live[j % M]`` (bool (M,)): rows that hold no domain point (padding) are neither converted nor
    written.  Writes each key ``k``'s sum of those conversions over its live positions to its row of
    ``key_conv`` (ring (K, w) or (U, B, w), :func:`~secemb.fss.convert.convert_accumulate`'s
    ``key_acc``, or ``None``; overwritten: the walk's first pass over a key sets it, ``fresh``) and,
    with ``key_t`` (int64 of ``key_conv``'s keys' shape), each key's count of control bits 1 at those
    rows (overwritten too).  ``check``: the keys' point-function check
    (:class:`~secemb.fss.sketch.SketchCheck`), folded from the same leaves."""
    k, m, mp = len(path), path.params.domain_size, padded_leaves(path.params)
    t = np.empty((k, mp), np.uint8)
    t_flat = t.reshape(-1)
    for r0, r1, leaves in leaf_groups(path):
        width = leaves.shape[1]
        a0, z0 = r0 * width, r1 * width  # flat positions in (K, mp)
        flat = leaves.reshape(-1, 2)
        if retrieval is None:
            np.bitwise_and(flat[:, 0], _ONE, out=t_flat[a0:z0], casting="unsafe")
        else:
            cw, e, place = retrieval
            convert_eval_into(flat, cw, a0, mp, party, retrieval_tag, e, m, place=place, bits=t_flat[a0:z0])
        convert_accumulate(flat, aggregation_tag, conv_sum, a0, live, key_acc=key_conv, period=mp, key_t=key_t,
                           fresh=True)
        if check is not None:
            check.add(r0, r1, leaves)
    return t


def retrieve_and_prepare(
    path: PathKeys,
    party: int,
    retrieval_cw: np.ndarray,
    table: np.ndarray | LimbMatrix,
    agg_width: int,
    *,
    retrieval_tag: str = RETRIEVAL_TAG,
    aggregation_tag: str = AGGREGATION_TAG,
    check: SketchCheck | None = None,
    payload_sums: bool = False,
) -> tuple[np.ndarray, PreparedAggregation]:
    """Answer a PIR request and prepare path-shared aggregation in one pass over the trees.

    Parameters
    ----------
    path: ``K`` path keys of ``party`` over ``[0, m)``.
    retrieval_cw: ring (K, 1), the keys' retrieval output correction words (payload 1).
    table: ring (m, D), the public table, fixed-point encoded, same dtype (or its
        :class:`~secemb.fss.linalg.LimbMatrix`, to reuse its limbs across users).
    agg_width: ``w``, the width of the aggregation payloads that will follow.
    check: if given, the keys' sketch values are folded into it from the same
        leaves (:class:`~secemb.fss.sketch.SketchCheck`).
    payload_sums: also sum each key's conversions over its positions, in the same pass, into
        ``prepared.payload`` (:class:`PayloadSums`; ``None`` otherwise).

    Returns
    -------
    ``(answers, prepared)``: ring (K, D) shares of ``table[alpha_i]`` and the
    :class:`PreparedAggregation`.
    """
    m = path.params.domain_size
    b = _check_inputs(path, party, retrieval_cw, table.dtype, agg_width)
    if table.ndim != 2 or table.shape[0] != m:
        raise InvalidParameters(f"table must have shape ({m}, D), got {table.shape}")
    ring_bits = 8 * table.dtype.itemsize
    mp = padded_leaves(path.params)
    conv_sum = np.zeros((mp, agg_width), table.dtype)
    key_conv = np.empty((len(path), agg_width), table.dtype) if payload_sums else None  # the walk writes it
    live, e = np.arange(mp) < m, np.empty((len(path), m), table.dtype)
    t = _walk(path, b, (retrieval_cw, e.reshape(-1, 1), (1, m, 0)), conv_sum, retrieval_tag, aggregation_tag, live,
              check, key_conv)
    answers = ring_matmul(e, table, ring_bits)
    prepared = PreparedAggregation(
        b, ring_bits, m, agg_width, np.packbits(t[:, :m], axis=1), np.ascontiguousarray(conv_sum[:m]),
        None if key_conv is None else _payload_sums(t, live, key_conv),
    )
    return answers, prepared


@overload
def retrieve_and_prepare_buckets(
    path: PathKeys | PathBlocks, party: int, retrieval_cw: np.ndarray, tables: np.ndarray | LimbMatrix,
    agg_width: int, *,
    sizes: np.ndarray | None = None, retrieval_tag: str = RETRIEVAL_TAG, aggregation_tag: str = AGGREGATION_TAG,
    check: SketchCheck | None = None, payload_sums: Literal[False] = False, payload_out: PayloadSums | None = None,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


@overload
def retrieve_and_prepare_buckets(
    path: PathKeys | PathBlocks, party: int, retrieval_cw: np.ndarray, tables: np.ndarray | LimbMatrix,
    agg_width: int, *,
    sizes: np.ndarray | None = None, retrieval_tag: str = RETRIEVAL_TAG, aggregation_tag: str = AGGREGATION_TAG,
    check: SketchCheck | None = None, payload_sums: Literal[True], payload_out: PayloadSums | None = None,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, PayloadSums]: ...


def retrieve_and_prepare_buckets(
    path: PathKeys | PathBlocks,
    party: int,
    retrieval_cw: np.ndarray,
    tables: np.ndarray | LimbMatrix,
    agg_width: int,
    *,
    sizes: np.ndarray | None = None,
    retrieval_tag: str = RETRIEVAL_TAG,
    aggregation_tag: str = AGGREGATION_TAG,
    check: SketchCheck | None = None,
    payload_sums: bool = False,
    payload_out: PayloadSums | None = None,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray, PayloadSums]:
    """The batched-bucket form: ``U`` users' keys, key ``u B + i`` retrieving from bucket
    ``i``'s table ``tables[i]``.

    Parameters
    ----------
    path: ``U B`` path keys of ``party`` over the bucket domain ``[0, M)``, user-major (or a
        :class:`~secemb.fss.keys.PathBlocks` of them: a batch's blocks, walked in place).
    retrieval_cw: ring (U B, 1).
    tables: ring (B, M, D), bucket ``i``'s rows (zero rows pad short buckets), or its
        :class:`~secemb.fss.linalg.LimbMatrix`.
    agg_width: ``w``.
    sizes: int (B,), or ``None`` for all ``M``: positions ``[0, sizes[i])`` of bucket ``i``
        hold its rows and the rest pad it (zero rows of ``tables``).  ``conv_sum`` is
        computed at those positions only and is zero at the others (a caller must ignore
        them, as the layout's scatter does); the answers skip the padding rows.
    check: as for :func:`retrieve_and_prepare`.
    payload_sums: also sum each key's conversions over its bucket's positions ``[0, sizes[i])``
        in the same pass, returned as a fourth element (:class:`PayloadSums`).
    payload_out: with ``payload_sums``, the arrays to write them into (overwritten, and returned as
        the fourth element): ``key_conv`` ring (U, B, w) and ``t_count`` int64 (U, B), any strides
        (a batch's views: views that are not C-contiguous are walked into new C-contiguous buffers,
        :func:`_walk_buffer`, and copied into them once; the walk counts the control bits as it
        converts); ``None``: new arrays.
    out: writeable views to write the first three results into, any strides (a batch's blocks:
        each written there once, not returned and copied by the caller): ``answers`` ring (U, B, D), ``t``
        uint8 (U, B, M) and ``conv_sum`` ring (B, M, w) (all overwritten; returned in place of new
        arrays, so ``answers`` comes back (U, B, D)); ``conv_sum`` may also be C-contiguous ring (B, mp, w)
        in the walk's row layout (``mp = padded_leaves``: positions ``M..mp-1`` of a bucket pad it and come
        back zero), which the walk sums into directly (no copy of it into a (B, M, w) view).

    Returns
    -------
    ``(answers, t, conv_sum)``: ring (U B, D) shares of ``tables[i, alpha]``; uint8
    (U B, M) control bits; ring (B, M, w) ``sum_u Convert_agg`` of the leaves of bucket
    ``i``'s keys.  The aggregation share for correction words ``CW`` (U B, w) is
    ``(-1)^b (conv_sum + sum_u t_u[..., None] * CW_u[:, None, :])`` (:func:`bucket_shares`).
    With ``payload_sums``, ``(answers, t, conv_sum, payload)``.
    """
    k, big_m = len(path), path.params.domain_size
    b = _check_inputs(path, party, retrieval_cw, tables.dtype, agg_width)
    buckets = tables.shape[0] if tables.ndim == 3 else 0
    if tables.ndim != 3 or tables.shape[1] != big_m or k % buckets:
        raise InvalidParameters(f"tables must have shape (B, {big_m}, D) with B dividing {k}, got {tables.shape}")
    ring_bits = 8 * tables.dtype.itemsize
    mp = padded_leaves(path.params)
    cols, live = _bucket_rows(sizes, buckets, big_m, mp)
    users = k // buckets
    shapes = ((users, buckets, tables.shape[2]), (users, buckets, big_m), (buckets, big_m, agg_width))
    # the folded part may also come in the walk's own row layout, (B, mp, w) C-contiguous (padding rows zero)
    walk_rows = out is not None and len(out) == 3 and isinstance(out[2], np.ndarray) and (
        out[2].shape == (buckets, mp, agg_width) and out[2].flags.c_contiguous)
    if out is not None and (len(out) != 3 or any(
            not isinstance(o, np.ndarray) or (o.shape != shape and not (j == 2 and walk_rows)) or o.dtype != dtype
            or not o.flags.writeable
            for j, (o, shape, dtype) in enumerate(zip(out, shapes, (tables.dtype, np.uint8, tables.dtype),
                                                      strict=False)))):
        raise InvalidParameters(f"out must be writeable views {tables.dtype} {shapes[0]}, uint8 {shapes[1]} and "
                                f"{tables.dtype} {shapes[2]} (or C-contiguous {(buckets, mp, agg_width)})")
    key_conv = None if not payload_sums else np.empty((k, agg_width), tables.dtype) if payload_out is None else (
        payload_out.key_conv)  # the walk writes it
    if payload_sums and payload_out is not None:
        if (payload_out.key_conv.shape != (users, buckets, agg_width) or payload_out.key_conv.dtype != tables.dtype
                or payload_out.t_count.shape != (users, buckets) or payload_out.t_count.dtype != np.int64):
            raise InvalidParameters(f"payload_out must be {tables.dtype} ({users}, {buckets}, {agg_width}) and int64 "
                                    f"({users}, {buckets}), got {payload_out.key_conv.dtype} "
                                    f"{payload_out.key_conv.shape} and {payload_out.t_count.dtype} "
                                    f"{payload_out.t_count.shape}")
    # the walk sums into the caller's conv_sum where it has the walk's row layout (no padding rows, or the
    # padded rows given)
    direct = out[2] if out is not None and (walk_rows or (mp == big_m and out[2].flags.c_contiguous)) else None
    if direct is not None:
        conv_sum = direct.reshape(buckets * mp, agg_width)
        conv_sum[...] = 0
    else:
        conv_sum = np.zeros((buckets * mp, agg_width), tables.dtype)
    # the shares bucket-major (B, U, M), as the walk writes them: the product's fast form
    e = np.empty((buckets, users, big_m), tables.dtype)
    # a caller's strided views (a bucket range of a batch's arrays) are walked into C-contiguous buffers, written
    # back once: each of the walk's many convert_accumulate calls would copy them (its one compiled layout); views
    # that are read-only or overlap each other or the sums go as they are (convert_accumulate refuses them: S36-R2,
    # S28-E3).  The buffers are new, not copies: the walk sets every key's sums (fresh), so the views' old values
    # are never read (a copy of them took ~90 us a walk of 20 devices' 125 buckets, session 38)
    walked, key_t = key_conv, None if payload_out is None else payload_out.t_count
    if walked is not None and key_t is not None and walked.flags.writeable and key_t.flags.writeable and not any(
            np.may_share_memory(a, z) for a, z in ((walked, key_t), (walked, conv_sum), (key_t, conv_sum))):
        walked, key_t = _walk_buffer(walked), _walk_buffer(key_t)
    t = _walk(path, b, (retrieval_cw, e.reshape(-1, 1), (buckets, big_m, users * big_m)), conv_sum, retrieval_tag,
              aggregation_tag, live, check, walked, key_t)
    if payload_out is not None:
        for given, summed in ((payload_out.key_conv, walked), (payload_out.t_count, key_t)):
            if summed is not given:
                given[...] = summed
    # the product written where its rows belong, user-major: the transposed view of the answers
    answers = np.empty(shapes[0], tables.dtype) if out is None else out[0]
    ring_matmul(e, tables, ring_bits, cols=cols, out=answers.transpose(1, 0, 2))
    conv = conv_sum.reshape(buckets, mp, agg_width)[:, :big_m]
    if out is None:
        got = answers.reshape(k, tables.shape[2]), np.ascontiguousarray(t[:, :big_m]), conv
    else:
        out[1][...] = t.reshape(users, buckets, mp)[:, :, :big_m]
        if direct is None:
            out[2][...] = conv
        got = out
    if key_conv is None:
        return got
    return (*got, _payload_sums(t, live, key_conv) if payload_out is None else payload_out)


def payload_sums_of(
    path: PathKeys,
    party: int,
    agg_width: int,
    *,
    ring_bits: int,
    sizes: np.ndarray | None = None,
    aggregation_tag: str = AGGREGATION_TAG,
) -> PayloadSums:
    """The :class:`PayloadSums` of ``party``'s keys from a walk of their own, no table and no
    retrieval: what the device that generated both parties' keys computes for a server (the
    same walk as the servers', so the same sums as ``retrieve_and_prepare(...,
    payload_sums=True)`` and its bucket form).

    Parameters
    ----------
    path: ``K`` path keys of ``party``: over ``[0, m)`` (``sizes`` ``None``), or ``U B`` keys
        over the bucket domain ``[0, M)``, key ``u B + i`` in bucket ``i``.
    agg_width: ``w``; ring_bits: 32 or 64.
    sizes: int (B,) with ``B`` dividing ``K``, the buckets' sizes (positions ``>= sizes[i]``
        pad bucket ``i`` and count in neither sum), or ``None`` for every key over the whole
        domain.
    """
    if ring_bits not in (32, 64):
        raise InvalidParameters(f"ring_bits must be 32 or 64, got {ring_bits}")
    dtype = ring_dtype(ring_bits)
    b = _check_inputs(path, party, None, dtype, agg_width)
    k, big_m, mp = len(path), path.params.domain_size, padded_leaves(path.params)
    buckets = 1 if sizes is None else int(np.size(sizes))
    if buckets < 1 or k % buckets:
        raise InvalidParameters(f"sizes must have B >= 1 entries with B dividing {k} keys")
    _, live = _bucket_rows(sizes, buckets, big_m, mp)
    key_conv = np.empty((k, agg_width), dtype)  # the walk writes it
    t = _walk(path, b, None, None, RETRIEVAL_TAG, aggregation_tag, live, None, key_conv)
    return _payload_sums(t, live, key_conv)


def aggregation_of(
    path: PathKeys,
    party: int,
    agg_width: int,
    *,
    ring_bits: int,
    aggregation_tag: str = AGGREGATION_TAG,
) -> PreparedAggregation:
    """The :class:`PreparedAggregation` of ``party``'s ``K`` path keys over ``[0, m)`` from a walk of
    their own, no table and no retrieval: the same control bits and conversion sum as
    :func:`retrieve_and_prepare`'s, so that ``aggregation_of(...).apply(cw)`` is this party's share
    of what the keys add to each row of the aggregate (ring (m, w)) -- per row, not per key: keys
    that share a point add together there (bounded payloads, issue 34 (b), session 31).
    ``agg_width``: ``w``; ``ring_bits``: 32 or 64.
    """
    if ring_bits not in (32, 64):
        raise InvalidParameters(f"ring_bits must be 32 or 64, got {ring_bits}")
    dtype = ring_dtype(ring_bits)
    b = _check_inputs(path, party, None, dtype, agg_width)
    m, mp = path.params.domain_size, padded_leaves(path.params)
    conv_sum = np.zeros((mp, agg_width), dtype)
    t = _walk(path, b, None, conv_sum, RETRIEVAL_TAG, aggregation_tag, np.arange(mp) < m)
    return PreparedAggregation(b, ring_bits, m, agg_width, np.packbits(t[:, :m], axis=1),
                               np.ascontiguousarray(conv_sum[:m]))


def bucket_shares(party: int, t: np.ndarray, conv: np.ndarray | None, cw: np.ndarray) -> np.ndarray:
    """Aggregation shares in bucket form: ``(-1)^b (conv + sum_u t_u * CW_u)``, ring (B, M, w).

    ``t`` uint8 (U B, M) and ``conv`` ring (B, M, w) (or ``None`` for the control-bit part
    only) from :func:`retrieve_and_prepare_buckets`; ``cw`` ring (U B, w)."""
    if cw.ndim != 2 or cw.shape[0] != t.shape[0] or (
        conv is not None and (cw.dtype != conv.dtype or cw.shape[1] != conv.shape[2] or t.shape[0] % conv.shape[0])
    ):
        raise InvalidParameters(f"correction words of shape {cw.shape} do not match control bits {t.shape}")
    buckets = conv.shape[0] if conv is not None else t.shape[0]
    prod = t.astype(cw.dtype)[:, :, None] * cw[:, None, :]
    out = prod.reshape(-1, buckets, *prod.shape[1:]).sum(axis=0, dtype=cw.dtype)
    if conv is not None:
        out += conv
    if party:
        np.negative(out, out=out)
    return out



def bits_product(t: np.ndarray | Sequence[np.ndarray], cw: np.ndarray | Sequence[np.ndarray],
                 sizes: np.ndarray | None = None, *, out: np.ndarray | None = None, start: np.ndarray | None = None,
                 negate: bool = False) -> np.ndarray:
    """``start +- sum_u t_u[..., None] * CW_u[:, None, :]``: the control-bit part of the
    bucket-form aggregate over users ``u``, ring (B, M, w), added to ``start`` (subtracted with
    ``negate``: party 1's sign) and written to ``out`` (both optional: ``start`` defaults to
    ``out``'s contents, or zero without ``out``; ``out`` to a new array); returns ``out``.

    Parameters
    ----------
    t: the users' control bits (0 or 1) of their B bucket keys, uint8 (B, M) each: a sequence of
        per-user arrays (the users' own arrays or views, e.g. ``bits[u][lo:hi]`` for a range of
        buckets: with the compiled kernels nothing is stacked) or one array (U, B, M).
    cw: their correction words, ring (B, w) each, likewise.
    sizes: int (B,), or ``None`` for all ``M``: only the first ``sizes[i]`` positions of
        bucket ``i`` get the product; the rest are ``start``'s.
    out: C-contiguous writeable ring (B, M, w) of ``cw``'s dtype (a fresh array by default).
    start: ring (B, M, w) of that dtype, any layout (may be ``out``).

    With the compiled kernels one pass per bucket copies ``start`` and adds (subtracts) each
    user's correction word to the rows its bits select, reading every user's arrays where they
    are; the reference stacks them and takes the batched ring product of the bits and words."""
    ts, cws = list(t), list(cw)
    if not ts or len(ts) != len(cws) or any(not isinstance(x, np.ndarray) or x.ndim != 2 for x in ts + cws):
        raise InvalidParameters(f"bits and correction words must be as many (B, M) and (B, w) arrays, >= 1, got "
                                f"{len(ts)} and {len(cws)}")
    dtype, (buckets, big_m), width = cws[0].dtype, ts[0].shape, cws[0].shape[1]
    if (dtype not in (np.dtype(np.uint32), np.dtype(np.uint64)) or any(x.shape != (buckets, big_m) for x in ts)
            or any(x.shape != (buckets, width) or x.dtype != dtype for x in cws)):
        raise InvalidParameters(f"bits {ts[0].shape} and correction words {cws[0].shape} {dtype} must be (B, M) and "
                                f"ring (B, w), the same for every user")
    # a copy of sizes: the kernel reads it while it writes out, which may share the caller's sizes' memory
    cols = np.full(buckets, big_m, np.int64) if sizes is None else np.array(sizes, np.int64)
    if cols.shape != (buckets,) or np.any((cols < 0) | (cols > big_m)):
        raise InvalidParameters(f"sizes must be ({buckets},) in [0, {big_m}]")
    shape = (buckets, big_m, width)
    if out is None:
        out = np.zeros(shape, dtype) if start is None else np.empty(shape, dtype)
    elif out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous or not out.flags.writeable:
        raise InvalidParameters(f"out must be a writeable C-contiguous {dtype} array of shape {shape}")
    if start is None:
        start = out
    elif not isinstance(start, np.ndarray) or start.shape != shape or start.dtype != dtype:
        raise InvalidParameters(f"start must be a {dtype} array of shape {shape}")
    if kernels.compiled() and all(x.dtype == np.uint8 for x in ts):
        from secemb.fss._numba_kernels import bits_accumulate

        # each user's arrays C-contiguous (a copy only of one that is not), held in these lists
        # while the kernel reads them at their addresses
        ts = [np.ascontiguousarray(x) for x in ts]
        cws = [np.ascontiguousarray(x) for x in cws]
        bits_accumulate(np.array([x.ctypes.data for x in ts], np.int64), np.array([x.ctypes.data for x in cws],
                                                                                  np.int64),
                        np.ascontiguousarray(start), out, cols, bool(negate))
        return out
    product = ring_matmul(np.stack(ts).transpose(1, 2, 0), np.stack(cws).transpose(1, 0, 2), 8 * dtype.itemsize,
                          a_bits=1) * (np.arange(big_m) < cols[:, None])[:, :, None].astype(dtype)
    if negate:
        np.negative(product, out=product)
    np.add(start, product, out=out)
    return out


def fold_buckets(acc: np.ndarray, rows: np.ndarray, sizes: np.ndarray, *, negate: bool = False) -> None:
    """``acc[i, :sizes[i]] += rows[i, :sizes[i]]`` (``-=`` with ``negate``: party 1's sign) in the
    ring, for every bucket ``i``: a batch's folded part added into a running aggregate in the bucket
    form; the positions past a bucket's size (its padding) are left as they are.

    Parameters
    ----------
    acc: writeable C-contiguous ring (B, M, w), uint32 or uint64, updated in place.
    rows: ring (B, R, w) of its dtype, ``R >= M`` (e.g. a walk's padded row layout, ``R = mp``:
        :func:`retrieve_and_prepare_buckets`' ``out``), sharing no memory with ``acc``.
    sizes: int (B,) in ``[0, M]``.

    Raises
    ------
    InvalidParameters: arrays outside this contract (nothing is added).

    With the compiled kernels a loop over each bucket's rows (its padding not read); the reference
    adds the rows below each size through a mask."""
    rings = (np.dtype(np.uint32), np.dtype(np.uint64))
    if (not isinstance(acc, np.ndarray) or acc.dtype not in rings or acc.ndim != 3 or not acc.flags.c_contiguous
            or not acc.flags.writeable):
        raise InvalidParameters("fold_buckets: acc must be a writeable C-contiguous ring (B, M, w)")
    buckets, big_m, width = acc.shape
    if (not isinstance(rows, np.ndarray) or rows.dtype != acc.dtype or rows.ndim != 3 or rows.shape[0] != buckets
            or rows.shape[1] < big_m or rows.shape[2] != width or np.may_share_memory(acc, rows)):
        raise InvalidParameters(f"fold_buckets: rows must be {acc.dtype} ({buckets}, >= {big_m}, {width}) apart from "
                                f"acc, got {getattr(rows, 'dtype', None)} {getattr(rows, 'shape', None)}")
    cols = np.array(sizes, np.int64)  # a copy: the kernel reads it while it writes acc
    if cols.shape != (buckets,) or (buckets and (int(cols.min()) < 0 or int(cols.max()) > big_m)):
        raise InvalidParameters(f"fold_buckets: sizes must be ({buckets},) in [0, {big_m}]")
    if kernels.compiled():
        from secemb.fss._numba_kernels import fold_buckets as kernel

        kernel(acc, kernels.read_only(rows), cols, bool(negate))  # (read-only, C-contiguous: one signature)
        return
    live = np.arange(big_m)[None, :] < cols[:, None]
    if negate:
        acc[live] -= rows[:, :big_m][live]
    else:
        acc[live] += rows[:, :big_m][live]


def unmask_slots(answers: np.ndarray, unmask: np.ndarray, items: np.ndarray, rows: Sequence[np.ndarray],
                 suffix: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """A device's reading of its reconstructed retrieval answers, every user's slots in one pass:
    each slot's answer times its unmasking factor, split into the row (written to the user's
    array) and, for a real slot, the row again after its item (the bytes its row tag hashes,
    :func:`~secemb.protocols.secemb.checks.suffix_tags`) and the rest of the answer (its tag
    words, to compare); each empty slot's answer checked to be zero.  Writes only ``rows``,
    ``suffix`` and ``tags``.

    Parameters
    ----------
    answers: ring (n, S, D): user ``u``'s reconstructed answer of slot ``s``.
    unmask: ring (n, S), the slots' factors (``beta^{-1}``; an empty slot's is its rows' value).
    items: int64 (n, S), the slots' items, ``-1`` for an empty slot.
    rows: ``n`` writeable C-contiguous ring (S, w) arrays, ``w <= D``: ``rows[u][s] =
        answers[u, s, :w] * unmask[u, s]``.
    suffix: writeable uint8 (R, 8 + w itemsize), ``R`` the real slots (``items >= 0``) in (user,
        slot) order: row ``r`` the ``r``-th real slot's item as a little-endian u64, then its
        row's words, little-endian.
    tags: writeable ring (R, D - w): ``answers[u, s, w:] * unmask[u, s]`` of the ``r``-th real slot.

    Returns
    -------
    bool (n,): whether the user has an empty slot whose answer is not all zero.
    """
    rows = list(rows)  # the arrays checked are the arrays whose addresses the kernel gets, held to its end
    if isinstance(items, np.ndarray):
        items = items.copy()  # counted here, read by the kernel: no write to rows or suffix changes it
    n, slots, d = answers.shape if answers.ndim == 3 else (0, 0, 0)
    dtype = answers.dtype
    width = d - tags.shape[1] if tags.ndim == 2 else -1
    real = int(np.count_nonzero(items >= 0)) if items.shape == (n, slots) else -1
    if (dtype not in (np.dtype(np.uint32), np.dtype(np.uint64)) or answers.ndim != 3 or unmask.shape != (n, slots)
            or unmask.dtype != dtype or items.dtype != np.int64 or real < 0 or not 0 <= width <= d
            or len(rows) != n or any(not isinstance(r, np.ndarray) or r.shape != (slots, width) or r.dtype != dtype
                                     or not r.flags.c_contiguous or not r.flags.writeable for r in rows)
            or suffix.shape != (real, 8 + width * dtype.itemsize) or suffix.dtype != np.uint8
            or tags.shape != (real, d - width) or tags.dtype != dtype
            or (suffix.size and suffix.strides[1] != 1) or not suffix.flags.writeable or not tags.flags.writeable):
        raise InvalidParameters(f"unmask_slots: answers {answers.dtype} {answers.shape} need unmask (n, S) of their "
                                f"dtype, int64 items (n, S), n writeable C-contiguous rows (S, w), and a writeable "
                                f"suffix uint8 (R, 8 + w itemsize) and tags (R, D - w), R the real slots")
    at_items = suffix[:, :8].view("<u8")[:, 0]
    at_rows = suffix[:, 8:].view(dtype.newbyteorder("<"))
    if kernels.compiled() and answers.flags.c_contiguous and at_rows.dtype.isnative:  # a little-endian host
        from secemb.fss._numba_kernels import unmask_slots as kernel

        filled = np.zeros(n, bool)
        kernel(answers, unmask, items, np.array([r.ctypes.data for r in rows], np.int64), at_items, at_rows, tags,
               filled)
        return filled
    flat = answers.reshape(n * slots, d)
    at = items.reshape(-1)
    real_at, empty_at = np.flatnonzero(at >= 0), np.flatnonzero(at < 0)
    filled = np.zeros(n, bool)
    filled[empty_at[np.take(flat, empty_at, axis=0).any(axis=1)] // max(slots, 1)] = True
    unmasked = (flat * unmask.reshape(-1, 1)).reshape(n, slots, d)
    for r, got in zip(rows, unmasked, strict=True):
        r[...] = got[:, :width]
    at_items[...] = at[real_at]
    real_rows = unmasked.reshape(n * slots, d)[real_at]
    at_rows[...] = real_rows[:, :width]
    tags[...] = real_rows[:, width:]
    return filled
