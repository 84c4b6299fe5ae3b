"""An ended round's records the disk refused are owed: written before the next opening (issue 34,
session 27, helper I; red team G's S27-G3).

Before, an aborted round's refused end record was logged and not retried (only a committed round's
checkpoint was owed), so a name whose finding record the disk had refused too -- an aborting
dropout, or a device first proven cheating at the close that ended the round -- was counted by the
running server and lost at the restart: the door decided differently after it.  Now
:meth:`ExchangeState.ended` keeps whatever the disk refused owed, and :meth:`ExchangeState.opening`
writes it first; while the disk refuses, no round opens (503 over HTTP).  The disk refusing is a
monkeypatched ``Journal.append`` (or ``save_checkpoint``); a restart is a fresh ``ExchangeState``
over the same directory (what ``kill -9`` leaves).  Expected counts are the tests' own tallies.
"""

# ruff: noqa: F811  (the fixture sfsl is imported from the session 24 test, then requested)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_s24_strikes import Served, _end, _state, sfsl  # noqa: F401 - sfsl: a fixture
from test_s26_aborting_close_strikes import _abort_at_the_sum_unmask

from secemb.server.exchange_state import DROPOUTS, FOUND, JOURNAL
from secemb.server.persist import Journal, StorageError

ENOSPC = "could not write journal journal.jsonl: ENOSPC (No space left on device)"


def _refusing(monkeypatch: pytest.MonkeyPatch, events: tuple[str, ...]) -> None:
    """The journal's disk refuses the records of ``events`` from now on."""
    append = Journal.append

    def refuse(self: Journal, record: dict[str, Any]) -> None:
        if record.get("event") in events:
            raise StorageError(ENOSPC)
        append(self, record)

    monkeypatch.setattr(Journal, "append", refuse)


def _events(state_dir: Path) -> list[tuple[str, int]]:
    return [(r["event"], r["round_id"]) for r in Journal(state_dir / JOURNAL).records()]


def _ends(state_dir: Path) -> dict[int, dict[str, Any]]:
    return {r["round_id"]: r["round"] for r in Journal(state_dir / JOURNAL).records() if r["event"] == "end"}


