"""The one round driver: the operator and every simulated device of a federated training run.

:func:`run` trains a model with a protocol against two servers reached through
:class:`Servers` -- the server node objects in process (:mod:`secemb.engine.local`) or two
server processes over HTTP (:mod:`secemb.sim.coordinator`).  The same code opens rounds,
runs the devices through the device SDK (:class:`~secemb.client.device.RoundSession`, which
sends what the protocol's :class:`~secemb.protocols.stages.RoundPlan` declares), closes rounds
and scores the model, so an in-process run and a networked run of one seed give the same
model by construction.

Randomness
    The public model is initialized from ``default_rng(public_init_seed(seed))``
    (:func:`~secemb.engine.settings.public_init_seed`): server 0 repeats it from that seed
    alone and the driver checks the two agree.  The operator's draws (per epoch the user
    permutation, or the Poisson samples) come from one ``numpy.random.default_rng(seed)`` owned
    here.  The devices' private draws come from where ``device_randomness``
    (:data:`~secemb.engine.settings.DeviceRandomness`) says: ``"reproducible"``, the same
    generator -- consumed in a fixed order: the devices' private initialization first, then
    the operator's draws and per round, user by user in round order, the user's task sample
    (:meth:`~secemb.models.task.Task.sample`: nothing for ratings; windows, negatives and the
    dropout seed for a sequence) followed by its placement draws; ``"private"``, a generator
    of OS entropy (:func:`~secemb.client.device.private_rng`) in the same order, so nothing
    private follows from the seed.  Each device is handed its sample and placement.
    Cryptographic randomness is the protocol's own (OS randomness).  Ring sums are exact and
    each server runs the same optimizer step on them (the two models must agree), so neither
    the order in which devices arrive nor how the engine batches them changes the model.

Faults
    A round that ends ``aborted`` (a server died, or too few users reached both servers) is
    retried with the same users and placements after every participant undid its local step
    (:meth:`~secemb.models.base.UserStore.restore`); a run with crashes therefore ends with the
    model of an uninterrupted run.  Operator calls are retried (exponential backoff) while a
    server is unreachable or restarting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from typing import Protocol as TypingProtocol

import numpy as np
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_delay, wait_exponential

from secemb.client.device import DeviceClient, RoundInfo, RoundSession, private_rng
from secemb.data import RatingData, by_user, concat
from secemb.digest import model_sha256
from secemb.engine.settings import DEVICE_RANDOMNESS, DeviceRandomness, dp_plan_of, public_init_seed, rating_range_of
from secemb.errors import InvalidParameters, SecembError
from secemb.metrics import evaluate
from secemb.models.base import RecModel, UserStore
from secemb.models.task import Sample
from secemb.privacy.accounting import DPPlan
from secemb.protocols.adversary import ATTACK_BEHAVIOR, with_attack
from secemb.protocols.base import Protocol
from secemb.protocols.placement import PaddedRequest, place
from secemb.ring import FixedPoint
from secemb.round import messages
from secemb.round.local import distinct_counts
from secemb.round.optimizer import ServerAdam
from secemb.round.results import EpochStats, RoundStats, TrainConfig, TrainResult, VerificationError, run_config
from secemb.round.selection import EpochSelection
from secemb.round.update import apply_aggregate
from secemb.transport.errors import RemoteError, Unreachable
from secemb.transport.links import AdminLink

__all__ = ["Behavior", "DevicePhase", "RoundAborted", "Servers", "run"]

#: per (round index, user): None (normal) or a fault to simulate on the device:
#: "drop" (retrieves, never uploads), "only0"/"only1" (uploads to one server only),
#: "late:<seconds>" (waits that long between training and upload).
Behavior = Callable[[int, int], str | None]


class RoundAborted(SecembError):
    """A round could not be completed after all attempts."""


class DevicePhase(TypingProtocol):
    """How the devices of a round run: one after another in process, concurrently over HTTP."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, possibly concurrently, in order."""

    def retrieve(self, sessions: Sequence[RoundSession]) -> list[BaseException | None]:
        """Send the sessions' retrieval requests (each in its protocol's plan order) and hand
        each its replies; per session, the error that stopped it (else ``None``)."""


