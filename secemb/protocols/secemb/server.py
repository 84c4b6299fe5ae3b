"""SecEmb's server role: server ``party``'s side of every round -- the evaluation of users'
retrieval keys (scheduled over the backend's workers; the tasks are :mod:`secemb.fss.tasks`),
the uploads, verified-upload digests and sketch proofs, and the aggregate.  A relay deployment's servers add the
relay steps (:class:`secemb.protocols.secemb.relay.SecEmbRelayServer`)."""

from __future__ import annotations

import hashlib
import operator
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np

from secemb import fss
from secemb.errors import InvalidKey, InvalidMessage, InvalidParameters, ProtocolError, SecembError
from secemb.fss import rangeproof, sketchproof
from secemb.fss.field import batch_nbytes
from secemb.fss.hashing import bytes_rows, row_bytes
from secemb.fss.sketch import SKETCH_SEED_BYTES, Expanded, expand, server_inputs_many
from secemb.fss.fused import PayloadSums, PreparedAggregation, fold_buckets
from secemb.fss.tasks import (
    bits_task,
    evaluate_into_task,
    evaluate_projected_task,
    evaluate_task,
    evaluation_form,
    place,
    ranges,
    tapered,
)
from secemb.fss.tree import padded_leaves
from secemb.protocols.backends import Backend, Handle, SerialBackend
from secemb.protocols.base import RoundConfig, ServerRole, result_or_raise
from secemb.protocols.secemb.bounds import (
    CHALLENGE_BYTES,
    QUERY_BYTES,
    ROWS,
    bound_params,
    contexts,
    contribution,
    dense_commitment,
    payload_sums,
    projected,
    projected_shares,
    upload_vector,
)
from secemb.protocols.secemb.checks import (
    SKETCH_KEY_BYTES,
    VERIFY_DOMAIN,
    binding_rows,
    bound_challenges,
    half_tags,
    key_digests,
    query_seed_rows,
    round_secret,
    row_tags,
    sketch_half_rows,
    sketch_seeds,
)
from secemb.protocols.secemb.sizes import (
    BIND_BYTES,
    SIGMA_BYTES,
    DENSE_COMMIT_BYTES,
    NAME,
    U64,
    key_expect,
    key_params,
    request_bytes,
    rows_bytes,
    share_bytes,
    sketch_params,
    tag_words,
    upload_bytes,
)
from secemb.protocols.spill import SpilledShares
from secemb.framing import HEADER_BYTES
from secemb.protocols.wire import Opener, check_user, frame, little, open_message, read_array, read_view, users_bytes
from secemb.randomness import system_rng
from secemb.sharing import reconstruct

if TYPE_CHECKING:
    from secemb.fss.gpu import DeviceTable

__all__ = ["EVAL_BYTES", "FOLD_BYTES", "FOLD_USERS", "Request", "SecEmbServer"]

_T = TypeVar("_T")
_R = TypeVar("_R")
_M = TypeVar("_M")

#: a framed message's header and body (bytes slices)
_HEAD, _BODY = operator.itemgetter(slice(HEADER_BYTES)), operator.itemgetter(slice(HEADER_BYTES, None))

#: batch of users is split into tasks of at most this many bytes of leaf state
EVAL_BYTES = 1 << 30
#: cache bound of one cuckoo evaluation task: the rows its walk folds conversions into (its
#: buckets' (M, w) blocks, revisited once per user) stay within about this many bytes, so
#: they are summed in cache instead of streamed through memory once per user
FOLD_BYTES = 1 << 20
#: a cuckoo batch of fewer users is walked in one range of buckets, whatever :data:`FOLD_BYTES` says: its
#: rows are revisited too few times for the bound to pay for each range's task (its set-up, its calls).
#: Measured in process, one thread (session 42; a batch's evaluation, one range against the bound's): at
#: ML-100K (2 ranges) 0.82x for 1 user, 0.89x for 4, 0.95x for 8 and 12, about even at 16, 1.03-1.06x from
#: 32; at the Yelp stand-in's size (80 ranges) 0.58x for 1 and 4 users, but 1.03x and 1.30x for 8 (load 5-8)
FOLD_USERS = 8


@dataclass(frozen=True)
class _Sketch:
    """Verified uploads: what a server keeps of a user's sketch check from its retrieval."""

    digest: bytes  # K: the SHA-256 of its shared key part (with relay, the D both servers hold)
    seed: bytes  # its sketch seed c_u (secemb.protocols.secemb.checks)
    values: np.ndarray  # its keys' sketch values (A_b, B_b, C_b), uint64 (S, 3) (a view of its batch's)


@dataclass
class _Pending:
    """What a server keeps of a user between retrieval and upload."""

    keys: fss.DPFKeys
    bits: np.ndarray  # full layout: packed control bits (S, ceil(m/8)); cuckoo: t (B, M)
    check: _Sketch | None  # verified uploads: its sketch check; else None
    # bounded payloads, cuckoo layout: its keys' payload sums from the retrieval's walk (None: off, the full
    # layout, or the gpu backend's walk)
    sums: PayloadSums | None = None
    # bounded payloads, full layout: its challenge c_u (bound_challenges) and this server's projections under it
    # (ring (ROWS,)) of the folded part (-1)^b C_b, from the retrieval's walk (None: the gpu backend's walk)
    challenge: bytes | None = None
    projected: np.ndarray | None = None


@dataclass
class _Absorbed:
    """What a server keeps of an uploaded user until the round closes (to aggregate it, or
    to leave it out).  Its dense share is in the running aggregate already; to take it out
    again the server keeps its seed (server 1 with relay) or, out of memory, the share itself
    (:class:`~secemb.protocols.spill.SpilledShares`)."""

    keys: fss.DPFKeys
    bits: np.ndarray
    check: _Sketch | None  # as _Pending.check
    cw: np.ndarray  # ring (S, w): the aggregation correction words
    dense_seed: bytes | None  # server 1 with relay: the seed its dense share expands from; else None (spilled)
    sums: PayloadSums | None = None  # as _Pending.sums
    #: bounded payloads without relay: the commitment to the device's server-1 dense share (server 0:
    #: as the device sent it; server 1: computed from its share), which the upload digests cover
    commit: bytes | None = None
    #: verified uploads: server 0's share of the device's sketch proof (its elements checked at intake)
    #: or, at server 1, the binding tau the device sent; else None
    sketch: bytes | None = None
    #: bounded payloads, full layout: as _Pending.challenge
    challenge: bytes | None = None
    #: bounded payloads, full layout: this server's projections (ring (ROWS,)) of its whole share ``x_b`` under
    #: ``challenge`` -- the retrieval's part plus, at intake, the correction words' part and the dense share
    #: (:meth:`_project_uploads`); None where the retrieval's walk kept none (the gpu backend's)
    projected: np.ndarray | None = None
    #: whether its correction words' part ``(-1)^b sum_i t[i, .] CW[i]`` is in the running aggregate already
    #: (bounded payloads, full layout: :meth:`_project_uploads`); else :meth:`_summed` computes it
    folded: bool = False


@dataclass(frozen=True)
class _Asked:
    """Server 0: what its last :meth:`SecEmbServer.bound_request` fixed, which
    :meth:`SecEmbServer.bound_rejected` verifies with (computed once for both)."""

    users: list[int]  # the users it asked for (sorted), those that sent a proof
    query: bytes  # the query seed q
    unproved: set[int]  # the users of the request without a proof (rejected)
    challenges: list[bytes]  # each user's challenge
    contexts: list[bytes]  # each user's proof context
    shares: rangeproof.ProofShares  # server 0's parsed shares of their proofs
    hints: np.ndarray  # server 0's own parts (part_0), sent to server 1: uint8 (n, 32)


def sift(items: list[tuple[int, _M]], out: list[_T | SecembError],
         take: Callable[[int, _M, set[int]], _R]) -> tuple[list[int], list[int], list[_R]]:
    """The items ``(user, message)`` of a batch that pass: each user checked
    (:func:`~secemb.protocols.wire.check_user`), then ``take(user, message, seen)`` -- ``seen``:
    the users taken before it in the batch -- which raises :class:`SecembError` to refuse the
    item (the error goes to the item's place in ``out``) or returns what to keep.  The taken
    items' users, their indices into ``items`` and what ``take`` returned, in order."""
    users: list[int] = []
    where: list[int] = []
    kept: list[_R] = []
    seen: set[int] = set()
    for i, (user_id, message) in enumerate(items):
        try:
            user_id = check_user(user_id)
            kept.append(take(user_id, message, seen))
        except SecembError as exc:
            out[i] = exc
            continue
        users.append(user_id)
        where.append(i)
        seen.add(user_id)
    return users, where, kept


