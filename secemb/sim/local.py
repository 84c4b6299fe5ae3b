"""The servers in process: their node objects, with in-memory state, behind an
:class:`~secemb.transport.inprocess.InProcessTransport` that counts every protocol message, and
the in-process members of the link family (:mod:`secemb.transport.links`).

One-server protocols: :class:`LocalStageServer` holds the node (an
:class:`~secemb.protocols.base.ExchangeNode`) and hands out its links -- :class:`LocalStageLink`
for a device, :class:`LocalStageAdmin` for the operator (what :mod:`secemb.sim.player` plays
rounds through).

Two-server protocols: :class:`InProcessServers` builds server 0 (the leader) and server 1 (the follower) as the same
node objects a deployment runs behind FastAPI (:func:`secemb.server.node.make_node`), wires
server 0 to server 1 through :class:`LocalPeer`, and hands the driver
(:func:`secemb.sim.driver.run`) its links: :class:`LocalServerLink` for devices,
:class:`LocalAdminLink` for the operator.  Every protocol message -- device to server, server
to device, server to server -- is sent on the transport and received from it before the
receiving node sees it, tagged with its stage (:mod:`secemb.protocols.stages`) and the current
round, so communication figures are ``len()`` of what crossed, per round, stage and
direction.  JSON control documents (round announcements, status) are not protocol traffic
and are not counted, as HTTP headers are not counted over the network.

Devices of a round are batched: the retrieval requests of all the round's devices reach each
server as one ``retrieval_many`` call (what the HTTP server's batcher does for concurrent
devices), so the servers evaluate keys in large batches.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from secemb.client.device import DeviceClient, RoundSession
from secemb.sim.driver import Servers
from secemb.errors import InvalidParameters, SecembError
from secemb.models.base import RecModel
from secemb.protocols.base import ExchangeNode, Protocol
from secemb.protocols.stages import AGGREGATE, COUNT, DENSE, PROVE, RETRIEVAL, SERVER0, SERVER1, SYNC, UPLOAD
from secemb.randomness import RandomBytes
from secemb.server.config import ServerConfig
from secemb.server.verify import decode_verification
from secemb.server.errors import PeerUnavailable
from secemb.server.node import FollowerNode, LeaderNode, make_node
from secemb.server.peer import PeerRefused, PeerUnreachable
from secemb.server.store import MemoryStore
from secemb.transport.inprocess import SERVER, InProcessTransport, user_endpoint

__all__ = ["InProcessServers", "LocalAdminLink", "LocalPeer", "LocalServerLink", "LocalStageAdmin", "LocalStageLink",
           "LocalStageServer"]

T = TypeVar("T")
_NAMES = (SERVER0, SERVER1)


def _carry(tp: InProcessTransport, src: str, dst: str, body: bytes, stage: str) -> bytes:
    """Move ``body`` from ``src`` to ``dst`` over the transport (counted); what ``dst`` gets."""
    return tp.carry(src, dst, body, stage=stage)


def _carry_many(tp: InProcessTransport, src: str, dst: str, items: list[tuple[int, bytes]],
                stage: str) -> list[tuple[int, bytes]]:
    """The bodies of ``items`` (``(user, body)``) moved from ``src`` to ``dst`` as one batch
    (:meth:`InProcessTransport.carry_many`, counted as one :func:`_carry` each): each user with what
    ``dst`` gets, in order."""
    return list(zip([u for u, _ in items], tp.carry_many(src, dst, [body for _, body in items], stage=stage),
                    strict=True))


def _peer(fn: Callable[[], T]) -> T:
    """A follower call with its refusal turned into the :class:`~secemb.server.peer.PeerLink`
    errors, as the HTTP peer turns a 4xx/5xx into them."""
    try:
        return fn()
    except PeerUnavailable as exc:
        raise PeerUnreachable(str(exc)) from None
    except SecembError as exc:
        raise PeerRefused(str(exc)) from None


def _refusal(err: SecembError) -> SecembError:
    """A follower's refusal of one item of a batch as the :class:`~secemb.server.peer.PeerLink`
    errors (as :func:`_peer` does for a whole call)."""
    return PeerUnreachable(str(err)) if isinstance(err, PeerUnavailable) else PeerRefused(str(err))


class LocalStageServer:
    """A one-server node in process behind a counting transport (endpoint ``SERVER0``; a fresh
    transport by default): :meth:`link` gives a device's link, :attr:`admin` is the operator's."""

    def __init__(self, node: ExchangeNode, transport: InProcessTransport | None = None) -> None:
        self.node = node
        self.tp = InProcessTransport() if transport is None else transport
        self.admin = LocalStageAdmin(node, self.tp)

    def link(self, user: int) -> LocalStageLink:
        """Device ``user``'s link."""
        return LocalStageLink(self.node, user, self.tp)


