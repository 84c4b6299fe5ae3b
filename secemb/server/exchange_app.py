"""The HTTP face of a one-server protocol's node (:class:`~secemb.protocols.base.ExchangeNode`,
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

A request is admitted as the two-server app admits one (:class:`~secemb.server.gate.Gate`):
credentials (401), the body limit (413, checked before the body is read), the body read within
``read_timeout_s`` (408) holding one of ``max_body_reads`` slots of the class the key id claims
(503 when none comes in time; junk claiming device ids never delays the operator), the
signature (401), the rate limit (429), a principal the endpoint does not serve (403); then the
node: 400 for a malformed message (``InvalidMessage``, a JSON body that is not an object or
nests too deep included), 409 out of round or stage order or after an abort, 422 for a bad
parameter.  Every refusal is a 4xx (or that 503), never a 500
(:func:`~secemb.server.gate.install_error_handlers`).  The node checks a message in full before
it keeps anything of it, so a refused request changes nothing.  The node is called under one
lock (its state is one round's).  Served by :func:`secemb.server.listener.guarded_config`, it
has the two-server app's connection guards too (header and TLS handshake deadlines, a
connection limit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from secemb.errors import InvalidParameters
from secemb.protocols.base import ExchangeNode
from secemb.server.auth import Principal, Verifier
from secemb.server.gate import Gate, install_error_handlers
from secemb.server.parsing import ascii_int, json_object

__all__ = ["create_exchange_app"]

OCTET = "application/octet-stream"
_JSON_LIMIT = 1 << 20


def create_exchange_app(node: ExchangeNode, verifier: Verifier, *, max_body_bytes: int,
                        model: Callable[[], bytes], read_timeout_s: float, max_body_reads: int) -> FastAPI:
    """The app serving ``node``: ``verifier`` checks every request, ``max_body_bytes`` bounds a
    device's message (the protocol's largest at the run's public sizes), ``model`` gives the
    public model's bytes; ``read_timeout_s`` and ``max_body_reads`` bound the bodies read before
    their signature is checked (:class:`~secemb.server.gate.Gate`)."""
    app = FastAPI(title="secemb one-server node", docs_url=None, redoc_url=None, openapi_url=None)
    lock = threading.Lock()
    install_error_handlers(app)
    gate = Gate(verifier, read_timeout_s=read_timeout_s, max_body_reads=max_body_reads)

    async def authed(request: Request, kind: str, limit: int) -> tuple[Principal, bytes]:
        return await gate.admit(request, (kind,), limit)

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
        _, body = await authed(request, "admin", _JSON_LIMIT)
        doc = json_object(body, _JSON_LIMIT)
        round_id, users = doc.get("round_id"), doc.get("users")
        if isinstance(round_id, bool) or not isinstance(round_id, int):
            raise InvalidParameters("expected a JSON object with an int round_id and users")
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
