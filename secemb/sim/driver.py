"""The one round driver: the operator and every simulated device of a federated training run.

:func:`run` trains a model with a protocol against two servers reached through
:class:`Servers` -- the server node objects in process (:mod:`secemb.sim.local`) or two
server processes over HTTP (:mod:`secemb.sim.coordinator`).  The same code opens rounds,
runs the devices through the device SDK (:class:`~secemb.client.device.RoundSession`, which
sends what the protocol's :class:`~secemb.protocols.stages.RoundPlan` declares), closes rounds
and scores the model, so an in-process run and a networked run of one seed give the same
model by construction.  :class:`TrainingRun` is that run phase by phase (set-up, the count,
each round's attempts and its devices, evaluation, the result); :func:`run` builds it from
keyword options, grouped as :class:`RunSpec` (what is trained), :class:`RoundPolicy` (how rounds
run) and :class:`Hooks` (the callbacks) (:mod:`secemb.sim.spec`).  The devices' side of a round
attempt is :class:`~secemb.sim.devices.RoundDevices`; the operator's calls to the servers
(retried, closed, awaited) are :mod:`secemb.sim.admin`'s.

Randomness
    The public model is initialized from ``default_rng(public_init_seed(seed))``
    (:func:`~secemb.sim.settings.public_init_seed`): server 0 repeats it from that seed
    alone and the driver checks the two agree.  The operator's draws (per epoch the user
    permutation, or the Poisson samples) come from one ``numpy.random.default_rng(seed)`` owned
    here.  The devices' private draws come from where ``device_randomness``
    (:data:`~secemb.sim.settings.DeviceRandomness`) says: ``"reproducible"``, the same
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

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from secemb.client.device import DeviceClient, RoundInfo, private_rng
from secemb.collector import sparing_the_setup_heap
from secemb.data import RatingData, by_user, concat
from secemb.digest import model_sha256
from secemb.errors import InvalidParameters
from secemb.metrics import evaluate
from secemb.models.base import RecModel, UserStore
from secemb.models.task import Sample
from secemb.protocols.adversary import ATTACK_BEHAVIOR
from secemb.protocols.base import Protocol, RoundConfig
from secemb.protocols.placement import PaddedRequest, place
from secemb.ring import FixedPoint
from secemb.round.local import distinct_counts
from secemb.round.optimizer import ServerAdam
from secemb.round.results import EpochStats, RoundStats, TrainConfig, TrainResult, VerificationError, run_config
from secemb.round.selection import EpochSelection
from secemb.round.update import apply_aggregate
from secemb.sim.admin import RoundAborted, await_round, check_info, close_round, fetch_model, retry
from secemb.sim.devices import Device, DevicePhase, RoundDevices
from secemb.sim.settings import DeviceRandomness, dp_plan_of, public_init_seed, rating_range_of
from secemb.sim.spec import AfterRound, BeforeRound, Behavior, Hooks, RoundPolicy, RunSpec
from secemb.transport.links import AdminLink

# the run's option groups, its device phase and its give-up error are part of this module's
# interface (run's signature, Servers, what run raises): importable from here
__all__ = [
    "Behavior", "DevicePhase", "Hooks", "RoundAborted", "RoundPolicy", "RunSpec", "Servers", "TrainingRun",
    "initial_state", "run",
]


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
    before_round: BeforeRound | None = None,
    after_round: AfterRound | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    extra_config: dict[str, Any] | None = None,
) -> TrainResult:
    """Train ``model`` with ``protocol`` against ``servers``; the run's :class:`TrainResult`
    (:class:`TrainingRun` with its options grouped).  The garbage collections during the run
    skip the objects that existed before it (:func:`secemb.collector.sparing_the_setup_heap`).

    Parameters
    ----------
    servers: the two servers (fresh state, configured for this run).
    model, protocol, train_data, test_data, config: the run (see :func:`secemb.training.train`).
    device_randomness: where the devices' private draws come from
        (:data:`~secemb.sim.settings.DeviceRandomness`): ``"reproducible"`` from the run's
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
    spec = RunSpec(model, protocol, train_data, test_data, config, device_randomness, val_data, extra_config)
    policy = RoundPolicy(deadline_s, close_when_done, max_attempts, behavior)
    hooks = Hooks(before_round, after_round, on_start, on_round, on_epoch)
    with sparing_the_setup_heap():  # the run's collections skip the data, model and kernels made before it
        return TrainingRun(servers, spec, policy, hooks, wall0=wall0).train()


