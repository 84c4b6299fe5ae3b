"""Session 31 (helper E): a device of a one-server deployment (``secemb serve``: the server closes
the stages itself) gets its last answer and reports its round's outcome as the server recorded it,
whenever the operator opens the next round once the round ended.

The served SecEA round of tests/review/test_session30_fuzz.py failed 2 of ~25 runs under load
(session 30, helper F): device 0's ``secemb client`` ended ``round 1: aborted`` while round 1 had
committed.  The device had read the round document after its last stage closed (``state``:
``committed``), fetched its answer and decoded it (a SecEA silo: the union of the set-up, then its
state file written) -- and then read the round document once more to learn the round's outcome.
The test's operator, seeing ``committed``, had opened the next round meanwhile, and a round
document of another round read as "this one was aborted" (:func:`secemb.client.stages.take_part`).
Two narrower windows of the same race: the next round opened after the device read ``committed``
but before it fetched its last answer (the node keeps one round: the fetch was refused, 409 "round
1 is not the current round", and a SecEA silo lost its set-up), or after the device's own message
closed the last stage but before it read the round document (``aborted``, the answer never
fetched).  The server now keeps the replaced round's end (the round document's ``previous``) and,
committed, its last stage's answers (:class:`~secemb.server.exchange_app.StageCloser`).

Here the device's part runs against the server's real stage closer over a two-stage node stub, in
process, with the operator's next opening made at each of those moments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from secemb.client.stages import take_part
from secemb.errors import InvalidMessage, ProtocolError
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN
from secemb.server.exchange_app import StageCloser
from secemb.transport.http import HttpStageLink

STAGES = list(SECEA_ROUND_PLAN.stages)  # secea-share, secea-answer: both answered
LAST = STAGES[-1]


def answer(stage: str, user: int) -> bytes:
    """The node's answer to ``user`` in ``stage`` (its own: the kept answers must not mix them up)."""
    return f"{stage}/{user}".encode()


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
        if self.state == "aborted" or STAGES.index(stage) >= self.closed:
            raise ProtocolError(f"stage {stage} of round {round_id} has no answers")
        return answer(stage, user)

    def outcome(self, round_id: int) -> dict[str, Any]:
        return {"state": self.state if round_id == self.round_id else self.ended[round_id]}


#: the moments the operator opens the next round at: after the device's own message closed the last
#: stage (before it reads the round document), before the device fetches its last answer (it read
#: ``committed``), while it takes that answer (it fetched it); ``None``: never
MOMENTS = ("sent", "fetch", "accept")


class Link:
    """Device ``user``'s :class:`~secemb.transport.links.PolledStageLink` to ``rounds`` in process
    (what :class:`~secemb.transport.http.HttpStageLink` reaches over HTTP); ``hook(moment)`` is
    called at the :data:`MOMENTS` of the last stage."""

    def __init__(self, user: int, rounds: StageCloser, hook: Callable[[str], None]) -> None:
        self.user, self.rounds, self.hook = user, rounds, hook

    def round_info(self) -> dict[str, Any]:
        return self.rounds.document()

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        self.rounds.receive(round_id, stage, self.user, body)
        if stage == LAST:
            self.hook("sent")

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        if stage == LAST:
            self.hook("fetch")
        return self.rounds.reply(round_id, stage, self.user)

    def bound_answers(self, longest: int | None) -> None:
        """Nothing to bound in process."""

    def close(self) -> None:
        """Nothing to release."""


class Device:
    """A device whose party records what it accepts; ``hook("accept")`` as it takes its last answer."""

    def __init__(self, hook: Callable[[str], None]) -> None:
        self.hook = hook
        self.accepted: list[tuple[str, bytes]] = []

    def party(self, doc: dict[str, Any]) -> Any:
        device = self

        class Party:
            def message(self, stage: str) -> bytes:
                return b"m"

            def accept(self, stage: str, answer: bytes) -> None:
                device.accepted.append((stage, answer))
                if stage == LAST:
                    device.hook("accept")

        return Party()


def _round(node: Node, moment: str | None, user: int = 0) -> tuple[dict[str, Any], Device, StageCloser]:
    """Device ``user`` alone in round 1 (its message closes each stage), the operator opening round
    2 for it at ``moment``."""
    rounds = StageCloser(node, deadline_s=60.0)
    doc = rounds.open_round(1, [user])

    def hook(now: str) -> None:
        if now == moment:
            rounds.open_round(2, [user])

    device = Device(hook)
    res = take_part(Link(user, rounds, hook), device, SECEA_ROUND_PLAN, {**doc, "stage": STAGES[0], "state": "open"},
                    wait_s=5.0, poll_s=0.01)
    return res, device, rounds