def rows_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row of uint8 ``a`` and ``b`` (n, k): whether they differ, bool (n,); every byte of every row
    read, no early exit (a secret-dependent comparison's time says nothing of where it differs)."""
    return np.bitwise_or.reduce(a ^ b, axis=1) != 0


def stacked(bodies: list[memoryview], rows: np.ndarray) -> np.ndarray:
    """``rows`` (uint8 (len(bodies), size)) with row ``j`` set to ``bodies[j]`` (``size``
    bytes each): copied row by row (numpy copies without the GIL; one join would hold it)."""
    for j, body in enumerate(bodies):
        rows[j] = body
    return rows


@dataclass(frozen=True)
class Request:
    """A parsed retrieval request: its keys (block ``block`` of the request batch's keys
    ``batch``, user-major, S a user: parsed together on the backend's threads, evaluated together
    without concatenating them again) and, with verified uploads, the SHA-256 of its shared key
    part."""

    keys: fss.DPFKeys
    digest: bytes
    forward: bytes | None = None  # server 0, relay: the relay_keys message it forwards (framed once)
    batch: fss.DPFKeys | None = None
    block: int = 0
    sigma: bytes | None = None  # server 1, verified uploads: the device's proof seed, sent with the request


@dataclass(frozen=True)
class _Unsigned:
    """A cuckoo batch's folded part as its walk left it, for the commit to add into the running
    aggregate with the party's sign: ``rows`` ring (B, mp, w), ``sum Convert_agg`` in the walk's
    row layout (bucket ``i``'s position ``x`` at ``[i, x]``; positions ``M..mp-1`` pad it, zero),
    without the factor ``(-1)^b`` (``negate``: party 1 subtracts it).  A batch after the round's
    first takes this form (:meth:`SecEmbServer._evaluate_buckets`): the walk sums into it directly,
    sparing a copy into the layout's form and (party 1) a negation, each a pass over a table-sized
    array a batch (session 42)."""

    rows: np.ndarray
    negate: bool


#: an evaluation's per-user answers (a list, or the rows of one array (n, S, w + T): the cuckoo
#: layout's batch) and control bits, summed folded part (in the layout's form with the party's sign, or
#: :class:`_Unsigned`), (verified uploads) the users' sketch values uint64 (n, S, 3), (bounded payloads,
#: cuckoo layout) per-user payload sums and (bounded payloads, full layout) per-user projections of the
#: folded part, ring (n, ROWS)
_Evaluated = tuple[list[np.ndarray] | np.ndarray, list[np.ndarray], np.ndarray | _Unsigned, np.ndarray | None,
                   list[PayloadSums] | None, np.ndarray | None]


class SecEmbServer(ServerRole):
    """Server ``party`` of SecEmb; party 0 leads (reconstructs the aggregate).  Without relay;
    a relay deployment's servers are :class:`~secemb.protocols.secemb.relay.SecEmbRelayServer`.

    ``bound_users``: bounded payloads (:mod:`~secemb.protocols.secemb.bounds`) for rounds of
    that many users, or ``None`` (off); it needs ``verify``.  ``sketch_key``: with ``verify``, the
    32-byte key both servers hold and no device sees, from which each round's sketch secret comes
    (:func:`~secemb.protocols.secemb.checks.round_secret`).

    Raises
    ------
    InvalidParameters: bounded payloads without verified uploads, or verified uploads without a
        32-byte sketch key.
    """

    #: whether server 0 relays (the relay server's messages: an upload with server 1's MAC tag,
    #: digests without the correction words both servers hold authenticated)
    relay: bool = False

    def __init__(self, party: int, *, verify: bool = True, backend: Backend | None = None,
                 bound_users: int | None = None, sketch_key: bytes | None = None) -> None:
        super().__init__(party)
        self.verify = verify  # verified uploads: sketch the keys' leaves, check the devices' proofs
        if bound_users is not None and not verify:
            raise InvalidParameters("bounded payloads need verified uploads (verify=True)")
        if verify and (not isinstance(sketch_key, bytes) or len(sketch_key) != SKETCH_KEY_BYTES):
            raise InvalidParameters(f"verified uploads need the servers' {SKETCH_KEY_BYTES}-byte sketch key")
        self._sketch_key = sketch_key
        self.bound_users = bound_users
        self.backend = backend or SerialBackend()
        self._table: Handle | None = None  # the round's published table
        self._device: DeviceTable | None = None  # the gpu backend's copy of it
        self._spilled = SpilledShares()  # the round's explicit dense shares, on disk until it closes
        # the close's bucket-form work array, kept between rounds (:meth:`_close_buffer`), and the
        # lock a close holds while it writes and reads it
        self._close_work: np.ndarray | None = None
        self._close_lock = threading.Lock()
        self._sparse = np.zeros((0, 0), np.uint32)  # the round's running aggregate (begin_round)
        # the last round's running aggregate, until a batch of this round folds into it (:meth:`_fold_target`)
        self._spare: np.ndarray | None = None
        self._spare_lock = threading.Lock()

    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        if table.dtype != config.dtype or table.shape != (config.num_items, config.width):
            raise InvalidParameters(
                f"table must be {config.dtype} of shape ({config.num_items}, {config.width}), "
                f"got {table.dtype} {table.shape}"
            )
        bound = None if self.bound_users is None else bound_params(config, self.bound_users)  # refuses first
        self._start_round(config)
        self._bound = bound
        # verified uploads: the round's sketch secret s_round (never sent)
        self._secret = b"" if self._sketch_key is None else round_secret(self._sketch_key, config.round_id)
        self._sigmas: dict[int, bytes] = {}  # server 1, verified uploads: each retrieved user's proof seed
        self._challenges: dict[int, bytes] = {}  # server 0, bounded payloads: each uploaded user's challenge
        self._proofs: dict[int, bytes] = {}  # server 0, bounded payloads: each user's proof (range proof msg0)
        self._asked: _Asked | None = None  # server 0: its last bound_request
        self._answered: set[int] = set()  # server 1: the users whose verifier messages it gave
        layout = "full" if config.layout == "full" else config.cuckoo()
        # the evaluated table carries each row's tag (verified retrieval, docs/security.md)
        # (in ranges of rows on the backend's threads, each writing its rows and their tags:
        # the SHA-256 kernel runs without the GIL)
        tagged = np.empty((config.num_items, config.width + tag_words(config)), config.dtype)

        def tag(span: tuple[int, int]) -> None:
            lo, hi = span
            tagged[lo:hi, : config.width] = table[lo:hi]
            tagged[lo:hi, config.width :] = row_tags(config.round_id, np.arange(lo, hi), table[lo:hi])

        self._map_spans(tag, self._spans(config.num_items))
        table = tagged
        # the table in the form the evaluation reads, computed once a round: on the backend's
        # device, or as limbs (full layout: the table; cuckoo: its bucket form), published to
        # the backend's workers (shared memory, object store) so tasks carry only a handle
        self._device = self.backend.device_table(np.ascontiguousarray(table), layout)
        evaluated = self._device if self._device is not None else evaluation_form(table, layout, config.ring_bits)
        if self._table is not None:
            self.backend.release(self._table)
        self._table = self.backend.publish(evaluated)
        last = self._sparse
        if isinstance(layout, str):
            self._sparse = np.zeros((config.num_items, config.width), config.dtype)
        else:
            self._sparse = np.zeros((config.num_buckets, layout.bucket_size, config.width), config.dtype)
        # the last round's running aggregate (the role's own array) is this round's first fold target
        # where the bucket forms agree (cuckoo layout on the CPU: :meth:`_evaluate_buckets`)
        keep = (self._device is None and not isinstance(layout, str) and last.shape == self._sparse.shape
                and last.dtype == config.dtype)
        with self._spare_lock:
            self._spare = last if keep else None
        self._dense = np.zeros(config.dense_size, config.dtype)
        self._pending: dict[int, _Pending] = {}
        self._uploaded: set[int] = set()
        self._absorbed: dict[int, _Absorbed] = {}
        self._spilled.clear()  # the last round's shares
        self._folded = False  # whether _sparse holds a batch yet (until then it is zero)
        self._closed_cache: tuple[tuple[int, ...], tuple[list[int], np.ndarray, np.ndarray]] | None = None

    def _check_new(self, user_id: int) -> None:
        if user_id in self._pending or user_id in self._uploaded:
            raise ProtocolError(f"user {user_id} already retrieved in round {self._cfg().round_id}")

    # -- retrieval ---------------------------------------------------------------------
    def _evaluate(self, keys: fss.DPFKeys, seeds: list[bytes] | None = None, sums: bool = False,
                  challenges: list[bytes] | None = None, *, unsigned: bool = False) -> _Evaluated:
        """Per-user answers and control bits, and the summed folded part, for a batch of
        users' keys (user-major: user ``u``'s are keys ``u S .. u S + S - 1``), chunked over
        the backend's workers: by users, or (cuckoo layout, CPU) by ranges of buckets, so that
        each task folds into its own buckets' rows and nothing table-sized is summed across
        tasks.  With ``seeds`` (verified uploads: the users' sketch seeds ``c_u``, 16 bytes each),
        also each user's sketch values uint64 (S, 3) from the same walk
        (:class:`~secemb.fss.sketch.SketchCheck`), else ``None``.  With ``sums`` (bounded payloads),
        also each user's :class:`~secemb.fss.fused.PayloadSums` from the same walk (``None`` on the
        gpu backend, whose walk does not sum them).  With ``challenges`` (bounded payloads, full
        layout: the users' challenges ``c_u``), also each user's projections under ``c_u`` of its
        folded part (:func:`~secemb.fss.tasks.evaluate_projected_task`: the walk user by user; ``None``
        on the gpu backend, whose walk keeps no user's part).  ``unsigned``: the folded part may come
        as :class:`_Unsigned` (a batch to commit, :meth:`_commit_evaluated`; cuckoo layout on the CPU, a
        batch after the round's first: :meth:`_evaluate_buckets`), else it is an array in the layout's
        form with the party's sign."""
        cfg = self._cfg()
        n = len(keys) // cfg.slots
        mp = padded_leaves(key_params(cfg))
        # a task walks its keys' trees over the whole (bucket) domain, holding leaf-level
        # control bits and retrieval shares: bound that memory by splitting the batch
        leaves = cfg.slots * mp  # per user, over all its keys
        per_user = leaves * (cfg.dtype.itemsize + 1)
        if cfg.layout == "cuckoo" and self._device is None:
            fold = leaves * cfg.width * cfg.dtype.itemsize  # the bucket rows the walk folds into
            cached = -(-fold // FOLD_BYTES) if n >= FOLD_USERS else 1
            return self._evaluate_buckets(keys, max(-(-n * per_user // EVAL_BYTES), cached),
                                          None if seeds is None else expand(seeds, mp), sums, unsigned)
        tasks_n = max(min(n, self.backend.workers), -(-n // max(1, EVAL_BYTES // per_user)))
        form = "device" if self._device is not None else cfg.layout  # the table's form (secemb.fss.tasks)
        project = challenges is not None and form == "full"
        length = cfg.num_items * cfg.width + cfg.dense_size  # of the proven vector x_b
        tasks = [(form, self.party, keys[lo * cfg.slots : hi * cfg.slots], self._table, cfg.width, None,
                  None if seeds is None else (expand(seeds[lo:hi], mp), cfg.slots),
                  (cast("list[bytes]", challenges)[lo:hi], length, ROWS) if project else sums)
                 for lo, hi in ranges(n, tasks_n)]
        results = self.backend.map(evaluate_projected_task if project else evaluate_task, tasks)
        folded = results[0][2] if results[0][2].flags.writeable else results[0][2].copy()  # Ray's are not
        for r in results[1:]:
            folded += r[2]  # in place: one pass per task over a table-sized array
        slots = cfg.slots
        answers = [r[0][i * slots : (i + 1) * slots] for r in results for i in range(len(r[0]) // slots)]
        bits = [r[1][i * slots : (i + 1) * slots] for r in results for i in range(len(r[1]) // slots)]
        values = None if seeds is None else np.concatenate([np.asarray(r[3]).reshape(-1, slots, 3) for r in results])
        if project:
            return answers, bits, folded, values, None, np.concatenate([r[4] for r in results])
        got = [r[4] for r in results if r[4] is not None]
        payload = None if len(got) != len(results) else [
            PayloadSums(p.key_conv[i * slots : (i + 1) * slots], p.t_count[i * slots : (i + 1) * slots])
            for p in got for i in range(len(p.t_count) // slots)]
        return answers, bits, folded, values, payload, None

    def _evaluate_buckets(self, stacked: fss.DPFKeys, parts: int, expanded: Expanded | None,
                          sums: bool, unsigned: bool = False) -> _Evaluated:
        """:meth:`_evaluate` of the cuckoo layout in tasks of every user's keys of a range of
        buckets (at least ``parts`` ranges, one per worker if more); ``expanded``: the users'
        expanded sketch seeds (:func:`~secemb.fss.sketch.expand`), or ``None``; ``unsigned`` as
        :meth:`_evaluate`'s."""
        cfg = self._cfg()
        slots = cfg.slots
        n = len(stacked) // slots  # user-major: user u's keys are rows u B .. u B + B - 1
        spans = ranges(slots, min(slots, max(parts, self.backend.workers)))
        if self.backend.in_process and self.backend.workers > 1:  # threads: ranges that shrink toward the end
            spans = tapered(slots, max(hi - lo for lo, hi in spans), self.backend.workers)

        def task(lo: int, hi: int) -> tuple:
            """The evaluation task of buckets ``lo..hi-1``: every user's keys of them (an in-process
            backend's walk reads them where ``stacked`` holds them; a worker process gets a copy)."""
            keys = (stacked, n) if self.backend.in_process else stacked.blocks(n, lo, hi)
            return ("cuckoo", self.party, keys, self._table, cfg.width, (lo, hi),
                    None if expanded is None else (expanded, hi - lo), sums)

        big_m = cfg.cuckoo().bucket_size
        answers = np.empty((n, slots, cfg.width + tag_words(cfg)), cfg.dtype)
        bits = np.empty((n, slots, big_m), np.uint8)
        # a batch after the round's first (read outside the lock: a stale "not yet" takes the first's form,
        # which commits either way) is added into the aggregate at its commit: walked unsigned in the walk's
        # row layout (:class:`_Unsigned`); the first is adopted as the aggregate (:meth:`_commit_evaluated`)
        unsigned = unsigned and self.backend.in_process and self._folded
        if unsigned:
            folded = np.empty((slots, padded_leaves(key_params(cfg)), cfg.width), cfg.dtype)
        else:
            folded = self._fold_target((slots, big_m, cfg.width), cfg.dtype)
        values = np.empty((n, slots, 3), np.uint64)  # with the sketch, every range writes its own
        key_conv = np.empty((n, slots, cfg.width if sums else 0), cfg.dtype)  # with sums, likewise
        t_count = np.empty((n, slots if sums else 0), np.int64)
        views = [(answers[:, lo:hi], bits[:, lo:hi], folded[lo:hi], values[:, lo:hi], key_conv[:, lo:hi],
                  t_count[:, lo:hi]) for lo, hi in spans]
        if self.backend.in_process:  # threads (or this process) form their range's task and place its results
            self.backend.map(lambda k: evaluate_into_task((task(*spans[k]), *views[k], not unsigned)),
                             range(len(spans)))
        else:
            for result, v in zip(self.backend.map(evaluate_task, [task(lo, hi) for lo, hi in spans]), views,
                                 strict=True):
                place(result, *v)
        return (answers, list(bits), _Unsigned(folded, bool(self.party)) if unsigned else folded,
                None if expanded is None else values,
                [PayloadSums(c, k) for c, k in zip(key_conv, t_count, strict=True)] if sums else None, None)

    def _fold_target(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array for a batch's folded part (the walk writes every element of it): the last
        round's running aggregate where begin_round kept it and it has ``shape`` and ``dtype``,
        else a new one.  The kept one is handed out once (evaluations run concurrently, outside
        the server's lock); a fresh one each round would be mapped anew and every page of it
        faulted in and zeroed by the kernel (as :meth:`_close_buffer`'s)."""
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is None or spare.shape != shape or spare.dtype != dtype:
            return np.empty(shape, dtype)
        return spare

    def _commit_evaluated(self, users: list[int], keys: list[fss.DPFKeys], evaluated: _Evaluated,
                          digests: list[bytes] | None = None, seeds: list[bytes] | None = None,
                          challenges: list[bytes] | None = None) -> list[np.ndarray] | np.ndarray:
        """Apply an :meth:`_evaluate` result: fold the batch into the running aggregate and
        keep each user's keys, control bits, (verified uploads, with each user's key
        ``digests`` and sketch ``seeds``, those of the evaluation) its sketch check and (bounded
        payloads, full layout) its ``challenges`` entry and projections until its upload; the
        answers (user ``j``'s at ``[j]``: a list, or the rows of the batch's array)."""
        answers, bits, folded, values, sums, projected = evaluated
        if isinstance(folded, _Unsigned):  # (the aggregate is zero until the round's first batch)
            fold_buckets(self._sparse, folded.rows, np.diff(self._cfg().cuckoo().indptr), negate=folded.negate)
        elif self._folded or not folded.flags.writeable:
            self._sparse += folded
        else:  # the round's first batch (usually its only one): adopt it, sparing a pass
            self._sparse = folded
        self._folded = True
        self._closed_cache = None
        checks: list[_Sketch | None] = [None] * len(users)
        if values is not None and digests is not None and seeds is not None:  # values: user-major (n, S, 3)
            checks = [_Sketch(d, c, v) for d, c, v in zip(digests, seeds, values, strict=True)]
        kept: list[PayloadSums | None] = list(sums) if sums is not None else [None] * len(users)
        bound: list[tuple[bytes | None, np.ndarray | None]] = [(None, None)] * len(users)
        if challenges is not None:
            bound = list(zip(challenges, [None] * len(users) if projected is None else list(projected), strict=True))
        for u, k, b, check, got, (c, p) in zip(users, keys, bits, checks, kept, bound, strict=True):
            self._pending[u] = _Pending(k, b, check, got, c, p)
        return answers

    def _parse_requests(self, messages: list[bytes]) -> list[Request | SecembError]:
        """The keys (and, server 1 with verified uploads, the proof seed ``sigma``) of each
        retrieval request (server 0, or either server without relay), or the error that refuses
        it; the requests are parsed as one batch, in ranges of requests on the backend's threads,
        each range's bodies as the rows of one array (:meth:`_requests`), into one batch of keys
        (request ``i``'s keys are block ``i`` of it: :attr:`Request.batch`)."""
        cfg = self._cfg()
        out: list[Request | SecembError | None] = [None] * len(messages)
        opened: list[tuple[int, memoryview]] = []
        size = request_bytes(cfg)
        sigma = SIGMA_BYTES if self.verify and self.party == 1 else 0  # verified uploads: the seed last
        opener = Opener(NAME, "retrieval_request", self.party, cfg.round_id, size + sigma)
        for i, message in enumerate(messages):
            try:
                opened.append((i, opener(message)))
            except SecembError as exc:
                out[i] = exc
        batch = self._empty_batch(len(messages))

        def parse(part: list[tuple[int, memoryview]]) -> list[Request | SecembError]:
            """A range's requests, their keys written to their blocks of ``batch``."""
            rows = stacked([b[:size] for _, b in part], np.empty((len(part), size), np.uint8))
            return [InvalidMessage(f"retrieval_request: {got}") if isinstance(got, InvalidKey)
                    else replace(got, sigma=bytes(b[size:])) if sigma else got
                    for (_, b), got in zip(part, self._requests(rows, [i for i, _ in part], batch), strict=True)]

        for (i, _), got in zip(opened, self._chunked(parse, opened), strict=True):
            out[i] = got
        return cast("list[Request | SecembError]", out)  # every entry is set above

    def _empty_batch(self, users: int) -> fss.DPFKeys:
        """An unset batch of ``users`` users' request keys of the round (:meth:`fss.DPFKeys.empty`)."""
        expect = key_expect(self._cfg())
        params = fss.DPFParams(expect["domain_size"], expect["payload_width"], expect["ring_bits"])
        return fss.DPFKeys.empty(params, self.party, users * expect["count"])

    def _requests(self, rows: np.ndarray, blocks: list[int], batch: fss.DPFKeys, roots: np.ndarray | None = None,
                  digests: list[bytes] | None = None) -> list[Request | InvalidKey]:
        """Requests parsed from the rows of ``rows`` (uint8 (u, L)) into blocks ``blocks`` of
        ``batch``, each field of every row at once: each row a request body -- serialized keys
        (:meth:`fss.DPFKeys.from_rows`) -- or, with ``roots`` (uint8 (u, 16 S), server 1 with
        relay), a forwarded key part whose keys take the row's roots.  Per row its
        :class:`Request` or the :class:`InvalidKey` that refuses its keys.  With verified uploads a
        request's key digest -- SHA-256 of its shared key part -- is hashed here, every row's as one
        batch, unless given (``digests``, per row: server 1 with relay, which compared them with
        the device's own); what is forwarded of it: :meth:`_forward_of`.  The shared key parts are
        not serialized: each is the header these parameters fix followed by the row's fields after
        the roots."""
        cfg = self._cfg()
        slots, expect = cfg.slots, key_expect(cfg)
        keys = fss.DPFKeys.from_rows(rows, party=self.party, roots=roots, into=batch, blocks=blocks, **expect)
        ok = [j for j, got in enumerate(keys) if not isinstance(got, InvalidKey)]
        good = rows if len(ok) == len(rows) else rows[ok]
        head = fss.DPFKeys.shared_header(**{k: expect[k] for k in ("domain_size", "count", "payload_width",
                                                                      "ring_bits")})
        rest = good[:, fss.keys.HEADER_BYTES + (16 * slots if roots is None else 0) :]  # the shared fields
        if digests is not None:
            names = [digests[j] for j in ok]
        else:
            names = key_digests(head, rest) if self.verify else [b""] * len(ok)
        taken = cast("list[fss.DPFKeys]", keys)  # those at ok are keys
        made = iter([Request(taken[j], name, self._forward_of(head, rest[r]), batch, blocks[j])
                     for r, (j, name) in enumerate(zip(ok, names, strict=True))])
        return [got if isinstance(got, InvalidKey) else next(made) for got in keys]

    def _forward_of(self, shared_header: bytes, rest: np.ndarray) -> bytes | None:
        """What is forwarded of a request whose shared key part is ``shared_header`` followed
        by ``rest`` (uint8: its keys' fields after the roots): nothing without relay."""
        return None

    def _evaluate_requests(self, requests: list[Request], seeds: list[bytes] | None,
                           challenges: list[bytes] | None = None) -> _Evaluated:
        """:meth:`_evaluate` of parsed requests, with their users' sketch ``seeds`` (verified
        uploads, :meth:`_sketch_seeds`; else ``None``) and bound ``challenges`` (bounded payloads,
        full layout, :meth:`_bound_challenges`; else ``None``): their keys are a view of the batch
        they were parsed into where they are its consecutive blocks (a whole batch, usually), else
        copies; for :meth:`_commit_evaluated` (its folded part may be :class:`_Unsigned`)."""
        first, lo, n = requests[0].batch, requests[0].block, len(requests)
        if first is not None and all(q.batch is first and q.block == lo + j for j, q in enumerate(requests)):
            slots = self._cfg().slots
            keys = first[lo * slots : (lo + n) * slots]
        else:
            keys = fss.DPFKeys.concat([q.keys for q in requests])
        # bounded payloads: cuckoo layout, the payload sums its check projects; full layout, the projections
        # of the folded part under each user's challenge
        return self._evaluate(keys, seeds, self._bound is not None and self._cfg().layout == "cuckoo", challenges,
                              unsigned=True)

    def _bound_challenges(self, users: list[int], digests: list[bytes]) -> list[bytes] | None:
        """Bounded payloads, full layout: per user of ``users`` (with its key digest:
        :attr:`Request.digest`) its challenge ``c_u``
        (:func:`~secemb.protocols.secemb.checks.bound_challenges`), derived at retrieval by both
        servers and given to the device by server 0 only once its upload is absorbed
        (:meth:`challenge`); ``None`` otherwise (the cuckoo layout's challenge is drawn at upload)."""
        if self._bound is None or self._cfg().layout != "full":
            return None
        return bound_challenges(self._secret, self._cfg().round_id, users, digests)

    def _sketch_seeds(self, users: list[int], digests: list[bytes]) -> tuple[list[bytes], list[bytes]] | None:
        """Verified uploads: per user of ``users`` (with its key digest: :attr:`Request.digest`) its
        sketch seed ``c_u``, the one its walk sketches with, and what this server's reply carries of
        it -- with relay ``c_u`` itself (:func:`~secemb.protocols.secemb.checks.sketch_seeds`,
        server 0's reply, which adds server 1's tag of it), without relay this server's half
        (:func:`~secemb.protocols.secemb.checks.sketch_half_rows`, ``c_u`` the XOR of both as arrays,
        each from this server's own ``K``) and this server's tag of the other server's half
        (:func:`~secemb.protocols.secemb.checks.half_tags`); ``None`` without verified uploads."""
        if not self.verify:
            return None
        round_id = self._cfg().round_id
        if self.relay:
            seeds = sketch_seeds(self._secret, round_id, users, digests)
            return seeds, seeds
        halves = sketch_half_rows(self._secret, round_id, users, digests)
        tags = half_tags(round_id, 1 - self.party, row_bytes(halves[1 - self.party]))
        return (row_bytes(halves[0] ^ halves[1]),
                [h + t for h, t in zip(row_bytes(halves[self.party]), tags, strict=True)])

    def _parse_batch(self, requests: list[tuple[int, bytes]]) -> list[Request | SecembError]:
        """:meth:`_parse_requests` of the requests' messages (a relay server takes some from
        what it parsed to forward them)."""
        return self._parse_requests([m for _, m in requests])

    def handle_retrieval(self, user_id: int, message: bytes) -> bytes | None:
        """Non-relay: the reply to the user.  Relay: server 0 returns the shared key part to
        forward to server 1; server 1 stores the user's roots and seeds and returns None."""
        out = self.handle_retrieval_many([(user_id, message)])[0]
        if isinstance(out, Exception):
            raise out
        return out

    def handle_retrieval_many(self, requests: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """:meth:`handle_retrieval` for many users at once, evaluated as one batch (over the
        backend's workers).  A rejected request yields its exception in its place (raised
        by :meth:`handle_retrieval`) and changes no state; the others proceed."""
        return self.evaluate_retrieval_many(requests)()

    def evaluate_retrieval_many(
        self, requests: list[tuple[int, bytes]]
    ) -> Callable[[], list[bytes | None | SecembError]]:
        """Parse and evaluate the batch (no state change); ``commit()`` folds it in and
        returns the replies (see :meth:`ServerRole.evaluate_retrieval_many`)."""
        cfg = self._cfg()
        out: list[bytes | None | SecembError] = [None] * len(requests)
        parsed = self._parse_batch(requests)  # all at once; taken in order below

        def take(user_id: int, got: Request | SecembError, seen: set[int]) -> Request:
            if user_id in seen:
                raise ProtocolError(f"user {user_id} already retrieved in round {cfg.round_id}")
            self._check_new(user_id)
            if isinstance(got, SecembError):
                raise got
            return got

        users, where, keys = sift([(u, got) for (u, _), got in zip(requests, parsed, strict=True)], out, take)
        digests = [q.digest for q in keys]
        sketch = self._sketch_seeds(users, digests)
        challenges = self._bound_challenges(users, digests)
        evaluated = self._evaluate_requests(keys, None if sketch is None else sketch[0], challenges) if keys else None

        def commit() -> list[bytes | None | SecembError]:
            if self.config is not cfg:
                raise ProtocolError(f"round {cfg.round_id} ended while its retrievals were evaluated")
            for u in users:
                self._check_new(u)
            if evaluated is None:
                return out
            committed = self._commit_evaluated(users, [q.keys for q in keys], evaluated, digests,
                                               None if sketch is None else sketch[0], challenges)
            parts = [b""] * len(users) if sketch is None else sketch[1]
            for i, u, q, answers, part in zip(where, users, keys, committed, parts, strict=True):
                out[i] = self._reply(u, q, answers, part)
                if q.sigma is not None:
                    self._sigmas[u] = q.sigma
            return out

        return commit

    def _reply(self, user_id: int, request: Request, answers: np.ndarray, seed_part: bytes) -> bytes:
        """What a committed retrieval returns: the reply to the user, its ``answers`` and
        ``seed_part`` (verified uploads: what the reply carries of the user's sketch seed,
        :meth:`_sketch_seeds`; else empty) (a relay server 0 keeps both and returns the forward to
        server 1)."""
        return frame(NAME, "retrieval_reply", self.party, self._cfg().round_id, little(answers), seed_part)

    # -- upload --------------------------------------------------------------------------
    def _absorb_many(self, users: list[int], cws: list[np.ndarray], dense_sum: np.ndarray,
                     spill: list[np.ndarray] | None = None, dense_seeds: list[bytes] | None = None,
                     commits: list[bytes] | None = None, sketches: list[bytes] | None = None) -> None:
        """Absorb checked uploads: ``users[i]``'s correction words ``cws[i]`` (ring (S, w)) are
        kept with its keys; the dense shares, summed in ``dense_sum`` (ring (P,)), are added to
        the running aggregate now, each kept only as its seed (``dense_seeds``: server 1 with
        relay, the seeds they expand from) or else on disk (``spill``: the shares themselves),
        so that the server's memory does not grow with the round's users (:meth:`_dense_share`
        gets one back for a user left out); ``commits``: each user's dense commitment (bounded
        payloads without relay, :func:`~secemb.protocols.secemb.bounds.dense_commitment`);
        ``sketches``: verified uploads, each user's sketch proof share (server 0) or binding
        ``tau`` (server 1) as :attr:`_Absorbed.sketch` keeps it.  The
        control-bit part of the sparse share is computed for the included users at once when the
        aggregate is asked for (:meth:`_summed`); each user's keys stay until then.  Bounded
        payloads, full layout: each user's kept projections are completed (:meth:`_project_uploads`).

        Raises
        ------
        OSError: a share could not be written to disk (nothing is absorbed).
        """
        if spill is not None:
            self._spilled.put_many(list(zip(users, spill, strict=True)))  # first: it may fail, nothing changed yet
        seeds = dense_seeds if dense_seeds is not None else [None] * len(users)
        commit_of = commits if commits is not None else [None] * len(users)
        sketch_of = sketches if sketches is not None else [None] * len(users)
        for u, cw, seed, commit, sketch in zip(users, cws, seeds, commit_of, sketch_of, strict=True):
            pending = self._pending.pop(u)
            self._absorbed[u] = _Absorbed(pending.keys, pending.bits, pending.check, cw, seed, pending.sums, commit,
                                          sketch, pending.challenge, pending.projected)
            self._uploaded.add(u)
        self._closed_cache = None
        self._dense += dense_sum
        projected = [j for j, u in enumerate(users) if self._absorbed[u].projected is not None]
        if projected:
            some = [users[j] for j in projected]
            dense = [spill[j] for j in projected] if spill is not None else self._dense_shares(some)
            self._project_uploads(some, dense)

    def _project_uploads(self, users: list[int], dense: list[np.ndarray]) -> None:
        """Bounded payloads, full layout: add to each of absorbed ``users``' kept projections
        (those of its folded part ``(-1)^b C_b``, from the retrieval's walk) the projections under
        its challenge of the rest of this server's share ``x_b``: the correction words' part
        ``(-1)^b sum_i t_b[i, .] CW[i]`` (:meth:`_bits_part` of the user) and its dense share
        (``dense``, ring (P,) each, in order), as one vector of ``L = m w + P`` words with the
        first part.  ``x_b`` is linear in its parts, so the sum is its projections
        (:func:`~secemb.protocols.secemb.bounds.projected`), which the check reads
        (:meth:`_bound_projections`) without walking the keys again; a user's memory is its ROWS
        words.  The correction words' part, computed here anyway, is folded into the running
        aggregate (:attr:`_Absorbed.folded`: :meth:`_summed` does not compute it again, and takes it
        out for a user left out).  In ranges of users on the backend's threads (:meth:`_spans`),
        one user's vector at a time, each range's parts summed and added to the aggregate here."""
        cfg = self._cfg()
        rows_part = cfg.num_items * cfg.width

        def span(bounds: tuple[int, int]) -> np.ndarray:
            lo, hi = bounds
            x = np.empty((1, rows_part + cfg.dense_size), cfg.dtype)
            total = np.zeros((cfg.num_items, cfg.width), cfg.dtype)
            for u, d in zip(users[lo:hi], dense[lo:hi], strict=True):
                a = self._absorbed[u]
                part = self._bits_part([a])
                x[0, :rows_part] = part.reshape(-1)
                x[0, rows_part:] = d
                a.projected = cast("np.ndarray", a.projected) + projected([cast("bytes", a.challenge)], x)[0]
                total += part
            return total

        for total in self._map_spans(span, self._spans(len(users))):
            self._sparse += total
        for u in users:
            self._absorbed[u].folded = True

    def _dense_share(self, user_id: int) -> np.ndarray:
        """The dense share (ring (P,)) absorbed user ``user_id`` sent this server, read back
        from disk (a relay server 1 expands its seed instead).

        Raises
        ------
        OSError: the disk could not give it back.
        """
        return self._spilled.get(user_id)

    def _dense_shares(self, users: list[int]) -> list[np.ndarray]:
        """:meth:`_dense_share` of each of absorbed ``users``, in order (a relay server 1 expands
        their seeds as one batch): where all were spilled, the rows of one array read back at once
        (:meth:`~secemb.protocols.spill.SpilledShares.get_many`: one read for the shares a batch
        spilled together, not one a user), else one a user.

        Raises
        ------
        OSError: the disk could not give one back.
        """
        if all(map(self._spilled.__contains__, users)):
            cfg = self._cfg()
            return list(self._spilled.get_many(users, cfg.dtype, (cfg.dense_size,)))
        return [self._dense_share(u) for u in users]

    def _summed(self, users: list[int]) -> np.ndarray:
        """The folded part of the round's batches plus ``(-1)^b sum_u sum_i t_u[i, j] CW_u[i]``
        over absorbed ``users`` (the control-bit part as one batched product), in the layout's
        form: their aggregate share before silent users are taken out (a new array; with users,
        on the CPU, in the cuckoo layout the role's :meth:`_close_buffer`, overwritten)."""
        cfg = self._cfg()
        got = [self._absorbed[u] for u in users]
        if cfg.layout == "full" and self._device is None:
            # the part of users whose upload folded it in already (:meth:`_project_uploads`) is there: it is
            # taken out again for the absorbed users left out
            inside = set(users)
            out = self._sparse.copy()
            add = [a for a in got if not a.folded]
            if add:
                out += self._bits_part(add)
            out_of = [a for u, a in self._absorbed.items() if a.folded and u not in inside]
            if out_of:
                out -= self._bits_part(out_of)
            return out
        if not got:
            return self._sparse.copy()
        if self._device is not None:  # the product on the backend's device, in the layout's form
            part = self._device.bits_part([a.bits for a in got], [a.cw for a in got])
            return self._sparse - part if self.party else self._sparse + part
        # party 1 adds the bits' product with the negated words: (-1)^b t CW
        return self._add_bits_product([a.bits for a in got], [a.cw for a in got])

    def _bits_part(self, absorbed: list[_Absorbed]) -> np.ndarray:
        """Full layout: ``(-1)^b sum_u sum_i t_u[i, j] CW_u[i]`` over the ``absorbed`` users, ring (m,
        w), as one batched product (:meth:`~secemb.fss.fused.PreparedAggregation.apply_bits`)."""
        cfg = self._cfg()
        bits = np.concatenate([a.bits for a in absorbed])
        summary = PreparedAggregation(self.party, cfg.ring_bits, cfg.num_items, cfg.width, bits, None)
        return summary.apply_bits(np.concatenate([a.cw for a in absorbed]))

    def _spans(self, n: int) -> list[tuple[int, int]]:
        """``[0, n)`` in one range per worker of a backend whose workers share this process's
        memory (threads), else one range (the others' workers would copy the operands)."""
        return ranges(n, max(1, min(n, self.backend.workers) if self.backend.in_process else 1))

    def _add_bits_product(self, bits: list[np.ndarray], cws: list[np.ndarray]) -> np.ndarray:
        """The folded part (B, M, w) plus ``(-1)^b`` :func:`~secemb.fss.fused.bits_product` of
        the users' bits (each (B, M)) and correction words (each (B, w)), in ranges of buckets
        (:meth:`_spans`), written over all of :meth:`_close_buffer` (returned; the caller holds
        ``_close_lock``)."""
        sizes = np.diff(self._cfg().cuckoo().indptr)  # positions past a bucket's size pad it: left as they are
        out = self._close_buffer()
        self._map_spans(bits_task, [(bits, cws, slice(lo, hi), sizes[lo:hi], bool(self.party), self._sparse[lo:hi],
                                      out[lo:hi]) for lo, hi in self._spans(len(sizes))])
        return out

    def _close_buffer(self) -> np.ndarray:
        """The close's work array for the bucket form (B, M, w) of the aggregate share
        (:meth:`_add_bits_product` writes every element of it, :meth:`_scatter` reads it; only under
        ``_close_lock``), kept on the role between rounds and made again only when the round's
        shape or ring changes.  A fresh one each round would be mapped anew (above glibc's mmap
        threshold: 78 MiB at the Yelp stand-in's size) and every page of it faulted in and zeroed
        by the kernel, a cost that varied by an order of magnitude between rounds (docs/results.md,
        "Verified uploads", session 27)."""
        shape, dtype = self._sparse.shape, self._sparse.dtype
        work = self._close_work
        if work is None or work.shape != shape or work.dtype != dtype:
            self._close_work = None  # the old one freed before the new one is made
            work = self._close_work = np.empty(shape, dtype)
        return work

    def _scatter(self, bucket_form: np.ndarray) -> np.ndarray:
        """The layout's scatter of ``bucket_form`` onto items (a new array), in ranges of items
        (:meth:`_spans`), each written into its rows of the result."""
        layout = self._cfg().cuckoo()
        out = np.empty((layout.num_items, bucket_form.shape[2]), bucket_form.dtype)

        def scatter(span: tuple[int, int]) -> None:
            layout.scatter(bucket_form, slice(*span), out=out[span[0] : span[1]])

        self._map_spans(scatter, self._spans(layout.num_items))
        return out

    def _map_spans(self, fn: Callable[[_T], _R], tasks: list[_T]) -> list[_R]:
        """``fn`` over the tasks of :meth:`_spans`: one runs here, several on the backend's
        threads (they read and write this process's arrays)."""
        return [fn(tasks[0])] if len(tasks) == 1 else self.backend.map(fn, tasks)

    def _chunked(self, fn: Callable[[list[_T]], list[_R]], items: list[_T]) -> list[_R]:
        """``fn`` of consecutive ranges of ``items`` (:meth:`_spans`), its results in order: a
        batch's per-user work (hashing, mask expansion) on the backend's threads, where it runs
        without the GIL; ``fn`` returns one result per item of its range."""
        parts = self._map_spans(fn, [items[lo:hi] for lo, hi in self._spans(len(items))])
        return [r for part in parts for r in part]

    def _check_upload(self, user_id: int) -> None:
        cfg = self._cfg()
        if user_id in self._uploaded:
            raise ProtocolError(f"user {user_id} already uploaded in round {cfg.round_id}")
        if user_id not in self._pending:
            raise ProtocolError(f"user {user_id} uploaded without retrieving in round {cfg.round_id}")

    def _open_uploads(self, items: list[tuple[int, bytes]], kind: str, size: int,
                      out: list[_T | SecembError]) -> tuple[list[int], list[int], list[memoryview]]:
        """The checked items of a batch of uploads (``kind`` messages of ``size`` body bytes
        for this server): their users, their indices into ``items`` and their bodies; each
        refused item's error is put in its place of ``out``.  A user listed twice: the second
        is refused as one that already uploaded.  Server 0 with verified uploads: an upload
        whose sketch proof share (:meth:`_proof_span`) holds an element not below ``p`` is
        refused (:class:`InvalidMessage`, :func:`~secemb.fss.sketchproof.check_message`'s); the
        shares of the batch's messages of the round's length are read as one buffer
        (:meth:`_proof_passes`), any other message's (if it opens) on its own."""
        cfg = self._cfg()
        opener = Opener(NAME, kind, self.party, cfg.round_id, size)
        params = sketch_params(cfg) if self.verify and self.party == 0 and kind == "upload" else None
        span = self._proof_span(size) if params is not None else slice(0)  # (read only with params)
        passes = self._proof_passes(items, HEADER_BYTES + size, span, params)

        def take(user_id: int, message: tuple[int, bytes], seen: set[int]) -> memoryview:
            if user_id in seen:
                raise ProtocolError(f"user {user_id} already uploaded in round {cfg.round_id}")
            self._check_upload(user_id)
            body = opener(message[1])
            if params is not None and not passes.get(message[0], False):
                sketchproof.check_message(params, body[span])  # raises where the batch's read failed
            return body

        return sift([(u, (i, m)) for i, (u, m) in enumerate(items)], out, take)

    def _proof_passes(self, items: list[tuple[int, bytes]], total: int, span: slice,
                      params: sketchproof.SketchParams | None) -> dict[int, bool]:
        """Server 0 with verified uploads (``params``; else empty): per index of ``items`` whose
        message is ``bytes`` of the round's ``total`` length (header and body), whether the sketch
        proof share -- at ``span`` of the body (:meth:`_proof_span`) -- holds field elements only,
        from one read of all of them (whether the message opens is :meth:`_open_uploads`' check)."""
        if params is None:
            return {}
        at = [i for i, (_, m) in enumerate(items) if type(m) is bytes and len(m) == total]
        share = slice(HEADER_BYTES + span.start, HEADER_BYTES + span.stop)
        ok = sketchproof.well_formed(params, [memoryview(items[i][1])[share] for i in at])
        return dict(zip(at, ok.tolist(), strict=True))

    def handle_upload(self, user_id: int, message: bytes) -> bytes | None:
        """Absorb an upload; what to forward (``None``: nothing, without relay)."""
        return result_or_raise(self.handle_upload_many([(user_id, message)])[0])

    def handle_upload_many(self, uploads: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """Check and absorb a batch of uploads (see :meth:`ServerRole.handle_upload_many`): the
        per-user array work -- reading the correction words (and, server 0 with relay, framing
        each forward), summing the dense shares -- in ranges of users on the backend's threads;
        the explicit dense shares spilled to disk together before anything is absorbed."""
        cfg = self._cfg()
        out: list[bytes | None | SecembError] = [None] * len(uploads)
        # bounded payloads without relay: server 0's upload ends with the device's commitment to its
        # server-1 dense share, which server 1 computes from its own (both digests cover it)
        commit = self._bound is not None and not self.relay
        size = upload_bytes(cfg, self.relay, self.party, verify=self.verify, commit=commit and self.party == 0)
        users, where, bodies = self._open_uploads(uploads, "upload", size, out)
        if not users:
            return out
        taken = self._map_spans(self._take_uploads, [bodies[lo:hi] for lo, hi in self._spans(len(bodies))])
        cws = [cw for part in taken for cw in part[0]]
        forwards = [f for part in taken for f in part[1]]
        spill = [v for part in taken for v in part[2]]
        dense = taken[0][3]
        for part in taken[1:]:
            dense += part[3]
        commits = None
        if commit:
            commits = ([bytes(b[size - DENSE_COMMIT_BYTES :]) for b in bodies] if self.party == 0 else
                       [dense_commitment(cfg.round_id, self._sigmas.get(u, b""), d)
                        for u, d in zip(users, spill, strict=True)])
        sketches = None
        if self.verify:  # server 0: the sketch proof shares; server 1 (without relay): the bindings tau
            at = rows_bytes(cfg) + cfg.dense_size * cfg.dtype.itemsize
            span = self._proof_span(size) if self.party == 0 else slice(at, at + BIND_BYTES)
            sketches = [bytes(b[span]) for b in bodies]
        self._absorb_many(users, cws, dense, spill=spill, commits=commits, sketches=sketches)
        if self._bound is not None and self.party == 0:
            if cfg.layout == "full":  # each user's derived c_u, given out from now on
                self._challenges.update({u: cast("bytes", self._absorbed[u].challenge) for u in users})
            else:  # one challenge for the batch, drawn once it is absorbed
                self._challenges.update(dict.fromkeys(users, system_rng(CHALLENGE_BYTES)))
        for i, fwd in zip(where, forwards, strict=True):
            out[i] = fwd
        return out

    def _take_uploads(self, bodies: list[memoryview]) -> tuple[list[np.ndarray], list[bytes | None],
                                                               list[np.ndarray], np.ndarray]:
        """A range of a batch's checked upload bodies: each one's correction words (ring (S, w),
        :meth:`_upload_words`), what to forward (``None``: nothing) and dense share (ring (P,),
        a view of the body), and the sum of their dense shares."""
        cfg = self._cfg()
        total = np.zeros(cfg.dense_size, cfg.dtype)
        cws: list[np.ndarray] = []
        forwards: list[bytes | None] = []
        dense: list[np.ndarray] = []
        at = rows_bytes(cfg)
        for body in bodies:
            cw, fwd = self._upload_words(body)
            cws.append(cw)
            forwards.append(fwd)
            dense.append(read_view(body, at, cfg.dtype, (cfg.dense_size,)))
            np.add(total, dense[-1], out=total)
        return cws, forwards, dense, total

    def _upload_words(self, body: memoryview) -> tuple[np.ndarray, bytes | None]:
        """A checked upload body's correction words (ring (S, w), a copy: the body may be a
        buffer the caller reuses) and what to forward (``None``: nothing, without relay)."""
        cfg = self._cfg()
        return read_array(body, 0, cfg.dtype, (cfg.slots, cfg.width))[0], None

    def _proof_span(self, size: int) -> slice:
        """Server 0, verified uploads: where the sketch proof share lies in an upload body of the
        round's length ``size`` -- after the words, the dense share and (relay) the binding and tag,
        before (bounded payloads without relay) the dense commitment; found once a batch, not once
        an upload."""
        end = size - (DENSE_COMMIT_BYTES if self._bound is not None and not self.relay else 0)
        return slice(end - sketch_params(self._cfg()).proof_bytes, end)

    # -- verification (verified uploads) -------------------------------------------------
    def upload_digests(self, users: list[int]) -> dict[int, bytes] | None:
        """Per uploaded user of ``users``, the 32-byte digest the two servers compare before
        the user enters the aggregate (``None`` without verified uploads).

        ``SHA-256(b"secemb-verify-upload" || u64 round || u64 user || K || CW || C)``: ``K`` is
        the SHA-256 of the user's shared key part and ``CW`` its aggregation correction words (without relay;
        with relay both servers hold the words the device authenticated, so ``CW`` is empty);
        ``C``, with bounded payloads and without relay, the commitment to its server-1 dense share
        (:func:`~secemb.protocols.secemb.bounds.dense_commitment`: sent to server 0, computed by
        server 1, so that the share is fixed before server 0's challenge), else empty.  For an honest
        user both servers compute the same digest, so the message tells the receiver nothing it
        could not compute itself; a user who sent the servers different key parts or correction
        words gets different digests (docs/security.md, "A malicious device: verified uploads");
        that its keys are point functions is the sketch proof's check (:meth:`verify_answer`,
        :meth:`verify_rejected`).

        Raises
        ------
        ProtocolError: a user of ``users`` did not upload in this round.
        """
        cfg = self._cfg()
        if not self.verify:
            return None
        out: dict[int, bytes] = {}
        for u in users:
            got = self._absorbed.get(u)
            if got is None or u not in self._uploaded:
                raise ProtocolError(f"user {u} did not upload in round {cfg.round_id}")
            check = cast("_Sketch", got.check)  # verifying: every user has one
            h = hashlib.sha256(VERIFY_DOMAIN + U64.pack(cfg.round_id) + U64.pack(u) + check.digest)
            if not self.relay:
                h.update(little(got.cw))
            if got.commit is not None:  # bounded payloads without relay: the server-1 dense share's commitment
                h.update(got.commit)
            out[u] = h.digest()
        return out

    def _uploaded_checks(self, users: list[int]) -> list[_Absorbed]:
        """What this server absorbed of each of ``users``, in order.

        Raises
        ------
        ProtocolError: a user of ``users`` did not upload in this round.
        """
        got = [self._absorbed.get(u) if type(u) is int else None for u in users]
        for u, a in zip(users, got, strict=True):
            if a is None or a.check is None:
                raise ProtocolError(f"user {u!r} did not upload in round {self._cfg().round_id}")
        return cast("list[_Absorbed]", got)

    def _sketch_inputs(self, users: list[int], absorbed: list[_Absorbed]) -> tuple[np.ndarray, np.ndarray,
                                                                                   np.ndarray]:
        """What this server's sketch verifier messages of absorbed ``users`` take beside the proof
        shares: its input shares of their sketch values (:func:`~secemb.fss.sketch.server_inputs_many`,
        uint64 (n, S, 3)), their sketch seeds and their query seeds
        (:func:`~secemb.protocols.secemb.checks.query_seed_rows`), each seed a row of uint8 (n, 16)."""
        cfg = self._cfg()
        checks = cast("list[_Sketch]", [a.check for a in absorbed])
        x = server_inputs_many([c.values for c in checks], self.party)
        seeds = bytes_rows([c.seed for c in checks], SKETCH_SEED_BYTES)
        return x, seeds, query_seed_rows(self._secret, cfg.round_id, users)

    def verify_answer(self, users: list[int]) -> bytes:
        """Server 1, verified uploads: its sketch check's answer for uploaded ``users`` (sent to
        server 0 with its upload digests): per user, in ascending order of user id (whatever the
        order of ``users``; :meth:`verify_rejected` reads it in that order), its verifier message
        (:func:`~secemb.fss.sketchproof.verifier_messages` on this server's input shares and the
        proof share the device's ``sigma`` expands to), or the refused marker
        (:func:`~secemb.fss.sketchproof.encode_verifier_messages`) where the binding ``tau`` the
        device sent is not this server's own :func:`~secemb.protocols.secemb.checks.binding` of its
        sketch seed and ``sigma`` (the device was given another seed, or ``tau`` was altered: it
        fails whatever its proof); ``n verifier_bytes`` bytes.  The query point is a PRF of the
        round's secret and the user (:func:`~secemb.protocols.secemb.checks.query_seeds`): answering
        again gives the same message.  Empty without verified uploads, at server 0 and for no users.

        Raises
        ------
        ProtocolError: a user of ``users`` did not upload to this server in this round.
        """
        if not self.verify or self.party != 1 or not users:
            return b""
        users = sorted(set(users))
        cfg = self._cfg()
        absorbed = self._uploaded_checks(users)
        x, seeds, queries = self._sketch_inputs(users, absorbed)
        sent = [self._sigmas.get(u, b"") for u in users]
        told = [a.sketch or b"" for a in absorbed]
        has = [len(s) == SIGMA_BYTES and len(t) == BIND_BYTES for s, t in zip(sent, told, strict=True)]
        # a missing sigma or tau as zeros: refused below
        sigmas = bytes_rows([s if len(s) == SIGMA_BYTES else bytes(SIGMA_BYTES) for s in sent], SIGMA_BYTES)
        taus = bytes_rows([t if len(t) == BIND_BYTES else bytes(BIND_BYTES) for t in told], BIND_BYTES)
        # bound: a sigma and a tau sent, and the tau this server's binding (every byte compared, no early exit)
        bound = np.array(has, bool) & ~rows_differ(taus, binding_rows(cfg.round_id, seeds, sigmas))
        params = sketch_params(cfg)
        messages = sketchproof.verifier_messages(params, x, sketchproof.server1_shares(params, sigmas), seeds, queries)
        return sketchproof.encode_verifier_messages(params, messages, ~bound)

    def verify_rejected(self, users: list[int], answer: bytes) -> set[int]:
        """Server 0, verified uploads: the users of ``users`` (uploaded; the list server 1 answered
        for with :meth:`verify_answer`, whose ``answer`` is in ascending order of user id whatever the
        order of ``users``) that fail the sketch check -- server 1 refused
        them (their binding ``tau`` did not match: a wrong sketch seed or ``sigma``), or
        :func:`~secemb.fss.sketchproof.verify` (:func:`~secemb.fss.sketchproof.decide` on this
        server's verifier messages -- its input shares and the proof shares the devices uploaded --
        and server 1's, the coefficients drawn once) rejects them.  They are left out of
        the aggregate like a digest mismatch.  The empty set without verified uploads, at server 1
        and for no users.

        Raises
        ------
        ProtocolError: a user of ``users`` did not upload to this server in this round.
        InvalidMessage: ``answer`` is malformed (not ``n verifier_bytes`` bytes, or a message
            neither field elements below ``p`` nor the refused marker).
        """
        if not self.verify or self.party != 0 or not users:
            return set()
        users = sorted(set(users))  # the answer's order (verify_answer)
        cfg = self._cfg()
        absorbed = self._uploaded_checks(users)
        params = sketch_params(cfg)
        v1, refused = sketchproof.parse_verifier_messages(params, answer, len(users))
        shares = sketchproof.parse(params, cast("list[bytes]", [a.sketch for a in absorbed]))
        x, seeds, queries = self._sketch_inputs(users, absorbed)
        ok = sketchproof.verify(params, x, shares, seeds, queries, v1) & ~refused
        return {u for u, good in zip(users, ok.tolist(), strict=True) if not good}

    # -- bounded payloads (issue 34 (b); secemb.protocols.secemb.bounds) -------------------
    def _bounded(self, party: int) -> rangeproof.RangeParams:
        """The round's range proof parameters, on server ``party``.

        Raises
        ------
        ProtocolError: bounded payloads are off, or this is the other server's step.
        """
        if self._bound is None:
            raise ProtocolError("bounded payloads are off")
        if self.party != party:
            raise ProtocolError(f"this bounded-payload step is server {party}'s")
        return self._bound

    def challenge(self, user_id: int) -> bytes:
        """Server 0: the 16-byte projection challenge of uploaded user ``user_id`` (drawn for its
        batch of uploads, :meth:`handle_upload_many`): what the device proves its bound for
        (:meth:`SecEmbUser.bound_proof`).

        Raises
        ------
        ProtocolError: bounded payloads are off, this is server 1, or the user did not upload.
        """
        self._bounded(0)
        got = self._challenges.get(user_id) if type(user_id) is int else None
        if got is None:
            raise ProtocolError(f"user {user_id!r} did not upload to server 0 in round {self._cfg().round_id}")
        return got

    def handle_proof(self, user_id: int, message: bytes) -> None:
        """Server 0: keep a device's bound proof (:meth:`handle_proof_many` of one)."""
        result_or_raise(self.handle_proof_many([(user_id, message)])[0])

    def handle_proof_many(self, proofs: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """Server 0: keep each device's bound proof (a ``bound_proof`` message: the range
        proof's message to server 0) until :meth:`bound_request`.  Per item ``None``, or the
        error that refuses it and keeps nothing: a malformed message (wrong length, round, kind
        or party; a field element not below ``p``), a user that did not upload to this server, a
        second proof of a user.

        Raises
        ------
        ProtocolError: bounded payloads are off, or this is server 1.
        """
        cfg = self._cfg()
        params = self._bounded(0)
        out: list[SecembError | None] = [None] * len(proofs)
        size = params.message_bytes(0)
        opener = Opener(NAME, "bound_proof", 0, cfg.round_id, size)
        bodies = self._proof_bodies(proofs, params, opener)
        if bodies is not None:  # every item taken: no error to place
            self._proofs.update(zip([u for u, _ in proofs], bodies, strict=True))
            return out
        # the elements of the batch's messages of the round's length, checked in one read (whether a message
        # opens is take's check): refused here, not at verification
        at = [i for i, (_, m) in enumerate(proofs) if type(m) is bytes and len(m) == HEADER_BYTES + size]
        passes = dict(zip(at, rangeproof.well_formed(params, [memoryview(proofs[i][1])[HEADER_BYTES:] for i in at])
                          .tolist(), strict=True))

        def take(user_id: int, message: tuple[int, bytes], seen: set[int]) -> bytes:
            if user_id not in self._challenges:
                raise ProtocolError(f"user {user_id} sent a bound proof without an upload in round {cfg.round_id}")
            if user_id in seen or user_id in self._proofs:
                raise ProtocolError(f"user {user_id} already sent its bound proof in round {cfg.round_id}")
            body = bytes(opener(message[1]))
            if not passes.get(message[0], False):
                rangeproof.check_message(params, 0, body)  # raises where the batch's read failed
            return body

        users, _, bodies = sift([(u, (i, m)) for i, (u, m) in enumerate(proofs)], out, take)
        self._proofs.update(zip(users, bodies, strict=True))
        return out

    def _proof_bodies(self, proofs: list[tuple[int, bytes]], params: rangeproof.RangeParams,
                      opener: Opener) -> list[bytes] | None:
        """The bodies of a batch of proofs that :meth:`handle_proof_many` takes whole -- distinct
        users in range that uploaded and sent no proof yet, each message ``bytes`` of the round's
        length with the header ``opener`` takes (the first one opened, the others equal to it byte for
        byte) and well formed (:func:`~secemb.fss.rangeproof.well_formed`) -- checked by C-level maps
        over the batch, not one Python step a device; None where any item fails a check (then each
        item is taken or refused on its own, naming its fault)."""
        users, msgs = [u for u, _ in proofs], [m for _, m in proofs]
        total = HEADER_BYTES + params.message_bytes(0)
        if not proofs or batch_nbytes(msgs) != total or not set(map(type, users)) <= {int}:
            return None
        distinct = set(users)
        if (len(distinct) != len(users) or not distinct <= self._challenges.keys()
                or not distinct.isdisjoint(self._proofs) or len(set(map(_HEAD, msgs))) != 1):
            return None
        try:  # the extremes' range (the ids are ints), and the one header
            check_user(min(users)), check_user(max(users)), opener(msgs[0])
        except SecembError:
            return None
        bodies = list(map(_BODY, msgs))
        return bodies if bool(rangeproof.well_formed(params, bodies).all()) else None

    def _bound_contexts(self, users: list[int], challenges: list[bytes]) -> list[bytes]:
        """Each user's proof context (:func:`~secemb.protocols.secemb.bounds.context`) under its
        challenge, from its key digest ``K``."""
        return contexts(self._cfg().round_id, challenges,
                        [cast("_Sketch", self._absorbed[u].check).digest for u in users])

    def _bound_projections(self, users: list[int], challenges: list[bytes]) -> np.ndarray:
        """This server's projections (ring (n, ROWS)) of absorbed ``users``' vectors ``x_b = S_b ||
        d_b``, each under its challenge.  Cuckoo layout: one
        :func:`~secemb.protocols.secemb.bounds.projected_shares` call, which forms no vector, on
        the payload shares from the payload sums of the retrieval's walk with the user's correction
        words, or, for users whose walk kept none (the gpu backend's), from one walk of their keys
        here; the dense shares read back (:meth:`_dense_shares`).  Full layout: ``S_b`` is the user's
        share of what its keys add to each row, under the user's own derived challenge ``c_u``
        whatever ``challenges`` names (server 1 answers nothing useful where they differ:
        :meth:`bound_answer`): the projections kept since its upload (:meth:`_project_uploads`), or,
        for users whose retrieval's walk kept none (the gpu backend's), from a walk of its keys here
        (:func:`~secemb.protocols.secemb.bounds.contribution`) and its dense share read back."""
        cfg = self._cfg()
        got = [self._absorbed[u] for u in users]
        if cfg.layout == "full":  # per row: what each user's keys add to every row of the aggregate
            out = np.empty((len(got), ROWS), cfg.dtype)
            walked = [j for j, a in enumerate(got) if a.projected is None]
            for j, a in enumerate(got):
                if a.projected is not None:
                    out[j] = a.projected
            for j in walked:  # one user's (m, w) at a time
                a = got[j]
                rows = contribution(cfg, self.party, a.keys.path, a.cw)[None]
                dense = self._dense_shares([users[j]])[0].reshape(1, cfg.dense_size)
                out[j] = projected([cast("bytes", a.challenge)], upload_vector(rows, dense))[0]
            return out
        sums = [a.sums for a in got]
        walked = [j for j, s in enumerate(sums) if s is None]
        if walked:
            more = payload_sums(cfg, self.party, fss.PathKeys.concat([got[j].keys.path for j in walked]))
            for i, j in enumerate(walked):
                keys = slice(i * cfg.slots, (i + 1) * cfg.slots)
                sums[j] = PayloadSums(more.key_conv[keys], more.t_count[keys])
        return projected_shares(challenges, self.party, cast("list[PayloadSums]", sums), [a.cw for a in got],
                                self._dense_shares(users))

    def _verifier_messages(self, params: rangeproof.RangeParams, shares: rangeproof.ProofShares, users: list[int],
                           challenges: list[bytes], contexts: list[bytes], query: bytes, *,
                           parts: np.ndarray | None = None) -> np.ndarray:
        """This server's verifier messages (uint64 (n, verifier_length)) for ``users`` (their
        parsed ``shares`` and proof ``contexts``, in order; ``parts``, if given, this server's own
        joint-randomness parts of them, the rows of uint8 (n, 32), as
        :func:`~secemb.fss.rangeproof.verifier_messages` takes them):
        :func:`~secemb.fss.rangeproof.verifier_messages` on their projections (:meth:`_bound_projections`),
        in ranges of users on the backend's threads (:meth:`_spans`: one range on a serial backend; the
        kernels of both steps run without the GIL).  A device's messages do not depend on the others of
        its batch, so the ranges give the messages of one call.  A range's verifier is prepared
        (:func:`~secemb.fss.rangeproof.prepare_verifier`: its checks, the query and the joint randomness)
        before its projections, whose passes over the payload sums, correction words and expanded rows
        (megabytes) evict the caches that Python steps run from: after them only the verifier's compiled
        call is left."""

        def span(bounds: tuple[int, int]) -> np.ndarray:
            lo, hi = bounds
            prepared = rangeproof.prepare_verifier(params, self.party, shares.rows(lo, hi), contexts[lo:hi], query,
                                                   parts=None if parts is None else parts[lo:hi])
            return prepared.messages(self._bound_projections(users[lo:hi], challenges[lo:hi]))

        messages = self._map_spans(span, self._spans(len(users)))
        return messages[0] if len(messages) == 1 else np.concatenate(messages)

    def bound_request(self, users: list[int]) -> bytes:
        """Server 0: the bound check's request to server 1 for uploaded ``users`` (the ones
        :meth:`upload_digests` covers), once their proofs are in: a fresh 16-byte query seed
        ``q``, then per user that sent a proof ``u64 user || c || part_0 || part_1`` (its
        challenge, :func:`~secemb.fss.rangeproof.hint_of` its proof and the proof's own
        ``part_1``, which binds ``c`` for server 1: :meth:`bound_answer`); a ``bound_request``
        message of ``16 + 88 n`` body bytes.  The users without a proof are rejected by
        :meth:`bound_rejected`.  A new request replaces the last one.

        Raises
        ------
        ProtocolError: bounded payloads are off, this is server 1, or a user of ``users`` did
            not upload in this round.
        """
        cfg = self._cfg()
        params = self._bounded(0)
        asked = set(users)
        if not asked <= self._challenges.keys():  # checked as a set; the first fault named in order
            u = next(u for u in users if u not in self._challenges)
            raise ProtocolError(f"user {u} did not upload in round {cfg.round_id}")
        proved = sorted(asked & self._proofs.keys())
        challenges = [self._challenges[u] for u in proved]
        contexts = self._bound_contexts(proved, challenges)
        # the bodies handle_proof_many took (each of the round's length, its elements checked there): not again
        shares = rangeproof.parse_taken(params, [self._proofs[u] for u in proved])
        hints = rangeproof.own_part_rows(params, shares, contexts)  # part_0, hashed once: bound_rejected uses it
        query = system_rng(QUERY_BYTES)
        self._asked = _Asked(proved, query, asked - set(proved), challenges, contexts, shares, hints)
        rows = np.empty((len(proved), 8 + CHALLENGE_BYTES + 2 * rangeproof.PART_BYTES), np.uint8)
        rows[:, :8] = np.array(proved, "<u8").view(np.uint8).reshape(-1, 8)
        rows[:, 8 : 8 + CHALLENGE_BYTES] = np.frombuffer(b"".join(challenges), np.uint8).reshape(-1, CHALLENGE_BYTES)
        rows[:, 8 + CHALLENGE_BYTES : -rangeproof.PART_BYTES] = hints
        rows[:, -rangeproof.PART_BYTES :] = shares.hints  # each proof's own part_1, as the device sent it
        return frame(NAME, "bound_request", 1, cfg.round_id, query, rows.data)

    def bound_answer(self, request: bytes) -> bytes:
        """Server 1: its verifier messages for server 0's :meth:`bound_request` -- per user, in
        the request's order, :func:`~secemb.fss.rangeproof.verifier_messages` of its proof
        shares (expanded from the device's ``sigma`` with server 0's ``part_0``) on its
        projections of its payload and dense shares under the user's challenge; a
        ``bound_answer`` message of ``n * verifier_bytes`` body bytes.  A user's messages are
        given once a round (so server 0 cannot query a proof at several points).  A user whose
        forwarded ``part_1`` is not the one its ``sigma`` gives under the named challenge
        (:func:`~secemb.fss.rangeproof.seed_part`) gets a message of zero field elements and
        this server's ``jr``, which fails at server 0: the device proved under another
        challenge, or server 0 swapped it -- answered, the relation's share would open a linear
        function of the device's projections under both challenges (finding C1, session 20).  So
        does, in the full layout, a user whose named challenge is not this server's own derivation
        of its ``c_u`` (:meth:`_bound_challenges`: server 0 cannot choose it, and this server's
        projections are under its own).

        Raises
        ------
        ProtocolError: bounded payloads are off, this is server 0, or a user of the request
            did not upload to this server or was asked before (nothing is answered).
        InvalidMessage: the request is malformed (a user listed twice, a body not ``16 + 88 n``).
        """
        cfg = self._cfg()
        params = self._bounded(1)
        entry = 8 + CHALLENGE_BYTES + 2 * rangeproof.PART_BYTES
        count = max(0, (len(request) - HEADER_BYTES - QUERY_BYTES) // entry) if isinstance(request, bytes) else 0
        body = open_message(request, NAME, "bound_request", 1, cfg.round_id, QUERY_BYTES + entry * count)
        query = bytes(body[:QUERY_BYTES])
        # the entries' fields by column: u64 user || c || part_0 || part_1
        table = np.frombuffer(body, np.uint8, entry * count, QUERY_BYTES).reshape(count, entry)
        users = table[:, :8].copy().view("<u8")[:, 0].tolist()
        distinct = set(users)
        if len(distinct) != count:
            raise InvalidMessage("bound_request: a user is listed twice")
        if not (distinct <= self._absorbed.keys() and distinct <= self._sigmas.keys()) \
                or not distinct.isdisjoint(self._answered):  # checked as sets; the first fault named in order
            for u in users:
                if u not in self._absorbed or u not in self._sigmas:
                    raise ProtocolError(f"user {u} did not upload to server 1 in round {cfg.round_id}")
                if u in self._answered:
                    raise ProtocolError(f"user {u}'s bound proof was already checked in round {cfg.round_id}")
        hint_at = 8 + CHALLENGE_BYTES
        challenges = row_bytes(table[:, 8:hint_at])
        sigmas = [self._sigmas[u] for u in users]  # SIGMA_BYTES each, as the requests carried them
        msgs = np.empty((count, SIGMA_BYTES + rangeproof.PART_BYTES), np.uint8)  # each one's sigma || part_0
        msgs[:, :SIGMA_BYTES] = bytes_rows(sigmas, SIGMA_BYTES)
        msgs[:, SIGMA_BYTES:] = table[:, hint_at : hint_at + rangeproof.PART_BYTES]
        shares = rangeproof.parse(params, 1, msgs)  # the batch's messages as one array
        contexts = self._bound_contexts(users, challenges)
        own = rangeproof.seed_part_rows(contexts, sigmas)
        # unbound: the part_1 server 0 forwarded is not this server's, or (full layout) the named challenge is not
        # this server's c_u; each compared whole, every byte (no early exit), as the rows of the request's table
        unbound = rows_differ(own, table[:, hint_at + rangeproof.PART_BYTES :])
        if cfg.layout == "full":  # every absorbed user holds its derived c_u there (as challenge() serves it)
            derived = [cast("bytes", self._absorbed[u].challenge) for u in users]
            unbound |= rows_differ(table[:, 8:hint_at], bytes_rows(derived, CHALLENGE_BYTES))
        v1 = self._verifier_messages(params, shares, users, challenges, contexts, query, parts=own)  # the last step
        v1[unbound, : params.opened_length] = 0
        self._answered.update(users)
        self._release_sums(users)
        return frame(NAME, "bound_answer", 0, cfg.round_id, little(v1))

    def _release_sums(self, users: list[int]) -> None:
        """Drop checked ``users``' payload sums: a user's proof is verified once, so they are not
        read again (were they, :meth:`_bound_projections` would walk the keys), and the round's
        later steps reuse their memory (a batch's sums are freed with its last user's)."""
        for u in users:
            self._absorbed[u].sums = None

    def unproved(self, users: list[int]) -> set[int]:
        """Server 0: the users of ``users`` that sent no kept proof (bounded payloads).  They are
        left out like a dropout: a proof still on its way when the round closes is not a failed
        one, so the node counts no rejection for them (:meth:`bound_rejected` lists them too).

        Raises
        ------
        ProtocolError: bounded payloads are off, or this is server 1.
        """
        self._bounded(0)
        return set(users) - self._proofs.keys()

    def bound_rejected(self, answer: bytes) -> set[int]:
        """Server 0: the users of its last :meth:`bound_request` that fail the bound check --
        :func:`~secemb.fss.rangeproof.decide` on its own verifier messages and server 1's
        ``answer`` -- and those that sent no proof; they are left out of the aggregate like a
        digest mismatch.

        Raises
        ------
        ProtocolError: bounded payloads are off, this is server 1, or no request is pending.
        InvalidMessage: the answer is malformed (then the request stays pending).
        """
        cfg = self._cfg()
        params = self._bounded(0)
        asked = self._asked
        if asked is None:
            raise ProtocolError("bound_rejected before bound_request")
        users = asked.users
        body = open_message(answer, NAME, "bound_answer", 0, cfg.round_id, len(users) * params.verifier_bytes)
        v1 = rangeproof.parse_verifier_messages(params, body, len(users))  # read from the opened body, one copy
        v0 = self._verifier_messages(params, asked.shares, users, asked.challenges, asked.contexts, asked.query,
                                     parts=asked.hints)  # the request's shares and parts, parsed and hashed once
        ok = rangeproof.decide(params, v0, v1)
        self._asked = None
        self._release_sums(users)
        return asked.unproved | {u for u, good in zip(users, ok.tolist(), strict=True) if not good}

    # -- aggregation ---------------------------------------------------------------------
    def _closed(self, include: list[int] | None) -> tuple[list[int], np.ndarray, np.ndarray]:
        """The included users (sorted) and the sparse and dense aggregates over them; every
        other user that retrieved counts as silent (its folded part is recomputed and removed,
        its upload left out).  State is not changed; the result is kept for the same users
        until the next change (callers must not write to it)."""
        cfg = self._cfg()
        users = self._include(include, self._uploaded, cfg.round_id)
        if self._closed_cache is not None and self._closed_cache[0] == tuple(users):
            return self._closed_cache[1]
        inside = set(users)
        left_out = [u for u in self._absorbed if u not in inside]
        silent = [p.keys for p in self._pending.values()] + [self._absorbed[u].keys for u in left_out]
        with self._close_lock:  # the cuckoo layout's bucket form is the role's _close_buffer until scattered
            sparse = self._summed(users)
            if silent:  # their folded part only: no check
                sparse -= self._evaluate(fss.DPFKeys.concat(silent))[2]
            if cfg.layout != "full":
                sparse = self._scatter(sparse)
        dense = self._dense.copy()
        for u in left_out:  # one share in memory at a time
            dense -= self._dense_share(u)
        closed = (users, sparse, dense)
        self._closed_cache = (tuple(users), closed)
        return closed

    def included_users(self) -> list[int]:
        """Sorted ids of the users whose uploads the aggregate holds (``include=None``)."""
        return sorted(self._uploaded)

    def aggregate_share(self, include: list[int] | None = None) -> bytes:
        cfg = self._cfg()
        users, sparse, dense = self._closed(include)
        # the table-sized share is framed straight from its array (little-endian: no copy), copied once
        return frame(NAME, "aggregate_share", self.party, cfg.round_id, users_bytes(users), little(sparse),
                     little(dense))

    def combine(self, peer_share: bytes, include: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        cfg = self._cfg()
        users, sparse, dense = self._closed(include)
        body = open_message(peer_share, NAME, "aggregate_share", 1 - self.party, cfg.round_id,
                            share_bytes(cfg, len(users)))
        count = U64.unpack_from(body, 0)[0]
        peer_users = np.frombuffer(body, "<u8", len(users), 8).tolist()  # u64 ids after the count, as ints
        if count != len(users) or peer_users != users:
            raise ProtocolError("the two servers aggregated different sets of users")
        off = 8 + 8 * len(users)
        # the peer's table-sized share read in place (a copy only where the host is big-endian)
        size = cfg.num_items * cfg.width
        sparse1 = read_view(body, off, cfg.dtype, (cfg.num_items, cfg.width)).astype(cfg.dtype, copy=False)
        dense1, _ = read_array(body, off + size * cfg.dtype.itemsize, cfg.dtype, (cfg.dense_size,))
        # the table-sized sum in ranges of rows on the backend's threads (:meth:`_spans`)
        total = np.empty_like(sparse)

        def add(span: tuple[int, int]) -> None:
            lo, hi = span
            np.add(sparse[lo:hi], sparse1[lo:hi], out=total[lo:hi])

        self._map_spans(add, self._spans(cfg.num_items))
        return total, reconstruct(dense, dense1)
