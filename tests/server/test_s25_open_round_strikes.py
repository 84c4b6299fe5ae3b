"""A round open when the one-server server stops still strikes (issue 34, session 25, helper A).

Before, what a round's signed secure aggregations proved (``proven_bad_shares``) was in memory
until the round ended: a server stopped mid-round (``kill -9``, a crash, a power cut) restarted
with the round aborted and the finding forgotten, so a device proven to cheat in a round that
never ended had no strike for it (pinned as a limit by tests/review/test_session24_redteam_door.py).
Now the stage close that finds the names journals them (fsync-ed, a ``found`` record) before the
round goes on, and the restart counts them for that round: once (a round whose end record names
them too counts once), after the last clear's ``through_round`` only.

The stop here is the server abandoned mid-round, its state restored by a fresh ``ExchangeState``
over the same directory: what a ``kill -9`` leaves, as the server writes nothing when it stops
(each record is fsync-ed when written).  The cheat is device 0 dealing honest holder 1 a bad share
of its PSU self-mask seed (tests/server/test_s24_strikes.py): the PSU's unmask stage proves it,
and the round goes on to the download and the secure sum.  Expected strike counts are the tests'
own tallies of the rounds device 0 cheated in.
"""

# ruff: noqa: F811  (the fixture sfsl is imported from the session 24 test, then requested)

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_s24_strikes import Served, _end, _state, deal_bad_share, sfsl  # noqa: F401 - sfsl: a fixture

from secemb.server.exchange_state import FOUND, JOURNAL
from secemb.server.persist import CorruptState, Journal, StorageError


def _begin(served: Served, round_id: int) -> tuple[dict[str, Any], dict[int, Any]]:
    """Round ``round_id`` opened for devices 0-2 and played through the PSU (device 0 dealing a bad
    share): the operator's answer to the open and the devices' parties."""
    opened = served.http.open(round_id, [0, 1, 2])
    parties = {u: served.devices[u].party(opened) for u in opened["users"]}
    _play(served, round_id, parties, opened["stages"][: opened["stages"].index("download")])
    return opened, parties


def _play(served: Served, round_id: int, parties: dict[int, Any], stages: list[str]) -> None:
    for stage in stages:
        for u, party in parties.items():
            body = party.message(stage)
            if (u, stage) == (0, "psu-shares"):
                body = deal_bad_share(party, body)
            assert served.http.send(u, round_id, stage, body) == 204, (stage, u)
        if served.sfsl.plan().replies(stage):
            for u, party in parties.items():
                answer = served.http.fetch(u, round_id, stage)
                assert answer is not None, (stage, u)
                party.accept(stage, answer)


def _found(state_dir: Path) -> list[dict[str, Any]]:
    return [r for r in Journal(state_dir / JOURNAL).records() if r["event"] == FOUND]


def test_a_device_proven_in_a_round_open_when_the_server_is_killed_is_struck_at_the_restart_once_a_round(
        sfsl: Any, tmp_path: Path) -> None:
    served = Served(sfsl, tmp_path)

    # round 1: the PSU proves device 0 cheating, the round goes on (open) and the server is killed
    _begin(served, 1)
    doc = served.last()
    assert (doc["state"], doc["stage"], doc["proven_bad_shares"]) == ("open", "download", [0])
    assert _found(tmp_path) == [{"event": FOUND, "round_id": 1, "proven_bad_shares": [0]}]  # durable already
    assert served.strikes()["strikes"] == {}  # a running server counts the strike when the round ends
    served.restart()
    doc = served.last()
    assert (doc["round_id"], doc["state"], doc["proven_bad_shares"]) == (1, "aborted", [0])
    assert "proven_bad_shares" not in served.http.call(1, "GET", "/v1/exchange/round").json()  # the operator's
    assert served.strikes() == {"strikes": {"0": 1}, "strike_limit": 3, "refused": []}
    served.restart()  # round 1's end record (written at the first restart) and its finding: one strike
    assert served.strikes()["strikes"] == {"0": 1}

    # round 2 ends (committed): its finding and its end record both name device 0, one strike
    opened, parties = _begin(served, 2)
    _play(served, 2, parties, opened["stages"][opened["stages"].index("download"):])
    doc = served.last()
    assert (doc["state"], doc["proven_bad_shares"]) == ("committed", [0])
    assert [r["round_id"] for r in _found(tmp_path)] == [1, 2]
    assert served.strikes()["strikes"] == {"0": 2}
    served.restart()
    assert served.strikes()["strikes"] == {"0": 2}

    # round 3 open at a kill again: the third strike, and the door refuses device 0 after the restart
    _begin(served, 3)
    served.restart()
    assert served.strikes() == {"strikes": {"0": 3}, "strike_limit": 3, "refused": [0]}
    opened = served.http.open(4, [0, 1, 2, 3])
    assert (opened["users"], opened["refused"]) == ([1, 2, 3], [0])
    assert served.http.call(0, "GET", "/v1/exchange/round").status_code == 200
    assert served.http.call(0, "POST", "/v1/exchange/rounds/4/psu-advertise", b"x").status_code == 403

    # the operator's clear covers the rounds that were open at a kill (its through_round: round 4,
    # now open, is not covered: it proves nobody); the honest holders were never struck
    assert served.admin("POST", "/v1/admin/exchange/strikes/clear") == {"cleared": {"0": 3}}
    served.restart()
    assert served.strikes()["strikes"] == {}


