"""SFSL training over rounds, in process: the server, persistent devices (their Algorithm 2
memo and private user embeddings survive between rounds), AUC on held-out click samples.

Each round draws ``clients_per_round`` devices uniformly without replacement (numpy Generator,
training randomness), runs :func:`~secemb.protocols.sfsl.round.sfsl_round`, decays the
learning rate (x ``lr_decay``), and every ``eval_every`` rounds scores the test samples with the
current public model and the devices' user embeddings (the simulation evaluates centrally what
each device could score for itself).

Who plays a round is a :class:`RoundPlayer`: by default :func:`~secemb.protocols.sfsl.round.sfsl_round`
on the in-process server object; the round engine's player (:mod:`secemb.protocols.sfsl.protocol`) moves the
same messages over the engine's links, in process or over HTTP, with the same schedule.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

import numpy as np

from secemb.data.ctr import ClickData
from secemb.errors import InvalidParameters, check_int
from secemb.metrics import get_metric
from secemb.models.din import DIN
from secemb.privacy.randomized_response import event_probabilities, get_cpp
from secemb.protocols.sfsl.parties import SFSLDevice, SFSLServer, TrainingSettings
from secemb.protocols.sfsl.quantize import max_weight
from secemb.protocols.sfsl.round import RoundReport, sfsl_round
from secemb.randomness import RandomBytes, system_rng
from secemb.secagg.config import check_min_row_holders, default_threshold

__all__ = ["Dropouts", "RoundPlayer", "RunStart", "SFSLResult", "SFSLRun", "round_settings", "start_run", "train_sfsl"]

#: per (round, chosen device ids): ``(psu_drop_after, drop_after)`` as :func:`sfsl_round` takes them
Dropouts = Callable[[int, np.ndarray], tuple[Mapping[int, int], Mapping[int, int]]]


class RoundPlayer(Protocol):
    """Who plays the rounds of :func:`train_sfsl` against the server."""

    def play(self, devices: Mapping[int, SFSLDevice], round_id: int, settings: TrainingSettings,
             rng: np.random.Generator, *, psu_drop_after: Mapping[int, int], drop_after: Mapping[int, int],
             _rng: RandomBytes) -> RoundReport:
        """One round (the arguments of :func:`sfsl_round`); its report."""

    def model(self) -> tuple[np.ndarray, np.ndarray]:
        """The server's current public model ``(table, dense)``."""


class _InProcess:
    """:func:`sfsl_round` on the server object itself."""

    def __init__(self, server: SFSLServer) -> None:
        self.server = server

    def play(self, devices: Mapping[int, SFSLDevice], round_id: int, settings: TrainingSettings,
             rng: np.random.Generator, *, psu_drop_after: Mapping[int, int], drop_after: Mapping[int, int],
             _rng: RandomBytes) -> RoundReport:
        return sfsl_round(self.server, devices, round_id, settings, rng, psu_drop_after=psu_drop_after,
                          drop_after=drop_after, _rng=_rng)

    def model(self) -> tuple[np.ndarray, np.ndarray]:
        return self.server.table, self.server.dense


@dataclass(frozen=True)
class SFSLRun:
    """One SFSL experiment.

    preset: CPP1..CPP5; clients_per_round: n; rounds; settings: the local training,
    quantization and the secure sum's ``min_row_holders`` (an int in [1, ``n // 2 + 1``], the
    threshold); lr_decay: per round; dim: DIN's embedding size; seed: training randomness;
    eval_every: rounds between AUC evaluations (the last round is always evaluated).
    """

    preset: str = "CPP2"
    clients_per_round: int = 20
    rounds: int = 10
    settings: TrainingSettings = TrainingSettings()
    lr_decay: float = 0.999
    dim: int = 18
    seed: int = 0
    eval_every: int = 5

    def __post_init__(self) -> None:
        get_cpp(self.preset)
        for name in ("clients_per_round", "rounds", "dim", "eval_every"):
            check_int(name, getattr(self, name), low=1)
        if self.clients_per_round < 2:
            raise InvalidParameters(f"clients_per_round must be >= 2 (secure aggregation), "
                                    f"got {self.clients_per_round}")
        check_min_row_holders(self.settings.min_row_holders, default_threshold(self.clients_per_round),
                              self.clients_per_round)


