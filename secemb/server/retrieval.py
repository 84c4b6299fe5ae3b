"""A round's device messages at either server: retrieval requests, admitted
(:func:`~secemb.server.admission.admit`), evaluated as one batch outside the node's lock and
committed under it if the round is still the one they were evaluated for; uploads, absorbed
by the role as one batch under the lock (those that arrived together: concurrent requests
through a batcher, a simulation's round at once) -- they count for the quorum when their
handling is done; with bounded payloads (server 0), the challenges and the devices' bound
proofs, batched the same way -- then a device counts once its proof is kept too.

Party: both servers (server 0 with relay overrides the retrieval and forwards uploads, as one
batch: :mod:`.relay`).  A refused request changes no state: per item the reply (``None``:
nothing to send back) or the error that refused it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import cast

from secemb.errors import SecembError
from secemb.round import messages
from secemb.server import faults
from secemb.server.admission import admit, check_participant
from secemb.server.persist import StorageError
from secemb.server.rounds import Batcher
from secemb.server.state import NodeState

__all__ = ["Retrieval"]


class Retrieval(NodeState):
    """A node's device messages of a round: retrieval requests, admitted and evaluated in
    batches, and uploads."""

    #: groups concurrent :meth:`retrieval` calls into :meth:`retrieval_many` (set by the node)
    _retrieve_batch: Batcher
    #: groups concurrent :meth:`upload` calls into :meth:`upload_many` (set by the node)
    _upload_batch: Batcher
    #: groups concurrent :meth:`proof` calls into :meth:`proof_many` (set by the node)
    _proof_batch: Batcher

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

    def upload(self, r: int, user: int, body: bytes) -> bytes | None:
        """A device's upload: absorbed at once (and, with relay, forwarded to server 1), batched
        with concurrent uploads (:meth:`upload_many`); its refusal raised, else its answer
        (:meth:`upload_answer`)."""
        self._upload_batch((r, user, body))
        return self.upload_answer(r, user)

    def upload_answer(self, r: int, user: int) -> bytes | None:
        """What ``user``'s accepted upload of round ``r`` is answered with: where devices upload
        to both servers (no relay), server 1's RECEIPT (:func:`~secemb.round.messages.encode_receipt`),
        which the device appends to its upload to server 0; else nothing."""
        if self.party == 1 and self.receipts is not None:
            return messages.encode_receipt(self.receipts, r, user)
        return None

    def upload_many(self, r: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """Many devices' uploads ``(user, body)`` of round ``r`` that arrived together, absorbed
        by the role as one batch under the lock (:meth:`~secemb.protocols.base.ServerRole.handle_upload_many`)
        and, with relay, forwarded to server 1 as one batch after it; per item ``None`` (it
        counts as uploaded) or the error that refused it -- a refused item changes no state
        (a user that is not a participant, a malformed or duplicated upload; a round that is
        not open refuses them all).  Where devices upload to both servers (no relay), server 0
        takes an upload only with server 1's receipt of it appended (:func:`~secemb.round.messages.check_receipt`;
        else ``InvalidMessage``, nothing kept) and records the user as acknowledged by server 1
        (:attr:`~secemb.server.rounds.Round.acknowledged`).  A forward that server 1 refused leaves its item's upload
        absorbed here but not at server 1 (the close leaves the user out), as for one upload,
        and not counted for the round's quorum; nor is any forward of a batch whose forwarding
        raised (its outcome is unknown).  A forward server 1 took is recorded
        (:attr:`~secemb.server.rounds.Round.acknowledged`): its close must name the user.

        Raises
        ------
        StorageError: the role could not keep the batch's shares (its ``OSError``: no upload of
            it counts).
        """
        results: list[SecembError | None] = [None] * len(items)
        with self.lock:
            try:
                rnd = self._current(r)
            except SecembError as exc:
                return [exc] * len(items)
            todo: list[int] = []
            receipted = self.party == 0 and self.receipts is not None
            items = list(items)  # with receipts, each body without its receipt (the caller's list unchanged)
            for i, (user, body) in enumerate(items):
                try:
                    check_participant(rnd, user)
                    if receipted:
                        message, receipt = messages.split_receipt(body)
                        messages.check_receipt(cast("bytes", self.receipts), receipt, round_id=r, user=user)
                        items[i] = (user, message)
                    todo.append(i)
                except SecembError as exc:
                    results[i] = exc
            try:
                outs = rnd.busy(self.role.handle_upload_many, [items[i] for i in todo]) if todo else []
            except OSError as exc:  # the role kept nothing of the batch (its spill of the shares failed)
                reason = errno.errorcode.get(exc.errno or 0, type(exc).__name__)  # not the file's path: devices read it
                raise StorageError(f"could not keep the uploads' shares: {reason} ({exc.strerror})") from None
            taken: list[tuple[int, bytes | None]] = []
            for i, out in zip(todo, outs, strict=True):
                if isinstance(out, SecembError):
                    results[i] = out
                else:
                    taken.append((i, out))
                    rnd.uploaded.add(items[i][0])
            before, n = len(rnd.uploaded) - len(taken), len(rnd.uploaded)
        fwd = [(i, out) for i, out in taken if out is not None]
        forwarded = not fwd  # whether each forward's outcome is known
        try:
            refused = self._forward_uploads(r, [(items[i][0], out) for i, out in fwd]) if fwd else []
            for (i, _), err in zip(fwd, refused, strict=True):
                results[i] = err
            forwarded = True
        finally:
            with self._wake:  # a forward server 1 refused, or one whose fate is unknown, cannot count for the quorum
                rnd.finished.update(items[i][0] for i, out in taken
                                    if results[i] is None and (out is None or forwarded))
                if forwarded:  # server 1 took these: its close must name them (close.py, _misreported)
                    rnd.acknowledged.update(items[i][0] for i, _ in fwd if results[i] is None)
                if receipted:  # server 1 receipted these: likewise
                    rnd.acknowledged.update(items[i][0] for i, _ in taken if results[i] is None)
                self._wake.notify_all()
        for count in range(before + 1, n + 1):
            faults.hit("upload", count)
        return results

    def challenge(self, r: int, user: int) -> bytes:
        """Server 0, bounded payloads: the 16-byte challenge of ``user``'s upload in round ``r``
        (:meth:`~secemb.protocols.secemb.SecEmbServer.challenge`), what the device proves its
        bound for.

        Raises
        ------
        NotFound, Conflict: round ``r`` is not the open round.
        ProtocolError: the rounds have no bound proofs, this is server 1, or ``user`` did not
            upload to this server in round ``r``.
        """
        with self.lock:
            rnd = self._current(r)
            return rnd.busy(self._proving().challenge, user)

    def proof(self, r: int, user: int, body: bytes) -> None:
        """A device's bound proof, batched with concurrent ones (:meth:`proof_many`); its
        refusal raised."""
        self._proof_batch((r, user, body))

    def proof_many(self, r: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """Server 0, bounded payloads: devices' bound proofs ``(user, body)`` of round ``r``, kept
        by the role as one batch under the lock
        (:meth:`~secemb.protocols.secemb.SecEmbServer.handle_proof_many`) until the close checks
        them; per item ``None`` (the device then counts for the quorum) or the error that refused
        it and kept nothing (a malformed proof, a user that did not upload, a second proof; a
        round that is not open, or rounds without bound proofs, refuse them all)."""
        with self.lock:
            try:
                rnd = self._current(r)
                outs = rnd.busy(self._proving().handle_proof_many, items)
            except SecembError as exc:
                return [exc] * len(items)
            if rnd.proved is not None:
                rnd.proved.update(user for (user, _), out in zip(items, outs, strict=True) if out is None)
            self._wake.notify_all()
        return outs

    def _forward_uploads(self, r: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """Hand on what the role returned for uploads ``(user, forward)``; per item ``None`` or
        the error that refused its forward.  Here (server 1): nothing to hand on; server 0
        sends forwards to server 1 (:class:`~secemb.server.relay.LeaderRelay`)."""
        return [None] * len(items)
