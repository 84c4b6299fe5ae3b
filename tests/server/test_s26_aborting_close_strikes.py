"""A device first proven at the close that aborts a round still strikes after a restart when the
disk refused the round's end record (issue 34, session 26, helper D).

Before, the names a stage close had proven while the round stayed open were journaled (``found``
records, session 25), but a device first proven at the close that *ended* the round was named in
the round's end record only: were that record refused by the disk (logged, not retried), the
restart recorded the round aborted with the finding records' names and the device had no strike
for it (docs/deployment.md named it as a limit).  Now :meth:`ExchangeState.ended` journals a
finding record (fsync-ed) for names no finding record holds yet before it writes the round's end
(or its checkpoint), so the restart counts them as it counts the stage closes' findings.

The cheat is device 0 sending a share of the secure sum other than the one it was dealt
(tests/server/test_s24_strikes.py's ``lie_in_unmask``) while device 2 withholds its unmask message:
the signed commitments prove device 0 lying, one honest share is below the threshold, and the
close of ``sum-unmask`` aborts the round.  The disk refusing is a monkeypatched ``Journal.append``
(ENOSPC) for the round's end record only; the stop is the server abandoned, its state restored by a
fresh ``ExchangeState`` over the same directory (what ``kill -9`` leaves).  Expected strike counts
are the tests' own tallies of the rounds device 0 cheated in.
"""

# ruff: noqa: F811  (the fixture sfsl is imported from the session 24 test, then requested)

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_s24_strikes import Served, _end, _state, lie_in_unmask, sfsl  # noqa: F401 - sfsl: a fixture

from secemb.server.exchange_state import FOUND, JOURNAL
from secemb.server.persist import Journal, StorageError

ENOSPC = "could not write journal journal.jsonl: ENOSPC (No space left on device)"


def _refuse_end_of(monkeypatch: pytest.MonkeyPatch, round_id: int) -> None:
    """The disk refuses the journal's end record of ``round_id``, and only that."""
    append = Journal.append

    def refuse(self: Journal, record: dict[str, Any]) -> None:
        if record.get("event") == "end" and record.get("round_id") == round_id:
            raise StorageError(ENOSPC)
        append(self, record)

    monkeypatch.setattr(Journal, "append", refuse)


def _events(state_dir: Path) -> list[tuple[str, int]]:
    return [(r["event"], r["round_id"]) for r in Journal(state_dir / JOURNAL).records()]


def _abort_at_the_sum_unmask(served: Served, round_id: int) -> None:
    """Round ``round_id`` for devices 0-2 played honestly up to ``sum-unmask``, where device 0 lies
    and device 2 sends nothing; the operator closes the stage (the server would wait for device 2)."""
    opened = served.http.open(round_id, [0, 1, 2])
    parties = {u: served.devices[u].party(opened) for u in opened["users"]}
    for stage in opened["stages"]:
        senders = [0, 1] if stage == "sum-unmask" else [0, 1, 2]
        for u in senders:
            body = parties[u].message(stage)
            if (u, stage) == (0, "sum-unmask"):
                body = lie_in_unmask(parties[u], body)
            assert served.http.send(u, round_id, stage, body) == 204, (stage, u)
        if stage == "sum-unmask":
            assert served.http.close(round_id, stage) == 409  # too few honest shares: the round aborts
            return
        if served.sfsl.plan().replies(stage):
            for u, party in parties.items():
                answer = served.http.fetch(u, round_id, stage)
                assert answer is not None, (stage, u)
                party.accept(stage, answer)
    raise AssertionError("the plan has no sum-unmask stage")


