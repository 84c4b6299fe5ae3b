"""The worker tasks of SecEmb's server evaluation: module-level functions over plain numpy
data (and :class:`~secemb.fss.keys.DPFKeys`) that a backend maps over chunks of a batch
(:mod:`secemb.protocols.backends`: this thread, threads, worker processes, Ray, a CUDA device),
so they pickle to worker processes.  The scheduling -- how a batch is cut into tasks -- is the
server's (:class:`secemb.protocols.secemb.server.SecEmbServer`).

A task reads the round's table through a handle (``handle.get()``) in one of three forms,
named by the task: ``"full"`` (the table's :class:`~secemb.fss.linalg.LimbMatrix`),
``"cuckoo"`` (:class:`Buckets`: the limbs and the layout's gather index) or ``"device"`` (a
backend's device-resident table, :class:`~secemb.fss.gpu.DeviceTable`: a backend that has one
says so by returning it from ``device_table``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss.cuckoo import CuckooLayout
from secemb.fss.keys import PathBlocks, PathKeys
from secemb.fss.fused import PayloadSums, bits_product, retrieve_and_prepare, retrieve_and_prepare_buckets
from secemb.fss.linalg import LimbMatrix
from secemb.fss.projections import project_each
from secemb.fss.sketch import Expanded, SketchCheck

__all__ = ["Buckets", "bits_task", "evaluate_into_task", "evaluate_projected_task", "evaluate_task", "evaluation_form",
           "place", "ranges", "tapered"]


#: bucket ranges a :class:`Buckets` keeps the gathered form of (a round's tasks use a few)
_KEPT_RANGES = 64


@dataclass
class Buckets:
    """The cuckoo layout's table as published: its rows and where each bucket position reads
    (``index`` int64 (B, M), -1 for padding); a task reads the bucket tables it evaluates
    through the index (:meth:`tables`).  What a range's tasks read of it -- its gathered
    matrix, whose index is copied and checked when made, and its buckets' sizes -- is made once
    a round per range (kept for up to :data:`_KEPT_RANGES` ranges; not pickled), not once a task:
    a server that takes devices one at a time runs a task per range a device (session 42)."""

    rows: LimbMatrix
    index: np.ndarray
    _ranges: dict[tuple[int, int], tuple[LimbMatrix, np.ndarray]] = field(default_factory=dict, repr=False,
                                                                         compare=False)

    def __getstate__(self) -> dict:
        return {"rows": self.rows, "index": self.index, "_ranges": {}}  # a worker makes its own

    def tables(self, lo: int, hi: int) -> LimbMatrix:
        """The bucket form (hi - lo, M, w) of buckets ``lo..hi-1``: the rows gathered through
        the index, which the compiled product reads in place (nothing is copied; the numpy
        reference gathers them where it reads them)."""
        return self._range(lo, hi)[0]

    def sizes(self, lo: int, hi: int) -> np.ndarray:
        """int64 (hi - lo,): how many positions of each of buckets ``lo..hi-1`` hold a row (the
        rest pad it; read-only)."""
        return self._range(lo, hi)[1]

    def _range(self, lo: int, hi: int) -> tuple[LimbMatrix, np.ndarray]:
        got = self._ranges.get((lo, hi))
        if got is None:
            sizes = (self.index[lo:hi] >= 0).sum(axis=1).astype(np.int64)
            sizes.flags.writeable = False
            got = self.rows.gather(self.index[lo:hi]), sizes
            if len(self._ranges) >= _KEPT_RANGES:
                self._ranges.clear()
            self._ranges[(lo, hi)] = got  # (threads may make one twice: the same values)
        return got


def evaluation_form(table: np.ndarray, layout: str | CuckooLayout, ring_bits: int) -> LimbMatrix | Buckets:
    """The ring table (m, w) as the CPU evaluation reads it: its :class:`LimbMatrix` (full
    layout), or that and the layout's gather index (cuckoo: tasks form their own buckets, so
    the bucket form, three times the table, is neither built once in the server's process nor
    published)."""
    limbs = LimbMatrix(table, ring_bits)
    return limbs if isinstance(layout, str) else Buckets(limbs, layout.gather_index)


def evaluate_task(task: tuple, sums_into: PayloadSums | None = None,
                  into: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None, *, signed: bool = True,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, PayloadSums | None]:
    """Evaluate a batch of users' keys (module-level: it runs in worker processes too).

    ``task = (form, party, keys, table, width, buckets, check)`` with ``form`` ``"full"``,
    ``"cuckoo"`` or ``"device"`` (the module's forms of the table), ``keys`` the users' key
    batches concatenated and ``table`` the :class:`~secemb.protocols.backends.Handle` of the
    round's table in that form (:func:`evaluation_form`, or the backend's device table).
    ``buckets = (lo, hi)`` (cuckoo, CPU): the keys are every user's keys of buckets
    ``lo..hi-1``, user-major, and read those buckets' rows (``None``: all buckets); in the cuckoo
    form ``keys`` may also be ``(batch, users)``, a :class:`~secemb.fss.keys.DPFKeys` of ``users``
    equal blocks (each a user's keys of every bucket), whose keys of buckets ``lo..hi-1`` are
    those keys: the walk reads their correction words where the batch holds them
    (:class:`~secemb.fss.keys.PathBlocks`; a task of an in-process backend, which shares the batch).  Returns
    the answers (K, w), the control bits
    (packed rows for the full layout, (K, M) for the cuckoo layout) and the signed
    payload-independent part of the aggregation share summed over the batch ((m, w), or
    (hi - lo, M, w) for those buckets, zero at positions that pad a bucket).  ``check =
    (expanded, per_user)`` (verified uploads: the task's users' expanded sketch seeds,
    :func:`~secemb.fss.sketch.expand`, and its keys per user, :class:`~secemb.fss.sketch.SketchCheck`)
    or ``None``; the fourth result is the keys' sketch values uint64 (K, 3), from the same walk, or
    ``None``.  An eighth
    element ``sums`` (optional; bounded payloads): the fifth result is the keys' :class:`~secemb.fss.fused.PayloadSums`
    from the same walk (``None`` without ``sums``, and from the device form, which does not
    walk here).  ``sums_into`` (cuckoo form, with ``sums``): the arrays the walk writes the payload
    sums into, key_conv (U, G, w) and t_count (U, G) (a batch's views), returned as the fifth result.
    ``into`` (cuckoo form): the views the walk writes the answers (U, G, w + T), control bits
    (U, G, M) and folded part (G, M, w) into (:func:`~secemb.fss.fused.retrieve_and_prepare_buckets`'s
    ``out``), returned as the first three results; the folded part's view may also be C-contiguous
    (G, mp, w), the walk's row layout (its padding positions come back zero).  ``signed=False`` (cuckoo
    form): the folded part comes back as ``sum Convert_agg``, without the factor ``(-1)^b`` (party 1's
    negation, one pass over it, left to the caller, which adds it into its aggregate with the sign).
    """
    form, party, keys, handle, width, buckets, check_args = task[:7]
    sums = len(task) > 7 and bool(task[7])
    check = None if check_args is None else SketchCheck(*check_args)
    table = handle.get()
    if form == "device":  # the table is on the backend's device, and the check is computed there from its walk
        answers, t, conv = table.evaluate(party, keys, width, check)
        return answers, t, conv, None if check is None else check.values, None
    values = None if check is None else check.values
    if form == "full":
        answers, prepared = retrieve_and_prepare(keys.path, party, keys.cw_out, table, width, check=check,
                                                 payload_sums=sums)
        return answers, prepared.t_bits, prepared.signed_conv(), values, prepared.payload
    lo, hi = buckets or (0, len(table.index))
    path: PathKeys | PathBlocks
    if isinstance(keys, tuple):  # the batch's blocks, read in place
        batch, users = keys
        path = PathBlocks(batch.path, users, lo, hi)
        cw = batch.cw_out.reshape(users, -1, batch.cw_out.shape[1])[:, lo:hi].reshape(len(path), -1)
    else:
        path, cw = keys.path, keys.cw_out
    sizes = table.sizes(lo, hi)
    payload = None
    if sums:
        answers, t, conv, payload = retrieve_and_prepare_buckets(path, party, cw, table.tables(lo, hi), width,
                                                                 sizes=sizes, check=check, payload_sums=True,
                                                                 payload_out=sums_into, out=into)
    else:
        answers, t, conv = retrieve_and_prepare_buckets(path, party, cw, table.tables(lo, hi), width, sizes=sizes,
                                                        check=check, out=into)
    if party and signed:
        np.negative(conv, out=conv)
    return answers, t, conv, values, payload


def evaluate_projected_task(task: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None,
                                                    np.ndarray]:
    """:func:`evaluate_task` of the full layout's ``task = (form, party, keys, table, width, None,
    check, (challenges, length, rows))`` (``form`` ``"full"``), user by user, that also projects
    each user's folded part before it is summed away (bounded payloads, full layout: a server's
    share of what the user's keys add to each row is ``(-1)^b C_b`` plus the correction words'
    part, linear, so each part is projected where it is at hand; docs/security.md, "The challenge
    is derived, per device").  ``challenges``: the task's users' 16-byte challenges, one a user
    (its keys: ``len(keys) / len(challenges)`` consecutive keys); ``length``: ``L = m w + P``,
    the proven vector's length; ``rows``: the projections a user.  Returns the answers, the packed
    control bits, the summed folded part and the sketch values (as :func:`evaluate_task`'s first
    four results) and ring (n, rows), user ``u``'s :func:`~secemb.fss.projections.project_each` of
    ``(-1)^b C_b`` (flattened, then zeros up to ``length``) under its challenge.  Memory beyond
    :func:`evaluate_task`'s: one user's folded part and one vector of ``length`` words."""
    form, party, keys, handle, width, buckets, check_args, (challenges, length, rows) = task
    if form != "full" or buckets is not None or not challenges:
        raise InvalidParameters(f"a projected evaluation is the full layout's, of at least one user (got {form!r})")
    n, dtype = len(challenges), keys.cw_out.dtype
    slots = len(keys) // n
    folded = np.zeros((keys.params.domain_size, width), dtype)
    x, projections = np.zeros((1, length), dtype), np.empty((n, rows), dtype)
    answers: list[np.ndarray] = []
    bits: list[np.ndarray] = []
    values: list[np.ndarray | None] = []
    for u, challenge in enumerate(challenges):
        check = None
        if check_args is not None:  # the user's row of the task's expanded sketch seeds
            ex = check_args[0]
            check = (Expanded(ex.keys[u : u + 1], ex.r[u : u + 1], ex.r2[u : u + 1]), slots)
        a, t, conv, v, _ = evaluate_task((form, party, keys[u * slots : (u + 1) * slots], handle, width, None, check))
        x[0, : conv.size] = conv.reshape(-1)
        projections[u] = project_each([challenge], x, rows)[0]
        folded += conv
        answers.append(a)
        bits.append(t)
        values.append(v)
    return (np.concatenate(answers), np.concatenate(bits), folded,
            None if check_args is None else np.concatenate(cast("list[np.ndarray]", values)), projections)


def place(result: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, PayloadSums | None],
          answers: np.ndarray, bits: np.ndarray, folded: np.ndarray, values: np.ndarray, key_conv: np.ndarray,
          t_count: np.ndarray) -> None:
    """Write a bucket range's :func:`evaluate_task` result into the views ``answers`` (U, G, w + T),
    ``bits`` (U, G, M), ``folded`` (G, M, w), ``values`` (U, G, 3), ``key_conv`` (U, G, w) and
    ``t_count`` (U, G) of the batch's arrays (the last three where the result has them; none that
    is already that view: the walk wrote it there)."""
    a, t, conv, v, sums = result
    for got, view in ((a, answers), (t, bits), (conv, folded)):
        if got is not view:
            view[...] = got.reshape(view.shape)
    if v is not None:
        values[...] = v.reshape(values.shape)
    if sums is not None and sums.key_conv is not key_conv:  # else the walk wrote them there (evaluate_into_task)
        key_conv[...] = sums.key_conv.reshape(key_conv.shape)
        t_count[...] = sums.t_count.reshape(t_count.shape)


def evaluate_into_task(task: tuple) -> None:
    """:func:`evaluate_task` of a range of buckets, its result written by the task itself
    (:func:`place`; a task of an in-process backend: ``task = (inner, answers, bits, folded, values,
    key_conv, t_count)``, optionally an eighth element ``signed``, :func:`evaluate_task`'s (default
    ``True``); the walk writes the answers, bits, folded part and payload sums straight into their
    views; ``folded`` (G, M, w) or, C-contiguous, (G, mp, w))."""
    inner, *views = task[:7]
    signed = len(task) < 8 or bool(task[7])
    place(evaluate_task(inner, PayloadSums(views[4], views[5]), (views[0], views[1], views[2]), signed=signed),
          *views)


def ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut into ``parts`` consecutive ranges of near-equal size (range ``i`` starts
    at ``floor(i n / parts)``; integer arithmetic: called several times a round per server)."""
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def tapered(n: int, largest: int, workers: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut into consecutive ranges of at most ``largest`` (>= 1) that shrink toward
    the end, for ``workers`` threads that each take the next range left: each range is a
    ``1 / (2 workers)`` share of what is left (at least ``largest // 8``), so the threads run
    out of work within about one small range of each other (equal ranges leave one waiting
    for up to a whole range)."""
    smallest = max(1, largest // 8)
    out: list[tuple[int, int]] = []
    lo = 0
    while lo < n:
        size = min(largest, max(smallest, -(-(n - lo) // (2 * workers))))
        out.append((lo, min(n, lo + size)))
        lo = out[-1][1]
    return out


def bits_task(task: tuple[list[np.ndarray], list[np.ndarray], slice, np.ndarray, bool, np.ndarray,
                         np.ndarray]) -> None:
    """``out[:] = folded +- bits_product(t, cw, sizes)`` (``-`` with ``negate``) for a range of
    buckets, ``t`` and ``cw`` each user's bits (B, M) and words (B, w) of that range, read where
    they are (:func:`~secemb.fss.fused.bits_product`; a task of an in-process backend: ``task =
    (bits, cws, buckets, sizes, negate, folded, out)``, ``out`` C-contiguous)."""
    bits, cws, buckets, sizes, negate, folded, out = task
    bits_product([b[buckets] for b in bits], [c[buckets] for c in cws], sizes, out=out, start=folded, negate=negate)
