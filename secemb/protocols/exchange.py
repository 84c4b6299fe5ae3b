"""One-server protocols ("exchange" protocols): the interface a registered protocol of that
shape implements, and what the engine gives it.

**Shape.** Parties are devices (or silos) and one server (:data:`~secemb.protocols.stages.SERVER0`).
A round is a :class:`~secemb.protocols.stages.RoundPlan` with ``servers=1``; each of its stages
is an *exchange*: every device still in the round sends the server one message
(:meth:`ExchangeParty.message`), the stage closes, and the server answers each device with at
most one message (:meth:`ExchangeParty.accept`; no answer: the device is out of the round).
The server side is an :class:`ExchangeNode` (a state machine over bytes).  The engine moves the
bytes (:func:`secemb.sim.player.play`) over the stage links (:class:`~secemb.transport.links.StageLink`):
in process, or over HTTP (:mod:`secemb.server.exchange_app`, :mod:`secemb.transport.http`).

**Adding one** (docs/protocol.md, "A one-server protocol"): subclass :class:`ExchangeProtocol`
and register it with ``servers=1``::

    register_protocol("mine", "mypkg.mine:MineProtocol", wire_id=201, servers=1)

Stage and message names of its own join the shared vocabulary first
(:func:`~secemb.protocols.stages.register_stages`).  Then ``secemb train --protocol mine`` and
``secemb demo [--network] --protocol mine`` run it and, if it implements
:meth:`ExchangeProtocol.make_device`, so do ``secemb admin init --protocol mine``,
``secemb serve`` and ``secemb client``.

**What the protocol provides** (all in :class:`ExchangeProtocol`):

* ``options``: the keyword options of its constructor beyond the run (:class:`ExchangeRun`),
  named as ``secemb train``'s options (``lr``, ``dim``, ``sfsl_preset``, ...): the command line
  gives it those the user set, and refuses (exit 2) any other option the user set;
* :meth:`~ExchangeProtocol.plan`: its round (``servers=1``);
* :meth:`~ExchangeProtocol.make_server`: the server at the start of a run (an
  :class:`ExchangeServer`: node, body limit, public model bytes, device ids) -- what
  ``secemb serve`` hosts;
* :meth:`~ExchangeProtocol.train`: a whole training run.  It makes its server, hands it to
  ``connect`` (the engine hosts it in process or behind HTTP and returns the
  :class:`ExchangeRounds` that play rounds against it), chooses each round's devices, makes
  their :class:`ExchangeParty` objects and calls :meth:`ExchangeRounds.play`; it reports each
  round (:class:`RoundFigures`) and epoch (:class:`EpochFigures`) and returns the run's
  :class:`ExchangeResult` (the engine's :func:`secemb.sim.player.train_exchange` turns them
  into ``secemb train``'s ``TrainResult`` document).  The same code runs in process and over
  HTTP, so both give the same ``model_sha256`` where the protocol's own randomness is seeded;
* :meth:`~ExchangeProtocol.make_device` (optional): device ``user``'s persistent state in a
  deployment (``secemb client``); from each round's public document (what the node's
  ``open_round`` returned) it makes the device's party of that round;
* (optional) a node that is a :class:`RosterPinnedNode` (``pin``): ``secemb serve`` gives it the
  deployment's roster pin before the first round, and it refuses at receipt a device's signed
  message whose certificate or signature does not verify (one device cannot then fail the
  others' round under the server's name);
* (optional) a node that is a :class:`DurableExchangeNode` (``state`` and ``restore``): ``secemb
  serve`` checkpoints it after each committed round and restores it at start
  (:mod:`secemb.server.exchange_state`); a node without them cannot be restarted over a committed
  round.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol as TypingProtocol, TypeVar, runtime_checkable

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, check_int
from secemb.options import DEFAULTS
from secemb.protocols.base import ExchangeNode
from secemb.protocols.stages import RoundPlan
from secemb.secagg.identity import Identity, RosterPin

if TYPE_CHECKING:
    from secemb.secagg.server import SecAggServer

__all__ = ["DurableExchangeNode", "EpochFigures", "ExchangeDevice", "ExchangeNode", "ExchangeParty", "ExchangeProtocol",
           "ExchangeRecord", "ExchangeResult", "ExchangeRounds", "ExchangeRun", "ExchangeServer", "RosterPinnedNode",
           "RoundFigures", "SignedDevice", "StagedRound", "add_seconds", "closing_stage", "current_round", "open_stage",
           "secagg_findings", "stage_reply"]

class ExchangeParty(TypingProtocol):
    """A device's part in one round of a one-server protocol."""

    def message(self, stage: str) -> bytes:
        """Its message of ``stage`` (stages in the plan's order, each after the answer of the previous one)."""

    def accept(self, stage: str, body: bytes) -> None:
        """The server's answer of ``stage``."""


