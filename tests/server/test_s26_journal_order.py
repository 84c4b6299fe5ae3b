"""The one-server journal is read in order (issue 34, session 26, helper I: red team F's S26-F2).

A round id the node refused stays free (its end record has state ``refused``), so the journal
can hold several openings of one id.  Before, :class:`~secemb.server.exchange_state.ExchangeState`
keyed the end records by round id: a refused opening's end was taken for the end of a later
opening of the same id, so a round open when the server stopped was not recorded aborted, its id
opened again, and the strikes of its two runs merged at the next restart.  Now a refused end ends
only the opening before it: an ``open`` record of round ``r`` discards an earlier refused end of
``r``.  Every sequence of one round id's records the server can write is checked here, with the
state a restart must rebuild (what the round is, whether its id is free, its strikes); the two
it cannot write (an opening after a round's real end, a finding after its end) are a corrupt
journal.  Expected values are the tests' own (the sequence's meaning), never the code's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_s24_strikes import _end, _state

from secemb.errors import ProtocolError
from secemb.server.exchange_state import FOUND, JOURNAL
from secemb.server.persist import CorruptState, Journal

USERS = [0, 1, 2]
OPEN = {"event": "open", "round_id": 1, "users": USERS}
REFUSED = {"event": "end", "round_id": 1, "round": {"round_id": 1, "state": "refused", "reason": "too few"}}


def _found(*proven: int) -> dict[str, Any]:
    return {"event": FOUND, "round_id": 1, "proven_bad_shares": list(proven)}


def _write(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    journal = Journal(tmp_path / JOURNAL)
    for rec in records:
        journal.append(rec)


def _id_free(tmp_path: Path) -> bool:
    """Whether a restarted server opens round 1 again."""
    try:
        _state(tmp_path).opening(1, USERS)
    except ProtocolError:
        return False
    return True


# (records, round 1's state after a restart (None: no round ended), its proven_bad_shares, strikes,
#  whether round 1's id is free)
SEQUENCES = {
    "refused": ([OPEN, REFUSED], None, None, {}, True),
    "refused-twice": ([OPEN, REFUSED, OPEN, REFUSED], None, None, {}, True),
    "refused-then-open-at-the-stop": ([OPEN, REFUSED, OPEN], "aborted", None, {}, False),
    "refused-then-found-at-the-stop": ([OPEN, REFUSED, OPEN, _found(0)], "aborted", [0], {0: 1}, False),
    "refused-then-aborted": ([OPEN, REFUSED, OPEN, _found(0), _end(1, proven_bad_shares=[0, 2])],
                             "aborted", [0, 2], {0: 1, 2: 1}, False),
    "refused-then-refused-then-aborted": ([OPEN, REFUSED, OPEN, REFUSED, OPEN, _end(1, proven_bad_shares=[1])],
                                          "aborted", [1], {1: 1}, False),
    # an opening whose node raised something other than a refusal (no end record), then the retry
    "unended-then-reopened-at-the-stop": ([OPEN, OPEN, _found(2)], "aborted", [2], {2: 1}, False),
    "unended-then-reopened-and-aborted": ([OPEN, OPEN, _end(1)], "aborted", None, {}, False),
    "found-then-aborted": ([OPEN, _found(0), _end(1, proven_bad_shares=[0])], "aborted", [0], {0: 1}, False),
    "open-at-the-stop": ([OPEN], "aborted", None, {}, False),
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_each_sequence_of_one_round_ids_records_reads_as_its_last_opening(name: str, tmp_path: Path) -> None:
    records, state, proven, strikes, free = SEQUENCES[name]
    _write(tmp_path, records)
    after = _state(tmp_path)
    if state is None:
        assert after.last is None
    else:
        assert after.last is not None and (after.last["round_id"], after.last["state"]) == (1, state)
        assert after.last.get("proven_bad_shares") == proven
        assert after.last["users"] == USERS
    assert after.strikes == strikes
    assert _state(tmp_path).strikes == strikes  # a second restart reads what the first wrote alike
    assert _id_free(tmp_path) is free


def test_the_strikes_of_a_round_reopened_after_a_refusal_do_not_merge_with_a_third_run(tmp_path: Path) -> None:
    """Red team F's merge (S26-F2): round 1 refused, reopened, device 0 proven, the server stops.
    The restart aborts round 1 and refuses its id (before, it opened round 1 a third time, and a
    strike there merged with the second run's at the next restart); the operator's next round is
    2, where device 0 is proven again: two strikes, at the running server and after another restart."""
    state = _state(tmp_path)
    state.opening(1, USERS)
    state.refused(1, "too few devices")
    state.opening(1, USERS)
    state.found(1, [0])
    state = _state(tmp_path)
    assert state.strikes == {0: 1}
    with pytest.raises(ProtocolError, match="does not follow round 1"):
        state.opening(1, USERS)
    state.opening(2, USERS)
    state.ended({"round_id": 2, "users": USERS, "stages": [], "stage": None, "state": "aborted",
                 "reason": "test", "proven_bad_shares": [0]})
    assert state.strikes == {0: 2}
    assert _state(tmp_path).strikes == {0: 2}


@pytest.mark.parametrize(("records", "match"), [
    ([OPEN, _end(1), OPEN], "opened again after its end record"),
    ([OPEN, _end(1), _found(0)], "after its end record"),
    ([OPEN, REFUSED, _found(0)], "after its end record"),
], ids=["reopened-after-abort", "found-after-abort", "found-after-refusal"])
def test_records_the_server_never_writes_after_a_rounds_end_are_a_corrupt_journal(
        records: list[dict[str, Any]], match: str, tmp_path: Path) -> None:
    """An opening of a round id after its (non-refused) end -- the server refuses an id that does
    not follow the last, restarts included -- and a finding after the round's end (a round's
    findings are journaled before its end record): the server does not start, nothing written."""
    _write(tmp_path, records)
    before = (tmp_path / JOURNAL).read_bytes()
    with pytest.raises(CorruptState, match=match):
        _state(tmp_path)
    assert (tmp_path / JOURNAL).read_bytes() == before