class TrainingRun:
    """One training run, phase by phase (what :func:`run` does; the module docstring says in
    which order the randomness is drawn).

    Set-up (the constructor: what follows from the inputs alone, no server contacted), then
    :meth:`train`: the initial public model checked against server 0 (:meth:`_start_model`),
    m' given or counted (:meth:`_fix_m_prime`, :meth:`_count`), the run announced
    (:meth:`_announce`), per epoch (:meth:`_epoch`) its rounds (:meth:`_round`: the users'
    draws, then attempts until one commits -- :meth:`_attempt`: open, the devices
    (:meth:`RoundDevices.run <secemb.sim.devices.RoundDevices.run>`: retrieval, dense download,
    local step, upload), close, commit) and
    the evaluation (:meth:`_evaluate`), and finally the result (:meth:`_result`).

    Raises
    ------
    InvalidParameters
        From the constructor: ``spec`` asks for DP the protocol cannot give, early stopping
        without validation data.  From :meth:`train`: as :func:`run` says.
    """

    # set by the phases of :meth:`train`, in this order: the public model's mirror, the
    # devices' private state and the devices run on it (:meth:`_start_model`); m' and where it came from
    # (:meth:`_fix_m_prime`); the configuration document and the round configuration the
    # placements are drawn for (:meth:`_announce`, the latter again at each m' update)
    table: np.ndarray
    dense: np.ndarray
    store: UserStore
    devices: RoundDevices
    mirror: ServerAdam | None
    m_prime: int
    source: str
    mean_count: float | None
    result_config: dict[str, Any]
    rc_plan: RoundConfig

    def __init__(self, servers: Servers, spec: RunSpec, policy: RoundPolicy | None = None,
                 hooks: Hooks | None = None, *, wall0: float | None = None) -> None:
        self.wall0 = time.perf_counter() if wall0 is None else wall0
        self.servers, self.spec = servers, spec
        self.policy = RoundPolicy() if policy is None else policy  # defaults: RoundPolicy's, no callbacks
        self.hooks = Hooks() if hooks is None else hooks
        self.cfg = cfg = spec.config
        model, data = spec.model, spec.train_data
        self.fp = FixedPoint(cfg.ring_bits, cfg.frac_bits)
        self.rng = np.random.default_rng(cfg.seed)  # the operator's draws
        # the devices' draws
        self.private = self.rng if spec.device_randomness == "reproducible" else private_rng()
        self.m = data.num_items
        self.width, self.dense_size = model.sparse_width, model.dense_size
        self.task = model.task
        by_item = by_user(data)
        self.per_user = by_item if self.task.order == "item" else by_user(data, order=self.task.order)
        self.distinct = self.task.request_counts(distinct_counts(by_item))
        self.active = np.flatnonzero(self.distinct > 0)
        self.rating_range = rating_range_of(data, cfg)
        self.admin0, self.admin1 = servers.admin
        self.wait_s = servers.wait_s
        self.dp = dp_plan_of(model, spec.protocol, data, cfg)  # TrainConfig refuses dp with verify
        self.device_protocol = self._device_protocol()
        self.participated = np.zeros(data.num_users, dtype=np.int64)
        # the epoch kept: the last, or the best validation epoch
        self.selection = EpochSelection(cfg, spec.val_data)
        # what precedes the held-out interactions (ranking metrics rank after it): for the test
        # data the training and validation interactions, for the validation data the training ones
        self.test_context = data if spec.val_data is None else concat(data, spec.val_data)
        self.tot = _Totals()
        self.epochs: list[EpochStats] = []
        self.round_index = 0  # rounds committed so far
        self.checked_info = False
        self.m_prime_updates: list[dict[str, Any]] = []
        self.count_bytes = 0

    def _device_protocol(self) -> Protocol:
        """The protocol the devices run: the run's, or under local DP (DP-FedRec) the run's
        with the plan's noise added by each device (:meth:`~secemb.protocols.base.Protocol.with_noise`:
        ``InvalidParameters`` for a protocol whose devices add none)."""
        protocol, dp = self.spec.protocol, self.dp
        if dp is None or dp.central:
            return protocol
        return protocol.with_noise(dp.sigma_ring, dp.settings.clip)

    def train(self) -> TrainResult:
        """Run every phase; the run's result (see :func:`run` for what it raises)."""
        self._start_model()
        self._fix_m_prime()
        self._announce()
        for epoch in range(1, self.cfg.epochs + 1):
            if self._epoch(epoch):
                break
        return self._result()

    # ---- set-up against the servers

    def _server_model(self, admin: AdminLink) -> tuple[int, np.ndarray, np.ndarray]:
        """A server's model: ``(version, table, dense)``."""
        return fetch_model(admin, self.wait_s, self.m, self.width, self.dense_size)

    def _start_model(self) -> None:
        """The initial public model, and the devices' private state (with the devices that run
        on it): server 0 initializes the model from the same seed, which is checked here."""
        cfg, spec = self.cfg, self.spec
        self.table, self.dense, self.store = initial_state(spec.model, cfg, self.m, spec.train_data.num_users,
                                                           self.rating_range, self.private)
        version, t0, d0 = self._server_model(self.admin0)
        if version != 0 or model_sha256(t0, d0) != model_sha256(self.table, self.dense):
            raise InvalidParameters(
                f"server 0's model (version {version}) is not the fresh model of seed {cfg.seed}: "
                "start from an empty state directory with init_seed = public_init_seed(seed)"
            )
        self.devices = RoundDevices(self.servers.device, self.servers.phase, self.device_protocol, spec.model,
                                    self.store, fp=self.fp, task=self.task,
                                    clip=None if self.dp is None else self.dp.clip, schedule=cfg.schedule,
                                    keep_encoded=cfg.verify)
        self.mirror = (ServerAdam(self.m, self.width, self.dense_size, cfg.adam(), lazy=cfg.lazy_adam)
                       if cfg.verify else None)

    def _count(self) -> dict[str, Any]:
        """The Eq. 11 count: every active device sends shares of its count; the servers open
        the mean only and fix m' (again at each periodic update, Appendix L.2)."""
        self.admin0.count_open([int(u) for u in self.active])
        sent = self.servers.phase.map(
            lambda u: self.servers.device(int(u)).send_count(int(self.distinct[u]), self.cfg.ring_bits),
            list(self.active))
        doc: dict[str, Any] = self.admin0.count_close()
        doc["bytes"] = sum(sent)
        return doc

    def _fix_m_prime(self) -> None:
        """m': the configured one (server 0 must have it), else the Eq. 11 count's."""
        cfg = self.cfg
        if cfg.m_prime is not None:
            if cfg.m_prime > self.m:
                raise InvalidParameters(f"m_prime must be <= num_items={self.m}, got {cfg.m_prime}")
            st = retry(self.admin0.status, self.wait_s, "server status")
            if st["m_prime"] != cfg.m_prime:
                raise InvalidParameters(f"server 0 has m_prime={st['m_prime']}, the run wants {cfg.m_prime}")
            self.m_prime, self.source, self.mean_count = cfg.m_prime, "given", None
        else:
            doc = retry(self._count, self.wait_s, "count phase", retry_conflict=True)
            self.m_prime, self.source, self.mean_count = int(doc["m_prime"]), "eq11", float(doc["mean_count"])
            self.count_bytes = int(doc["bytes"])

    def _announce(self) -> None:
        """The run's configuration document (``result.config``), reported to ``on_start``, and
        the round configuration the devices' placements are drawn for."""
        spec, cfg = self.spec, self.cfg
        self.result_config = run_config(
            spec.model, spec.protocol, cfg, spec.train_data, spec.test_data, self.m_prime, self.source,
            self.mean_count, self.rating_range, int(self.active.size),
            {**(spec.extra_config or {}), "device_randomness": spec.device_randomness},
        )
        if cfg.m_prime_update:
            self.result_config.update(m_prime_update=cfg.m_prime_update, m_prime_updates=self.m_prime_updates)
        if self.hooks.on_start is not None:
            self.hooks.on_start(self.result_config)
        self.rc_plan = self._round_config(0)

    def _round_config(self, round_id: int) -> RoundConfig:
        return self.spec.protocol.round_config(round_id, self.m, self.width, self.dense_size, self.m_prime,
                                               self.cfg.ring_bits)

    # ---- epochs

    def _epoch(self, epoch: int) -> bool:
        """One epoch: the m' update when due, its rounds, its evaluation; whether the run
        stops here (early stopping)."""
        cfg = self.cfg
        self.tot.epoch_losses = []
        if cfg.m_prime_update and epoch > 1 and (epoch - 1) % cfg.m_prime_update == 0:  # Appendix L.2
            self._update_m_prime(epoch)
        for users in _epoch_rounds(self.rng, self.active, cfg.users_per_round,
                                   cfg.sampling == "poisson")[: cfg.rounds_per_epoch]:
            if users:  # an empty Poisson round: nothing to aggregate, nothing released
                self._round(epoch, users)
        return self._evaluate(epoch)

    def _update_m_prime(self, epoch: int) -> None:
        """The Eq. 11 count again (Appendix L.2); later rounds use its m'."""
        doc = retry(self._count, self.wait_s, "count phase (m' update)", retry_conflict=True)
        self.m_prime, self.count_bytes = int(doc["m_prime"]), self.count_bytes + int(doc["bytes"])
        self.m_prime_updates.append({"epoch": epoch, "m_prime": self.m_prime, "mean_count": float(doc["mean_count"])})
        self.rc_plan = self._round_config(0)

    # ---- one round

    def _round(self, epoch: int, users: list[int]) -> None:
        """One round of ``users``: their draws, then attempts until one commits.

        Raises
        ------
        RoundAborted
            ``max_attempts`` attempts were aborted.
        """
        drawn = self._draw(users)
        last_error = ""
        for attempt in range(1, self.policy.max_attempts + 1):
            aborted = self._attempt(epoch, users, drawn, attempt)
            if aborted is None:
                self.round_index += 1
                return
            last_error = aborted
        raise RoundAborted(f"round {self.round_index} was aborted {self.policy.max_attempts} times; "
                           f"last: {last_error}")

    def _draw(self, users: list[int]) -> list[tuple[Sample, PaddedRequest]]:
        """Each user's task sample and placement, user by user from the devices' generator
        (kept for every attempt of the round)."""
        drawn = []
        for u in users:
            sample = self.task.sample(*self.per_user.of(u), self.m, self.private)
            req = place(self.rc_plan, sample.items, self.private)
            drawn.append((sample, req))
            self.tot.truncated += int(req.kept.size < sample.items.size)
        return drawn

    def _attempt(self, epoch: int, users: list[int], drawn: list[tuple[Sample, PaddedRequest]],
                 attempt: int) -> str | None:
        """One attempt at a round: open, the devices, close, then commit (``None``) or undo
        the devices' local steps (why it was aborted)."""
        info = self._open(users)
        r = info.round_id
        expected = self.fp.encode(self._server_model(self.admin0)[1]) if self.cfg.verify else None
        if self.hooks.before_round is not None:
            self.hooks.before_round(self.round_index, attempt, r, users)
        snaps = {u: self.store.snapshot(u) for u in users}
        behavior = self.policy.behavior
        devs = [Device(u, sample, req, behavior(self.round_index, u) if behavior else None)
                for u, (sample, req) in zip(users, drawn, strict=True)]
        self.devices.run(devs, info, expected)
        self._raise_fatal(devs)
        outcome = self._end(r)
        if self.hooks.after_round is not None:
            self.hooks.after_round(self.round_index, attempt, outcome,
                                   {d.user: d.error for d in devs if d.error is not None})
        if outcome["state"] != "committed":
            errors = [d.error for d in devs if d.error is not None]
            for u, snap in snaps.items():
                self.store.restore(u, snap)
            self.tot.aborted += 1
            self.servers.end_round(r)
            return f"{outcome.get('reason')}" + (f"; first device error: {errors[0]!r}" if errors else "")
        self._commit(epoch, r, outcome, devs)
        self.servers.end_round(r)
        return None

    def _open(self, users: list[int]) -> RoundInfo:
        """Server 0 opens a round of ``users``; its announcement, checked against the run."""
        opened = retry(lambda: self.admin0.open_round(users, self.policy.deadline_s), self.wait_s,
                        "opening a round", retry_conflict=True)
        info = RoundInfo.from_doc(opened)
        if info.config != self._round_config(info.round_id):
            raise InvalidParameters(f"server 0's round configuration {info.config} differs from the run's")
        if not self.checked_info:
            check_info(info, self.spec.model, self.cfg, self.dp)
            self.checked_info = True
        return info

    def _raise_fatal(self, devs: list[Device]) -> None:
        """Raise a device's error that must stop the run: a failed verification, or any error
        where ``servers.device_errors_fatal`` says so (except an attacker's refusal: expected)."""
        for d in devs:
            attacker = d.behavior is not None and d.behavior.startswith(ATTACK_BEHAVIOR)
            if isinstance(d.error, VerificationError) or (d.error is not None and self.servers.device_errors_fatal
                                                          and not attacker):
                raise d.error

    def _end(self, r: int) -> dict[str, Any]:
        """Round ``r``'s outcome: closed now, or awaited until the servers close it."""
        if self.policy.close_when_done:
            return close_round(self.admin0, r, self.wait_s)
        return await_round(self.admin0, r, self.wait_s + self.policy.deadline_s)

    def _commit(self, epoch: int, r: int, outcome: dict[str, Any], devs: list[Device]) -> None:
        """A committed round: who took part, the verification, the accounting."""
        included = set(outcome["included"] or [])
        self.participated[sorted(included)] += 1
        if self.cfg.verify:
            self._verify_round(devs, included, r)
            self.tot.verified += 1
        self._account(outcome, devs, included, epoch, r)

    # ---- the devices of one round attempt

    # ---- after a committed round

    def _account(self, outcome: dict[str, Any], devs: list[Device], included: set[int], epoch: int,
                 r: int) -> None:
        """Add a committed round's traffic and times to the totals; report it."""
        tot = self.tot
        sessions = [d.session for d in devs if d.session is not None]
        up = sum(s.upload_bytes for s in sessions)
        down = sum(s.download_bytes for s in sessions)
        user_s = sum(s.compute_s for s in sessions)
        losses = [d.loss for d in devs if d.loss is not None and d.user in included]
        s2s = self.servers.server_bytes(r) or 0
        s0 = float(outcome.get("server_s") or 0.0)
        opt = float(outcome.get("optimizer_s") or 0.0)
        s1 = float(retry(lambda: self.admin1.round_status(r), self.wait_s,
                          "server 1's round status").get("server_s") or 0.0)
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
        if self.hooks.on_round is not None:
            self.hooks.on_round(RoundStats(r, epoch, len(devs), up, down, s2s, user_s, s0, s1, opt, self.cfg.verify,
                                           float(np.mean(losses)) if losses else float("nan")))

    def _verify_round(self, devs: list[Device], included: set[int], r: int) -> None:
        """Both servers hold the same model, and it is the optimizer step of the direct sums of
        the included users' encoded gradients (applied here to the run's mirror copies)."""
        fp = self.fp
        assert self.mirror is not None
        sparse = np.zeros((self.m, self.width), fp.dtype)
        dsum = np.zeros(self.dense_size, fp.dtype)
        for d in devs:
            if d.user in included and d.session is not None and d.session.g_ring is not None:
                real = d.placement.indices >= 0
                np.add.at(sparse, d.placement.indices[real], d.session.g_ring[real])
                dsum += d.session.d_ring
        apply_aggregate(fp, self.mirror, self.table, self.dense, sparse, dsum, len(included))
        _, t0, d0 = self._server_model(self.admin0)
        _, t1, d1 = self._server_model(self.admin1)
        sha0 = model_sha256(t0, d0)
        if sha0 != model_sha256(t1, d1):
            raise VerificationError(f"round {r}: server 1's model differs from server 0's after sync")
        if sha0 != model_sha256(self.table, self.dense):
            raise VerificationError(
                f"round {r}: server 0's model differs from the optimizer step on the direct sum of the "
                "users' encoded gradients (the secure aggregate is wrong)"
            )

    # ---- evaluation and result

    def _evaluate(self, epoch: int) -> bool:
        """Score server 0's model on the test and validation data; report the epoch and let
        the selection keep it; whether the run stops (early stopping)."""
        spec = self.spec
        held = ((spec.test_data, self.test_context), (spec.val_data, spec.train_data))
        scores: list[dict[str, float | None]] = [{}, {}]
        if spec.test_data is not None or spec.val_data is not None:
            _, t_now, d_now = self._server_model(self.admin0)
            scores = [{} if data is None else evaluate(
                spec.model, t_now, d_now, self.store, data, self.cfg.metrics, rating_range=self.rating_range,
                context=context, seed=self.cfg.seed) for data, context in held]
        losses = self.tot.epoch_losses
        e = EpochStats(epoch, scores[0].get("rmse"), float(np.mean(losses)) if losses else float("nan"),
                       val_rmse=scores[1].get("rmse"), test_metrics=scores[0], val_metrics=scores[1])
        self.epochs.append(e)
        if self.hooks.on_epoch is not None:
            self.hooks.on_epoch(e)
        # the snapshot is read only under early stopping, which needs validation data: t_now is set
        return self.selection.observe(e, lambda: (t_now, d_now, self.store))

    def _result(self) -> TrainResult:
        """The run's result: the kept epoch's model, traffic and times per round."""
        tot, dp = self.tot, self.dp
        _, table_f, dense_f = self._server_model(self.admin0)
        table_f, dense_f, store = self.selection.kept(table_f, dense_f, self.store)
        rounds = self.round_index
        per_part = max(tot.participations, 1)
        per_round = max(rounds, 1)
        return TrainResult(
            config=self.result_config,
            epochs=self.epochs,
            upload_bytes_per_user_round=tot.up / per_part,
            download_bytes_per_user_round=tot.down / per_part,
            server_bytes_per_round=tot.s2s / per_round,
            count_bytes_per_user=self.count_bytes / max(int(self.active.size), 1) if self.source == "eq11" else 0.0,
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
            wall_s=time.perf_counter() - self.wall0,
            table=table_f,
            dense=dense_f,
            user_store=store,
            aborted_rounds=tot.aborted,
            privacy=None if dp is None else dp.privacy_block(int(self.participated.max(initial=0))),
            epoch_kept=self.selection.epoch_kept,
        )


def _epoch_rounds(rng: np.random.Generator, active: np.ndarray, per_round: int, poisson: bool) -> list[list[int]]:
    """One epoch's rounds of users: a permutation of ``active`` cut into rounds of
    ``per_round``, or (``poisson``) ``ceil(n / per_round)`` rounds each taking every user
    independently with probability ``per_round / n`` (some may be empty)."""
    if not poisson:
        order = rng.permutation(active)
        return [[int(u) for u in order[s : s + per_round]] for s in range(0, order.size, per_round)]
    q = min(1.0, per_round / max(active.size, 1))
    return [[int(u) for u in active[rng.random(active.size) < q]] for _ in range(-(-active.size // per_round))]