class ExchangeDevice(TypingProtocol):
    """A device of a deployment (``secemb client``): what persists between its rounds."""

    def party(self, round_doc: Mapping[str, Any]) -> ExchangeParty:
        """Its party in the round ``round_doc`` announces (the node's ``open_round`` document,
        public: ``round_id``, ``users``, ``stages`` and the protocol's own fields).

        Raises
        ------
        secemb.errors.InvalidMessage: a document the device cannot take part in.
        """


@runtime_checkable
class SignedDevice(TypingProtocol):
    """A device that signs its messages with an identity certified by the deployment's roster
    (:mod:`secemb.secagg.identity`; e.g. an SFSL device, docs/secagg.md, "Active server").
    ``secemb client`` sets ``identity`` to its credentials' before the device's first round."""

    identity: Identity


@runtime_checkable
class RosterPinnedNode(TypingProtocol):
    """An :class:`ExchangeNode` that checks the devices' signed messages at receipt under the
    deployment's roster (:class:`~secemb.secagg.identity.RosterPin`, public values): a message
    whose certificate is not the roster's for its sender and this deployment, or whose signature
    does not verify over exactly what the peers verify, is refused
    (:class:`~secemb.errors.InvalidMessage`, HTTP 400), nothing of it kept, and its sender is
    absent from the stage as a dropout is.  ``pin`` is set before the first round (``secemb
    serve``: from ``exchange.json``); ``None``: only what needs no roster is checked."""

    pin: RosterPin | None


@runtime_checkable
class DurableExchangeNode(TypingProtocol):
    """An :class:`ExchangeNode` whose committed state can be saved and restored (``secemb serve``
    checkpoints it after each committed round: :mod:`secemb.server.exchange_state`)."""

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What a restart needs after the last committed round: JSON values and numpy arrays
        (no objects: the checkpoint is loaded without pickle)."""

    def restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Take back what :meth:`state` gave (called once, on a fresh node, before any round).

        Raises
        ------
        InvalidParameters, InvalidMessage, ProtocolError: values this node cannot take (another
        shape, a malformed key, ...); the node is then unusable and the server does not start.
        """


@dataclass
class ExchangeRecord:
    """What crossed the links in one round: ``up[user][stage]`` / ``down[user][stage]`` bytes
    (``len()`` of the bodies), the devices still in the round after the last stage
    (``finished``), the server's round document (``opened``) and its outcome (``outcome``)."""

    up: dict[int, dict[str, int]] = field(default_factory=dict)
    down: dict[int, dict[str, int]] = field(default_factory=dict)
    finished: list[int] = field(default_factory=list)
    opened: dict[str, Any] = field(default_factory=dict)
    outcome: dict[str, Any] = field(default_factory=dict)


class ExchangeRounds(TypingProtocol):
    """Rounds against one hosted server, as the engine gives them to :meth:`ExchangeProtocol.train`."""

    def play(self, round_id: int, parties: Mapping[int, ExchangeParty], *,
             silent_from: Mapping[int, str] | None = None) -> ExchangeRecord:
        """Open round ``round_id`` for ``sorted(parties)`` at the server and run every stage of
        the plan; ``silent_from``: device -> the stage from which it sends nothing (a simulated
        dropout).  The devices' messages of a stage are made one after another in increasing id
        order.

        Raises
        ------
        Whatever the server raises when a stage cannot close (e.g.
        :class:`~secemb.secagg.SecAggAborted` in process, ``RemoteError`` 409 over HTTP).
        """

    def model(self) -> bytes:
        """The server's public model now (:attr:`ExchangeServer.model`'s bytes)."""


