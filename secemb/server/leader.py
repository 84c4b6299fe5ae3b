"""Server 0, the leader: :class:`LeaderNode`.

Party: server 0.  It opens rounds on the terms :func:`~secemb.server.admission.round_terms`
checks, after reconciling with server 1 (the same configuration fingerprint, model version and
digest: a missed sync is sent again, a differing digest is a halting ``model_disagreement``),
and mirrors them at server 1 through its :class:`~secemb.server.peer.PeerLink`; a background
thread closes them at the deadline or on quorum -- ``quorum`` users whose uploads both servers
hold, server 1 asked once this server counts that many (finding S42-Q2) -- (closing itself:
:mod:`.close`) and retries a pending model sync.  It runs the Eq. 11 count phase with server 1
and serves the round's DENSE message.  An abort is sent to server 1 too (best effort).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from secemb.errors import InvalidMessage, ModelDisagreement
from secemb.models.base import RecModel
from secemb.protocols.base import Protocol
from secemb.randomness import RandomBytes
from secemb.round import messages
from secemb.server import faults
from secemb.server.admission import check_bound_users, round_terms, user_list
from secemb.server.close import LeaderClose
from secemb.server.config import ServerConfig
from secemb.server.errors import Conflict, PeerUnavailable, peer_failure
from secemb.server.peer import PEER_ERRORS, PeerLink
from secemb.server.persist import StorageError
from secemb.server.rounds import ABORTED, FINAL, OPEN, Round
from secemb.server.store import StateStore
from secemb.sharing import reconstruct

__all__ = ["LeaderNode"]

log = logging.getLogger("secemb.server")

#: seconds before server 0 asks server 1 for its uploads again while its own count stands at or
#: above the quorum and server 1 holds too few of them (a count that grows asks at once)
_RECHECK_S = 0.5


class LeaderNode(LeaderClose):
    """Server 0: opens and closes rounds, reconstructs the aggregate and applies the optimizer
    (as server 1 does), commits when both models agree, syncs server 1 through ``peer``.

    Parameters
    ----------
    cfg, store: as :class:`~secemb.server.shared.Node`.
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

    def count_progress(self) -> dict[str, Any]:
        """While the count phase is open, how far it is: ``{"state": "open", "expected": the
        number of users it was opened for (``None``: any), "server0", "server1": how many users
        sent their count share to each server, "both": how many to both}`` -- what the close
        would include now.  Server 1 reports its users (:meth:`~secemb.server.peer.PeerLink.
        count_users`), the set its close gives server 0 anyway; a server 1 that misreports
        them only makes the operator close early or late.

        Raises
        ------
        Conflict: the phase is not open here or at server 1.
        PeerUnavailable: server 1 did not answer.
        """
        mine, expected = self.count.holders()
        try:
            theirs = set(self.peer.count_users())
        except PEER_ERRORS as exc:
            raise peer_failure("server 1 did not report its count phase", exc) from None
        return {"state": "open", "expected": None if expected is None else len(expected), "server0": len(mine),
                "server1": len(theirs), "both": len(theirs.intersection(mine))}

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
        """Open the next round (and at server 1); its round document.

        Raises
        ------
        InvalidParameters: terms out of range (:func:`~secemb.server.admission.round_terms`), or,
            with bounded payloads, more users than the bound's ``users_per_round``.
        Conflict: the deployment is halted, m' is not known, or a round is still open.
        """
        ids, n_p, deadline_s, quorum, min_users = round_terms(self.cfg, participants, n_p, deadline_s, quorum,
                                                              min_users)
        check_bound_users(n_p, None if self.prover is None else self.prover.bound_users)
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

    def dense_message(self, r: int) -> bytes:
        """The round's DENSE message."""
        with self.lock:
            return self._current(r).dense_msg

    def _closer(self) -> None:
        """Close the round at its deadline, or on quorum: once this server counts ``quorum`` users
        (:meth:`~secemb.server.rounds.Round.counted`), a check of how many of them server 1 holds
        too runs on its own thread (:meth:`_close_on_quorum`), so that a slow server 1 never holds
        the deadline back.  Retry a pending sync."""
        while not self._stopping:
            with self._wake:
                rnd = self.round
                timeout = 0.5
                if rnd is not None and rnd.state == OPEN:
                    timeout = max(0.0, min(timeout, rnd.deadline - time.time()))
                self._wake.wait(timeout=timeout)
                rnd = self.round
                late, counted = False, None
                if rnd is not None and rnd.state == OPEN and not rnd.closing:
                    late = time.time() >= rnd.deadline
                    counted = None if late else self._quorum_check(rnd)
                sync = self._sync_pending
            if rnd is not None and late:
                threading.Thread(target=self.close_round, args=(rnd.round_id, "deadline passed"), daemon=True).start()
            elif rnd is not None and counted is not None:
                threading.Thread(target=self._close_on_quorum, args=(rnd, counted), daemon=True,
                                 name="secemb-quorum").start()
            elif sync and (rnd is None or rnd.state in FINAL):
                self._sync_peer()
                if self._sync_pending:
                    time.sleep(0.5)

    def _quorum_check(self, rnd: Round) -> set[int] | None:
        """Under the lock, for the open round ``rnd``: the users this server counts if they reach the
        quorum and server 1 is to be asked now, else ``None``.  Asked once per check: when the count
        reached the quorum or grew since the last check, or :data:`_RECHECK_S` after a check that
        fell short (server 1 may take an upload after server 0, out of the plan's order), never while
        one is in flight -- so at most one peer call per count and per :data:`_RECHECK_S`, whatever
        the devices send."""
        counted = rnd.counted()
        if len(counted) < rnd.quorum or rnd.quorum_asking:
            return None
        now = time.monotonic()
        if rnd.quorum_asked is not None and rnd.quorum_asked[0] == len(counted) \
                and now - rnd.quorum_asked[1] < _RECHECK_S:
            return None
        rnd.quorum_asked, rnd.quorum_asking = (len(counted), now), True
        return counted

    def _close_on_quorum(self, rnd: Round, counted: set[int]) -> None:
        """Close ``rnd`` on quorum if server 1 holds the uploads of at least ``rnd.quorum`` of the
        users this server counts (``counted``) -- the users the close's agreed set can hold (finding
        S42-Q2: a device that uploads to server 0 alone, and proves there, was counted, so ``quorum``
        such devices closed the round before the honest ones were in).  Server 1 names the users it
        absorbed (:meth:`~secemb.server.peer.PeerLink.uploaded`); if it does not answer, the round
        is left to the next check or its deadline.  Such a device is not struck: it is a dropout,
        like an honest device that died between its two uploads.  A server 1 that names users whose
        uploads it does not hold, to close the round before the honest devices' uploads are in, is
        caught at the close (:meth:`~secemb.server.close.LeaderClose._misreported`)."""
        held = 0
        try:
            named = counted.intersection(self.peer.uploaded(rnd.round_id))
            held = len(named)
            if held >= rnd.quorum:  # what the close holds server 1 to (close.py, _misreported)
                with self.lock:
                    rnd.quorum_named = frozenset(named)
        except PEER_ERRORS as exc:
            log.info("round %d: server 1 did not report its uploads for the quorum check: %s", rnd.round_id, exc)
        finally:
            if held < rnd.quorum:  # a check that closes leaves the flag set: no further check asks in the meantime
                with self._wake:
                    rnd.quorum_asking = False
                    self._wake.notify_all()
        if held >= rnd.quorum:
            self.close_round(rnd.round_id, "quorum reached")
