"""A networked training run: simulated devices talk HTTP to two real server processes.

:func:`train_networked` is the network twin of :func:`secemb.training.train`.  It plays the
part of everything outside the servers: the operator (opens and closes rounds, runs the
Eq. 11 count phase) and every device (one thread per concurrent device, each with its own
signed connections).  The devices' ratings and private parameters never reach a server; what
the servers see is exactly the protocol's messages.

Reproducing the in-process run bit for bit
    All training randomness comes from one ``numpy.random.default_rng(seed)`` that this
    coordinator owns and consumes in the order of the in-process loop: the public model's
    initialization (server 0 repeats it from the same seed, and the coordinator checks the
    two agree), the devices' private initialization, then per epoch the user permutation and
    per round each user's placement draws, in user order.  Each device is handed its
    placement.  Devices run concurrently, but ring sums are exact and the optimizer runs on
    server 0, so the order of arrival does not matter: with the same seed the final model's
    SHA-256 equals the in-process one.

Faults
    A round that ends ``aborted`` (a server died, or too few users reached both servers) is
    retried with the same users and placements after every participant undid its local
    step (:func:`~secemb.client.training.restore`); so a run with crashes ends with the model
    of an uninterrupted run.  The operator calls are retried while a server restarts.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol as TypingProtocol

import httpx
import numpy as np

from secemb.client.device import DeviceClient, RoundInfo, RoundSession
from secemb.client.training import restore, snapshot
from secemb.data import RatingData, by_user
from secemb.errors import InvalidParameters, SecembError
from secemb.models.base import RecModel, StepResult
from secemb.protocols.base import Protocol
from secemb.protocols.placement import place
from secemb.ring import FixedPoint
from secemb.training import messages
from secemb.training.local import distinct_counts, distinct_items
from secemb.training.loop import (
    EpochStats,
    RoundStats,
    TrainConfig,
    TrainResult,
    VerificationError,
    model_sha256,
    rmse,
    run_config,
)
from secemb.training.optimizer import ServerAdam
from secemb.transport.network import ApiClient, RemoteError, Unreachable

__all__ = ["Cluster", "RoundAborted", "cluster_settings", "train_networked"]

#: per (round index, user): None (normal) or a fault to simulate on the device:
#: "drop" (retrieves, never uploads), "only0"/"only1" (uploads to one server only),
#: "late:<seconds>" (waits that long between training and upload).
Behavior = Callable[[int, int], str | None]


class Cluster(TypingProtocol):
    """What the coordinator needs to know about the two servers (e.g.
    :class:`~secemb.server.cluster.LocalCluster`)."""

    def url(self, party: int) -> str: ...

    def admin(self, party: int, *, timeout: float = ...) -> ApiClient: ...

    def device_keys(self, user: int) -> tuple[bytes, bytes]: ...


class RoundAborted(SecembError):
    """A round could not be completed after all attempts."""


def rating_range_of(train_data: RatingData, config: TrainConfig) -> tuple[float, float]:
    """The public rating scale, as :func:`secemb.training.train` picks it."""
    if config.rating_range is not None:
        return float(config.rating_range[0]), float(config.rating_range[1])
    return float(train_data.ratings.min()), float(train_data.ratings.max())


def cluster_settings(model: RecModel, protocol: Protocol, train_data: RatingData, config: TrainConfig,
                     *, deadline_s: float = 120.0) -> dict[str, Any]:
    """The :class:`~secemb.server.config.ServerConfig` fields two servers need to train
    ``model`` with ``protocol`` as ``config`` says (both servers get the same)."""
    return {
        "num_items": train_data.num_items,
        "num_users": train_data.num_users,
        "protocol": protocol.name,
        "layout": protocol.layout,
        "relay": bool(protocol.relay),
        "expansion": float(protocol.expansion),
        "layout_seed": int(protocol.layout_seed),
        "model": model.name,
        "model_hparams": model.hparams(),
        "rating_range": rating_range_of(train_data, config),
        "init_seed": config.seed,
        "lr": config.lr,
        "beta1": config.beta1,
        "beta2": config.beta2,
        "eps": config.eps,
        "lazy_adam": config.lazy_adam,
        "ring_bits": config.ring_bits,
        "frac_bits": config.frac_bits,
        "m_prime": config.m_prime,
        "alpha": config.alpha,
        "deadline_s": deadline_s,
    }


@dataclass
class _DeviceOutcome:
    user: int
    session: RoundSession | None = None
    error: BaseException | None = None
    uploaded: bool = False
    result: StepResult | None = None


@dataclass
class _Stats:
    up: int = 0
    down: int = 0
    user_s: float = 0.0
    wall: float = 0.0
    participations: int = 0
    truncated: int = 0
    aborted: int = 0
    losses: list[float] = field(default_factory=list)


def _retry(fn: Callable[[], Any], wait_s: float, what: str, retry_conflict: bool = False) -> Any:
    """Call ``fn`` until it does not fail with Unreachable / 503 (a server restarting)."""
    deadline = time.monotonic() + wait_s
    delay = 0.05
    while True:
        try:
            return fn()
        except Unreachable as exc:
            err: Exception = exc
        except RemoteError as exc:
            if not (exc.status == 503 or (retry_conflict and exc.status == 409)):
                raise
            err = exc
        if time.monotonic() >= deadline:
            raise RoundAborted(f"{what}: gave up after {wait_s} s: {err}") from None
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _decode_model(data: bytes, m: int, width: int, dense_size: int) -> tuple[int, np.ndarray, np.ndarray]:
    version = int.from_bytes(data[8:16], "little")
    table, dense = messages.decode_model(data, round_id=version, num_items=m, width=width, dense_size=dense_size)
    return version, table, dense


def train_networked(
    cluster: Cluster,
    model: RecModel,
    protocol: Protocol,
    train_data: RatingData,
    test_data: RatingData | None,
    config: TrainConfig,
    *,
    workers: int = 8,
    deadline_s: float = 120.0,
    close_when_done: bool = True,
    max_attempts: int = 5,
    wait_s: float = 120.0,
    behavior: Behavior | None = None,
    before_round: Callable[[int, int, int, list[int]], None] | None = None,
    after_round: Callable[[int, int, dict[str, Any], dict[int, BaseException]], None] | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    extra_config: dict[str, Any] | None = None,
) -> TrainResult:
    """Train over the network; the :class:`~secemb.training.TrainResult` of the run.

    Parameters
    ----------
    cluster: the two servers (fresh state, configured by :func:`cluster_settings`).
    model, protocol, train_data, test_data, config: as for :func:`secemb.training.train`.
    workers: devices running at the same time.
    deadline_s: each round's deadline.
    close_when_done: close a round as soon as all its devices finished (else the servers
        close it on quorum or deadline).
    max_attempts: tries per round (aborted rounds are retried).
    wait_s: how long to keep retrying operator calls while a server is unreachable.
    behavior: per (round index, user), a device fault to simulate (see :data:`Behavior`).
    before_round: ``(round index, attempt, round id, users)`` hook, called before the devices run.
    after_round: ``(round index, attempt, outcome, device errors by user)`` hook, called when
        the round ended (committed or aborted).
    on_start, on_round, on_epoch, extra_config: as for :func:`secemb.training.train`.

    Raises
    ------
    InvalidParameters
        The servers are configured differently from ``model``/``protocol``/``config``.
    RoundAborted
        A round failed ``max_attempts`` times, or a server stayed unreachable.
    VerificationError
        With ``config.verify``: a retrieved row, the servers' models or the optimizer step
        differ from the direct computation.
    """
    wall0 = time.perf_counter()
    cfg = config
    if test_data is not None and (
        test_data.num_items != train_data.num_items or test_data.num_users != train_data.num_users
    ):
        raise InvalidParameters("train and test data must share the user and item id spaces")
    fp = FixedPoint(cfg.ring_bits, cfg.frac_bits)
    rng = np.random.default_rng(cfg.seed)
    m = train_data.num_items
    width, dense_size = model.sparse_width, model.dense_size
    per_user = by_user(train_data)
    distinct = distinct_counts(per_user)
    active = np.flatnonzero(distinct > 0)
    rating_range = rating_range_of(train_data, cfg)
    admin0, admin1 = cluster.admin(0), cluster.admin(1)
    http = httpx.Client(timeout=wait_s, trust_env=False,
                        limits=httpx.Limits(max_connections=4 * workers, max_keepalive_connections=4 * workers))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="secemb-device")
    try:
        # ---- initial public model: server 0 initializes it from the same seed
        table, dense = model.init_public(m, rng, rating_range=rating_range)
        store = model.new_user_store(train_data.num_users, rng, cfg.adam())
        version, t0, d0 = _decode_model(_retry(lambda: admin0.get_bytes("/v1/admin/model"), wait_s, "model"),
                                        m, width, dense_size)
        if version != 0 or model_sha256(t0, d0) != model_sha256(table, dense):
            raise InvalidParameters(
                f"server 0's model (version {version}) is not the fresh model of seed {cfg.seed}: "
                "start from an empty state directory with init_seed = seed"
            )
        mirror = ServerAdam(m, width, dense_size, cfg.adam(), lazy=cfg.lazy_adam) if cfg.verify else None

        def client(u: int) -> DeviceClient:
            k0, k1 = cluster.device_keys(u)
            return DeviceClient(u, cluster.url(0), cluster.url(1), k0, k1, timeout=wait_s, http=http)

        # ---- m'
        count_bytes = 0
        if cfg.m_prime is not None:
            if cfg.m_prime > m:
                raise InvalidParameters(f"m_prime must be <= num_items={m}, got {cfg.m_prime}")
            st = admin0.get_json("/v1/admin/status")
            if st["m_prime"] != cfg.m_prime:
                raise InvalidParameters(f"server 0 has m_prime={st['m_prime']}, the run wants {cfg.m_prime}")
            m_prime, source, mean_count = cfg.m_prime, "given", None
        else:
            def count_phase() -> dict[str, Any]:
                admin0.post_json("/v1/admin/count/open", {"users": [int(u) for u in active]})
                sent = list(pool.map(lambda u: client(int(u)).send_count(int(distinct[u]), cfg.ring_bits), active))
                doc = admin0.post_json("/v1/admin/count/close")
                doc["bytes"] = sum(sent)
                return doc

            doc = _retry(count_phase, wait_s, "count phase", retry_conflict=True)
            m_prime, source, mean_count = int(doc["m_prime"]), "eq11", float(doc["mean_count"])
            count_bytes = int(doc["bytes"])

        result_config = run_config(
            model, protocol, cfg, train_data, test_data, m_prime, source, mean_count,
            rating_range, int(active.size), extra_config,
        )
        if on_start is not None:
            on_start(result_config)

        rc_plan = protocol.round_config(0, m, width, dense_size, m_prime, cfg.ring_bits)
        stats = _Stats()
        epochs: list[EpochStats] = []
        verified = 0
        round_index = 0
        checked_info = False

        def run_device(u: int, info: RoundInfo, placement: Any, what: str | None, expected: np.ndarray | None) -> _DeviceOutcome:
            out = _DeviceOutcome(u)
            try:
                items, ratings = per_user.of(u)
                session = RoundSession(client(u), info, protocol=protocol, fp=fp)
                out.session = session
                session.prepare(items, ratings, placement=placement)
                session.retrieve()
                if expected is not None:
                    want = expected[np.maximum(placement.indices, 0)]
                    want[placement.indices < 0] = 0
                    if not np.array_equal(session.rows_ring, want):
                        raise VerificationError(f"round {info.round_id}, user {u}: retrieved rows differ from the table")
                if what == "drop":
                    return out
                state = store.state(u)
                out.result = session.train(lambda rows, d, batch: model.local_step(rows, d, state, batch))
                if what is not None and what.startswith("late:"):
                    time.sleep(float(what.split(":", 1)[1]))
                if what in ("only0", "only1"):
                    session.upload(only=int(what[-1]))
                    return out
                session.upload()
                out.uploaded = True
            except BaseException as exc:  # noqa: BLE001 - a device failure is data, not a crash
                out.error = exc
            return out

        for epoch in range(1, cfg.epochs + 1):
            order = rng.permutation(active)
            epoch_losses: list[float] = []
            for start in range(0, order.size, cfg.users_per_round):
                users = [int(u) for u in order[start : start + cfg.users_per_round]]
                plan = []
                for u in users:
                    uniq, _ = distinct_items(per_user.of(u)[0])
                    req = place(rc_plan, uniq, rng)
                    plan.append(req)
                    stats.truncated += int(req.kept.size < uniq.size)
                for attempt in range(1, max_attempts + 1):
                    t_round = time.perf_counter()
                    opened = _retry(lambda: admin0.post_json("/v1/admin/rounds", {"participants": users,
                                                                                    "deadline_s": deadline_s}),
                                    wait_s, "opening a round", retry_conflict=True)
                    r = int(opened["round_id"])
                    info = RoundInfo.from_doc(opened)
                    if info.config != protocol.round_config(r, m, width, dense_size, m_prime, cfg.ring_bits):
                        raise InvalidParameters(f"server 0's round configuration {info.config} differs from the run's")
                    if not checked_info:
                        _check_info(info, model, cfg)
                        checked_info = True
                    expected = None
                    if cfg.verify:
                        _, t_now, _ = _decode_model(admin0.get_bytes("/v1/admin/model"), m, width, dense_size)
                        expected = fp.encode(t_now)
                    if before_round is not None:
                        before_round(round_index, attempt, r, users)
                    snaps = {u: snapshot(store, u) for u in users}
                    outs = list(pool.map(
                        lambda a: run_device(a[0], info, a[1], behavior(round_index, a[0]) if behavior else None, expected),
                        zip(users, plan),
                    ))
                    for o in outs:
                        if isinstance(o.error, VerificationError):
                            raise o.error
                    if close_when_done:
                        outcome = _close(admin0, r, wait_s)
                    else:
                        outcome = _await(admin0, r, wait_s + deadline_s)
                    if after_round is not None:
                        after_round(round_index, attempt, outcome, {o.user: o.error for o in outs if o.error is not None})
                    if outcome["state"] != "committed":
                        errors = [o.error for o in outs if o.error is not None]
                        last_error = f"{outcome.get('reason')}" + (f"; first device error: {errors[0]!r}" if errors else "")
                        for u, snap in snaps.items():
                            restore(store, u, snap)
                        stats.aborted += 1
                        continue
                    included = set(outcome["included"] or [])
                    sessions = [o.session for o in outs if o.session is not None]
                    up = sum(s.upload_bytes for s in sessions)
                    down = sum(s.download_bytes for s in sessions)
                    user_s = sum(s.compute_s for s in sessions)
                    losses = [o.result.loss for o in outs if o.result is not None and o.user in included]
                    if cfg.verify:
                        _verify_round(admin0, admin1, mirror, table, dense, outs, included, plan, users, fp,
                                      m, width, dense_size, r)
                        verified += 1
                    wall = time.perf_counter() - t_round
                    stats.up += up
                    stats.down += down
                    stats.user_s += user_s
                    stats.wall += wall
                    stats.participations += len(users)
                    epoch_losses.extend(losses)
                    if on_round is not None:
                        on_round(RoundStats(r, epoch, len(users), up, down, 0, user_s, wall, wall, 0.0, cfg.verify,
                                            float(np.mean(losses)) if losses else float("nan")))
                    break
                else:
                    raise RoundAborted(f"round {round_index} was aborted {max_attempts} times; last: {last_error}")
                round_index += 1
            test_rmse = None
            if test_data is not None:
                _, t_now, d_now = _decode_model(admin0.get_bytes("/v1/admin/model"), m, width, dense_size)
                pred = model.predict(t_now, d_now, store, test_data.users, test_data.items)
                test_rmse = rmse(pred, test_data.ratings, rating_range)
            e = EpochStats(epoch, test_rmse, float(np.mean(epoch_losses)) if epoch_losses else float("nan"))
            epochs.append(e)
            if on_epoch is not None:
                on_epoch(e)

        _, table_f, dense_f = _decode_model(_retry(lambda: admin0.get_bytes("/v1/admin/model"), wait_s, "model"),
                                            m, width, dense_size)
        rounds = round_index
        per_part = max(stats.participations, 1)
        per_round = max(rounds, 1)
        result = TrainResult(
            config=result_config,
            epochs=epochs,
            upload_bytes_per_user_round=stats.up / per_part,
            download_bytes_per_user_round=stats.down / per_part,
            server_bytes_per_round=0.0,
            count_bytes_per_user=count_bytes / max(int(active.size), 1) if source == "eq11" else 0.0,
            user_ms_per_round=1e3 * stats.user_s / per_part,
            server_s_per_round=stats.wall / per_round,
            server0_s_per_round=stats.wall / per_round,
            server1_s_per_round=stats.wall / per_round,
            optimizer_s_per_round=0.0,
            verified_rounds=verified,
            rounds=rounds,
            participations=stats.participations,
            truncated_participations=stats.truncated,
            model_sha256=model_sha256(table_f, dense_f),
            wall_s=time.perf_counter() - wall0,
            table=table_f,
            dense=dense_f,
            user_store=store,
        )
        result.aborted_rounds = stats.aborted  # type: ignore[attr-defined]
        return result
    finally:
        pool.shutdown(wait=True)
        http.close()
        admin0.close()
        admin1.close()


def _check_info(info: RoundInfo, model: RecModel, cfg: TrainConfig) -> None:
    want_training = {"lr": cfg.lr, "beta1": cfg.beta1, "beta2": cfg.beta2, "eps": cfg.eps,
                     "ring_bits": cfg.ring_bits, "frac_bits": cfg.frac_bits}
    if info.model.get("name") != model.name or info.model.get("hparams") != model.hparams():
        raise InvalidParameters(f"the servers train {info.model}, the run wants {model.name} {model.hparams()}")
    if info.training != want_training:
        raise InvalidParameters(f"the servers use {info.training}, the run wants {want_training}")


def _close(admin0: ApiClient, r: int, wait_s: float) -> dict[str, Any]:
    def once() -> dict[str, Any]:
        try:
            return admin0.post_json(f"/v1/admin/rounds/{r}/close")
        except RemoteError as exc:
            if exc.status == 404:  # server 0 restarted before it recorded the round
                return {"round_id": r, "state": "aborted", "included": None, "reason": exc.detail}
            raise
    doc = _retry(once, wait_s, f"closing round {r}")
    if doc["state"] not in ("committed", "aborted"):
        return _await(admin0, r, wait_s)
    return doc


def _await(admin0: ApiClient, r: int, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            doc = admin0.get_json(f"/v1/rounds/{r}/status")
            if doc["state"] in ("committed", "aborted"):
                return doc
        except Unreachable:
            pass
        except RemoteError as exc:
            if exc.status == 404:
                return {"round_id": r, "state": "aborted", "included": None, "reason": exc.detail}
            if exc.status != 503:
                raise
        if time.monotonic() >= deadline:
            raise RoundAborted(f"round {r} did not end within {wait_s} s")
        time.sleep(0.05)


def _verify_round(admin0: ApiClient, admin1: ApiClient, mirror: ServerAdam, table: np.ndarray, dense: np.ndarray,
                  outs: list[_DeviceOutcome], included: set[int], plan: list[Any], users: list[int],
                  fp: FixedPoint, m: int, width: int, dense_size: int, r: int) -> None:
    """Both servers hold the same model, and it is the optimizer step of the direct sums of
    the included users' encoded gradients (``table``/``dense`` are the mirror's copies)."""
    sparse = np.zeros((m, width), fp.dtype)
    dsum = np.zeros(dense_size, fp.dtype)
    for o, req in zip(outs, plan):
        if o.user in included:
            s = o.session
            real = req.indices >= 0
            np.add.at(sparse, req.indices[real], s.g_ring[real])
            dsum += s.d_ring
    n = len(included)
    mirror.step(table, dense, fp.decode(sparse) / n, fp.decode(dsum) / n)
    _, t0, d0 = _decode_model(admin0.get_bytes("/v1/admin/model"), m, width, dense_size)
    _, t1, d1 = _decode_model(admin1.get_bytes("/v1/admin/model"), m, width, dense_size)
    if model_sha256(t0, d0) != model_sha256(t1, d1):
        raise VerificationError(f"round {r}: server 1's model differs from server 0's after sync")
    if model_sha256(t0, d0) != model_sha256(table, dense):
        raise VerificationError(f"round {r}: server 0's model differs from the step on the direct sums")
