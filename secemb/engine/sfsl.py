"""Secure federated submodel learning through the round engine (``secemb train --protocol sfsl``).

:class:`EnginePlayer` plays each SFSL round as the stage list the protocol declares
(:data:`~secemb.protocols.sfsl.staged.SFSL_PLAN`) through the one-server phase
(:func:`secemb.engine.exchange.play`): the server is an :class:`~secemb.protocols.sfsl.staged.SFSLNode`
reached through the operator's and the devices' links -- in process
(:class:`~secemb.engine.exchange.LocalExchange`, every message counted on an
:class:`~secemb.transport.inprocess.InProcessTransport`) or over HTTP (:mod:`secemb.sim.sfsl`).
The schedule (which devices each round, the learning-rate decay, AUC) is
:func:`~secemb.protocols.sfsl.simulate.train_sfsl`'s, so an engine run and the in-process
reference of one seed and one CSPRNG give the same model bit for bit.

:func:`run_sfsl` is what ``secemb train --protocol sfsl`` runs: the click data of a dataset
name, DIN, a preset, and the run's :class:`~secemb.round.results.TrainResult` (traffic per
device and round = ``len()`` of the messages on the engine's links; AUC the metric).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from secemb.data.ctr import ClickData
from secemb.digest import model_sha256
from secemb.engine.exchange import ExchangeAdmin, ExchangeLink, LocalExchange, play
from secemb.errors import InvalidParameters
from secemb.models.base import UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols.sfsl.parties import RowSpace, SFSLDevice, SFSLServer, TrainingSettings
from secemb.protocols.sfsl.round import RoundReport
from secemb.protocols.sfsl.simulate import RoundPlayer, SFSLResult, SFSLRun, train_sfsl
from secemb.protocols.sfsl.staged import SFSL_PLAN, SFSLNode, SFSLParty
from secemb.randomness import RandomBytes, system_rng
from secemb.round.results import EpochStats, RoundStats, TrainResult
from secemb.secagg.psu import BloomParams

__all__ = ["EnginePlayer", "SFSLOptions", "click_dataset", "local_player", "run_sfsl", "sfsl_train_result"]

_STEPS = ("advertise", "shares", "masked", "unmask")


class EnginePlayer:
    """Plays SFSL rounds through the engine (a :class:`~secemb.protocols.sfsl.simulate.RoundPlayer`).

    ``admin``: the operator's link to the server; ``link``: device ``u``'s link; ``model``:
    the server's public model now; ``space``, ``bloom``: the public row space and PSU
    parameters; ``map``: how a stage's messages are sent (concurrently over HTTP).
    """

    def __init__(self, admin: ExchangeAdmin, link: Callable[[int], ExchangeLink],
                 model: Callable[[], tuple[np.ndarray, np.ndarray]], space: RowSpace, bloom: BloomParams,
                 map: Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]] | None = None) -> None:
        self.admin, self.link, self._model, self.space, self.bloom = admin, link, model, space, bloom
        self.map = map

    def play(self, devices: Mapping[int, SFSLDevice], round_id: int, settings: TrainingSettings,
             rng: np.random.Generator, *, psu_drop_after: Mapping[int, int], drop_after: Mapping[int, int],
             _rng: RandomBytes) -> RoundReport:
        """One round through the engine; ``psu_drop_after`` / ``drop_after`` as
        :func:`~secemb.protocols.sfsl.round.sfsl_round` takes them (a device sends the first
        ``k`` stages' messages of the PSU / the secure sum, then goes silent).

        Raises
        ------
        Whatever the server raises when a stage cannot close (too few devices left: the round
        is aborted and the model unchanged).
        """
        ids = sorted(devices)
        silent = {u: f"sum-{_STEPS[k]}" for u, k in drop_after.items()}
        silent.update({u: f"psu-{_STEPS[k]}" for u, k in psu_drop_after.items()})
        self.admin.open_round(round_id, ids)
        parties = {u: SFSLParty(devices[u], round_id, len(ids), self.space, self.bloom, settings, rng, _rng=_rng)
                   for u in ids}
        extra = {} if self.map is None else {"map": self.map}
        rec = play(SFSL_PLAN, self.admin, {u: self.link(u) for u in ids}, parties, round_id, silent_from=silent,
                   **extra)
        out = self.admin.outcome(round_id)
        rep = RoundReport()
        live = [u for u in ids if parties[u].union is not None]
        union = next(parties[u].union for u in live)
        assert union is not None
        rep.union_size = int(union.size)
        held = np.concatenate([np.searchsorted(union, devices[u].real) for u in live])
        rep.owners = np.bincount(held, minlength=union.size).astype(np.int64)
        for u in ids:
            for name, per in (("upload_bytes", rec.up[u]), ("download_bytes", rec.down[u])):
                getattr(rep, name)[u] = {part: sum(v for s, v in per.items() if s.startswith(prefix))
                                         for part, prefix in (("psu", "psu-"), ("download", "download"),
                                                              ("secagg", "sum-"))}
            rep.client_seconds[u] = dict(parties[u].seconds)
        for u in live:
            rep.perturbed_sizes[u] = int(devices[u]._perturbed.size)
            if (loss := devices[u].loss) is not None:
                rep.losses[u] = loss
        server_s = dict(out["server_s"])
        rep.server_seconds = {"psu": server_s.get("psu", 0.0), "download": server_s.get("download", 0.0),
                              "secagg": server_s.get("sum", 0.0)}
        rep.survivors = [int(u) for u in out["survivors"]]
        rep.updated_rows = int(out["updated_rows"])
        return rep

    def model(self) -> tuple[np.ndarray, np.ndarray]:
        return self._model()


def local_player(server: SFSLServer, settings: TrainingSettings, *, bloom: BloomParams | None = None,
                 host: list[LocalExchange] | None = None) -> EnginePlayer:
    """An :class:`EnginePlayer` against ``server`` as an in-process :class:`SFSLNode` behind a
    counting transport (``host``, if given, receives the :class:`LocalExchange`, e.g. for a
    test to read the transport's counters)."""
    node = SFSLNode(server, settings, bloom)
    exchange = LocalExchange(node)
    if host is not None:
        host.append(exchange)
    return EnginePlayer(exchange.admin, exchange.link, lambda: (server.table, server.dense), server.space,
                        node.bloom)


def click_dataset(name: str, data_dir: str | os.PathLike | None = None, *, download: bool = False,
                  seed: int = 0) -> tuple[ClickData, ClickData]:
    """``(train, test)`` click samples of a dataset name: ``ml-100k`` / ``ml-1m`` (ratings >= 4
    are clicks, :func:`~secemb.data.ctr.movielens_clicks`) or a Taobao shape (``taobao``,
    ``taobao-small``, ``taobao-mini``: :class:`~secemb.data.ctr.TaobaoShaped`); the last 20 %
    of each user's samples in time are held out.

    Raises
    ------
    InvalidParameters: another name.  secemb.data.DatasetNotFoundError: MovieLens files missing.
    """
    from secemb.data import load_dataset
    from secemb.data.ctr import TAOBAO_SHAPES, TaobaoShaped, movielens_clicks, split_clicks
    from secemb.data.features import movielens_features

    if name in ("ml-100k", "ml-1m"):
        data = movielens_clicks(load_dataset(name, data_dir, download=download),
                                movielens_features(name, data_dir).item)
    elif name in TAOBAO_SHAPES:
        world = TaobaoShaped(name, seed)
        data = world.clients(np.arange(world.shape.users))
    else:
        raise InvalidParameters(f"--protocol sfsl trains on click samples: dataset must be ml-100k, ml-1m or a "
                                f"Taobao shape {sorted(TAOBAO_SHAPES)}, got {name!r}")
    return split_clicks(data)


@dataclass(frozen=True)
class SFSLOptions:
    """What ``secemb train --protocol sfsl`` takes: ``preset`` (CPP1..CPP5), ``users_per_round``
    (n), ``epochs`` (an epoch is ``ceil(active users / n)`` rounds, each drawing n devices
    uniformly; AUC after each), ``lr`` (SGD, decayed x0.999 a round), ``batch``, ``dim``
    (DIN's embedding size), ``seed`` (training randomness)."""

    dataset: str = "ml-100k"
    preset: str = "CPP2"
    users_per_round: int = 20
    epochs: int = 1
    lr: float = 1.0
    batch: int = 2
    dim: int = 18
    seed: int = 0


def _rounds_per_epoch(train: ClickData, n: int) -> tuple[int, int]:
    active = int(np.count_nonzero(np.diff(train.user_bounds()) > 0))
    return active, max(1, math.ceil(active / n))


def _mean_loss(reports: Sequence[RoundReport]) -> float:
    """The mean local objective over the participations of ``reports`` (NaN if no device
    trained on a sample: then a result document cannot be written and says so)."""
    losses = [v for rep in reports for v in rep.losses.values()]
    return float(np.mean(losses)) if losses else float("nan")


def sfsl_train_result(opts: SFSLOptions, train: ClickData, test: ClickData, res: SFSLResult,
                      config: dict[str, Any], wall_s: float) -> TrainResult:
    """The :class:`TrainResult` document of an SFSL run (the fields of ``secemb train``'s JSON:
    traffic and time per device and round, AUC per epoch; no server-to-server traffic, one
    server)."""
    reps = res.reports
    parts = [u for rep in reps for u in rep.upload_bytes]
    n = max(len(parts), 1)
    up = sum(sum(rep.upload_bytes[u].values()) for rep in reps for u in rep.upload_bytes)
    down = sum(sum(rep.download_bytes[u].values()) for rep in reps for u in rep.download_bytes)
    user_s = sum(sum(rep.client_seconds[u].values()) for rep in reps for u in rep.client_seconds)
    server_s = sum(sum(rep.server_seconds.values()) for rep in reps)
    _, per_epoch = _rounds_per_epoch(train, opts.users_per_round)
    epochs = [EpochStats(r // per_epoch, None, _mean_loss(reps[r - per_epoch:r]), test_metrics={"auc": v})
              for r, v in sorted(res.auc.items())]
    assert res.table is not None and res.dense is not None and res.user_embeddings is not None
    rounds = max(len(reps), 1)
    return TrainResult(
        config=config, epochs=epochs, upload_bytes_per_user_round=up / n, download_bytes_per_user_round=down / n,
        server_bytes_per_round=0.0, count_bytes_per_user=0.0, user_ms_per_round=1e3 * user_s / n,
        server_s_per_round=server_s / rounds, server0_s_per_round=server_s / rounds, server1_s_per_round=0.0,
        optimizer_s_per_round=0.0, verified_rounds=0, rounds=len(reps), participations=len(parts),
        truncated_participations=0, model_sha256=model_sha256(res.table, res.dense), wall_s=wall_s,
        table=res.table, dense=res.dense,
        user_store=UserStore(res.user_embeddings, AdamConfig()),  # SGD on the device: no optimizer state
    )


def run_sfsl(opts: SFSLOptions, *, data: tuple[ClickData, ClickData] | None = None,
             data_dir: str | os.PathLike | None = None, download: bool = False,
             player: Callable[[SFSLServer, TrainingSettings], RoundPlayer] | None = None,
             on_start: Callable[[dict[str, Any]], None] | None = None,
             on_round: Callable[[RoundStats], None] | None = None,
             on_epoch: Callable[[EpochStats], None] | None = None,
             _rng: RandomBytes = system_rng) -> TrainResult:
    """Train DIN with SFSL through the engine (``player``: in process by default, see
    :func:`local_player`) and return the :class:`TrainResult`.

    Raises
    ------
    InvalidParameters: a bad option or dataset; fewer users with samples than ``users_per_round``.
    secemb.data.DatasetNotFoundError: MovieLens files missing.
    """
    from secemb.privacy.randomized_response import get_cpp

    get_cpp(opts.preset)
    if opts.users_per_round < 2:
        raise InvalidParameters(f"--protocol sfsl needs at least 2 users per round (secure aggregation), "
                                f"got {opts.users_per_round}")
    train, test = click_dataset(opts.dataset, data_dir, download=download, seed=opts.seed) if data is None else data
    active, per_epoch = _rounds_per_epoch(train, opts.users_per_round)
    run = SFSLRun(preset=opts.preset, clients_per_round=opts.users_per_round, rounds=opts.epochs * per_epoch,
                  settings=TrainingSettings(lr=opts.lr, batch=opts.batch), dim=opts.dim, seed=opts.seed,
                  eval_every=per_epoch)
    config: dict[str, Any] = {
        "dataset": opts.dataset, "protocol": "sfsl", "sfsl_preset": opts.preset, "layout": f"preset {opts.preset}",
        "relay": False, "servers": 1, "model": "din", "dim": opts.dim, "lr": opts.lr, "lr_decay": run.lr_decay,
        "reg": 0.0, "batch": opts.batch, "optimizer": "sgd", "seed": opts.seed, "epochs": opts.epochs,
        "users_per_round": opts.users_per_round, "active_users": active, "num_users": train.num_users,
        "num_items": train.num_goods, "num_categories": train.num_categories, "num_train_samples": len(train),
        "num_test_samples": len(test), "m_prime": None, "m_prime_source": "PSU union, randomized response",
        "metrics": ["auc"], "total_rounds": run.rounds,
    }
    if on_start is not None:
        on_start(config)
    seen = {"auc": 0}

    def progress(r: int, res: SFSLResult) -> None:
        rep = res.reports[-1]
        if on_round is not None:
            users = len(rep.upload_bytes)
            up = sum(sum(v.values()) for v in rep.upload_bytes.values())
            down = sum(sum(v.values()) for v in rep.download_bytes.values())
            user_s = sum(sum(v.values()) for v in rep.client_seconds.values())
            server = sum(rep.server_seconds.values())
            on_round(RoundStats(r, (r - 1) // per_epoch + 1, users, up, down, 0, user_s, server, 0.0, 0.0, False,
                                _mean_loss([rep])))
        if on_epoch is not None and len(res.auc) > seen["auc"]:
            seen["auc"] = len(res.auc)
            on_epoch(EpochStats(r // per_epoch, None, _mean_loss(res.reports[r - per_epoch:r]),
                                test_metrics={"auc": res.auc[r]}))

    t0 = time.perf_counter()
    res = train_sfsl(train, test, run, progress=progress, player=local_player if player is None else player,
                     _rng=_rng)
    return sfsl_train_result(opts, train, test, res, config, time.perf_counter() - t0)
