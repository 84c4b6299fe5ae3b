"""SecEA in process through the one-server round player
(:func:`secemb.sim.player.play`): :class:`Deployment` holds the server (a
:class:`~secemb.protocols.secea.staged.SecEANode`) behind a counting
:class:`~secemb.sim.local.LocalStageServer` and N silos, set up (round 0: keys, entity union)
on creation; :meth:`Deployment.round` aggregates the given rows.  Every message crosses the
transport as bytes and is counted (``len()`` per silo, up and down).  Used by the tests and
``secemb bench secea``'s cost round; the training run is
:class:`secemb.protocols.secea.protocol.SecEAProtocol` (``secemb train --protocol secea``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol as TypingProtocol

import numpy as np

from secemb.errors import InvalidParameters
from secemb.protocols.exchange import ExchangeParty, ExchangeRecord
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import (
    SECEA_ROUND_PLAN,
    SECEA_SETUP_PLAN,
    SETUP_ROUND,
    SecEANode,
    SecEAParty,
    SecEASetupParty,
)
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import RandomBytes, system_rng
from secemb.secagg.identity import Roster
from secemb.sim.local import LocalStageServer
from secemb.sim.player import play
from secemb.transport.inprocess import InProcessTransport
from secemb.transport.links import StageAdmin, StageLink

__all__ = ["Deployment", "Exchange", "Traffic"]

Map = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


class Exchange(TypingProtocol):
    """What a SecEA run needs of the served node: the operator's link and a silo's link
    (:class:`~secemb.sim.local.LocalStageServer` in process)."""

    @property
    def admin(self) -> StageAdmin:
        """The operator's link."""

    def link(self, user: int) -> StageLink:
        """Silo ``user``'s link."""


@dataclass
class Traffic:
    """Bytes per silo (``up``: silo -> server, ``down``: server -> silo) as ``len()`` of the
    messages on the links, the messages in the order they crossed (in process), and seconds per
    party (silo index, or ``"server"``) per part."""

    up: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    down: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    log: list[bytes] = field(default_factory=list)
    seconds: dict[tuple[int | str, str], float] = field(default_factory=lambda: defaultdict(float))

    def add(self, rec: ExchangeRecord) -> None:
        """Count a round's record."""
        for u, per in rec.up.items():
            self.up[u] += sum(per.values())
        for u, per in rec.down.items():
            self.down[u] += sum(per.values())


class _LoggingTransport(InProcessTransport):
    """The counting transport, keeping every message it carried (for :attr:`Traffic.log`)."""

    def __init__(self, log: list[bytes]) -> None:
        super().__init__()
        self.log = log

    def carry(self, src: str, dst: str, payload: bytes, *, stage: str) -> bytes:
        out = super().carry(src, dst, payload, stage=stage)
        self.log.append(out)
        return out


#: the server's parts, per stage (``secemb bench secea`` reads them)
_SERVER_PARTS = {"secea-share": "relay", "secea-answer": "mask"}