@dataclass(frozen=True)
class ExchangeServer:
    """A one-server protocol's server: ``node`` (the state machine the engine and the HTTP app
    drive), ``max_body_bytes`` (a bound on one device message at the run's public sizes: the
    HTTP app refuses a larger body, 413), ``model`` (the public model's bytes, for evaluation
    and the operator) and ``num_users`` (device ids are ``[0, num_users)``)."""

    node: ExchangeNode
    max_body_bytes: int
    model: Callable[[], bytes]
    num_users: int


@dataclass(frozen=True)
class RoundFigures:
    """What one round cost: ``users`` (devices that took part), the bytes they sent and got in
    all (``len()`` of the messages), their compute and the server's, in seconds, and the mean
    local objective over the round's participations (NaN: none trained)."""

    round_id: int
    epoch: int
    users: int
    upload_bytes: int
    download_bytes: int
    user_s: float
    server_s: float
    loss: float


@dataclass(frozen=True)
class EpochFigures:
    """After epoch ``epoch``: the mean local objective over its participations and the test
    metrics by name (``None``: undefined, e.g. AUC with one class)."""

    epoch: int
    loss: float
    metrics: dict[str, float | None]


@dataclass
class ExchangeResult:
    """A finished run: ``config`` (the result document's), its rounds and epochs, the public
    model (``table`` float64 (items, d), ``dense`` float64) and the devices' private parameters
    (``user_params`` float64 (num_users, k): what a simulation holds for them)."""

    config: dict[str, Any]
    rounds: list[RoundFigures]
    epochs: list[EpochFigures]
    table: np.ndarray
    dense: np.ndarray
    user_params: np.ndarray


@dataclass(frozen=True)
class ExchangeRun:
    """What every run of a one-server protocol is given, whatever the protocol: the dataset
    (name and where its files are), the schedule (``epochs``, ``users_per_round``) and the seed
    of the run's training randomness.  The defaults are the run's options'
    (:class:`~secemb.options.RunOptions`, what ``secemb train`` defaults to)."""

    dataset: str
    data_dir: Path | None = DEFAULTS.data_dir
    download: bool = DEFAULTS.download
    epochs: int = DEFAULTS.epochs
    users_per_round: int = DEFAULTS.users_per_round
    seed: int = DEFAULTS.seed

    def __post_init__(self) -> None:
        for name in ("epochs", "users_per_round"):
            check_int(name, getattr(self, name), low=1)
        check_int("seed", self.seed, low=0)

    def to_dict(self) -> dict[str, Any]:
        """The run as JSON values (``data_dir`` left out: it is where this machine keeps files)."""
        return {"dataset": self.dataset, "epochs": self.epochs, "users_per_round": self.users_per_round,
                "seed": self.seed}


class ExchangeProtocol(ABC):
    """A registered one-server protocol (``register_protocol(..., servers=1)``).

    Subclasses set ``name`` and ``options`` (class attributes), take ``run`` and their options as
    keywords in ``__init__`` (validating them: :class:`~secemb.errors.InvalidParameters`, which
    the command line turns into exit 2 with the message), and implement :meth:`plan`,
    :meth:`make_server` and :meth:`train`; :meth:`make_device` if their devices can run as
    ``secemb client`` processes.
    """

    name: ClassVar[str]
    #: the constructor's keyword options beyond ``run``, named as ``secemb train``'s options
    options: ClassVar[tuple[str, ...]] = ()
    #: whether it runs behind HTTP (``secemb demo --network``, ``secemb serve``)
    networked: ClassVar[bool] = True

    def __init__(self, run: ExchangeRun) -> None:
        self.run = run

    @abstractmethod
    def plan(self) -> RoundPlan:
        """Its round: the stages, each device -> server with or without an answer (``servers=1``)."""

    @abstractmethod
    def make_server(self) -> ExchangeServer:
        """The server at the start of a run (the initial public model from ``run.seed``)."""

    @abstractmethod
    def train(self, connect: Callable[[ExchangeServer], ExchangeRounds], *,
              on_start: Callable[[dict[str, Any]], None] | None = None,
              on_round: Callable[[RoundFigures], None] | None = None,
              on_epoch: Callable[[EpochFigures], None] | None = None) -> ExchangeResult:
        """Train: make the server, ``rounds = connect(server)``, then play every round through
        ``rounds``; ``on_start`` gets the result's ``config`` before the first round, ``on_round``
        and ``on_epoch`` the figures as they come (the result lists the same).  ``config`` has at
        least ``protocol``, ``dataset``, ``servers`` (1), ``users_per_round``, ``total_rounds`` and
        ``metrics`` (the names in :attr:`EpochFigures.metrics`); the command line shows them.

        Raises
        ------
        InvalidParameters, secemb.data.DatasetNotFoundError: a bad run (before any round); what
        :meth:`ExchangeRounds.play` raises.
        """

    def make_device(self, user: int) -> ExchangeDevice:
        """Device ``user``'s state in a deployment (its own data and private parameters).

        Raises
        ------
        InvalidParameters: by default -- the protocol's devices do not run as ``secemb client``.
        """
        raise InvalidParameters(f"protocol {self.name!r} has no device for 'secemb client'")

    def spec(self) -> dict[str, Any]:
        """Its options' values (read from the attributes of the same names): with ``run``, what
        the server and its devices must share -- the deployment file records it."""
        missing = [n for n in self.options if not hasattr(self, n)]
        if missing:
            raise InvalidParameters(f"{type(self).__name__}.spec(): options {missing} are not attributes; "
                                    "override spec()")
        return {n: getattr(self, n) for n in self.options}


