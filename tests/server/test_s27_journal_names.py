"""A round's names are its own devices: a journal naming another is corrupt, and the running server
never writes one (issue 34, session 27, helper I; red team G's S27-G4).

Before, a finding or end record naming, in ``proven_bad_shares`` or ``aborting_dropouts``, a device
outside the users its round was opened for was read and counted: such records refused at the door a
device that was never in the round.  Now the restart refuses the journal as corrupt, as it refuses
the journal's other impossible records, with nothing written; and :class:`ExchangeState` drops such
a name from the node (logged as an error) before it counts or journals it, so it never writes a
journal its restart would refuse.  Device 7 is in none of these rounds (opened for devices 0-2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_s24_strikes import _end, _state

from secemb.server.exchange_state import DROPOUTS, FOUND, JOURNAL
from secemb.server.persist import CorruptState, Journal

OPEN = {"event": "open", "round_id": 1, "users": [0, 1, 2]}


def _refused_at_start(tmp_path: Path, records: list[dict[str, Any]], match: str) -> None:
    """The journal of ``records`` stops the start (CorruptState matching ``match``); nothing written."""
    tmp_path.mkdir(mode=0o700, exist_ok=True)
    journal = Journal(tmp_path / JOURNAL)
    for rec in records:
        journal.append(rec)
    before = sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir())
    with pytest.raises(CorruptState, match=match):
        _state(tmp_path)
    assert sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("field", ["proven_bad_shares", DROPOUTS])
def test_the_message_names_the_record_the_field_and_the_outsider(field: str, tmp_path: Path) -> None:
    """A finding record naming devices 2 and 7: the start is refused naming round 1's finding,
    the field, device 7 alone and the round's users."""
    _refused_at_start(tmp_path, [OPEN, {"event": FOUND, "round_id": 1, "proven_bad_shares": [], field: [2, 7]}],
                      rf"the finding of round 1: {field} names device\(s\) \[7\], not among the round's users "
                      r"\[0, 1, 2\]")


def test_the_end_record_is_checked_against_the_opening_not_its_own_users(tmp_path: Path) -> None:
    """Round 1 opened for devices 0-2; its end record's document lists device 7 among its users and
    names it: the opening is what the server recorded before the node opened the round."""
    doc = {**_end(1, **{DROPOUTS: [7]})["round"], "users": [0, 1, 2, 7]}
    _refused_at_start(tmp_path, [OPEN, {"event": "end", "round_id": 1, "round": doc}],
                      r"round 1: aborting_dropouts names device\(s\) \[7\]")


def test_without_an_opening_the_end_record_is_checked_against_its_own_users(tmp_path: Path) -> None:
    """An end record whose round the journal has no opening of (records the tests write; the server
    journals every opening): its names must be its document's users; a document without users names
    nobody.  Control: naming device 2, one of them, it counts."""
    ok = tmp_path / "ok"
    ok.mkdir(mode=0o700)
    Journal(ok / JOURNAL).append(_end(1, **{DROPOUTS: [2]}))
    assert _state(ok).dropouts == {2: 1}
    _refused_at_start(tmp_path / "outside", [_end(1, proven_bad_shares=[7])],
                      r"proven_bad_shares names device\(s\) \[7\], not among the round's users \[0, 1, 2\]")
    bare = {"round_id": 1, "state": "aborted", "proven_bad_shares": [0]}
    _refused_at_start(tmp_path / "bare", [{"event": "end", "round_id": 1, "round": bare}],
                      r"names device\(s\) \[0\], not among the round's users None")


def test_a_round_cleared_since_is_checked_too(tmp_path: Path) -> None:
    """Round 1's end names device 7, then the operator's clear through round 1: the clear does not
    make the record possible (before, the names of cleared rounds were not read at all)."""
    _refused_at_start(tmp_path, [OPEN, _end(1, proven_bad_shares=[7]),
                                 {"event": "strikes_cleared", "through_round": 1, "strikes": {}}],
                      r"proven_bad_shares names device\(s\) \[7\]")


def test_the_running_server_drops_an_outsider_from_the_node_counts_the_rest_and_its_journal_restarts(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Round 1 opened for devices 0-2 (its document says 0-2 and 7, as a faulty node might); the node
    names device 7 in a mid-round finding and, with device 2, in the round's end (both fields).
    Device 7 is not counted, not journaled, logged as an error each time; device 2 is counted (a
    strike and an aborting dropout); the restart starts and counts the same."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    state.found(1, [7])
    assert [r["event"] for r in Journal(tmp_path / JOURNAL).records()] == ["open"]
    state.ended({**_end(1, proven_bad_shares=[2, 7], **{DROPOUTS: [2, 7]})["round"], "users": [0, 1, 2, 7]})
    assert (state.strikes, state.dropouts) == ({2: 1}, {2: 1})
    records = Journal(tmp_path / JOURNAL).records()
    assert [(r["event"], r.get("proven_bad_shares"), r.get(DROPOUTS)) for r in records[1:2]] == [(FOUND, [2], [2])]
    assert (records[2]["round"]["proven_bad_shares"], records[2]["round"][DROPOUTS]) == ([2], [2])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 3 and all("devices [7]" in e for e in errors), errors
    after = _state(tmp_path)
    assert (after.strikes, after.dropouts) == ({2: 1}, {2: 1})


def test_a_finding_of_a_round_this_server_did_not_open_is_not_journaled(tmp_path: Path) -> None:
    """Round 1 is open; a finding for round 5 (which no record opened) is dropped: the restart refuses
    a finding record of a round no record opened, so the server must not write one."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    state.found(5, [0])
    assert [r["event"] for r in Journal(tmp_path / JOURNAL).records()] == ["open"]
    assert _state(tmp_path).strikes == {}
