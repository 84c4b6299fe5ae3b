"""Server 0 closing a round: the agreed set, the verification step, the combine, the commit.

Party: server 0.  :meth:`LeaderClose.close_round` (on quorum, deadline or the operator's
call; idempotent): server 1 stops taking uploads and names the users it absorbed -- a server 1
whose users omit one it acknowledged (with relay, a forwarded upload it took; without, an upload it
receipted; a user it named in
the quorum check that closed the round) is caught: a halting ``uploads_misreported`` alarm, the
round aborted.  The agreed set is the intersection with server 0's, less the devices whose
uploads fail the verification (issue 34: with bounded payloads, first the bound proofs' check --
a device whose proof fails is out --, then both roles' digests compared, :mod:`.verify`, a
mismatch out, and server 1's verifier messages of the sketch check decided by server 0's role, a
failing device out; a ``device_rejected`` alarm for any; a device without a proof is then left
out like a dropout); fewer than ``min_users`` aborts.  Both servers then exchange their
aggregate shares and reconstruct (:mod:`.combine`); server 0 commits (its checkpoint: the commit
point) only when server 1's model digest equals its own -- otherwise a halting
``model_disagreement`` alarm and nothing committed on either side -- and then syncs server 1
(retried while pending).  Whatever fails, the round ends, aborted.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from secemb.errors import SecembError
from secemb.round import messages
from secemb.server import faults
from secemb.server.errors import NotFound
from secemb.server.peer import PEER_ERRORS
from secemb.server.persist import StorageError
from secemb.server.relay import LeaderRelay
from secemb.server.rounds import ABORTED, CLOSING, COMMITTED, FINAL, Round
from secemb.server.verify import rejected

__all__ = ["LeaderClose"]

log = logging.getLogger("secemb.server")


class LeaderClose(LeaderRelay):
    """Server 0 closing a round: the agreed user set, the verification step, both servers'
    reconstruction, the digest comparison, the commit and the model sync to server 1."""

    #: a committed model server 1 has not acknowledged yet (set by the node, retried)
    _sync_pending: bool

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
        if self._misreported(rnd, theirs):
            return
        bounded = self._bounded(rnd, sorted(uploaded & set(theirs)))
        if bounded is None:
            return
        checked, silent = bounded
        verified = self._verified(rnd, checked)
        if verified is None:
            return
        include = [u for u in verified if u not in silent]
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

    def _misreported(self, rnd: Round, theirs: list[int]) -> bool:
        """Whether server 1's absorbed users at the close (``theirs``) omit one it acknowledged:
        with relay, one whose forwarded upload it took, without relay, one whose upload this server took
        with server 1's receipt of it (:attr:`~secemb.server.rounds.Round.acknowledged`), or one this
        server counts that it named in the quorum check that closed ``rnd``
        (:attr:`~secemb.server.rounds.Round.quorum_named`).  If so, a halting ``uploads_misreported``
        alarm naming them and the round aborted, nothing committed.  An honest server 1 never
        un-absorbs an upload within a round (a restart ends its round there, and its close then
        fails), so the omission is its deviation: leaving an honest device out of the round unseen
        (finding S43-R2), or having closed the round early on users it did not hold (its quorum
        answer)."""
        with self.lock:
            named = rnd.quorum_named or frozenset()
            acknowledged = set(rnd.acknowledged)
        listed = set(theirs)
        dropped, claimed = sorted(acknowledged - listed), sorted(named - listed - acknowledged)
        if not dropped and not claimed:
            return False
        took = "took the forwarded upload(s)" if self.receipts is None else "receipted the upload(s)"
        what = [f"{took} of user(s) {dropped[:50]}"] if dropped else []
        if claimed:
            what.append(f"named user(s) {claimed[:50]} as uploaded in the quorum check that closed the round")
        self.raise_alarm("uploads_misreported", rnd.round_id,
                         f"server 1 {' and '.join(what)}, and does not hold their uploads at the close")
        self._end(rnd, ABORTED, "server 1 misreported the uploads it holds (uploads_misreported)")
        return True

    def _verified(self, rnd: Round, include: list[int]) -> list[int] | None:
        """``include`` without the devices whose uploads fail the servers' verification (issue
        34): both roles' digests of every upload are compared (:func:`secemb.server.verify.rejected`)
        and server 1's verifier messages of the sketch check decided
        (:meth:`~secemb.protocols.base.ServerRole.verify_rejected`: a device whose keys are not
        point functions, whose proof is missing or which answered a challenge it was not
        given); either failure leaves the device out like a dropout, records it (the round's
        ``rejected``) and raises one ``device_rejected`` alarm.  ``None``: the round was aborted
        (server 1 did not answer, or its sketch answer is malformed).  Unchanged without
        verification (a role without digests)."""
        with self.lock:
            role = self.role
        mine = rnd.busy(role.upload_digests, include)
        if mine is None:
            return include
        try:
            theirs, answer = self.peer.verify(rnd.round_id, include)
            failed = rnd.busy(role.verify_rejected, include, answer)
        except PEER_ERRORS as exc:
            self._end(rnd, ABORTED, f"server 1 did not verify the uploads: {exc}")
            return None
        except SecembError as exc:
            self._end(rnd, ABORTED, f"the sketch check of the uploads failed: {exc}")
            return None
        bad = sorted(set(rejected(mine, theirs)) | (failed & set(include)))
        self._reject(rnd, bad, "failed the upload verification (keys not point functions or not the same at both "
                               "servers)")
        return [u for u in include if u not in bad]

    def _bounded(self, rnd: Round, include: list[int]) -> tuple[list[int], set[int]] | None:
        """The bound proofs' check over ``include`` (bounded payloads,
        :mod:`secemb.protocols.secemb.bounds`): server 0's request
        (:meth:`~secemb.protocols.secemb.SecEmbServer.bound_request`), server 1's verifier
        messages (:meth:`~secemb.server.peer.PeerLink.bound`), server 0's decision.  Returns
        ``include`` without the devices whose proofs fail -- left out like a dropout and recorded
        as for a digest mismatch (:meth:`_reject`) -- and the devices that sent no proof (one may
        still be on its way when the round closes): the caller leaves those out like a dropout,
        with no rejection counted, after the digest comparison, which they go through like the
        others (keys that fail it are rejected whether or not the device proved).  It runs before
        the digest comparison (the plan's ``prove`` hops precede the closing ones:
        :data:`~secemb.protocols.stages.PROVING`).  ``None``: the round was aborted (server 1 did
        not answer, or its answer is malformed).  ``(include, set())`` where the rounds have no
        bound proofs."""
        with self.lock:
            prover = self.prover
        if prover is None:
            return include, set()
        try:
            silent = rnd.busy(prover.unproved, include)
            request = rnd.busy(prover.bound_request, include)
            answer = self.peer.bound(rnd.round_id, request)
            bad = sorted(rnd.busy(prover.bound_rejected, answer) - silent)
        except PEER_ERRORS as exc:
            self._end(rnd, ABORTED, f"server 1 did not check the bound proofs: {exc}")
            return None
        except SecembError as exc:
            self._end(rnd, ABORTED, f"the bound proofs' check failed: {exc}")
            return None
        self._reject(rnd, bad, "sent a bound proof that fails the check (an upload beyond the payload bound)")
        return [u for u in include if u not in bad], silent

    def _reject(self, rnd: Round, bad: list[int], why: str) -> None:
        """Devices ``bad`` (sorted) are left out of round ``rnd`` because they ``why``: each one's
        rejection counted (:data:`~secemb.server.verify.MAX_REJECTIONS` refuse it at the door),
        recorded in the round's ``rejected`` and a ``device_rejected`` alarm raised.  The
        rejection is journaled at once (``{"ev": "rejected"}``): a restart later in the same
        close keeps it counted (:meth:`~secemb.server.state.NodeState._recover`)."""
        if not bad:
            return
        with self.lock:
            self._journal_outcome({"ev": "rejected", "round": rnd.round_id, "users": bad})
            for u in bad:
                self.rejections[u] = self.rejections.get(u, 0) + 1
        rnd.rejected.update(bad)
        self.raise_alarm("device_rejected", rnd.round_id, f"user(s) {bad[:50]} {why}: left out of the round")

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