@pytest.mark.parametrize("stopped", [True, False], ids=["killed", "runs-on"])
def test_a_clear_while_the_round_is_open_leaves_its_finding_to_count_killed_or_not(
        stopped: bool, sfsl: Any, tmp_path: Path) -> None:
    """The operator clears after round 1's PSU proved device 0 and before the round ends: the clear's
    ``through_round`` (no round ended yet: -1) does not cover round 1, whose strike a running server
    counts when the round ends -- and a restart after a kill counts it the same."""
    served = Served(sfsl, tmp_path)
    opened, parties = _begin(served, 1)
    assert served.admin("POST", "/v1/admin/exchange/strikes/clear") == {"cleared": {}}
    if stopped:
        served.restart()
        assert served.last()["state"] == "aborted"
    else:
        _play(served, 1, parties, opened["stages"][opened["stages"].index("download"):])
        assert served.last()["state"] == "committed"
    assert served.strikes()["strikes"] == {"0": 1}
    served.restart()
    assert served.strikes()["strikes"] == {"0": 1}


def test_a_rounds_names_are_those_of_its_end_record_and_its_findings_each_device_once(tmp_path: Path) -> None:
    """Journal-level: round 1's findings name 0, then 0 and 2, its end record 0 (each device once:
    one strike each); round 2 open at the stop, its finding naming 1; round 3 open, no finding."""
    journal = Journal(tmp_path / JOURNAL)
    for rec in [{"event": "open", "round_id": 1, "users": [0, 1, 2]},
                {"event": FOUND, "round_id": 1, "proven_bad_shares": [0]},
                {"event": FOUND, "round_id": 1, "proven_bad_shares": [0, 2]},
                _end(1, proven_bad_shares=[0]),
                {"event": "open", "round_id": 2, "users": [0, 1, 2]},
                {"event": FOUND, "round_id": 2, "proven_bad_shares": [1]}]:
        journal.append(rec)
    state = _state(tmp_path)
    assert state.strikes == {0: 1, 1: 1, 2: 1}
    assert state.last is not None and (state.last["round_id"], state.last["state"]) == (2, "aborted")
    assert state.last["proven_bad_shares"] == [1]
    assert _state(tmp_path).strikes == {0: 1, 1: 1, 2: 1}
    state = _state(tmp_path)
    state.opening(3, [0, 1, 2])
    assert _state(tmp_path).last == {"round_id": 3, "users": [0, 1, 2], "stages": [], "stage": None,
                                     "state": "aborted", "reason": "open when the server stopped: aborted at the "
                                     "restart"}  # no finding: the record as before session 25


@pytest.mark.parametrize(("rec", "match"), [
    ({"event": FOUND, "round_id": 2, "proven_bad_shares": [0]}, "no record opened"),
    ({"event": FOUND, "round_id": 1, "proven_bad_shares": [0, 0]}, "proven_bad_shares"),
    ({"event": FOUND, "round_id": 1, "proven_bad_shares": "0"}, "proven_bad_shares"),
    ({"event": FOUND, "round_id": 1, "proven_bad_shares": [-1]}, "proven_bad_shares"),
    ({"event": FOUND, "round_id": "1", "proven_bad_shares": [0]}, "round_id"),
], ids=["unopened round", "a device twice", "not a list", "a negative id", "a string round id"])
def test_a_damaged_finding_record_is_a_corrupt_journal(rec: dict[str, Any], match: str, tmp_path: Path) -> None:
    journal = Journal(tmp_path / JOURNAL)
    journal.append({"event": "open", "round_id": 1, "users": [0, 1, 2]})
    journal.append(rec)
    before = (tmp_path / JOURNAL).read_bytes()
    with pytest.raises(CorruptState, match=match):
        _state(tmp_path)
    assert (tmp_path / JOURNAL).read_bytes() == before


def test_a_finding_is_journaled_once_and_one_the_disk_refused_is_written_at_the_next_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    append = state._journal.append

    def refuse(record: dict[str, Any]) -> None:
        raise StorageError("could not write journal journal.jsonl: ENOSPC (No space left on device)")

    monkeypatch.setattr(state._journal, "append", refuse)
    state.found(1, [0])  # logged, not recorded
    assert _found(tmp_path) == []
    monkeypatch.setattr(state._journal, "append", append)
    state.found(1, [0])
    state.found(1, [0])  # known: nothing more
    state.found(1, [2])
    assert _found(tmp_path) == [{"event": FOUND, "round_id": 1, "proven_bad_shares": [0]},
                                {"event": FOUND, "round_id": 1, "proven_bad_shares": [0, 2]}]
    assert _state(tmp_path).strikes == {0: 1, 2: 1}  # the stop before the round ended
    state.ended(_end(1, proven_bad_shares=[0])["round"])  # or the round ends: the same strikes
    assert state.strikes == {0: 1, 2: 1} and _state(tmp_path).strikes == {0: 1, 2: 1}