class StagedRound(TypingProtocol):
    """What the round helpers below read of an :class:`ExchangeNode`'s current round: its id, state
    (``open``, ``committed``, ``aborted``) and why it was aborted, the index of its next stage, the
    answers of its last closed stage (stage -> user -> bytes; earlier ones released:
    :func:`closing_stage`) and the server's seconds (by name)."""

    round_id: int
    state: str
    reason: str | None
    stage: int
    replies: dict[str, dict[int, bytes]]
    seconds: dict[str, float]


_Round = TypeVar("_Round", bound=StagedRound)


def current_round(rnd: _Round | None, round_id: int) -> _Round:
    """``rnd`` if it is round ``round_id``.

    Raises
    ------
    ProtocolError: no round, or another one is the current round.
    """
    if rnd is None or rnd.round_id != round_id:
        raise ProtocolError(f"round {round_id} is not the current round")
    return rnd


def open_stage(rnd: _Round | None, round_id: int, stage: str, stages: Sequence[str]) -> _Round:
    """``rnd`` if it is round ``round_id``, open, and ``stage`` is its next stage of ``stages``
    (what a node checks before it takes a message of ``stage`` or closes it).

    Raises
    ------
    ProtocolError: not the current round, the round committed or aborted, or another stage next.
    InvalidParameters: ``stage`` is none of ``stages``.
    """
    rnd = current_round(rnd, round_id)
    if rnd.state != "open":
        # not the reason: a device's message can meet this, and an aborted signed round's reason names
        # the device found cheating, which only the operator reads (its round document has it)
        raise ProtocolError(f"round {round_id} is {rnd.state}")
    if stage not in stages:
        raise InvalidParameters(f"unknown stage {stage!r}; round {round_id}'s stages are {tuple(stages)}")
    if stages[rnd.stage] != stage:
        raise ProtocolError(f"round {round_id} is at stage {stages[rnd.stage]}, not {stage}")
    return rnd


@contextlib.contextmanager
def closing_stage(rnd: StagedRound, stage: str, aborted: type[ProtocolError] = ProtocolError) -> Iterator[None]:
    """Around a node's close of ``stage`` of round ``rnd``: when the body ends, the round is at its next
    stage and the answers of the stages before ``stage`` are released (``rnd.replies`` keeps ``stage``'s
    only); when it raises ``aborted`` (a :class:`~secemb.errors.ProtocolError` kind) or an
    :class:`~secemb.errors.InvalidMessage` (a message found bad only now), the round is aborted (its
    ``state`` and ``reason``), every answer is released, and the error goes on -- an ``InvalidMessage``
    as ``aborted``.  Any other error leaves the round as it was.

    Why nobody can need a released answer: a device fetches the answer of a stage after the stage
    closed and before it sends its message of the next stage (it builds that message from it:
    :func:`secemb.sim.player.play`, :func:`secemb.client.stages.take_part`), and a device without a
    message of the next stage is out of the round once that stage has closed (the node takes no
    message of a closed stage); an aborted round takes no message at all, and a restart restores
    no answer (only the committed state, :class:`DurableExchangeNode`).  A late fetch of a released
    answer is refused (:func:`stage_reply`)."""
    try:
        yield
    except (aborted, InvalidMessage) as exc:
        rnd.state, rnd.reason = "aborted", str(exc)
        rnd.replies.clear()
        if isinstance(exc, InvalidMessage):
            raise aborted(f"round {rnd.round_id} aborted at {stage}: {exc}") from exc
        raise
    rnd.stage += 1
    for earlier in [s for s in rnd.replies if s != stage]:
        del rnd.replies[earlier]


