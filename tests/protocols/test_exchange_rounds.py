"""The round helpers one-server nodes share (secemb.protocols.exchange): closing a stage moves the
round on, or aborts it on a protocol error or a message found bad only then; the stage checks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols.exchange import closing_stage, open_stage, stage_reply
from secemb.secagg import SecAggAborted

STAGES = ("one", "two")


@dataclass
class _Round:
    round_id: int = 7
    state: str = "open"
    reason: str | None = None
    stage: int = 0
    replies: dict[str, dict[int, bytes]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def test_a_close_that_ends_moves_to_the_next_stage_and_its_replies_are_served() -> None:
    rnd = _Round()
    with closing_stage(rnd, "one"):
        rnd.replies["one"] = {3: b"x"}
    assert (rnd.stage, rnd.state) == (1, "open")
    assert stage_reply(rnd, 7, "one", STAGES, 3) == b"x" and stage_reply(rnd, 7, "one", STAGES, 4) is None
    with pytest.raises(ProtocolError, match="no answers"):
        stage_reply(rnd, 7, "two", STAGES, 3)
    assert open_stage(rnd, 7, "two", STAGES) is rnd


def test_a_bad_message_found_at_close_aborts_the_round_as_the_given_kind() -> None:
    rnd = _Round()
    with pytest.raises(SecAggAborted, match="round 7 aborted at one: bad share") as info:
        with closing_stage(rnd, "one", SecAggAborted):
            raise InvalidMessage("bad share")
    assert isinstance(info.value.__cause__, InvalidMessage)
    assert (rnd.stage, rnd.state, rnd.reason) == (0, "aborted", "bad share")
    with pytest.raises(ProtocolError, match="^round 7 is aborted$"):  # not why: the operator's to read (F4)
        open_stage(rnd, 7, "one", STAGES)


def test_a_protocol_error_aborts_and_goes_on_another_error_leaves_the_round() -> None:
    rnd = _Round()
    with pytest.raises(ProtocolError, match="too few"):
        with closing_stage(rnd, "one"):
            raise ProtocolError("too few")
    assert (rnd.stage, rnd.state, rnd.reason) == (0, "aborted", "too few")
    rnd = _Round()
    with pytest.raises(KeyError):
        with closing_stage(rnd, "one"):
            raise KeyError("x")
    assert (rnd.stage, rnd.state, rnd.reason) == (0, "open", None)


def test_open_stage_refuses_another_round_an_unknown_stage_and_a_stage_out_of_turn() -> None:
    rnd = _Round()
    with pytest.raises(ProtocolError, match="round 8 is not the current round"):
        open_stage(rnd, 8, "one", STAGES)
    with pytest.raises(ProtocolError, match="round 8 is not the current round"):
        open_stage(None, 8, "one", STAGES)
    with pytest.raises(InvalidParameters, match="unknown stage 'three'"):
        open_stage(rnd, 7, "three", STAGES)
    with pytest.raises(ProtocolError, match="at stage one, not two"):
        open_stage(rnd, 7, "two", STAGES)