@dataclass
class Servers:
    """How the driver reaches the two servers.

    ``admin``: the operator's links to server 0 and server 1; ``device``: device ``u``'s
    client (its links to both servers); ``phase``: how a round's devices run;
    ``server_bytes``: bytes that crossed between the servers in round ``r`` (``None`` if the
    transport cannot see them); ``end_round``: called after each round (e.g. to drop the
    transport's counters of that round); ``device_errors_fatal``: raise a device's error at
    once (in process, where no network can fail, a device error is a bug) instead of treating
    it as a device that dropped out.
    """

    admin: tuple[AdminLink, AdminLink]
    device: Callable[[int], DeviceClient]
    phase: DevicePhase
    server_bytes: Callable[[int], int | None] = lambda r: None
    end_round: Callable[[int], None] = lambda r: None
    wait_s: float = 120.0
    device_errors_fatal: bool = False


@dataclass
class _Device:
    """One device's part in one round attempt."""

    user: int
    sample: Sample
    placement: PaddedRequest
    behavior: str | None
    session: RoundSession | None = None
    error: BaseException | None = None
    uploaded: bool = False
    loss: float | None = None


@dataclass
class _Totals:
    up: int = 0
    down: int = 0
    s2s: int = 0
    user_s: float = 0.0
    s0: float = 0.0
    s1: float = 0.0
    slower: float = 0.0
    opt: float = 0.0
    participations: int = 0
    truncated: int = 0
    aborted: int = 0
    verified: int = 0
    epoch_losses: list[float] = field(default_factory=list)


def initial_state(
    model: RecModel, cfg: TrainConfig, num_items: int, num_users: int, rating_range: tuple[float, float],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, UserStore]:
    """The run's starting point: the public model ``(table, dense)`` from
    ``public_init_seed(cfg.seed)`` (what server 0 is configured with), and the devices'
    private state from ``rng`` (:func:`run`'s generator of the devices' private draws)."""
    table, dense = model.init_public(num_items, np.random.default_rng(public_init_seed(cfg.seed)),
                                     rating_range=rating_range)
    return table, dense, model.new_user_store(num_users, rng, cfg.adam())


def _transient(retry_conflict: bool) -> Callable[[BaseException], bool]:
    """Whether a failed operator call is worth retrying: the server is unreachable or
    answered 503 (restarting, its peer restarting, its disk full), or 409 where the caller
    says a conflict clears by itself (the count phase of a restarted peer)."""

    def check(exc: BaseException) -> bool:
        if isinstance(exc, Unreachable):
            return True
        return isinstance(exc, RemoteError) and (exc.status == 503 or (retry_conflict and exc.status == 409))

    return check


def _retry(fn: Callable[[], Any], wait_s: float, what: str, retry_conflict: bool = False) -> Any:
    """Call ``fn`` until it does not fail transiently (:func:`_transient`), with exponential
    backoff (tenacity: 0.05 s doubling to 0.5 s) for up to ``wait_s`` seconds; other errors
    pass through at once.

    Raises
    ------
    RoundAborted
        Still failing after ``wait_s`` seconds (the last error in the message).
    """
    retrying = Retrying(retry=retry_if_exception(_transient(retry_conflict)), stop=stop_after_delay(wait_s),
                        wait=wait_exponential(multiplier=0.05, min=0.05, max=0.5))
    try:
        return retrying(fn)
    except RetryError as exc:
        raise RoundAborted(f"{what}: gave up after {wait_s} s: {exc.last_attempt.exception()}") from None


def _model(admin: AdminLink, wait_s: float, m: int, width: int, dense_size: int) -> tuple[int, np.ndarray, np.ndarray]:
    data = _retry(admin.model, wait_s, "fetching the model")
    version = messages.model_version(data)
    table, dense = messages.decode_model(data, version=version, num_items=m, width=width, dense_size=dense_size)
    return version, table, dense


