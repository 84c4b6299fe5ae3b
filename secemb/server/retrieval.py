"""A round's device messages at either server: retrieval requests, admitted
(:func:`~secemb.server.admission.admit`), evaluated as one batch outside the node's lock and
committed under it if the round is still the one they were evaluated for; uploads, absorbed
by the role at once (they count for the quorum when their handling is done).

Party: both servers (server 0 with relay overrides the retrieval and forwards uploads:
:mod:`.relay`).  A refused request changes no state: per item the reply (``None``: nothing to
send back) or the error that refused it.
"""

from __future__ import annotations

from collections.abc import Callable

from secemb.errors import SecembError
from secemb.server import faults
from secemb.server.admission import admit, check_participant
from secemb.server.rounds import Batcher
from secemb.server.state import NodeState

__all__ = ["Retrieval"]


class Retrieval(NodeState):
    """A node's device messages of a round: retrieval requests, admitted and evaluated in
    batches, and uploads."""

    #: groups concurrent :meth:`retrieval` calls into :meth:`retrieval_many` (set by the node)
    _retrieve_batch: Batcher

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

    def upload(self, r: int, user: int, body: bytes) -> None:
        """A device's upload: absorbed at once (and, with relay, forwarded to server 1)."""
        with self.lock:
            rnd = self._current(r)
            check_participant(rnd, user)
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
