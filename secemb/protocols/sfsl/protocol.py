"""SFSL as a registered one-server protocol (``--protocol sfsl``; :mod:`secemb.protocols.exchange`).

:class:`SFSLProtocol` trains DIN on click samples with the stage list of
:data:`~secemb.protocols.sfsl.staged.SFSL_PLAN`: its ``train`` runs
:func:`~secemb.protocols.sfsl.simulate.train_sfsl`'s schedule (which devices each round, the
learning-rate decay, AUC after each epoch) with a round player (:class:`ExchangePlayer`) that
plays every round through the engine's rounds -- in process or over HTTP, the same code -- so
an engine run and the in-process reference of one seed and one CSPRNG give the same model bit
for bit.  Its :meth:`~SFSLProtocol.make_device` is a device of a deployment (``secemb client``:
its own click samples, a private user embedding from its own entropy).

Traffic per device and round is ``len()`` of the messages on the engine's links; the metric is AUC.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from secemb.data import load_dataset
from secemb.data.ctr import TAOBAO_SHAPES, ClickData, TaobaoShaped, movielens_clicks, split_clicks
from secemb.data.features import movielens_features
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, check_int
from secemb.models.din import DIN
from secemb.privacy.randomized_response import IndexPerturber, get_cpp
from secemb.protocols.device_state import CorruptDeviceState, DeviceStateFile
from secemb.protocols.exchange import (
    EpochFigures,
    ExchangeProtocol,
    ExchangeResult,
    ExchangeRounds,
    ExchangeRun,
    ExchangeServer,
    RoundFigures,
)
from secemb.protocols.sfsl.parties import (
    MIN_ROW_HOLDERS, RowSpace, SFSLDevice, SFSLServer, TrainingSettings, warn_min_row_holders,
)
from secemb.protocols.sfsl.round import RoundReport
from secemb.protocols.sfsl.simulate import SFSLResult, SFSLRun, round_settings, start_run, train_sfsl
from secemb.protocols.sfsl.staged import SFSL_PLAN, SFSLNode, SFSLParty, announced_settings
from secemb.protocols.stages import RoundPlan
from secemb.randomness import RandomBytes, system_rng
from secemb.secagg.identity import Identity, Roster
from secemb.secagg.psu import BloomParams

__all__ = ["ExchangePlayer", "SFSLProtocol", "click_dataset", "model_bytes"]

_STEPS = ("advertise", "shares", "masked", "consistency", "unmask")


def model_bytes(server: SFSLServer) -> bytes:
    """The public model as the node serves it: the goods table (row-major) then the dense
    vector, little-endian float64."""
    return np.concatenate([server.table.ravel(), server.dense]).astype("<f8").tobytes()


class ExchangePlayer:
    """Plays SFSL rounds through the engine's ``rounds`` (a
    :class:`~secemb.protocols.sfsl.simulate.RoundPlayer`); ``space``, ``bloom``: the public row
    space and PSU parameters; ``shape``: the goods table's, to decode the public model;
    ``roster``: the run's roster, which certifies each device's identity when it first plays
    (default a fresh one: in process the run is its own operator)."""

    def __init__(self, rounds: ExchangeRounds, space: RowSpace, bloom: BloomParams, shape: tuple[int, int], *,
                 roster: Roster | None = None) -> None:
        self.rounds, self.space, self.bloom, self.shape = rounds, space, bloom, shape
        self.roster = Roster.generate() if roster is None else roster
        self._identities: dict[int, Identity] = {}

    def identity(self, user: int) -> Identity:
        """Device ``user``'s identity under :attr:`roster` (enrolled once)."""
        if user not in self._identities:
            self._identities[user] = self.roster.enroll(user)
        return self._identities[user]

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
        parties = {u: SFSLParty(devices[u], round_id, len(ids), self.space, self.bloom, settings, rng,
                                identity=self.identity(u), _rng=_rng) for u in ids}
        rec = self.rounds.play(round_id, parties, silent_from=silent)
        out = rec.outcome
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
        flat = np.frombuffer(self.rounds.model(), dtype="<f8").astype(np.float64)
        k = self.shape[0] * self.shape[1]
        return flat[:k].reshape(self.shape), flat[k:]


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


