"""The one-server round player: rounds of *exchanges* (``RoundPlan.servers == 1``) over the
stage links (:class:`~secemb.transport.links.StageLink`, :class:`~secemb.transport.links.StageAdmin`).

A one-server protocol (:class:`~secemb.protocols.exchange.ExchangeProtocol`: SFSL, SecEA, ...)
declares its round as a stage list (:class:`~secemb.protocols.stages.RoundPlan` with
``servers=1``); each stage is an exchange:

1. every live device sends the server its message of the stage (:meth:`ExchangeParty.message`);
2. the operator closes the stage (:meth:`StageAdmin.close_stage`): the server builds its
   answers (the secure aggregation closes a stage, fixing who is still in);
3. if the plan has a server -> user hop in the stage, each device fetches its answer
   (:meth:`StageLink.fetch`); a device the server answers with nothing is out of the round.

:func:`train_exchange` is ``secemb train`` / ``secemb demo`` for a one-server protocol: the
protocol's own ``train`` with its server hosted by ``connect``, its figures turned into the
result document.  :func:`play` runs the stages of one round against the server through links;
:class:`Rounds` is what a protocol's ``train`` plays its rounds through (it opens each round,
plays it, reads the outcome): in process (:func:`connect_local`: the node behind a
:class:`~secemb.sim.local.LocalStageServer`, whose transport counts every message, tagged with
its stage) or over HTTP (:mod:`secemb.sim.exchange`: :class:`~secemb.transport.http.HttpStageLink`).
The devices' messages of a stage are made one after another in increasing id order (so a run's
randomness is consumed in a fixed order) and sent through ``map`` (concurrently over HTTP).
Communication is ``len()`` of the bodies that crossed the links.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from secemb.digest import model_sha256
from secemb.errors import InvalidParameters
from secemb.models.base import UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols.exchange import (
    EpochFigures,
    ExchangeParty,
    ExchangeProtocol,
    ExchangeRecord,
    ExchangeRounds,
    ExchangeServer,
    RoundFigures,
)
from secemb.protocols.stages import RoundPlan
from secemb.round.results import EpochStats, RoundStats, TrainResult
from secemb.sim.local import LocalStageServer
from secemb.transport.links import StageAdmin, StageLink

__all__ = ["Rounds", "connect_local", "play", "train_exchange"]

Map = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


def _serial(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    return [fn(x) for x in items]


def play(plan: RoundPlan, admin: StageAdmin, links: Mapping[int, StageLink],
         parties: Mapping[int, ExchangeParty], round_id: int, *, silent_from: Mapping[int, str] | None = None,
         map: Map = _serial) -> ExchangeRecord:
    """Run the stages of ``plan`` for round ``round_id`` (already opened at the server) with the
    devices ``parties`` (id -> party) over ``links`` (id -> link).

    ``silent_from``: device id -> the stage from which it sends nothing (a simulated dropout:
    it goes silent, as a device that loses its connection).  ``map``: how the messages of a
    stage are sent and the answers fetched (``[fn(x) for x in items]`` by default).

    Raises
    ------
    InvalidParameters: a one-server plan is required; a silent stage not in the plan.
    Whatever the server raises when a stage cannot close (e.g.
    :class:`~secemb.secagg.SecAggAborted` in process, a ``RemoteError`` over HTTP).
    """
    if plan.servers != 1:
        raise InvalidParameters("play runs the exchanges of a one-server plan")
    silent = dict(silent_from or {})
    if any(s not in plan.stages for s in silent.values()):
        raise InvalidParameters(f"a device goes silent at a stage of {plan.stages}")
    rec = ExchangeRecord(up={u: {} for u in parties}, down={u: {} for u in parties})
    active = sorted(parties)
    for k, stage in enumerate(plan.stages):
        active = [u for u in active if u not in silent or plan.stages.index(silent[u]) > k]
        bodies = [(u, parties[u].message(stage)) for u in active]

        def send(item: tuple[int, bytes], stage: str = stage) -> None:
            u, body = item
            links[u].send(round_id, stage, body)
            rec.up[u][stage] = len(body)

        map(send, bodies)
        admin.close_stage(round_id, stage)
        if not plan.replies(stage):
            continue

        def fetch(u: int, stage: str = stage) -> bytes | None:
            return links[u].fetch(round_id, stage)

        kept = []
        for u, out in zip(active, map(fetch, active), strict=True):
            if out is None:
                continue
            rec.down[u][stage] = len(out)
            parties[u].accept(stage, out)
            kept.append(u)
        active = kept
    rec.finished = active
    return rec


class Rounds:
    """An :class:`~secemb.protocols.exchange.ExchangeRounds` over links: ``admin`` the
    operator's, ``link(u)`` device ``u``'s, ``model`` the server's public model bytes, ``map``
    how a stage's messages are sent (:func:`play`)."""

    def __init__(self, plan: RoundPlan, admin: StageAdmin, link: Callable[[int], StageLink],
                 model: Callable[[], bytes], map: Map = _serial) -> None:
        self.plan, self.admin, self.link, self._model, self.map = plan, admin, link, model, map

    def play(self, round_id: int, parties: Mapping[int, ExchangeParty], *,
             silent_from: Mapping[int, str] | None = None) -> ExchangeRecord:
        """Open round ``round_id`` for ``sorted(parties)``, run its stages (:func:`play`: those
        the round document lists, a subsequence of the plan's, e.g. SecEA's set-up; default all),
        read its outcome."""
        opened = self.admin.open_round(round_id, sorted(parties))
        rec = play(self.plan.only(opened.get("stages", self.plan.stages)), self.admin,
                   {u: self.link(u) for u in parties}, parties, round_id, silent_from=silent_from, map=self.map)
        rec.opened, rec.outcome = opened, self.admin.round_status(round_id)
        return rec

    def model(self) -> bytes:
        return self._model()