def run(
    servers: Servers,
    model: RecModel,
    protocol: Protocol,
    train_data: RatingData,
    test_data: RatingData | None,
    config: TrainConfig,
    *,
    device_randomness: DeviceRandomness,
    val_data: RatingData | None = None,
    deadline_s: float = 120.0,
    close_when_done: bool = True,
    max_attempts: int = 5,
    behavior: Behavior | None = None,
    before_round: Callable[[int, int, int, list[int]], None] | None = None,
    after_round: Callable[[int, int, dict[str, Any], dict[int, BaseException]], None] | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    extra_config: dict[str, Any] | None = None,
) -> TrainResult:
    """Train ``model`` with ``protocol`` against ``servers``; the run's :class:`TrainResult`.

    Parameters
    ----------
    servers: the two servers (fresh state, configured for this run).
    model, protocol, train_data, test_data, config: the run (see :func:`secemb.training.train`).
    device_randomness: where the devices' private draws come from
        (:data:`~secemb.engine.settings.DeviceRandomness`): ``"reproducible"`` from the run's
        seed (a simulation: one seed, one model), ``"private"`` from OS entropy (as deployed
        devices draw them; no two runs alike).  No default: every caller says which.
    val_data: held-out ratings scored after every epoch (``EpochStats.val_rmse``); with
        ``config.early_stop`` they choose the epoch whose model the result holds
        (:class:`~secemb.round.selection.EpochSelection`).
    deadline_s: each round's deadline at the servers.
    close_when_done: close a round as soon as all its devices finished (else the servers
        close it on quorum or deadline).
    max_attempts: tries per round (aborted rounds are retried).
    behavior: per (round index, user), a device fault to simulate (see :data:`Behavior`), or
        ``"attack:NAME"``: a malicious device running attack NAME
        (:mod:`secemb.protocols.adversary`).
    before_round: ``(round index, attempt, round id, users)``, called before the devices run.
    after_round: ``(round index, attempt, outcome, device errors by user)``, called when the
        round ended (committed or aborted).
    on_start, on_round, on_epoch: progress callbacks; ``extra_config`` is merged into
        ``result.config``.

    Raises
    ------
    InvalidParameters
        The servers are configured differently from ``model``/``protocol``/``config``, or
        ``device_randomness`` is neither mode.
    RoundAborted
        A round failed ``max_attempts`` times, or a server stayed unreachable.
    VerificationError
        With ``config.verify``: a retrieved row, the servers' models or the optimizer step
        differ from the direct computation.
    """
    wall0 = time.perf_counter()
    cfg = config
    for held_out in (test_data, val_data):
        if held_out is not None and (
            held_out.num_items != train_data.num_items or held_out.num_users != train_data.num_users
        ):
            raise InvalidParameters("train, test and validation data must share the user and item id spaces")
    if device_randomness not in DEVICE_RANDOMNESS:
        raise InvalidParameters(f"device_randomness must be one of {DEVICE_RANDOMNESS}, got {device_randomness!r}")
    fp = FixedPoint(cfg.ring_bits, cfg.frac_bits)
    rng = np.random.default_rng(cfg.seed)  # the operator's draws
    private = rng if device_randomness == "reproducible" else private_rng()  # the devices' draws
    m = train_data.num_items
    width, dense_size = model.sparse_width, model.dense_size
    task = model.task
    by_item = by_user(train_data)
    per_user = by_item if task.order == "item" else by_user(train_data, order=task.order)
    distinct = task.request_counts(distinct_counts(by_item))
    active = np.flatnonzero(distinct > 0)
    rating_range = rating_range_of(train_data, cfg)
    admin0, admin1 = servers.admin
    wait_s = servers.wait_s
    dp = dp_plan_of(model, protocol, train_data, cfg)  # TrainConfig refuses dp with verify
    device_protocol = protocol
    if dp is not None and not dp.central:  # DP-FedRec: the devices add the plan's noise
        from secemb.protocols.dp_fedrec import DPFedRecProtocol

        if not isinstance(protocol, DPFedRecProtocol):
            raise InvalidParameters(f"protocol {protocol.name!r} declares local DP but is not DP-FedRec")
        device_protocol = protocol.with_noise(dp.sigma_ring, dp.settings.clip)
    participated = np.zeros(train_data.num_users, dtype=np.int64)
    selection = EpochSelection(cfg, val_data)  # the epoch kept: the last, or the best validation epoch

    # ---- the initial public model: server 0 initializes it from the same seed
    table, dense, store = initial_state(model, cfg, m, train_data.num_users, rating_range, private)
    version, t0, d0 = _model(admin0, wait_s, m, width, dense_size)
    if version != 0 or model_sha256(t0, d0) != model_sha256(table, dense):
        raise InvalidParameters(
            f"server 0's model (version {version}) is not the fresh model of seed {cfg.seed}: "
            "start from an empty state directory with init_seed = public_init_seed(seed)"
        )
    mirror = ServerAdam(m, width, dense_size, cfg.adam(), lazy=cfg.lazy_adam) if cfg.verify else None

    # ---- m'
    def count_phase() -> dict[str, Any]:
        """The Eq. 11 count: every active device sends shares of its count; the servers open
        the mean only and fix m' (again at each periodic update, Appendix L.2)."""
        admin0.count_open([int(u) for u in active])
        sent = servers.phase.map(lambda u: servers.device(int(u)).send_count(int(distinct[u]), cfg.ring_bits),
                                 list(active))
        doc: dict[str, Any] = admin0.count_close()
        doc["bytes"] = sum(sent)
        return doc

    count_bytes = 0
    if cfg.m_prime is not None:
        if cfg.m_prime > m:
            raise InvalidParameters(f"m_prime must be <= num_items={m}, got {cfg.m_prime}")
        st = _retry(admin0.status, wait_s, "server status")
        if st["m_prime"] != cfg.m_prime:
            raise InvalidParameters(f"server 0 has m_prime={st['m_prime']}, the run wants {cfg.m_prime}")
        m_prime, source, mean_count = cfg.m_prime, "given", None
    else:
        doc = _retry(count_phase, wait_s, "count phase", retry_conflict=True)
        m_prime, source, mean_count = int(doc["m_prime"]), "eq11", float(doc["mean_count"])
        count_bytes = int(doc["bytes"])

    result_config = run_config(
        model, protocol, cfg, train_data, test_data, m_prime, source, mean_count,
        rating_range, int(active.size), {**(extra_config or {}), "device_randomness": device_randomness},
    )
    m_prime_updates: list[dict[str, Any]] = []
    if cfg.m_prime_update:
        result_config.update(m_prime_update=cfg.m_prime_update, m_prime_updates=m_prime_updates)
    if on_start is not None:
        on_start(result_config)

    rc_plan = protocol.round_config(0, m, width, dense_size, m_prime, cfg.ring_bits)
    tot = _Totals()
    epochs: list[EpochStats] = []
    # what precedes the held-out interactions (ranking metrics rank after it): for the test
    # data the training and validation interactions, for the validation data the training ones
    test_context = train_data if val_data is None else concat(train_data, val_data)
    round_index = 0
    checked_info = False

    def connect(dev: _Device, info: RoundInfo) -> RoundSession | None:
        try:
            client = servers.device(dev.user)
            # as a real device does: both servers announce the round on the same model (a
            # ModelDisagreement is reported to both and the device takes no part)
            client.round_info()
            proto = device_protocol
            if dev.behavior is not None and dev.behavior.startswith(ATTACK_BEHAVIOR):  # a simulated malicious device
                proto = with_attack(device_protocol, dev.behavior[len(ATTACK_BEHAVIOR):])
            dev.session = RoundSession(client, info, protocol=proto, fp=fp, task=task,
                                       clip=None if dp is None else dp.clip)
            return dev.session
        except Exception as exc:  # noqa: BLE001 - a device failure is data, not a crash (Ctrl-C is not)
            dev.error = exc
            return None

    def prepare(devs: list[_Device], info: RoundInfo) -> list[tuple[_Device, RoundSession]]:
        """The devices' sessions, prepared with the drawn samples and slots, their keys made
        as one batch (:meth:`RoundSession.prepare_many`); the devices that failed keep their
        error and are left out."""
        opened = [(d, s) for d, s in zip(devs, servers.phase.map(lambda d: connect(d, info), devs), strict=True)
                  if s is not None]
        errors = RoundSession.prepare_many([s for _, s in opened], [d.sample for d, _ in opened],
                                           [d.placement for d, _ in opened])
        for (d, _), err in zip(opened, errors, strict=True):
            d.error = err
        return [(d, s) for d, s in opened if d.error is None]

    def finish(dev: _Device, expected: np.ndarray | None) -> None:
        session = dev.session
        if dev.error is not None or session is None:
            return
        try:
            session.fetch_dense()
            rows = session.reconstruct()
            if expected is not None and not (dev.behavior or "").startswith(ATTACK_BEHAVIOR):  # attackers: not checked
                want = expected[np.maximum(dev.placement.indices, 0)]
                want[dev.placement.indices < 0] = 0
                if not np.array_equal(rows, want):
                    bad = int(np.flatnonzero(np.any(rows != want, axis=1))[0])
                    raise VerificationError(
                        f"round {session.rc.round_id}, user {dev.user}: retrieved row {bad} (item "
                        f"{int(dev.placement.indices[bad])}) differs from the encoded table"
                    )
            if dev.behavior == "drop":
                return
            state = store.state(dev.user)
            dev.loss = session.train(lambda rows, d, batch: model.local_step(rows, d, state, batch)).loss
            if dev.behavior is not None and dev.behavior.startswith("late:"):
                time.sleep(float(dev.behavior.split(":", 1)[1]))
            if dev.behavior in ("only0", "only1"):
                session.upload(only=int(dev.behavior[-1]))
            else:
                session.upload()
                dev.uploaded = True
            # the round's sessions live until it closes: keep one device's buffers, not all of
            # them (the encoded gradients only where the round is verified against them)
            session.release(keep_encoded=cfg.verify)
        except Exception as exc:  # noqa: BLE001 - a device failure is data, not a crash (Ctrl-C is not)
            dev.error = exc

    def device_phase(devs: list[_Device], info: RoundInfo, expected: np.ndarray | None) -> None:
        live = prepare(devs, info)
        errors = servers.phase.retrieve([s for _, s in live])
        for (d, _), err in zip(live, errors, strict=True):
            if err is not None:
                d.error = err
        servers.phase.map(lambda d: finish(d, expected), devs)

    for epoch in range(1, cfg.epochs + 1):
        tot.epoch_losses = []
        if cfg.m_prime_update and epoch > 1 and (epoch - 1) % cfg.m_prime_update == 0:  # Appendix L.2
            doc = _retry(count_phase, wait_s, "count phase (m' update)", retry_conflict=True)
            m_prime, count_bytes = int(doc["m_prime"]), count_bytes + int(doc["bytes"])
            m_prime_updates.append({"epoch": epoch, "m_prime": m_prime, "mean_count": float(doc["mean_count"])})
            rc_plan = protocol.round_config(0, m, width, dense_size, m_prime, cfg.ring_bits)
        for users in _epoch_rounds(rng, active, cfg.users_per_round, cfg.sampling == "poisson")[: cfg.rounds_per_epoch]:
            if not users:  # an empty Poisson round: nothing to aggregate, nothing released
                continue
            drawn = []
            for u in users:
                sample = task.sample(*per_user.of(u), m, private)
                req = place(rc_plan, sample.items, private)
                drawn.append((sample, req))
                tot.truncated += int(req.kept.size < sample.items.size)
            last_error = ""
            for attempt in range(1, max_attempts + 1):
                opened = _retry(lambda: admin0.open_round(users, deadline_s),  # noqa: B023 - called at once
                                wait_s, "opening a round", retry_conflict=True)
                info = RoundInfo.from_doc(opened)
                r = info.round_id
                if info.config != protocol.round_config(r, m, width, dense_size, m_prime, cfg.ring_bits):
                    raise InvalidParameters(f"server 0's round configuration {info.config} differs from the run's")
                if not checked_info:
                    _check_info(info, model, cfg, dp)
                    checked_info = True
                expected = None
                if cfg.verify:
                    expected = fp.encode(_model(admin0, wait_s, m, width, dense_size)[1])
                if before_round is not None:
                    before_round(round_index, attempt, r, users)
                snaps = {u: store.snapshot(u) for u in users}
                devs = [_Device(u, sample, req, behavior(round_index, u) if behavior else None)
                        for u, (sample, req) in zip(users, drawn, strict=True)]
                if cfg.schedule == "interleaved":
                    for d in devs:
                        device_phase([d], info, expected)
                else:
                    device_phase(devs, info, expected)
                for d in devs:
                    attacker = d.behavior is not None and d.behavior.startswith(ATTACK_BEHAVIOR)  # refused: expected
                    if isinstance(d.error, VerificationError) or (d.error is not None and servers.device_errors_fatal
                                                                  and not attacker):
                        raise d.error
                if close_when_done:
                    outcome = _close(admin0, r, wait_s)
                else:
                    outcome = _await(admin0, r, wait_s + deadline_s)
                if after_round is not None:
                    after_round(round_index, attempt, outcome, {d.user: d.error for d in devs if d.error is not None})
                if outcome["state"] != "committed":
                    errors = [d.error for d in devs if d.error is not None]
                    last_error = f"{outcome.get('reason')}" + (f"; first device error: {errors[0]!r}" if errors else "")
                    for u, snap in snaps.items():
                        store.restore(u, snap)
                    tot.aborted += 1
                    servers.end_round(r)
                    continue
                included = set(outcome["included"] or [])
                participated[sorted(included)] += 1
                if cfg.verify:
                    assert mirror is not None
                    _verify_round(admin0, admin1, mirror, table, dense, devs, included, fp, m, width, dense_size, r,
                                  wait_s)
                    tot.verified += 1
                _account(tot, servers, admin1, outcome, devs, included, epoch, r, cfg.verify, on_round, wait_s)
                servers.end_round(r)
                break
            else:
                raise RoundAborted(f"round {round_index} was aborted {max_attempts} times; last: {last_error}")
            round_index += 1

        scores: list[dict[str, float | None]] = []
        if test_data is not None or val_data is not None:
            _, t_now, d_now = _model(admin0, wait_s, m, width, dense_size)
        for held_out, context in ((test_data, test_context), (val_data, train_data)):
            scores.append({} if held_out is None else evaluate(
                model, t_now, d_now, store, held_out, cfg.metrics, rating_range=rating_range, context=context,
                seed=cfg.seed))
        losses = tot.epoch_losses
        e = EpochStats(epoch, scores[0].get("rmse"), float(np.mean(losses)) if losses else float("nan"),
                       val_rmse=scores[1].get("rmse"), test_metrics=scores[0], val_metrics=scores[1])
        epochs.append(e)
        if on_epoch is not None:
            on_epoch(e)
        if selection.observe(e, lambda: (t_now, d_now, store)):  # noqa: B023 - called at once
            break

    _, table_f, dense_f = _model(admin0, wait_s, m, width, dense_size)
    table_f, dense_f, store = selection.kept(table_f, dense_f, store)
    rounds = round_index
    per_part = max(tot.participations, 1)
    per_round = max(rounds, 1)
    result = TrainResult(
        config=result_config,
        epochs=epochs,
        upload_bytes_per_user_round=tot.up / per_part,
        download_bytes_per_user_round=tot.down / per_part,
        server_bytes_per_round=tot.s2s / per_round,
        count_bytes_per_user=count_bytes / max(int(active.size), 1) if source == "eq11" else 0.0,
        user_ms_per_round=1e3 * tot.user_s / per_part,
        server_s_per_round=tot.slower / per_round,
        server0_s_per_round=tot.s0 / per_round,
        server1_s_per_round=tot.s1 / per_round,
        optimizer_s_per_round=tot.opt / per_round,
        verified_rounds=tot.verified,
        rounds=rounds,
        participations=tot.participations,
        truncated_participations=tot.truncated,
        model_sha256=model_sha256(table_f, dense_f),
        wall_s=time.perf_counter() - wall0,
        table=table_f,
        dense=dense_f,
        user_store=store,
        aborted_rounds=tot.aborted,
        privacy=None if dp is None else dp.privacy_block(int(participated.max(initial=0))),
        epoch_kept=selection.epoch_kept,
    )
    return result


