"""The federated round loop: drives any :class:`~secemb.protocols.base.Protocol` through a
transport, trains a :class:`~secemb.models.base.RecModel`, and measures what crossed the wire.

One run (see docs/training.md for every choice and its reason)::

    m'     given, or Eq. 11: each user additively shares its rating count with the two servers,
           which add the shares up and open only the mean; m' = ceil(alpha * mean) in [1, m].
    epoch  a seeded permutation of the users with >= 1 training rating, cut into rounds of
           ``users_per_round``.
    round  both servers begin the round with their fixed-point encoded copy of the table;
           per user: PadOrTruncIdx -> retrieval request -> servers -> replies -> rows;
           dense vector (public) from server 0; local step on the real rows (private params
           move on the device); row gradients placed at their request positions (padding rows
           zero), clipped and encoded for n_p = users in the round; upload -> servers.
           Server 1's aggregate share -> server 0 -> combine -> decode -> divide by n_p ->
           server Adam -> server 0 sends the new public model to server 1.

All training randomness (initialization, epoch permutations, padding and truncation draws)
comes from one ``numpy.random.default_rng(seed)``, consumed in the same order whatever the
protocol; cryptographic randomness is the protocol's own.  So a plaintext run and a secure run
with one seed produce bit-identical models (the ring sums are exact).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from secemb.data import RatingData, by_user
from secemb.errors import InvalidParameters, SecembError
from secemb.models.base import RecModel, UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols.base import Protocol, RoundConfig, ServerRole
from secemb.ring import FixedPoint
from secemb.sharing import reconstruct, share
from secemb.training import messages
from secemb.metrics import rmse  # re-exported: secemb.training.rmse
from secemb.models.batch import rating_batch
from secemb.training.local import distinct_counts, distinct_items, local_update
from secemb.training.optimizer import ServerAdam
from secemb.protocols.placement import PaddedRequest, place
from secemb.transport.inprocess import (
    DOWNLOAD,
    SERVER,
    UPLOAD,
    InProcessTransport,
    user_endpoint,
)

__all__ = [
    "STAGES",
    "EpochStats",
    "RoundStats",
    "TrainConfig",
    "TrainResult",
    "VerificationError",
    "model_sha256",
    "rmse",
    "run_config",
    "secure_m_prime",
    "train",
]

STAGE_COUNT = "count"
STAGE_RETRIEVAL = "retrieval"
STAGE_DENSE = "dense"
STAGE_UPLOAD = "upload"
STAGE_AGGREGATE = "aggregate"
STAGE_SYNC = "sync"
STAGES = (STAGE_COUNT, STAGE_RETRIEVAL, STAGE_DENSE, STAGE_UPLOAD, STAGE_AGGREGATE, STAGE_SYNC)

S0, S1 = "server0", "server1"


class VerificationError(SecembError):
    """``verify=True`` found the protocol's output differing from the direct computation."""


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class TrainConfig:
    """Parameters of the round loop (the model's own hyperparameters live in the model).

    Attributes
    ----------
    epochs: passes over the users, >= 1.
    users_per_round: users per round (n_p; the last round of an epoch may have fewer).
    m_prime: public request size m'; ``None`` chooses it by Eq. 11 with ``alpha``.
    alpha: multiplier of the mean rating count in Eq. 11 (2.5 reproduces the paper's m' on
        ML-100K/ML-1M/ML-10M within about 10%).
    seed: seed of the training generator.
    verify: check every round's retrieval and aggregate against the direct computation.
    lr: Adam step size of the servers and of every device.
    beta1, beta2, eps: Adam constants (servers and devices).
    lazy_adam: server Adam updates only rows with a non-zero aggregate (see optimizer.py).
    ring_bits, frac_bits: fixed-point ring Z_{2^k} and fractional bits.
    schedule: ``"interleaved"`` (each user retrieves, trains and uploads before the next
        starts) or ``"staged"`` (all retrievals of the round, then all uploads); both give the
        same model.
    rating_range: public rating scale ``(lo, hi)``: predictions are clipped to it for RMSE
        and the model may seed its global bias with it; ``None`` takes the min and max rating
        of the training set (the scale of MovieLens, 1-5, is public anyway).
    """

    epochs: int = 1
    users_per_round: int = 100
    m_prime: int | None = None
    alpha: float = 2.5
    seed: int = 0
    verify: bool = False
    lr: float = 0.025
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    lazy_adam: bool = True
    ring_bits: int = 32
    frac_bits: int = 16
    schedule: Literal["interleaved", "staged"] = "staged"
    rating_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        def is_int(x: object) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        if not is_int(self.epochs) or self.epochs < 1:
            raise InvalidParameters(f"epochs must be an int >= 1, got {self.epochs!r}")
        if not is_int(self.users_per_round) or self.users_per_round < 1:
            raise InvalidParameters(
                f"users_per_round must be an int >= 1, got {self.users_per_round!r}"
            )
        if self.m_prime is not None and (not is_int(self.m_prime) or self.m_prime < 1):
            raise InvalidParameters(f"m_prime must be None or an int >= 1, got {self.m_prime!r}")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise InvalidParameters(f"alpha must be a positive float, got {self.alpha!r}")
        if not is_int(self.seed) or self.seed < 0:
            raise InvalidParameters(f"seed must be an int >= 0, got {self.seed!r}")
        if self.schedule not in ("interleaved", "staged"):
            raise InvalidParameters(
                f"schedule must be 'interleaved' or 'staged', got {self.schedule!r}"
            )
        if self.rating_range is not None:
            lo, hi = self.rating_range
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise InvalidParameters(
                    f"rating_range must be (lo, hi) with lo < hi, got {self.rating_range!r}"
                )
        FixedPoint(self.ring_bits, self.frac_bits)  # validates both
        self.adam()  # validates lr and the Adam constants

    def adam(self) -> AdamConfig:
        """The Adam hyperparameters shared by the servers and the devices."""
        return AdamConfig(self.lr, self.beta1, self.beta2, self.eps)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class EpochStats:
    """Metrics after one epoch: test RMSE (predictions clipped to the rating scale; ``None``
    with no test data), the mean local objective over the epoch's participations, and the
    RMSE on the validation data if :func:`train` was given any (for choosing an epoch without
    looking at the test data)."""

    epoch: int
    test_rmse: float | None
    train_loss: float
    val_rmse: float | None = None