def _rounds_per_epoch(train: ClickData, n: int) -> tuple[int, int]:
    active = int(np.count_nonzero(np.diff(train.user_bounds()) > 0))
    return active, max(1, math.ceil(active / n))


def _mean_loss(reports: list[RoundReport]) -> float:
    """The mean local objective over the participations of ``reports`` (NaN if no device
    trained on a sample: then a result document cannot be written and says so)."""
    losses = [v for rep in reports for v in rep.losses.values()]
    return float(np.mean(losses)) if losses else float("nan")


class SFSLProtocol(ExchangeProtocol):
    """Secure federated submodel learning (docs/sfsl.md): one server, DIN on click samples.

    Options (``secemb train``'s): ``sfsl_preset`` (CPP1..CPP5, default CPP2), ``model`` (din
    only), ``metrics`` (auc only), ``lr`` (the devices' SGD step, default 1.0, decayed x0.999 a
    round), ``dim`` (DIN's embedding size, default 18), ``batch`` (local batch, default 2),
    ``min_row_holders`` (the secure sum's, :attr:`TrainingSettings.min_row_holders`: an int in
    [1, ``users_per_round // 2 + 1``], default 2; 1 is the paper's, with finding R6's leak, and
    making the protocol warns: :func:`~secemb.protocols.sfsl.parties.warn_min_row_holders`).
    In a deployment each round document announces it with the other training settings and a
    device takes part only in rounds that announce its deployment's (:meth:`SFSLClient.party`).
    ``data``: ``(train, test)`` click samples instead of the run's dataset (Python API);
    ``_rng``: the CSPRNG of the PSU, the perturbation and the secure sums (tests only).

    Raises
    ------
    InvalidParameters: an unknown preset, another model or metric, fewer than 2 users per round,
    ``min_row_holders`` out of range.
    """

    name = "sfsl"
    options = ("sfsl_preset", "model", "metrics", "lr", "dim", "batch", "min_row_holders")

    def __init__(self, run: ExchangeRun, *, sfsl_preset: str | None = None, model: str | None = None,
                 metrics: str | None = None, lr: float | None = None, dim: int | None = None, batch: int = 2,
                 min_row_holders: int = MIN_ROW_HOLDERS, data: tuple[ClickData, ClickData] | None = None,
                 _rng: RandomBytes = system_rng) -> None:
        super().__init__(run)
        if model not in (None, "din"):
            raise InvalidParameters(f"--protocol sfsl trains DIN on click samples: --model must be din, got {model!r}")
        if metrics is not None and [m.strip() for m in metrics.split(",")] != ["auc"]:
            raise InvalidParameters(f"--protocol sfsl scores AUC only: --metrics must be auc, got {metrics!r}")
        if run.users_per_round < 2:
            raise InvalidParameters(f"--protocol sfsl needs at least 2 users per round (secure aggregation), "
                                    f"got {run.users_per_round}")
        self.sfsl_preset = (sfsl_preset or "CPP2").upper()
        get_cpp(self.sfsl_preset)
        self.model, self.metrics = "din", "auc"
        self.lr, self.dim = 1.0 if lr is None else float(lr), 18 if dim is None else dim
        self.batch = check_int("batch", batch, low=1)
        self.min_row_holders = min_row_holders
        self._sfsl_run(1)  # checks dim and min_row_holders
        warn_min_row_holders(min_row_holders)
        self._data, self._rng = data, _rng
        #: in process, the run is its own operator: this roster certifies the devices of
        #: :meth:`make_device` and :meth:`train` (``secemb client`` takes its credentials' identity instead)
        self.roster = Roster.generate()

    def plan(self) -> RoundPlan:
        return SFSL_PLAN

    def _sfsl_run(self, per_epoch: int) -> SFSLRun:
        return SFSLRun(preset=self.sfsl_preset, clients_per_round=self.run.users_per_round,
                       rounds=self.run.epochs * per_epoch,
                       settings=TrainingSettings(lr=self.lr, batch=self.batch, min_row_holders=self.min_row_holders),
                       dim=self.dim, seed=self.run.seed, eval_every=per_epoch)

    def data(self) -> tuple[ClickData, ClickData]:
        """The run's ``(train, test)`` click samples (loaded once)."""
        if self._data is None:
            r = self.run
            self._data = click_dataset(r.dataset, r.data_dir, download=r.download, seed=r.seed)
        return self._data

    def _server(self, server: SFSLServer, settings: TrainingSettings, num_users: int,
                lr_decay: float) -> ExchangeServer:
        node = SFSLNode(server, settings, lr_decay=lr_decay)
        sp = server.space
        # the longest device message: a masked input or a rows list, the PSU's masked filter, per
        # peer a share record (128)
        limit = 4 * sp.length * sp.width + 4 * (sp.length + node.bloom.length) + 128 * num_users + 4096
        return ExchangeServer(node, limit, lambda: model_bytes(server), num_users)

    def make_server(self) -> ExchangeServer:
        """The server of a deployment: DIN initialized from ``run.seed`` (as :meth:`train`'s
        first round sees it); each round's document announces the devices' training settings."""
        train = self.data()[0]
        run = self._sfsl_run(_rounds_per_epoch(train, self.run.users_per_round)[1])
        start = start_run(train, run)
        return self._server(start.server, round_settings(run), train.num_users, run.lr_decay)

    def make_device(self, user: int) -> SFSLClient:
        """Device ``user`` of a deployment: its own training samples of the run's dataset, a
        private user embedding drawn from its own entropy; nothing kept across a restart of its
        process (:meth:`make_durable_device` keeps it)."""
        return self._device(user, None)

    def make_durable_device(self, user: int, state: DeviceStateFile) -> SFSLClient:
        """Device ``user`` as :meth:`make_device`, restartable (``secemb client``): if ``state``
        exists, the device takes back Algorithm 2's memo (its permanent responses, which bound what
        its requests reveal over any number of rounds only if they are kept) and its private user
        embedding; it writes ``state`` whenever they change, before the message that follows
        from the change leaves (:class:`SFSLParty`'s ``on_changed``).

        Raises
        ------
        CorruptDeviceState: ``state`` cannot be used -- unreadable, altered, of another device or
        deployment, or not matching this device (a memo index outside the goods or in both
        answers, an embedding of another shape or not finite); nothing is overwritten.
        InvalidParameters: as :meth:`make_device`.
        """
        return self._device(user, state)

    def _device(self, user: int, state: DeviceStateFile | None) -> SFSLClient:
        train = self.data()[0]
        check_int(f"--user (dataset {self.run.dataset!r})", user, low=0, high=train.num_users - 1)
        bounds = train.user_bounds()
        model = DIN(num_categories=train.num_categories, dim=self.dim)
        rng = np.random.default_rng(int.from_bytes(os.urandom(16), "little"))
        device = SFSLDevice(user, train.subset(slice(bounds[user], bounds[user + 1])), get_cpp(self.sfsl_preset),
                            model, model.init_private(1, rng)[0])
        if state is not None and state.exists():
            _restore(device, state, train.num_goods)
        run = self._sfsl_run(1)  # the settings do not depend on the rounds per epoch
        return SFSLClient(device, RowSpace(train.num_goods, model.num_categories, model.dim, model.mlp_size), rng,
                          train.num_users, round_settings(run), run.lr_decay, self.run.users_per_round,
                          self.roster.enroll(user), store=state)

    def train(self, connect: Callable[[ExchangeServer], ExchangeRounds], *,
              on_start: Callable[[dict[str, Any]], None] | None = None,
              on_round: Callable[[RoundFigures], None] | None = None,
              on_epoch: Callable[[EpochFigures], None] | None = None) -> ExchangeResult:
        """Train DIN with SFSL through the rounds ``connect`` gives (see the class docstring).

        Raises
        ------
        InvalidParameters: a bad dataset; fewer users with samples than ``users_per_round``.
        secemb.data.DatasetNotFoundError: MovieLens files missing.
        """
        train, test = self.data()
        r = self.run
        active, per_epoch = _rounds_per_epoch(train, r.users_per_round)
        run = self._sfsl_run(per_epoch)
        config: dict[str, Any] = {
            "dataset": r.dataset, "protocol": "sfsl", "sfsl_preset": self.sfsl_preset,
            "layout": f"preset {self.sfsl_preset}", "relay": False, "servers": 1, "model": "din", "dim": self.dim,
            "lr": self.lr, "lr_decay": run.lr_decay, "reg": 0.0, "batch": self.batch, "optimizer": "sgd",
            "min_row_holders": self.min_row_holders,
            "seed": r.seed, "epochs": r.epochs, "users_per_round": r.users_per_round, "active_users": active,
            "num_users": train.num_users, "num_items": train.num_goods, "num_categories": train.num_categories,
            "num_train_samples": len(train), "num_test_samples": len(test), "m_prime": None,
            "m_prime_source": "PSU union, randomized response", "metrics": ["auc"], "total_rounds": run.rounds,
        }
        if on_start is not None:
            on_start(config)
        rounds: list[RoundFigures] = []
        epochs: list[EpochFigures] = []

        def progress(k: int, res: SFSLResult) -> None:
            rep = res.reports[-1]
            rounds.append(RoundFigures(
                k, (k - 1) // per_epoch + 1, len(rep.upload_bytes),
                sum(sum(v.values()) for v in rep.upload_bytes.values()),
                sum(sum(v.values()) for v in rep.download_bytes.values()),
                sum(sum(v.values()) for v in rep.client_seconds.values()), sum(rep.server_seconds.values()),
                _mean_loss([rep])))
            if on_round is not None:
                on_round(rounds[-1])
            if len(res.auc) > len(epochs):
                epochs.append(EpochFigures(k // per_epoch, _mean_loss(res.reports[k - per_epoch:k]),
                                           {"auc": res.auc[k]}))
                if on_epoch is not None:
                    on_epoch(epochs[-1])

        def player(server: SFSLServer, settings: TrainingSettings) -> ExchangePlayer:
            hosted = self._server(server, settings, train.num_users, run.lr_decay)
            node = hosted.node
            assert isinstance(node, SFSLNode)
            node.pin = self.roster.pin  # the node checks the devices' signed messages at receipt
            return ExchangePlayer(connect(hosted), server.space, node.bloom, server.table.shape, roster=self.roster)

        res = train_sfsl(train, test, run, progress=progress, player=player, _rng=self._rng)
        assert res.table is not None and res.dense is not None and res.user_embeddings is not None
        return ExchangeResult(config, rounds, epochs, res.table, res.dense, res.user_embeddings)