@pytest.mark.parametrize("moment", [*MOMENTS, None])
def test_a_committed_round_reads_committed_with_its_answers_whenever_the_next_round_opens(
        moment: str | None) -> None:
    """The served race, made every time.  Before the fix: ``accept`` (the session-30 failure)
    read ``aborted``; ``fetch`` was refused ("round 1 is not the current round"); ``sent`` read
    ``aborted`` with the last answer never fetched."""
    node = Node()
    res, device, rounds = _round(node, moment, user=3)
    assert node.ended == {1: "committed"}
    assert rounds.document()["round_id"] == (1 if moment is None else 2)  # the race did happen
    assert device.accepted == [(s, answer(s, 3)) for s in STAGES]
    assert (res["round_id"], res["outcome"]) == (1, "committed"), res


@pytest.mark.parametrize("moment", ["sent", None])
def test_a_round_the_server_aborts_at_its_last_close_reads_aborted_and_keeps_no_answer(moment: str | None) -> None:
    """The other end: the last close aborted the round, the device takes no answer and reports
    ``aborted``, the next round open or not."""
    node = Node(abort_last=True)
    res, device, rounds = _round(node, moment)
    assert node.ended == {1: "aborted"} and device.accepted == [(STAGES[0], answer(STAGES[0], 0))]
    assert res["outcome"] == "aborted", res
    if moment is not None:
        assert rounds.document()["previous"] == {"round_id": 1, "state": "aborted"} and rounds.kept == {}
        with pytest.raises(ProtocolError, match="not the current round"):  # the node's refusal, as before
            rounds.reply(1, LAST, 0)


def test_the_kept_answers_are_the_replaced_rounds_last_ones_each_to_its_own_device() -> None:
    """What the server keeps of a replaced committed round: each device's own answer of its last
    stage (none to a device that had none), nothing of its other stages, and only until the next
    opening replaces them."""
    node = Node()
    rounds = StageCloser(node, deadline_s=60.0)
    rounds.open_round(1, [0, 1])
    for stage in STAGES:
        for u in (0, 1):
            rounds.receive(1, stage, u, b"m")
    rounds.open_round(2, [0, 1])
    assert rounds.document()["previous"] == {"round_id": 1, "state": "committed"}
    assert (rounds.reply(1, LAST, 0), rounds.reply(1, LAST, 1), rounds.reply(1, LAST, 7)) == \
        (answer(LAST, 0), answer(LAST, 1), None)
    with pytest.raises(ProtocolError, match="not the current round"):
        rounds.reply(1, STAGES[0], 0)
    rounds.receive(2, STAGES[0], 0, b"m")
    rounds.receive(2, STAGES[0], 1, b"m")
    assert rounds.reply(2, STAGES[0], 1) == answer(STAGES[0], 1)  # the current round's, from the node
    rounds.open_round(3, [0, 1])  # round 2 (still open) replaced: no end to show, nothing kept
    assert "previous" not in rounds.document() and rounds.kept == {}
    with pytest.raises(ProtocolError, match="not the current round"):
        rounds.reply(1, LAST, 0)


def test_a_round_that_ended_before_its_last_stage_closed_keeps_nothing_and_the_next_opening_goes_on() -> None:
    """A round the node shows ended before its last stage closed (none of SecEA's or SFSL's ends
    so; a node is free to) has no last answers to keep: the next opening shows its end and keeps
    nothing (a fetch of them is the node's refusal), where asking the node for them would have
    refused the opening."""
    node = Node()
    rounds = StageCloser(node, deadline_s=60.0)
    rounds.open_round(1, [0])
    rounds.receive(1, STAGES[0], 0, b"m")
    node.state = node.ended[1] = "committed"
    rounds.open_round(2, [0])
    assert rounds.document()["previous"] == {"round_id": 1, "state": "committed"} and rounds.kept == {}
    with pytest.raises(ProtocolError, match="not the current round"):
        rounds.reply(1, LAST, 0)


class _Api:
    def __init__(self, doc: Any) -> None:
        self.doc = doc

    def get_json(self, path: str, **limits: Any) -> Any:  # ApiClient's (most_bytes: the document's limit)
        return self.doc


@pytest.mark.parametrize("previous", [None, 1, [], {}, {"round_id": 1}, {"state": "committed"},
                                      {"round_id": "1", "state": "committed"}, {"round_id": 1, "state": None},
                                      {"round_id": True, "state": "committed"}, {"round_id": 1, "state": "open"}])
def test_a_malformed_previous_is_an_invalid_round_document(previous: Any) -> None:
    """The device reads ``previous`` only as the server's round document carries it: an object with
    an int ``round_id`` and the ``state`` of an ended round (``committed`` or ``aborted``); anything
    else is the malformed document it reads nothing of."""
    doc = {"round_id": 2, "users": [0], "stages": STAGES, "stage": STAGES[0], "state": "open", "previous": previous}
    with pytest.raises(InvalidMessage, match="round document is malformed"):
        HttpStageLink(0, _Api(doc)).round_info()  # type: ignore[arg-type]
    good = doc | {"previous": {"round_id": 1, "state": "committed"}}
    assert HttpStageLink(0, _Api(good)).round_info() == good  # type: ignore[arg-type]
