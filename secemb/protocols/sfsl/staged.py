"""One SFSL round (Algorithm 1) as the stage list the round engine executes: the server
(:class:`SFSLNode`) and one device's part in one round (:class:`SFSLParty`), each a state
machine over bytes (no transport here: :mod:`secemb.sim.player` moves the bytes over the stage links).

The stages (:data:`SFSL_PLAN`, from :data:`secemb.protocols.stages.EXCHANGE_STAGES`) are
*exchanges*: every live device sends the server one message, the operator closes the stage,
the server answers each device it keeps with one message::

    psu-advertise     advertise   -> keys        the private set union over secure aggregation
    psu-shares        shares      -> relayed     (dense, width 1, secagg round 2r)
    psu-masked        masked      -> survivors
    psu-consistency   consistency -> signatures
    psu-unmask        unmask      -> union       the union, to the PSU's survivors only
    download          request     -> reply       Algorithm 2 over the union, then W_{S''}
    sum-advertise     advertise   -> keys        the weighted secure sum over the row space
    sum-shares        shares      -> relayed     (sparse, width d + 1, secagg round 2r + 1);
    sum-masked        masked      -> survivors   the device trains before it advertises
    sum-consistency   consistency -> signatures
    sum-unmask        unmask                     the server applies the count-normalized mean

Both secure aggregations are *signed* rounds (:attr:`~secemb.secagg.config.SecAggConfig.signed`,
docs/secagg.md, "Active server"): each device signs its keys with its certified identity (its
credentials' :class:`~secemb.secagg.identity.Identity`), checks every peer's before it shares,
unmasks only after the threshold of survivors signed the same survivor list, and in the secure
sum learns the rows it shares with each peer from that peer's signed row set: a bitmap over the
round's public candidate rows (:func:`sum_candidates`: the PSU's union and its categories), in
the key list every device is sent.  One deviating server reads no device's goods or update: the
device refuses (``InvalidMessage``) instead.

Both sides draw exactly what :func:`~secemb.protocols.sfsl.round.sfsl_round` draws, in the
same order when the engine runs the devices of a stage one after another in increasing id
order (the PSU inputs when the parties are made, then stage by stage), so an engine round with
the same generators gives the in-process round's model bit for bit
(``tests/engine/test_sfsl_engine.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, check_int
from secemb.protocols.exchange import (
    add_seconds, closing_stage, current_round, open_stage, secagg_findings, stage_reply,
)
from secemb.protocols.sfsl.parties import (
    MIN_ROW_HOLDERS, RowSpace, SFSLDevice, SFSLServer, TrainingSettings, categories_of,
)
from secemb.protocols.stages import EXCHANGE_STAGES, SERVER0, USER, Hop, RoundPlan
from secemb.randomness import RandomBytes, system_rng
from secemb.protocols.sfsl.wire import reply_bytes
from secemb.secagg import SecAggAborted, SecAggClient, SecAggConfig, SecAggServer, default_threshold
from secemb.secagg.limits import longest_server_message, longest_union_message, within_longest
from secemb.secagg.config import check_min_row_holders
from secemb.secagg.identity import Identity, RosterPin
from secemb.secagg.psu import BloomParams, psu_input, psu_union, read_union, union_message

__all__ = ["MIN_ROW_HOLDERS", "SFSL_PLAN", "SFSLNode", "SFSLParty", "announced_settings", "psu_config",
           "sum_candidates", "sum_config"]

#: per stage of :data:`EXCHANGE_STAGES`: the device's message kind and the server's answer (``None``: none)
_KINDS: dict[str, tuple[str, str | None]] = {
    "psu-advertise": ("advertise", "keys"), "psu-shares": ("shares", "relayed"),
    "psu-masked": ("masked", "survivors"), "psu-consistency": ("consistency", "signatures"),
    "psu-unmask": ("unmask", "union"), "download": ("submodel_request", "submodel_reply"),
    "sum-advertise": ("advertise", "keys"), "sum-shares": ("shares", "relayed"),
    "sum-masked": ("masked", "survivors"), "sum-consistency": ("consistency", "signatures"),
    "sum-unmask": ("unmask", None),
}
#: the secure-aggregation step each step answers (the server's answer it reads)
_PREVIOUS = {"shares": "advertise", "masked": "shares", "consistency": "masked", "unmask": "consistency"}


def _plan() -> RoundPlan:
    hops: list[Hop] = []
    for stage in EXCHANGE_STAGES:
        up, down = _KINDS[stage]
        hops.append(Hop(stage, USER, SERVER0, up))
        if down is not None:
            hops.append(Hop(stage, SERVER0, USER, down))
    return RoundPlan(tuple(hops), stages=EXCHANGE_STAGES, servers=1)


#: SFSL's round: eleven exchanges between the devices and the one server
SFSL_PLAN = _plan()


def psu_config(bloom: BloomParams, n: int, round_id: int) -> SecAggConfig:
    """The PSU's secure-aggregation round of SFSL round ``round_id`` with ``n`` chosen devices:
    signed, dense over the Bloom filter, threshold ``n // 2 + 1``, secagg round id ``2r``."""
    return replace(bloom.config(default_threshold(n), 2 * round_id), signed=True)