@dataclass(frozen=True)
class RoundStats:
    """What one round cost; passed to the ``on_round`` callback."""

    round_id: int
    epoch: int
    users: int
    upload_bytes: int
    download_bytes: int
    server_bytes: int
    user_s: float
    server0_s: float
    server1_s: float
    optimizer_s: float
    verified: bool
    train_loss: float


@dataclass
class TrainResult:
    """Outcome of :func:`train`.  :meth:`to_dict` gives the documented JSON document.

    Communication is ``len()`` of the bytes that crossed the transport.  Per-user figures are
    totals divided by the number of user participations (one user in one round).  The one-time
    Eq. 11 count exchange is reported apart (``count_bytes_per_user``), as is server-to-server
    traffic (aggregate share and model sync).
    """

    config: dict[str, Any]
    epochs: list[EpochStats]
    upload_bytes_per_user_round: float
    download_bytes_per_user_round: float
    server_bytes_per_round: float
    count_bytes_per_user: float
    user_ms_per_round: float
    server_s_per_round: float
    server0_s_per_round: float
    server1_s_per_round: float
    optimizer_s_per_round: float
    verified_rounds: int
    rounds: int
    participations: int
    truncated_participations: int
    model_sha256: str
    wall_s: float
    table: np.ndarray = field(repr=False)
    dense: np.ndarray = field(repr=False)
    user_store: UserStore = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The result document (the schema is documented in docs/training.md)."""
        return {
            "config": dict(self.config),
            "epochs": [asdict(e) for e in self.epochs],
            "comm": {
                "upload_bytes_per_user_round": self.upload_bytes_per_user_round,
                "download_bytes_per_user_round": self.download_bytes_per_user_round,
            },
            "time": {
                "user_ms_per_round": self.user_ms_per_round,
                "server_s_per_round": self.server_s_per_round,
            },
            "verified_rounds": self.verified_rounds,
            "rounds": self.rounds,
            "model_sha256": self.model_sha256,
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), **kwargs)

    @property
    def final_rmse(self) -> float | None:
        """Test RMSE after the last epoch."""
        return self.epochs[-1].test_rmse if self.epochs else None


def model_sha256(table: np.ndarray, dense: np.ndarray) -> str:
    """SHA-256 of the public model: ``table`` (row-major) then ``dense``, as little-endian
    float64 bytes."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(table, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(dense, dtype="<f8").tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- servers


