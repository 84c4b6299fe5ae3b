"""The one-server app's stage closer (secemb.server.exchange_app.StageCloser, what `secemb serve`
runs): a stage closes once every device still in has sent, or at the first read of the round
after the deadline with those that did; a device the server answers with nothing is out."""

from __future__ import annotations

import time
from typing import Any

from secemb.errors import ProtocolError
from secemb.protocols.sfsl.staged import SFSL_PLAN
from secemb.server.exchange_app import StageCloser


class FakeNode:
    """Records the calls; answers every device but 2 in the stages that have answers."""

    plan = SFSL_PLAN

    def __init__(self) -> None:
        self.closed: list[tuple[str, set[int]]] = []
        self.got: set[int] = set()
        self.state = "open"

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        return {"round_id": round_id, "users": users, "stages": list(SFSL_PLAN.stages)}

    def receive(self, round_id: int, stage: str, user: int, body: bytes) -> None:
        self.got.add(user)

    def close(self, round_id: int, stage: str) -> None:
        if len(self.got) < 2:
            self.state = "aborted"
            raise ProtocolError("too few")
        self.closed.append((stage, set(self.got)))
        self.got = set()

    def reply(self, round_id: int, stage: str, user: int) -> bytes | None:
        return None if user == 2 else b"ok"

    def outcome(self, round_id: int) -> dict[str, Any]:
        return {"state": self.state}


def test_a_stage_closes_when_every_device_still_in_has_sent() -> None:
    node = FakeNode()
    rounds = StageCloser(node, deadline_s=60.0)
    rounds.open_round(1, [0, 1, 2])
    for u in (0, 1):
        rounds.receive(1, "psu-advertise", u, b"")
    assert rounds.document()["stage"] == "psu-advertise" and node.closed == []
    rounds.receive(1, "psu-advertise", 2, b"")
    assert node.closed == [("psu-advertise", {0, 1, 2})]
    # device 2 got no answer: it is out, so devices 0 and 1 close the next stage
    rounds.receive(1, "psu-shares", 0, b"")
    rounds.receive(1, "psu-shares", 1, b"")
    doc = rounds.document()
    assert node.closed[-1] == ("psu-shares", {0, 1}) and doc["stage"] == "psu-masked" and doc["state"] == "open"


def test_an_overdue_stage_closes_with_those_that_sent() -> None:
    node = FakeNode()
    rounds = StageCloser(node, deadline_s=0.05)
    rounds.open_round(1, [0, 1, 2])
    rounds.receive(1, "psu-advertise", 0, b"")
    rounds.receive(1, "psu-advertise", 1, b"")
    time.sleep(0.1)
    assert rounds.document()["stage"] == "psu-shares"
    assert node.closed == [("psu-advertise", {0, 1})]
    # below the node's threshold the close is refused: the round is aborted, the read answers
    rounds.receive(1, "psu-shares", 0, b"")
    time.sleep(0.1)
    doc = rounds.document()
    assert doc["state"] == "aborted" and doc["stage"] is None


def test_without_a_deadline_only_the_operator_closes() -> None:
    node = FakeNode()
    rounds = StageCloser(node)
    rounds.open_round(1, [0, 1])
    rounds.receive(1, "psu-advertise", 0, b"")
    rounds.receive(1, "psu-advertise", 1, b"")
    assert node.closed == [] and rounds.document()["stage"] == "psu-advertise"
    rounds.close(1, "psu-advertise")
    assert rounds.document()["stage"] == "psu-shares"
