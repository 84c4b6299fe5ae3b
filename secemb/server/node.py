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
  one it was evaluated for.  A round's combine and optimizer step likewise run unlocked while
  the round is closing, and commit under the lock;
* **busy time**: the seconds spent in role calls and in the optimizer step, per round
  (``server_s``, ``optimizer_s`` in :meth:`Node.round_status`).

Errors: :mod:`.errors` (``Conflict`` 409, ``NotFound`` 404, ``PeerUnavailable`` 503),
:class:`~secemb.server.auth.Forbidden` (403), and the protocol's ``InvalidMessage`` (400),
``ProtocolError`` (409), ``InvalidParameters`` (422).  Every rejected request leaves the
state as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from secemb.digest import model_sha256
from secemb.errors import InvalidMessage, InvalidParameters, ModelDisagreement, RelayTampered, SecembError
from secemb.models.base import RecModel
from secemb.privacy.noise import RingNoise, add_to_share
from secemb.protocols.base import Protocol, RoundConfig, ServerRole
from secemb.randomness import RandomBytes
from secemb.round import messages
from secemb.round.optimizer import ServerAdam
from secemb.round.update import apply_aggregate
from secemb.server import faults
from secemb.server.admission import admit, check_floor, round_terms, user_list
from secemb.server.auth import Forbidden
from secemb.server.config import ServerConfig
from secemb.server.count import CountPhase
from secemb.server.errors import Conflict, NotFound, PeerUnavailable, peer_failure
from secemb.server.peer import PEER_ERRORS, HttpPeer, PeerLink, PeerRefused, PeerUnreachable
from secemb.server.persist import CorruptState, StorageError
from secemb.server.rounds import ABORTED, CLOSING, COMMITTED, FINAL, OPEN, Batcher, Outcomes, Round, by_round
from secemb.server.store import Checkpoint, DiskStore, StateStore
from secemb.server.verify import encode_digests, rejected
from secemb.sharing import reconstruct

__all__ = ["Conflict", "FollowerNode", "LeaderNode", "Node", "NotFound", "PeerUnavailable", "make_node"]

log = logging.getLogger("secemb.server")

#: the alarms a server raises (docs/deployment.md, "Alarms"), and whether each halts the deployment
ALARMS = {"relay_tampered": False, "retrieval_tampered": True, "model_disagreement": True, "device_rejected": False}
#: what a device may report (``POST /v1/alarm``)
DEVICE_ALARMS = ("retrieval_tampered", "model_disagreement")
#: alarms kept in memory and shown in the status (the journal keeps them all)
_KEEP_ALARMS = 100


