"""Session 31 (helper E): a device of a one-server deployment (``secemb serve``: the server closes
the stages itself) reports its round's outcome as the server showed it, even when the operator
opens the next round before the device is done with its last answer.

The served SecEA round of tests/review/test_session30_fuzz.py failed 2 of ~25 runs under load
(session 30, helper F): device 0's ``secemb client`` ended ``round 1: aborted`` while round 1 had
committed.  The device had read the round document after its last stage closed (``state``:
``committed``), fetched its answer and decoded it (a SecEA silo: the union of the set-up, then its
state file written) -- and then read the round document once more to learn the round's outcome.
The test's operator, seeing ``committed``, had opened the next round meanwhile, and a round
document of another round read as "this one was aborted" (:func:`secemb.client.stages.take_part`).

Here the device's part runs against the server's real stage closer
(:class:`~secemb.server.exchange_app.StageCloser`) over a two-stage node stub, in process, with the
operator's next opening made exactly where the served run made it: while the device takes its last
answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from secemb.client.stages import take_part
from secemb.errors import ProtocolError
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN
from secemb.server.exchange_app import StageCloser

STAGES = list(SECEA_ROUND_PLAN.stages)  # secea-share, secea-answer: both answered


class Node:
    """One round at a time (as SecEA's and SFSL's nodes: a new round replaces the last, whose
    answers go with it); the round commits when its last stage closes, or aborts then if
    ``abort_last``."""

    plan = SECEA_ROUND_PLAN

    def __init__(self, abort_last: bool = False) -> None:
        self.abort_last = abort_last
        self.round_id, self.closed, self.state = -1, 0, "open"
        self.ended: dict[int, str] = {}  # round id -> its end, as the node recorded it

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        self.round_id, self.closed, self.state = round_id, 0, "open"
        return {"round_id": round_id, "users": users, "stages": STAGES}

    def _current(self, round_id: int) -> None:
        if round_id != self.round_id:
            raise ProtocolError(f"round {round_id} is not the current round")

    def receive(self, round_id: int, stage: str, user: int, body: bytes) -> None:
        self._current(round_id)

    def close(self, round_id: int, stage: str) -> None:
        self._current(round_id)
        self.closed += 1
        if self.closed == len(STAGES):
            self.state = "aborted" if self.abort_last else "committed"
            self.ended[round_id] = self.state
            if self.abort_last:
                raise ProtocolError("too few answers")

    def reply(self, round_id: int, stage: str, user: int) -> bytes | None:
        self._current(round_id)
        return None if self.state == "aborted" else stage.encode()

    def outcome(self, round_id: int) -> dict[str, Any]:
        return {"state": self.state if round_id == self.round_id else self.ended[round_id]}


class Link:
    """Device ``user``'s :class:`~secemb.transport.links.PolledStageLink` to ``rounds`` in process
    (what :class:`~secemb.transport.http.HttpStageLink` reaches over HTTP)."""

    def __init__(self, user: int, rounds: StageCloser) -> None:
        self.user, self.rounds = user, rounds

    def round_info(self) -> dict[str, Any]:
        return self.rounds.document()

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        self.rounds.receive(round_id, stage, self.user, body)

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        return self.rounds.reply(round_id, stage, self.user)

    def bound_answers(self, longest: int | None) -> None:
        """Nothing to bound in process."""

    def close(self) -> None:
        """Nothing to release."""


class Device:
    """A device whose party, as it takes its answer of the last stage, lets the operator open the
    next round (``then``: what the operator does then)."""

    def __init__(self, then: Any) -> None:
        self.then = then
        self.accepted: list[tuple[str, bytes]] = []

    def party(self, doc: dict[str, Any]) -> Any:
        device = self

        class Party:
            def message(self, stage: str) -> bytes:
                return b"m"

            def accept(self, stage: str, answer: bytes) -> None:
                device.accepted.append((stage, answer))
                if stage == STAGES[-1]:
                    device.then()

        return Party()


def _round(node: Node, then: Any) -> tuple[dict[str, Any], Device, StageCloser]:
    rounds = StageCloser(node, deadline_s=60.0)  # a device alone: its message closes each stage
    doc = rounds.open_round(1, [0])
    device = Device(lambda: then(rounds))
    res = take_part(Link(0, rounds), device, SECEA_ROUND_PLAN, {**doc, "stage": STAGES[0], "state": "open"},
                    wait_s=5.0, poll_s=0.01)
    return res, device, rounds


def test_a_committed_round_reads_committed_when_the_next_round_opens_while_the_device_takes_its_last_answer(
) -> None:
    """The served race, made every time: round 1 committed, the operator opens round 2 while the
    device takes its last answer.  Before the fix ``take_part`` read the round document once more
    after that answer, saw round 2 and answered ``aborted``."""
    node = Node()
    res, device, rounds = _round(node, lambda rounds: rounds.open_round(2, [0]))
    assert node.ended == {1: "committed"} and rounds.document()["round_id"] == 2  # the race did happen
    assert device.accepted == [(s, s.encode()) for s in STAGES]
    assert res["round_id"] == 1 and res["outcome"] == "committed", res


def test_without_the_next_opening_the_outcome_is_the_same() -> None:
    res, device, _ = _round(Node(), lambda rounds: None)
    assert res["outcome"] == "committed" and len(device.accepted) == len(STAGES)


def test_a_round_the_server_aborts_at_its_last_close_still_reads_aborted() -> None:
    """The other end the device reads after its last stage: the close aborted the round, the device
    gets no answer and reports ``aborted`` (the next opening changes nothing of that)."""
    node = Node(abort_last=True)
    res, device, _ = _round(node, lambda rounds: pytest.fail("no answer to take"))
    assert node.ended == {1: "aborted"} and device.accepted == [(STAGES[0], STAGES[0].encode())]
    assert res["outcome"] == "aborted", res
