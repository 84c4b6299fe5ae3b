"""SecEA as the exchanges of the one-server round engine: the server (:class:`SecEANode`) and a
silo's part (:class:`SecEASetupParty` once, :class:`SecEAParty` per round), state machines over
bytes (no transport here: :mod:`secemb.sim.player` moves the bytes, in process or over HTTP).

The N silos are the engine's devices (user ids ``0..N-1``), the relaying server its one server.
Every stage is an *exchange*: each silo sends the server one message, the operator closes the
stage, the server answers each silo with at most one message.  Silo-to-silo traffic (the shares
and the queries) is one-time-padded by the sender and routed through the server, as the paper
has it.  The first round is the set-up (:data:`SECEA_SETUP_PLAN`, every silo), the later ones
the aggregations (:data:`SECEA_ROUND_PLAN`); the node's plan (:data:`SECEA_PLAN`) is both, and each
round's document (:meth:`SecEANode.open_round`) lists the stages it runs::

    set-up (the first round)
    secea-keys      secea_hello  -> secea_directory   signed X25519 and Paillier public keys -> the
                                                      key directory (each entry verified by the silo)
    psu-advertise   advertise    -> keys              the private entity union: the Bloom PSU over
    psu-shares      shares       -> relayed           signed secure aggregation (the round's id;
    psu-masked      masked       -> survivors         docs/secagg.md, "Active server"), the union
    psu-consistency consistency  -> signatures        to every silo (all N must survive it)
    psu-unmask      unmask       -> union
    each later round
    secea-share     secea_upload -> secea_relay       padded Lagrange shares and queries (Eqs. 3-11), relayed
    secea-answer    secea_answer -> secea_result      Paillier answers; the server's mask (Eqs. 12-13);
                                                      the silo decodes its averages (Eqs. 14-16)

A silo that sends nothing in ``secea-answer`` has still contributed its shares; the round
commits if at least ``2(K+T-1)+1`` silos answered, else the server aborts it
(:class:`~secemb.errors.ProtocolError`) and no silo gets a result.

Every silo signs with its certified identity (:mod:`secemb.secagg.identity`) its HELLO keys and
its PSU keys, so a server that substitutes a key in either is caught before the key is used.  A
node and silos made with ``signed=False`` run the paper's unsigned set-up (its documents list no
``psu-consistency``), explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, check_int
from secemb.protocols.exchange import (
    add_seconds, closing_stage, current_round, open_stage, secagg_findings, stage_reply,
)
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea import wire
from secemb.protocols.secea.parties import SecEAClient, SecEAServer, verify_hello
from secemb.protocols.stages import SECEA_SETUP_STAGES, SECEA_STAGES, SERVER0, USER, Hop, RoundPlan
from secemb.randomness import RandomBytes, system_rng
from secemb.secagg import SecAggClient, SecAggConfig, SecAggServer, default_threshold
from secemb.secagg.limits import longest_server_message, longest_union_message, within_longest
from secemb.secagg.identity import RosterPin
from secemb.secagg.psu import BloomParams, psu_input, psu_union, read_union, union_message

__all__ = ["SECEA_PLAN", "SECEA_ROUND_PLAN", "SECEA_SETUP_PLAN", "SETUP_ROUND", "SecEANode", "SecEAParty",
           "SecEASetupParty", "UnionWithoutOwnEntities", "psu_config", "setup_stages"]

#: the round id the in-process runs give the set-up (a deployment's first round may have another)
SETUP_ROUND = 0

#: per stage: the silo's message kind and the server's answer
_KINDS: dict[str, tuple[str, str]] = {
    "secea-keys": ("secea_hello", "secea_directory"), "psu-advertise": ("advertise", "keys"),
    "psu-shares": ("shares", "relayed"), "psu-masked": ("masked", "survivors"),
    "psu-consistency": ("consistency", "signatures"), "psu-unmask": ("unmask", "union"),
    "secea-share": ("secea_upload", "secea_relay"), "secea-answer": ("secea_answer", "secea_result"),
}


def _plan(stages: tuple[str, ...]) -> RoundPlan:
    hops = tuple(h for s in stages for h in (Hop(s, USER, SERVER0, _KINDS[s][0]), Hop(s, SERVER0, USER, _KINDS[s][1])))
    return RoundPlan(hops, stages=stages, servers=1)


#: SecEA's stages: the set-up's, then an aggregation round's (the node's ``plan``; a round runs
#: the part its round document lists, :meth:`~secemb.protocols.stages.RoundPlan.only`)
SECEA_PLAN = _plan(SECEA_SETUP_STAGES + SECEA_STAGES)
#: SecEA's set-up (round 0): the key directory, then the private entity union
SECEA_SETUP_PLAN = SECEA_PLAN.only(SECEA_SETUP_STAGES)
#: one SecEA aggregation round: shares and queries, then answers
SECEA_ROUND_PLAN = SECEA_PLAN.only(SECEA_STAGES)

#: the set-up of a node and silos made with ``signed=False`` (an unsigned PSU has no consistency check)
_UNSIGNED_SETUP_STAGES = tuple(s for s in SECEA_SETUP_STAGES if s != "psu-consistency")


def setup_stages(signed: bool) -> tuple[str, ...]:
    """The set-up's stages: :data:`SECEA_SETUP_STAGES`, without ``psu-consistency`` unsigned."""
    return SECEA_SETUP_STAGES if signed else _UNSIGNED_SETUP_STAGES


