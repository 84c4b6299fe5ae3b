"""The one-server phase's links over HTTP: signed requests to a node served by
:func:`secemb.server.exchange_app.create_exchange_app` (endpoint paths: there and here only).

:class:`HttpExchangeLink` is a device's connection (signed ``user:<id>`` with its per-device
key), :class:`HttpExchangeAdmin` the operator's (signed ``admin``).  Bodies are the protocol's
exact message bytes; the figures the engine reports are ``len()`` of them.
"""

from __future__ import annotations

from typing import Any

from secemb.transport.network import ApiClient

__all__ = ["HttpExchangeAdmin", "HttpExchangeLink"]


class HttpExchangeLink:
    """Device ``user``'s link (``api``: an :class:`ApiClient` signing as ``user:<user>``)."""

    def __init__(self, user: int, api: ApiClient) -> None:
        self.user, self.api = int(user), api

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        self.api.post_bytes(f"/v1/exchange/rounds/{round_id}/{stage}", body)

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        resp = self.api.request("GET", f"/v1/exchange/rounds/{round_id}/{stage}")
        return None if resp.status_code == 204 else resp.content


class HttpExchangeAdmin:
    """The operator's link (``api``: an :class:`ApiClient` signing as ``admin``)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        doc: dict[str, Any] = self.api.post_json("/v1/admin/exchange/rounds", {"round_id": round_id, "users": users})
        return doc

    def close_stage(self, round_id: int, stage: str) -> None:
        self.api.post_json(f"/v1/admin/exchange/rounds/{round_id}/{stage}/close")

    def outcome(self, round_id: int) -> dict[str, Any]:
        doc: dict[str, Any] = self.api.get_json(f"/v1/admin/exchange/rounds/{round_id}")
        return doc

    def model(self) -> bytes:
        """The public model's bytes."""
        return self.api.get_bytes("/v1/admin/model")