def _epoch_rounds(rng: np.random.Generator, active: np.ndarray, per_round: int, poisson: bool) -> list[list[int]]:
    """One epoch's rounds of users: a permutation of ``active`` cut into rounds of
    ``per_round``, or (``poisson``) ``ceil(n / per_round)`` rounds each taking every user
    independently with probability ``per_round / n`` (some may be empty)."""
    if not poisson:
        order = rng.permutation(active)
        return [[int(u) for u in order[s : s + per_round]] for s in range(0, order.size, per_round)]
    q = min(1.0, per_round / max(active.size, 1))
    return [[int(u) for u in active[rng.random(active.size) < q]] for _ in range(-(-active.size // per_round))]


def _account(tot: _Totals, servers: Servers, admin1: AdminLink, outcome: dict[str, Any], devs: list[_Device],
             included: set[int], epoch: int, r: int, verified: bool, on_round: Callable[[RoundStats], None] | None,
             wait_s: float) -> None:
    """Add a committed round's traffic and times to the totals; report it."""
    sessions = [d.session for d in devs if d.session is not None]
    up = sum(s.upload_bytes for s in sessions)
    down = sum(s.download_bytes for s in sessions)
    user_s = sum(s.compute_s for s in sessions)
    losses = [d.loss for d in devs if d.loss is not None and d.user in included]
    s2s = servers.server_bytes(r) or 0
    s0 = float(outcome.get("server_s") or 0.0)
    opt = float(outcome.get("optimizer_s") or 0.0)
    s1 = float(_retry(lambda: admin1.round_status(r), wait_s, "server 1's round status").get("server_s") or 0.0)
    tot.up += up
    tot.down += down
    tot.s2s += s2s
    tot.user_s += user_s
    tot.s0 += s0
    tot.s1 += s1
    tot.slower += max(s0, s1)
    tot.opt += opt
    tot.participations += len(devs)
    tot.epoch_losses.extend(losses)
    if on_round is not None:
        on_round(RoundStats(r, epoch, len(devs), up, down, s2s, user_s, s0, s1, opt, verified,
                            float(np.mean(losses)) if losses else float("nan")))


def _check_info(info: RoundInfo, model: RecModel, cfg: TrainConfig, dp: DPPlan | None) -> None:
    want_training: dict[str, Any] = {"lr": cfg.lr, "beta1": cfg.beta1, "beta2": cfg.beta2, "eps": cfg.eps,
                                     "ring_bits": cfg.ring_bits, "frac_bits": cfg.frac_bits}
    if dp is not None and dp.central:  # what the servers announce their devices clip to, and the noise
        want_training.update(dp_clip=dp.settings.clip, dp_sigma=dp.sigma_ring)
    if info.model.get("name") != model.name or info.model.get("hparams") != json.loads(json.dumps(model.spec())):
        raise InvalidParameters(f"the servers train {info.model}, the run wants {model.name} {model.spec()}")
    if info.training != want_training:
        raise InvalidParameters(f"the servers use {info.training}, the run wants {want_training}")


def _close(admin0: AdminLink, r: int, wait_s: float) -> dict[str, Any]:
    def once() -> dict[str, Any]:
        try:
            return admin0.close_round(r)
        except RemoteError as exc:
            if exc.status == 404:  # server 0 restarted before it recorded the round
                return {"round_id": r, "state": "aborted", "included": None, "reason": exc.detail}
            raise
    doc: dict[str, Any] = _retry(once, wait_s, f"closing round {r}")
    if doc["state"] not in ("committed", "aborted"):
        return _await(admin0, r, wait_s)
    return doc


def _await(admin0: AdminLink, r: int, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            doc = admin0.round_status(r)
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


def _verify_round(admin0: AdminLink, admin1: AdminLink, mirror: ServerAdam, table: np.ndarray, dense: np.ndarray,
                  devs: list[_Device], included: set[int], fp: FixedPoint, m: int, width: int, dense_size: int,
                  r: int, wait_s: float) -> None:
    """Both servers hold the same model, and it is the optimizer step of the direct sums of
    the included users' encoded gradients (``table``/``dense`` are the mirror's copies)."""
    sparse = np.zeros((m, width), fp.dtype)
    dsum = np.zeros(dense_size, fp.dtype)
    for d in devs:
        if d.user in included and d.session is not None and d.session.g_ring is not None:
            real = d.placement.indices >= 0
            np.add.at(sparse, d.placement.indices[real], d.session.g_ring[real])
            dsum += d.session.d_ring
    apply_aggregate(fp, mirror, table, dense, sparse, dsum, len(included))
    _, t0, d0 = _model(admin0, wait_s, m, width, dense_size)
    _, t1, d1 = _model(admin1, wait_s, m, width, dense_size)
    if model_sha256(t0, d0) != model_sha256(t1, d1):
        raise VerificationError(f"round {r}: server 1's model differs from server 0's after sync")
    if model_sha256(t0, d0) != model_sha256(table, dense):
        raise VerificationError(
            f"round {r}: server 0's model differs from the optimizer step on the direct sum of the "
            "users' encoded gradients (the secure aggregate is wrong)"
        )
