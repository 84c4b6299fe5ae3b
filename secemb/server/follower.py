"""Server 1, the follower: :class:`FollowerNode`, the server side of
:class:`~secemb.server.peer.PeerLink`.

Party: server 1.  It mirrors the rounds server 0 opens once both agree (fingerprint, round
configuration, model version and digest, this server's user floor, with bounded payloads the
bound's ``users_per_round``); releases a count sum and
an aggregate share only over at least ``min_users`` users (its own floor; for a share, also the
round's, which both servers announce to its devices) and one user set per phase or round;
reports its digests of the uploads for the verification step; reconstructs the round's update
itself and keeps it staged (durably, before its digest leaves); installs a synced model only
if it is the one it computed (otherwise a halting ``model_disagreement`` alarm).  Its relay
endpoints: :mod:`.relay`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from secemb.digest import model_sha256
from secemb.errors import InvalidMessage, InvalidParameters, ModelDisagreement
from secemb.models.base import RecModel
from secemb.protocols.base import Protocol, RoundConfig
from secemb.randomness import RandomBytes
from secemb.round import messages
from secemb.server import faults
from secemb.server.admission import check_bound_users, check_floor, user_list
from secemb.server.config import ServerConfig
from secemb.server.errors import Conflict, NotFound
from secemb.server.persist import CorruptState
from secemb.server.relay import FollowerRelay
from secemb.server.rounds import ABORTED, CLOSING, COMMITTED, FINAL, OPEN, Batcher, Round, by_round
from secemb.server.state import optimizer_state
from secemb.server.store import Checkpoint, StateStore
from secemb.server.verify import encode_verification

__all__ = ["FollowerNode"]

log = logging.getLogger("secemb.server")


class FollowerNode(FollowerRelay):
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
        wait = self.cfg.batch_wait_ms / 1e3  # server 0's concurrent forwards share an evaluation (Batcher)
        self._relay_batch = Batcher(by_round(self.peer_relay_retrieval_many), wait_s=wait)
        self._relay_upload_batch = Batcher(by_round(self.peer_relay_upload_many), wait_s=wait)
        self._share_lock = threading.Lock()
        #: one bound check request at a time: the role's "each proof answered once" is a check
        #: and an update with the verifier computation between them (two concurrent requests
        #: under two query seeds would both be answered, and reveal the witness)
        self._bound_lock = threading.Lock()

    def peer_count_open(self, users: list[int] | None) -> dict[str, Any]:
        """(Re)start the count phase (server 0 started its own)."""
        self.count.open(None if users is None else frozenset(user_list(users, "users", self.cfg.num_users)))
        return {"state": "open"}

    def peer_count_users(self) -> list[int]:
        """While the count phase is open: the sorted users holding a share here (server 0's
        :meth:`~secemb.server.node.LeaderNode.count_progress`; its close gives the same set).

        Raises
        ------
        Conflict: the phase is not open.
        """
        return self.count.holders()[0]

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

    def peer_open(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Mirror the round server 0 opened, after checking that both agree.

        Raises
        ------
        InvalidParameters: a malformed document, or, with bounded payloads, a round of more
            users than the bound's ``users_per_round`` (as server 0 refuses to open it).
        Conflict: another configuration, model version or round id, or a round below this
            server's floor.
        ModelDisagreement: server 0 opens on another model of the same version (an alarm).

        A refusal changes nothing and journals nothing, except the alarm of a model disagreement.
        """
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
        check_bound_users(n_p, None if self.prover is None else self.prover.bound_users)  # as server 0 does
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

    def peer_uploaded(self, r: int) -> list[int]:
        """While round ``r`` is open: the sorted users whose upload this server absorbed, for server
        0's quorum check (finding S42-Q2: it closes on quorum only when this server holds the
        uploads of ``quorum`` of the users it counts); the set :meth:`peer_close` gives it anyway.

        Raises
        ------
        Conflict: ``r`` is not the current round, or it is not open here.
        """
        with self.lock:
            return sorted(self._current(r).uploaded)

    def peer_close(self, r: int) -> dict[str, Any]:
        """Stop taking uploads for round ``r``; ``{"uploaded": users absorbed}``."""
        with self.lock:
            rnd = self._current(r, states=(OPEN, CLOSING))
            rnd.state = CLOSING
            out = {"uploaded": sorted(rnd.uploaded)}
        faults.hit("close")
        return out

    def peer_verify(self, r: int, include: list[int]) -> dict[str, Any]:
        """This server's digests of the uploads of ``include`` and its verifier messages of
        their sketch check (issue 34; ``{"digests": {user: hex}, "sketch": hex}``,
        :func:`~secemb.server.verify.encode_verification`; empty without verification), for
        server 0 to compare with its own digests and to decide the sketch proofs
        (:meth:`~secemb.protocols.base.ServerRole.verify_answer`).  For an honest device the
        digests are equal and the verifier messages are those of a true statement, so server 0
        learns nothing it could not compute.  Asked again, it answers the same.

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
        digests = rnd.busy(role.upload_digests, include) or {}
        return encode_verification(digests, rnd.busy(role.verify_answer, include))

    def peer_bound(self, r: int, body: bytes) -> bytes:
        """Bounded payloads: this server's verifier messages for server 0's check request
        (:meth:`~secemb.protocols.secemb.SecEmbServer.bound_answer`; a ``bound_answer``
        message), while round ``r`` closes.  Each device's proof is answered once.

        Raises
        ------
        NotFound, Conflict: round ``r`` is not closing here.
        ProtocolError: the rounds have no bound proofs, a user of the request did not upload
            here or was checked before.
        InvalidMessage: a malformed request.
        """
        with self.lock:
            rnd = self._current(r, states=(CLOSING,))
            prover = self._proving()
        with self._bound_lock:
            return rnd.busy(prover.bound_answer, body)

    def peer_share(self, r: int, include: list[int]) -> bytes:
        """The aggregate share over exactly ``include`` (the same bytes if asked again for the
        same set).

        Raises
        ------
        Conflict: the round is not closing, ``include`` has fewer users than this server's floor
            or the round's ``min_users`` (the one both servers announced to its devices, which
            took part on that promise: finding F1, session 21), a share for another set was
            given, or a user of ``include`` did not upload here.
        """
        include = sorted(set(include))
        with self._share_lock:
            with self.lock:
                rnd = self._current(r, states=(CLOSING,))
                floor = max(self.cfg.min_users, rnd.min_users)
                if len(include) < floor:
                    raise Conflict(f"round {r}: an aggregate share of {len(include)} user(s) is refused: fewer than "
                                   f"min_users={floor}")
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
        """Forget the staged model (under the lock): its round ended without a commit here.  The
        store's :meth:`~secemb.server.store.StateStore.drop_staged` never raises (a refused removal
        is logged there: a stale staged checkpoint is ignored when loaded)."""
        self.staged = None
        self.store.drop_staged()

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
        with self.lock:
            synced = self._synced_model(body)
            if synced is None:
                return {"model_version": self.version, "duplicate": True}
            sha = model_sha256(*synced)
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

    def _synced_model(self, body: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """The model of server 0's sync ``body`` (under the lock): ``(table, dense)`` of the next
        version, or ``None`` if ``body`` is the current model again (an idempotent duplicate).

        Raises
        ------
        InvalidMessage: ``body`` is a MODEL message of neither version (the next version's error).
        Conflict: ``body`` is another model of the current version.
        """
        try:
            return self._decode_model(body, self.version + 1)
        except InvalidMessage:
            if not self._is_current_model(body):
                raise
            return None

    def _is_current_model(self, body: bytes) -> bool:
        """Whether ``body`` is the MODEL message of the current model (under the lock); ``False``
        if it is no MODEL message of the current version.

        Raises
        ------
        Conflict: it is another model of the current version.
        """
        try:
            table, dense = self._decode_model(body, self.version)
        except InvalidMessage:
            return False
        if model_sha256(table, dense) != self.model_sha():
            raise Conflict(f"a different model for version {self.version} was already installed") from None
        return True

    def _decode_model(self, body: bytes, version: int) -> tuple[np.ndarray, np.ndarray]:
        """``body`` as the MODEL message of ``version`` of this deployment's model shape (read-only
        views into ``body``: the follower only hashes a synced model, it installs its own)."""
        return messages.decode_model(body, version=version, num_items=self.cfg.num_items, width=self.width,
                                     dense_size=self.dense_size, copy=False)

    def _commit_staged(self, ck: Checkpoint) -> None:
        """Install the staged model ``ck`` of round ``ck.last_round`` (under the lock): its
        checkpoint becomes this server's (the commit point), the round ends committed -- also
        when a restart ended it aborted in between (a later journal record wins)."""
        r, why = ck.last_round, "both servers' models agree"
        opt = self._new_optimizer()
        opt.load_state_dict(optimizer_state(ck), copy=False)  # ck's arrays, like its table and dense
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