def sum_candidates(space: RowSpace, union: np.ndarray, goods_category: np.ndarray) -> tuple[int, ...]:
    """The secure sum's candidate rows (public once the PSU is over): the goods of the PSU's
    ``union`` and their categories' rows (``goods + category``), increasing.  A device's
    perturbed set S'' is a subset of the union (Algorithm 2), so its rows below the dense rows
    are candidates."""
    union = np.asarray(union, dtype=np.int64)
    return tuple(np.concatenate([union, space.goods + categories_of(union, goods_category)]).tolist())


def sum_config(space: RowSpace, threshold: int, round_id: int, candidates: tuple[int, ...], *,
               min_row_holders: int = MIN_ROW_HOLDERS) -> SecAggConfig:
    """The secure sum's secure-aggregation round of SFSL round ``round_id`` (``threshold``):
    sparse over ``space`` (width ``d + 1``), signed, over the ``candidates`` of
    :func:`sum_candidates` and the rows from ``goods + categories`` on (the dense rows), which
    every device holds; secagg round id ``2r + 1``; ``min_row_holders`` ``m`` (default
    :data:`MIN_ROW_HOLDERS`; SFSL's parties pass their settings',
    :attr:`TrainingSettings.min_row_holders`: a device contributes zero on a row fewer than
    ``m`` devices hold, and unmasks only where no revealed row sum is over fewer than ``m``).
    ``m`` is in the round's header (:meth:`~secemb.secagg.config.SecAggConfig.header`), which
    every message of the round binds: each device enforces the ``m`` of its own settings."""
    return SecAggConfig(length=space.length, threshold=threshold, width=space.width, round_id=2 * round_id + 1,
                        sparse=True, signed=True, public_from=space.goods + space.categories, candidates=candidates,
                        min_row_holders=min_row_holders)


def announced_settings(settings: TrainingSettings, lr_decay: float, round_id: int) -> TrainingSettings:
    """The training settings round ``round_id``'s document announces: ``settings`` with the step
    size ``settings.lr * lr_decay ** (round_id - 1)`` (no decay before round 1)."""
    return replace(settings, lr=settings.lr * lr_decay ** max(round_id - 1, 0))


@dataclass
class _Round:
    round_id: int
    users: frozenset[int]
    psu: SecAggServer
    sum: SecAggServer | None = None  # the secure sum's, once the union (its candidate rows) is known
    stage: int = 0
    replies: dict[str, dict[int, bytes]] = field(default_factory=dict)
    union: np.ndarray | None = None
    receivers: frozenset[int] = frozenset()
    seconds: dict[str, float] = field(default_factory=dict)
    state: str = "open"
    reason: str | None = None
    updated_rows: int = 0