class Deployment:
    """Server and silos of one SecEA deployment in process, set up (round 0: keys and the
    private entity union, through the exchanges) on creation.

    Parameters
    ----------
    params: the public parameters (N, T, K, d, f).
    entity_sets: ``N`` arrays of distinct int64 entity ids, one per silo.
    domain: entity ids are in ``[0, domain)`` (the PSU's filter); ``None``: one past the largest id.
    key_bits: Paillier modulus size of every silo.
    query_bound: queries every silo sends per round (:class:`~secemb.protocols.secea.parties.SecEAClient`).
    connect: serves the node and gives its links; default in process (:class:`LocalStageServer`
        over a transport that keeps every message, :attr:`traffic` ``.log``).
    map: how a stage's messages are sent (:func:`~secemb.sim.player.play`).

    Attributes: ``node`` (its ``server``, the :class:`SecEAServer`), ``clients``, ``union``,
    ``setup_traffic`` (the set-up's bytes) and ``traffic`` (the rounds').
    """

    def __init__(self, params: SecEAParams, entity_sets: Sequence[np.ndarray], *, domain: int | None = None,
                 key_bits: int = 2048, query_bound: int | None = None,
                 connect: Callable[[SecEANode], Exchange] | None = None, map: Map | None = None,
                 _rng: RandomBytes | None = None) -> None:
        rng = system_rng if _rng is None else _rng
        if len(entity_sets) != params.num_clients:
            raise InvalidParameters(f"need {params.num_clients} entity sets, got {len(entity_sets)}")
        sets = [np.asarray(s, dtype=np.int64) for s in entity_sets]
        top = 1 + max((int(s.max()) for s in sets if s.size), default=0)
        domain = top if domain is None else domain
        if any(s.size and (int(s.min()) < 0 or int(s.max()) >= domain) for s in sets):
            raise InvalidParameters(f"entity ids must be in [0, {domain})")
        self.params, self._rng, self._map = params, rng, map
        self.traffic, self.setup_traffic = Traffic(), Traffic()
        bloom = union_bloom(domain, max(1, sum(s.size for s in sets)))
        self.node = SecEANode(params, bloom, _rng=rng)
        self.server = self.node.server
        roster = Roster.generate()  # the deployment's own operator certifies each silo's signing key
        self.clients = [SecEAClient(i, params, s, key_bits=key_bits, query_bound=query_bound,
                                    identity=roster.enroll(i), _rng=rng) for i, s in enumerate(sets)]
        self.exchange = LocalStageServer(self.node, _LoggingTransport(self.traffic.log)) if connect is None \
            else connect(self.node)
        setup = {i: SecEASetupParty(c, bloom, _rng=rng) for i, c in enumerate(self.clients)}
        self._play(SECEA_SETUP_PLAN, SETUP_ROUND, setup, self.setup_traffic)
        self.traffic.log.clear()  # the rounds' messages only
        assert self.node.union is not None
        self.union: np.ndarray = self.node.union

    def _play(self, plan: Any, round_id: int, parties: Mapping[int, ExchangeParty], traffic: Traffic,
              silent: Mapping[int, str] | None = None) -> tuple[ExchangeRecord, dict[str, Any]]:
        admin = self.exchange.admin
        admin.open_round(round_id, sorted(parties))
        extra = {} if self._map is None else {"map": self._map}
        rec = play(plan, admin, {u: self.exchange.link(u) for u in parties}, parties, round_id,
                   silent_from=silent, **extra)
        out = admin.round_status(round_id)
        traffic.add(rec)
        for stage, secs in out["server_s"].items():
            traffic.seconds[("server", _SERVER_PARTS.get(stage, stage))] += float(secs)
        return rec, out

    def uploads(self, round_id: int, rows: Sequence[np.ndarray]) -> dict[int, bytes]:
        """Every silo's UPLOAD of ``round_id`` made directly, outside the exchanges (not counted:
        for inspecting messages)."""
        return {i: c.upload(round_id, rows[i]) for i, c in enumerate(self.clients)}

    def precompute(self, queries: Sequence[int]) -> None:
        """The offline phase before a round: every silo's and the server's encryption
        randomizers for ``queries[n]`` queries of each silo n (timed as part "offline")."""
        chunks = [c.paillier_key.chunks(self.params.width) for c in self.clients]
        counts = {n: q * chunks[n] for n, q in enumerate(queries)}
        for v, client in enumerate(self.clients):
            t0 = time.perf_counter()
            client.precompute(counts)
            self.traffic.seconds[(v, "offline")] += time.perf_counter() - t0
        t0 = time.perf_counter()
        self.server.precompute({n: c * self.params.num_clients for n, c in counts.items()})
        self.traffic.seconds[("server", "offline")] += time.perf_counter() - t0

    def round(self, round_id: int, rows: Sequence[np.ndarray], drop_after_upload: set[int] | None = None,
              users: Sequence[int] | None = None) -> dict[int, np.ndarray]:
        """One aggregation round (``round_id >= 1``, increasing) of ``users`` (default all
        silos); ``rows[i]`` are silo i's embeddings (order of its entities).  Silos in
        ``drop_after_upload`` send their share and nothing after it.  Returns the averages of
        every silo that got a result.

        Raises
        ------
        secemb.errors.ProtocolError
            The round is aborted (too few answers).
        """
        ids = range(self.params.num_clients) if users is None else sorted(users)
        parties = {i: SecEAParty(self.clients[i], round_id, rows[i]) for i in ids}
        silent = {i: "secea-answer" for i in drop_after_upload or ()}
        rec, _ = self._play(SECEA_ROUND_PLAN, round_id, parties, self.traffic, silent)
        for i, party in parties.items():
            for part, secs in party.seconds.items():
                self.traffic.seconds[(i, part)] += secs
        return {i: parties[i].average for i in rec.finished if parties[i].average is not None}  # type: ignore[misc]
