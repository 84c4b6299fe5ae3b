"""Aborting dropouts as a rate (issue 34, session 27, helper C): a device is refused at the door
while its dropouts aborted :data:`~secemb.server.verify.MAX_ABORTS` (10) of the last
:data:`~secemb.server.verify.ABORT_WINDOW` (50) rounds the one-server server ran, not after 3
in the deployment's life (session 26).  docs/deployment.md, "Aborting dropouts", derives the numbers:
one device aborts at most 10 of any 51 consecutive rounds, ``k`` colluding devices ``10 k``; an
honest device that drops at 5 % is refused within 1,000 rounds with probability below 1e-4.

The rounds are played on the state directly (:meth:`ExchangeState.opening`, :meth:`ExchangeState.ended`:
what the app calls), each ended ``aborted`` -- the window counts every round the server ran, and
the SecEA state of these tests commits nothing.  Every expected figure (rounds aborted, the
round a device is refused or let in, the rounds left) is worked out by hand in the test's text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_s24_strikes import _state

from secemb.server.exchange_app import StageCloser
from secemb.server.exchange_state import DROPOUTS, FOUND, JOURNAL, ExchangeState
from secemb.server.persist import Journal
from secemb.server.verify import ABORT_WINDOW, MAX_ABORTS

#: (round id, the devices still admitted among those asked for) -> the devices whose dropouts abort it
Attack = Callable[[int, list[int]], list[int]]


def test_the_constants_are_the_documented_ones() -> None:
    """The figures below and docs/deployment.md's are worked out for these two."""
    assert (MAX_ABORTS, ABORT_WINDOW) == (10, 50)


def _play(state: ExchangeState, first: int, last: int, devices: list[int], attack: Attack) -> list[int]:
    """Rounds ``first``..``last`` for ``devices`` (but those the state refuses), each ended aborted,
    its :data:`DROPOUTS` what ``attack`` names among the admitted; the ids of the rounds a device's
    dropout aborted."""
    aborted = []
    for r in range(first, last + 1):
        users = [u for u in devices if not state.refuses(u)]
        state.opening(r, users)
        named = attack(r, users)
        assert set(named) <= set(users)
        state.ended({"round_id": r, "users": users, "stages": [], "stage": None, "state": "aborted",
                     "reason": "test", "proven_bad_shares": [], DROPOUTS: named})
        if named:
            aborted.append(r)
    return aborted


def _first_admitted(attackers: list[int]) -> Attack:
    """Colluding devices that spread their aborts: the first of ``attackers`` still admitted drops."""
    return lambda r, users: [next(u for u in attackers if u in users)] if set(attackers) & set(users) else []


def test_one_attacker_aborts_10_rounds_then_10_of_every_51(tmp_path: Path) -> None:
    """Device 0 aborts every round it is in: rounds 1-10; after round 10 its dropouts aborted 10 of
    the last 50 (refused: the 10th oldest, round 1, leaves the window after round 51, so 41 more
    rounds); rounds 11-51 run without it; it is let in at round 52 (the window is rounds 2-51: 9),
    aborts 52-61, and so on: 10 of each 51 rounds, 100 of rounds 1-510."""
    state = _state(tmp_path)
    assert _play(state, 1, 10, [0, 1, 2], _first_admitted([0])) == list(range(1, 11))
    assert state.refuses(0) and state.let_in_after(0) == 41 and state.dropouts == {0: 10}
    aborted = _play(state, 11, 510, [0, 1, 2], _first_admitted([0]))
    assert aborted[:10] == list(range(52, 62))
    assert len(aborted) + 10 == 100
    every = list(range(1, 11)) + aborted
    assert max(sum(1 for r in every if s <= r < s + 51) for s in range(1, 461)) == 10


def test_three_colluding_devices_abort_30_of_every_51_rounds(tmp_path: Path) -> None:
    """Devices 0, 1, 2 take turns (the first admitted drops): 0 aborts rounds 1-10, 1 rounds 11-20,
    2 rounds 21-30, rounds 31-51 run without them (honest 3 and 4 only), 0 is let in at 52 (its
    window 2-51 holds 9), aborts 52-61, 1 then 62-71 (let in once its round 11 left), 2 72-81:
    30 of each 51 rounds (k * MAX_ABORTS / (ABORT_WINDOW + 1), k = 3), 300 of rounds 1-510.  After
    round 510 (the last turn: 0 aborted 460-469, 1 470-479, 2 480-489) device 0 is let in (its
    window, rounds 461-510, holds 9), 1 after 10 more rounds (470 + 50 - 510), 2 after 20."""
    state = _state(tmp_path)
    aborted = _play(state, 1, 510, [0, 1, 2, 3, 4], _first_admitted([0, 1, 2]))
    assert aborted[:40] == list(range(1, 31)) + list(range(52, 62))
    assert len(aborted) == 300
    assert [state.let_in_after(u) for u in range(5)] == [0, 10, 20, 0, 0]