def _restore(device: SFSLDevice, state: DeviceStateFile, goods: int) -> None:
    """``device``'s memo and user embedding from ``state`` (:meth:`SFSLClient.save`), checked
    in full before anything is written.

    Raises
    ------
    CorruptDeviceState: as :meth:`SFSLProtocol.make_durable_device`.
    """
    _, arrays = state.load()
    yes, no, emb = (arrays.get(k) for k in ("yes", "no", "user_embedding"))
    try:
        if set(arrays) != {"yes", "no", "user_embedding"} or not isinstance(yes, np.ndarray) \
                or not isinstance(no, np.ndarray) or not isinstance(emb, np.ndarray) \
                or emb.shape != device.user_embedding.shape or emb.dtype != np.float64 or not np.isfinite(emb).all():
            raise InvalidParameters("the arrays are not a memo and a finite user embedding of this model")
        if any(a.size and (a.min() < 0 or a.max() >= goods) for a in (yes, no)):
            raise InvalidParameters(f"a memo index outside the {goods} goods")
        perturber = IndexPerturber(device.real, device.perturber.params)
        perturber.load_state_dict({"yes": yes, "no": no})
    except InvalidParameters as exc:
        raise CorruptDeviceState(f"device state {state.path}: {exc}") from None
    device.perturber = perturber
    device.user_embedding[...] = emb


