"""The links (:mod:`secemb.transport.links`) over HTTP: signed requests to a server process (``secemb serve``).

Two-server protocols: :class:`HttpServerLink` is a device's connection (signed with its
per-device key), :class:`HttpAdminLink` the operator's (signed with the server's admin secret);
the server is :mod:`secemb.server.app`.  One-server protocols: :class:`HttpStageLink` and
:class:`HttpStageAdmin`, the same signing, to a node served by
:func:`secemb.server.exchange_app.create_exchange_app`.  Endpoint paths live here and in those
two server modules only; see ``docs/deployment.md``.  Bodies are the protocol's exact message
bytes; the figures a run reports are ``len()`` of them.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from secemb.errors import InvalidMessage
from secemb.protocols.base import BOUND_CHALLENGE_BYTES
from secemb.transport.limits import ANSWER_FLOOR_BYTES, ROUND_DOCUMENT_BYTES, answer_limit_for
from secemb.transport.network import ApiClient, answer_fields

__all__ = ["HttpAdminLink", "HttpServerLink", "HttpStageAdmin", "HttpStageLink"]


class HttpServerLink:
    """Device ``user``'s signed connection to server ``party`` at ``url`` (``http`` an
    optional shared ``httpx.Client`` pool for simulations of many devices, whose answers are
    paced at the socket only over a ``PacedTransport``, see :class:`ApiClient`'s ``timeout``; ``tls`` the context
    that verifies the server, e.g. pinning the deployment's CA).  It reads answers of at most
    :data:`~secemb.transport.network.ANSWER_FLOOR_BYTES` (``api.max_answer_bytes``; a round's
    :class:`~secemb.client.device.RoundSession` raises it to the round's sizes)."""

    def __init__(self, party: int, user: int, url: str, key: bytes, *, timeout: float = 60.0,
                 http: httpx.Client | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.party, self.user = int(party), int(user)
        self.api = ApiClient(url, f"user:{self.user}", key, timeout=timeout, http=http, tls=tls)

    def round_info(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.api.get_json("/v1/round", most_bytes=ROUND_DOCUMENT_BYTES)
        return doc

    def count(self, body: bytes) -> None:
        self.api.post_bytes("/v1/count", body)

    def retrieval(self, round_id: int, body: bytes) -> bytes | None:
        return self.api.post_bytes(f"/v1/rounds/{round_id}/retrieval", body)

    def dense(self, round_id: int) -> bytes:
        return self.api.get_bytes(f"/v1/rounds/{round_id}/dense")

    def upload(self, round_id: int, body: bytes) -> bytes | None:
        return self.api.post_bytes(f"/v1/rounds/{round_id}/upload", body)

    def challenge(self, round_id: int) -> bytes:
        """Bounded payloads: server 0's challenge of this device's upload (InvalidMessage unless
        exactly :data:`~secemb.protocols.base.BOUND_CHALLENGE_BYTES` bytes)."""
        path = f"/v1/rounds/{round_id}/challenge"
        got = self.api.get_bytes(path)
        if len(got) != BOUND_CHALLENGE_BYTES:
            raise InvalidMessage(f"GET {self.api.base_url}{path}: a challenge of {len(got)} bytes, "
                                 f"not {BOUND_CHALLENGE_BYTES}")
        return got

    def proof(self, round_id: int, body: bytes) -> None:
        """Bounded payloads: this device's ``bound_proof`` message to server 0."""
        self.api.post_bytes(f"/v1/rounds/{round_id}/proof", body)

    def round_status(self, round_id: int) -> dict[str, Any]:
        doc: dict[str, Any] = self.api.get_json(f"/v1/rounds/{round_id}/status")
        return doc

    def alarm(self, report: dict[str, Any]) -> None:
        self.api.post_json("/v1/alarm", report)

    def inference_info(self) -> dict[str, Any]:
        """GREC inference: the public description (``GET /v1/inference``)."""
        doc: dict[str, Any] = self.api.get_json("/v1/inference")
        return doc

    def inference(self, body: bytes) -> tuple[bytes, int]:
        """GREC inference: a GRQ1 request; ``(the GRS1 reply, the model version it was scored on)``
        (-1: the reply names none; InvalidMessage: a version that is not an integer)."""
        resp = self.api.request("POST", "/v1/inference", body=body)
        version = resp.headers.get("X-Secemb-Model-Version", "-1")
        try:
            return resp.content, int(version)
        except ValueError:
            raise InvalidMessage(f"POST {self.api.base_url}/v1/inference: model version {version!r:.40} is not an "
                                 "integer") from None

    def close(self) -> None:
        self.api.close()


class HttpAdminLink:
    """The operator's signed connection to server ``party`` (an :class:`ApiClient` keyed
    with that server's admin secret).  The JSON answers it returns are checked to be objects
    with the fields their readers use (:meth:`_answer`: InvalidMessage naming the server
    otherwise -- ``secemb admin`` exits 1)."""

    def __init__(self, party: int, api: ApiClient) -> None:
        self.party, self.api = int(party), api

    def _answer(self, path: str, doc: Any, **kinds: type) -> dict[str, Any]:
        """The server's answer ``doc`` to ``path`` (:func:`~secemb.transport.network.answer_fields`)."""
        return answer_fields(doc, f"server {self.party} ({self.api.base_url}{path})", **kinds)

    def status(self) -> dict[str, Any]:
        return self._answer("/v1/admin/status", self.api.get_json("/v1/admin/status"), model_version=int)

    def model(self) -> bytes:
        return self.api.get_bytes("/v1/admin/model")

    def count_open(self, users: list[int]) -> dict[str, Any]:
        doc: dict[str, Any] = self.api.post_json("/v1/admin/count/open", {"users": users})
        return doc

    def count_progress(self) -> dict[str, Any]:
        path = "/v1/admin/count"
        return self._answer(path, self.api.get_json(path), server0=int, server1=int, both=int)

    def count_close(self) -> dict[str, Any]:
        path = "/v1/admin/count/close"
        return self._answer(path, self.api.post_json(path), m_prime=int, mean_count=float, users=int)

    def open_round(self, participants: list[int], deadline_s: float) -> dict[str, Any]:
        doc = self.api.post_json("/v1/admin/rounds", {"participants": participants, "deadline_s": deadline_s})
        return self._answer("/v1/admin/rounds", doc, round_id=int, state=str)

    def close_round(self, round_id: int) -> dict[str, Any]:
        path = f"/v1/admin/rounds/{round_id}/close"
        return self._answer(path, self.api.post_json(path), round_id=int, state=str)

    def round_status(self, round_id: int) -> dict[str, Any]:
        path = f"/v1/rounds/{round_id}/status"
        return self._answer(path, self.api.get_json(path), state=str)

    def clear_alarms(self) -> dict[str, Any]:
        path = "/v1/admin/alarms/clear"
        return self._answer(path, self.api.post_json(path), cleared=int)

    def clear_strikes(self, device: int | None) -> dict[str, Any]:
        path = "/v1/admin/strikes/clear"
        return self._answer(path, self.api.post_json(path, {} if device is None else {"device": device}), cleared=dict)

    def close(self) -> None:
        self.api.close()


class HttpStageLink:
    """Device ``user``'s :class:`~secemb.transport.links.PolledStageLink` to a one-server node
    (``api``: an :class:`ApiClient` signing as ``user:<user>``; it reads answers of at most its
    ``max_answer_bytes``, which :meth:`bound_answers` sets)."""

    def __init__(self, user: int, api: ApiClient) -> None:
        self.user, self.api = int(user), api

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        self.api.post_bytes(f"/v1/exchange/rounds/{round_id}/{stage}", body)

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        resp = self.api.request("GET", f"/v1/exchange/rounds/{round_id}/{stage}")
        return None if resp.status_code == 204 else resp.content

    def bound_answers(self, longest: int | None) -> None:
        """Set ``api.max_answer_bytes`` to :func:`~secemb.transport.limits.answer_limit_for`
        ``longest`` (``None``: :data:`~secemb.transport.limits.ANSWER_FLOOR_BYTES`), unless the
        client reads unbounded (``None``: a simulation's own server), which it leaves so."""
        if self.api.max_answer_bytes is not None:
            self.api.max_answer_bytes = ANSWER_FLOOR_BYTES if longest is None else answer_limit_for(longest)

    def round_info(self) -> dict[str, Any]:
        """The current round's document (``stage``: the open stage, ``state``).

        Raises
        ------
        InvalidMessage: the server's answer is not one (:func:`_round_document`): the device
        reads nothing else of it.
        """
        return _round_document(self.api.get_json("/v1/exchange/round", most_bytes=ROUND_DOCUMENT_BYTES), current=True)

    def close(self) -> None:
        self.api.close()


class HttpStageAdmin:
    """The operator's :class:`~secemb.transport.links.StageAdmin` to a one-server node (``api``:
    an :class:`ApiClient` signing as ``admin``)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        """Open round ``round_id`` for ``users``; its document (InvalidMessage if the server's
        answer is not one, :func:`_round_document`)."""
        doc = self.api.post_json("/v1/admin/exchange/rounds", {"round_id": round_id, "users": users})
        return _round_document(doc, current=False)

    def close_stage(self, round_id: int, stage: str) -> None:
        self.api.post_json(f"/v1/admin/exchange/rounds/{round_id}/{stage}/close")

    def round_status(self, round_id: int) -> dict[str, Any]:
        """The round's outcome (InvalidMessage naming the server if it is not a JSON object with a
        str ``state``, the field every reader of it reads)."""
        path = f"/v1/admin/exchange/rounds/{round_id}"
        return answer_fields(self.api.get_json(path), f"the server ({self.api.base_url}{path})", state=str)

    def model(self) -> bytes:
        """The public model's bytes."""
        return self.api.get_bytes("/v1/admin/model")

    def round_info(self) -> dict[str, Any]:
        """The current round's document, checked as a device checks it
        (:meth:`HttpStageLink.round_info`)."""
        return _round_document(self.api.get_json("/v1/exchange/round", most_bytes=ROUND_DOCUMENT_BYTES), current=True)

    def strikes(self) -> dict[str, Any]:
        """The devices' strikes (:class:`~secemb.server.exchange_app.StageCloser`): ``strikes``
        (device id as a string -> its count), ``strike_limit`` and ``refused`` (InvalidMessage
        naming the server if the answer is not that)."""
        return self._counts("strikes", "strike_limit")

    def dropouts(self) -> dict[str, Any]:
        """The devices' aborting dropouts (:meth:`~secemb.server.exchange_app.StageCloser.dropouts`):
        ``dropouts`` (device id as a string -> the rounds among the last ``dropout_window`` whose
        abort named it: its dropout breached ``min_row_holders``, or the complaints against it alone
        left its secret short), ``dropout_limit``,
        ``dropout_window``, ``refused`` and ``let_in_after`` (device id -> the rounds until the window
        lets it in again; InvalidMessage naming the server if the answer is not that)."""
        return self._counts("dropouts", "dropout_limit", ints=("dropout_window",), maps=("let_in_after",))

    def _counts(self, name: str, limit: str, *, ints: tuple[str, ...] = (),
                maps: tuple[str, ...] = ()) -> dict[str, Any]:
        """``GET /v1/admin/exchange/{name}``, checked: ``name`` and each of ``maps`` (device id -> a
        positive count), ``limit`` and each of ``ints`` (an int), ``refused`` (a list)."""
        path = f"/v1/admin/exchange/{name}"
        where = f"the server ({self.api.base_url}{path})"
        fields = {name: dict, **{m: dict for m in maps}, limit: int, **{i: int for i in ints}, "refused": list}
        doc = answer_fields(self.api.get_json(path), where, **fields)
        for m in (name, *maps):
            if not all(k.isascii() and k.isdigit() and type(n) is int and n > 0 for k, n in doc[m].items()):
                raise InvalidMessage(f"{where}: field '{m}': device id -> count expected, got {doc[m]!r:.80}")
        return {k: doc[k] for k in fields}

    def clear_strikes(self) -> dict[str, Any]:
        """Forget the devices' strikes (journaled by the server); ``{"cleared": {device id: count}}``
        (InvalidMessage naming the server if the answer is not an object with that field)."""
        path = "/v1/admin/exchange/strikes/clear"
        return answer_fields(self.api.post_json(path), f"the server ({self.api.base_url}{path})", cleared=dict)

    def close(self) -> None:
        self.api.close()


def _round_document(doc: Any, *, current: bool) -> dict[str, Any]:
    """A one-server node's round document ``doc``, as the server answered it: a JSON object
    with an int ``round_id``, ``users`` a list of ints and ``stages`` (if there) a list of str;
    the current round's (``current``: ``GET /v1/exchange/round``) also a str ``state``,
    ``stage`` (if there) a str or null and ``previous`` (if there: the end of the round the last
    opening replaced) an object with an int ``round_id`` and a ``state``, ``committed`` or
    ``aborted`` (a round that ended).

    Raises
    ------
    InvalidMessage: otherwise ("the server's round document is malformed", its first 200
    characters).
    """
    users, stages = (doc.get("users"), doc.get("stages", [])) if isinstance(doc, dict) else (None, None)
    ok = (isinstance(users, list) and isinstance(stages, list) and type(doc.get("round_id")) is int
          and all(type(u) is int for u in users) and all(isinstance(s, str) for s in stages))
    if ok and current:
        before = doc.get("previous", {"round_id": 0, "state": "aborted"})
        ok = (isinstance(doc.get("state"), str) and isinstance(doc.get("stage", ""), (str, type(None)))
              and isinstance(before, dict) and type(before.get("round_id")) is int
              and before.get("state") in ("committed", "aborted"))
    if not ok:
        raise InvalidMessage(f"the server's round document is malformed: {str(doc)[:200]}")
    out: dict[str, Any] = doc
    return out