def test_an_honest_pattern_spaced_beyond_the_window_is_never_refused(tmp_path: Path) -> None:
    """Device 0's dropouts abort every 6th round it is in over 1,000 rounds: 166 aborted rounds, at
    most 9 of any 50 (rounds r, r - 6, ..., r - 48), so it is never refused and never misses a
    round."""
    state = _state(tmp_path)
    aborted = _play(state, 1, 1000, [0, 1, 2], lambda r, users: [0] if r % 6 == 0 and 0 in users else [])
    assert len(aborted) == 166 and max(state.dropouts.values()) <= 9
    assert not state.refuses(0) and state.let_in_after(0) == 0


def test_the_window_s_edge_refuses_for_the_rounds_left_and_lets_in_after(tmp_path: Path) -> None:
    """Every 5th round aborted by device 0: rounds 5, 10, ..., 50 are 10 in the last 50 after round
    50, so it is refused in round 51 for 5 rounds (its round 5 leaves the window after round 55);
    in round 56 the window (rounds 6-55) holds 9 and it is in again; its dropout of round 60 (the
    pattern goes on) comes as its round 10 leaves the window: 9 again (rounds 15-50 and 60)."""
    state = _state(tmp_path)
    every_5th: Attack = lambda r, users: [0] if r % 5 == 0 and 0 in users else []  # noqa: E731
    assert _play(state, 1, 49, [0, 1, 2], every_5th)[-1] == 45
    assert not state.refuses(0) and state.dropouts == {0: 9}
    _play(state, 50, 50, [0, 1, 2], every_5th)
    assert state.refuses(0) and state.let_in_after(0) == 5 and state.dropouts == {0: 10}
    for left in (4, 3, 2, 1, 0):
        _play(state, 51 + 4 - left, 51 + 4 - left, [0, 1, 2], every_5th)  # rounds 51-55, device 0 out
        assert state.let_in_after(0) == left
    assert state.dropouts == {0: 9}  # rounds 10-50
    assert _play(state, 56, 60, [0, 1, 2], every_5th) == [60]
    assert state.dropouts == {0: 9} and not state.refuses(0)


def _decisions(state: ExchangeState, devices: list[int]) -> tuple[Any, ...]:
    return (state.rounds, state.dropouts, [state.let_in_after(u) for u in devices],
            [state.refuses(u) for u in devices])


def test_a_restart_between_rounds_gives_the_same_decisions(tmp_path: Path) -> None:
    """Three colluding devices over 160 rounds, the state rebuilt from the journal after rounds 1,
    10, 30, 51, 52, 80 and 160 (into the running one, which goes on from the rebuilt state): the
    rounds each attacker aborted and the decisions at each restart are those of a server that never
    stopped."""
    devices, attack = [0, 1, 2, 3, 4], _first_admitted([0, 1, 2])
    steady = _state(tmp_path / "steady")
    whole = _play(steady, 1, 160, devices, attack)
    restarted, got, first = _state(tmp_path / "restarted"), [], 1
    for stop in (1, 10, 30, 51, 52, 80, 160):
        got += _play(restarted, first, stop, devices, attack)
        before = _decisions(restarted, devices)
        restarted = _state(tmp_path / "restarted")
        assert _decisions(restarted, devices) == before, stop
        first = stop + 1
    assert got == whole and _decisions(restarted, devices) == _decisions(steady, devices)


def test_a_refused_opening_is_no_round_and_a_round_open_at_the_restart_is_one(tmp_path: Path) -> None:
    """Device 0 aborts rounds 1-10 (refused, 41 rounds left); the node refuses the opening of round
    11 (journaled, the id stays free): no round, still 41 -- a restart agrees.  Round 11 is opened
    again and the server stops with it open; the restart records it aborted: one round, 40 left."""
    state = _state(tmp_path)
    _play(state, 1, 10, [0, 1, 2], _first_admitted([0]))
    state.opening(11, [1, 2])
    state.refused(11, "test: the node refuses")
    assert state.let_in_after(0) == 41 and _state(tmp_path).let_in_after(0) == 41
    state.opening(11, [1, 2])
    after = _state(tmp_path)
    assert after.rounds == 11 and after.let_in_after(0) == 40 and after.last is not None
    assert after.last["round_id"] == 11 and after.last["state"] == "aborted"