class LocalStageLink:
    """Device ``user``'s :class:`~secemb.transport.links.StageLink` to an in-process one-server node."""

    def __init__(self, node: ExchangeNode, user: int, transport: InProcessTransport) -> None:
        self.node, self.user, self.tp = node, int(user), transport
        self._me = user_endpoint(self.user)

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        self.node.receive(round_id, stage, self.user, _carry(self.tp, self._me, SERVER0, body, stage))

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        out = self.node.reply(round_id, stage, self.user)
        return None if out is None else _carry(self.tp, SERVER0, self._me, out, stage)

    def close(self) -> None:
        """Nothing to release."""


class LocalStageAdmin:
    """The operator's :class:`~secemb.transport.links.StageAdmin` to an in-process one-server
    node.  Opening a round tags the transport's later messages with its id."""

    def __init__(self, node: ExchangeNode, transport: InProcessTransport) -> None:
        self.node, self.tp = node, transport

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        self.tp.set_round(round_id)
        return self.node.open_round(round_id, users)

    def close_stage(self, round_id: int, stage: str) -> None:
        self.node.close(round_id, stage)

    def round_status(self, round_id: int) -> dict[str, Any]:
        return self.node.outcome(round_id)

    def close(self) -> None:
        """Nothing to release."""


class LocalPeer:
    """:class:`~secemb.server.peer.PeerLink` to a follower node in the same process; protocol
    messages cross ``transport`` (server traffic, tagged with their stage)."""

    def __init__(self, follower: FollowerNode, transport: InProcessTransport) -> None:
        self.follower, self.tp = follower, transport

    def status(self) -> dict[str, Any]:
        return _peer(self.follower.status)

    def count_open(self, users: list[int] | None) -> None:
        _peer(lambda: self.follower.peer_count_open(users))

    def count_users(self) -> list[int]:
        return _peer(self.follower.peer_count_users)

    def count_close(self) -> list[int]:
        return _peer(self.follower.peer_count_close)

    def count_share(self, include: list[int]) -> bytes:
        share = _peer(lambda: self.follower.peer_count_share(include))
        return _carry(self.tp, SERVER1, SERVER0, share, COUNT)

    def open_round(self, doc: dict[str, Any]) -> None:
        _peer(lambda: self.follower.peer_open(doc))

    def ready_many(self, round_id: int, users: list[int]) -> list[bool]:
        return [bool(_peer(lambda: self.follower.peer_ready(round_id, u))["ready"]) for u in users]  # noqa: B023 - called at once

    def relay_retrieval_many(self, round_id: int, items: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        got = _carry_many(self.tp, SERVER0, SERVER1, items, RETRIEVAL)
        outs = self.follower.peer_relay_retrieval_many(round_id, got)
        back = iter(self.tp.carry_many(SERVER1, SERVER0, [out for out in outs if not isinstance(out, SecembError)],
                                       stage=RETRIEVAL))
        return [_refusal(out) if isinstance(out, SecembError) else next(back) for out in outs]

    def relay_upload_many(self, round_id: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        got = _carry_many(self.tp, SERVER0, SERVER1, items, UPLOAD)
        return [out if out is None else _refusal(out)
                for out in self.follower.peer_relay_upload_many(round_id, got)]

    def uploaded(self, round_id: int) -> list[int]:
        return _peer(lambda: self.follower.peer_uploaded(round_id))

    def close(self, round_id: int) -> list[int]:
        return [int(u) for u in _peer(lambda: self.follower.peer_close(round_id))["uploaded"]]

    def verify(self, round_id: int, include: list[int]) -> tuple[dict[int, bytes], bytes]:
        got, answer = decode_verification(_peer(lambda: self.follower.peer_verify(round_id, include)), include)
        digests = b"".join(got.values())  # 32 bytes per user, and the sketch's verifier messages: one answer, counted
        return got, _carry(self.tp, SERVER1, SERVER0, digests + answer, AGGREGATE)[len(digests):]

    def bound(self, round_id: int, body: bytes) -> bytes:
        got = _carry(self.tp, SERVER0, SERVER1, body, PROVE)
        return _carry(self.tp, SERVER1, SERVER0, _peer(lambda: self.follower.peer_bound(round_id, got)), PROVE)

    def share(self, round_id: int, include: list[int]) -> bytes:
        share = _peer(lambda: self.follower.peer_share(round_id, include))
        return _carry(self.tp, SERVER1, SERVER0, share, AGGREGATE)

    def agree(self, round_id: int, share: bytes) -> str:
        got = _carry(self.tp, SERVER0, SERVER1, share, AGGREGATE)
        return _peer(lambda: self.follower.peer_agree(round_id, got))["model_sha256"]

    def abort(self, round_id: int, reason: str) -> None:
        _peer(lambda: self.follower.peer_abort(round_id, reason))

    def sync_model(self, body: bytes, round_id: int) -> None:
        got = _carry(self.tp, SERVER0, SERVER1, body, SYNC)
        _peer(lambda: self.follower.peer_model(got, round_id))


class _HeldUploads:
    """The uploads (or bound proofs) the devices of a :meth:`_BatchedPhase.send_uploads` call
    send, held (while ``key`` is set: the item whose message is being sent) to be delivered as one
    batch per server."""

    def __init__(self) -> None:
        self.key: Any = None
        self.held: list[tuple[Any, int, int, int, bytes, str]] = []  # (item, party, round, user, body, stage)


def _take(node: LeaderNode | FollowerNode, stage: str, round_id: int,
          items: list[tuple[int, bytes]]) -> list[SecembError | None]:
    """``node`` takes devices' uploads (``stage`` :data:`UPLOAD`) or bound proofs
    (:data:`PROVE`) as one batch; per item ``None`` or the error that refused it."""
    return node.proof_many(round_id, items) if stage == PROVE else node.upload_many(round_id, items)


class LocalServerLink:
    """Device ``user``'s :class:`~secemb.transport.links.ServerLink` to an in-process node;
    ``hold``: where its uploads wait while a phase batches them (:meth:`_BatchedPhase.send_uploads`)."""

    def __init__(self, node: LeaderNode | FollowerNode, user: int, transport: InProcessTransport,
                 hold: _HeldUploads | None = None) -> None:
        self.node, self.user, self.tp, self.hold = node, int(user), transport, hold
        self.party = node.party
        self._me, self._it = user_endpoint(self.user), _NAMES[self.party]

    def _up(self, body: bytes, stage: str) -> bytes:
        return _carry(self.tp, self._me, self._it, body, stage)

    def _down(self, body: bytes, stage: str) -> bytes:
        return _carry(self.tp, self._it, self._me, body, stage)

    def round_info(self) -> dict[str, Any]:
        return self.node.round_info(self.user)

    def count(self, body: bytes) -> None:
        self.node.count_submit(self.user, self._up(body, COUNT))

    def retrieval(self, round_id: int, body: bytes) -> bytes | None:
        out = self.node.retrieval_many(round_id, [(self.user, self._up(body, RETRIEVAL))])[0]
        if isinstance(out, BaseException):
            raise out
        return None if out is None else self._down(out, RETRIEVAL)

    def dense(self, round_id: int) -> bytes:
        if not isinstance(self.node, LeaderNode):
            raise PeerRefused("the dense vector is served by server 0")
        return self._down(self.node.dense_message(round_id), DENSE)

    def upload(self, round_id: int, body: bytes) -> bytes | None:
        """The device's upload; where the device uploads to both servers, server 1's answer, its
        receipt, carried back (counted; :func:`~secemb.round.messages.split_receipt`).  An upload
        held for a phase's batch gets the receipt server 1 answers once it takes it: the batches
        reach server 1 first, and a device whose upload server 1 then refuses sends server 0 nothing
        (:meth:`_BatchedPhase.send_uploads`), as a device that got no receipt."""
        self._send(round_id, self._up(body, UPLOAD), UPLOAD)
        answer = self.node.upload_answer(round_id, self.user)
        return None if answer is None else self._down(answer, UPLOAD)

    def challenge(self, round_id: int) -> bytes:
        return self._down(self.node.challenge(round_id, self.user), PROVE)

    def proof(self, round_id: int, body: bytes) -> None:
        self._send(round_id, self._up(body, PROVE), PROVE)

    def _send(self, round_id: int, got: bytes, stage: str) -> None:
        """The node takes this device's upload or bound proof ``got`` (``stage``), or it is held
        while a phase batches them."""
        if self.hold is not None and self.hold.key is not None:
            self.hold.held.append((self.hold.key, self.party, round_id, self.user, got, stage))
            return
        out = _take(self.node, stage, round_id, [(self.user, got)])[0]  # no batcher thread: in order
        if out is not None:
            raise out

    def round_status(self, round_id: int) -> dict[str, Any]:
        return self.node.round_status(round_id, self.user)

    def alarm(self, report: dict[str, Any]) -> None:
        self.node.device_alarm(self.user, report)

    def close(self) -> None:
        """Nothing to release."""


class LocalAdminLink:
    """The operator's :class:`~secemb.transport.links.AdminLink` to an in-process node.  Opening
    a round tags the transport's later messages with its id (until :meth:`InProcessServers.end_round`)."""

    def __init__(self, node: LeaderNode | FollowerNode, transport: InProcessTransport) -> None:
        self.node, self.tp, self.party = node, transport, node.party

    def _leader(self) -> LeaderNode:
        if not isinstance(self.node, LeaderNode):
            raise PeerRefused("this operation is served by server 0")
        return self.node

    def status(self) -> dict[str, Any]:
        return self.node.status()

    def model(self) -> bytes:
        return self.node.model_message()

    def count_open(self, users: list[int]) -> dict[str, Any]:
        return self._leader().count_open(users)

    def count_progress(self) -> dict[str, Any]:
        return self._leader().count_progress()

    def count_close(self) -> dict[str, Any]:
        return self._leader().count_close()

    def open_round(self, participants: list[int], deadline_s: float) -> dict[str, Any]:
        doc = self._leader().open_round(participants=participants, deadline_s=deadline_s)
        self.tp.set_round(int(doc["round_id"]))
        return doc

    def close_round(self, round_id: int) -> dict[str, Any]:
        return self._leader().close_round(round_id)

    def round_status(self, round_id: int) -> dict[str, Any]:
        return self.node.round_status(round_id, None)

    def clear_alarms(self) -> dict[str, Any]:
        return self.node.clear_alarms()

    def clear_strikes(self, device: int | None) -> dict[str, Any]:
        return self._leader().clear_strikes(device)

    def close(self) -> None:
        """Nothing to release."""


class _BatchedPhase:
    """A round's devices one after another, their retrieval requests batched per server."""

    def __init__(self, servers: InProcessServers) -> None:
        self.servers = servers

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        return [fn(x) for x in items]

    def send_uploads(self, items: Sequence[T], send: Callable[[T], None],
                     fail: Callable[[T, BaseException], None]) -> None:
        """``send(x)`` of each item -- each sends one device's upload (or its bound proof)
        through its links -- with the messages held and delivered to each server as one batch
        (:meth:`~secemb.server.retrieval.Retrieval.upload_many`,
        :meth:`~secemb.server.retrieval.Retrieval.proof_many`) once all have run: server 1's
        before server 0's, the order in which each device sends them (a device whose upload
        server 1 refused sends none to server 0: without relay, the receipt it held was never
        server 1's to give).  ``fail(x, exc)``
        for an item whose ``send`` raised or whose message a server refused.  Bytes and their
        counting are those of sending each message on its own."""
        hold = self.servers.hold
        hold.held = []
        try:
            for x in items:
                hold.key = x
                try:
                    send(x)
                except Exception as exc:  # noqa: BLE001 - a device failure is its own result
                    fail(x, exc)
        finally:
            hold.key = None
        held, hold.held = hold.held, []
        refused: set[int] = set()  # by id of the item
        for party in (1, 0):
            todo = [h for h in held if h[1] == party and id(h[0]) not in refused]
            for r, stage in sorted({(h[2], h[5]) for h in todo}):
                batch = [h for h in todo if (h[2], h[5]) == (r, stage)]
                try:
                    outs: list[BaseException | None] = list(
                        _take(self.servers.nodes[party], stage, r, [(h[3], h[4]) for h in batch]))
                except Exception as exc:  # noqa: BLE001 - e.g. the server's disk: every upload of the batch failed
                    outs = [exc] * len(batch)
                for (x, *_), out in zip(batch, outs, strict=True):
                    if out is not None:
                        refused.add(id(x))
                        fail(x, out)

    def retrieve(self, sessions: Sequence[RoundSession]) -> list[BaseException | None]:
        errors: list[BaseException | None] = [None] * len(sessions)
        if not sessions:
            return errors
        tp, round_id = self.servers.tp, sessions[0].rc.round_id
        for party in sessions[0].plan.device_sends(RETRIEVAL):
            todo = [i for i, err in enumerate(errors) if err is None]
            users = [user_endpoint(sessions[i].client.user_id) for i in todo]
            items = [(sessions[i].client.user_id,
                      _carry(tp, me, _NAMES[party], sessions[i].request_for(party), RETRIEVAL))
                     for i, me in zip(todo, users, strict=True)]
            outs = self.servers.nodes[party].retrieval_many(round_id, items)
            for i, me, out in zip(todo, users, outs, strict=True):
                if isinstance(out, BaseException):
                    errors[i] = out
                else:
                    reply = None if out is None else _carry(tp, _NAMES[party], me, out, RETRIEVAL)
                    sessions[i].accept_reply(party, reply)
        return errors


def server_configs(settings: dict[str, Any]) -> tuple[ServerConfig, ServerConfig]:
    """Both servers' configurations for an in-process run of ``settings`` (the fields of
    :func:`secemb.sim.settings.cluster_settings`).  Secrets are fresh OS randomness and
    never used: in-process nodes exchange no signed requests."""
    common: dict[str, Any] = {"peer_secret": os.urandom(32), "admin_secret": os.urandom(32),
                              "user_secret": os.urandom(32), "peer_url": "http://in-process.invalid",
                              "state_dir": Path("in-process")}
    return ServerConfig(party=0, **common, **settings), ServerConfig(party=1, **common, **settings)


def _check_announced(cfg: ServerConfig, protocol: Protocol) -> None:
    """Refuse nodes that would run another protocol than the round document announces (a device
    builds its protocol from the announcement; with bounded payloads on by default in a
    configuration, hand-written settings silent on ``bound`` announce it).  A protocol the
    registry does not know (a test's) is not compared.

    Raises
    ------
    InvalidParameters
        If the announced protocol's name, layout, relay or options differ from ``protocol``'s.
    """
    try:
        announced = cfg.make_protocol()
    except SecembError:  # not a registered protocol, or options only the test's class takes
        return
    mine = (protocol.name, protocol.layout, bool(protocol.relay), protocol.spec())
    theirs = (announced.name, announced.layout, bool(announced.relay), announced.spec())
    if mine != theirs:
        raise InvalidParameters(f"the nodes would run {mine} but the settings announce {theirs}: pass the protocol "
                                "the settings describe (server_configs(settings)[0].make_protocol()) or state its "
                                "options in settings['protocol_options']")


class InProcessServers:
    """Server 0 and server 1 as in-process nodes with in-memory state.

    Parameters
    ----------
    settings: the servers' shared configuration (:func:`secemb.sim.settings.cluster_settings`).
    protocol, model: the objects the nodes run (the driver's own; a test may pass a protocol
        that is not registered).
    transport: where messages cross and are counted (a fresh one by default; then each
        round's counters are dropped when the round ends, to bound memory).
    _noise_rngs: server 0's and server 1's random bytes for the DP noise (tests only: a
        secure and a plaintext run with the same seeded noise give the same model).
    """

    def __init__(self, settings: dict[str, Any], protocol: Protocol, model: RecModel,
                 transport: InProcessTransport | None = None, *,
                 _noise_rngs: tuple[RandomBytes, RandomBytes] | None = None) -> None:
        self.own_transport = transport is None
        self.tp = InProcessTransport() if transport is None else transport
        cfg0, cfg1 = server_configs(settings)
        _check_announced(cfg0, protocol)
        fingerprint = cfg0.fingerprint()
        rng0, rng1 = _noise_rngs or (None, None)
        follower = make_node(cfg1, store=MemoryStore(1, fingerprint), protocol=protocol, model=model, _noise_rng=rng1)
        leader = make_node(cfg0, peer=LocalPeer(follower, self.tp), store=MemoryStore(0, fingerprint),  # type: ignore[arg-type]
                           protocol=protocol, model=model, start_threads=False, _noise_rng=rng0)
        self.nodes = (leader, follower)
        self.hold = _HeldUploads()  # the devices' uploads while a phase batches them

    def servers(self) -> Servers:
        """The driver's view of the two nodes."""
        admin = (LocalAdminLink(self.nodes[0], self.tp), LocalAdminLink(self.nodes[1], self.tp))

        floor = self.nodes[0].cfg.min_users

        def device(user: int) -> DeviceClient:
            return DeviceClient.over(user, (LocalServerLink(self.nodes[0], user, self.tp, self.hold),
                                            LocalServerLink(self.nodes[1], user, self.tp, self.hold)), min_users=floor)

        return Servers(admin=admin, device=device, phase=_BatchedPhase(self), server_bytes=self.server_bytes,
                       end_round=self.end_round, device_errors_fatal=True)

    def server_bytes(self, round_id: int) -> int:
        """Bytes between the servers in round ``round_id``."""
        return self.tp.total_bytes(round_id=round_id, direction=SERVER)

    def end_round(self, round_id: int) -> None:
        """Stop tagging messages with ``round_id``; drop its counters if the transport is ours."""
        self.tp.set_round(None)
        if self.own_transport:
            self.tp.drop_round(round_id)

    def stop(self) -> None:
        """Stop the nodes' background threads."""
        for node in self.nodes:
            node.stop()
