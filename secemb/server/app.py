"""The HTTP face of a server: a FastAPI app over a :class:`~secemb.server.node.LeaderNode` or
:class:`~secemb.server.node.FollowerNode`.

Every endpoint but ``GET /v1/health`` is signed (:mod:`secemb.transport.network`) by one of
the principals it allows (device, operator, peer server).  A request is handled in this
order, and the first failure answers:

1. the authentication headers (key id, timestamp window, format, a nonce not used yet) ->
   401; a principal the endpoint does not serve -> 403;
2. the body, read up to an explicit limit that depends on the endpoint and the current
   round's public parameters -> 413 beyond it (before it is read in full); at most
   ``max_body_reads`` bodies per credential class (device, operator, peer) are read at once,
   each within ``read_timeout_s`` -> 503 (no slot in time), 408 (the body stalled)
   (:class:`~secemb.server.gate.Gate`);
3. the signature over method, path, query, timestamp, nonce and body hash -> 401; the key
   id's rate limit -> 429; a full nonce memory -> 503;
4. the node: the protocol's and the round's checks -> 400 (malformed message), 403, 404,
   409 (wrong round, closed round, duplicate), 422 (bad parameter), 503 (the peer server did
   not answer, or the disk refused a write).  Errors are JSON ``{"error": name, "detail":
   text}``; nothing is changed by a rejected request.

Protocol messages travel as ``application/octet-stream`` bodies holding exactly the
message bytes of ``docs/wire-format.md``; control messages are JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BeforeValidator
from starlette.concurrency import run_in_threadpool

import secemb
from secemb.errors import InvalidParameters, check_int
from secemb.round import messages
from secemb.server.auth import Verifier
from secemb.server.errors import NotFound
from secemb.server.gate import Gate, install_error_handlers
from secemb.server.inference import NodeInference
from secemb.server.node import DEVICE_ALARMS, FollowerNode, LeaderNode, Node
from secemb.server.parsing import PayloadTooLarge, ascii_int, json_object

__all__ = ["create_app", "PayloadTooLarge"]

OCTET = "application/octet-stream"
USER, ADMIN, PEER = "user", "admin", "peer"
_JSON_LIMIT = 64 * 1024
#: body limit of a device's alarm report (``{"kind", "round_id", "detail"}``)
_ALARM_LIMIT = 1024
#: no body or round id reaches 2**63
_INT_END = 2**63


def _round_id(raw: object) -> object:
    """The ``round_id`` path parameter in ASCII digits (pydantic alone also reads ``1_0``,
    ``+1`` and surrounding blanks); its ``InvalidParameters`` is a ``ValueError``, so 422."""
    return ascii_int(raw, "path parameter round_id", -_INT_END, _INT_END) if isinstance(raw, str) else raw


RoundId = Annotated[int, BeforeValidator(_round_id)]


def _binary(description: str) -> dict[str, Any]:
    return {"requestBody": {"required": True, "description": description,
                            "content": {OCTET: {"schema": {"type": "string", "format": "binary"}}}}}


def _json_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


_BIN_RESPONSE = {"content": {OCTET: {"schema": {"type": "string", "format": "binary"}}}}
_ERR = {"description": "error", "content": {"application/json": {"schema": {
    "type": "object", "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
    "required": ["error", "detail"]}}}}
_ERRORS: dict[int | str, dict[str, Any]] = {s: _ERR for s in (400, 401, 403, 404, 408, 409, 413, 422, 429, 503)}
_SECURITY: list[dict[str, list[str]]] = [{"keyId": [], "timestamp": [], "nonce": [], "signature": []}]
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_USERS_BODY = {"type": "object", "properties": {"users": _IDS}}


#: body limit of a protocol message while no round is open: the node answers it (409, no round
#: in progress) rather than the size check
_NO_ROUND_LIMIT = 1024


def _limit_message(node: Node, kind: str, party: int | None = None, *, round_users: bool = False) -> int:
    """Body limit of a protocol message of ``kind`` to this server -- a device's
    ``retrieval_request``, ``upload`` or ``bound_proof``, server 0's ``relay_keys`` or
    ``relay_upload`` forward or ``bound_request`` (header party: this server), server 0's
    ``aggregate_share`` (``party`` 0, the sender): the node's protocol's bound for the current
    round (:meth:`~secemb.protocols.base.Protocol.max_message_bytes`, for ``num_users`` users,
    or the round's ``n_p`` if ``round_users``; 0 where the protocol sends this server no such
    message), capped by ``max_body_bytes``."""
    rnd = node.round
    if rnd is None:
        return _NO_ROUND_LIMIT
    bound = node.protocol.max_message_bytes(kind, rnd.rc, party=node.party if party is None else party,
                                            num_users=rnd.n_p if round_users else node.cfg.num_users)
    return min(node.cfg.max_body_bytes, bound)


def _limit_model(node: Node) -> int:
    """Body limit of a model sync: the MODEL message of the configured model's sizes."""
    return min(node.cfg.max_body_bytes, messages.model_bytes(node.cfg.num_items, node.width, node.dense_size))


