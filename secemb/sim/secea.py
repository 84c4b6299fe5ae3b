"""SecEA through the round engine's one-server phase (:func:`secemb.engine.exchange.play`): the
server is a :class:`~secemb.protocols.secea.staged.SecEANode` reached through the operator's and
the silos' links -- in process (:class:`~secemb.engine.exchange.LocalExchange`, every message
counted on an :class:`~secemb.transport.inprocess.InProcessTransport`) or over HTTP (any
``connect`` that serves the node and returns its links).

* :class:`Deployment` -- N silos and the server in process, set up (keys, entity union) on
  creation; :meth:`Deployment.round` aggregates the given rows.  Used by the tests and
  ``secemb bench secea``'s cost round.
* :func:`run_secea` -- ``secemb train --protocol secea``: MovieLens users dealt into N silos,
  each an MF model over its users (:mod:`secemb.protocols.secea.silos`); every round each silo
  trains ``local_epochs`` locally, then the item rows of the ``items`` most-rated items it holds
  are averaged by the full protocol (pads and Paillier) and written back.  Its
  :class:`~secemb.round.results.TrainResult`: test RMSE per round, traffic = ``len()`` of the
  messages on the links, ``model_sha256`` of the silos' models.

SecEA's averages are exact (the fixed-point average, whatever the randomness), and the local
training is seeded, so a run's model does not depend on the CSPRNG nor on the transport: in
process and over HTTP give the same ``model_sha256``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol as TypingProtocol

import numpy as np

from secemb.data import RatingData
from secemb.engine.exchange import ExchangeAdmin, ExchangeLink, ExchangeParty, ExchangeRecord, LocalExchange, play
from secemb.errors import InvalidParameters
from secemb.models.base import UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.paillier import MIN_KEY_BITS
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.silos import MFSilo, local_epoch, make_silos, one_thread, silos_rmse
from secemb.protocols.secea.staged import (
    SECEA_PLAN,
    SECEA_SETUP_PLAN,
    SETUP_ROUND,
    SecEANode,
    SecEAParty,
    SecEASetupParty,
)
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import RandomBytes, system_rng
from secemb.digest import model_sha256
from secemb.round.results import EpochStats, RoundStats, TrainResult
from secemb.transport.inprocess import InProcessTransport

__all__ = ["Deployment", "Exchange", "SecEAOptions", "Traffic", "popular_items", "run_secea", "silo_sets"]

Map = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


class Exchange(TypingProtocol):
    """What a SecEA run needs of the served node: the operator's link and a silo's link
    (:class:`~secemb.engine.exchange.LocalExchange` in process)."""

    @property
    def admin(self) -> ExchangeAdmin:
        """The operator's link."""

    def link(self, user: int) -> ExchangeLink:
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
    connect: serves the node and gives its links; default in process (:class:`LocalExchange`
        over a transport that keeps every message, :attr:`traffic` ``.log``).
    map: how a stage's messages are sent (:func:`~secemb.engine.exchange.play`).

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
        self.clients = [SecEAClient(i, params, s, key_bits=key_bits, query_bound=query_bound, _rng=rng)
                        for i, s in enumerate(sets)]
        self.exchange = LocalExchange(self.node, _LoggingTransport(self.traffic.log)) if connect is None \
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
        out = admin.outcome(round_id)
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
        rec, _ = self._play(SECEA_PLAN, round_id, parties, self.traffic, silent)
        for i, party in parties.items():
            for part, secs in party.seconds.items():
                self.traffic.seconds[(i, part)] += secs
        return {i: parties[i].average for i in rec.finished if parties[i].average is not None}  # type: ignore[misc]


