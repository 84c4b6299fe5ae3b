"""Server 0's typed view of server 1: :class:`PeerLink`, and :class:`HttpPeer`, which speaks it
over the signed ``/v1/peer/...`` endpoints of :mod:`secemb.server.app`.

The leader node (:class:`~secemb.server.node.LeaderNode`) only ever talks to server 1 through
a :class:`PeerLink`; the HTTP paths live here and nowhere else.  An in-process engine gives the
leader a link that calls the follower node directly.

Errors (every method):

* :class:`PeerRefused` -- server 1 answered and refused (HTTP status < 500): the request does
  not fit its state.  The leader turns it into a 409 (``Conflict``).
* :class:`PeerUnreachable` -- no answer, or a server error (5xx).  The leader turns it into a
  503 (``PeerUnavailable``).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from secemb.errors import InvalidMessage, SecembError
from secemb.server.verify import decode_verification
from secemb.transport.answers import answer_document
from secemb.transport.errors import RemoteError, Unreachable
from secemb.transport.limits import ANSWER_FLOOR_BYTES

__all__ = ["PEER_ERRORS", "HttpPeer", "PeerLink", "PeerRefused", "PeerUnreachable"]

log = logging.getLogger("secemb.server")

T = TypeVar("T")


class PeerRefused(SecembError):
    """Server 1 refused the request; ``detail`` is its explanation."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class PeerUnreachable(SecembError):
    """Server 1 did not answer (connection, timeout) or failed (5xx)."""


#: what a :class:`PeerLink` method raises
PEER_ERRORS = (PeerRefused, PeerUnreachable)


