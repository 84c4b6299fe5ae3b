"""The one-server journal after red team L's S27-L1 and S27-L2 (issue 34, session 27, helper M):
the branches tests/review/test_session27_redteam_l.py's two tests do not reach.

* S27-L1: a node's names are kept sorted, each once (``ExchangeState._within``), before anything is
  counted or journaled -- in the finding and end records, the round document the operator reads,
  and a committed round's checkpoint (whose document a restart reads when the disk refused the end
  record).  Before, a name given twice was counted once and journaled twice, and the restart refused
  the journal (CorruptState: 'names a device twice'): the server did not start.
* S27-L2: a refused opening's end record the disk refuses is owed as an ended round's: the node's
  refusal is the operator's answer (not a 503), the next opening writes the record first and is
  refused (503) while the disk refuses.  A server that stops while it is owed leaves the opening
  without an end: the restart records it aborted (one round more on the window's clock, its id
  used) -- the documented limit.

The disk refusing is a monkeypatched ``Journal.append``; a restart is a fresh ``ExchangeState``
over the same directory.  Expected names and counts are the tests' own.
"""

# ruff: noqa: F811  (the fixture sfsl is imported from the session 24 test, then requested)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_s24_strikes import Served, _end, _state, sfsl  # noqa: F401 - sfsl: a fixture
from test_s27_journal_owed import _ends, _events, _refusing

from secemb.errors import ProtocolError
from secemb.protocols.secea.staged import SecEANode
from secemb.server.exchange_state import DROPOUTS, FOUND, JOURNAL
from secemb.server.persist import Journal, StorageError
from secemb.server.verify import ABORT_WINDOW, MAX_ABORTS


def _found(state_dir: Path) -> list[dict[str, Any]]:
    return [r for r in Journal(state_dir / JOURNAL).records() if r["event"] == FOUND]


def test_names_given_twice_out_of_order_and_outside_the_round_are_journaled_sorted_each_once(tmp_path: Path) -> None:
    """Round 1 (devices 0-3) aborts; the node names ``proven_bad_shares`` [2, 0, 2, 9] and aborting
    dropouts [3, 1, 3] (9 is no user of the round).  The running server strikes 0 and 2 once and
    counts 1 and 3 once; the finding record, the end record and the document the operator reads
    hold [0, 2] and [1, 3]; the restart counts the same."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2, 3])
    state.ended(_end(1, users=[0, 1, 2, 3], proven_bad_shares=[2, 0, 2, 9], **{DROPOUTS: [3, 1, 3]})["round"])
    running = (state.strikes, state.dropouts)
    assert running == ({0: 1, 2: 1}, {1: 1, 3: 1})
    assert state.last is not None
    assert (state.last["proven_bad_shares"], state.last[DROPOUTS]) == ([0, 2], [1, 3])
    assert [(r["proven_bad_shares"], r[DROPOUTS]) for r in _found(tmp_path)] == [([0, 2], [1, 3])]
    assert (_ends(tmp_path)[1]["proven_bad_shares"], _ends(tmp_path)[1][DROPOUTS]) == ([0, 2], [1, 3])
    restarted = _state(tmp_path)
    assert (restarted.strikes, restarted.dropouts) == running


def test_a_committed_rounds_checkpoint_holds_a_name_given_twice_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 commits naming device 1 twice in ``proven_bad_shares``; the disk takes the checkpoint
    and refuses the end record, and the server stops.  The restart reads the round from the
    checkpoint's document (and writes its end record): device 1 has one strike, as at the running
    server (before, that document named it twice and the restart refused it)."""
    monkeypatch.setattr(SecEANode, "state", lambda self: ({}, {}))  # the SecEA node has no set-up here
    monkeypatch.setattr(SecEANode, "restore", lambda self, meta, arrays: None)
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    with monkeypatch.context() as mp:
        _refusing(mp, ("end",))
        state.ended({**_end(1, proven_bad_shares=[1, 1])["round"], "state": "committed"})
    assert state.strikes == {1: 1} and _events(tmp_path) == [("open", 1), (FOUND, 1)]
    restarted = _state(tmp_path)
    assert restarted.strikes == {1: 1}
    assert restarted.last is not None and restarted.last["proven_bad_shares"] == [1]
    assert _ends(tmp_path)[1]["proven_bad_shares"] == [1]


