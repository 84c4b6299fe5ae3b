"""What every app the project serves does with a request before its handler acts on it (the
two-server app :mod:`secemb.server.app` and the one-server :mod:`secemb.server.exchange_app`):
:class:`Gate` admits a signed request, :func:`install_error_handlers` answers every refusal
with its 4xx (or a 503 for a resource bound), never a 500.

Admission, in order (the first failure answers):

1. the authentication headers (:meth:`~secemb.server.auth.Verifier.principal_of`: key id,
   timestamp window, format, a nonce not used yet) -> 401; a peer key id over TLS without the
   peer's client certificate -> 401;
2. the body (:func:`~secemb.server.parsing.read_body`), up to the endpoint's limit -> 413
   beyond it (before it is read in full), within ``read_timeout_s`` -> 408.  A body that may
   hold bytes is read while holding one of ``max_body_reads`` slots *of the credential class
   the key id claims* (device, operator, peer server) -> 503 when no slot comes within
   ``read_timeout_s``.  The classes are apart (issue 33: 64 stalled junk bodies signed as
   devices made the operator wait 7-10 s): whatever devices -- or strangers claiming device
   ids -- send, the operator's and the peer's slots stay free.  A stranger claiming the
   operator's key id holds an operator slot for ``read_timeout_s`` at most; one claiming the
   peer's holds none over TLS (step 1); and a body limited to 0 bytes (a ``GET``) takes no slot
   at all, so the operator's reads are answered even while the operator's slots are held;
3. the signature, the rate limit, the nonce memory
   (:meth:`~secemb.server.auth.Verifier.verify`) -> 401, 429, 503; a principal the endpoint
   does not serve -> 403 (only after the signature: without a key, nothing but 401);
4. a timestamp ahead of this server's clock: the request is acted on once the clock reaches it
   (:meth:`~secemb.server.auth.Verifier.ahead_s`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, SecembError
from secemb.server.auth import AuthError, Busy, Forbidden, Principal, RateLimited, Verifier
from secemb.server.errors import NotFound, PeerUnavailable
from secemb.server.parsing import PayloadTooLarge, RequestTimeout, read_body
from secemb.server.persist import StorageError
from secemb.server.tls import PEER_CN_SCOPE_KEY

if TYPE_CHECKING:  # the web framework is the [server] extra
    from fastapi import FastAPI, Request

__all__ = ["STATUS", "Gate", "install_error_handlers"]

log = logging.getLogger("secemb.server")

#: HTTP status and error name of each refusal (the first class that matches)
STATUS: list[tuple[type[BaseException], int, str]] = [
    (AuthError, 401, "unauthorized"),
    (Forbidden, 403, "forbidden"),
    (NotFound, 404, "not_found"),
    (PayloadTooLarge, 413, "payload_too_large"),
    (RequestTimeout, 408, "request_timeout"),
    (RateLimited, 429, "rate_limited"),
    (Busy, 503, "busy"),
    (PeerUnavailable, 503, "peer_unavailable"),
    (StorageError, 503, "storage_unavailable"),
    (InvalidMessage, 400, "invalid_message"),
    (InvalidParameters, 422, "invalid_parameters"),
    (ProtocolError, 409, "conflict"),
    (SecembError, 400, "bad_request"),
]


class Gate:
    """Admits the requests of one server (the order: the module's docstring).

    ``verifier`` checks the credentials; ``read_timeout_s`` bounds each body's read (waiting
    for a slot included); ``max_body_reads``: bodies read at once per credential class before
    their signature is checked; ``peer_needs_cert``: a peer key id must come with the peer's
    verified client certificate (TLS; off only for plain HTTP on loopback).
    """

    def __init__(self, verifier: Verifier, *, read_timeout_s: float, max_body_reads: int,
                 peer_needs_cert: bool = True) -> None:
        self.verifier, self.read_timeout_s, self.max_body_reads = verifier, read_timeout_s, max_body_reads
        self.peer_needs_cert = peer_needs_cert
        self._slots = {kind: asyncio.Semaphore(max_body_reads) for kind in ("user", "admin", "peer")}

    async def admit(self, request: Request, allow: tuple[str, ...], limit: int) -> tuple[Principal, bytes]:
        """The verified principal of ``request`` (one of the kinds in ``allow``) and its body of at
        most ``limit`` bytes.

        Raises
        ------
        AuthError, Forbidden, PayloadTooLarge, RequestTimeout, Busy, RateLimited, InvalidMessage
        """
        claimed, _ = self.verifier.principal_of(request.headers)
        mutual = request.scope.get(PEER_CN_SCOPE_KEY) == claimed.key_id
        if claimed.kind == "peer" and self.peer_needs_cert and not mutual:
            raise AuthError("a peer call must come over mutual TLS with the peer's certificate")
        body = await self.read(request, claimed.kind, limit)
        principal = self.verifier.verify(request.headers, request.method, request.url.path, request.url.query, body)
        if principal.kind not in allow:  # only after the signature: no secret, no answer but 401
            raise Forbidden(f"{principal.key_id} may not call {request.method} {request.url.path}")
        await asyncio.sleep(self.verifier.ahead_s(request.headers))  # signed ahead of this clock: act once reached
        return principal, body

    async def read(self, request: Request, kind: str, limit: int) -> bytes:
        """``request``'s body of at most ``limit`` bytes, read within ``read_timeout_s`` while
        holding one of credential class ``kind``'s slots (none for ``limit`` 0: such a body
        holds no bytes), so the unauthenticated bytes in memory stay bounded per class.

        Raises
        ------
        Busy
            No slot of ``kind`` came free within ``read_timeout_s``.
        RequestTimeout
            The body did not arrive within ``read_timeout_s``.
        PayloadTooLarge, InvalidMessage
            As :func:`~secemb.server.parsing.read_body`.
        """
        deadline = asyncio.get_running_loop().time() + self.read_timeout_s
        slot = self._slots[kind] if limit > 0 else None
        if slot is not None:
            try:
                async with asyncio.timeout_at(deadline):
                    await slot.acquire()
            except TimeoutError:
                raise Busy(f"{self.max_body_reads} {kind} request bodies are being read; retry later") from None
        try:
            async with asyncio.timeout_at(deadline):
                return await read_body(request, limit)
        except TimeoutError:
            raise RequestTimeout(f"the request body did not arrive within {self.read_timeout_s:g} s") from None
        finally:
            if slot is not None:
                slot.release()


def install_error_handlers(app: FastAPI) -> None:
    """Answer every refusal raised in ``app``'s handlers as JSON ``{"error", "detail"}``: a
    :class:`~secemb.errors.SecembError` with its :data:`STATUS` (401 with one body for every
    reason -- the reason goes to the log), a request the framework cannot match to a handler's
    parameters 422, the framework's own refusals (404, 405) with their status."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def error(status: int, name: str, detail: str) -> JSONResponse:
        return JSONResponse({"error": name, "detail": detail}, status_code=status)

    @app.exception_handler(SecembError)
    async def _secemb_error(request: Request, exc: SecembError) -> JSONResponse:
        if isinstance(exc, AuthError):  # one body for every reason: the reason is for the operator's log
            log.info("401 %s %s: %s", request.method, request.url.path, exc)
            return error(401, "unauthorized", "authentication failed")
        status, name = next((s, n) for cls, s, n in STATUS if isinstance(exc, cls))
        return error(status, name, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error(422, "invalid_parameters", "; ".join(str(e.get("msg")) for e in exc.errors())[:500])

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, "http_error", str(exc.detail))