class Node:
    """What both servers share: model, store, rounds, retrieval and upload handling.

    Parameters
    ----------
    cfg: the validated configuration.
    store: durable state (default: :class:`~secemb.server.store.DiskStore` in ``cfg.state_dir``).
    _noise_rng: the random bytes of the DP noise (tests only; the OS CSPRNG by default).
    """

    party: int

    def __init__(self, cfg: ServerConfig, *, store: StateStore | None = None, protocol: Protocol | None = None,
                 model: RecModel | None = None, _noise_rng: RandomBytes | None = None) -> None:
        if cfg.party != self.party:
            raise InvalidParameters(f"{type(self).__name__} is server {self.party}, the configuration says "
                                    f"party={cfg.party}")
        self.cfg = cfg
        self.protocol = protocol if protocol is not None else cfg.make_protocol()
        self.role: ServerRole = self.protocol.make_server(self.party)
        self.model = model if model is not None else cfg.make_model()
        self.fp = cfg.fixed_point()
        #: central DP: this server's noise on its own aggregate share (docs/security.md)
        self.noise: RingNoise | None = None
        if cfg.dp_sigma > 0:
            if not self.protocol.capabilities.central_dp:
                raise InvalidParameters(f"protocol {cfg.protocol!r} does not support central DP noise (central_dp)")
            self.noise = RingNoise(self.fp, cfg.dp_sigma, _rng=_noise_rng)
        self.width, self.dense_size = self.model.sparse_width, self.model.dense_size
        #: the round document's model: name, hyperparameters and, for a model with features, the
        #: SHA-256 of the public item features (:meth:`FeatureSet.public_sha256`), for GREC's
        #: denoiser that of the recommender's table it froze
        #: (:func:`~secemb.digest.table_sha256`), which a device building the model from
        #: its own copy compares before it sends anything
        self.model_doc: dict[str, Any] = {"name": cfg.model, "hparams": cfg.model_hparams}
        features = getattr(self.model, "features", None)
        if features is not None:
            self.model_doc["item_features_sha256"] = features.public_sha256()
        frozen = getattr(self.model, "recommender_table_sha256", None)
        if frozen is not None:
            self.model_doc["recommender_table_sha256"] = frozen
        self.fingerprint = cfg.fingerprint()
        self.boot_id = secrets.token_hex(8)
        self.store = store if store is not None else DiskStore(cfg.state_dir, self.party, self.fingerprint)
        self.lock = threading.RLock()
        self._wake = threading.Condition(self.lock)
        self.round: Round | None = None
        self.count = CountPhase(self.fp.dtype, on_first_release=self._journal_first_count)
        self.outcomes = Outcomes()
        self.alarms: list[dict[str, Any]] = []
        #: why the deployment is halted (``None``: it is not)
        self.halted: str | None = None
        #: server 0: per device, the rounds whose upload verification it failed since the operator
        #: last cleared the alarms (issue 34; rebuilt from the journal): MAX_REJECTIONS refuse it
        self.rejections: dict[int, int] = {}
        self._stopping = False
        self._load()
        self._recover()
        self._retrieve_batch = Batcher(by_round(self.retrieval_many))

    # ================================================================== durable state
    def _new_optimizer(self) -> ServerAdam:
        """The optimizer (each server applies the same steps)."""
        return ServerAdam(self.cfg.num_items, self.width, self.dense_size, self.cfg.adam(), lazy=self.cfg.lazy_adam)

    def _load(self) -> None:
        self.opt = self._new_optimizer()
        ck = self.store.load()
        if ck is None:
            self._refuse_lost_checkpoint()
            self._initial_state()
            return
        if self.cfg.m_prime is not None and ck.m_prime not in (None, self.cfg.m_prime):
            raise CorruptState(f"checkpoint has m_prime={ck.m_prime}, config says {self.cfg.m_prime}")
        if ck.table.shape != (self.cfg.num_items, self.width) or ck.dense.shape != (self.dense_size,):
            raise CorruptState(f"checkpoint model shapes {ck.table.shape}, {ck.dense.shape} do not match the "
                               f"configuration's {(self.cfg.num_items, self.width)}, {(self.dense_size,)}")
        try:
            self.opt.load_state_dict(_optimizer_state(ck))
        except InvalidParameters as exc:
            raise CorruptState(f"checkpoint: {exc}") from None
        self.version, self.last_round, self.last_included = ck.version, ck.last_round, ck.included
        self.m_prime = ck.m_prime if ck.m_prime is not None else self.cfg.m_prime
        self.mean_count = ck.mean_count
        self.table, self.dense, self.sha = ck.table, ck.dense, ck.model_sha256

    def _refuse_lost_checkpoint(self) -> None:
        """Issue 12, finding 11: no checkpoint, but the journal says one was written (a
        committed round or an opened m'), so the model was lost; starting from a fresh model
        would silently discard the training.  Refuse, naming the recovery."""
        written = [r for r in self.store.records() if r.get("ev") in (COMMITTED, "m_prime")]
        if written:
            last = written[-1]
            raise CorruptState(
                f"{self.store} has no checkpoint, but its journal records {len(written)} committed state "
                f"change(s) (the last: {last.get('ev')} of round {last.get('round')}): the checkpoint was lost. "
                "Refusing to start from a fresh model. Restore checkpoint.npz from a backup into the state "
                "directory, or start the deployment over by moving BOTH servers' state directories aside "
                "(docs/deployment.md, 'A lost checkpoint')."
            )

    def _initial_state(self) -> None:
        """State before the first checkpoint: model version 0, which each server initializes
        itself from the public ``init_seed`` (the two digests are compared before the first
        round), saved at once."""
        self.version, self.last_round, self.last_included = 0, -1, []
        self.m_prime, self.mean_count = self.cfg.m_prime, None
        rng = np.random.default_rng(self.cfg.init_seed)
        self.table, self.dense = self.model.init_public(self.cfg.num_items, rng, rating_range=self.cfg.rating_range)
        self.sha = model_sha256(self.table, self.dense)
        self._save()

    def _checkpoint(self, version: int, last_round: int, included: list[int], table: np.ndarray,
                    dense: np.ndarray, sha: str, opt: ServerAdam) -> Checkpoint:
        return Checkpoint(version, last_round, included, self.m_prime, self.mean_count, table, dense, sha,
                          opt.state_dict())

    def _save(self) -> None:
        self.store.save(self._checkpoint(self.version, self.last_round, self.last_included, self.table,
                                         self.dense, self.sha, self.opt))

    def _recover(self) -> None:
        """Round ids stay monotonic; rounds left open by a crash end as aborted (or as
        committed, if the checkpoint says so)."""
        self.max_round = self.last_round
        open_rounds: dict[int, dict[str, Any]] = {}
        for rec in self.store.records():
            r = int(rec.get("round", -1))
            self.max_round = max(self.max_round, r)
            ev = rec.get("ev")
            if ev == "alarm":
                self._remember_alarm(rec)
            elif ev == "alarms_cleared":
                self.alarms, self.halted, self.rejections = [], None, {}
            elif ev == "count_first":
                self.count.restore_first([int(u) for u in rec.get("users", [])])
            elif ev == "open":
                open_rounds[r] = rec
            elif ev in FINAL:
                open_rounds.pop(r, None)
                self.outcomes.remember(r, ev, rec.get("included"), rec.get("reason", ""), tampered=rec.get("tampered"),
                                       rejected=rec.get("rejected"))
                for u in rec.get("rejected") or []:
                    self.rejections[int(u)] = self.rejections.get(int(u), 0) + 1
        for r in sorted(open_rounds):
            if r == self.last_round:
                rec = {"ev": COMMITTED, "round": r, "version": self.version, "included": self.last_included,
                       "reason": "recovered from checkpoint"}
            else:
                rec = {"ev": ABORTED, "round": r, "reason": "server restarted during the round"}
            self.store.append(rec)
            self.outcomes.remember(r, rec["ev"], rec.get("included"), rec["reason"])

    # ================================================================== helpers
    def stop(self) -> None:
        """Stop the background threads."""
        self._stopping = True
        with self._wake:
            self._wake.notify_all()

    def _current(self, r: int, *, states: tuple[str, ...] = (OPEN,)) -> Round:
        rnd = self.round
        if rnd is None or rnd.round_id != r:
            cur = "none" if rnd is None else str(rnd.round_id)
            raise Conflict(f"round {r} is not the current round (current: {cur})")
        if rnd.state not in states:
            raise Conflict(f"round {r} is closed ({rnd.state}): messages for it are refused" if rnd.state != OPEN
                           else f"round {r} is still open")
        return rnd

    def model_message(self) -> bytes:
        """The current model as a MODEL message (each server holds one from the start: version
        0, :meth:`_initial_state`)."""
        with self.lock:
            return messages.encode_model(self.version, self.table, self.dense)

    def model_sha(self) -> str:
        """SHA-256 of the current model (computed once per version)."""
        return self.sha

    def _round_doc(self, rnd: Round) -> dict[str, Any]:
        return {
            "round_id": rnd.round_id,
            "state": rnd.state,
            "model_version": rnd.version,
            "n_p": rnd.n_p,
            "min_users": rnd.min_users,
            "deadline_unix": rnd.deadline,
            "config": dataclasses.asdict(rnd.rc),
            "protocol": {"name": self.cfg.protocol, "layout": self.cfg.layout, "relay": self.cfg.relay,
                         "expansion": self.cfg.expansion, "layout_seed": self.cfg.layout_seed,
                         "options": self.cfg.protocol_options},
            "model": self.model_doc,
            "training": {"lr": self.cfg.lr, "beta1": self.cfg.beta1, "beta2": self.cfg.beta2,
                         "eps": self.cfg.eps, "ring_bits": self.cfg.ring_bits,
                         "frac_bits": self.cfg.frac_bits,
                         # central DP: what every device clips to, and the noise it leaves room for
                         **({"dp_clip": self.cfg.dp_clip, "dp_sigma": self.cfg.dp_sigma} if self.cfg.dp_clip else {})},
            "fingerprint": self.fingerprint,
            # the digest of the model the round trains on: a device checks both servers announce it
            "model_sha256": rnd.model_sha,
            # the digest of the round's DENSE message, which devices get from server 0 alone
            "dense_sha256": hashlib.sha256(rnd.dense_msg).hexdigest(),
        }

    def _own_share(self, rnd: Round, include: list[int]) -> bytes:
        """This server's aggregate share of round ``rnd`` over ``include``, noised (central
        DP) before it leaves -- the other server cannot take this noise out; the noise is kept
        in ``rnd.share_noise`` for this server's own reconstruction (:meth:`_reconstruct`)."""
        share = self.role.aggregate_share(include=include)
        if self.noise is None:
            return share
        rc = rnd.rc
        rnd.share_noise = self.noise.draw(rc.num_items * rc.width + rc.dense_size)
        return add_to_share(share, rnd.share_noise)

    def _reconstruct(self, rnd: Round, role: ServerRole, peer_share: bytes, include: list[int], opt: ServerAdam,
                     table: np.ndarray, dense: np.ndarray) -> tuple[np.ndarray, np.ndarray, str, ServerAdam]:
        """The round's update, as both servers compute it: the ring sum of this server's
        aggregate over ``include`` and ``peer_share`` (the other server's, noised), plus this
        server's own noise (:meth:`_own_share`); the optimizer step applied to ``table`` and
        ``dense`` (copies, changed in place) with a copy of ``opt``.  Deterministic: both
        servers get the same ``(table, dense, model_sha256, optimizer)``.

        Raises
        ------
        InvalidMessage, ProtocolError: ``peer_share`` is malformed or covers other users.
        """
        sparse_sum, dense_sum = rnd.busy(role.combine, peer_share, include=include)
        noise = rnd.share_noise
        if noise is not None:  # the same ring sum as both noised shares: each server adds its own noise once
            sparse_sum = sparse_sum + noise[: sparse_sum.size].reshape(sparse_sum.shape)
            dense_sum = dense_sum + noise[sparse_sum.size :]
        opt = copy.deepcopy(opt)
        rnd.busy(apply_aggregate, self.fp, opt, table, dense, sparse_sum, dense_sum, len(include), optimizer=True)
        return table, dense, model_sha256(table, dense), opt

    def _begin(self, rnd: Round) -> None:
        """Make ``rnd`` the current round (under the lock).  Both servers encode its DENSE
        message: server 0 serves it, and both announce its digest (a device checks the vector
        it gets from server 0 alone against both announcements)."""
        self.role.begin_round(rnd.rc, self.fp.encode(self.table))
        rnd.dense_msg = messages.encode_dense(rnd.round_id, self.fp.encode(self.dense), rnd.rc.ring_bits)
        self.round = rnd

    def _journal_open(self, rnd: Round) -> None:
        self.store.append({"ev": "open", "round": rnd.round_id, "version": rnd.version, "n_p": rnd.n_p})
        self.max_round = rnd.round_id

    def _journal_outcome(self, rec: dict[str, Any]) -> None:
        """Journal a record that only restates what recovery derives anyway (a round's end,
        m' after its checkpoint): if the disk refuses it, log and go on -- on restart an
        unterminated ``open`` becomes ``aborted``, or ``committed`` from the checkpoint."""
        try:
            self.store.append(rec)
        except StorageError as exc:
            log.error("journal record %s not written: %s", rec.get("ev"), exc)

    def _end(self, rnd: Round, state: str, reason: str, *, done: bool = True) -> None:
        """End ``rnd`` as ``state`` (journaled; idempotent)."""
        with self.lock:
            if rnd.state in FINAL:
                return
            rnd.state, rnd.reason = state, reason
            rec: dict[str, Any] = {"ev": state, "round": rnd.round_id, "reason": reason}
            if state == COMMITTED:
                rec["version"], rec["included"] = self.version, rnd.included
            if rnd.tampered:
                rec["tampered"] = sorted(rnd.tampered)
            if rnd.rejected:
                rec["rejected"] = sorted(rnd.rejected)
            self._journal_outcome(rec)
            self.outcomes.remember(rnd.round_id, state, rnd.included, reason, rnd.server_s, rnd.optimizer_s,
                                   sorted(rnd.tampered), sorted(rnd.rejected))
        if state == ABORTED:
            log.warning("round %d aborted: %s", rnd.round_id, reason)
        if done:
            rnd.done.set()

    # ================================================================== alarms
    def _remember_alarm(self, rec: dict[str, Any]) -> None:
        """Keep alarm record ``rec`` (journaled) in memory; a halting one halts."""
        doc = {k: rec.get(k) for k in ("kind", "round", "detail", "halt", "time_unix")}
        self.alarms.append(doc)
        del self.alarms[:-_KEEP_ALARMS]
        if doc["halt"]:
            self.halted = f"{doc['kind']} in round {doc['round']}"

    def raise_alarm(self, kind: str, round_id: int, detail: str) -> None:
        """Record a detected deviation of kind ``kind`` (:data:`ALARMS`) in round ``round_id``:
        journaled (it survives a restart), logged as a WARNING, shown in :meth:`status` until
        :meth:`clear_alarms`.  A halting kind halts the deployment: the current round, if still
        open, is aborted (a closing one ends as its close decides: its aggregate holds no
        reporting device, and both servers must end it alike), and no round opens until the
        alarm is cleared.  The same alarm again (kind, round, detail) is recorded once.
        ``detail`` names no secret (which user is known to both servers; no slot or item is)."""
        halt = ALARMS[kind]
        rec = {"ev": "alarm", "kind": kind, "round": int(round_id), "detail": detail[:500], "halt": halt,
               "time_unix": time.time()}
        with self.lock:
            if any((a["kind"], a["round"], a["detail"]) == (kind, rec["round"], rec["detail"]) for a in self.alarms):
                return
            self._journal_outcome(rec)
            self._remember_alarm(rec)
            rnd = self.round
        log.warning("ALARM %s in round %d at server %d: %s%s", kind, round_id, self.party, detail,
                    " -- the deployment is halted until the operator clears the alarm" if halt else "")
        if halt and rnd is not None and rnd.state == OPEN:
            self._end(rnd, ABORTED, f"deployment halted: {kind}")

    def clear_alarms(self) -> dict[str, Any]:
        """The operator's acknowledgement (``POST /v1/admin/alarms/clear``): forget the alarms
        and lift the halt (journaled); ``{"cleared": how many}``."""
        with self.lock:
            n = len(self.alarms)
            self.store.append({"ev": "alarms_cleared", "round": self.max_round, "alarms": n})
            self.alarms, self.halted, self.rejections = [], None, {}
        log.warning("server %d: %d alarm(s) cleared by the operator", self.party, n)
        return {"cleared": n}

    def _refuse_if_halted(self) -> None:
        """Raise Conflict while the deployment is halted (under the lock)."""
        if self.halted is not None:
            raise Conflict(f"the deployment is halted by an alarm ({self.halted}): see docs/deployment.md, "
                           "'Alarms'; after the investigation, 'secemb admin clear-alarms'")

    def device_alarm(self, user: int, doc: dict[str, Any]) -> dict[str, Any]:
        """Device ``user``'s report (``POST /v1/alarm``): ``{"kind": one of DEVICE_ALARMS,
        "round_id": the current round, "detail": text}`` -- it caught a server deviating (a
        tampered retrieval answer, servers announcing different models).  Only a participant
        of the current round may report; the report halts the deployment.

        Raises
        ------
        InvalidParameters: a malformed report.
        Conflict: ``round_id`` is not the current round.
        Forbidden: ``user`` is not one of its participants.
        """
        unknown = set(doc) - {"kind", "round_id", "detail"}
        kind, r, detail = doc.get("kind"), doc.get("round_id"), doc.get("detail", "")
        if unknown or kind not in DEVICE_ALARMS or isinstance(r, bool) or not isinstance(r, int) \
                or not isinstance(detail, str):
            raise InvalidParameters(f"an alarm is {{'kind': one of {list(DEVICE_ALARMS)}, 'round_id': int, "
                                    f"'detail': str}}, got fields {sorted(doc)}")
        with self.lock:
            rnd = self.round
            if rnd is None or rnd.round_id != r:
                raise Conflict(f"round {r} is not the current round")
            if rnd.participants is not None and user not in rnd.participants:
                raise Forbidden(f"user {user} is not a participant of round {r}")
        text = "".join(c if c.isprintable() else " " for c in detail[:200])  # one log line, whatever it sent
        self.raise_alarm(kind, r, f"device {user} reports {kind}: {text}")
        return {"halted": True}

    # ================================================================== status
    def status(self) -> dict[str, Any]:
        """Everything an operator may see (admin/peer)."""
        with self.lock:
            rnd = self.round
            return {
                "party": self.party,
                "boot_id": self.boot_id,
                "fingerprint": self.fingerprint,
                "model_version": self.version,
                "model_sha256": self.model_sha(),
                "last_committed_round": self.last_round,
                "max_round": self.max_round,
                "m_prime": self.m_prime,
                "mean_count": self.mean_count,
                "sync_pending": self._sync_pending_status(),
                "count": self.count.status(),
                "halted": self.halted is not None,
                "alarms": list(self.alarms),
                "round": None if rnd is None else {
                    "round_id": rnd.round_id, "state": rnd.state, "n_p": rnd.n_p,
                    "retrieved": len(rnd.retrieved), "uploaded": len(rnd.uploaded),
                    "deadline_unix": rnd.deadline,
                },
            }

    def _sync_pending_status(self) -> bool:
        return False

    def round_info(self, user: int | None) -> dict[str, Any]:
        """The current round as a device sees it."""
        with self.lock:
            rnd = self.round
            if rnd is None:
                raise NotFound("no round has been opened since this server started")
            doc = self._round_doc(rnd)
            doc["participant"] = None if user is None else (rnd.participants is None or user in rnd.participants)
            return doc

    def round_status(self, r: int, user: int | None) -> dict[str, Any]:
        """Outcome of round ``r``: ``state``, ``reason``, and for the operator (``user`` None)
        the included ids and this server's busy seconds ``server_s`` (role calls) and
        ``optimizer_s`` (``None`` for rounds recovered after a restart); for device ``user``
        only whether it was included."""
        with self.lock:
            rnd = self.round
            if rnd is not None and rnd.round_id == r:
                doc = rnd.outcome()
            else:
                past = self.outcomes.get(r)
                if past is None:
                    raise NotFound(f"round {r} is unknown to this server")
                doc = past
        if user is not None:
            inc = doc.pop("included")
            doc["included"] = None if inc is None else user in inc
            del doc["server_s"], doc["optimizer_s"], doc["tampered"]
            doc.pop("rejected", None)
        return doc

    # ================================================================== Eq. 11 counts
    def _journal_first_count(self, users: list[int]) -> None:
        """Journal the user set of the first count sum released (durably, before it leaves:
        a StorageError refuses the sum), so that a recount over another set is refused after a
        restart too (issue 33, "the recount rule is lost on restart")."""
        self.store.append({"ev": "count_first", "round": self.max_round, "users": users})

    def count_submit(self, user: int, body: bytes) -> None:
        """A device's COUNT share."""
        self.count.submit(user, messages.decode_count(body, ring_bits=self.cfg.ring_bits, party=self.party))

    # ================================================================== retrieval
    def retrieval(self, r: int, user: int, body: bytes) -> bytes | None:
        """A device's retrieval request; the reply (``None``: nothing to send back).  Batched
        with concurrent requests (:meth:`retrieval_many`)."""
        return self._retrieve_batch((r, user, body))

    def retrieval_many(self, r: int, items: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """Many devices' retrieval requests ``(user, body)`` for round ``r``, evaluated as one
        batch outside the lock and committed under it; per item the reply (``None``: nothing
        to send back) or the error that refused it (which changed no state)."""
        return self._evaluate_retrievals(r, items)

    def _evaluate_retrievals(self, r: int, items: list[tuple[int, bytes]],
                             on_admitted: Callable[[list[int]], None] | None = None,
                             ) -> list[bytes | None | SecembError]:
        """Admit, evaluate (outside the lock) and commit (under it) ``items``; per item the
        role's reply or the error.  ``on_admitted(indices)`` runs after admission, before the
        evaluation, with the indices of the admitted items."""
        results: list[bytes | None | SecembError] = [None] * len(items)
        todo: list[int] = []
        with self.lock:
            try:
                rnd = self._current(r)
            except SecembError as exc:
                return [exc] * len(items)
            for i, (user, _) in enumerate(items):
                try:
                    admit(rnd, user, self.rejections)
                    todo.append(i)
                except SecembError as exc:
                    results[i] = exc
            role = self.role
        if not todo:
            return results
        try:
            if on_admitted is not None:
                on_admitted(todo)
            commit = rnd.busy(role.evaluate_retrieval_many, [items[i] for i in todo])
            with self.lock:
                try:
                    self._current(r)
                    outs = rnd.busy(commit)
                except SecembError as exc:
                    outs = [exc] * len(todo)
                for i, out in zip(todo, outs, strict=True):
                    results[i] = out
                    if not isinstance(out, BaseException):
                        rnd.retrieved.add(items[i][0])
                n = len(rnd.retrieved)
        finally:
            with self.lock:
                rnd.admitting.difference_update(items[i][0] for i in todo)
        if not all(isinstance(results[i], BaseException) for i in todo):
            faults.hit("retrieval", n)
        return results

    # ================================================================== upload
    def upload(self, r: int, user: int, body: bytes) -> None:
        """A device's upload: absorbed at once (and, with relay, forwarded to server 1)."""
        with self.lock:
            rnd = self._current(r)
            if rnd.participants is not None and user not in rnd.participants:
                raise Forbidden(f"user {user} is not a participant of round {rnd.round_id}")
            fwd = rnd.busy(self.role.handle_upload, user, body)
            rnd.uploaded.add(user)
            n = len(rnd.uploaded)
        try:
            self._forward_upload(r, user, fwd)
        finally:
            with self._wake:
                rnd.finished.add(user)
                self._wake.notify_all()
        faults.hit("upload", n)

    def _forward_upload(self, r: int, user: int, fwd: bytes | None) -> None:
        """Hand on what the role returned for an upload (server 0 with relay: to server 1)."""


class LeaderNode(Node):
    """Server 0: opens and closes rounds, reconstructs the aggregate and applies the optimizer
    (as server 1 does), commits when both models agree, syncs server 1 through ``peer``.

    Parameters
    ----------
    cfg, store: as :class:`Node`.
    peer: server 1 (:class:`~secemb.server.peer.PeerLink`).
    start_threads: run the round-closing thread (tests of single nodes turn it off).
    """

    party = 0

    def __init__(self, cfg: ServerConfig, *, peer: PeerLink, store: StateStore | None = None,
                 start_threads: bool = True, protocol: Protocol | None = None, model: RecModel | None = None,
                 _noise_rng: RandomBytes | None = None) -> None:
        self.peer = peer
        self._open_lock = threading.Lock()
        self._sync_pending = False
        super().__init__(cfg, store=store, protocol=protocol, model=model, _noise_rng=_noise_rng)
        if start_threads:
            threading.Thread(target=self._closer, daemon=True, name="secemb-closer").start()

    def _sync_pending_status(self) -> bool:
        return self._sync_pending

    def _end(self, rnd: Round, state: str, reason: str, *, notify_peer: bool = True, done: bool = True) -> None:
        """As :meth:`Node._end`; an abort is also sent to server 1 (best effort)."""
        was_final = rnd.state in FINAL
        super()._end(rnd, state, reason, done=done)
        if state == ABORTED and notify_peer and not was_final:
            try:
                self.peer.abort(rnd.round_id, reason)
            except PEER_ERRORS:
                pass  # server 1 learns it when the next round opens

    # ================================================================== Eq. 11 counts
    def count_open(self, users: list[int] | None) -> dict[str, Any]:
        """Start (or restart) the count phase, here and at server 1.

        With m' from the counts (no ``training.m_prime`` configured) the phase may run again
        between rounds to update m' (SecEmb Appendix L.2, periodic update): server 1 then
        releases a sum only over the user set of its first released sum
        (:meth:`~secemb.server.count.CountPhase.total`), so two counts never differ by one
        user's share.

        Raises
        ------
        Conflict: m' is fixed by the configuration, or a round is in progress.
        """
        ids = None if users is None else frozenset(user_list(users, "users", self.cfg.num_users))
        with self.lock:
            if self.cfg.m_prime is not None:
                raise Conflict(f"m' is fixed by the configuration ({self.cfg.m_prime})")
            if self.round is not None and self.round.state not in FINAL:
                raise Conflict(f"round {self.round.round_id} is still {self.round.state}: count between rounds")
        try:
            self.peer.count_open(None if ids is None else sorted(ids))
        except PEER_ERRORS as exc:
            raise peer_failure("server 1 did not open the count phase", exc) from None
        self.count.open(ids)
        return {"state": "open"}

    def count_close(self) -> dict[str, Any]:
        """Agree on the users with server 1, open the total, fix m' (Eq. 11)."""
        mine = set(self.count.freeze())
        try:
            theirs = self.peer.count_close()
            include = sorted(mine & set(theirs))
            if len(include) < self.cfg.min_users:
                self.count.reopen()
                raise Conflict(f"{len(include)} user(s) sent their count share to both servers, fewer than "
                               f"min_users={self.cfg.min_users}: the mean count is not opened")
            peer = messages.decode_count(self.peer.count_share(include), ring_bits=self.cfg.ring_bits, party=1)
        except (*PEER_ERRORS, InvalidMessage) as exc:  # InvalidMessage: server 1's share is malformed, its failure
            self.count.reopen()
            raise peer_failure("server 1 did not close the count phase", exc) from None
        total = int(reconstruct(self.count.total(include), peer)[0])
        # issue 12, finding 12: each device's count lies in [0, m], so an honest total lies in
        # [0, n m]; anything else means a device sent an out-of-range share (which one is not
        # learnable): the phase fails and can be run again, or m' set by the operator
        if total > len(include) * self.cfg.num_items:
            self.count.reopen()
            raise Conflict(f"the opened total is outside [0, n*m] for n={len(include)}, m={self.cfg.num_items}: "
                           "a device sent a count share outside [0, m]; run the count again or set training.m_prime")
        mean = total / len(include)
        cap = self.cfg.m_prime_max if self.cfg.m_prime_max is not None else self.cfg.num_items
        with self.lock:
            before = self.m_prime, self.mean_count
            self.m_prime = min(max(math.ceil(self.cfg.alpha * mean), 1), cap)
            self.mean_count = mean
            try:
                self._save()
            except StorageError:
                self.m_prime, self.mean_count = before
                self.count.reopen()
                raise
            self._journal_outcome({"ev": "m_prime", "round": self.last_round, "m_prime": self.m_prime, "mean": mean,
                                   "users": len(include)})
            return {"m_prime": self.m_prime, "mean_count": mean, "users": len(include)}

    # ================================================================== opening rounds
    def _reconcile(self) -> int:
        """Make sure server 1 holds the same model version (re-sending the last sync if it
        missed it); return the next round id."""
        try:
            st = self.peer.status()
        except PEER_ERRORS as exc:
            raise peer_failure("server 1 is unavailable", exc) from None
        if st.get("fingerprint") != self.fingerprint:
            raise Conflict("server 1 runs with a different protocol/model/training configuration")
        if int(st["model_version"]) == self.version - 1:  # it missed the commit of the round both agreed on
            self._sync_peer()
            if self._sync_pending:
                raise PeerUnavailable("server 1 did not accept the model sync")
            try:
                st = self.peer.status()
            except PEER_ERRORS as exc:
                raise peer_failure("server 1 is unavailable", exc) from None
        if int(st["model_version"]) == self.version and st.get("model_sha256") != self.model_sha():
            detail = f"server 1 holds model {st.get('model_sha256')!r:.80} of version {self.version}, this server " \
                     f"{self.model_sha()}"
            self.raise_alarm("model_disagreement", self.max_round, detail)
            raise ModelDisagreement(detail)
        if int(st["model_version"]) != self.version:
            raise Conflict(
                f"server 1 holds model version {st['model_version']} ({st.get('model_sha256')}), "
                f"server 0 holds {self.version} ({self.model_sha()})"
            )
        return max(self.max_round, int(st.get("max_round", -1))) + 1

    def open_round(self, participants: list[int] | None = None, n_p: int | None = None,
                   deadline_s: float | None = None, quorum: int | None = None,
                   min_users: int | None = None) -> dict[str, Any]:
        """Open the next round (and at server 1); its round document."""
        ids, n_p, deadline_s, quorum, min_users = round_terms(self.cfg, participants, n_p, deadline_s, quorum,
                                                              min_users)
        with self._open_lock:
            with self.lock:
                self._refuse_if_halted()
                if self.m_prime is None:
                    raise Conflict("m' is not known yet: run the count phase (Eq. 11) or set training.m_prime")
                if self.round is not None and self.round.state not in FINAL:
                    raise Conflict(f"round {self.round.round_id} is still {self.round.state}")
            r = self._reconcile()
            rc = self.protocol.round_config(r, self.cfg.num_items, self.width, self.dense_size, self.m_prime,
                                            self.cfg.ring_bits)
            rnd = Round(r, rc, self.version, ids, n_p, time.time() + deadline_s, quorum, min_users,
                        model_sha=self.model_sha())
            self._journal_open(rnd)
            faults.hit("open")
            doc = self._round_doc(rnd)
            doc["participants"] = None if ids is None else sorted(ids)
            doc["quorum"], doc["min_users"] = quorum, min_users
            try:
                self.peer.open_round(doc)
            except PEER_ERRORS as exc:
                self._end(rnd, ABORTED, f"server 1 did not open the round: {exc}", notify_peer=False)
                raise peer_failure("server 1 did not open the round", exc) from None
            with self.lock:
                self._begin(rnd)
                self._wake.notify_all()
            return self._round_doc(rnd) | {"participants": doc["participants"]}

    # ================================================================== retrieval and upload
    def retrieval_many(self, r: int, items: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """As :meth:`Node.retrieval_many`; with relay, server 1 must hold each device's roots
        first (checked before anything is evaluated), server 0's forwards go to server 1 as
        one batch, and server 1's masked answers complete the replies."""
        if not self.protocol.relay:
            return self._evaluate_retrievals(r, items)
        results: list[bytes | None | SecembError] = [None] * len(items)
        try:
            ready = self.peer.ready_many(r, [u for u, _ in items])
        except PeerRefused as exc:
            return [Conflict(f"server 1: {exc.detail}")] * len(items)
        except PeerUnreachable as exc:
            return [peer_failure("server 1 is unavailable", exc)] * len(items)
        go = []
        for i, ((user, _), ok) in enumerate(zip(items, ready, strict=True)):
            if ok:
                go.append(i)
            else:
                results[i] = Conflict(f"user {user} must send its retrieval request to server 1 first")
        if not go:
            return results
        sub = [items[i] for i in go]
        early: dict[int, Future[list[bytes | SecembError]]] = {}  # the one batch sent early, by index into items
        with ThreadPoolExecutor(1, thread_name_prefix="secemb-relay") as pool:

            def forward_early(admitted: list[int]) -> None:
                # a role that knows its forwards from the requests alone: server 1 evaluates
                # them while this server evaluates its own (a user this server then refuses
                # counts at server 1 as one that retrieved and went silent)
                fwds = self.role.relay_forwards([sub[j] for j in admitted])
                if fwds is None:
                    return
                ok = [(go[j], f) for j, f in zip(admitted, fwds, strict=True) if isinstance(f, bytes)]
                if ok:
                    batch = pool.submit(self.peer.relay_retrieval_many, r, [(items[i][0], f) for i, f in ok])
                    early.update((i, batch) for i, _ in ok)

            outs = self._evaluate_retrievals(r, sub, on_admitted=forward_early)
            answers = next(iter(early.values())).result() if early else []
            masked_of = dict(zip(early, answers, strict=True))
        # with relay, server 0's role answers each admitted request with the bytes to forward
        fwd = [(i, out) for i, out in zip(go, outs, strict=True) if isinstance(out, bytes)]
        for i, out in zip(go, outs, strict=True):
            results[i] = out
        late = [(i, out) for i, out in fwd if i not in masked_of]  # forwards known after the commit only
        if late:
            masked_of.update(zip([i for i, _ in late],
                                 self.peer.relay_retrieval_many(r, [(items[i][0], out) for i, out in late]),
                                 strict=True))
        if not fwd:
            return results
        masked = [masked_of[i] for i, _ in fwd]
        with self.lock:
            try:
                rnd = self._current(r)
            except SecembError as exc:
                for i, _ in fwd:
                    results[i] = exc
                return results
            for (i, _), ans in zip(fwd, masked, strict=True):
                if isinstance(ans, BaseException):
                    results[i] = peer_failure("server 1 did not answer the relayed retrieval (this user cannot "
                                              "take part in the round)", ans)
                    continue
                try:
                    results[i] = rnd.busy(self.role.complete_retrieval, items[i][0], ans)
                except SecembError as exc:
                    results[i] = exc
        return results

    def _forward_upload(self, r: int, user: int, fwd: bytes | None) -> None:
        if fwd is None:
            return
        try:
            self.peer.relay_upload(r, user, fwd)
        except PEER_ERRORS as exc:
            log.warning("round %d: forwarding user %d's upload failed: %s", r, user, exc)
            raise peer_failure("server 1 did not take the forwarded upload (it will not count)", exc) from None

    def dense_message(self, r: int) -> bytes:
        """The round's DENSE message."""
        with self.lock:
            return self._current(r).dense_msg

    # ================================================================== closing
    def close_round(self, r: int, reason: str = "closed by the operator") -> dict[str, Any]:
        """Close round ``r`` now (idempotent); its outcome (:meth:`round_status`)."""
        with self.lock:
            rnd = self.round
            if rnd is None or rnd.round_id != r:
                if r in self.outcomes:
                    return self.round_status(r, None)
                raise NotFound(f"round {r} is unknown to this server")
            wait = rnd.state in FINAL or rnd.closing
            if not wait:
                rnd.closing = True
                rnd.state = CLOSING
                rnd.reason = reason
                uploaded = set(rnd.uploaded)
        if wait:
            rnd.done.wait(timeout=self.cfg.peer_timeout_s * 4)
            return self.round_status(r, None)
        try:
            self._close(rnd, uploaded)
        except Exception as exc:  # noqa: BLE001 - whatever happens, the round ends
            log.exception("round %d: close failed", r)
            self._end(rnd, ABORTED, f"close failed: {type(exc).__name__}: {exc}")
        return self.round_status(r, None)

    def _close(self, rnd: Round, uploaded: set[int]) -> None:
        r = rnd.round_id
        faults.hit("close")
        try:
            theirs = self.peer.close(r)
        except PEER_ERRORS as exc:
            self._end(rnd, ABORTED, f"server 1 did not close the round: {exc}")
            return
        verified = self._verified(rnd, sorted(uploaded & set(theirs)))
        if verified is None:
            return
        include = verified
        if len(include) < rnd.min_users:
            self._end(rnd, ABORTED,
                      f"{len(include)} user(s) uploaded to both servers, fewer than min_users={rnd.min_users}")
            return
        # the round is closing: the role takes no more messages, so the shares, combine and the
        # optimizer step run without the lock (the latter on copies; the commit below takes it).
        # Both servers reconstruct: server 1 sends its share, this server sends its own, each
        # applies the step, and server 1 answers with its model's digest
        with self.lock:
            base, role, opt = self.version, self.role, self.opt
            table, dense = self.table.copy(), self.dense.copy()
        with ThreadPoolExecutor(1, thread_name_prefix="secemb-share") as pool:
            theirs_share = pool.submit(self.peer.share, r, include)
            try:
                mine = rnd.busy(self._own_share, rnd, include)
                share = theirs_share.result()
            except PEER_ERRORS as exc:
                self._end(rnd, ABORTED, f"server 1 did not send its aggregate share: {exc}")
                return
            except SecembError as exc:
                self._end(rnd, ABORTED, f"this server's aggregate share failed: {exc}")
                return
            their_digest = pool.submit(self.peer.agree, r, mine)
            try:
                table, dense, sha, opt = self._reconstruct(rnd, role, share, include, opt, table, dense)
            except SecembError as exc:
                self._end(rnd, ABORTED, f"combine failed: {exc}")
                return
            try:
                theirs_sha = their_digest.result()
            except PEER_ERRORS as exc:
                self._end(rnd, ABORTED, f"server 1 did not apply the round's update: {exc}")
                return
        if theirs_sha != sha:  # nothing is committed on either side
            self.raise_alarm("model_disagreement", r, f"server 1's model after round {r} has digest "
                                                      f"{theirs_sha!r:.80}, this server's {sha}: nothing committed")
            self._end(rnd, ABORTED, "the two servers' models differ (model_disagreement): nothing committed")
            return
        with self.lock:
            if self.round is not rnd or rnd.state != CLOSING or self.version != base:
                self._end(rnd, ABORTED, "the round changed while its aggregate was applied")
                return
            version = self.version + 1
            try:
                self.store.save(self._checkpoint(version, r, include, table, dense, sha, opt))  # the commit point
            except StorageError as exc:
                self._end(rnd, ABORTED, f"the checkpoint could not be written: {exc}")
                return
            faults.hit("commit")
            self.table, self.dense, self.sha, self.opt = table, dense, sha, opt
            self.version, self.last_round, self.last_included = version, r, include
            rnd.included = include
            self._sync_pending = True
            self._end(rnd, COMMITTED, rnd.reason, done=False)
        self._sync_peer()
        rnd.done.set()

    def _verified(self, rnd: Round, include: list[int]) -> list[int] | None:
        """``include`` without the devices whose uploads fail the servers' verification (issue
        34, :func:`secemb.server.verify.rejected`): both roles' digests of every upload are
        compared; a mismatch leaves the device out like a dropout, records it (the round's
        ``rejected``) and raises a ``device_rejected`` alarm.  ``None``: the round was aborted
        (server 1 did not answer).  Unchanged without verification (a role without digests)."""
        with self.lock:
            role = self.role
        mine = rnd.busy(role.upload_digests, include)
        if mine is None:
            return include
        try:
            theirs = self.peer.verify(rnd.round_id, include)
        except PEER_ERRORS as exc:
            self._end(rnd, ABORTED, f"server 1 did not verify the uploads: {exc}")
            return None
        bad = rejected(mine, theirs)
        if bad:
            with self.lock:
                for u in bad:
                    self.rejections[u] = self.rejections.get(u, 0) + 1
            rnd.rejected.update(bad)
            self.raise_alarm("device_rejected", rnd.round_id, f"user(s) {bad[:50]} failed the upload verification "
                                                              "(keys not point functions or not the same at both "
                                                              "servers): left out of the round")
        return [u for u in include if u not in bad]

    def _sync_peer(self) -> None:
        """Send server 1 the current model (after a commit, or when it missed it)."""
        with self.lock:
            msg = messages.encode_model(self.version, self.table, self.dense)
            r = self.last_round
        try:
            self.peer.sync_model(msg, r)
            ok = True
        except PEER_ERRORS as exc:
            log.warning("model sync to server 1 failed (will retry): %s", exc)
            ok = False
        with self.lock:
            self._sync_pending = not ok

    def _closer(self) -> None:
        """Close the round on quorum or deadline; retry a pending sync."""
        while not self._stopping:
            with self._wake:
                rnd = self.round
                timeout = 0.5
                if rnd is not None and rnd.state == OPEN:
                    timeout = max(0.0, min(timeout, rnd.deadline - time.time()))
                self._wake.wait(timeout=timeout)
                rnd = self.round
                due = (
                    rnd is not None and rnd.state == OPEN and not rnd.closing
                    and (len(rnd.finished) >= rnd.quorum or time.time() >= rnd.deadline)
                )
                sync = self._sync_pending
            if due:
                assert rnd is not None  # due implies it
                why = "quorum reached" if len(rnd.finished) >= rnd.quorum else "deadline passed"
                threading.Thread(target=self.close_round, args=(rnd.round_id, why), daemon=True).start()
            elif sync and (rnd is None or rnd.state in FINAL):
                self._sync_peer()
                if self._sync_pending:
                    time.sleep(0.5)


class FollowerNode(Node):
    """Server 1: mirrors the rounds server 0 opens, answers its peer calls (the server side of
    :class:`~secemb.server.peer.PeerLink`), sends its aggregate share, installs synced models."""

    party = 1

    def __init__(self, cfg: ServerConfig, *, store: StateStore | None = None, protocol: Protocol | None = None,
                 model: RecModel | None = None, _noise_rng: RandomBytes | None = None) -> None:
        super().__init__(cfg, store=store, protocol=protocol, model=model, _noise_rng=_noise_rng)
        #: the model this server computed and agreed on for a round (:meth:`peer_agree`), not yet
        #: committed; also the store's staged checkpoint, so that a restart keeps it
        self.staged: Checkpoint | None = None
        try:
            staged = self.store.load(staged=True)
        except CorruptState as exc:  # only a commit could need it: server 0's sync is then refused (409)
            log.error("the staged checkpoint is unreadable, dropped: %s", exc)
            staged = None
        if staged is not None and staged.version == self.version + 1 and staged.optimizer is not None:
            self.staged = staged
        else:
            self._drop_staged()  # none, or of a round that ended otherwise
        self._relay_batch = Batcher(by_round(self.peer_relay_retrieval_many))
        self._share_lock = threading.Lock()

    # ================================================================== count phase
    def peer_count_open(self, users: list[int] | None) -> dict[str, Any]:
        """(Re)start the count phase (server 0 started its own)."""
        self.count.open(None if users is None else frozenset(user_list(users, "users", self.cfg.num_users)))
        return {"state": "open"}

    def peer_count_close(self) -> list[int]:
        """Freeze the count phase; the users holding a share."""
        return self.count.freeze(from_states=("open", "closed"))

    def peer_count_share(self, include: list[int]) -> bytes:
        """The sum of the count shares of ``include`` (COUNT message), released once per
        closed phase (the same set may be asked for again).

        Raises
        ------
        Conflict: fewer than ``min_users`` users, or another set than the one released.
        """
        if len(set(include)) < self.cfg.min_users:
            raise Conflict(f"a count share of {len(set(include))} user(s) is refused: fewer than "
                           f"min_users={self.cfg.min_users}")
        return messages.encode_count(self.count.total(include, once=True), self.cfg.ring_bits, party=1)

    # ================================================================== rounds
    def peer_open(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Mirror the round server 0 opened, after checking that both agree."""
        try:
            rc = RoundConfig(**doc["config"])
            r = int(doc["round_id"])
            version = int(doc["model_version"])
            n_p = int(doc["n_p"])
            deadline = float(doc["deadline_unix"])
            quorum, min_users = int(doc["quorum"]), int(doc["min_users"])
            parts = doc.get("participants")
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise InvalidParameters(f"bad round document: {exc}") from None
        if doc.get("fingerprint") != self.fingerprint:
            raise Conflict("server 0 runs with a different protocol/model/training configuration")
        ids = None if parts is None else frozenset(user_list(parts, "participants", self.cfg.num_users))
        if ids is not None and len(ids) != n_p:
            raise InvalidParameters(f"round document: n_p={n_p} but {len(ids)} participants")
        check_floor(n_p, min_users, self.cfg.min_users, Conflict)
        expect = self.protocol.round_config(r, self.cfg.num_items, self.width, self.dense_size, rc.m_prime,
                                            self.cfg.ring_bits)
        if rc != expect or r != rc.round_id:
            raise Conflict(f"round configuration {rc} differs from this server's {expect}")
        with self.lock:
            self._refuse_if_halted()
            if r <= self.max_round:
                raise Conflict(f"round {r} is not newer than round {self.max_round}")
            if version != self.version:
                raise Conflict(f"server 0 is at model version {version}, this server at {self.version}")
            differ = doc.get("model_sha256") != self.model_sha()
            if not differ:
                if self.staged is not None:  # server 0 opens on this version: it did not commit the staged one
                    self._drop_staged()
                if self.round is not None and self.round.state not in FINAL:
                    self._end(self.round, ABORTED, f"superseded by round {r}")
                rnd = Round(r, rc, version, ids, n_p, deadline, quorum, min_users, model_sha=self.model_sha())
                self._journal_open(rnd)
                self._begin(rnd)
        if differ:
            detail = f"server 0 opens round {r} on model {str(doc.get('model_sha256'))[:80]!r} of version " \
                     f"{version}, this server holds {self.model_sha()}"
            self.raise_alarm("model_disagreement", r, detail)
            raise ModelDisagreement(detail)
        faults.hit("open")
        return {"round_id": r, "state": OPEN}

    def peer_ready(self, r: int, user: int) -> dict[str, bool]:
        """Relay: whether ``user`` sent its roots and awaits server 0's forward."""
        with self.lock:
            rnd = self._current(r)
            return {"ready": user in rnd.retrieved and user not in rnd.relayed}

    def peer_relay_retrieval(self, r: int, user: int, body: bytes) -> bytes:
        """Relay: answer server 0's forwarded keys (batched with concurrent forwards)."""
        return self._relay_batch((r, user, body))

    def peer_relay_retrieval_many(self, r: int, items: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        """Relay: server 0's forwarded keys ``(user, relay_keys)`` for round ``r``, evaluated as
        one batch outside the lock and committed under it; per item the masked answer or the
        error that refused it."""
        with self.lock:
            try:
                rnd = self._current(r)
            except SecembError as exc:
                return [exc] * len(items)
            role = self.role
        commit = rnd.busy(role.evaluate_relay_many, items)
        with self.lock:
            try:
                self._current(r)
                outs = rnd.busy(commit)
            except SecembError as exc:
                return [exc] * len(items)
            for (user, _), out in zip(items, outs, strict=True):
                if not isinstance(out, BaseException):
                    rnd.relayed.add(user)
        for (user, _), out in zip(items, outs, strict=True):
            if isinstance(out, RelayTampered):
                self._relay_tampered(rnd, user, "retrieval keys")
        return outs

    def _relay_tampered(self, rnd: Round, user: int, what: str) -> None:
        """Server 0 forwarded ``user``'s ``what`` altered: the user is left out of round ``rnd``
        as a dropout (it never counts as uploaded here, so no agreed set holds it), the round's
        outcome lists it under ``tampered``, and an alarm is raised."""
        with self.lock:
            rnd.tampered.add(user)
        self.raise_alarm("relay_tampered", rnd.round_id, f"server 0 forwarded user {user}'s {what} altered (they "
                                                         "fail the device's authentication): the user is left out")

    def peer_relay_upload(self, r: int, user: int, body: bytes) -> None:
        """Relay: absorb server 0's forwarded correction words for ``user`` (refused for a
        user whose relayed bytes failed authentication before: it is out of the round)."""
        with self.lock:
            rnd = self._current(r)
            if user in rnd.tampered:
                raise RelayTampered(f"round {r}: user {user} is out of the round (its relayed bytes were altered)")
            try:
                rnd.busy(self.role.relay_upload, user, body)
            except RelayTampered:
                tampered = True
            else:
                tampered = False
                rnd.uploaded.add(user)
            n = len(rnd.uploaded)
        if tampered:
            self._relay_tampered(rnd, user, "upload")
            raise RelayTampered(f"round {r}: user {user}'s forwarded upload fails authentication")
        faults.hit("upload", n)

    # ================================================================== closing
    def peer_close(self, r: int) -> dict[str, Any]:
        """Stop taking uploads for round ``r``; ``{"uploaded": users absorbed}``."""
        with self.lock:
            rnd = self._current(r, states=(OPEN, CLOSING))
            rnd.state = CLOSING
            out = {"uploaded": sorted(rnd.uploaded)}
        faults.hit("close")
        return out

    def peer_verify(self, r: int, include: list[int]) -> dict[str, Any]:
        """This server's digests of the uploads of ``include`` (issue 34; ``{"digests": {user:
        hex}}``, empty without verification), for server 0 to compare with its own.  For an
        honest device the two are equal, so server 0 learns nothing it could not compute.

        Raises
        ------
        Conflict: the round is not closing, or a user of ``include`` did not upload here.
        """
        include = sorted(set(include))
        with self.lock:
            rnd = self._current(r, states=(CLOSING,))
            extra = set(include) - rnd.uploaded
            if extra:
                raise Conflict(f"round {r}: user(s) {sorted(extra)[:5]} did not upload to this server")
            role = self.role
        return {"digests": encode_digests(rnd.busy(role.upload_digests, include) or {})}

    def peer_share(self, r: int, include: list[int]) -> bytes:
        """The aggregate share over exactly ``include`` (the same bytes if asked again for the
        same set).

        Raises
        ------
        Conflict: the round is not closing, a share for another set was given, or a user of
            ``include`` did not upload here.
        """
        include = sorted(set(include))
        if len(include) < self.cfg.min_users:
            raise Conflict(f"round {r}: an aggregate share of {len(include)} user(s) is refused: fewer than "
                           f"min_users={self.cfg.min_users}")
        with self._share_lock:
            with self.lock:
                rnd = self._current(r, states=(CLOSING,))
                if rnd.share_include is not None:
                    if rnd.share_include != include:
                        raise Conflict(f"round {r}: a share for another user set was already given")
                    assert rnd.share is not None  # set with share_include
                    return rnd.share
                extra = set(include) - rnd.uploaded
                if extra:
                    raise Conflict(f"round {r}: user(s) {sorted(extra)[:5]} did not upload to this server")
            # closing: the role takes no more messages, so the share is computed unlocked
            share = rnd.busy(self._own_share, rnd, include)
            with self.lock:
                self._current(r, states=(CLOSING,))
                rnd.share, rnd.share_include, rnd.included = share, include, include
        faults.hit("share")
        return share

    def peer_agree(self, r: int, body: bytes) -> dict[str, str]:
        """Server 0's aggregate share over the users of :meth:`peer_share`: reconstruct the
        round's update as server 0 does, apply the optimizer step to a copy of this server's
        model and keep it staged -- in memory and as the store's staged checkpoint, written
        before the digest leaves, so that a restart keeps it (:meth:`peer_model` installs it);
        ``{"model_sha256": its digest}``, which server 0 compares with its own before it
        commits.  Asked again, it recomputes (the same share gives the same digest).

        Raises
        ------
        Conflict: the round is not closing or this server has not sent its share yet.
        InvalidMessage, ProtocolError: ``body`` is not server 0's share over those users.
        StorageError: the staged checkpoint could not be written (nothing is staged).
        """
        with self._share_lock:
            with self.lock:
                rnd = self._current(r, states=(CLOSING,))
                include = rnd.share_include
                if include is None:
                    raise Conflict(f"round {r}: server 1 has not sent its share yet: nothing to agree on")
                role, opt = self.role, self.opt
                table, dense = self.table.copy(), self.dense.copy()
            table, dense, sha, opt = self._reconstruct(rnd, role, body, include, opt, table, dense)
            with self.lock:
                self._current(r, states=(CLOSING,))
                ck = self._checkpoint(self.version + 1, r, include, table, dense, sha, opt)
                self.store.save(ck, staged=True)
                self.staged = ck
        faults.hit("agree")
        return {"model_sha256": sha}

    def _drop_staged(self) -> None:
        """Forget the staged model (under the lock): its round ended without a commit here."""
        self.staged = None
        try:
            self.store.drop_staged()
        except OSError as exc:  # a stale staged checkpoint is ignored when loaded (its version is passed)
            log.error("the staged checkpoint was not removed: %s", exc)

    def peer_abort(self, r: int, reason: str) -> None:
        """Abort round ``r`` (a round this server never saw and newer than all it saw: 404)."""
        with self.lock:
            if self.staged is not None and self.staged.last_round == r:
                self._drop_staged()
            rnd = self.round
            if rnd is None or rnd.round_id != r:
                if r > self.max_round:
                    raise NotFound(f"round {r} is unknown to this server")
                return
        self._end(rnd, ABORTED, f"server 0: {reason}")

    def peer_model(self, body: bytes, r: int) -> dict[str, Any]:
        """Commit round ``r``: server 0 syncs the model it committed; this server installs the
        model it computed itself (:meth:`peer_agree`) if, and only if, server 0's has the same
        digest.  The current model again is an idempotent duplicate.

        Raises
        ------
        InvalidMessage: ``body`` is not a MODEL message of the next (or current) version.
        Conflict: this server computed no model for round ``r``, or another model of the
            current version is offered.
        ModelDisagreement: server 0's model differs from the one this server computed
            (an alarm; the deployment halts).
        """
        m, w, p = self.cfg.num_items, self.width, self.dense_size
        with self.lock:
            try:
                table, dense = messages.decode_model(body, version=self.version + 1, num_items=m, width=w,
                                                     dense_size=p)
            except InvalidMessage:
                try:
                    table, dense = messages.decode_model(body, version=self.version, num_items=m, width=w,
                                                         dense_size=p)
                except InvalidMessage:
                    pass
                else:
                    if model_sha256(table, dense) == self.model_sha():
                        return {"model_version": self.version, "duplicate": True}
                    raise Conflict(f"a different model for version {self.version} was already installed") from None
                raise
            sha = model_sha256(table, dense)
            ck = self.staged
            if ck is None or ck.last_round != r:
                raise Conflict(f"round {r}: this server computed no model for it, and it installs only a model it "
                               "computed itself")
            if sha == ck.model_sha256:
                self._commit_staged(ck)
                return {"model_version": ck.version, "duplicate": False}
            self._drop_staged()
            rnd = self.round
        detail = f"server 0 committed a model of digest {sha} for round {r}, this server computed {ck.model_sha256}"
        self.raise_alarm("model_disagreement", r, detail)
        if rnd is not None and rnd.round_id == r:
            self._end(rnd, ABORTED, "server 0's model differs from this server's (model_disagreement): not installed")
        raise ModelDisagreement(detail)

    def _commit_staged(self, ck: Checkpoint) -> None:
        """Install the staged model ``ck`` of round ``ck.last_round`` (under the lock): its
        checkpoint becomes this server's (the commit point), the round ends committed -- also
        when a restart ended it aborted in between (a later journal record wins)."""
        r, why = ck.last_round, "both servers' models agree"
        opt = self._new_optimizer()
        opt.load_state_dict(_optimizer_state(ck))
        self.store.save(ck)
        faults.hit("sync")
        self.table, self.dense, self.sha, self.opt, self.version = ck.table, ck.dense, ck.model_sha256, opt, ck.version
        self.last_round, self.last_included = r, ck.included
        self._drop_staged()
        rnd = self.round
        if rnd is not None and rnd.round_id == r and rnd.state not in FINAL:
            rnd.included = ck.included
            self._end(rnd, COMMITTED, why)
        elif (self.outcomes.get(r) or {}).get("state") != COMMITTED:
            self._journal_outcome({"ev": COMMITTED, "round": r, "version": ck.version, "included": ck.included,
                                   "reason": why})
            self.outcomes.remember(r, COMMITTED, ck.included, why)


def _optimizer_state(ck: Checkpoint) -> dict[str, Any]:
    """The optimizer state of checkpoint ``ck``.

    Raises
    ------
    CorruptState: it has none (a server 1 state directory written before both servers applied
        the update: start over).
    """
    if ck.optimizer is None:
        raise CorruptState(f"checkpoint of model version {ck.version} has no optimizer state (a server 1 state "
                           "directory written before both servers applied the update: start over)")
    return ck.optimizer


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
                                                  tls=cfg.peer_tls())
    return LeaderNode(cfg, peer=link, store=store, start_threads=start_threads, protocol=protocol, model=model,
                      _noise_rng=_noise_rng)