def test_a_strike_first_proven_at_the_ending_close_whose_records_were_refused_counts_after_the_next_opening(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 aborts, device 0 first proven at the close that ended it; the disk refuses its
    finding and its end record.  The next opening writes the end record (the round's own document,
    its reason too) before round 2's opening; the restart strikes device 0 once, as the running
    server did."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    doc = _end(1, reason="the sum aborted", proven_bad_shares=[0])["round"]
    with monkeypatch.context() as mp:
        _refusing(mp, (FOUND, "end"))
        state.ended(doc)
    assert state.strikes == {0: 1} and _events(tmp_path) == [("open", 1)]
    state.opening(2, [0, 1, 2])
    assert _events(tmp_path) == [("open", 1), ("end", 1), ("open", 2)]
    assert _ends(tmp_path)[1] == doc
    assert _state(tmp_path).strikes == {0: 1} and _state(tmp_path).strikes == {0: 1}


def test_while_the_disk_refuses_the_owed_record_no_round_opens_and_the_id_stays_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 aborts naming device 3 an aborting dropout, both its records refused; the disk goes
    on refusing end records only (an opening record it would take): each opening is refused with the
    disk's error and writes nothing, round 2's id stays free; once the disk takes it, the opening
    writes round 1's end record and then its own.  The running server counted device 3 once
    throughout; the restart counts it once."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2, 3])
    with monkeypatch.context() as mp:
        _refusing(mp, (FOUND, "end"))
        state.ended(_end(1, users=[0, 1, 2, 3], proven_bad_shares=[], **{DROPOUTS: [3]})["round"])
        for _ in range(2):
            with pytest.raises(StorageError, match="ENOSPC"):
                state.opening(2, [0, 1, 2, 3])
            assert _events(tmp_path) == [("open", 1)] and state.dropouts == {3: 1} and state.rounds == 1
    state.opening(2, [0, 1, 2, 3])
    assert _events(tmp_path) == [("open", 1), ("end", 1), ("open", 2)]
    assert _ends(tmp_path)[1][DROPOUTS] == [3]
    after = _state(tmp_path)  # round 2, open at the stop, aborted there: the window counts it too
    assert (after.dropouts, after.rounds) == ({3: 1}, 2)


def test_a_stop_while_the_record_is_owed_keeps_only_what_the_journal_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit docs/deployment.md states: a server that stops while round 1's records are owed
    (nothing written since the abort) leaves no record of device 3's naming; the restart records
    round 1 aborted (open when the server stopped) naming nobody.  With the finding record taken
    (only the end record refused) the restart names device 3 from it."""
    for taken in (False, True):
        state_dir = tmp_path / str(taken)
        state = _state(state_dir)
        state.opening(1, [0, 1, 2, 3])
        with monkeypatch.context() as mp:
            _refusing(mp, ("end",) if taken else (FOUND, "end"))
            state.ended(_end(1, users=[0, 1, 2, 3], proven_bad_shares=[], **{DROPOUTS: [3]})["round"])
        assert state.dropouts == {3: 1}
        after = _state(state_dir)
        assert after.last is not None and after.last["reason"] == "open when the server stopped: aborted at the restart"
        assert after.dropouts == ({3: 1} if taken else {})


def test_a_committed_rounds_end_record_refused_after_its_checkpoint_stays_owed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 commits; the disk takes its checkpoint and refuses its end record, at the end and again
    at the next opening.  The record stays owed (before, the retry's written checkpoint cleared the
    debt, and the opening after went on with round 1's end record missing: a restart after round 2
    committed recorded round 1, committed, as aborted); the opening after the disk recovers writes it."""
    state = _state(tmp_path)
    monkeypatch.setattr(state.server.node, "state", lambda: ({}, {}))  # the SecEA node has no set-up here
    state.opening(1, [0, 1, 2])
    with monkeypatch.context() as mp:
        _refusing(mp, ("end",))
        state.ended({**_end(1)["round"], "state": "committed"})
        assert (tmp_path / "checkpoint.npz").exists()
        for _ in range(2):
            with pytest.raises(StorageError, match="ENOSPC"):
                state.opening(2, [0, 1, 2])
    assert _events(tmp_path) == [("open", 1)]
    state.opening(2, [0, 1, 2])
    assert _events(tmp_path) == [("open", 1), ("end", 1), ("open", 2)]
    assert _ends(tmp_path)[1]["state"] == "committed"


def test_over_the_app_the_open_is_a_503_until_the_owed_record_is_written_and_the_restart_strikes(
        sfsl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``secemb serve``'s app: round 1 aborts at ``sum-unmask``, whose close first proves device 0
    (tests/server/test_s26_aborting_close_strikes.py's cheat); the disk refuses the finding and the
    end record.  The operator's open of round 2 answers 503 (``storage_unavailable``) and opens
    nothing while the disk refuses; then it opens and round 2 commits; the restart strikes device 0
    once and records round 1 with the node's reason."""
    served = Served(sfsl, tmp_path)
    with monkeypatch.context() as mp:
        _refusing(mp, (FOUND, "end"))
        _abort_at_the_sum_unmask(served, 1)
        assert served.strikes()["strikes"] == {"0": 1}
        resp = served.http.call("admin", "POST", "/v1/admin/exchange/rounds",
                                json.dumps({"round_id": 2, "users": [0, 1, 2]}).encode())
        assert resp.status_code == 503 and "ENOSPC" in resp.text, resp.text
    assert _events(tmp_path) == [("open", 1)]
    assert served.http.outcome(1)["state"] == "aborted"  # the node still holds round 1: nothing opened
    served.round(2)
    assert served.last()["state"] == "committed"
    assert _events(tmp_path)[:3] == [("open", 1), ("end", 1), ("open", 2)]
    served.restart()
    assert served.strikes()["strikes"] == {"0": 1}
    round1 = _ends(tmp_path)[1]
    assert (round1["state"], round1["proven_bad_shares"]) == ("aborted", [0])
    assert "open when the server stopped" not in round1["reason"]
