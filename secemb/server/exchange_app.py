"""The HTTP face of a one-server protocol's node (:class:`~secemb.engine.exchange.ExchangeNode`,
e.g. SFSL's :class:`~secemb.protocols.sfsl.staged.SFSLNode`): the exchanges of
:mod:`secemb.engine.exchange` as signed endpoints.

Every endpoint is signed (:mod:`secemb.transport.network`, checked by the same
:class:`~secemb.server.auth.Verifier` as the two-server app) by a device (``user:<id>``) or the
operator (``admin``)::

    POST /v1/exchange/rounds/{round_id}/{stage}              device: its message of the stage (octets) -> 204
    GET  /v1/exchange/rounds/{round_id}/{stage}              device: the server's answer (octets; 204: none)
    POST /v1/admin/exchange/rounds                           operator: {"round_id", "users"} -> round document
    POST /v1/admin/exchange/rounds/{round_id}/{stage}/close  operator: close the stage
    GET  /v1/admin/exchange/rounds/{round_id}                operator: the round's outcome
    GET  /v1/admin/model                                     operator: the public model (octets)

A request is refused in this order: credentials (401, 403 for a principal the endpoint does
not serve), the body limit (413, checked before the body is read), the signature (401), the
rate limit (429), then the node: 400 for a malformed message (``InvalidMessage``), 409 out of
round or stage order or after an abort, 422 for a bad parameter.  The node checks a message
in full before it keeps anything of it, so a refused request changes nothing.  The node is
called under one lock (its state is one round's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from secemb.engine.exchange import ExchangeNode
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, SecembError
from secemb.server.auth import AuthError, Busy, Forbidden, Principal, RateLimited, Verifier
from secemb.server.parsing import PayloadTooLarge, ascii_int, read_body

__all__ = ["create_exchange_app"]

OCTET = "application/octet-stream"
_JSON_LIMIT = 1 << 20


_STATUS: list[tuple[type[BaseException], int, str]] = [
    (AuthError, 401, "unauthorized"), (Forbidden, 403, "forbidden"), (PayloadTooLarge, 413, "payload_too_large"),
    (RateLimited, 429, "rate_limited"), (Busy, 503, "busy"), (InvalidMessage, 400, "invalid_message"),
    (InvalidParameters, 422, "invalid_parameters"), (ProtocolError, 409, "conflict"), (SecembError, 400, "bad_request"),
]


def create_exchange_app(node: ExchangeNode, verifier: Verifier, *, max_body_bytes: int,
                        model: Callable[[], bytes]) -> FastAPI:
    """The app serving ``node``: ``verifier`` checks every request, ``max_body_bytes`` bounds a
    device's message (the protocol's largest at the run's public sizes), ``model`` gives the
    public model's bytes."""
    app = FastAPI(title="secemb one-server node", docs_url=None, redoc_url=None, openapi_url=None)
    lock = threading.Lock()

    @app.exception_handler(SecembError)
    async def _refused(request: Request, exc: SecembError) -> JSONResponse:
        if isinstance(exc, AuthError):
            return JSONResponse({"error": "unauthorized", "detail": "authentication failed"}, status_code=401)
        status, name = next((s, n) for cls, s, n in _STATUS if isinstance(exc, cls))
        return JSONResponse({"error": name, "detail": str(exc)}, status_code=status)

    async def authed(request: Request, kind: str, limit: int) -> tuple[Principal, bytes]:
        verifier.principal_of(request.headers)
        body = await read_body(request, limit)
        principal = verifier.verify(request.headers, request.method, request.url.path, request.url.query, body)
        if principal.kind != kind:
            raise Forbidden(f"{principal.key_id} may not call {request.method} {request.url.path}")
        return principal, body

    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        def locked() -> Any:
            with lock:
                return fn(*args)
        return await run_in_threadpool(locked)

    def rid(raw: str) -> int:
        return ascii_int(raw, "path parameter round_id", 0, 2**62)

    @app.post("/v1/exchange/rounds/{round_id}/{stage}")
    async def send(round_id: str, stage: str, request: Request) -> Response:
        principal, body = await authed(request, "user", max_body_bytes)
        assert principal.user_id is not None
        await call(node.receive, rid(round_id), stage, principal.user_id, body)
        return Response(status_code=204)

    @app.get("/v1/exchange/rounds/{round_id}/{stage}")
    async def fetch(round_id: str, stage: str, request: Request) -> Response:
        principal, _ = await authed(request, "user", 0)
        assert principal.user_id is not None
        out = await call(node.reply, rid(round_id), stage, principal.user_id)
        return Response(status_code=204) if out is None else Response(out, media_type=OCTET)

    @app.post("/v1/admin/exchange/rounds")
    async def open_round(request: Request) -> dict[str, Any]:
        import json

        _, body = await authed(request, "admin", _JSON_LIMIT)
        try:
            doc = json.loads(body)
            round_id, users = doc["round_id"], doc["users"]
        except (ValueError, TypeError, KeyError):
            raise InvalidParameters("expected a JSON object with round_id and users") from None
        if not isinstance(users, list) or not all(isinstance(u, int) and not isinstance(u, bool) for u in users):
            raise InvalidParameters("users must be a list of ints")
        out: dict[str, Any] = await call(node.open_round, round_id, users)
        return out

    @app.post("/v1/admin/exchange/rounds/{round_id}/{stage}/close")
    async def close(round_id: str, stage: str, request: Request) -> dict[str, Any]:
        await authed(request, "admin", 64)  # an empty JSON document
        await call(node.close, rid(round_id), stage)
        return {"round_id": int(round_id), "closed": stage}

    @app.get("/v1/admin/exchange/rounds/{round_id}")
    async def outcome(round_id: str, request: Request) -> dict[str, Any]:
        await authed(request, "admin", 0)
        out: dict[str, Any] = await call(node.outcome, rid(round_id))
        return out

    @app.get("/v1/admin/model")
    async def public_model(request: Request) -> Response:
        await authed(request, "admin", 0)
        return Response(await call(model), media_type=OCTET)

    return app
