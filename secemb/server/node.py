"""One server's state and round logic, independent of HTTP: :class:`LeaderNode` (server 0)
and :class:`FollowerNode` (server 1) on a shared :class:`Node`; :func:`make_node` builds the
one a configuration asks for.  The app in :mod:`.app` is a thin layer over them; an in-process
engine drives the same objects directly.

The protocol work is done by the protocol's own :class:`~secemb.protocols.base.ServerRole`
(the objects the in-process simulation uses); a node adds what a deployment needs around it:

* **rounds** with a participant list, a quorum and a deadline, opened and closed by server 0
  (the leader) and mirrored on server 1 through its :class:`~secemb.server.peer.PeerLink`;
* **one model, agreed** (issue 33): both servers reconstruct the round's update -- each
  sends the other its aggregate share over the agreed users, each applies the same
  deterministic optimizer step -- and server 0 commits only when server 1's model digest
  equals its own; server 1 installs only the model it computed itself (server 0's sync must
  have the same digest).  A mismatch is a :class:`~secemb.errors.ModelDisagreement`: no
  commit, an alarm, the deployment halted;
* **alarms** (:meth:`Node.raise_alarm`): a deviation a server detects (relayed bytes that fail
  authentication at server 1, a device's report of a tampered retrieval or of servers
  announcing different models, two models that differ) is journaled, logged as a WARNING and
  shown in :meth:`Node.status`; all but relay tampering halt the deployment (the open round
  aborted, no round opened) until the operator clears them (:meth:`Node.clear_alarms`);
* **the agreed user set.**  Each server absorbs uploads as they arrive.  At close, server 0
  takes the users it absorbed, asks server 1 for its set and proposes the intersection ``I``;
  both roles aggregate exactly ``I`` (``aggregate_share(include=I)`` / ``combine(...,
  include=I)``): a user outside ``I`` (its upload reached only one server) is left out as a
  retrieved-but-silent user, without re-evaluating the others;
* **durability** through a :class:`~secemb.server.store.StateStore` (on disk: atomic
  checkpoint, the commit point of a round, and a journal of round ids and outcomes).  Rounds
  in flight when a server dies are aborted; a committed round is never applied twice, because
  server 1 only accepts the model version that follows its own;
* **Eq. 11** count shares (m' from the mean rating count) before the first round
  (:mod:`.count`);
* **batching**: concurrent retrievals are evaluated as one batch (:meth:`Node.retrieval_many`),
  outside the node's lock; the result is committed under the lock if the round is still the
  one it was evaluated for.  Concurrent uploads are absorbed as one batch (:meth:`Node.upload_many`;
  with relay, forwarded to server 1 as one).  A round's combine and optimizer step likewise run unlocked while
  the round is closing, and commit under the lock;
* **busy time**: the seconds spent in role calls and in the optimizer step, per round
  (``server_s``, ``optimizer_s`` in :meth:`Node.round_status`).

Errors: :mod:`.errors` (``Conflict`` 409, ``NotFound`` 404, ``PeerUnavailable`` 503),
:class:`~secemb.server.auth.Forbidden` (403), and the protocol's ``InvalidMessage`` (400),
``ProtocolError`` (409), ``InvalidParameters`` (422).  Every rejected request leaves the
state as it was.

The node is split by concern, each module stating its contract and party:
:mod:`.state` (construction, durable state, round lifecycle), :mod:`.alarms`,
:mod:`.admission` (user ids, round terms, the door), :mod:`.retrieval` (batched retrieval,
uploads), :mod:`.combine` (both servers' reconstruction), :mod:`.shared` (:class:`Node`),
:mod:`.relay`, :mod:`.close` (close, verify, commit, sync), :mod:`.leader`
(:class:`LeaderNode`) and :mod:`.follower` (:class:`FollowerNode`); this module builds the
node a configuration asks for (:func:`make_node`).
"""

from __future__ import annotations

from secemb.errors import InvalidParameters
from secemb.models.base import RecModel
from secemb.protocols.base import Protocol
from secemb.randomness import RandomBytes
from secemb.server.alarms import ALARMS, DEVICE_ALARMS
from secemb.server.config import ServerConfig
from secemb.server.errors import Conflict, NotFound, PeerUnavailable
from secemb.server.follower import FollowerNode
from secemb.server.leader import LeaderNode
from secemb.server.peer import HttpPeer, PeerLink
from secemb.server.shared import Node
from secemb.server.store import StateStore

__all__ = ["ALARMS", "DEVICE_ALARMS", "Conflict", "FollowerNode", "LeaderNode", "Node", "NotFound", "PeerUnavailable",
           "make_node"]


def make_node(cfg: ServerConfig, *, peer: PeerLink | None = None, store: StateStore | None = None,
              start_threads: bool = True, protocol: Protocol | None = None,
              model: RecModel | None = None, _noise_rng: RandomBytes | None = None) -> LeaderNode | FollowerNode:
    """The node of server ``cfg.party``.

    Parameters
    ----------
    peer: server 0's link to server 1 (default: :class:`~secemb.server.peer.HttpPeer` at
        ``cfg.peer_url``); server 1 takes none.
    store: durable state (default: on disk in ``cfg.state_dir``).
    start_threads: server 0's round-closing thread.
    protocol, model: the objects to run (default: built from ``cfg``); the in-process engine
        passes its own, e.g. a model carrying the public item features.
    _noise_rng: the random bytes of the DP noise (tests only; the OS CSPRNG by default).

    Raises
    ------
    InvalidParameters: a ``peer`` for server 1; a protocol that does not declare itself
        networked with the durable store of a deployment (its state across rounds would not
        survive a restart; the in-process engine runs it with a :class:`MemoryStore`).
    """
    protocol = protocol if protocol is not None else cfg.make_protocol()
    if store is None and not protocol.capabilities.networked:
        raise InvalidParameters(
            f"protocol {cfg.protocol!r} does not run in the server deployment (it declares networked=False)"
        )
    if cfg.party == 1:
        if peer is not None:
            raise InvalidParameters("peer: server 1 calls no peer (server 0 drives every exchange), got one")
        return FollowerNode(cfg, store=store, protocol=protocol, model=model, _noise_rng=_noise_rng)
    link = peer if peer is not None else HttpPeer(cfg.peer_url, cfg.peer_secret, timeout=cfg.peer_timeout_s,
                                                  tls=cfg.peer_tls(), max_answer_bytes=cfg.max_body_bytes)
    return LeaderNode(cfg, peer=link, store=store, start_threads=start_threads, protocol=protocol, model=model,
                      _noise_rng=_noise_rng)