@dataclass
class SFSLResult:
    """Per-round history: ``auc`` {round: value}, ``reports`` the rounds' :class:`RoundReport`,
    ``p7``/``p8`` Theorem 2's probabilities over each round's actual owner counts, the
    final public model and the devices' private user embeddings (float64 (num_users, d))."""

    run: SFSLRun
    auc: dict[int, float] = field(default_factory=dict)
    reports: list[RoundReport] = field(default_factory=list)
    p7: list[float] = field(default_factory=list)
    p8: list[float] = field(default_factory=list)
    seconds: float = 0.0
    table: np.ndarray | None = None
    dense: np.ndarray | None = None
    user_embeddings: np.ndarray | None = None


class RunStart(NamedTuple):
    """What every DIN training run over click data starts from (:func:`start_run`)."""

    rng: np.random.Generator  # the run's training randomness (seeded by ``run.seed``)
    model: DIN
    server: SFSLServer  # holding the initial public model
    user_emb: np.ndarray  # the devices' private user embeddings, float64 (num_users, d)
    bounds: np.ndarray  # ``train.user_bounds()``
    users: np.ndarray  # the users with training samples


def start_run(train: ClickData, run: SFSLRun) -> RunStart:
    """DIN initialized from ``run.seed`` (public model, then private user embeddings), its
    server, and the users who can be drawn.

    Raises
    ------
    InvalidParameters
        Fewer users with training samples than ``run.clients_per_round``.
    """
    rng = np.random.default_rng(run.seed)
    model = DIN(num_categories=train.num_categories, dim=run.dim)
    table, dense = model.init_public(train.num_goods, rng)
    user_emb = model.init_private(train.num_users, rng)
    server = SFSLServer(model, table, dense, train.goods_category)
    bounds = train.user_bounds()
    users = np.flatnonzero(np.diff(bounds) > 0)
    if users.size < run.clients_per_round:
        raise InvalidParameters(f"{users.size} users have training samples, fewer than "
                                f"clients_per_round={run.clients_per_round}")
    return RunStart(rng, model, server, user_emb, bounds, users)


def round_settings(run: SFSLRun) -> TrainingSettings:
    """The public settings of ``run``'s rounds: ``run.settings`` with the weight cap no higher than
    what ``clients_per_round`` contributors can sum without wrap-around (:func:`max_weight`)."""
    return replace(run.settings, max_weight=min(run.settings.max_weight,
                                                max_weight(run.clients_per_round, run.settings.levels)))


def train_sfsl(train: ClickData, test: ClickData, run: SFSLRun, *,
               progress: Callable[[int, SFSLResult], None] | None = None,
               player: Callable[[SFSLServer, TrainingSettings], RoundPlayer] | None = None,
               dropouts: Dropouts | None = None,
               _rng: RandomBytes = system_rng) -> SFSLResult:
    """Train DIN with SFSL on ``train`` and score AUC on ``test`` (same id spaces).

    ``player``: made from the server holding the initial public model and the run's public
    settings, it plays every round (default: :func:`sfsl_round` in process).  ``dropouts``:
    which chosen devices drop out of each round's PSU and secure sum, and when.

    Raises
    ------
    InvalidParameters
        Fewer users with training samples than ``clients_per_round``.
    """
    rng, model, server, user_emb, bounds, users = start_run(train, run)
    params = get_cpp(run.preset)
    settings = round_settings(run)
    devices: dict[int, SFSLDevice] = {}
    host = _InProcess(server) if player is None else player(server, settings)
    auc = get_metric("auc")
    result = SFSLResult(run)
    start = time.perf_counter()
    for r in range(1, run.rounds + 1):
        chosen = np.sort(rng.choice(users, size=run.clients_per_round, replace=False))
        for u in chosen:
            if u not in devices:
                devices[int(u)] = SFSLDevice(int(u), train.subset(slice(bounds[u], bounds[u + 1])), params, model,
                                             user_emb[u])
        lr = run.settings.lr * run.lr_decay ** (r - 1)
        psu_drops, drops = ({}, {}) if dropouts is None else dropouts(r, chosen)
        report = host.play({int(u): devices[int(u)] for u in chosen}, r, replace(settings, lr=lr), rng,
                              psu_drop_after=psu_drops, drop_after=drops, _rng=_rng)
        result.reports.append(report)
        p7, p8 = event_probabilities(params, report.owners, run.clients_per_round)
        result.p7.append(p7)
        result.p8.append(p8)
        if r % run.eval_every == 0 or r == run.rounds:
            value = auc(model.score(*host.model(), user_emb, test), test.label, (0.0, 1.0))
            if value is not None:
                result.auc[r] = value
        if progress is not None:
            progress(r, result)
    result.seconds = time.perf_counter() - start
    result.table, result.dense = host.model()
    result.user_embeddings = user_emb
    return result