@dataclass
class SFSLClient:
    """A device of an SFSL deployment (``secemb client``): ``device`` (its samples, Algorithm
    2's memo, its private user embedding, kept between rounds), the public row space, its
    training randomness (seeded from its own entropy), the dataset's number of users (a
    round's devices are among them: what bounds the answers it reads), and the deployment's
    training ``settings`` and ``lr_decay`` (what every round document must announce,
    :func:`~secemb.protocols.sfsl.staged.announced_settings`), the deployment's
    ``users_per_round`` (every round it takes part in has exactly that many devices: the round's
    secure-aggregation threshold follows from it, so a server cannot announce smaller rounds --
    pairs, whose sums are 2 devices' -- or larger ones, whose answers grow), and its certified ``identity``
    (:class:`~secemb.protocols.exchange.SignedDevice`: ``secemb client`` sets its credentials'
    identity; a device of :meth:`SFSLProtocol.make_device` has one of the protocol's own roster)."""

    device: SFSLDevice
    space: RowSpace
    rng: np.random.Generator
    num_users: int
    settings: TrainingSettings
    lr_decay: float
    users_per_round: int
    identity: Identity
    store: DeviceStateFile | None = None

    def save(self) -> None:
        """Write Algorithm 2's memo and the user embedding to ``store`` (if any; atomically, 0600).

        Raises
        ------
        ProtocolError: the disk refused (the file is as it was; the round the device is in fails
        before the message that follows from the change leaves).
        """
        if self.store is None:
            return
        try:
            self.store.save({}, {**self.device.perturber.state_dict(), "user_embedding": self.device.user_embedding})
        except OSError as exc:
            raise ProtocolError(f"device {self.device.user}'s state {self.store.path} cannot be written "
                                f"({exc.strerror or type(exc).__name__})") from None

    def party(self, round_doc: Mapping[str, Any]) -> SFSLParty:
        """Its party in the round ``round_doc`` announces (``round_id``, ``users`` and the
        round's public ``settings``, :meth:`SFSLNode.open_round`).

        Raises
        ------
        InvalidMessage: a document without them, a round id off the node's range
        ``[0, 2^62)``, users that are not exactly ``users_per_round`` distinct ids of the
        dataset's users (findings R2 and R5 of session 22),
        settings that a device cannot train with (:meth:`TrainingSettings.check`) or that are
        not the deployment's for this round (a server's other epochs, batch, step size,
        quantization or ``min_row_holders``: e.g. a million epochs would keep the device training
        for hours, and ``min_row_holders = 1`` in a deployment of 2 would reopen finding R6).
        """
        try:
            round_id, users, settings = round_doc["round_id"], round_doc["users"], round_doc["settings"]
            if type(round_id) is not int or not 0 <= round_id < 2**62 or not isinstance(users, list) \
                    or self.device.user not in users \
                    or not all(type(u) is int and 0 <= u < self.num_users for u in users) \
                    or len(set(users)) != len(users):
                raise TypeError("round_id, users")
            if len(users) != self.users_per_round:
                raise TypeError(f"a round of {len(users)} users, not the deployment's {self.users_per_round}")
            fields = {k: settings[k] for k in asdict(TrainingSettings())}
            rs = TrainingSettings(**fields).check(len(users))
            if rs != announced_settings(self.settings, self.lr_decay, round_id):
                raise InvalidParameters("settings other than the deployment's")
        except (KeyError, TypeError, InvalidParameters) as exc:
            raise InvalidMessage(f"not an SFSL round document for user {self.device.user} ({exc})") from None
        bloom = BloomParams.exact(self.space.goods)
        return SFSLParty(self.device, round_id, len(users), self.space, bloom, rs, self.rng, identity=self.identity,
                         on_changed=self.save)
