"""The HTTP face of a one-server protocol's node (:class:`~secemb.protocols.base.ExchangeNode`,
e.g. SFSL's :class:`~secemb.protocols.sfsl.staged.SFSLNode`): the exchanges of the stage links
(:class:`~secemb.transport.links.StageLink`, :class:`~secemb.transport.links.StageAdmin`; their
client side is :mod:`secemb.transport.http`) as signed endpoints.

Every endpoint is signed (:mod:`secemb.transport.network`, checked by the same
:class:`~secemb.server.auth.Verifier` as the two-server app) by a device (``user:<id>``) or the
operator (``admin``)::

    GET  /v1/exchange/round                                  device or operator: the current round's document
    POST /v1/exchange/rounds/{round_id}/{stage}              device: its message of the stage (octets) -> 204
    GET  /v1/exchange/rounds/{round_id}/{stage}              device: the server's answer (octets; 204: none)
    POST /v1/admin/exchange/rounds                           operator: {"round_id", "users"} -> round document
    POST /v1/admin/exchange/rounds/{round_id}/{stage}/close  operator: close the stage
    GET  /v1/admin/exchange/rounds/{round_id}                operator: the round's outcome
    GET  /v1/admin/exchange/strikes                          operator: the devices' strikes (below)
    GET  /v1/admin/exchange/dropouts                         operator: the devices' aborting dropouts (below)
    POST /v1/admin/exchange/strikes/clear                    operator: forget them -> {"cleared": {...}}
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
it keeps anything of it, so a refused request changes nothing; a node with the deployment's
roster pin (:class:`~secemb.protocols.exchange.RosterPinnedNode`) checks a signed message's
certificate and signature too (400), and the device that sent it is then not among the stage's
senders: absent from the stage as a dropout is.  The node is called under one
lock (its state is one round's).  Served by :func:`secemb.server.listener.guarded_config`, it
has the two-server app's connection guards too (header and TLS handshake deadlines, a
connection limit).

The round document (``GET /v1/exchange/round``, 409 before the first round) is what the node's
``open_round`` returned (``round_id``, ``users``, ``stages`` and the protocol's public fields)
with ``stage`` (the open stage; ``null`` once the last one closed) and ``state`` (``open``,
``committed``, ``aborted``; after a restart of ``secemb serve``, the last round's until the next
opens: :mod:`secemb.server.exchange_state`) and, once an opening replaced an ended round,
``previous``: that round's ``{"round_id", "state"}`` (session 31, helper E: the operator may open
the next round as soon as one ended, before its devices read its end; the server then also keeps a
committed round's last stage's answers, which a device fetches as before, until the next opening
replaces them -- SecEA's; SFSL's last stage has none; a restart keeps neither).  Read by the
operator (``admin``: ``secemb admin status``) it also carries the node's ``reason`` and what the
round's secure aggregations found (:data:`FINDINGS`: ``bad_shares``, ``proven_bad_shares``,
``complaints``), which the journal keeps with the round's end (``proven_bad_shares`` also as soon
as a stage's close finds them, so that a round open when the server stops still strikes); they are
for the operator to read
(docs/deployment.md, "What the operator reads of a round"), and one thing depends on them: with a
durable state (``secemb serve``: :mod:`secemb.server.exchange_state`), each device of a round's
``proven_bad_shares`` (a signed secure aggregation showed it cheating) has a strike, and a device with
:data:`~secemb.server.verify.MAX_REJECTIONS` strikes is refused at the door -- 403 at its stage
messages and answers (nothing of the request is read by the node) -- and left out of the rounds
the operator opens (the operator's answer to the open lists it in ``refused``) until the operator
clears the strikes (``POST /v1/admin/exchange/strikes/clear``: ``secemb admin clear-alarms``).
``GET /v1/admin/exchange/strikes`` is ``{"strikes": {"device": count}, "strike_limit",
"refused": [devices]}`` (``secemb admin status``).  Complaints and an unsigned aggregation's
``bad_shares`` never strike.  Likewise (session 26, red team F's S26-F1) each device of a round's
``aborting_dropouts`` (named for the round's abort: its dropout breached ``min_row_holders``, or,
session 27, the complaints against it alone left its secret short; a suspicion, not a proof) has
one more aborted round, and one named for :data:`~secemb.server.verify.MAX_ABORTS` of the last
:data:`~secemb.server.verify.ABORT_WINDOW` rounds the server ran is refused at the door as above
until enough of them leave the window (session 27: a rate, not a count) or the same clear;
``GET /v1/admin/exchange/dropouts`` is ``{"dropouts": {"device": rounds in the window},
"dropout_limit", "dropout_window", "refused": [devices], "let_in_after": {"device": rounds}}``
(``secemb admin status``: ``dropouts``; ``let_in_after``: how many more rounds must end before the
window lets a refused device in again).

With ``stage_deadline_s`` (``secemb serve``: no operator drives the stages) the server closes a
stage itself as soon as every device still in the round has sent its message of it, or, once
``stage_deadline_s`` has passed since the stage opened, at the next request that reads the round
(devices poll it while they wait): a stage with an answer keeps the devices the node answers,
one without keeps those that sent. Without it the operator closes each stage (``POST
.../close``: the in-process player's order, :func:`secemb.sim.player.play`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from secemb.errors import InvalidParameters, ProtocolError, SecembError, check_int
from secemb.protocols.base import ExchangeNode
from secemb.server.auth import Forbidden, Principal, Verifier
from secemb.server.exchange_state import DROPOUTS, ExchangeState
from secemb.server.gate import Gate, install_error_handlers
from secemb.server.parsing import ascii_int, json_object
from secemb.server.verify import ABORT_WINDOW, MAX_ABORTS, MAX_REJECTIONS

__all__ = ["FINDINGS", "StageCloser", "create_exchange_app"]

OCTET = "application/octet-stream"
_JSON_LIMIT = 1 << 20
#: what a node's outcome says its secure aggregations found about the devices (``bad_shares``,
#: ``proven_bad_shares``, ``complaints``: :func:`~secemb.protocols.exchange.secagg_findings`): in
#: the operator's round document and the journal's record of the round's end, never in a device's
#: round document
FINDINGS = ("bad_shares", "proven_bad_shares", "complaints", DROPOUTS)
#: what the operator's round document has and a device's never: the node's ``reason`` (an aborted
#: signed round's can name the device found cheating) and the :data:`FINDINGS`
_OPERATOR_ONLY = ("reason", *FINDINGS)


@dataclass
class StageCloser:
    """The current round of ``node`` as its devices see it, (with ``deadline_s``) the server
    closing its stages itself and (with ``state``) the door refusing a device with
    :data:`~secemb.server.verify.MAX_REJECTIONS` strikes (see the module docstring).  Called
    under the app's lock."""

    node: ExchangeNode
    deadline_s: float | None = None
    #: the durable state (``secemb serve``): told of each round opened and ended
    state: ExchangeState | None = None
    opened: dict[str, Any] | None = None
    stage: int = 0
    active: set[int] = field(default_factory=set)
    senders: set[int] = field(default_factory=set)
    since: float = 0.0
    #: the round the last opening replaced, if it had ended: ``{"round_id", "state", "stage"}`` (the
    #: round document's ``previous`` has the first two; ``stage``: its last, if it committed once
    #: that stage closed with answers, else ``None``) and that stage's answers to the devices still
    #: in it (what :meth:`reply` serves them: the node keeps one round)
    previous: dict[str, Any] | None = None
    kept: dict[int, bytes] = field(default_factory=dict)

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        """Open round ``round_id`` at the node for ``users`` but those the door refuses; the
        node's round document (what the devices read), with a state also ``refused``: the
        sorted devices of ``users`` left out (the operator's answer only).

        Raises
        ------
        ProtocolError: a round is still open (with a state, refused before the journal records
            anything: a refused end of the open round's id would read as that round's end at a
            restart, which would then open its id again), or ``round_id`` does not follow the last.
        SecembError: the node refuses the round (with a state, journaled as refused; if the disk
            refuses that record, it is owed and written before the next opening: session 27, S27-L2).
        StorageError: the disk refused to record the opening, or a record still owed (nothing opened).
        """
        previous, kept = self._replaced()
        if self.state is None:
            doc = self.node.open_round(round_id, users)
            answer = doc
        else:
            if self.opened is not None and self.node.outcome(self.opened["round_id"])["state"] == "open":
                raise ProtocolError(f"round {self.opened['round_id']} is still open")
            refused = sorted({u for u in users if self.state.refuses(u)})
            users = [u for u in users if u not in refused]
            self.state.opening(round_id, users)
            try:
                doc = self.node.open_round(round_id, users)
            except SecembError as exc:
                self.state.refused(round_id, str(exc))
                raise
            answer = {**doc, "refused": refused}
        self.opened, self.stage, self.active, self.senders = doc, 0, set(doc["users"]), set()
        self.since, self.previous, self.kept = time.monotonic(), previous, kept
        return answer

    def _replaced(self) -> tuple[dict[str, Any] | None, dict[int, bytes]]:
        """The current round as an opening replaces it: its end (``None``: no round, or one still
        open) and, committed, its last stage's answers to the devices still in it (none if that
        stage has none).  A device may read them after the next round opened (session 31, helper E:
        the operator opens it once the round committed, while the devices fetch their last answers)."""
        if self.opened is None:
            return None, {}
        round_id, stages = self.opened["round_id"], self._stages()
        state = self.node.outcome(round_id)["state"]
        if state == "open":
            return None, {}
        done = state == "committed" and self.stage == len(stages) and self.node.plan.replies(stages[-1])
        last = stages[-1] if done else None
        kept = {} if last is None else \
            {u: a for u in self.active if (a := self.node.reply(round_id, last, u)) is not None}
        return {"round_id": round_id, "state": state, "stage": last}, kept

    def door(self, user: int) -> None:
        """Let device ``user``'s stage request in, unless it has the strikes, or the aborting
        dropouts, that refuse it.

        Raises
        ------
        Forbidden: it does (HTTP 403).
        """
        if self.state is None or not self.state.refuses(user):
            return
        if self.state.strikes.get(user, 0) >= MAX_REJECTIONS:
            raise Forbidden(f"device {user} was shown to have cheated in the secure aggregation of "
                            f"{self.state.strikes[user]} signed rounds (proven_bad_shares; the limit is "
                            f"{MAX_REJECTIONS}): refused until the operator clears the strikes "
                            "('secemb admin clear-alarms')")
        raise Forbidden(f"device {user} was named for the abort of {self.state.dropouts[user]} of the last "
                        f"{ABORT_WINDOW} rounds (aborting_dropouts: its dropout breached min_row_holders, or the "
                        f"complaints against it alone left its secret short; the limit is {MAX_ABORTS}): refused for "
                        f"{self.state.let_in_after(user)} more round(s), or until the operator clears it "
                        "('secemb admin clear-alarms')")

    def strikes(self) -> dict[str, Any]:
        """The devices' strikes as the operator reads them (``GET /v1/admin/exchange/strikes``):
        ``strikes`` (device id as a string -> count), ``strike_limit`` and ``refused`` (the
        sorted devices at it); none without a state."""
        got = {} if self.state is None else self.state.strikes
        return {"strikes": {str(u): n for u, n in sorted(got.items())}, "strike_limit": MAX_REJECTIONS,
                "refused": sorted(u for u, n in got.items() if n >= MAX_REJECTIONS)}

    def dropouts(self) -> dict[str, Any]:
        """The devices' aborting dropouts as the operator reads them (``GET
        /v1/admin/exchange/dropouts``): ``dropouts`` (device id as a string -> the rounds among the
        last ``dropout_window`` whose aborts named it), ``dropout_limit``, ``dropout_window``,
        ``refused`` (the sorted devices at the limit) and ``let_in_after`` (each of those -> how many
        more rounds must end before the window lets it in again); none without a state."""
        got = {} if self.state is None else self.state.dropouts
        wait = {u: self.state.let_in_after(u) for u in got} if self.state is not None else {}
        return {"dropouts": {str(u): n for u, n in got.items()}, "dropout_limit": MAX_ABORTS,
                "dropout_window": ABORT_WINDOW, "refused": sorted(u for u, n in wait.items() if n > 0),
                "let_in_after": {str(u): n for u, n in sorted(wait.items()) if n > 0}}

    def clear_strikes(self) -> dict[str, Any]:
        """The operator's clear (``POST /v1/admin/exchange/strikes/clear``), of the strikes and the
        aborting dropouts: ``{"cleared": {device: strikes}}`` (nothing without a state).

        Raises
        ------
        StorageError: the disk refused to record it (HTTP 503; nothing cleared).
        """
        cleared = {} if self.state is None else self.state.clear_strikes()
        return {"cleared": {str(u): n for u, n in cleared.items()}}

    def _stages(self) -> list[str]:
        assert self.opened is not None
        return list(self.opened.get("stages", self.node.plan.stages))

    def receive(self, round_id: int, stage: str, user: int, body: bytes) -> None:
        """Device ``user``'s message of ``stage`` (past the :meth:`door`) to the node."""
        self.door(user)
        self.node.receive(round_id, stage, user, body)
        if self.opened is None or self.opened["round_id"] != round_id:
            return
        self.senders.add(user)
        if self.deadline_s is not None and self.senders >= self.active:
            self._close_quietly(round_id, stage)

    def reply(self, round_id: int, stage: str, user: int) -> bytes | None:
        """The node's answer to device ``user`` (past the :meth:`door`) in ``stage``; of the
        committed round the last opening replaced, its last stage's answer kept (``None``: none)."""
        self.door(user)
        before, now = self.previous, self.opened
        if before is not None and now is not None and before["stage"] is not None and stage == before["stage"] \
                and round_id == before["round_id"] != now["round_id"]:
            return self.kept.get(user)
        return self.node.reply(round_id, stage, user)

    def close(self, round_id: int, stage: str) -> None:
        try:
            self.node.close(round_id, stage)
        finally:
            self._record(round_id)
        if self.opened is None or self.opened["round_id"] != round_id:
            return
        if self.node.plan.replies(stage):
            self.active = {u for u in self.senders if self.node.reply(round_id, stage, u) is not None}
        else:
            self.active = set(self.senders)
        self.stage, self.senders, self.since = self.stage + 1, set(), time.monotonic()

    def _record(self, round_id: int) -> None:
        """After a close: tell the durable state of the round's end (committed or aborted) once,
        or, the round still open, of the devices its signed secure aggregations have proven so
        far (:meth:`~secemb.server.exchange_state.ExchangeState.found`: journaled before the
        round goes on)."""
        if self.state is None or self.opened is None or self.opened["round_id"] != round_id:
            return
        out = self.node.outcome(round_id)
        if out["state"] == "open":
            if out.get("proven_bad_shares"):
                self.state.found(round_id, out["proven_bad_shares"])
        elif self.state.last is None or self.state.last["round_id"] != round_id:
            self.state.ended({**self.opened, "stage": None, "state": out["state"], "reason": out.get("reason"),
                              **_findings(out)})

    def _close_quietly(self, round_id: int, stage: str) -> None:
        """Close ``stage`` on the server's own initiative: a refusal (too few devices left: the
        node aborts the round) is the round's state, not the error of the request that triggered it."""
        try:
            self.close(round_id, stage)
        except ProtocolError:
            pass

    def document(self, operator: bool = False) -> dict[str, Any]:
        """The current round's document (closing an overdue stage first, see the module docstring);
        the ``operator``'s also has the node's ``reason`` and its :data:`FINDINGS` (so far, or
        as the round ended), a device's neither, after a restart too (the last round's document
        as the journal recorded it, less those fields).

        Raises
        ------
        ProtocolError: no round yet.
        """
        if self.opened is None:
            if self.state is not None and self.state.last is not None:
                last = dict(self.state.last)  # the last round before the restart, as the journal recorded it
                return last if operator else {k: v for k, v in last.items() if k not in _OPERATOR_ONLY}
            raise ProtocolError("no round has been opened yet")
        round_id, stages = self.opened["round_id"], self._stages()
        out = self.node.outcome(round_id)
        overdue = self.deadline_s is not None and time.monotonic() - self.since > self.deadline_s
        if out["state"] == "open" and self.stage < len(stages) and overdue:
            self._close_quietly(round_id, stages[self.stage])
            out = self.node.outcome(round_id)
        state = out["state"]
        doc = {**self.opened, "stage": stages[self.stage] if self.stage < len(stages) and state == "open" else None,
               "state": state}
        if self.previous is not None:
            doc["previous"] = {k: self.previous[k] for k in ("round_id", "state")}
        return {**doc, "reason": out.get("reason"), **_findings(out)} if operator else doc