def _limit_json(node: Node) -> int:
    """64 KiB and 24 bytes a user id, for ``num_users`` rounded up to a power of two: the limit
    answers (413) before the signature, so it tells a stranger the bit length of ``num_users``
    only (issue 33, 413-before-401)."""
    return _JSON_LIMIT + 24 * (1 << (node.cfg.num_users - 1).bit_length())


def _user_param(request: Request, node: Node) -> int:
    """The ``user`` query parameter: a user id in ``[0, num_users)`` in ASCII digits (422 otherwise)."""
    return ascii_int(request.query_params.get("user"), "query parameter user", 0, node.cfg.num_users)


def _as_party(node: Node, cls: type[Any], what: str) -> Any:
    """``node`` if it is a ``cls`` (the leader or the follower), else NotFound (404): the one
    place a call for the other party is refused."""
    if not isinstance(node, cls):
        raise NotFound(f"{what} is served by server {cls.party}, this is server {node.party}")
    return node


def create_app(node: Node) -> FastAPI:
    """The FastAPI application of server ``node.party``."""
    cfg = node.cfg
    verifier = Verifier(cfg.party, cfg.peer_secret, cfg.admin_secret, cfg.user_secret, cfg.num_users,
                        cfg.auth_window_s, rate_per_s=cfg.requests_per_s, max_nonces=cfg.max_nonces)
    gate = Gate(verifier, read_timeout_s=cfg.read_timeout_s, max_body_reads=cfg.max_body_reads,
                peer_needs_cert=not cfg.insecure_http)
    authed = gate.admit
    app = FastAPI(
        title=f"secemb server {cfg.party}",
        version=getattr(secemb, "__version__", "0"),
        description=(
            "A SecEmb server (one of two non-colluding parties). Protocol messages are "
            "application/octet-stream bodies holding the exact bytes of docs/wire-format.md. "
            "Every endpoint except /v1/health needs the X-Secemb-* HMAC headers "
            "(docs/deployment.md). Device endpoints: /v1/round, /v1/count, /v1/rounds/*, /v1/inference, /v1/alarm. "
            "Operator: /v1/admin/*. Server 0 -> server 1: /v1/peer/*."
        ),
        openapi_tags=[{"name": "device"}, {"name": "admin"}, {"name": "peer"}, {"name": "health"}],
        # the interactive docs and the schema are not served unless [server] docs = true
        # (docs/openapi.json has the same description: python -m secemb.server.openapi)
        docs_url="/docs" if cfg.docs else None, redoc_url=None,
        openapi_url="/openapi.json" if cfg.docs else None,
    )
    app.state.node = node
    inference = NodeInference(node)

    def leader(what: str) -> LeaderNode:
        return _as_party(node, LeaderNode, what)

    def follower(what: str) -> FollowerNode:
        return _as_party(node, FollowerNode, what)

    install_error_handlers(app)

    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        return await run_in_threadpool(fn, *args)

    def binary(out: bytes | None) -> Response:
        return Response(status_code=204) if out is None else Response(out, media_type=OCTET)

    common: dict[str, Any] = {"responses": _ERRORS, "openapi_extra": {"security": _SECURITY}}

    # ------------------------------------------------------------------ health
    @app.get("/v1/health", tags=["health"], summary="Liveness (no authentication; reveals only the party)")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "party": cfg.party}

    # ------------------------------------------------------------------ device
    @app.get("/v1/round", tags=["device"], summary="The current round's public configuration", **common)
    async def get_round(request: Request) -> JSONResponse:
        p, _ = await authed(request, (USER, ADMIN, PEER), 0)
        return JSONResponse(await call(node.round_info, p.user_id))

    @app.post("/v1/count", tags=["device"], status_code=204,
              summary="Eq. 11: one share of the device's rating count (COUNT message)", responses=_ERRORS,
              openapi_extra=_binary("COUNT message (secemb.round.messages)") | {"security": _SECURITY})
    async def post_count(request: Request) -> Response:
        p, body = await authed(request, (USER,), 64)
        await call(node.count_submit, p.user_id, body)
        return Response(status_code=204)

    @app.post("/v1/rounds/{round_id}/retrieval", tags=["device"],
              summary="Retrieval request -> retrieval reply (204 for server 1 with relay)",
              responses=_ERRORS | {200: _BIN_RESPONSE, 204: {"description": "accepted, no reply (relay, server 1)"}},
              openapi_extra=_binary("retrieval_request protocol message") | {"security": _SECURITY})
    async def post_retrieval(round_id: RoundId, request: Request) -> Response:
        p, body = await authed(request, (USER,), _limit_message(node, "retrieval_request"))
        return binary(await call(node.retrieval, round_id, p.user_id, body))

    @app.get("/v1/rounds/{round_id}/dense", tags=["device"],
             summary="Server 0: the round's dense vector (DENSE message)",
             responses=_ERRORS | {200: _BIN_RESPONSE}, openapi_extra={"security": _SECURITY})
    async def get_dense(round_id: RoundId, request: Request) -> Response:
        await authed(request, (USER, ADMIN), 0)
        return binary(await call(leader("the dense vector").dense_message, round_id))

    @app.post("/v1/rounds/{round_id}/upload", tags=["device"],
              summary="Upload (aggregation message); without relay, server 1 answers with its receipt, which the "
                      "device appends to its upload to server 0",
              responses=_ERRORS | {200: _BIN_RESPONSE | {"description": "server 1 without relay: the upload_receipt "
                                                                         "message"},
                                   204: {"description": "accepted (server 0; server 1 with relay)"}},
              openapi_extra=_binary("upload protocol message (server 0 without relay: followed by server 1's "
                                    "upload_receipt)") | {"security": _SECURITY})
    async def post_upload(round_id: RoundId, request: Request) -> Response:
        limit = _limit_message(node, "upload")
        if node.party == 0 and node.receipts is not None and node.round is not None:
            limit = min(node.cfg.max_body_bytes, limit + messages.RECEIPT_BYTES)
        p, body = await authed(request, (USER,), limit)
        return binary(await call(node.upload, round_id, p.user_id, body))

    @app.get("/v1/rounds/{round_id}/challenge", tags=["device"],
             summary="Server 0, bounded payloads: the 16-byte projection challenge of the device's upload",
             responses=_ERRORS | {200: _BIN_RESPONSE}, openapi_extra={"security": _SECURITY})
    async def get_challenge(round_id: RoundId, request: Request) -> Response:
        p, _ = await authed(request, (USER,), 0)
        return binary(await call(leader("the bound challenge").challenge, round_id, p.user_id))

    @app.post("/v1/rounds/{round_id}/proof", tags=["device"], status_code=204,
              summary="Server 0, bounded payloads: the device's range proof for its challenge (bound_proof)",
              responses=_ERRORS, openapi_extra=_binary("bound_proof protocol message") | {"security": _SECURITY})
    async def post_proof(round_id: RoundId, request: Request) -> Response:
        p, body = await authed(request, (USER,), _limit_message(node, "bound_proof"))
        await call(leader("bound proofs").proof, round_id, p.user_id, body)
        return Response(status_code=204)

    @app.get("/v1/rounds/{round_id}/status", tags=["device"],
             summary="Outcome of a round (device: whether it was included; operator: the included ids)", **common)
    async def get_round_status(round_id: RoundId, request: Request) -> JSONResponse:
        p, _ = await authed(request, (USER, ADMIN, PEER), 0)
        return JSONResponse(await call(node.round_status, round_id, p.user_id))

    @app.post("/v1/alarm", tags=["device"], summary="A device reports a deviation it caught (a tampered retrieval "
              "answer, servers announcing different models): the server halts the deployment",
              responses=_ERRORS | {200: {"description": "recorded; the deployment is halted"}},
              openapi_extra=_json_body({"type": "object", "properties": {
                  "kind": {"type": "string", "enum": list(DEVICE_ALARMS)}, "round_id": {"type": "integer"},
                  "detail": {"type": "string"}}, "required": ["kind", "round_id"]}) | {"security": _SECURITY})
    async def post_alarm(request: Request) -> JSONResponse:
        p, body = await authed(request, (USER,), _ALARM_LIMIT)
        return JSONResponse(await call(node.device_alarm, p.user_id, json_object(body, _ALARM_LIMIT)))

    # ------------------------------------------------------------------ device: GREC inference
    @app.get("/v1/inference", tags=["device"], summary="GREC inference: the public model, R x d of the release, "
             "the candidate set and the message sizes", **common)
    async def get_inference(request: Request) -> JSONResponse:
        await authed(request, (USER, ADMIN), 0)
        return JSONResponse(await call(inference.info))

    @app.post("/v1/inference", tags=["device"],
              summary="GREC inference: the device's noisy representation (GRQ1) -> every candidate's score (GRS1)",
              responses=_ERRORS | {200: _BIN_RESPONSE},
              openapi_extra=_binary("GRQ1 inference request (secemb.inference.service)") | {"security": _SECURITY})
    async def post_inference(request: Request) -> Response:
        _, body = await authed(request, (USER,), inference.request_limit())
        version, reply = await call(inference.answer, body)
        return Response(reply, media_type=OCTET, headers={"X-Secemb-Model-Version": str(version)})

    # ------------------------------------------------------------------ operator
    @app.get("/v1/admin/status", tags=["admin"], summary="Server state", **common)
    async def admin_status(request: Request) -> JSONResponse:
        await authed(request, (ADMIN,), 0)
        return JSONResponse(await call(node.status))

    @app.post("/v1/admin/alarms/clear", tags=["admin"],
              summary="Forget this server's alarms and lift its halt (after the investigation)", **common)
    async def admin_clear_alarms(request: Request) -> JSONResponse:
        await authed(request, (ADMIN,), _limit_json(node))
        return JSONResponse(await call(node.clear_alarms))

    @app.post("/v1/admin/strikes/clear", tags=["admin"], responses=_ERRORS,
              summary="Server 0: forget the strikes (upload rejections: the door) of one device or of all",
              openapi_extra=_json_body({"type": "object", "properties": {"device": {"type": "integer"}}}, False)
              | {"security": _SECURITY})
    async def admin_clear_strikes(request: Request) -> JSONResponse:
        _, body = await authed(request, (ADMIN,), _limit_json(node))
        clear = leader("clearing the strikes").clear_strikes
        doc = json_object(body, _limit_json(node))
        if set(doc) - {"device"} or ("device" in doc and doc["device"] is None):
            raise InvalidParameters("a clear of the strikes is {} (every device's) or {'device': a user id}, got "
                                    f"fields {sorted(doc)}")
        return JSONResponse(await call(clear, doc.get("device")))

    @app.get("/v1/admin/model", tags=["admin"], summary="The public model (MODEL message)",
             responses=_ERRORS | {200: _BIN_RESPONSE}, openapi_extra={"security": _SECURITY})
    async def admin_model(request: Request) -> Response:
        await authed(request, (ADMIN,), 0)
        return binary(await call(node.model_message))

    @app.post("/v1/admin/count/open", tags=["admin"], summary="Server 0: start the Eq. 11 count phase",
              responses=_ERRORS, openapi_extra=_json_body(_USERS_BODY, False) | {"security": _SECURITY})
    async def admin_count_open(request: Request) -> JSONResponse:
        _, body = await authed(request, (ADMIN,), _limit_json(node))
        doc = json_object(body, _limit_json(node))
        return JSONResponse(await call(leader("opening the count phase").count_open, doc.get("users")))

    @app.post("/v1/admin/count/close", tags=["admin"], summary="Server 0: open the mean count, fix m'", **common)
    async def admin_count_close(request: Request) -> JSONResponse:
        await authed(request, (ADMIN,), _limit_json(node))
        return JSONResponse(await call(leader("closing the count phase").count_close))

    @app.get("/v1/admin/count", tags=["admin"], summary="Server 0, while the count phase is open: how many users "
             "sent their count share to each server and to both", **common)
    async def admin_count_progress(request: Request) -> JSONResponse:
        await authed(request, (ADMIN,), 0)
        return JSONResponse(await call(leader("the count phase's progress").count_progress))

    @app.post("/v1/admin/rounds", tags=["admin"], summary="Server 0: open the next round", responses=_ERRORS,
              openapi_extra=_json_body({"type": "object", "properties": {
                  "participants": _IDS, "n_p": {"type": "integer"}, "deadline_s": {"type": "number"},
                  "quorum": {"type": "integer"}, "min_users": {"type": "integer"}}}) | {"security": _SECURITY})
    async def admin_open_round(request: Request) -> JSONResponse:
        _, body = await authed(request, (ADMIN,), _limit_json(node))
        doc = json_object(body, _limit_json(node))
        unknown = set(doc) - {"participants", "n_p", "deadline_s", "quorum", "min_users"}
        if unknown:
            raise InvalidParameters(f"unknown field(s) {sorted(unknown)}")
        return JSONResponse(await call(lambda: leader("opening rounds").open_round(**doc)))

    @app.post("/v1/admin/rounds/{round_id}/close", tags=["admin"], summary="Server 0: close a round now; its outcome",
              **common)
    async def admin_close_round(round_id: RoundId, request: Request) -> JSONResponse:
        await authed(request, (ADMIN,), _limit_json(node))
        return JSONResponse(await call(leader("closing rounds").close_round, round_id))

    # ------------------------------------------------------------------ peer (server 0 -> server 1)
    @app.get("/v1/peer/status", tags=["peer"], summary="Server state, for server 0's reconciliation", **common)
    async def peer_status(request: Request) -> JSONResponse:
        await authed(request, (PEER,), 0)
        return JSONResponse(await call(node.status))

    @app.post("/v1/peer/count/open", tags=["peer"], summary="Restart the count phase", responses=_ERRORS,
              openapi_extra=_json_body(_USERS_BODY, False) | {"security": _SECURITY})
    async def peer_count_open(request: Request) -> JSONResponse:
        _, body = await authed(request, (PEER,), _limit_json(node))
        doc = json_object(body, _limit_json(node))
        return JSONResponse(await call(follower("the peer count phase").peer_count_open, doc.get("users")))

    @app.get("/v1/peer/count/users", tags=["peer"],
             summary="While the count phase is open: the users whose count share server 1 holds", **common)
    async def peer_count_users(request: Request) -> JSONResponse:
        await authed(request, (PEER,), 0)
        return JSONResponse({"users": await call(follower("the peer count phase").peer_count_users)})

    @app.post("/v1/peer/count/close", tags=["peer"], summary="Freeze the count phase; the users it holds", **common)
    async def peer_count_close(request: Request) -> JSONResponse:
        await authed(request, (PEER,), _limit_json(node))
        return JSONResponse({"users": await call(follower("the peer count phase").peer_count_close)})

    async def peer_include(request: Request) -> list[int]:
        """The ``include`` user list of a peer-signed JSON body (the agreed set of a share or check)."""
        _, body = await authed(request, (PEER,), _limit_json(node))
        return _ids(json_object(body, _limit_json(node)), "include", node)

    @app.post("/v1/peer/count/share", tags=["peer"], summary="Server 1's sum of the agreed users' count shares (COUNT)",
              responses=_ERRORS | {200: _BIN_RESPONSE},
              openapi_extra=_json_body({"type": "object", "properties": {"include": _IDS}, "required": ["include"]})
              | {"security": _SECURITY})
    async def peer_count_share(request: Request) -> Response:
        include = await peer_include(request)
        return binary(await call(follower("the peer count phase").peer_count_share, include))

    @app.post("/v1/peer/rounds", tags=["peer"], summary="Mirror the round server 0 opened", responses=_ERRORS,
              openapi_extra=_json_body({"type": "object"}) | {"security": _SECURITY})
    async def peer_open(request: Request) -> JSONResponse:
        _, body = await authed(request, (PEER,), _limit_json(node))
        return JSONResponse(await call(follower("peer round opening").peer_open, json_object(body, _limit_json(node))))

    @app.get("/v1/peer/rounds/{round_id}/ready", tags=["peer"],
             summary="Relay: whether a device sent its roots to server 1 (checked before server 0 evaluates)",
             responses=_ERRORS, openapi_extra={"security": _SECURITY, "parameters": [
                 {"name": "user", "in": "query", "required": True, "schema": {"type": "integer"}}]})
    async def peer_ready(round_id: RoundId, request: Request) -> JSONResponse:
        await authed(request, (PEER,), 0)
        return JSONResponse(await call(follower("relay readiness").peer_ready, round_id, _user_param(request, node)))

    @app.post("/v1/peer/rounds/{round_id}/relay-retrieval", tags=["peer"],
              summary="Relay: evaluate forwarded keys (relay_keys) -> masked shares (relay_answer)",
              responses=_ERRORS | {200: _BIN_RESPONSE},
              openapi_extra=_binary("relay_keys protocol message") | {"security": _SECURITY,
                  "parameters": [{"name": "user", "in": "query", "required": True, "schema": {"type": "integer"}}]})
    async def peer_relay_retrieval(round_id: RoundId, request: Request) -> Response:
        _, body = await authed(request, (PEER,), _limit_message(node, "relay_keys"))
        relay = follower("relay retrieval").peer_relay_retrieval
        return binary(await call(relay, round_id, _user_param(request, node), body))

    @app.post("/v1/peer/rounds/{round_id}/relay-upload", tags=["peer"], status_code=204,
              summary="Relay: absorb forwarded correction words (relay_upload)", responses=_ERRORS,
              openapi_extra=_binary("relay_upload protocol message") | {"security": _SECURITY,
                  "parameters": [{"name": "user", "in": "query", "required": True, "schema": {"type": "integer"}}]})
    async def peer_relay_upload(round_id: RoundId, request: Request) -> Response:
        _, body = await authed(request, (PEER,), _limit_message(node, "relay_upload"))
        await call(follower("relay upload").peer_relay_upload, round_id, _user_param(request, node), body)
        return Response(status_code=204)

    @app.get("/v1/peer/rounds/{round_id}/uploaded", tags=["peer"],
             summary="While the round is open: the users whose upload server 1 absorbed (server 0's quorum check)",
             **common)
    async def peer_uploaded(round_id: RoundId, request: Request) -> JSONResponse:
        await authed(request, (PEER,), 0)
        return JSONResponse({"uploaded": await call(follower("the peer upload count").peer_uploaded, round_id)})

    @app.post("/v1/peer/rounds/{round_id}/close", tags=["peer"], summary="Stop taking uploads; the users absorbed",
              **common)
    async def peer_close(round_id: RoundId, request: Request) -> JSONResponse:
        await authed(request, (PEER,), _limit_json(node))
        return JSONResponse(await call(follower("peer close").peer_close, round_id))

    @app.post("/v1/peer/rounds/{round_id}/verify", tags=["peer"],
              summary="Server 1's digests of the agreed users' uploads and its sketch check's verifier messages "
                      "(verified uploads, issue 34)",
              responses=_ERRORS,
              openapi_extra=_json_body({"type": "object", "properties": {"include": _IDS}, "required": ["include"]})
              | {"security": _SECURITY})
    async def peer_verify(round_id: RoundId, request: Request) -> JSONResponse:
        include = await peer_include(request)
        return JSONResponse(await call(follower("peer verify").peer_verify, round_id, include))

    @app.post("/v1/peer/rounds/{round_id}/bound", tags=["peer"],
              summary="Bounded payloads: server 0's bound_request -> server 1's verifier messages (bound_answer)",
              responses=_ERRORS | {200: _BIN_RESPONSE},
              openapi_extra=_binary("bound_request protocol message") | {"security": _SECURITY})
    async def peer_bound(round_id: RoundId, request: Request) -> Response:
        _, body = await authed(request, (PEER,), _limit_message(node, "bound_request", round_users=True))
        return binary(await call(follower("the peer bound check").peer_bound, round_id, body))

    @app.post("/v1/peer/rounds/{round_id}/share", tags=["peer"],
              summary="Server 1's aggregate share over exactly the agreed users (aggregate_share)",
              responses=_ERRORS | {200: _BIN_RESPONSE},
              openapi_extra=_json_body({"type": "object", "properties": {"include": _IDS}, "required": ["include"]})
              | {"security": _SECURITY})
    async def peer_share(round_id: RoundId, request: Request) -> Response:
        include = await peer_include(request)
        return binary(await call(follower("peer share").peer_share, round_id, include))

    @app.post("/v1/peer/rounds/{round_id}/agree", tags=["peer"],
              summary="Server 0's aggregate share (aggregate_share): server 1 applies the round's update as "
              "server 0 does; the digest of the model it computed", responses=_ERRORS,
              openapi_extra=_binary("aggregate_share protocol message of server 0") | {"security": _SECURITY})
    async def peer_agree(round_id: RoundId, request: Request) -> JSONResponse:
        _, body = await authed(request, (PEER,), _limit_message(node, "aggregate_share", party=0))
        return JSONResponse(await call(follower("peer agreement").peer_agree, round_id, body))

    @app.post("/v1/peer/rounds/{round_id}/abort", tags=["peer"], status_code=204, summary="Abort a round",
              **common)
    async def peer_abort(round_id: RoundId, request: Request) -> Response:
        _, body = await authed(request, (PEER,), _limit_json(node))
        reason = str(json_object(body, _limit_json(node)).get("reason", ""))[:500]
        await call(follower("peer abort").peer_abort, round_id, reason)
        return Response(status_code=204)

    @app.post("/v1/peer/model", tags=["peer"], summary="Model sync from server 0 (MODEL message)", responses=_ERRORS,
              openapi_extra=_binary("MODEL message (secemb.round.messages)") | {"security": _SECURITY,
                  "parameters": [{"name": "round", "in": "query", "required": True, "schema": {"type": "integer"}}]})
    async def peer_model(request: Request) -> JSONResponse:
        _, body = await authed(request, (PEER,), _limit_model(node))
        r = ascii_int(request.query_params.get("round"), "query parameter round", -1, _INT_END)
        return JSONResponse(await call(follower("model sync").peer_model, body, r))

    def custom_openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title="secemb server", version=app.version, description=app.description,
                                 routes=app.routes, tags=app.openapi_tags)
            schema.setdefault("components", {})["securitySchemes"] = {
                "keyId": {"type": "apiKey", "in": "header", "name": "X-Secemb-Key-Id",
                          "description": "server0 | server1 | admin | user:<id>"},
                "timestamp": {"type": "apiKey", "in": "header", "name": "X-Secemb-Timestamp",
                              "description": "unix time in milliseconds"},
                "nonce": {"type": "apiKey", "in": "header", "name": "X-Secemb-Nonce",
                          "description": "16-64 lowercase hex digits, never reused"},
                "signature": {"type": "apiKey", "in": "header", "name": "X-Secemb-Signature",
                              "description": "hex HMAC-SHA256 of the canonical request (docs/deployment.md)"},
            }
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = custom_openapi  # type: ignore[method-assign]
    return app


def _ids(doc: dict[str, Any], name: str, node: Node) -> list[int]:
    ids = doc.get(name)
    if not isinstance(ids, list):
        raise InvalidParameters(f"{name} must be a list of user ids")
    for u in ids:
        check_int(f"{name}: user id", u, low=0, high=node.cfg.num_users - 1)
    return ids