class SFSLNode:
    """The cloud server's side of SFSL rounds, one round at a time.

    Parameters
    ----------
    server: the public model and its update (:class:`SFSLServer`).
    settings: the public quantization (``bound``, ``levels``) the update is decoded with, and the
        secure sum's ``min_row_holders`` (the devices check that the round document announces
        their deployment's: :meth:`~secemb.protocols.sfsl.protocol.SFSLClient.party`).
    bloom: the PSU's Bloom parameters (default the paper's evaluation setting, one position per
        goods).
    lr_decay: the devices' step size decays by this factor a round: round ``r``'s document
        announces ``settings.lr * lr_decay ** (r - 1)``.
    pin: the deployment's roster (public; a :class:`~secemb.protocols.exchange.RosterPinnedNode`,
        settable before the first round): both secure aggregations then refuse at receipt an
        advertise whose certificate is not the roster's for its sender and deployment, as they
        refuse one whose signature does not verify or a consistency signature that does not
        (:class:`~secemb.secagg.SecAggServer`); the device is then out of the round as a
        dropout.  ``None``: the signatures are checked under the key each certificate names.

    Every method raises :class:`~secemb.errors.ProtocolError` when called for another round or
    out of stage order and :class:`~secemb.errors.InvalidMessage` for a malformed message, a
    duplicate or a device not in the stage; a refused call changes nothing.
    """

    plan = SFSL_PLAN

    def __init__(self, server: SFSLServer, settings: TrainingSettings, bloom: BloomParams | None = None, *,
                 lr_decay: float = 1.0, pin: RosterPin | None = None) -> None:
        self.server, self.settings, self.lr_decay, self.pin = server, settings, lr_decay, pin
        self.bloom = BloomParams.exact(server.space.goods) if bloom is None else bloom
        self._round: _Round | None = None

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        """Start round ``round_id`` for ``users`` (distinct ids, at least 2, at least
        ``2 * min_row_holders - 1`` of them: ``min_row_holders`` is at most the threshold); its
        public document (round id, users, threshold, stages, and the devices' training
        ``settings`` of the round: :class:`TrainingSettings`' fields)."""
        if self._round is not None and self._round.state == "open":
            raise ProtocolError(f"round {self._round.round_id} is still open")
        round_id = check_int("round_id", round_id, low=0, high=2**62 - 1)
        if self._round is not None and round_id <= self._round.round_id:
            raise ProtocolError(f"round {round_id} does not follow round {self._round.round_id}")
        ids = sorted({int(u) for u in users})
        if len(ids) != len(users) or len(ids) < 2 or ids[0] < 0:
            raise InvalidParameters(f"a round needs at least 2 distinct non-negative user ids, got {users!r}")
        psu_cfg = psu_config(self.bloom, len(ids), round_id)
        check_min_row_holders(self.settings.min_row_holders, psu_cfg.threshold, len(ids))
        self._round = _Round(round_id, frozenset(ids), SecAggServer(psu_cfg, pin=self.pin))
        settings = announced_settings(self.settings, self.lr_decay, round_id)
        return {"round_id": round_id, "users": ids, "threshold": psu_cfg.threshold, "stages": list(self.plan.stages),
                "settings": asdict(settings)}

    def receive(self, round_id: int, stage: str, user: int, body: bytes) -> None:
        """Device ``user``'s message of ``stage``."""
        rnd = open_stage(self._round, round_id, stage, self.plan.stages)
        if user not in rnd.users:
            raise InvalidMessage(f"user {user} is not a participant of round {round_id}")
        t0 = time.perf_counter()
        part, step = stage.split("-") if stage != "download" else ("download", "")
        if part == "download":
            if user not in rnd.receivers:
                raise InvalidMessage(f"user {user} did not receive the union of round {round_id}")
            if user in rnd.replies.get(stage, {}):
                raise InvalidMessage(f"duplicate download request from user {user}")
            out = self.server.reply(body, round_id, rnd.union)  # checks the request in full first, then the union
            rnd.replies.setdefault(stage, {})[user] = out
        else:
            if part == "sum" and user not in rnd.receivers:
                raise InvalidMessage(f"user {user} left round {round_id} in the PSU")
            agg = rnd.psu if part == "psu" else rnd.sum
            assert agg is not None  # the union's receivers exist once the sum's server does
            receive = {"advertise": agg.receive_advertise, "shares": agg.receive_shares,
                       "masked": agg.receive_masked, "consistency": agg.receive_consistency,
                       "unmask": agg.receive_unmask}[step]
            receive(user, body)
        add_seconds(rnd.seconds, part, t0)

    def close(self, round_id: int, stage: str) -> None:
        """Close ``stage``: the server builds its answers (the secure aggregations close their
        stage; after ``psu-unmask`` it decodes the union, after ``sum-unmask`` it updates the
        model and the round is committed).

        Raises
        ------
        SecAggAborted: fewer than the threshold left, or a device's shares do not open the sum
            (a corrupted unmask message, caught only now); the round is aborted, the model
            unchanged, and the next round can be opened.
        """
        rnd = open_stage(self._round, round_id, stage, self.plan.stages)
        t0 = time.perf_counter()
        part = stage.split("-")[0]
        with closing_stage(rnd, stage, SecAggAborted):
            if stage == "psu-unmask":
                rnd.union = psu_union(self.bloom, rnd.psu.result())
                msg = union_message(2 * round_id, rnd.union)
                rnd.receivers = frozenset(rnd.psu.survivors)
                rnd.replies[stage] = {u: msg for u in rnd.receivers}
                candidates = sum_candidates(self.server.space, rnd.union, self.server.goods_category)
                rnd.sum = SecAggServer(sum_config(self.server.space, rnd.psu.config.threshold, round_id, candidates,
                                                  min_row_holders=self.settings.min_row_holders), pin=self.pin)
            elif stage == "sum-unmask":
                assert rnd.sum is not None
                total = rnd.sum.result()
                rnd.updated_rows = self.server.apply(total, self.settings)
                rnd.state = "committed"
            elif part != "download":
                agg = rnd.psu if part == "psu" else rnd.sum
                assert agg is not None  # stages run in order: the sum's stages follow psu-unmask
                build = {"advertise": agg.keys_messages, "shares": agg.relayed_messages,
                         "masked": agg.survivors_messages, "consistency": agg.signatures_messages}[stage.split("-")[1]]
                rnd.replies[stage] = build()
        add_seconds(rnd.seconds, part, t0)

    def reply(self, round_id: int, stage: str, user: int) -> bytes | None:
        """The server's answer to ``user`` in ``stage`` once the stage is closed, until the next
        stage closes (``None``: the device is not kept, e.g. it is not among the survivors).

        Raises
        ------
        ProtocolError: the stage is not closed, or its answers were released (the next stage
            closed, or the round was aborted: :func:`~secemb.protocols.exchange.closing_stage`)."""
        return stage_reply(self._round, round_id, stage, self.plan.stages, user)

    def outcome(self, round_id: int) -> dict[str, Any]:
        """The round's state, survivors of the secure sum, the devices found cheating as holders
        or dealers of shares (``bad_shares``: :attr:`~secemb.secagg.server.SecAggServer.cheaters`
        of the PSU and the sum), the devices' unverifiable complaints (``complaints``: device ->
        the sorted devices whose encrypted shares to it did not open, in the PSU or the sum:
        :func:`~secemb.protocols.exchange.secagg_findings`; informative only, docs/deployment.md), union
        size, updated rows and the server's seconds per part (psu, download, sum); ``aborting_dropouts``:
        the sorted devices the PSU's or the sum's abort named
        (:attr:`~secemb.secagg.server.SecAggServer.aborting_dropouts`: a device whose dropout breached
        the sum's ``min_row_holders``, or whose secret the complaints against it alone left short;
        a suspicion, counted by the one-server server: :mod:`secemb.server.exchange_state`)."""
        rnd = current_round(self._round, round_id)
        return {"round_id": round_id, "state": rnd.state, "reason": rnd.reason, **secagg_findings(rnd.psu, rnd.sum),
                "aborting_dropouts": sorted({u for agg in (rnd.psu, rnd.sum) if agg is not None
                                             for u in agg.aborting_dropouts}),
                "survivors": rnd.sum.survivors if rnd.state == "committed" and rnd.sum is not None else [],
                "union_size": None if rnd.union is None else int(rnd.union.size),
                "updated_rows": rnd.updated_rows, "server_s": dict(rnd.seconds)}

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What a restart needs (:class:`~secemb.protocols.exchange.DurableExchangeNode`): the
        public model (the round ids and the devices' settings follow from the round document)."""
        return {}, {"table": self.server.table, "dense": self.server.dense}

    def restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Take back :meth:`state`'s model (written into the server's arrays in place).

        Raises
        ------
        InvalidParameters: an array missing, of another shape or dtype, or not finite.
        """
        for name, current in (("table", self.server.table), ("dense", self.server.dense)):
            got = arrays.get(name)
            if not isinstance(got, np.ndarray) or got.shape != current.shape or got.dtype != current.dtype \
                    or not np.isfinite(got).all():
                raise InvalidParameters(f"SFSL state: {name} must be finite {current.dtype} of shape {current.shape}")
        self.server.table[...] = arrays["table"]
        self.server.dense[...] = arrays["dense"]


class SFSLParty:
    """Device ``device``'s part in round ``round_id`` of ``n`` chosen devices.

    ``identity``: the device's certified identity (:mod:`secemb.secagg.identity`; its user id
    is the device's), with which it signs in both secure aggregations and checks its peers.
    Making it draws the device's PSU input (its real goods set, :func:`~secemb.secagg.psu.psu_input`);
    :meth:`message` gives its message of a stage, :meth:`accept` takes the server's answer.
    ``rng`` is the training randomness (batch order, stochastic rounding), ``_rng`` the CSPRNG
    of the PSU, the perturbation and the secure sums.  ``seconds``: the device's own work per
    part (``psu``, ``perturb``, ``train``, ``secagg``).  :meth:`answer_bytes`: the longest
    answer of a stage an honest server sends it (what a deployed device reads at most).
    ``on_changed`` (if given) is called once the device's persistent state has changed and before
    the message that follows from it leaves: after Algorithm 2's perturbation (its memo) and after
    the local training (its user embedding), e.g. to write the device's state file.
    """

    def __init__(self, device: SFSLDevice, round_id: int, n: int, space: RowSpace, bloom: BloomParams,
                 settings: TrainingSettings, rng: np.random.Generator, *, identity: Identity,
                 _rng: RandomBytes = system_rng, on_changed: Callable[[], None] | None = None) -> None:
        if identity.user != device.user:
            raise InvalidParameters(f"device {device.user} was given the identity of device {identity.user}")
        self.identity = identity
        self.device, self.round_id, self.n, self.space, self.bloom = device, round_id, n, space, bloom
        self.settings, self.rng, self._rng, self.on_changed = settings, rng, _rng, on_changed
        self.psu_config = psu_config(bloom, n, round_id)
        self._sum_config: SecAggConfig | None = None
        self.seconds: dict[str, float] = {}
        self.union: np.ndarray | None = None
        self._answers: dict[str, bytes] = {}
        self._psu: SecAggClient | None = None
        self._sum: SecAggClient | None = None
        self._values = np.empty((0, space.width), np.uint32)  # the secure sum's input, once trained
        t0 = time.perf_counter()
        self._psu_input = psu_input(bloom, device.real, _rng=_rng)
        add_seconds(self.seconds, "psu", t0)

    def message(self, stage: str) -> bytes:
        """The device's message of ``stage`` (stages in :data:`SFSL_PLAN` order, each after the
        server's answer to the previous one)."""
        t0 = time.perf_counter()
        part = "perturb" if stage == "download" else "psu" if stage.startswith("psu") else "secagg"
        if stage == "psu-advertise":
            self._psu = SecAggClient(self.device.user, self.psu_config, identity=self.identity, _rng=self._rng)
            out = self._psu.advertise()
        elif stage == "download":
            self.union = read_union(self._answer("psu-unmask"), 2 * self.round_id, self.space.goods)
            self._sum_config = sum_config(self.space, self.psu_config.threshold, self.round_id,
                                          sum_candidates(self.space, self.union, self.device.goods_category),
                                          min_row_holders=self.settings.min_row_holders)
            out = self.device.request(self.union, self.round_id, _rng=self._rng)
            if self.on_changed is not None:
                self.on_changed()
        elif stage == "sum-advertise":
            t1 = time.perf_counter()
            rows, self._values = self.device.train(self._answer("download"), self.round_id, self.space,
                                                   self.settings, self.rng)
            add_seconds(self.seconds, "train", t1)
            if self.on_changed is not None:
                self.on_changed()
            t0 = time.perf_counter()
            self._sum = SecAggClient(self.device.user, self.sum_config, identity=self.identity, _rng=self._rng)
            out = self._sum.advertise(rows)
        else:
            client = self._psu if part == "psu" else self._sum
            if client is None:
                raise ProtocolError(f"device {self.device.user}: {stage} before advertising")
            step = stage.split("-")[1]
            answer = self._answer(f"{stage.split('-')[0]}-{_PREVIOUS[step]}")
            if step == "shares":
                out = client.share_keys(answer)
            elif step == "masked":
                out = client.masked_input(answer, self._psu_input if part == "psu" else self._values)
            elif step == "consistency":
                out = client.consistency(answer)
            else:
                out = client.unmask(answer)
        add_seconds(self.seconds, part, t0)
        return out

    def accept(self, stage: str, body: bytes) -> None:
        """The server's answer in ``stage``.

        Raises
        ------
        InvalidMessage: longer than any honest answer of the stage (:meth:`answer_bytes`; e.g. a
        key list of more devices than the round's, whose shares the device would compute and
        send): refused before anything of it is read, nothing kept.
        """
        self._answers[stage] = within_longest(body, self.answer_bytes(stage), f"the answer of {stage}")

    def answer_bytes(self, stage: str) -> int:
        """The longest answer of ``stage`` an honest server sends this device, from the round's
        public parameters (``n`` devices, the row space, the PSU's domain): the secure
        aggregations' messages at ``n`` clients
        (:func:`~secemb.secagg.limits.longest_server_message`: signed rounds; the secure sum's
        key list with each device's row set over the round's candidate rows), the union of every goods
        (:func:`~secemb.secagg.limits.longest_union_message`), and the submodel of every goods,
        every category and the dense layers (:func:`~secemb.protocols.sfsl.wire.reply_bytes`).

        Raises
        ------
        ValueError: a stage without an answer (``sum-unmask``) or not SFSL's.
        ProtocolError: a stage of the secure sum before the union is read.
        """
        kind = _KINDS.get(stage, ("", None))[1]
        if kind == "union":
            return longest_union_message(self.bloom.domain)
        if kind == "submodel_reply":
            sp = self.space
            return reply_bytes(sp.goods, sp.categories, sp.dim, sp.mlp_size)
        if kind is None:
            raise ValueError(f"SFSL's stage {stage!r} has no answer")
        config = self.psu_config if stage.startswith("psu") else self.sum_config
        return longest_server_message(config, self.n, kind)

    @property
    def sum_config(self) -> SecAggConfig:
        """The secure sum's round (:func:`sum_config`), known once the union (its candidate rows) is read.

        Raises
        ------
        ProtocolError: the union is not read yet.
        """
        if self._sum_config is None:
            raise ProtocolError(f"device {self.device.user}: the secure sum before the union of round {self.round_id}")
        return self._sum_config

    def _answer(self, stage: str) -> bytes:
        if stage not in self._answers:
            raise ProtocolError(f"device {self.device.user}: no answer of stage {stage} yet")
        return self._answers[stage]