@pytest.mark.parametrize("later_commit", [False, True], ids=["restart-next", "after-a-commit"])
def test_a_device_first_proven_at_the_aborting_close_is_struck_after_a_refused_end_record_and_a_restart(
        later_commit: bool, sfsl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 aborts at the close of ``sum-unmask``, which first proves device 0; the disk refuses the
    end record.  The running server strikes device 0; the restart (at once, or after round 2
    committed) records round 1 aborted naming device 0 and counts its strike, once (a second restart
    too).  Fails without the finding record written at the end: the restart had no name for round 1."""
    served = Served(sfsl, tmp_path)
    _refuse_end_of(monkeypatch, 1)
    _abort_at_the_sum_unmask(served, 1)
    monkeypatch.undo()
    out = served.http.outcome(1)
    assert (out["state"], out["proven_bad_shares"]) == ("aborted", [0])
    assert served.strikes()["strikes"] == {"0": 1}  # the running server, whatever the disk did
    assert _events(tmp_path) == [("open", 1), (FOUND, 1)]  # first proven at the close: journaled before its end
    if later_commit:
        served.round(2)
        assert served.last()["state"] == "committed"
    for _ in range(2):
        served.restart()
        assert served.strikes() == {"strikes": {"0": 1}, "strike_limit": 3, "refused": []}
    ends = {r["round_id"]: r["round"] for r in Journal(tmp_path / JOURNAL).records() if r["event"] == "end"}
    assert (ends[1]["state"], ends[1]["proven_bad_shares"]) == ("aborted", [0])
    assert served.last()["round_id"] == (2 if later_commit else 1)


def test_the_ending_finding_names_the_new_devices_with_the_known_and_is_skipped_when_nothing_is_new(
        tmp_path: Path) -> None:
    """Journal-level: round 1's close found device 0 (a finding record), its end names 0 and 2: the
    end writes a finding record naming both before the end record; round 2's end names only the
    device its finding record holds: no second finding record.  Strikes: one a round and device."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    state.found(1, [0])
    state.ended(_end(1, proven_bad_shares=[0, 2])["round"])
    state.opening(2, [0, 1, 2])
    state.found(2, [2])
    state.ended(_end(2, proven_bad_shares=[2])["round"])
    records = Journal(tmp_path / JOURNAL).records()
    assert [(r["event"], r["round_id"], r.get("proven_bad_shares")) for r in records] == [
        ("open", 1, None), (FOUND, 1, [0]), (FOUND, 1, [0, 2]), ("end", 1, None),
        ("open", 2, None), (FOUND, 2, [2]), ("end", 2, None)]
    assert state.strikes == {0: 1, 2: 2} and _state(tmp_path).strikes == {0: 1, 2: 2}


def test_a_refused_ending_finding_is_logged_and_the_running_server_still_strikes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The disk refuses everything at the round's end (its finding and its end record): the running
    server strikes device 0 at once and logs both refusals; nothing is written."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])

    def refuse(record: dict[str, Any]) -> None:
        raise StorageError(ENOSPC)

    monkeypatch.setattr(state._journal, "append", refuse)
    state.ended(_end(1, proven_bad_shares=[0])["round"])
    assert state.strikes == {0: 1}
    assert _events(tmp_path) == [("open", 1)]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2 and all("ENOSPC" in e for e in errors), errors


def test_a_committed_rounds_new_names_count_after_its_checkpoint_was_refused_and_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 commits naming device 0 first at its last close; the disk refuses its checkpoint
    (retried at the next opening, which never comes: the server stops).  The restart records the
    round aborted (the model is the one before it) with the finding record's name: one strike."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])

    def refuse(*args: Any) -> None:
        raise StorageError(ENOSPC)

    monkeypatch.setattr(state.server.node, "state", lambda: ({}, {}))  # the SecEA node has no set-up here
    monkeypatch.setattr("secemb.server.exchange_state.save_checkpoint", refuse)
    state.ended({**_end(1, proven_bad_shares=[0])["round"], "state": "committed"})
    assert state.strikes == {0: 1}
    assert _events(tmp_path) == [("open", 1), (FOUND, 1)]
    restarted = _state(tmp_path)
    assert restarted.last is not None and (restarted.last["state"], restarted.last["proven_bad_shares"]) == (
        "aborted", [0])
    assert restarted.strikes == {0: 1} and _state(tmp_path).strikes == {0: 1}