def stage_reply(rnd: StagedRound | None, round_id: int, stage: str, stages: Sequence[str], user: int) -> bytes | None:
    """The server's answer to ``user`` in the closed ``stage`` (of ``stages``) of round ``round_id``
    (``None``: none, the user is out of the round).  A read: a refused call changes nothing.

    Raises
    ------
    ProtocolError: not the current round, ``stage`` not closed (or not one of the round's), or its
    answers released (:func:`closing_stage`: the next stage has closed, or the round was aborted).
    """
    rnd = current_round(rnd, round_id)
    k = stages.index(stage) if stage in stages else len(stages)
    if k < rnd.stage and stage not in rnd.replies:
        if rnd.state == "aborted":
            # not the reason: an aborted signed round's names the device found cheating, which only the
            # operator reads (docs/deployment.md, "What the operator reads of a round")
            raise ProtocolError(f"stage {stage}'s answers of round {round_id} were released when the round "
                                "was aborted")
        if k + 1 < rnd.stage:
            raise ProtocolError(f"stage {stage}'s answers of round {round_id} were released when stage "
                                f"{stages[k + 1]} closed")
    if k >= rnd.stage or stage not in rnd.replies:
        raise ProtocolError(f"stage {stage} of round {round_id} has no answers (yet)")
    return rnd.replies[stage].get(int(user))


def add_seconds(seconds: dict[str, float], name: str, t0: float) -> None:
    """Add the seconds since ``t0`` (``time.perf_counter()``) to ``seconds[name]`` (a node's
    ``rnd.seconds``, a party's own)."""
    seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0


def secagg_findings(*aggregations: SecAggServer | None) -> dict[str, Any]:
    """What a round's secure aggregations (``None``: not run) found about the devices, for its
    outcome, merged over the aggregations:

    * ``bad_shares``: the sorted devices any of them named
      (:attr:`~secemb.secagg.server.SecAggServer.cheaters`);
    * ``proven_bad_shares``: those a *signed* aggregation named
      (:attr:`~secemb.secagg.config.SecAggConfig.signed`): each shown to the server to have
      cheated -- it sent an unmask share other than the one its dealer committed to, or its dealt
      shares do not open to the secret it committed to (docs/secagg.md, "Share commitments"); an
      honest device is never among them.  An unsigned aggregation's name (e.g. SecEA's
      ``signed=False`` set-up) is a leave-one-out a dealer can frame, so it is in ``bad_shares``
      only.  The one-server server counts these as strikes (:mod:`secemb.server.exchange_state`);
    * ``complaints``: each device that left peers out of its unmask message -> the sorted peers
      whose encrypted shares to it did not open
      (:attr:`~secemb.secagg.server.SecAggServer.complaints`).  A complaint is unverifiable (the
      sender's spoiled share, the server's alteration and a false claim look the same):
      informative for the operator only, it never strikes.

    docs/deployment.md, "What the operator reads of a round"."""
    bad: set[int] = set()
    proven: set[int] = set()
    complaints: dict[int, set[int]] = {}
    for agg in aggregations:
        if agg is None:
            continue
        bad.update(agg.cheaters)
        if agg.config.signed:
            proven.update(agg.cheaters)
        for complainer, senders in agg.complaints.items():
            complaints.setdefault(complainer, set()).update(senders)
    return {"bad_shares": sorted(bad), "proven_bad_shares": sorted(proven),
            "complaints": {c: sorted(complaints[c]) for c in sorted(complaints)}}
