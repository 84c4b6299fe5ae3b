"""The shared stage vocabulary of a round, and a protocol's declaration of its round.

Every party imports its stage and message names from here (as Flower's secure-aggregation
workflow shares its stage constants between client and server), so the device SDK, the server
nodes, the in-process transport's byte counters and the HTTP layer cannot disagree on a name.

A protocol declares its round as a :class:`RoundPlan`: an ordered tuple of :class:`Hop`\\ s,
each one message from one party to another in one stage.  The engine executes the
declaration: the device session sends, in a stage, to the parties in the order of the plan's
device hops (:meth:`RoundPlan.device_sends`), and the server nodes forward what the plan's
server-to-server hops say.  The in-process engine records every message it moves with the
plan's stage and endpoint names, so a test can compare the transcript of a real round with
the declaration hop by hop (``tests/engine/test_engine_plan.py``).

Parties: :data:`USER` (a device), :data:`SERVER0` (the leader: opens and closes rounds, holds
the optimizer) and :data:`SERVER1` (the follower).

A protocol with **one server** (secure federated submodel learning) declares its round the same
way, with its own stage list (``RoundPlan.stages``, e.g. :data:`EXCHANGE_STAGES`) and
``servers=1``: its only server is :data:`SERVER0`.  Each of its stages is an *exchange*
(:mod:`secemb.sim.player`): every live device sends the server one message, the operator
closes the stage, and the server answers each device with at most one message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from secemb.errors import InvalidParameters

__all__ = [
    "AGGREGATE",
    "CLOSING",
    "COUNT",
    "DENSE",
    "EXCHANGE_STAGES",
    "Hop",
    "PARTIES",
    "PROVE",
    "RECEIPT",
    "RETRIEVAL",
    "RoundPlan",
    "SECEA_SETUP_STAGES",
    "SECEA_STAGES",
    "SERVER0",
    "SERVER1",
    "STAGES",
    "SYNC",
    "UPLOAD",
    "USER",
    "register_stages",
    "round_plan",
]

# ---- stages, in the order a run goes through them
COUNT = "count"  # Eq. 11, once per run: count shares, the servers open only the mean
RETRIEVAL = "retrieval"  # private retrieval of the user's rows (relay hops included)
DENSE = "dense"  # the round's public dense vector, server 0 -> user
UPLOAD = "upload"  # the user's encoded gradients (relay hop included)
PROVE = "prove"  # bounded payloads (SecEmb's option bound): a device's proof that its upload is small, and its check
AGGREGATE = "aggregate"  # each server's aggregate share -> the other (both reconstruct, issue 33)
SYNC = "sync"  # the new public model, server 0 -> server 1
STAGES = (COUNT, RETRIEVAL, DENSE, UPLOAD, PROVE, AGGREGATE, SYNC)

# ---- the exchanges of a one-server round (SFSL, docs/sfsl.md): the five stages of the private set
# union's signed secure aggregation, the submodel download, the five stages of the signed secure sum
# (the consistency check of Bonawitz et al.'s active-adversary variant before unmasking, docs/secagg.md)
_SIGNED = ("advertise", "shares", "masked", "consistency", "unmask")
EXCHANGE_STAGES = (*(f"psu-{s}" for s in _SIGNED), "download", *(f"sum-{s}" for s in _SIGNED))

# ---- the exchanges of SecEA (docs/secea.md): its set-up, once per deployment (the signed key
# directory, then the private entity union: the PSU's five signed secure-aggregation stages), then
# its rounds (the padded shares and queries relayed through the server; the encrypted answers
# masked and returned)
SECEA_SETUP_STAGES = ("secea-keys", *(f"psu-{s}" for s in _SIGNED))
SECEA_STAGES = ("secea-share", "secea-answer")
_ALL_STAGES = STAGES + EXCHANGE_STAGES + SECEA_SETUP_STAGES[:1] + SECEA_STAGES

# ---- parties (also the in-process transport's endpoint names for the servers)
USER, SERVER0, SERVER1 = "user", "server0", "server1"
PARTIES = (USER, SERVER0, SERVER1)

#: message kinds a hop may carry (the wire kinds of :mod:`secemb.protocols.wire`)
MESSAGES = frozenset({
    "count_share", "retrieval_request", "retrieval_reply", "relay_keys", "relay_answer", "dense",
    "upload", "relay_upload", "aggregate_share", "model_sync",
    # the engine's nodes: server 1's receipt of an upload a device sends it (secemb.round.messages)
    "upload_receipt",
    # bounded payloads (secemb.protocols.secemb.bounds): server 0's challenge, the device's proof, the servers' check
    "challenge", "bound_proof", "bound_request", "bound_answer",
    # secure aggregation (secemb.secagg.messages) and the submodel download (secemb.protocols.sfsl.wire)
    "advertise", "keys", "shares", "relayed", "masked", "survivors", "unmask", "union",
    "consistency", "signatures",
    "submodel_request", "submodel_reply",
    # SecEA (secemb.protocols.secea.wire)
    "secea_hello", "secea_directory", "secea_upload", "secea_relay", "secea_answer", "secea_result",
})


#: stage and message names a plug-in protocol added (:func:`register_stages`)
_PLUGIN_STAGES: set[str] = set()
_PLUGIN_MESSAGES: set[str] = set()


def register_stages(stages: tuple[str, ...], messages: tuple[str, ...]) -> None:
    """Add a plug-in protocol's own stage and message names to the vocabulary (docs/protocol.md,
    "A one-server protocol"); names already known are accepted again.

    Raises
    ------
    InvalidParameters: a name that is not a non-empty ASCII str of letters, digits, ``-`` and ``_``.
    """
    for name in (*stages, *messages):
        if not isinstance(name, str) or not name or not name.isascii() \
                or not name.replace("-", "").replace("_", "").isalnum():
            raise InvalidParameters(f"a stage or message name is a non-empty ASCII word (letters, digits, -, _), "
                                    f"got {name!r}")
    _PLUGIN_STAGES.update(stages)
    _PLUGIN_MESSAGES.update(messages)


@dataclass(frozen=True)
class Hop:
    """One message of a round: ``src`` sends ``message`` to ``dst`` in ``stage``.

    ``optional``: the protocol may produce no message for this hop (e.g. a user's upload to
    server 1 when server 0 relays it); the hop is then skipped, never replaced.
    """

    stage: str
    src: str
    dst: str
    message: str
    optional: bool = False

    def __post_init__(self) -> None:
        if self.stage not in _ALL_STAGES and self.stage not in _PLUGIN_STAGES:
            raise InvalidParameters(f"hop stage must be one of {_ALL_STAGES} or a registered one, got {self.stage!r}")
        if self.src not in PARTIES or self.dst not in PARTIES or self.src == self.dst:
            raise InvalidParameters(f"hop must go between two of {PARTIES}, got {self.src!r} -> {self.dst!r}")
        if self.message not in MESSAGES and self.message not in _PLUGIN_MESSAGES:
            raise InvalidParameters(f"hop message must be one of {sorted(MESSAGES)} or a registered one, "
                                    f"got {self.message!r}")

    @property
    def party(self) -> int | None:
        """The server this hop is between with the user (0 or 1); ``None`` for a server hop."""
        other = self.dst if self.src == USER else self.src if self.dst == USER else None
        return None if other is None else (0 if other == SERVER0 else 1)


@dataclass(frozen=True)
class RoundPlan:
    """A protocol's round: its hops, in the order they happen for one user (then the servers'
    closing hops).  In a two-server round whose devices upload to server 1, the engine's server 1
    answers the upload with its receipt, which the device shows server 0 (:mod:`secemb.round.messages`):
    the plan holds that hop, :data:`RECEIPT`, right after the device's upload to server 1 (added
    here where the hops a protocol declares lack it).

    ``stages``: the protocol's stage list, in the order a round goes through them (every hop's
    stage is one of them); ``servers``: 2 (:data:`SERVER0` and :data:`SERVER1`) or 1 (only
    :data:`SERVER0`, whose stages are exchanges, see the module docstring).
    """

    hops: tuple[Hop, ...]
    stages: tuple[str, ...] = STAGES
    servers: int = 2

    def __post_init__(self) -> None:
        if self.servers not in (1, 2):
            raise InvalidParameters(f"a round has 1 or 2 servers, got {self.servers!r}")
        for h in self.hops:
            if h.stage not in self.stages:
                raise InvalidParameters(f"hop stage {h.stage!r} is not in the plan's stages {self.stages}")
            if self.servers == 1 and SERVER1 in (h.src, h.dst):
                raise InvalidParameters(f"a one-server round has no {SERVER1}: {h}")
        to_server1 = [i for i, h in enumerate(self.hops) if (h.stage, h.src, h.dst) == (UPLOAD, USER, SERVER1)]
        if to_server1 and RECEIPT not in self.hops:
            at = to_server1[-1] + 1
            object.__setattr__(self, "hops", self.hops[:at] + (RECEIPT,) + self.hops[at:])

    def only(self, stages: Sequence[str]) -> RoundPlan:
        """The plan of a round that runs only ``stages``, a subsequence of :attr:`stages` (e.g.
        SecEA: its set-up round runs the set-up stages, its other rounds the aggregation's).

        Raises
        ------
        InvalidParameters: ``stages`` empty, not all the plan's or not in its order.
        """
        names = tuple(stages)
        if tuple(names) == self.stages:
            return self
        pos = [self.stages.index(s) if isinstance(s, str) and s in self.stages else -1 for s in names]
        if not names or -1 in pos or pos != sorted(set(pos)):
            raise InvalidParameters(f"a round runs a subsequence of the stages {self.stages}, got {names!r}")
        return RoundPlan(tuple(h for h in self.hops if h.stage in names), stages=names, servers=self.servers)

    def replies(self, stage: str) -> bool:
        """Whether the server answers the devices in ``stage`` (a hop server -> user)."""
        return any(h.dst == USER for h in self.stage(stage))

    def stage(self, stage: str) -> tuple[Hop, ...]:
        """The hops of ``stage``, in order."""
        return tuple(h for h in self.hops if h.stage == stage)

    def device_sends(self, stage: str) -> tuple[int, ...]:
        """The servers a device sends to in ``stage``, in the order it must send."""
        return tuple(h.party for h in self.hops if h.stage == stage and h.src == USER)  # type: ignore[misc]

    def relays(self, stage: str) -> bool:
        """Whether server 0 forwards to server 1 in ``stage``."""
        return any(h.src == SERVER0 and h.dst == SERVER1 for h in self.stage(stage))


#: how every two-server round closes (the engine's nodes, whatever the protocol): server 1's
#: aggregate share to server 0, then server 0's to server 1 (both reconstruct the update, issue
#: 33), then the sync that commits the model both computed (server 1 checks its digest)
CLOSING = (Hop(AGGREGATE, SERVER1, SERVER0, "aggregate_share"), Hop(AGGREGATE, SERVER0, SERVER1, "aggregate_share"),
           Hop(SYNC, SERVER0, SERVER1, "model_sync"))


#: server 1's answer to a device's upload in a round without relay: its receipt, which the device
#: appends to its upload to server 0 (:class:`RoundPlan` places it; :mod:`secemb.round.messages`)
RECEIPT = Hop(UPLOAD, SERVER1, USER, "upload_receipt")


#: bounded payloads' step (:mod:`secemb.protocols.secemb.bounds`): after its upload a device
#: fetches server 0's challenge and sends it its proof; at close, before the digest comparison,
#: server 0 sends server 1 the check's request and gets its verifier messages
PROVING = (Hop(PROVE, SERVER0, USER, "challenge"), Hop(PROVE, USER, SERVER0, "bound_proof"),
           Hop(PROVE, SERVER0, SERVER1, "bound_request"), Hop(PROVE, SERVER1, SERVER0, "bound_answer"))


@lru_cache(maxsize=4)
def round_plan(*, relay: bool, bound: bool = False) -> RoundPlan:
    """The round of the two-server protocols (SecEmb and its baselines); made once per
    ``relay`` and ``bound`` value (a :class:`RoundPlan` is immutable, and every device session
    asks for it).  ``bound``: SecEmb's bounded payloads, the :data:`PROVING` hops after the
    upload.

    Without relay the user talks to both servers; with ``relay`` (DESIGN.md section 5.2) it
    sends server 1 only its root seeds, server 0 forwards the shared correction words and
    combines server 1's masked answer into the one reply, and the upload goes to server 0,
    which forwards its correction words.  Server 1 is always addressed first in a stage, so
    that it holds what it needs before server 0 acts on the same user.
    """
    count = (
        Hop(COUNT, USER, SERVER1, "count_share"),
        Hop(COUNT, USER, SERVER0, "count_share"),
        Hop(COUNT, SERVER1, SERVER0, "count_share"),
    )
    dense = (Hop(DENSE, SERVER0, USER, "dense"),)
    retrieval: tuple[Hop, ...]
    upload: tuple[Hop, ...]
    if relay:
        retrieval = (
            Hop(RETRIEVAL, USER, SERVER1, "retrieval_request"),
            Hop(RETRIEVAL, USER, SERVER0, "retrieval_request"),
            Hop(RETRIEVAL, SERVER0, SERVER1, "relay_keys"),
            Hop(RETRIEVAL, SERVER1, SERVER0, "relay_answer"),
            Hop(RETRIEVAL, SERVER0, USER, "retrieval_reply"),
        )
        upload = (
            Hop(UPLOAD, USER, SERVER0, "upload"),
            Hop(UPLOAD, SERVER0, SERVER1, "relay_upload", optional=True),
        )
    else:
        retrieval = (
            Hop(RETRIEVAL, USER, SERVER1, "retrieval_request"),
            Hop(RETRIEVAL, SERVER1, USER, "retrieval_reply"),
            Hop(RETRIEVAL, USER, SERVER0, "retrieval_request"),
            Hop(RETRIEVAL, SERVER0, USER, "retrieval_reply"),
        )
        upload = (
            Hop(UPLOAD, USER, SERVER1, "upload"),
            Hop(UPLOAD, USER, SERVER0, "upload"),
        )
    return RoundPlan(count + retrieval + dense + upload + (PROVING if bound else ()) + CLOSING)
