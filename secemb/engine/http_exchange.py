"""The one-server phase's links over HTTP: signed requests to a node served by
:func:`secemb.server.exchange_app.create_exchange_app` (endpoint paths: there and here only).

:class:`HttpExchangeLink` is a device's connection (signed ``user:<id>`` with its per-device
key), :class:`HttpExchangeAdmin` the operator's (signed ``admin``).  Bodies are the protocol's
exact message bytes; the figures the engine reports are ``len()`` of them.

:func:`take_part` is a deployed device's side of one round (``secemb client`` for a one-server
protocol): the server closes the stages itself there (``secemb serve``), so the device follows
the round document instead of an operator's calls.
"""

from __future__ import annotations

import time
from typing import Any

from secemb.errors import InvalidMessage, ProtocolError
from secemb.protocols.exchange import ExchangeDevice
from secemb.protocols.stages import RoundPlan
from secemb.transport.network import ApiClient

__all__ = ["HttpExchangeAdmin", "HttpExchangeLink", "take_part"]


class HttpExchangeLink:
    """Device ``user``'s link (``api``: an :class:`ApiClient` signing as ``user:<user>``)."""

    def __init__(self, user: int, api: ApiClient) -> None:
        self.user, self.api = int(user), api

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        self.api.post_bytes(f"/v1/exchange/rounds/{round_id}/{stage}", body)

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        resp = self.api.request("GET", f"/v1/exchange/rounds/{round_id}/{stage}")
        return None if resp.status_code == 204 else resp.content

    def round(self) -> dict[str, Any]:
        """The current round's document (``stage``: the open stage, ``state``).

        Raises
        ------
        InvalidMessage: the server's answer is not one (a JSON object with an int ``round_id``,
        ``users`` a list of ints, ``stages`` -- if there -- a list of str, ``stage`` a str or
        null, ``state`` a str): the device reads nothing else of it.
        """
        doc = self.api.get_json("/v1/exchange/round")
        users, stages = (doc.get("users"), doc.get("stages", [])) if isinstance(doc, dict) else (None, None)
        if not (isinstance(users, list) and isinstance(stages, list) and type(doc.get("round_id")) is int
                and all(type(u) is int for u in users) and all(isinstance(s, str) for s in stages)
                and isinstance(doc.get("state"), str) and isinstance(doc.get("stage", ""), (str, type(None)))):
            raise InvalidMessage(f"the server's round document is malformed: {str(doc)[:200]}")
        out: dict[str, Any] = doc
        return out


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

    def round(self) -> dict[str, Any]:
        """The current round's document (as a device reads it)."""
        doc: dict[str, Any] = self.api.get_json("/v1/exchange/round")
        return doc


def take_part(link: HttpExchangeLink, device: ExchangeDevice, plan: RoundPlan, doc: dict[str, Any], *,
              wait_s: float, poll_s: float = 0.1) -> dict[str, Any]:
    """Device ``link.user``'s part in the open round ``doc`` announces (it lists the device):
    stage by stage, send its message, wait until the server closed the stage, fetch the answer
    if the stage has one (none: the device is out).  Returns ``{"round_id", "outcome"
    (committed, aborted, or "left" when the server answered it nothing), "upload_bytes",
    "download_bytes"}``.

    Raises
    ------
    ProtocolError: the server did not close a stage (or the round) within ``wait_s``.
    InvalidMessage: a round document the device cannot take part in (InvalidParameters: its
    stages are not a subsequence of ``plan``'s); ``RemoteError`` /
    ``Unreachable``: the server refused a message or did not answer.
    """
    round_id = int(doc["round_id"])
    party = device.party(doc)
    up = down = 0

    def result(outcome: Any) -> dict[str, Any]:
        return {"round_id": round_id, "outcome": outcome, "upload_bytes": up, "download_bytes": down}

    def state_of(now: dict[str, Any]) -> Any:
        """The round's state in ``now`` (another round there: this one was aborted)."""
        return now.get("state") if now.get("round_id") == round_id else "aborted"

    def settled(stage: str | None) -> dict[str, Any]:
        """The round document once ``stage`` is no longer the open one (``None``: the round ended)."""
        deadline = time.monotonic() + wait_s
        while True:
            now = link.round()
            if now.get("round_id") != round_id or now.get("state") != "open" or now.get("stage") != stage:
                return now
            if time.monotonic() > deadline:
                raise ProtocolError(f"round {round_id}: the server did not close {stage or 'the round'} "
                                    f"within {wait_s} s")
            time.sleep(poll_s)

    for stage in plan.only(list(doc.get("stages", plan.stages))).stages:  # InvalidParameters: not the plan's
        body = party.message(stage)
        link.send(round_id, stage, body)
        up += len(body)
        state = state_of(settled(stage))
        if state not in ("open", "committed"):
            return result(state)
        if plan.replies(stage):
            answer = link.fetch(round_id, stage)
            if answer is None:
                return result("left")
            down += len(answer)
            party.accept(stage, answer)
    return result(state_of(settled(None)))