class PeerLink(Protocol):
    """Server 0's view of server 1.  Every method raises :class:`PeerRefused` or
    :class:`PeerUnreachable` (see the module docstring) and nothing else."""

    def status(self) -> dict[str, Any]:
        """Server 1's status document (:meth:`~secemb.server.node.Node.status`)."""

    def count_open(self, users: list[int] | None) -> None:
        """(Re)start server 1's Eq. 11 count phase for ``users`` (``None``: anyone)."""

    def count_users(self) -> list[int]:
        """While server 1's count phase is open: the sorted users whose count share it holds."""

    def count_close(self) -> list[int]:
        """Freeze server 1's count phase; the sorted users whose count share it holds."""

    def count_share(self, include: list[int]) -> bytes:
        """Server 1's sum of the count shares of ``include`` (a COUNT message)."""

    def open_round(self, doc: dict[str, Any]) -> None:
        """Mirror the round server 0 opened (``doc``: the round document)."""

    def ready_many(self, round_id: int, users: list[int]) -> list[bool]:
        """Relay: per user, whether server 1 holds its roots and awaits server 0's forward."""

    def relay_retrieval_many(self, round_id: int, items: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        """Relay: server 1's masked answers to the forwarded keys ``(user, relay_keys)``; a
        refused or failed item yields its :class:`PeerRefused`/:class:`PeerUnreachable` in its
        place."""

    def relay_upload_many(self, round_id: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        """Relay: server 1 absorbs the forwarded correction words ``(user, relay_upload)``; per
        item ``None``, or the :class:`PeerRefused`/:class:`PeerUnreachable` of one refused or
        failed in its place."""

    def uploaded(self, round_id: int) -> list[int]:
        """While round ``round_id`` is open at server 1: the sorted users whose upload it absorbed
        (server 0's quorum check, finding S42-Q2; what :meth:`close` gives anyway)."""

    def close(self, round_id: int) -> list[int]:
        """Server 1 stops taking uploads; the sorted users it absorbed."""

    def verify(self, round_id: int, include: list[int]) -> tuple[dict[int, bytes], bytes]:
        """Server 1's digests of the uploads of ``include`` (issue 34; empty without
        verification) and its verifier messages of the sketch check (``b""`` without it; the
        role reads them: :meth:`~secemb.protocols.base.ServerRole.verify_rejected`), checked
        (:func:`secemb.server.verify.decode_verification`)."""

    def bound(self, round_id: int, body: bytes) -> bytes:
        """Bounded payloads: server 1's ``bound_answer`` to server 0's ``bound_request`` ``body``
        (:meth:`~secemb.server.node.FollowerNode.peer_bound`)."""

    def share(self, round_id: int, include: list[int]) -> bytes:
        """Server 1's aggregate share over exactly ``include``."""

    def agree(self, round_id: int, share: bytes) -> str:
        """Server 0's aggregate ``share`` (over the users of :meth:`share`) to server 1, which
        reconstructs and applies the round's update as server 0 does; the SHA-256 of the
        model it computed (committed only when server 0's has the same digest)."""

    def abort(self, round_id: int, reason: str) -> None:
        """Abort round ``round_id`` at server 1."""

    def sync_model(self, body: bytes, round_id: int) -> None:
        """Commit round ``round_id`` at server 1 with server 0's MODEL message ``body``: server 1
        installs the model it computed itself if ``body`` has its digest."""


def _call(fn: Callable[[], T]) -> T:
    """``fn()`` -- a request to server 1 and the reading of its answer -- with the transport's
    errors turned into the :class:`PeerLink` errors; an answer that is not JSON or not of the
    API's shape (a field missing or of another type) is server 1 failing (PeerUnreachable)."""
    try:
        return fn()
    except RemoteError as exc:
        if exc.status < 500:
            raise PeerRefused(exc.detail) from None
        log.warning("server 1 failed: %s", exc)
        raise PeerUnreachable(f"server 1 answered {exc.status} {exc.error}") from None
    except Unreachable as exc:  # the message names server 1's address: for the log, not for callers
        log.warning("server 1 unreachable: %s", exc)
        raise PeerUnreachable("server 1 did not answer") from None
    except InvalidMessage as exc:  # an answer not JSON (ApiClient) or not of the API's shape (_fields)
        log.warning("server 1 answered badly: %s", exc)
        raise PeerUnreachable(f"server 1's answer is malformed ({exc})") from None


def _fields(doc: Any, **kinds: type) -> dict[str, Any]:
    """Server 1's JSON answer ``doc``, checked (:func:`~secemb.transport.network.answer_fields`:
    InvalidMessage, which :func:`_call` reports as server 1 failing)."""
    from secemb.transport.network import answer_fields  # here: in-process nodes never need httpx

    return answer_fields(doc, "server 1", **kinds)


class HttpPeer:
    """:class:`PeerLink` over HTTP: signed requests as ``server0`` to server 1's ``/v1/peer/...``
    endpoints, through an :class:`~secemb.transport.network.ApiClient` (``api``; it holds the
    connection pool and counts the bytes; ``tls``: the client context, which over TLS pins the
    deployment's CA and presents server 0's certificate -- mutual TLS).  It wraps the client rather than subclassing it
    because :meth:`close` is the peer's round close, not the client's.

    ``*_many`` send one request per item from a small thread pool (``fanout`` threads), so
    that server 1's batcher groups them into one evaluation as it does concurrent devices.
    ``max_answer_bytes``: the longest answer read (the node passes its own body limit; default
    the floor, :data:`~secemb.transport.limits.ANSWER_FLOOR_BYTES`); a longer one is server 1
    failing (:class:`PeerUnreachable`), read no further.
    """

    def __init__(self, base_url: str, key: bytes, *, timeout: float = 30.0, fanout: int = 8,
                 tls: ssl.SSLContext | None = None, max_answer_bytes: int | None = ANSWER_FLOOR_BYTES) -> None:
        from secemb.transport.network import ApiClient  # here: in-process nodes never need httpx

        self.api = ApiClient(base_url, "server0", key, timeout=timeout, tls=tls, max_answer_bytes=max_answer_bytes)
        self._pool = ThreadPoolExecutor(max_workers=fanout, thread_name_prefix="secemb-peer")

    def shutdown(self) -> None:
        """Release the connection pool and the threads."""
        self._pool.shutdown(wait=False)
        self.api.close()

    def _many(self, fn: Callable[[Any], T], items: list[Any]) -> list[T | SecembError]:
        def one(item: Any) -> T | SecembError:
            try:
                return _call(lambda: fn(item))
            except SecembError as exc:
                return exc

        if len(items) == 1:
            return [one(items[0])]
        return list(self._pool.map(one, items))

    # -- status and count ---------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        # server 0 reads these two to reconcile the model version and the next round id
        return _call(lambda: _fields(self.api.get_json("/v1/peer/status"), model_version=int, max_round=int))

    def count_open(self, users: list[int] | None) -> None:
        _call(lambda: self.api.post_json("/v1/peer/count/open", {"users": users}))

    def count_users(self) -> list[int]:
        return list(_call(lambda: _fields(self.api.get_json("/v1/peer/count/users"), users=list)["users"]))

    def count_close(self) -> list[int]:
        return list(_call(lambda: _fields(self.api.post_json("/v1/peer/count/close"), users=list)["users"]))

    def count_share(self, include: list[int]) -> bytes:
        return _call(lambda: self.api.request("POST", "/v1/peer/count/share", json_body={"include": include}).content)

    # -- rounds ---------------------------------------------------------------------------
    def open_round(self, doc: dict[str, Any]) -> None:
        _call(lambda: self.api.post_json("/v1/peer/rounds", doc))

    def ready_many(self, round_id: int, users: list[int]) -> list[bool]:
        path = f"/v1/peer/rounds/{round_id}/ready"
        outs = self._many(lambda u: bool(_fields(self.api.get_json(path, user=u), ready=bool)["ready"]), users)
        for out in outs:
            if isinstance(out, SecembError):
                raise out
        return outs  # type: ignore[return-value]

    def relay_retrieval_many(self, round_id: int, items: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        path = f"/v1/peer/rounds/{round_id}/relay-retrieval"
        return self._many(lambda it: self.api.post_bytes(path, it[1], user=it[0]) or b"", items)

    def relay_upload_many(self, round_id: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        path = f"/v1/peer/rounds/{round_id}/relay-upload"
        outs = self._many(lambda it: self.api.post_bytes(path, it[1], user=it[0]), items)
        return [out if isinstance(out, SecembError) else None for out in outs]

    def uploaded(self, round_id: int) -> list[int]:
        def go() -> list[int]:
            users = _fields(self.api.get_json(f"/v1/peer/rounds/{round_id}/uploaded"), uploaded=list)["uploaded"]
            if not all(type(u) is int for u in users):
                raise InvalidMessage("server 1's uploaded users are not all integers")
            return list(users)

        return _call(go)

    def close(self, round_id: int) -> list[int]:
        return list(_call(lambda: _fields(self.api.post_json(f"/v1/peer/rounds/{round_id}/close"),
                                          uploaded=list)["uploaded"]))

    def verify(self, round_id: int, include: list[int]) -> tuple[dict[int, bytes], bytes]:
        return decode_verification(_call(lambda: self.api.post_json(f"/v1/peer/rounds/{round_id}/verify",
                                                               {"include": include})), include)

    def bound(self, round_id: int, body: bytes) -> bytes:
        return _call(lambda: self.api.post_bytes(f"/v1/peer/rounds/{round_id}/bound", body) or b"")

    def share(self, round_id: int, include: list[int]) -> bytes:
        return _call(lambda: self.api.request("POST", f"/v1/peer/rounds/{round_id}/share",
                                          json_body={"include": include}).content)

    def agree(self, round_id: int, share: bytes) -> str:
        path = f"/v1/peer/rounds/{round_id}/agree"

        def go() -> str:
            raw = self.api.post_bytes(path, share) or b""
            try:
                doc = answer_document(raw)
            except ValueError:  # json's decode error, bytes that are not UTF-8, or nesting too deep
                raise InvalidMessage(f"the answer to {path} is not JSON") from None
            return str(_fields(doc, model_sha256=str)["model_sha256"])

        return _call(go)

    def abort(self, round_id: int, reason: str) -> None:
        _call(lambda: self.api.post_json(f"/v1/peer/rounds/{round_id}/abort", {"reason": reason}))

    def sync_model(self, body: bytes, round_id: int) -> None:
        _call(lambda: self.api.post_bytes("/v1/peer/model", body, round=round_id))