def test_the_finding_record_of_a_round_open_at_the_restart_counts_in_its_place(tmp_path: Path) -> None:
    """Device 0 named by rounds 1-9 (end records) and by round 10's finding record only (the server
    stopped before its end record): the restart records round 10 aborted naming it -- 10 in the
    window, refused for 41 rounds, as a server that wrote the end record."""
    journal = Journal(tmp_path / JOURNAL)
    for r in range(1, 11):
        journal.append({"event": "open", "round_id": r, "users": [0, 1, 2]})
        journal.append({"event": FOUND, "round_id": r, "proven_bad_shares": [], DROPOUTS: [0]})
        if r < 10:
            journal.append({"event": "end", "round_id": r, "round": {
                "round_id": r, "users": [0, 1, 2], "stages": [], "stage": None, "state": "aborted", DROPOUTS: [0]}})
    state = _state(tmp_path)
    assert (state.rounds, state.dropouts, state.let_in_after(0)) == (10, {0: 10}, 41)


def test_the_clear_lets_a_refused_device_in_and_a_restart_agrees(tmp_path: Path) -> None:
    """Device 0 aborts rounds 1-10 and is refused; the operator's clear forgets them (a restart
    too); rounds 11-20 name it again: refused after round 20 for 41 rounds (its round 11 leaves the
    window after round 61), a restart agrees."""
    state = _state(tmp_path)
    _play(state, 1, 10, [0, 1, 2], _first_admitted([0]))
    state.clear_strikes()
    assert state.dropouts == {} and not state.refuses(0) and _state(tmp_path).dropouts == {}
    assert _play(state, 11, 20, [0, 1, 2], _first_admitted([0])) == list(range(11, 21))
    assert state.let_in_after(0) == 41 and _state(tmp_path).let_in_after(0) == 41


def test_the_operator_s_answer_shows_the_window_and_when_a_device_is_let_in(tmp_path: Path) -> None:
    """``GET /v1/admin/exchange/dropouts`` (:meth:`StageCloser.dropouts`): device 0 aborted rounds
    1-10 (refused, let in after 41 more rounds), device 1 round 11 (counted, not refused); after
    round 50 device 0 is let in after 1 more round, after round 51 its round 1 left the window."""
    state = _state(tmp_path)
    _play(state, 1, 11, [0, 1, 2], lambda r, users: [0] if r <= 10 else [1])
    closer = StageCloser(state.server.node, state=state)
    assert closer.dropouts() == {"dropouts": {"0": 10, "1": 1}, "dropout_limit": 10, "dropout_window": 50,
                                 "refused": [0], "let_in_after": {"0": 40}}
    _play(state, 12, 50, [0, 1, 2], lambda r, users: [])
    assert closer.dropouts()["let_in_after"] == {"0": 1}
    _play(state, 51, 51, [0, 1, 2], lambda r, users: [])
    assert closer.dropouts() == {"dropouts": {"0": 9, "1": 1}, "dropout_limit": 10, "dropout_window": 50,
                                 "refused": [], "let_in_after": {}}


@pytest.mark.parametrize("answer", [
    {"dropouts": {}, "dropout_limit": 10, "refused": [], "let_in_after": {}},
    {"dropouts": {}, "dropout_limit": 10, "dropout_window": 50, "refused": []},
    {"dropouts": {}, "dropout_limit": 10, "dropout_window": 50, "refused": [0], "let_in_after": {"0": 0}},
    {"dropouts": {}, "dropout_limit": 10, "dropout_window": "50", "refused": [], "let_in_after": {}},
    {"dropouts": {}, "dropout_limit": 10, "dropout_window": 50, "refused": [], "let_in_after": {"x": 3}},
], ids=["no-window", "no-let-in", "zero-rounds", "window-str", "not-a-device"])
def test_the_operator_s_reader_refuses_a_malformed_answer(answer: dict[str, Any]) -> None:
    """``secemb admin status`` reads the answer through :meth:`HttpStageAdmin.dropouts`, which
    checks the new fields as the old: a server's answer is input."""
    from secemb.errors import InvalidMessage
    from secemb.transport.http import HttpStageAdmin

    class Api:
        base_url = "http://127.0.0.1:1"

        def get_json(self, path: str) -> Any:
            assert path == "/v1/admin/exchange/dropouts"
            return answer

    with pytest.raises(InvalidMessage, match="dropouts"):
        HttpStageAdmin(Api()).dropouts()  # type: ignore[arg-type]
    good = {"dropouts": {"0": 10}, "dropout_limit": 10, "dropout_window": 50, "refused": [0], "let_in_after": {"0": 7}}
    Api.get_json = lambda self, path: good  # type: ignore[method-assign]
    assert HttpStageAdmin(Api()).dropouts() == good  # type: ignore[arg-type]