class UnionWithoutOwnEntities(InvalidMessage):
    """The set-up's union leaves out entities of this silo: the server deviated from the protocol
    (an honest one aborts a set-up that lacks a silo's PSU input: the union holds every silo's
    entities), and this silo's failed set-up tells it that the silo holds one of the entities it
    left out -- one bit of the silo's private entity set.  What the silo's operator is told."""


def psu_config(bloom: BloomParams, num_silos: int, round_id: int, signed: bool = True) -> SecAggConfig:
    """The secure-aggregation round that carries the PSU of the set-up round ``round_id``
    (threshold ``N // 2 + 1``, secagg round id ``round_id``; a signed round unless ``signed=False``)."""
    return replace(bloom.config(default_threshold(num_silos), round_id), signed=signed)


@dataclass
class _Round:
    round_id: int
    users: frozenset[int]
    stages: tuple[str, ...]
    psu: SecAggServer | None = None
    stage: int = 0
    received: dict[str, dict[int, bytes]] = field(default_factory=dict)
    replies: dict[str, dict[int, bytes]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    state: str = "open"
    reason: str | None = None
    answered: list[int] = field(default_factory=list)


class SecEANode:
    """The relaying server's side of a SecEA deployment, one round at a time (an
    :class:`~secemb.protocols.base.ExchangeNode`).

    Parameters
    ----------
    params: the public parameters (N, T, K, d, f).
    bloom: the PSU's public Bloom parameters (:func:`secemb.protocols.secea.union.union_bloom`).
    key_bits: if given, the deployment's Paillier modulus size: a HELLO with another is refused
        (one silo's oversized key would make every other silo's answers and the server's masks
        to it cost what that size costs).
    signed: whether the silos sign their keys (default; :class:`SecEAClient`): the HELLO and the
        directory's entries carry certificates and signatures, which the silos verify, and the
        PSU is a signed secure aggregation (with its ``psu-consistency`` stage).  ``False``: the
        paper's unsigned set-up (explicitly; a substituted key goes unnoticed).
    pin: (signed) the deployment's roster (public; a :class:`~secemb.protocols.exchange.RosterPinnedNode`,
        settable before the first round): a HELLO is then refused at receipt unless it carries
        the roster's certificate of its silo and the silo's signature over its keys in this
        set-up (:func:`~secemb.protocols.secea.parties.verify_hello`, what each silo checks of the
        directory), and so is a PSU advertise under another roster (the PSU's
        :class:`~secemb.secagg.SecAggServer`, which checks the signatures of the advertise and
        consistency messages in any case).  A refused silo is missing from its stage as a dropout
        is -- the set-up needs every silo, so it aborts naming the missing ones instead of every
        silo refusing the directory as the server's deviation.  ``None``: lengths only (HELLO).

    The first round opened is the set-up (every silo, stages of :data:`SECEA_SETUP_PLAN`; in
    process round :data:`SETUP_ROUND`); once it has committed, rounds of increasing ids (at
    least ``2(K+T-1)+1`` silos) run :data:`SECEA_ROUND_PLAN`.  An aborted set-up is opened
    again (a later id).  Every method raises
    :class:`~secemb.errors.ProtocolError` when called for another round or out of stage order,
    :class:`~secemb.errors.InvalidMessage` for a malformed or duplicate message or a silo not
    in the round, and :class:`~secemb.errors.InvalidParameters` for a bad round document; a
    refused call changes nothing.  ``_rng`` (tests only) replaces the OS CSPRNG.
    """

    plan = SECEA_PLAN

    def __init__(self, params: SecEAParams, bloom: BloomParams, *, key_bits: int | None = None,
                 signed: bool = True, pin: RosterPin | None = None, _rng: RandomBytes | None = None) -> None:
        self.params, self.bloom, self.key_bits, self.signed, self.pin = params, bloom, key_bits, signed, pin
        self.server = SecEAServer(params, signed=signed, _rng=_rng)
        self.union: np.ndarray | None = None
        self._hellos: dict[int, bytes] = {}
        self._round: _Round | None = None

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        """Start round ``round_id`` for the silos ``users``; its public document (round id,
        users, stages, whether it is the set-up, the union size once agreed)."""
        if self._round is not None and self._round.state == "open":
            raise ProtocolError(f"round {self._round.round_id} is still open")
        round_id = check_int("round_id", round_id, low=0, high=2**62 - 1)
        n = self.params.num_clients
        ids = sorted({u for u in users if isinstance(u, int) and not isinstance(u, bool)})
        if len(ids) != len(users) or not ids or ids[0] < 0 or ids[-1] >= n:
            raise InvalidParameters(f"users must be distinct silo ids in [0, {n}), got {users!r}")
        if self._round is not None and round_id <= self._round.round_id:
            raise ProtocolError(f"round {round_id} does not follow round {self._round.round_id}")
        setup = self.union is None
        if setup:
            if len(ids) != n:
                raise ProtocolError(f"the set-up (every one of the {n} silos) comes first")
            self._round = _Round(round_id, frozenset(ids), setup_stages(self.signed),
                                 psu=SecAggServer(psu_config(self.bloom, n, round_id, self.signed), pin=self.pin))
        else:
            if len(ids) < self.params.needed_answers:
                raise InvalidParameters(f"a round needs at least {self.params.needed_answers} = 2(K+T-1)+1 silos, "
                                        f"got {len(ids)}")
            self._round = _Round(round_id, frozenset(ids), SECEA_STAGES)
        return {"round_id": round_id, "users": ids, "stages": list(self._round.stages),
                "setup": setup,
                "union_size": None if self.union is None else int(self.union.size)}

    def _current(self, round_id: int, stage: str) -> _Round:
        rnd = current_round(self._round, round_id)
        return open_stage(rnd, round_id, stage, rnd.stages)

    def receive(self, round_id: int, stage: str, user: int, body: bytes) -> None:
        """Silo ``user``'s message of ``stage``, checked in full before it is kept."""
        rnd = self._current(round_id, stage)
        if user not in rnd.users:
            raise InvalidMessage(f"silo {user} is not a participant of round {round_id}")
        got = rnd.received.setdefault(stage, {})
        if user in got:
            raise InvalidMessage(f"duplicate {stage} message from silo {user}")
        t0 = time.perf_counter()
        if stage == "secea-keys":
            x25519, key, proof = self.server.read_hello(user, body, self.key_bits)  # its length checked first
            bits = key.key.n.bit_length()
            if self.key_bits is not None and bits != self.key_bits:
                raise InvalidMessage(f"HELLO of silo {user}: a {bits}-bit Paillier modulus, not the "
                                     f"deployment's {self.key_bits} bits")
            if self.signed and self.pin is not None:
                try:
                    verify_hello(self.pin, round_id, self.params.num_clients, user, x25519, key.to_bytes(), proof)
                except InvalidMessage as exc:
                    raise InvalidMessage(f"HELLO of silo {user} refused: {exc}") from None
        elif stage == "secea-share":
            m, _, _ = self.server.read_upload(round_id, user, body)
            if self.union is None or m != self.union.size:
                raise InvalidMessage(f"UPLOAD of silo {user} is over {m} entities, not the union's")
        elif stage == "secea-answer":
            self.server.read_answer(round_id, user, body)
        else:
            assert rnd.psu is not None
            step = stage.split("-")[1]
            receive = {"advertise": rnd.psu.receive_advertise, "shares": rnd.psu.receive_shares,
                       "masked": rnd.psu.receive_masked, "consistency": rnd.psu.receive_consistency,
                       "unmask": rnd.psu.receive_unmask}[step]
            receive(user, body)
        got[user] = body
        add_seconds(rnd.seconds, stage, t0)

    def close(self, round_id: int, stage: str) -> None:
        """Close ``stage``: the server builds its answers (the directory, the PSU's stages, the
        relay, the masked results); after ``psu-unmask`` the union is fixed and after
        ``secea-answer`` the round is committed.

        Raises
        ------
        ProtocolError: (including :class:`~secemb.secagg.SecAggAborted`) too few silos left, a
            silo missing from the set-up, or a silo's PSU shares that do not open the sum (a
            corrupted unmask message, caught only now): the round is aborted.
        """
        rnd = self._current(round_id, stage)
        got = rnd.received.get(stage, {})
        t0 = time.perf_counter()
        with closing_stage(rnd, stage):
            if stage == "secea-keys":
                rnd.replies[stage] = self.server.directory(got)
                self._hellos = dict(got)
            elif stage == "secea-share":
                if len(got) < self.params.needed_answers:
                    raise ProtocolError(f"round {round_id} aborted: {len(got)} silos shared, "
                                        f"{self.params.needed_answers} = 2(K+T-1)+1 are needed")
                rnd.replies[stage] = self.server.relay(round_id, got)
            elif stage == "secea-answer":
                rnd.replies[stage] = self.server.mask(round_id, got)
                rnd.answered = sorted(rnd.replies[stage])
                rnd.state = "committed"
            else:
                rnd.replies[stage] = self._close_psu(rnd, stage)
        add_seconds(rnd.seconds, stage, t0)

    def _close_psu(self, rnd: _Round, stage: str) -> dict[int, bytes]:
        assert rnd.psu is not None
        step = stage.split("-")[1]
        if step != "unmask":
            build = {"advertise": rnd.psu.keys_messages, "shares": rnd.psu.relayed_messages,
                     "masked": rnd.psu.survivors_messages, "consistency": rnd.psu.signatures_messages}[step]
            return build()
        union = psu_union(self.bloom, rnd.psu.result())
        if sorted(rnd.psu.survivors) != sorted(rnd.users):
            raise ProtocolError("set-up aborted: the entity union is missing a silo (SecEA needs every set)")
        if union.size == 0:
            raise ProtocolError("set-up aborted: the entity union is empty")
        self.union, rnd.state = union.astype(np.int64), "committed"
        msg = union_message(rnd.round_id, union)
        return {u: msg for u in rnd.users}

    def reply(self, round_id: int, stage: str, user: int) -> bytes | None:
        """The server's answer to ``user`` in a closed ``stage``, until the next stage closes
        (``None``: none, the silo is out of the round).

        Raises
        ------
        ProtocolError: the stage is not closed, or its answers were released (the next stage
            closed, or the round was aborted: :func:`~secemb.protocols.exchange.closing_stage`)."""
        rnd = current_round(self._round, round_id)
        return stage_reply(rnd, round_id, stage, rnd.stages, user)

    def outcome(self, round_id: int) -> dict[str, Any]:
        """The round's state (``open``, ``committed``, ``aborted``), the silos that got a result
        (``answered``), what the set-up's PSU found (``bad_shares`` and the silos' unverifiable
        ``complaints``: :func:`~secemb.protocols.exchange.secagg_findings`; none in an aggregation
        round, which has no secure aggregation), ``aborting_dropouts`` (the sorted silos the PSU's
        abort named: :attr:`~secemb.secagg.server.SecAggServer.aborting_dropouts`, a silo whose
        secret the complaints against it alone left short; a suspicion, counted by the one-server
        server: :mod:`secemb.server.exchange_state`), the union size and the server's seconds per stage."""
        rnd = current_round(self._round, round_id)
        return {"round_id": round_id, "state": rnd.state, "reason": rnd.reason, "answered": list(rnd.answered),
                **secagg_findings(rnd.psu),
                "aborting_dropouts": [] if rnd.psu is None else list(rnd.psu.aborting_dropouts),
                "union_size": None if self.union is None else int(self.union.size), "server_s": dict(rnd.seconds)}

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What a restart needs once the set-up has committed
        (:class:`~secemb.protocols.exchange.DurableExchangeNode`): the silos' HELLO messages
        (public: the key directory is rebuilt from them) and the entity union.

        Raises
        ------
        ProtocolError: before the set-up has committed (nothing to keep yet).
        """
        if self.union is None:
            raise ProtocolError("no set-up has committed: nothing to keep")
        arrays = {f"hello_{i}": np.frombuffer(body, np.uint8) for i, body in self._hellos.items()}
        return {}, {"union": self.union, **arrays}

    def restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Take back :meth:`state`'s directory and union: the silos that kept theirs go on with
        the next round (a silo restarted since has new keys and cannot: a fresh deployment).

        Raises
        ------
        InvalidParameters: a HELLO or the union missing or malformed, a HELLO that cannot be read
        as this node's (e.g. an unsigned one of a checkpoint written before session 22: the
        message says to start a new set-up) or with a key of another size.
        ProtocolError: the directory cannot be rebuilt from the HELLOs.  (The HELLOs' certificates
        and signatures are not checked again: the set-up round they sign is not kept.)
        """
        n = self.params.num_clients
        hellos = {}
        for i in range(n):
            raw = arrays.get(f"hello_{i}")
            if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 1:
                raise InvalidParameters(f"SecEA state: hello_{i} must be a uint8 vector")
            hellos[i] = raw.tobytes()
        union = arrays.get("union")
        if not isinstance(union, np.ndarray) or union.dtype != np.int64 or union.ndim != 1 or union.size == 0 \
                or union[0] < 0 or union[-1] >= self.bloom.domain or not (np.diff(union) > 0).all():
            raise InvalidParameters(f"SecEA state: the union must be increasing int64 ids in [0, {self.bloom.domain})")
        for i, body in hellos.items():
            try:
                bits = self.server.read_hello(i, body, self.key_bits)[1].key.n.bit_length()
                if self.key_bits is not None and bits != self.key_bits:
                    raise InvalidMessage(f"a {bits}-bit Paillier modulus, not {self.key_bits} bits")
            except InvalidMessage as exc:
                signed = "a signed" if self.signed else "an unsigned"
                raise InvalidParameters(f"SecEA state: silo {i}'s HELLO is not {signed} one of this deployment "
                                        f"({exc}); a checkpoint written before session 22 holds unsigned HELLOs: "
                                        "start a new set-up (a fresh state directory)") from None
        self.server.directory(hellos)
        self._hellos, self.union = hellos, union.copy()


class SecEASetupParty:
    """Silo ``client.index``'s part in the set-up (round ``round_id``): its keys, then its entity
    set into the PSU.  When the set-up is over, ``client`` holds the directory and the union
    (:attr:`union`) and ``on_done`` (if given) is called (e.g. to write the silo's state).
    ``seconds``: its own work per stage; :meth:`answer_bytes`: the longest answer of a stage an
    honest server sends it; ``stages``: the set-up's (:func:`setup_stages` of ``client.signed``).

    ``universe``: if given, the public entities the deployment averages (sorted distinct ids,
    holding the silo's own; e.g. the ``secea_items`` most-rated items).  With the exact filter
    (``bloom.identity``: no false positives) an honest union is a subset of them, so a union of
    more (up to the whole domain, and a RELAY that grows with its square) or of other ids is
    refused before the silo computes anything with it; a hashed filter's union may hold false
    positives outside them, and is bounded by the domain only.
    """

    def __init__(self, client: SecEAClient, bloom: BloomParams, round_id: int = SETUP_ROUND, *,
                 universe: np.ndarray | None = None, on_done: Callable[[], None] | None = None,
                 _rng: RandomBytes = system_rng) -> None:
        self.client, self.bloom, self.round_id, self.on_done, self._rng = client, bloom, round_id, on_done, _rng
        self.universe = None if universe is None or not bloom.identity else np.asarray(universe, np.int64)
        self.config = psu_config(bloom, client.params.num_clients, round_id, client.signed)
        self.stages = setup_stages(client.signed)
        self.union: np.ndarray | None = None
        self.seconds: dict[str, float] = {}
        self._answers: dict[str, bytes] = {}
        self._psu: SecAggClient | None = None
        self._input = psu_input(bloom, client.entities, _rng=_rng)

    def message(self, stage: str) -> bytes:
        """The silo's message of ``stage`` (in :attr:`stages` order: :data:`SECEA_SETUP_PLAN`'s,
        signed).

        Raises
        ------
        ProtocolError: out of order, or a signed silo without its identity.
        """
        t0 = time.perf_counter()
        if stage == "secea-keys":
            out = self.client.hello(self.round_id)
        elif stage == "psu-advertise":
            if self.config.signed and self.client.identity is None:
                raise ProtocolError(f"silo {self.client.index} has no identity to sign its PSU keys with")
            self._psu = SecAggClient(self.client.index, self.config, identity=self.client.identity, _rng=self._rng)
            out = self._psu.advertise()
        elif stage in self.stages and self._psu is not None:
            prev = self.stages[self.stages.index(stage) - 1]
            if prev not in self._answers:
                raise ProtocolError(f"silo {self.client.index}: no answer of stage {prev} yet")
            answer, psu = self._answers[prev], self._psu
            if stage == "psu-shares":
                out = psu.share_keys(answer)
            elif stage == "psu-masked":
                out = psu.masked_input(answer, self._input)
            elif stage == "psu-consistency":
                out = psu.consistency(answer)
            else:
                out = psu.unmask(answer)
        else:
            raise ProtocolError(f"silo {self.client.index}: no set-up message for stage {stage!r} now")
        add_seconds(self.seconds, stage, t0)
        return out

    def accept(self, stage: str, body: bytes) -> None:
        """The server's answer of ``stage``: the directory and the union are read at once.

        Raises
        ------
        UnionWithoutOwnEntities: a union without one of this silo's entities (a deviating
        server: the silo's operator is told so).  InvalidMessage: malformed, a union with an id
        outside ``universe``, or longer than any honest answer of the stage (:meth:`answer_bytes`;
        e.g. a PSU key list of more silos than the deployment's, a union of more entities than
        ``universe``): refused before anything of it is read.  Nothing is kept then.
        """
        within_longest(body, self.answer_bytes(stage), f"the answer of {stage}")
        t0 = time.perf_counter()
        if stage == "secea-keys":
            self.client.receive_directory(body)
        elif stage == "psu-unmask":
            union = read_union(body, self.round_id, self.bloom.domain)
            # checked first: this failure tells the server nothing of the silo's entities
            if self.universe is not None and (outside := np.setdiff1d(union, self.universe).size):
                raise InvalidMessage(f"union: ids outside the {self.universe.size} public entities of the deployment "
                                     f"({outside} of {union.size})")
            missing = np.setdiff1d(self.client.entities, union).size
            if missing:
                raise UnionWithoutOwnEntities(
                    f"the server's union leaves out {missing} of silo {self.client.index}'s "
                    f"{self.client.entities.size} entities: the server deviated from the protocol (or handed out "
                    "a union without this silo's PSU input), and this failed set-up tells it that the silo holds "
                    "one of the entities it left out; the silo takes no new set-up without its operator")
            try:
                self.client.set_union(union)
            except InvalidParameters as exc:  # e.g. an empty union
                raise InvalidMessage(f"union: {exc}") from None
            self.union = union
            if self.on_done is not None:
                self.on_done()
        else:
            self._answers[stage] = body
        add_seconds(self.seconds, stage, t0)

    def answer_bytes(self, stage: str) -> int:
        """The longest answer of ``stage`` an honest server sends this silo: the DIRECTORY
        (:meth:`SecEAClient.answer_bytes`), the PSU's messages at N silos
        (:func:`~secemb.secagg.limits.longest_server_message`) and its union of every entity
        of ``universe`` (if given, with the exact filter), else of the domain
        (:func:`~secemb.secagg.limits.longest_union_message`).

        Raises
        ------
        ValueError: a stage not of the set-up.
        """
        if stage == "secea-keys":
            return self.client.answer_bytes(wire.DIRECTORY)
        if stage not in self.stages:
            raise ValueError(f"SecEA's set-up has no stage {stage!r}")
        kind = _KINDS[stage][1]
        if kind == "union":
            return longest_union_message(self.bloom.domain if self.universe is None else self.universe.size)
        return longest_server_message(self.config, self.client.params.num_clients, kind)


class SecEAParty:
    """Silo ``client.index``'s part in aggregation round ``round_id``: ``rows`` (float, shape
    ``(len(client.entities), d)``) are its embeddings now, in the order of its entities.

    After the round :attr:`average` holds the averages of its entities over the silos that hold
    them (Eq. 2; ``None`` until the server's result is in), also handed to ``on_average`` (e.g.
    to write them into the silo's model).  ``on_padded`` (if given) is called once the upload
    is padded and before it is handed out (e.g. to record durably that the round's pads are
    used).  ``seconds``: its own work per part (``share+query``, ``answer``, ``decode``).
    :meth:`answer_bytes`: the longest answer of a stage an honest server sends it.
    """

    def __init__(self, client: SecEAClient, round_id: int, rows: np.ndarray,
                 on_average: Callable[[np.ndarray], None] | None = None,
                 on_padded: Callable[[], None] | None = None) -> None:
        self.client, self.round_id, self.rows, self.on_average = client, round_id, rows, on_average
        self.on_padded = on_padded
        self.average: np.ndarray | None = None
        self.seconds: dict[str, float] = {}
        self._relay: bytes | None = None

    def message(self, stage: str) -> bytes:
        """The silo's message of ``stage`` (in :data:`SECEA_ROUND_PLAN` order)."""
        t0 = time.perf_counter()
        if stage == "secea-share":
            out = self.client.upload(self.round_id, self.rows)
            add_seconds(self.seconds, "share+query", t0)
            if self.on_padded is not None:
                self.on_padded()
        elif stage == "secea-answer" and self._relay is not None:
            out = self.client.answer(self._relay)
            add_seconds(self.seconds, "answer", t0)
        else:
            raise ProtocolError(f"silo {self.client.index}: no message for stage {stage!r} now")
        return out

    def accept(self, stage: str, body: bytes) -> None:
        """The server's answer of ``stage``; the result is decoded at once."""
        t0 = time.perf_counter()
        if stage == "secea-share":
            self._relay = body
        elif stage == "secea-answer":
            self.average = self.client.finish(body)
            add_seconds(self.seconds, "decode", t0)
            if self.on_average is not None:
                self.on_average(self.average)
        else:
            raise ProtocolError(f"silo {self.client.index}: no answer expected in stage {stage!r}")

    def answer_bytes(self, stage: str) -> int:
        """The longest answer of ``stage`` an honest server sends this silo: the RELAY
        (``secea-share``) or the RESULT (``secea-answer``), :meth:`SecEAClient.answer_bytes`.

        Raises
        ------
        ValueError: another stage.  ProtocolError: the silo has no union yet.
        """
        kinds = {"secea-share": wire.RELAY, "secea-answer": wire.RESULT}
        if stage not in kinds:
            raise ValueError(f"a SecEA round has no stage {stage!r}")
        return self.client.answer_bytes(kinds[stage])