def connect_local(server: ExchangeServer, *, hosts: list[LocalStageServer] | None = None) -> Rounds:
    """Rounds against ``server`` in process (``connect`` of
    :meth:`~secemb.protocols.exchange.ExchangeProtocol.train`: ``protocol.train(connect_local)``
    is ``secemb train --protocol P`` for a one-server P).  ``hosts``, if given, receives the
    :class:`~secemb.sim.local.LocalStageServer` (e.g. for a test to read the transport's counters)."""
    local = LocalStageServer(server.node)
    if hosts is not None:
        hosts.append(local)
    return Rounds(server.node.plan, local.admin, local.link, server.model)


def train_exchange(protocol: ExchangeProtocol, connect: Callable[[ExchangeServer], ExchangeRounds] = connect_local,
                   *, on_start: Callable[[dict[str, Any]], None] | None = None,
                   on_round: Callable[[RoundStats], None] | None = None,
                   on_epoch: Callable[[EpochStats], None] | None = None) -> TrainResult:
    """Train the one-server ``protocol`` with its server hosted by ``connect`` (in process by
    default; over HTTP: :func:`secemb.sim.exchange.train_networked`) and return the result
    document (``secemb train``'s JSON: traffic and time per device and round = totals over the
    participations; one server, so no server-to-server traffic, no optimizer on the server, no
    verification).  ``on_round`` / ``on_epoch`` get the figures as the run goes.

    Raises
    ------
    What the protocol's ``train`` raises.
    """
    def round_stats(f: RoundFigures) -> RoundStats:
        return RoundStats(f.round_id, f.epoch, f.users, f.upload_bytes, f.download_bytes, 0, f.user_s, f.server_s,
                          0.0, 0.0, False, f.loss)

    def epoch_stats(f: EpochFigures) -> EpochStats:
        return EpochStats(f.epoch, None, f.loss, test_metrics=dict(f.metrics))

    t0 = time.perf_counter()
    res = protocol.train(connect, on_start=on_start,
                         on_round=None if on_round is None else lambda f: on_round(round_stats(f)),
                         on_epoch=None if on_epoch is None else lambda f: on_epoch(epoch_stats(f)))
    wall_s = time.perf_counter() - t0
    n = max(sum(f.users for f in res.rounds), 1)
    rounds = max(len(res.rounds), 1)
    server_s = sum(f.server_s for f in res.rounds) / rounds
    return TrainResult(
        config=res.config, epochs=[epoch_stats(f) for f in res.epochs],
        upload_bytes_per_user_round=sum(f.upload_bytes for f in res.rounds) / n,
        download_bytes_per_user_round=sum(f.download_bytes for f in res.rounds) / n,
        server_bytes_per_round=0.0, count_bytes_per_user=0.0,
        user_ms_per_round=1e3 * sum(f.user_s for f in res.rounds) / n, server_s_per_round=server_s,
        server0_s_per_round=server_s, server1_s_per_round=0.0, optimizer_s_per_round=0.0, verified_rounds=0,
        rounds=len(res.rounds), participations=sum(f.users for f in res.rounds), truncated_participations=0,
        model_sha256=model_sha256(res.table, res.dense), wall_s=wall_s, table=res.table, dense=res.dense,
        user_store=UserStore(res.user_params, AdamConfig()),  # the devices' own parameters; no server optimizer
    )