def _findings(outcome: dict[str, Any]) -> dict[str, Any]:
    """The :data:`FINDINGS` a node's ``outcome`` has (a protocol without secure aggregation: none)."""
    return {k: outcome[k] for k in FINDINGS if k in outcome}


#: round ids are in [0, _ROUND_ID_END): the nodes' range (SFSLNode, SecEANode), checked at the door
_ROUND_ID_END = 2**62


def create_exchange_app(node: ExchangeNode, verifier: Verifier, *, max_body_bytes: int,
                        model: Callable[[], bytes], read_timeout_s: float, max_body_reads: int,
                        stage_deadline_s: float | None = None, state: ExchangeState | None = None) -> FastAPI:
    """The app serving ``node``: ``verifier`` checks every request, ``max_body_bytes`` bounds a
    device's message (the protocol's largest at the run's public sizes), ``model`` gives the
    public model's bytes; ``read_timeout_s`` and ``max_body_reads`` bound the bodies read before
    their signature is checked (:class:`~secemb.server.gate.Gate`); ``stage_deadline_s``: the
    server closes the stages itself (:class:`StageCloser`; ``None``: the operator closes them);
    ``state``: the durable state it records its rounds in (``secemb serve``;
    :mod:`secemb.server.exchange_state`), restored already."""
    app = FastAPI(title="secemb one-server node", docs_url=None, redoc_url=None, openapi_url=None)
    lock = threading.Lock()
    rounds = StageCloser(node, stage_deadline_s, state)
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
        return ascii_int(raw, "path parameter round_id", 0, _ROUND_ID_END)

    @app.get("/v1/exchange/round")
    async def current(request: Request) -> dict[str, Any]:
        principal, _ = await gate.admit(request, ("user", "admin"), 0)
        out: dict[str, Any] = await call(rounds.document, principal.kind == "admin")
        return out

    @app.post("/v1/exchange/rounds/{round_id}/{stage}")
    async def send(round_id: str, stage: str, request: Request) -> Response:
        principal, body = await authed(request, "user", max_body_bytes)
        assert principal.user_id is not None
        await call(rounds.receive, rid(round_id), stage, principal.user_id, body)
        return Response(status_code=204)

    @app.get("/v1/exchange/rounds/{round_id}/{stage}")
    async def fetch(round_id: str, stage: str, request: Request) -> Response:
        principal, _ = await authed(request, "user", 0)
        assert principal.user_id is not None
        out = await call(rounds.reply, rid(round_id), stage, principal.user_id)
        return Response(status_code=204) if out is None else Response(out, media_type=OCTET)

    @app.post("/v1/admin/exchange/rounds")
    async def open_round(request: Request) -> dict[str, Any]:
        _, body = await authed(request, "admin", _JSON_LIMIT)
        doc = json_object(body, _JSON_LIMIT)
        # the node's range, checked before the opening is journaled (session 30, S30-F1: a journaled
        # opening of round -1 left a journal secemb serve refused to restart from)
        round_id = check_int("round_id", doc.get("round_id"), low=0, high=_ROUND_ID_END - 1)
        users = doc.get("users")
        if not isinstance(users, list):
            raise InvalidParameters(f"users must be a list of ints, got {users!r:.80}")
        out: dict[str, Any] = await call(rounds.open_round, round_id, [check_int("a user id", u) for u in users])
        return out

    @app.post("/v1/admin/exchange/rounds/{round_id}/{stage}/close")
    async def close(round_id: str, stage: str, request: Request) -> dict[str, Any]:
        await authed(request, "admin", 64)  # an empty JSON document
        await call(rounds.close, rid(round_id), stage)
        return {"round_id": int(round_id), "closed": stage}

    @app.get("/v1/admin/exchange/rounds/{round_id}")
    async def outcome(round_id: str, request: Request) -> dict[str, Any]:
        await authed(request, "admin", 0)
        out: dict[str, Any] = await call(node.outcome, rid(round_id))
        return out

    @app.get("/v1/admin/exchange/strikes")
    async def strikes(request: Request) -> dict[str, Any]:
        await authed(request, "admin", 0)
        out: dict[str, Any] = await call(rounds.strikes)
        return out

    @app.get("/v1/admin/exchange/dropouts")
    async def dropouts(request: Request) -> dict[str, Any]:
        await authed(request, "admin", 0)
        out: dict[str, Any] = await call(rounds.dropouts)
        return out

    @app.post("/v1/admin/exchange/strikes/clear")
    async def clear_strikes(request: Request) -> dict[str, Any]:
        _, body = await authed(request, "admin", 64)  # an empty JSON document
        if doc := json_object(body, 64):  # no clear of one device here (session 31, S31-R2-2: it cleared all)
            raise InvalidParameters(f"a one-server node clears every device's strikes at once: send {{}}, got fields "
                                    f"{sorted(doc)[:5]}")
        out: dict[str, Any] = await call(rounds.clear_strikes)
        return out

    @app.get("/v1/admin/model")
    async def public_model(request: Request) -> Response:
        await authed(request, "admin", 0)
        return Response(await call(model), media_type=OCTET)

    return app
