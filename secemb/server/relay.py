"""Relay orchestration (a protocol with ``relay``): a device's retrieval keys and uploads for
server 1 reach it through server 0, authenticated by the device so that server 1 catches an
alteration (issue 33, item 1).

Party: server 0, :class:`LeaderRelay` -- server 1 must hold each device's roots before
anything is evaluated; the keys go to server 1 as one batch (early, while server 0 evaluates
its own, when its role knows them from the requests alone) and server 1's masked answers
complete the replies; uploads are forwarded.  Without relay it evaluates as
:class:`~secemb.server.retrieval.Retrieval` does.  Server 1, :class:`FollowerRelay` -- it
answers the forwards in batches; a forward that fails the device's authentication leaves its
user out of the round as a dropout (the outcome's ``tampered``) and raises a non-halting
``relay_tampered`` alarm, and any later forward of that user's (retrieval keys or upload) is
refused (:class:`~secemb.errors.RelayTampered`).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from secemb.errors import InvalidMessage, ProtocolError, RelayTampered, SecembError
from secemb.protocols.base import RelayRole
from secemb.server import faults
from secemb.server.errors import Conflict, peer_failure
from secemb.server.peer import PeerLink, PeerRefused, PeerUnreachable
from secemb.server.rounds import Batcher, Round
from secemb.server.shared import Node

__all__ = ["FollowerRelay", "LeaderRelay"]

log = logging.getLogger("secemb.server")


class LeaderRelay(Node):
    """Server 0's side of the relay: it forwards devices' retrieval keys and uploads to server 1
    (``peer``) and completes the replies with server 1's masked answers."""

    #: server 1
    peer: PeerLink

    def retrieval_many(self, r: int, items: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """As :meth:`Node.retrieval_many`; with relay, server 1 must hold each device's roots
        first (checked before anything is evaluated), server 0's forwards go to server 1 as
        one batch, and server 1's masked answers complete the replies."""
        relay = self.relay_role
        if not self.protocol.relay or relay is None:  # a relay deployment has one (ServerState checks)
            return self._evaluate_retrievals(r, items)
        results = self._ready_at_peer(r, items)
        go = [i for i, res in enumerate(results) if res is None]
        if not go:
            return results
        with ThreadPoolExecutor(1, thread_name_prefix="secemb-relay") as pool:
            early = _EarlyForward(r, relay, self.peer, items, go, pool)
            outs = self._evaluate_retrievals(r, [items[i] for i in go], on_admitted=early)
            masked_of = early.answers()
        for i, out in zip(go, outs, strict=True):
            results[i] = out
        # with relay, server 0's role answers each admitted request with the bytes to forward
        fwd = [(i, out) for i, out in zip(go, outs, strict=True) if isinstance(out, bytes)]
        late = [(i, out) for i, out in fwd if i not in masked_of]  # forwards known after the commit only
        if late:
            masked_of.update(zip([i for i, _ in late],
                                 self.peer.relay_retrieval_many(r, [(items[i][0], out) for i, out in late]),
                                 strict=True))
        if fwd:
            self._complete_relayed(r, relay, [(i, items[i][0], masked_of[i]) for i, _ in fwd], results)
        return results

    def _ready_at_peer(self, r: int, items: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """Per item ``None`` where server 1 holds the user's roots and awaits server 0's forward,
        else the error that refuses the item (all of them if server 1 refused or failed)."""
        try:
            ready = self.peer.ready_many(r, [u for u, _ in items])
        except PeerRefused as exc:
            return [Conflict(f"server 1: {exc.detail}")] * len(items)
        except PeerUnreachable as exc:
            return [peer_failure("server 1 is unavailable", exc)] * len(items)
        return [None if ok else Conflict(f"user {user} must send its retrieval request to server 1 first")
                for (user, _), ok in zip(items, ready, strict=True)]

    def _complete_relayed(self, r: int, relay: RelayRole, answers: list[tuple[int, int, bytes | SecembError]],
                          results: list[bytes | None | SecembError]) -> None:
        """Complete the replies of ``answers`` ``(index into results, user, server 1's masked
        answer or the error it failed with)`` under the lock, as one batch of the role
        (:meth:`~secemb.protocols.base.RelayRole.complete_retrieval_many`): per index the reply
        or the error (a malformed answer of server 1's: its failure, 503, as for no answer)."""
        with self.lock:
            try:
                rnd = self._current(r)
            except SecembError as exc:
                for i, _, _ in answers:
                    results[i] = exc
                return
            done: list[int] = []
            pairs: list[tuple[int, bytes]] = []
            for i, user, ans in answers:
                if isinstance(ans, BaseException):
                    results[i] = peer_failure("server 1 did not answer the relayed retrieval (this user cannot "
                                              "take part in the round)", ans)
                    continue
                done.append(i)
                pairs.append((user, ans))
            if pairs:
                for i, out in zip(done, rnd.busy(relay.complete_retrieval_many, pairs), strict=True):
                    if isinstance(out, InvalidMessage):  # only server 1 sent those bytes: not the device's request
                        out = peer_failure("server 1's answer to the relayed retrieval is malformed (this user "
                                           "cannot take part in the round)", out)
                    results[i] = out

    def _forward_uploads(self, r: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """The forwards of uploads ``(user, relay_upload)`` to server 1 as one batch; per item
        ``None`` or the error (503 for a failure to reach server 1) that says it will not count."""
        outs = self.peer.relay_upload_many(r, items)
        refused: list[SecembError | None] = []
        for (user, _), out in zip(items, outs, strict=True):
            if out is None:
                refused.append(None)
                continue
            log.warning("round %d: forwarding user %d's upload failed: %s", r, user, out)
            refused.append(peer_failure("server 1 did not take the forwarded upload (it will not count)", out))
        return refused


class _EarlyForward:
    """The ``on_admitted`` step of :meth:`LeaderRelay.retrieval_many` for the admitted items
    ``items[go[j]]``: a role that knows its forwards from the requests alone has them sent to
    server 1 as one batch (on ``pool``), which server 1 evaluates while server 0 evaluates its
    own (a user server 0 then refuses counts at server 1 as one that retrieved and went silent)."""

    def __init__(self, r: int, relay: RelayRole, peer: PeerLink, items: list[tuple[int, bytes]], go: list[int],
                 pool: ThreadPoolExecutor) -> None:
        self.r, self.relay, self.peer, self.items, self.go, self.pool = r, relay, peer, items, go, pool
        self.sent: list[int] = []  # the indices into items of the batch sent early
        self.batch: Future[list[bytes | SecembError]] | None = None

    def __call__(self, admitted: list[int]) -> None:
        fwds = self.relay.relay_forwards([self.items[self.go[j]] for j in admitted])
        if fwds is None:
            return
        ok = [(self.go[j], f) for j, f in zip(admitted, fwds, strict=True) if isinstance(f, bytes)]
        if ok:
            self.batch = self.pool.submit(self.peer.relay_retrieval_many, self.r,
                                          [(self.items[i][0], f) for i, f in ok])
            self.sent = [i for i, _ in ok]

    def answers(self) -> dict[int, bytes | SecembError]:
        """Server 1's masked answers to the batch sent early by index into ``items`` (waits for
        them; none if nothing was sent)."""
        return {} if self.batch is None else dict(zip(self.sent, self.batch.result(), strict=True))


class FollowerRelay(Node):
    """Server 1's side of the relay: it answers server 0's forwards, and raises
    ``relay_tampered`` for forwarded bytes that fail the device's authentication."""

    #: groups concurrent :meth:`peer_relay_retrieval` calls (set by the node)
    _relay_batch: Batcher
    #: groups concurrent :meth:`peer_relay_upload` calls into :meth:`peer_relay_upload_many` (set by the node)
    _relay_upload_batch: Batcher

    def _relay(self) -> RelayRole:
        """The role's relay steps.

        Raises
        ------
        ProtocolError: the role has none (its protocol cannot relay).
        """
        if self.relay_role is None:
            raise ProtocolError(f"{type(self.role).__name__} does not relay")
        return self.relay_role

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
        error that refused it.  Refused before anything is evaluated, changing no state: a user
        whose relayed bytes failed authentication before (it is out of the round: the roots it
        left awaiting are never evaluated) -- as :meth:`peer_relay_upload_many` refuses its
        upload.  A forward that fails it now leaves its user out, with a ``relay_tampered``
        alarm.  The node answers forwards one batch at a time (its relay batcher)."""
        results: list[bytes | SecembError] = [b""] * len(items)
        with self.lock:
            try:
                rnd = self._current(r)
                role = self._relay()
            except SecembError as exc:
                return [exc] * len(items)
            todo = _refuse_out(rnd, items, results)
        if not todo:
            return results
        commit = rnd.busy(role.evaluate_relay_many, [items[i] for i in todo])
        with self.lock:
            try:
                self._current(r)
                outs = rnd.busy(commit)
            except SecembError as exc:
                return [exc] * len(items)
            tampered: list[int] = []
            for i, out in zip(todo, outs, strict=True):
                results[i] = out
                if isinstance(out, RelayTampered):
                    tampered.append(items[i][0])
                elif not isinstance(out, BaseException):
                    rnd.relayed.add(items[i][0])
            rnd.tampered.update(tampered)
        self._relay_tampered(rnd, tampered, "retrieval keys")
        return results

    def _relay_tampered(self, rnd: Round, users: list[int], what: str) -> None:
        """``what`` of ``users``, as server 0 forwarded it, fails the device's authentication --
        server 0 altered it, or the device itself sent server 0 bytes other than those it committed
        to here; this server cannot tell which (each user already in ``rnd.tampered``,
        under the lock that committed the batch: the user is left out of round ``rnd`` as a
        dropout -- it never counts as uploaded here, so no agreed set holds it -- and the
        round's outcome lists it under ``tampered``): an alarm per user."""
        for user in users:
            self.raise_alarm("relay_tampered", rnd.round_id, f"user {user}'s {what} as server 0 forwarded them fail "
                                                             "the device's authentication: server 0 altered them, or "
                                                             "the device sent the two servers bytes that do not match; "
                                                             "the user is left out")

    def peer_relay_upload(self, r: int, user: int, body: bytes) -> None:
        """Relay: absorb server 0's forwarded correction words for ``user``, batched with
        concurrent forwards (:meth:`peer_relay_upload_many`); its refusal raised."""
        self._relay_upload_batch((r, user, body))

    def peer_relay_upload_many(self, r: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """Relay: absorb server 0's forwarded correction words ``(user, relay_upload)`` of round
        ``r`` as one batch (the role's :meth:`~secemb.protocols.base.RelayRole.relay_upload_many`);
        per item ``None`` or the error that refused it, which changed no state.  Refused: a
        user whose relayed bytes failed authentication before (it is out of the round), and a
        forward that fails it now -- its user is left out, with a ``relay_tampered`` alarm."""
        results: list[SecembError | None] = [None] * len(items)
        with self.lock:
            try:
                rnd = self._current(r)
                role = self._relay()
            except SecembError as exc:
                return [exc] * len(items)
            todo = _refuse_out(rnd, items, results)
            outs = rnd.busy(role.relay_upload_many, [items[i] for i in todo]) if todo else []
            tampered: list[int] = []
            for i, out in zip(todo, outs, strict=True):
                if isinstance(out, RelayTampered):
                    tampered.append(items[i][0])
                    results[i] = RelayTampered(f"round {r}: user {items[i][0]}'s forwarded upload fails "
                                               "authentication")
                elif out is not None:
                    results[i] = out
                else:
                    rnd.uploaded.add(items[i][0])
            rnd.tampered.update(tampered)
            before, n = len(rnd.uploaded) - sum(1 for i in todo if results[i] is None), len(rnd.uploaded)
        self._relay_tampered(rnd, tampered, "upload")
        for count in range(before + 1, n + 1):
            faults.hit("upload", count)
        return results


def _refuse_out(rnd: Round, items: list[tuple[int, bytes]], results: list[Any]) -> list[int]:
    """Server 1, relay (under the node's lock): each forward ``(user, body)`` of a user whose
    relayed bytes were altered before (in ``rnd.tampered``: out of the round) refused in
    ``results`` with :class:`~secemb.errors.RelayTampered`; the indices of the others."""
    todo: list[int] = []
    for i, (user, _) in enumerate(items):
        if user in rnd.tampered:
            results[i] = RelayTampered(f"round {rnd.round_id}: user {user} is out of the round (its relayed bytes "
                                       "were altered)")
        else:
            todo.append(i)
    return todo