def _refused_while_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Device 0 named by the aborts of rounds 1 to ``MAX_ABORTS`` (refused for ``ABORT_WINDOW + 1
    - MAX_ABORTS`` rounds); round 11 opened for devices 1 and 2, the node refuses it and the disk
    refuses that end record (and goes on refusing end records until the context ends)."""
    state = _state(tmp_path)
    for rid in range(1, MAX_ABORTS + 1):
        state.opening(rid, [0, 1, 2])
        state.ended(_end(rid, proven_bad_shares=[], **{DROPOUTS: [0]})["round"])
    state.opening(11, [1, 2])
    _refusing(monkeypatch, ("end",))
    state.refused(11, "test: the node refuses")
    return state


def test_a_stop_while_the_refused_record_is_owed_makes_the_opening_a_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit the docs state: the server stops while round 11's refused record is owed (nothing
    written since).  The running server counted 10 rounds (device 0: 41 to wait, id 11 free); the
    restart finds round 11's opening without an end and records it aborted: 11 rounds, 40 to wait,
    id 11 used (the next opening must follow it)."""
    wait = ABORT_WINDOW + 1 - MAX_ABORTS
    with monkeypatch.context() as mp:
        state = _refused_while_named(tmp_path, mp)
        assert (state.rounds, state.let_in_after(0)) == (MAX_ABORTS, wait)
        assert _events(tmp_path)[-1] == ("open", 11)
    after = _state(tmp_path)
    assert (after.rounds, after.let_in_after(0)) == (MAX_ABORTS + 1, wait - 1)
    assert after.last is not None and (after.last["round_id"], after.last["state"]) == (11, "aborted")
    assert after.last["reason"] == "open when the server stopped: aborted at the restart"
    with pytest.raises(ProtocolError, match="does not follow round 11"):
        after.opening(11, [1, 2])
    after.opening(12, [1, 2])


def test_the_owed_refused_record_is_written_before_the_next_opening_of_another_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 11 refused by the node, its record owed; the opening of round 12 is refused (the disk's
    error) and writes nothing while the disk refuses, then writes round 11's refused end record and
    its own opening; round 12 aborts naming nobody.  The running server and the restart both count
    11 rounds (device 0: 40 to wait)."""
    with monkeypatch.context() as mp:
        state = _refused_while_named(tmp_path, mp)
        with pytest.raises(StorageError, match="ENOSPC"):
            state.opening(12, [1, 2])
        assert _events(tmp_path)[-1] == ("open", 11)
    state.opening(12, [1, 2])
    assert _events(tmp_path)[-3:] == [("open", 11), ("end", 11), ("open", 12)]
    assert _ends(tmp_path)[11] == {"round_id": 11, "state": "refused", "reason": "test: the node refuses"}
    state.ended(_end(12, users=[1, 2], proven_bad_shares=[])["round"])
    wait = ABORT_WINDOW - MAX_ABORTS
    assert (state.rounds, state.let_in_after(0)) == (MAX_ABORTS + 1, wait)
    after = _state(tmp_path)
    assert (after.rounds, after.let_in_after(0)) == (MAX_ABORTS + 1, wait)


def test_over_the_app_a_refused_opening_whose_record_the_disk_refuses_answers_the_nodes_refusal(
        sfsl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``secemb serve``'s app, the disk refusing end records: the operator opens round 1 for one
    device; the node refuses (422, its own reason -- before, the disk's 503 hid it) and the record
    is owed.  The next open answers 503 (``storage_unavailable``) and opens nothing; once the disk
    takes it, round 1 opens (the refused record first) and commits; the restart reads round 1
    committed and opens round 2."""
    served = Served(sfsl, tmp_path)
    with monkeypatch.context() as mp:
        _refusing(mp, ("end",))
        answers = [served.http.call("admin", "POST", "/v1/admin/exchange/rounds",
                                    json.dumps({"round_id": 1, "users": users}).encode())
                   for users in ([0], [0, 1, 2])]
        assert [a.status_code for a in answers] == [422, 503], [a.text for a in answers]
        assert "at least 2 distinct" in answers[0].text
        assert answers[1].json()["error"] == "storage_unavailable" and "ENOSPC" in answers[1].text
    assert _events(tmp_path) == [("open", 1)]
    served.round(1)
    assert served.last()["state"] == "committed"
    assert _events(tmp_path)[:3] == [("open", 1), ("end", 1), ("open", 1)]
    served.restart()
    assert (served.last()["round_id"], served.last()["state"]) == (1, "committed")
    served.round(2)
    assert served.last()["state"] == "committed"