class _Server:
    """One server's training-side state: the protocol role and its copy of the public model."""

    def __init__(self, role: ServerRole, table: np.ndarray, dense: np.ndarray) -> None:
        self.role = role
        self.table = table
        self.dense = dense
        self.busy = 0.0  # seconds spent in role calls this round

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.busy += time.perf_counter() - t


def secure_m_prime(
    counts: np.ndarray,
    alpha: float,
    num_items: int,
    transport: InProcessTransport,
    fp: FixedPoint,
) -> tuple[int, float]:
    """Eq. 11 of the paper with additively shared counts.

    Every user ``u`` with ``counts[u] > 0`` splits its count into two ring shares (fresh OS
    randomness, :func:`secemb.sharing.share`) and sends one to each server (stage ``count``).
    Each server adds up what it received; server 1 sends its sum to server 0, which opens only
    the total.  Returns ``(m', mean)`` with ``m' = ceil(alpha * total / n)`` clipped to
    ``[1, num_items]``, ``n`` the (public) number of users who sent a count.
    """
    dt = fp.dtype
    users = np.flatnonzero(counts > 0)
    if users.size == 0:
        raise InvalidParameters("no user has a training rating")
    if int(counts.sum()) >= 2 ** (fp.ring_bits - 1):
        raise InvalidParameters("total rating count does not fit the ring")
    for u in users:
        s0, s1 = share(np.array([counts[u]], dtype=dt))
        name = user_endpoint(int(u))
        transport.send(name, S0, messages.encode_count(s0, fp.ring_bits), stage=STAGE_COUNT)
        transport.send(name, S1, messages.encode_count(s1, fp.ring_bits), stage=STAGE_COUNT)
    acc = [np.zeros(1, dtype=dt), np.zeros(1, dtype=dt)]
    for party, server in enumerate((S0, S1)):
        for u in users:
            acc[party] += messages.decode_count(
                transport.recv(server, user_endpoint(int(u))), ring_bits=fp.ring_bits
            )
    transport.send(S1, S0, messages.encode_count(acc[1], fp.ring_bits), stage=STAGE_COUNT)
    peer = messages.decode_count(transport.recv(S0, S1), ring_bits=fp.ring_bits)
    total = int(reconstruct(acc[0], peer)[0])
    mean = total / users.size
    m_prime = min(max(math.ceil(alpha * mean), 1), num_items)
    return m_prime, mean


# --------------------------------------------------------------------------- the loop


@dataclass
class _UserRound:
    """A user's in-flight state between retrieval and upload (device side)."""

    user: int
    role: Any
    request: PaddedRequest
    num_distinct: int
    item_pos: np.ndarray  # rating -> position among the user's distinct items
    ratings: np.ndarray
    rows_ring: np.ndarray | None = None
    dense_ring: np.ndarray | None = None


@dataclass
class _Run:
    """Everything a round needs from the run."""

    model: RecModel
    protocol: Protocol
    tp: InProcessTransport
    fp: FixedPoint
    rng: np.random.Generator
    per_user: Any
    store: UserStore
    server0: _Server
    server1: _Server
    m_prime: int
    cfg: TrainConfig