@dataclass(frozen=True)
class SecEAOptions:
    """What ``secemb train --protocol secea`` takes.

    ``silos`` (N) and ``threshold`` (T < N/2); ``rounds`` of ``local_epochs`` local MF epochs
    each followed by one SecEA aggregation; ``dim`` (MF's d; SecEA averages d + 1 values per
    item, the bias included); ``items``: the public subset of items aggregated, the ``items``
    most-rated ones of the training split (0: every item; the others stay local to each silo;
    Paillier's cost grows with N * sum |E_n|); ``key_bits`` (Paillier modulus, >= 1024); ``lr``,
    ``reg``, ``batch`` (Adam on each silo); ``seed`` (user dealing, initialization, batch order).
    The defaults run in well under a minute on two cores.
    """

    dataset: str = "ml-100k"
    silos: int = 3
    threshold: int = 1
    rounds: int = 3
    local_epochs: int = 1
    dim: int = 8
    items: int = 20
    key_bits: int = 2048
    lr: float = 0.01
    reg: float = 0.1
    batch: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        ints = {"silos": self.silos, "threshold": self.threshold, "rounds": self.rounds,
                "local_epochs": self.local_epochs, "dim": self.dim, "items": self.items,
                "key_bits": self.key_bits, "batch": self.batch, "seed": self.seed}
        bad = [k for k, v in ints.items() if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise InvalidParameters(f"SecEA options {bad} must be ints")
        if self.silos < 2 or not 0 <= self.threshold or 2 * self.threshold >= self.silos:
            raise InvalidParameters(f"SecEA needs N >= 2 silos and 0 <= T < N/2, got N = {self.silos}, "
                                    f"T = {self.threshold}")
        if min(self.rounds, self.local_epochs, self.dim, self.batch) < 1 or self.items < 0 or self.seed < 0:
            raise InvalidParameters("rounds, local epochs, dim and batch must be >= 1; items and seed >= 0")
        if self.key_bits < MIN_KEY_BITS:
            raise InvalidParameters(f"key bits must be >= {MIN_KEY_BITS}, got {self.key_bits}")
        if not (self.lr > 0 and self.reg >= 0):
            raise InvalidParameters(f"lr must be > 0 and reg >= 0, got {self.lr} and {self.reg}")


def popular_items(train: RatingData, count: int) -> np.ndarray:
    """The ``count`` items with the most training ratings (ties: lower id first), sorted; all
    items when ``count`` is 0."""
    if count == 0:
        return np.arange(train.num_items, dtype=np.int64)
    ranked = np.argsort(-np.bincount(train.items, minlength=train.num_items), kind="stable")
    return np.sort(ranked[:count]).astype(np.int64)


def silo_sets(silos: Sequence[MFSilo], chosen: np.ndarray) -> list[np.ndarray]:
    """Per silo, the positions (in its item list) of its items among ``chosen``."""
    return [np.flatnonzero(np.isin(s.items, chosen)) for s in silos]


def _model(silos: Sequence[MFSilo]) -> tuple[np.ndarray, np.ndarray]:
    """The silos' models as (table, dense) for the hash: every silo's item rows stacked in silo
    order; every silo's user rows, flattened, concatenated."""
    return (np.vstack([s.item_rows for s in silos]),
            np.concatenate([s.user_rows.ravel() for s in silos]))


def run_secea(opts: SecEAOptions, *, data: tuple[RatingData, RatingData] | None = None,
              data_dir: str | None = None, download: bool = False,
              connect: Callable[[SecEANode], Exchange] | None = None, map: Map | None = None,
              on_start: Callable[[dict[str, Any]], None] | None = None,
              on_round: Callable[[RoundStats], None] | None = None,
              on_epoch: Callable[[EpochStats], None] | None = None,
              _rng: RandomBytes | None = None) -> TrainResult:
    """Train the silos with SecEA through the engine (``connect``: in process by default) and
    return the :class:`TrainResult` (an "epoch" is a round: its test RMSE and mean local loss;
    the set-up's bytes are ``count_bytes_per_user``, reported apart as the two-server runs'
    one-time exchange is).

    Raises
    ------
    InvalidParameters: a bad option; fewer than 2 items held.  secemb.data.DatasetNotFoundError:
    MovieLens files missing.  secemb.errors.ProtocolError: a round aborted (a silo failed).
    """
    from secemb.data import load_dataset, train_test_split

    if data is None:
        if opts.dataset not in ("ml-100k", "ml-1m"):
            raise InvalidParameters(f"--protocol secea trains MF silos on ml-100k or ml-1m, got {opts.dataset!r}")
        train, test = train_test_split(load_dataset(opts.dataset, data_dir, download=download), 0.2, opts.seed)
    else:
        train, test = data
    t0 = time.perf_counter()
    silos = make_silos(train, opts.silos, opts.dim, opts.lr, opts.seed)
    chosen = popular_items(train, opts.items)
    own = silo_sets(silos, chosen)
    params = SecEAParams(opts.silos, opts.threshold, dim=opts.dim + 1)
    config: dict[str, Any] = {
        **asdict(opts), "protocol": "secea", "model": "mf", "servers": 1, "layout": "silos", "relay": True,
        "parts": params.k, "needed_answers": params.needed_answers, "num_users": train.num_users,
        "num_items": train.num_items, "items_aggregated": int(chosen.size),
        "items_per_silo": [int(s.items.size) for s in silos], "entities_per_silo": [int(o.size) for o in own],
        "metrics": ["rmse"], "total_rounds": opts.rounds,
    }
    if on_start is not None:
        on_start(config)
    dep = Deployment(params, [s.items[o] for s, o in zip(silos, own, strict=True)], domain=train.num_items,
                     key_bits=opts.key_bits, connect=connect, map=map, _rng=_rng)
    setup_bytes = sum(dep.setup_traffic.up.values()) + sum(dep.setup_traffic.down.values())
    gen = np.random.default_rng(opts.seed + 1)
    epochs: list[EpochStats] = []
    up = down = 0
    user_s = server_s = 0.0
    for r in range(1, opts.rounds + 1):
        t_user = time.perf_counter()
        with one_thread():
            losses = [local_epoch(s, opts.reg, opts.batch, gen) for s in silos for _ in range(opts.local_epochs)]
        user_s += time.perf_counter() - t_user
        before = (sum(dep.traffic.up.values()), sum(dep.traffic.down.values()), dict(dep.traffic.seconds))
        out = dep.round(r, [s.item_rows[o] for s, o in zip(silos, own, strict=True)])
        for i, s in enumerate(silos):
            rows = s.item_rows
            rows[own[i]] = out[i]
            s.set_item_rows(rows)
        r_up = sum(dep.traffic.up.values()) - before[0]
        r_down = sum(dep.traffic.down.values()) - before[1]
        secs = {k: v - before[2].get(k, 0.0) for k, v in dep.traffic.seconds.items()}
        r_user = sum(v for (who, _), v in secs.items() if who != "server")
        r_server = sum(v for (who, _), v in secs.items() if who == "server")
        up, down, user_s, server_s = up + r_up, down + r_down, user_s + r_user, server_s + r_server
        rmse = silos_rmse(silos, test)
        loss = float(np.mean(losses))
        if on_round is not None:
            on_round(RoundStats(r, r, opts.silos, r_up, r_down, 0, r_user, r_server, 0.0, 0.0, False, loss))
        epochs.append(EpochStats(r, rmse, loss, test_metrics={"rmse": rmse}))
        if on_epoch is not None:
            on_epoch(epochs[-1])
    table, dense = _model(silos)
    parts = opts.silos * opts.rounds
    return TrainResult(
        config=config, epochs=epochs, upload_bytes_per_user_round=up / parts,
        download_bytes_per_user_round=down / parts, server_bytes_per_round=0.0,
        count_bytes_per_user=setup_bytes / opts.silos, user_ms_per_round=1e3 * user_s / parts,
        server_s_per_round=server_s / opts.rounds, server0_s_per_round=server_s / opts.rounds,
        server1_s_per_round=0.0, optimizer_s_per_round=0.0, verified_rounds=0, rounds=opts.rounds,
        participations=parts, truncated_participations=0, model_sha256=model_sha256(table, dense),
        wall_s=time.perf_counter() - t0, table=table, dense=dense,
        user_store=UserStore(np.vstack([s.user_rows for s in silos]), AdamConfig()),
    )
