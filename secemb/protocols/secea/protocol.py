"""SecEA as a registered one-server protocol (``--protocol secea``; :mod:`secemb.protocols.exchange`).

:class:`SecEAProtocol` trains the silos of our MovieLens experiment (the paper has none;
:mod:`secemb.protocols.secea.silos`; any rating dataset works): the users are dealt into N silos, each an MF model over
its users; round 0 is SecEA's set-up (the key directory and the private entity union), then
every round each silo trains ``secea_local_epochs`` epochs locally and the item rows
``(q_i, b_i)`` of the ``secea_items`` most-rated items it holds are averaged over the silos that
hold them by the full protocol -- one-time-padded shares and queries relayed by the server,
Paillier answers masked by it -- and written back.  The rounds go through the ``connect`` the
engine gives (in process or over HTTP, the same code); SecEA's averages are exact (the
fixed-point average, whatever the randomness) and the local training is seeded, so both give
the same ``model_sha256``.  :meth:`SecEAProtocol.make_device` is a silo of a deployment
(``secemb client``).

Per round the result reports the test RMSE of the silos' models and the mean local loss;
traffic is ``len()`` of the messages on the links (the set-up's apart, in the config as
``secea_setup_bytes_per_silo``).  The model hashed is every silo's item rows (the table), then
every silo's user rows (the dense part): nothing is public, the server holds no model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from secemb.data import RatingData, load_dataset, train_test_split
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, check_float, check_int
from secemb.protocols.device_state import CorruptDeviceState, DeviceStateFile
from secemb.protocols.exchange import (
    EpochFigures,
    ExchangeParty,
    ExchangeProtocol,
    ExchangeResult,
    ExchangeRounds,
    ExchangeRun,
    ExchangeServer,
    RoundFigures,
)
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.paillier import MAX_KEY_BITS, MIN_KEY_BITS, SLOT_BITS
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.silos import (
    MFSilo,
    local_epoch,
    make_silos,
    one_thread,
    popular_items,
    silo_entities,
    silos_rmse,
)
from secemb.protocols.secea.staged import SECEA_PLAN, SETUP_ROUND, SecEANode, SecEAParty, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.protocols.stages import SECEA_SETUP_STAGES, SECEA_STAGES, RoundPlan
from secemb.randomness import RandomBytes, system_rng
from secemb.secagg.identity import Identity, Roster
from secemb.secagg.psu import BloomParams

__all__ = ["SecEAProtocol", "SecEASilo"]

#: local training: Adam's batch, as ``secemb bench secea``'s
_BATCH = 1024


class SecEAProtocol(ExchangeProtocol):
    """SecEA (docs/secea.md): N silos and one relaying server; MF silos on MovieLens.

    The run's ``epochs`` are SecEA rounds (each all silos; ``users_per_round`` is not used:
    every silo takes part in every round).  Options: ``model`` (mf only), ``metrics`` (rmse
    only), ``lr`` (each silo's Adam, default 0.01), ``reg`` (L2, default 0.1), ``dim`` (MF's d,
    default 8: SecEA averages d + 1 values per item), ``secea_silos`` (N, default 3),
    ``secea_threshold`` (T < N/2, default 1), ``secea_items`` (the public subset of items
    averaged: the most-rated of the training split, default 20; 0: all -- Paillier's work grows
    with N * sum |E_n|), ``secea_key_bits`` (Paillier modulus, default 2048, at least 1024),
    ``secea_local_epochs`` (local epochs per round, default 1).  The defaults train 3 rounds of
    ML-100K in well under a minute on two cores.  ``data``: ``(train, test)`` ratings instead of
    the run's dataset (Python API); ``_rng``: the CSPRNG of every secret (tests only).

    Raises
    ------
    InvalidParameters: another model or metric, a bad option (N < 2, T >= N/2, a fixed-point
    range too small for N, key bits < 1024, ...).
    """

    name = "secea"
    options = ("model", "metrics", "lr", "reg", "dim", "secea_silos", "secea_threshold", "secea_items",
               "secea_key_bits", "secea_local_epochs")

    def __init__(self, run: ExchangeRun, *, model: str | None = None, metrics: str | None = None,
                 lr: float | None = None, reg: float | None = None, dim: int | None = None, secea_silos: int = 3,
                 secea_threshold: int = 1, secea_items: int = 20, secea_key_bits: int = 2048,
                 secea_local_epochs: int = 1, data: tuple[RatingData, RatingData] | None = None,
                 _rng: RandomBytes | None = None) -> None:
        super().__init__(run)
        if model not in (None, "mf"):
            raise InvalidParameters(f"--protocol secea trains MF silos: --model must be mf, got {model!r}")
        if metrics is not None and [m.strip() for m in metrics.split(",")] != ["rmse"]:
            raise InvalidParameters(f"--protocol secea scores RMSE only: --metrics must be rmse, got {metrics!r}")
        self.model, self.metrics = "mf", "rmse"
        self.lr = check_float("lr", 0.01 if lr is None else lr, above=0.0)
        self.reg = check_float("reg", 0.1 if reg is None else reg, low=0)
        self.dim = check_int("dim", 8 if dim is None else dim, low=1)
        self.secea_silos = check_int("secea_silos", secea_silos, low=2)
        self.secea_threshold = check_int("secea_threshold", secea_threshold, low=0)
        self.secea_items = check_int("secea_items", secea_items, low=0)
        self.secea_key_bits = check_int("secea_key_bits", secea_key_bits, low=MIN_KEY_BITS, high=MAX_KEY_BITS)
        self.secea_local_epochs = check_int("secea_local_epochs", secea_local_epochs, low=1)
        self.params = SecEAParams(self.secea_silos, self.secea_threshold, dim=self.dim + 1)  # checks N, T
        self._data, self._rng = data, _rng

    def plan(self) -> RoundPlan:
        return SECEA_PLAN

    def data(self) -> tuple[RatingData, RatingData]:
        """The run's ``(train, test)`` ratings (any rating dataset of :func:`secemb.data.load_dataset`;
        80/20, split by the run's seed; loaded once)."""
        if self._data is None:
            r = self.run
            ratings = load_dataset(r.dataset, r.data_dir, download=r.download, seed=r.seed)
            self._data = train_test_split(ratings, 0.2, r.seed)
        return self._data

    def _bloom(self, num_items: int) -> BloomParams:
        chosen = self.secea_items or num_items
        return union_bloom(num_items, self.secea_silos * chosen)

    def _server(self, num_items: int) -> ExchangeServer:
        """The server: a :class:`SecEANode`; its body limit is the largest silo message at these
        public sizes (UPLOAD with every query, ANSWER with every ciphertext, a PSU message)."""
        p, bloom = self.params, self._bloom(num_items)
        node = SecEANode(p, bloom, key_bits=self.secea_key_bits, _rng=self._rng)
        m, n = self.secea_items or num_items, self.secea_silos
        chunks = -(-p.width // ((self.secea_key_bits - 1) // SLOT_BITS))
        upload = 4 * (n - 1) * (m * p.width + m * m) + 8 * n
        answer = n * (16 + m * chunks * (self.secea_key_bits // 4 + 2))
        limit = max(upload, answer) + 4 * bloom.length + 256 * n + 4096
        return ExchangeServer(node, limit, lambda: b"", n)

    def make_server(self) -> ExchangeServer:
        """The server of a deployment (it holds no model: its public model is empty)."""
        return self._server(self.data()[0].num_items)

    def _silos(self, train: RatingData) -> tuple[list[MFSilo], list[np.ndarray], np.ndarray]:
        """The silos, the positions of each one's entities in its item list, and the public
        entities averaged (``chosen``)."""
        silos = make_silos(train, self.secea_silos, self.dim, self.lr, self.run.seed)
        chosen = popular_items(train, self.secea_items)
        return silos, [silo_entities(s, chosen) for s in silos], chosen

    def make_device(self, user: int) -> SecEASilo:
        """Silo ``user`` (in ``[0, secea_silos)``) of a deployment: its users' ratings of the
        run's dataset, its MF model, its keys (fresh OS randomness); nothing kept across a
        restart of its process (:meth:`make_durable_device` keeps it).  It signs its keys with
        the identity it is given before its set-up (:attr:`SecEASilo.identity`: ``secemb client``
        gives its credentials')."""
        return self._device(user, None)

    def make_durable_device(self, user: int, state: DeviceStateFile) -> SecEASilo:
        """Silo ``user`` as :meth:`make_device`, restartable: if ``state`` exists, the silo is the
        one it holds (its keys, the key directory, the union, its model with Adam's state, its
        batch order and the last round it padded), so it goes on with the deployment's next
        round without a new set-up; it writes ``state`` before its first set-up message (that it
        took part in that set-up: it takes no second one without its operator,
        :meth:`SecEASilo.party`), after the set-up, before each upload leaves it (the round's
        pads are then spent even if it stops) and after each round.  A state written at the
        start of a set-up that did not complete holds the set-up's round and the model only (the
        keys were never used for a round): the silo restored from it has fresh keys and takes no
        set-up until :meth:`SecEASilo.approve_new_set_up`.

        Raises
        ------
        CorruptDeviceState: ``state`` cannot be used -- unreadable, altered, of another silo or
        deployment, or not matching this silo (its keys' size, its entities, its model's
        shapes); nothing is overwritten.  InvalidParameters: as :meth:`make_device`.
        """
        return self._device(user, state)

    def _device(self, user: int, state: DeviceStateFile | None) -> SecEASilo:
        user = check_int("user", user, low=0)
        if user >= self.secea_silos:
            raise InvalidParameters(f"--user must be a silo in [0, {self.secea_silos}), got {user}")
        train = self.data()[0]
        silos, own, chosen = self._silos(train)
        rng = system_rng if self._rng is None else self._rng
        silo, entities = silos[user], silos[user].items[own[user]]
        gen = np.random.default_rng([self.run.seed + 1, user])
        last_round = setup_round = None
        loaded = state.load() if state is not None and state.exists() else None
        if loaded is None or "client" not in loaded[0]:  # no set-up completed: keys never used for a round
            client = SecEAClient(user, self.params, entities, key_bits=self.secea_key_bits, _rng=rng)
        if state is not None and loaded is not None:
            meta, arrays = loaded
            try:
                if "client" in meta:
                    client = SecEAClient.restore(user, self.params, entities, meta["client"], arrays,
                                                 key_bits=self.secea_key_bits, _rng=rng)
                    last_round = check_int("SecEA silo state: last_round", meta.get("last_round"), low=0)
                elif meta.get("last_round") is not None:
                    raise InvalidParameters("SecEA silo state: a last round but no keys")
                if "client" not in meta or meta.get("setup_round") is not None:  # older files of set-up silos have none
                    setup_round = check_int("SecEA silo state: setup_round", meta.get("setup_round"), low=0)
                silo.load_state(arrays)
                gen.bit_generator.state = dict(meta["batch_order"])
            except (InvalidParameters, ValueError, TypeError, KeyError, AttributeError) as exc:
                raise CorruptDeviceState(f"device state {state.path}: {exc}") from None
        return SecEASilo(silo, own[user], client, self._bloom(train.num_items), self.reg, self.secea_local_epochs,
                         gen, rng, store=state, last_round=last_round, setup_round=setup_round, chosen=chosen)

    def train(self, connect: Callable[[ExchangeServer], ExchangeRounds], *,
              on_start: Callable[[dict[str, Any]], None] | None = None,
              on_round: Callable[[RoundFigures], None] | None = None,
              on_epoch: Callable[[EpochFigures], None] | None = None) -> ExchangeResult:
        """Train the silos through the rounds ``connect`` gives (see the module docstring):
        round 0 the set-up, rounds 1..epochs the aggregations.

        Raises
        ------
        secemb.data.DatasetNotFoundError: MovieLens files missing.  secemb.errors.ProtocolError
        (or a ``RemoteError`` over HTTP): a round aborted.
        """
        train, test = self.data()
        silos, own, chosen = self._silos(train)
        r, n = self.run, self.secea_silos
        config: dict[str, Any] = {
            "dataset": r.dataset, "protocol": "secea", "model": "mf", "servers": 1, "relay": False,
            "layout": f"{n} silos, T={self.secea_threshold}, K={self.params.k}, {self.secea_key_bits}-bit Paillier",
            "active_users": int(np.unique(train.users).size), "m_prime": None,
            "m_prime_source": f"each silo's items among the {self.secea_items or train.num_items} averaged",
            "dim": self.dim, "lr": self.lr, "reg": self.reg, "batch": _BATCH, "optimizer": "adam", "seed": r.seed,
            "epochs": r.epochs, "users_per_round": n, "secea_silos": n, "secea_threshold": self.secea_threshold,
            "secea_parts": self.params.k, "secea_needed_answers": self.params.needed_answers,
            "secea_items": self.secea_items, "secea_key_bits": self.secea_key_bits,
            "secea_local_epochs": self.secea_local_epochs, "num_users": train.num_users,
            "num_items": train.num_items, "items_per_silo": [int(s.items.size) for s in silos],
            "entities_per_silo": [int(o.size) for o in own], "metrics": ["rmse"], "total_rounds": r.epochs,
        }
        if on_start is not None:
            on_start(config)
        hosted = self._server(train.num_items)
        node = hosted.node
        assert isinstance(node, SecEANode)
        rounds = connect(hosted)
        rng = system_rng if self._rng is None else self._rng
        gen = np.random.default_rng(r.seed + 1)  # batch order, as secemb bench secea's runs
        roster = Roster.generate()  # the run's own operator: it certifies each silo's signing key (OS randomness)
        node.pin = roster.pin  # the node checks the silos' signed messages at receipt
        devices = [SecEASilo(s, o, SecEAClient(i, self.params, s.items[o], key_bits=self.secea_key_bits,
                                               identity=roster.enroll(i), _rng=rng),
                             node.bloom, self.reg, self.secea_local_epochs, gen, rng, chosen=chosen)
                   for i, (s, o) in enumerate(zip(silos, own, strict=True))]
        setup = rounds.play(SETUP_ROUND, {i: d.setup_party() for i, d in enumerate(devices)})
        if setup.finished != list(range(n)):
            raise ProtocolError(f"SecEA's set-up finished for silos {setup.finished} only")
        config["secea_setup_bytes_per_silo"] = sum(sum(v.values()) for per in (setup.up, setup.down)
                                                   for v in per.values()) / n
        rounds_done: list[RoundFigures] = []
        epochs: list[EpochFigures] = []
        for k in range(1, r.epochs + 1):
            t_user = time.perf_counter()
            losses = [d.train_locally() for d in devices]
            t_user = time.perf_counter() - t_user
            parties = {i: d.round_party(k) for i, d in enumerate(devices)}
            rec = rounds.play(k, parties)
            if rec.finished != list(range(n)):
                raise ProtocolError(f"SecEA round {k} finished for silos {rec.finished} only")
            loss = float(np.mean(losses))
            rounds_done.append(RoundFigures(
                k, k, n, sum(sum(v.values()) for v in rec.up.values()), sum(sum(v.values()) for v in rec.down.values()),
                t_user + sum(sum(p.seconds.values()) for p in parties.values()),
                float(sum(rec.outcome.get("server_s", {}).values())), loss))
            epochs.append(EpochFigures(k, loss, {"rmse": silos_rmse(silos, test)}))
            if on_round is not None:
                on_round(rounds_done[-1])
            if on_epoch is not None:
                on_epoch(epochs[-1])
        return ExchangeResult(config, rounds_done, epochs, np.vstack([s.item_rows for s in silos]),
                              np.concatenate([s.user_rows.ravel() for s in silos]),
                              np.vstack([s.user_rows for s in silos]))


@dataclass
class SecEASilo:
    """A silo (a device of the engine): its MF model, the positions ``own`` of the items it
    aggregates, its :class:`SecEAClient` (keys, directory and union once set up), the public
    Bloom parameters, its local training (``reg``, ``local_epochs``, batch order from ``gen``)
    and the CSPRNG of its secrets.  ``store``: where it keeps its state (``None``: nowhere;
    :meth:`SecEAProtocol.make_durable_device`); ``last_round``: the last round (set-up or
    aggregation) it completed, ``None`` before its set-up; ``setup_round``: the last set-up it
    took part in, completed or not (``None``: none, or not recorded); ``chosen``: the public
    entities the deployment averages, which bound the union it takes (:class:`SecEASetupParty`).

    A silo takes part in one set-up: a deviating server that fails a set-up on purpose (a union
    without one of the silo's entities) learns one bit of its entities per set-up, so a second
    set-up needs its operator's :meth:`approve_new_set_up` (``secemb client --new-set-up``)."""

    silo: MFSilo
    own: np.ndarray
    client: SecEAClient
    bloom: BloomParams
    reg: float
    local_epochs: int
    gen: np.random.Generator
    rng: RandomBytes
    store: DeviceStateFile | None = None
    last_round: int | None = None
    setup_round: int | None = None
    chosen: np.ndarray | None = None
    _approved: bool = field(default=False, init=False, repr=False)

    def save(self) -> None:
        """Write its state to ``store`` (if any; atomically, 0600): once set up, the client's keys,
        directory, union and last padded round; the model with Adam's state, the batch order,
        ``last_round`` and ``setup_round``.

        Raises
        ------
        ProtocolError: the disk refused (the file is as it was; the round the silo is in fails).
        """
        if self.store is None:
            return
        meta, arrays = self.client.state() if self.client.set_up else (None, {})
        kept = {"last_round": self.last_round, "setup_round": self.setup_round,
                "batch_order": self.gen.bit_generator.state}
        try:
            self.store.save(kept if meta is None else {"client": meta, **kept}, arrays | self.silo.state())
        except OSError as exc:
            raise ProtocolError(f"silo {self.client.index}'s state {self.store.path} cannot be written "
                                f"({exc.strerror or type(exc).__name__})") from None

    def setup_party(self, round_id: int = SETUP_ROUND) -> SecEASetupParty:
        """Its part in the set-up (round ``round_id``): that it takes part is written first (before
        its first message leaves), its state again when the set-up is over.

        Raises
        ------
        ProtocolError: the disk refused the first write (nothing is sent).
        """
        party = SecEASetupParty(self.client, self.bloom, round_id, universe=self.chosen,
                                on_done=lambda: self._completed(round_id), _rng=self.rng)
        self.setup_round = round_id
        self.save()
        return party

    def approve_new_set_up(self) -> None:
        """Its operator's approval of one more set-up (``secemb client --new-set-up``): the next
        set-up round document is taken although the silo took part in a set-up before, with
        fresh keys (and no directory or union) if its last one completed; its model stays.  What
        the approval costs: a deviating server may learn one more bit of the silo's entities."""
        self._approved = True

    @property
    def identity(self) -> Identity | None:
        """The certified identity the silo signs its keys with and checks the directory's under
        (its client's, :meth:`SecEAClient.sign_with`; ``None``: not given yet).  ``secemb client``
        sets it from the silo's credentials (:class:`~secemb.protocols.exchange.SignedDevice`);
        a directory restored from the silo's state file is verified then.  Assigning raises
        InvalidParameters for another device's identity, or a restored directory it does not
        verify (the silo then takes part in no round).
        """
        return self.client.identity

    @identity.setter
    def identity(self, identity: Identity) -> None:
        self.client.sign_with(identity)

    def _completed(self, round_id: int) -> None:
        self.last_round = round_id
        self.save()

    def train_locally(self) -> float:
        """``local_epochs`` epochs on its ratings; their mean objective."""
        with one_thread():
            losses = [local_epoch(self.silo, self.reg, _BATCH, self.gen) for _ in range(self.local_epochs)]
        return float(np.mean(losses))

    def round_party(self, round_id: int) -> SecEAParty:
        """Its part in aggregation round ``round_id``: its aggregated item rows now; the averages
        are written back into its model when they arrive."""
        def write(average: np.ndarray) -> None:
            rows = self.silo.item_rows
            rows[self.own] = average
            self.silo.set_item_rows(rows)
            self._completed(round_id)

        return SecEAParty(self.client, round_id, self.silo.item_rows[self.own], on_average=write,
                          on_padded=self.save)

    def party(self, round_doc: Mapping[str, Any]) -> ExchangeParty:
        """Its party in the round ``round_doc`` announces (:meth:`SecEANode.open_round`): the
        set-up, or a round (it trains locally first).

        Raises
        ------
        InvalidMessage: a document without this silo, a round id off the node's range ``[0, 2^62)``,
        stages that are not SecEA's, a round not after the last one it took part in or padded
        an upload for, or a set-up when it took part in one before and its operator did not
        approve another (:meth:`approve_new_set_up`; the message names the flag): the silo unchanged.
        ProtocolError: a set-up whose record the disk refused (nothing is sent), or a signed silo
        not given its :attr:`identity` yet (nothing trained, written or sent).
        """
        if self.client.signed and self.client.identity is None:
            raise ProtocolError(f"silo {self.client.index} has no identity yet: it signs its keys with its "
                                "credentials' (SecEASilo.identity)")
        round_id, users, stages = round_doc.get("round_id"), round_doc.get("users"), round_doc.get("stages")
        if type(round_id) is not int or not 0 <= round_id < 2**62 or not isinstance(users, list) \
                or self.client.index not in users:
            raise InvalidMessage(f"not a SecEA round document for silo {self.client.index}")
        if stages == list(SECEA_SETUP_STAGES) and self._approved:
            self._approved = False  # one set-up per approval
            self.client = self.client.renewed() if self.client.set_up else self.client
            self.last_round = None
            return self.setup_party(round_id)
        if self.last_round is not None and round_id <= self.last_round:
            raise InvalidMessage(f"round {round_id} does not follow round {self.last_round}, the last silo "
                                 f"{self.client.index} took part in")
        if stages == list(SECEA_SETUP_STAGES):
            if self.last_round is not None or self.setup_round is not None:
                done = "completed" if self.client.set_up else "did not complete"
                raise InvalidMessage(
                    f"silo {self.client.index} took part in a set-up before (round "
                    f"{self.setup_round if self.setup_round is not None else self.last_round}, {done}): it takes no "
                    "second one without its operator (secemb client --new-set-up)")
            return self.setup_party(round_id)
        if stages == list(SECEA_STAGES):
            if round_id <= self.client.last_upload:  # refused before its local training changes the model
                raise InvalidMessage(f"round {round_id} is not after round {self.client.last_upload}, the last silo "
                                     f"{self.client.index} padded an upload for: its pads are used once")
            self.train_locally()
            return self.round_party(round_id)
        raise InvalidMessage(f"round document of round {round_id} with stages {stages!r} is not SecEA's")