class _Round:
    """One round: retrieval and upload per user, then aggregation, optimizer step and sync."""

    def __init__(self, run: _Run, rc: RoundConfig, n_p: int) -> None:
        self.run = run
        self.rc = rc
        self.n_p = n_p
        self.user_s = 0.0
        self.truncated = 0
        self.losses: list[float] = []
        fp, s0, s1 = run.fp, run.server0, run.server1
        s0.busy = s1.busy = 0.0
        # each server encodes its own copy of the public model
        self.enc0 = fp.encode(s0.table)
        s0.call(s0.role.begin_round, rc, self.enc0)
        s1.call(s1.role.begin_round, rc, fp.encode(s1.table))
        self.dense_msg = messages.encode_dense(rc.round_id, fp.encode(s0.dense), rc.ring_bits)
        if run.cfg.verify:
            self.direct_sparse = np.zeros((rc.num_items, rc.width), dtype=fp.dtype)
            self.direct_dense = np.zeros(rc.dense_size, dtype=fp.dtype)

    def retrieve(self, users: list[int]) -> list[_UserRound]:
        """Users place their requests and retrieve their rows and the dense vector; each
        server handles the users' requests as one batch (the order of messages on the
        transport is per user, as in a deployment)."""
        run, rc = self.run, self.rc
        tp, s0, s1 = run.tp, run.server0, run.server1
        states: list[_UserRound] = []
        for u in users:
            t = time.perf_counter()
            items, ratings = run.per_user.of(u)
            uniq, item_pos = distinct_items(items)
            req = place(rc, uniq, run.rng)
            role = run.protocol.make_user(rc)
            q0, q1 = role.retrieval_request(req.indices)
            self.user_s += time.perf_counter() - t
            self.truncated += int(req.kept.size < uniq.size)
            tp.send(user_endpoint(u), S1, q1, stage=STAGE_RETRIEVAL)
            tp.send(user_endpoint(u), S0, q0, stage=STAGE_RETRIEVAL)
            states.append(_UserRound(u, role, req, int(uniq.size), item_pos, ratings))
        a1 = _raise_any(s1.call(s1.role.handle_retrieval_many, [(u, tp.recv(S1, user_endpoint(u))) for u in users]))
        a0 = _raise_any(s0.call(s0.role.handle_retrieval_many, [(u, tp.recv(S0, user_endpoint(u))) for u in users]))
        if run.protocol.relay:  # server 0 forwards, server 1 answers it, server 0 replies
            for fwd in a0:
                tp.send(S0, S1, fwd, stage=STAGE_RETRIEVAL)
            masked = _raise_any(s1.call(s1.role.relay_retrieval_many, [(u, tp.recv(S1, S0)) for u in users]))
            for m in masked:
                tp.send(S1, S0, m, stage=STAGE_RETRIEVAL)
            a0 = [s0.call(s0.role.complete_retrieval, u, tp.recv(S0, S1)) for u in users]
        for st, r0, r1 in zip(states, a0, a1):
            name = user_endpoint(st.user)
            tp.send(S0, name, r0, stage=STAGE_RETRIEVAL)
            if r1 is not None:
                tp.send(S1, name, r1, stage=STAGE_RETRIEVAL)
            tp.send(S0, name, self.dense_msg, stage=STAGE_DENSE)
            t = time.perf_counter()
            st.rows_ring = st.role.retrieval_result(tp.recv(name, S0), None if r1 is None else tp.recv(name, S1))
            st.dense_ring = messages.decode_dense(
                tp.recv(name, S0), round_id=rc.round_id, dense_size=rc.dense_size, ring_bits=rc.ring_bits
            )
            self.user_s += time.perf_counter() - t
            if run.cfg.verify:
                self._verify_rows(st)
        return states

    def _verify_rows(self, st: _UserRound) -> None:
        rc, req = self.rc, st.request
        expected = self.enc0[np.maximum(req.indices, 0)]
        expected[req.indices < 0] = 0
        got = np.asarray(st.rows_ring)
        if got.shape != expected.shape or got.dtype != expected.dtype:
            raise VerificationError(
                f"round {rc.round_id}, user {st.user}: retrieved rows have dtype {got.dtype} "
                f"shape {got.shape}, expected {expected.dtype} {expected.shape}"
            )
        if not np.array_equal(got, expected):
            first = int(np.flatnonzero(np.any(got != expected, axis=1))[0])
            raise VerificationError(
                f"round {rc.round_id}, user {st.user}: retrieved row {first} (item "
                f"{int(req.indices[first])}) differs from the encoded table"
            )

    def train_and_upload(self, st: _UserRound) -> None:
        """Local step on the real rows, PadOrTruncEmb, encode, upload."""
        run, rc = self.run, self.rc
        tp, fp, s0, s1 = run.tp, run.fp, run.server0, run.server1
        name = user_endpoint(st.user)
        req = st.request
        t = time.perf_counter()
        g_ring, d_ring, step = local_update(
            fp, rc, self.n_p, req, st.num_distinct, rating_batch(st.item_pos, st.ratings), st.rows_ring, st.dense_ring,
            lambda rows, dense, batch: run.model.local_step(rows, dense, run.store.state(st.user), batch),
        )
        up0, up1 = st.role.upload(g_ring, d_ring)
        self.user_s += time.perf_counter() - t
        self.losses.append(step.loss)
        tp.send(name, S0, up0, stage=STAGE_UPLOAD)
        if up1 is not None:
            tp.send(name, S1, up1, stage=STAGE_UPLOAD)
        fwd = s0.call(s0.role.handle_upload, st.user, tp.recv(S0, name))
        if up1 is not None:
            s1.call(s1.role.handle_upload, st.user, tp.recv(S1, name))
        if fwd is not None:  # relay: server 0 forwards the correction words
            tp.send(S0, S1, fwd, stage=STAGE_UPLOAD)
            s1.call(s1.role.relay_upload, st.user, tp.recv(S1, S0))
        if run.cfg.verify:
            real = req.indices >= 0
            np.add.at(self.direct_sparse, req.indices[real], g_ring[real])
            self.direct_dense += d_ring

    def finish(self, optimizer: ServerAdam) -> float:
        """Aggregate, check, step the optimizer on server 0, sync server 1; return the
        optimizer's (and model serialization's) seconds."""
        run, rc = self.run, self.rc
        tp, fp, s0, s1 = run.tp, run.fp, run.server0, run.server1
        share1 = s1.call(s1.role.aggregate_share)
        tp.send(S1, S0, share1, stage=STAGE_AGGREGATE)
        sparse_sum, dense_sum = s0.call(s0.role.combine, tp.recv(S0, S1))
        if run.cfg.verify:
            _verify_sums(rc.round_id, sparse_sum, dense_sum, self.direct_sparse, self.direct_dense)
        t = time.perf_counter()
        g_table = fp.decode(np.asarray(sparse_sum)) / self.n_p
        g_dense = fp.decode(np.asarray(dense_sum)) / self.n_p
        optimizer.step(s0.table, s0.dense, g_table, g_dense)
        sync = messages.encode_model(rc.round_id + 1, s0.table, s0.dense)
        opt_s = time.perf_counter() - t
        tp.send(S0, S1, sync, stage=STAGE_SYNC)
        s1.table, s1.dense = _decode_model(
            tp.recv(S1, S0), rc.round_id + 1, rc.num_items, rc.width, rc.dense_size
        )
        if run.cfg.verify and not (
            np.array_equal(s1.table, s0.table) and np.array_equal(s1.dense, s0.dense)
        ):
            raise VerificationError(f"round {rc.round_id}: server 1's model differs after sync")
        return opt_s


