"""The links (:mod:`secemb.transport.links`) over HTTP: signed requests to a server process (``secemb serve``).

:class:`HttpServerLink` is a device's connection (signed with its per-device key),
:class:`HttpAdminLink` the operator's (signed with the server's admin secret).  Endpoint paths
live here and in :mod:`secemb.server.app` only; see ``docs/deployment.md``.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from secemb.errors import InvalidMessage
from secemb.transport.network import ApiClient, answer_fields

__all__ = ["HttpAdminLink", "HttpServerLink"]


class HttpServerLink:
    """Device ``user``'s signed connection to server ``party`` at ``url`` (``http`` an
    optional shared ``httpx.Client`` pool for simulations of many devices; ``tls`` the context
    that verifies the server, e.g. pinning the deployment's CA)."""

    def __init__(self, party: int, user: int, url: str, key: bytes, *, timeout: float = 60.0,
                 http: httpx.Client | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.party, self.user = int(party), int(user)
        self.api = ApiClient(url, f"user:{self.user}", key, timeout=timeout, http=http, tls=tls)

    def round_info(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.api.get_json("/v1/round")
        return doc

    def count(self, body: bytes) -> None:
        self.api.post_bytes("/v1/count", body)

    def retrieval(self, round_id: int, body: bytes) -> bytes | None:
        return self.api.post_bytes(f"/v1/rounds/{round_id}/retrieval", body)

    def dense(self, round_id: int) -> bytes:
        return self.api.get_bytes(f"/v1/rounds/{round_id}/dense")

    def upload(self, round_id: int, body: bytes) -> None:
        self.api.post_bytes(f"/v1/rounds/{round_id}/upload", body)

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

    def close(self) -> None:
        self.api.close()