def run_config(
    model: RecModel,
    protocol: Protocol,
    cfg: TrainConfig,
    train_data: RatingData,
    test_data: RatingData | None,
    m_prime: int,
    m_prime_source: str,
    mean_count: float | None,
    rating_range: tuple[float, float],
    active_users: int,
    extra_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``config`` document of a run's result (shared by every driver, so that an
    in-process run and a networked run describe themselves identically)."""
    return {
        **(extra_config or {}),
        "model": model.name,
        "model_hparams": model.hparams(),
        "protocol": getattr(protocol, "name", type(protocol).__name__),
        "layout": protocol.layout,
        "relay": protocol.relay,
        "expansion": protocol.expansion if protocol.layout == "cuckoo" else None,
        "epochs": cfg.epochs,
        "users_per_round": cfg.users_per_round,
        "m_prime": m_prime,
        "m_prime_source": m_prime_source,
        "alpha": cfg.alpha,
        "mean_rating_count": mean_count,
        "seed": cfg.seed,
        "verify": cfg.verify,
        "lr": cfg.lr,
        "adam_betas": [cfg.beta1, cfg.beta2],
        "adam_eps": cfg.eps,
        "lazy_adam": cfg.lazy_adam,
        "ring_bits": cfg.ring_bits,
        "frac_bits": cfg.frac_bits,
        "schedule": cfg.schedule,
        "rating_range": list(rating_range),
        "num_users": train_data.num_users,
        "num_items": train_data.num_items,
        "num_train_ratings": len(train_data),
        "num_test_ratings": 0 if test_data is None else len(test_data),
        "active_users": active_users,
        "total_rounds": cfg.epochs * -(-active_users // cfg.users_per_round),
    }


def train(
    model: RecModel,
    protocol: Protocol,
    train_data: RatingData,
    test_data: RatingData | None,
    config: TrainConfig,
    *,
    transport: InProcessTransport | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    extra_config: dict[str, Any] | None = None,
    val_data: RatingData | None = None,
) -> TrainResult:
    """Train ``model`` federatedly with ``protocol`` and return metrics and the final model.

    Parameters
    ----------
    model: the recommender (its hyperparameters are fixed at construction).
    protocol: roles factory; two servers are made from it, and a user role per user per round.
    train_data, test_data: ratings with the same id spaces; ``test_data`` may be ``None``.
    config: loop parameters.
    transport: the transport to use; a fresh :class:`InProcessTransport` by default (whose
        per-round counters are then dropped after each round to bound memory).
    on_round, on_epoch: progress callbacks.
    on_start: called once before the first round with the run's configuration document
        (``result.config``), which includes ``total_rounds``.
    extra_config: merged into ``result.config`` (e.g. the dataset name).
    val_data: optional held-out ratings (same id spaces), scored after every epoch into
        :attr:`EpochStats.val_rmse`; they take no part in training.

    Raises
    ------
    VerificationError
        With ``config.verify``, if a retrieved row or the aggregate differs from the direct
        computation, or the servers' model copies diverge.
    """
    wall0 = time.perf_counter()
    cfg = config
    for held_out in (test_data, val_data):
        if held_out is not None and (
            held_out.num_items != train_data.num_items or held_out.num_users != train_data.num_users
        ):
            raise InvalidParameters("train, test and validation data must share the user and item id spaces")
    own_transport = transport is None
    tp = InProcessTransport() if transport is None else transport
    fp = FixedPoint(cfg.ring_bits, cfg.frac_bits)
    rng = np.random.default_rng(cfg.seed)

    m = train_data.num_items
    width, dense_size = model.sparse_width, model.dense_size
    per_user = by_user(train_data)
    distinct = distinct_counts(per_user)
    active = np.flatnonzero(distinct > 0)
    if cfg.rating_range is not None:
        rating_range = (float(cfg.rating_range[0]), float(cfg.rating_range[1]))
    else:
        rating_range = (float(train_data.ratings.min()), float(train_data.ratings.max()))

    # ---- initial public model (server 0 initializes and syncs server 1) and devices
    table, dense = model.init_public(m, rng, rating_range=rating_range)
    store = model.new_user_store(train_data.num_users, rng, cfg.adam())
    server0 = _Server(protocol.make_server(0), table, dense)
    tp.set_round(None)
    tp.send(S0, S1, messages.encode_model(0, table, dense), stage=STAGE_SYNC)
    server1 = _Server(
        protocol.make_server(1), *_decode_model(tp.recv(S1, S0), 0, m, width, dense_size)
    )
    optimizer = ServerAdam(m, width, dense_size, cfg.adam(), lazy=cfg.lazy_adam)

    # ---- m'
    count_bytes = 0
    if cfg.m_prime is not None:
        if cfg.m_prime > m:
            raise InvalidParameters(f"m_prime must be <= num_items={m}, got {cfg.m_prime}")
        m_prime, m_prime_source, mean_count = cfg.m_prime, "given", None
    else:
        before = tp.total_bytes(stage=STAGE_COUNT, direction=UPLOAD)
        m_prime, mean_count = secure_m_prime(distinct, cfg.alpha, m, tp, fp)
        count_bytes = tp.total_bytes(stage=STAGE_COUNT, direction=UPLOAD) - before
        m_prime_source = "eq11"
    if own_transport:
        tp.reset_counters()

    result_config = run_config(
        model, protocol, cfg, train_data, test_data, m_prime, m_prime_source, mean_count,
        rating_range, int(active.size), extra_config,
    )
    if on_start is not None:
        on_start(result_config)

    totals = {
        "up": 0,
        "down": 0,
        "s2s": 0,
        "user_s": 0.0,
        "s0": 0.0,
        "s1": 0.0,
        "opt": 0.0,
        "slower": 0.0,
    }
    participations = truncated = verified_rounds = round_id = 0
    epochs: list[EpochStats] = []
    run = _Run(model, protocol, tp, fp, rng, per_user, store, server0, server1, m_prime, cfg)

    for epoch in range(1, cfg.epochs + 1):
        order = rng.permutation(active)
        epoch_losses: list[float] = []
        for start in range(0, order.size, cfg.users_per_round):
            users = order[start : start + cfg.users_per_round]
            n_p = int(users.size)
            tp.set_round(round_id)
            rc = protocol.round_config(round_id, m, width, dense_size, m_prime, cfg.ring_bits)
            rnd = _Round(run, rc, n_p)
            if cfg.schedule == "interleaved":
                for u in users:
                    rnd.train_and_upload(rnd.retrieve([int(u)])[0])
            else:
                for st in rnd.retrieve([int(u) for u in users]):
                    rnd.train_and_upload(st)
            opt_s = rnd.finish(optimizer)

            up = tp.total_bytes(round_id=round_id, direction=UPLOAD)
            down = tp.total_bytes(round_id=round_id, direction=DOWNLOAD)
            s2s = tp.total_bytes(round_id=round_id, direction=SERVER)
            if own_transport:
                tp.drop_round(round_id)
            totals["up"] += up
            totals["down"] += down
            totals["s2s"] += s2s
            totals["user_s"] += rnd.user_s
            totals["s0"] += server0.busy
            totals["s1"] += server1.busy
            totals["slower"] += max(server0.busy, server1.busy)
            totals["opt"] += opt_s
            participations += n_p
            truncated += rnd.truncated
            verified_rounds += int(cfg.verify)
            epoch_losses.extend(rnd.losses)
            if on_round is not None:
                on_round(
                    RoundStats(
                        round_id,
                        epoch,
                        n_p,
                        up,
                        down,
                        s2s,
                        rnd.user_s,
                        server0.busy,
                        server1.busy,
                        opt_s,
                        cfg.verify,
                        float(np.mean(rnd.losses)),
                    )
                )
            round_id += 1
        tp.set_round(None)

        scores: list[float | None] = []
        for held_out in (test_data, val_data):
            score = None
            if held_out is not None:
                pred = model.predict(server0.table, server0.dense, store, held_out.users, held_out.items)
                score = rmse(pred, held_out.ratings, rating_range)
            scores.append(score)
        stats = EpochStats(epoch, scores[0], float(np.mean(epoch_losses)), val_rmse=scores[1])
        epochs.append(stats)
        if on_epoch is not None:
            on_epoch(stats)

    rounds = round_id
    per_part = max(participations, 1)
    per_round = max(rounds, 1)
    return TrainResult(
        config=result_config,
        epochs=epochs,
        upload_bytes_per_user_round=totals["up"] / per_part,
        download_bytes_per_user_round=totals["down"] / per_part,
        server_bytes_per_round=totals["s2s"] / per_round,
        count_bytes_per_user=count_bytes / max(int(active.size), 1)
        if m_prime_source == "eq11"
        else 0.0,
        user_ms_per_round=1e3 * totals["user_s"] / per_part,
        server_s_per_round=totals["slower"] / per_round,
        server0_s_per_round=totals["s0"] / per_round,
        server1_s_per_round=totals["s1"] / per_round,
        optimizer_s_per_round=totals["opt"] / per_round,
        verified_rounds=verified_rounds,
        rounds=rounds,
        participations=participations,
        truncated_participations=truncated,
        model_sha256=model_sha256(server0.table, server0.dense),
        wall_s=time.perf_counter() - wall0,
        table=server0.table,
        dense=server0.dense,
        user_store=store,
    )


# --------------------------------------------------------------------------- helpers


def _raise_any(results: list[Any]) -> list[Any]:
    """The driver's users are honest: a rejected message is a bug, raise it."""
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def _decode_model(
    data: bytes, round_id: int, m: int, width: int, dense_size: int
) -> tuple[np.ndarray, np.ndarray]:
    return messages.decode_model(
        data, round_id=round_id, num_items=m, width=width, dense_size=dense_size
    )


def _verify_sums(
    round_id: int,
    sparse_sum: np.ndarray,
    dense_sum: np.ndarray,
    direct_sparse: np.ndarray,
    direct_dense: np.ndarray,
) -> None:
    sparse_sum = np.asarray(sparse_sum)
    dense_sum = np.asarray(dense_sum)
    if sparse_sum.dtype != direct_sparse.dtype or sparse_sum.shape != direct_sparse.shape:
        raise VerificationError(
            f"round {round_id}: aggregate has dtype {sparse_sum.dtype} shape {sparse_sum.shape}, "
            f"expected {direct_sparse.dtype} {direct_sparse.shape}"
        )
    if not np.array_equal(sparse_sum, direct_sparse):
        rows = np.flatnonzero(np.any(sparse_sum != direct_sparse, axis=1))
        raise VerificationError(
            f"round {round_id}: sparse aggregate differs from the direct sum in {rows.size} "
            f"row(s), first item {int(rows[0])}"
        )
    if dense_sum.shape != direct_dense.shape or not np.array_equal(dense_sum, direct_dense):
        raise VerificationError(f"round {round_id}: dense aggregate differs from the direct sum")
