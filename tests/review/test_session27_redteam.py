"""Session 27 red team (helper G): the one-server aborting-dropout accounting and its door.

Session 26 (helper I, fd267fe; red team F's S26-F1) names, at a secure sum aborted under
``min_row_holders``, the devices whose own rows breached the rule when they dropped
(``SecAggAborted.aborting_dropouts``), and ``secemb serve`` journals, counts and refuses them at
``MAX_ABORTS`` (docs/secagg.md, "Rows of few holders"; docs/deployment.md, "Aborting dropouts";
docs/security.md, the R6 bullet).  Attacked here: the mechanism's inputs -- who an abort names
(malicious devices, fewer than the threshold, against the honest server), which aborts name nobody,
and what the journal keeps of a naming.  How the count becomes a refusal (a lifetime count, or
helper C's window) is not attacked.

Each attack is a test: one the code defeats is a regression test of the defence; one that
succeeds is ``xfail(strict=True)`` naming its finding (S27-Gn; its docstring says what the attack
gets and its severity; the red team's report to the lead gives a suggested fix).  Expected names are the
tests' own (the devices the test made drop, the rows it gave), never the code's.
"""

# ruff: noqa: F811  (the fixture sfsl is imported from the session 24 test, then requested)

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / d) for d in ("secagg", "server", ".")]  # the helpers below

import test_s26_row_holders as rh  # noqa: E402
from secagg_rounds import Round  # noqa: E402
from share_records import flip_tag  # noqa: E402
from test_s23_secagg_complaints import spoil_share_to  # noqa: E402
from test_s24_strikes import Served, _state, sfsl  # noqa: E402, F401 - sfsl: a fixture

from secemb.errors import InvalidMessage  # noqa: E402
from secemb.secagg import SecAggAborted, run_round  # noqa: E402
from secemb.server.exchange_state import DROPOUTS, FOUND, JOURNAL  # noqa: E402
from secemb.server.persist import CorruptState, Journal, StorageError  # noqa: E402
from secemb.server.verify import MAX_ABORTS  # noqa: E402

# ================================================================== who an abort names

# devices 0-3 each hold one row alone (0-3) and row 4 with the others
LONE_ROWS = {0: [0, 4], 1: [1, 4], 2: [2, 4], 3: [3, 4], 4: [4]}
CLAIMED = {**LONE_ROWS, 4: [0, 1, 2, 3, 4]}  # device 4 signs a row set of every candidate row


def _round(rows: dict[int, list[int]], drop_after: dict[int, int], seed: int) -> tuple[list[int], tuple[int, ...]]:
    """A signed sparse round of ``rows`` (m = 2, threshold n // 2 + 1) with ``drop_after``
    against the honest server: (its survivors, ()) if it commits, ([], the names) if it aborts."""
    n = len(rows)
    cfg = rh._cfg(n, n // 2 + 1, length=max(max(r) for r in rows.values()) + 1)
    try:
        tr = run_round(cfg, rh._inputs(rows, seed), rows={u: np.array(r) for u, r in rows.items()},
                       drop_after=drop_after)
    except SecAggAborted as exc:
        return [], exc.aborting_dropouts
    return tr.survivors, ()


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "S27-G1 (low): a device that claims every candidate row and never drops turns an honest device's "
    "harmless drop into an abort that names the honest device alone; no naming rule fixes it without "
    "unnaming S26-F1's dropping claimer or naming honest devices (docs/security.md, S27-G1)"))
@pytest.mark.parametrize("after", [2, 3], ids=["after-shares", "after-masked-input"])
def test_s27_g1_a_claiming_device_makes_an_honest_drop_abort_and_is_not_named(after: int) -> None:
    """Device 4 (the attacker) signs a row set of every candidate row and sends every message;
    honest device 1 drops once -- after its shares, or after its masked input before signing (an
    ordinary drop).  Without the claim that drop costs nothing (the control below: row 1 was device
    1's alone, device 1 contributed zero there).  With it, row 1 is held by devices 1 and 4, so
    device 1 contributed there, and its drop leaves row 1 one surviving holder (rule 1), or two
    holders and one signer (rule 2): the honest server aborts and names device 1 -- the honest
    device, not the attacker, whose claim made the drop abort.  So one device that never drops,
    and is never named, makes every drop of an honest device at those two points count towards
    the honest device's refusal.  What it adds in SFSL's data is little: on taobao-mini (CPP1 and
    CPP2, 10 and 20 devices a round) every device already holds a row with exactly one other
    device, so its drop there aborts without any attacker (the rule's condition over the devices'
    trained row sets, counted with numpy by the red team)."""
    survivors, names = _round(CLAIMED, {1: after}, 2701)
    assert survivors == [] and names == (1,)  # aborted, the honest device named alone
    assert names != (1,), "the honest device is charged with an abort that the claiming device caused"


@pytest.mark.parametrize("after", [2, 3], ids=["after-shares", "after-masked-input"])
def test_the_control_of_s27_g1_the_same_honest_drop_without_the_claim_commits(after: int) -> None:
    survivors, names = _round(LONE_ROWS, {1: after}, 2702)
    assert survivors == ([0, 2, 3, 4] if after == 2 else [0, 1, 2, 3, 4]) and names == ()


@pytest.mark.parametrize("after", [None, 1, 4], ids=["no-drop", "after-advertise", "after-signing"])
def test_the_bound_of_s27_g1_the_claim_makes_no_other_honest_drop_abort(after: int | None) -> None:
    """What S27-G1's attacker cannot do (docs/security.md, S27-G1: why it stays open, and why its gain is
    bounded by the window): device 4 claims every candidate row and never drops, and honest device 1 sends
    every message, or drops where no rule counts it -- after its advertise (not in U2: device 4 counts one
    holder of row 1 in its U2 and contributes zero there) or after signing the survivor list (its input is
    in).  The round commits, nobody named: the claim turns only the honest device's own drops after its
    shares or after its masked input into aborts, never makes one of its own."""
    survivors, names = _round(CLAIMED, {} if after is None else {1: after}, 2708)
    assert survivors == ([0, 2, 3, 4] if after == 1 else [0, 1, 2, 3, 4]) and names == ()


@pytest.mark.parametrize("after", [1, 4], ids=["after-advertise", "after-signing"])
def test_a_claiming_device_that_drops_where_it_is_not_counted_aborts_nothing(after: int) -> None:
    """Device 4 claims every row and drops where no rule counts it: after its advertise (it is in
    the key list, not in U2: the honest devices count only U2's holders, so they contribute zero
    on their lone rows) or after signing the survivor list (its input is in; four unmask messages
    are above the threshold 3).  The round commits: dropping there costs the attacker nothing
    and the round nothing."""
    survivors, names = _round(CLAIMED, {4: after}, 2703)
    assert survivors == ([0, 1, 2, 3] if after == 1 else [0, 1, 2, 3, 4]) and names == ()


@pytest.mark.parametrize("stage", ["masked", "consistency"])
def test_a_claiming_device_whose_message_the_server_refuses_is_named_as_a_dropout(stage: str) -> None:
    """Device 4 claims every row and, in place of dropping, sends a masked input one word short
    (or a survivor-list signature with one bit flipped): the honest server refuses the message
    (``InvalidMessage``) and device 4 is out of the stage, as a dropout is -- the round aborts
    naming device 4, not an honest device, as if it had dropped there."""
    rows = {u: np.array(r) for u, r in CLAIMED.items()}
    rnd = Round(rh._cfg(5, 3, length=5), rh._inputs(CLAIMED, 2706), rows=rows)
    rnd.play(until=stage)
    server = rnd.server
    receive, close = ((server.receive_masked, server.survivors_messages) if stage == "masked"
                      else (server.receive_consistency, server.signatures_messages))
    kept = rnd.masked if stage == "masked" else rnd.consistency
    for u in range(4):
        receive(u, kept[u])
    bad = kept[4][:-4] if stage == "masked" else kept[4][:-1] + bytes([kept[4][-1] ^ 1])
    with pytest.raises(InvalidMessage):
        receive(4, bad)
    with pytest.raises(SecAggAborted, match="min_row_holders") as aborted:
        close()
    assert aborted.value.aborting_dropouts == (4,)


def test_an_honest_device_whose_shares_from_the_attacker_do_not_open_stays_and_is_not_named() -> None:
    """Device 4 claims every row, spoils its encrypted shares to devices 1 and 2, and drops after
    its shares: devices 1 and 2 stay in the round (they mask with device 4 as with any peer), and
    the abort names device 4 alone."""
    rows = {u: np.array(r) for u, r in CLAIMED.items()}
    rnd = Round(rh._cfg(5, 3, length=5), rh._inputs(CLAIMED, 2707), rows=rows)
    with pytest.raises(SecAggAborted, match="MaskedInputCollection.*min_row_holders") as aborted:
        rnd.play(deal=lambda u, msg: flip_tag(flip_tag(msg, 1, True), 2, True) if u == 4 else msg, dropped=(4,))
    assert sorted(rnd.masked) == [0, 1, 2, 3] and aborted.value.aborting_dropouts == (4,)


def test_an_abort_names_only_devices_that_dropped_or_did_not_sign_and_every_rule_abort_names_one() -> None:
    """60 rounds of five devices (threshold 3) with row sets drawn at random; devices 3 and 4 are
    the attacker's (fewer than the threshold): each signs its own rows or every candidate row, and
    drops after any stage (or not).  Honest devices 0-2 drop too, now and then.  In every round:
    an abort names only devices the test made drop after their shares or after their masked input
    (never one that sent every message, never one that dropped where no rule counts it, never one
    outside the round), each once, sorted; and every abort under ``min_row_holders`` names at
    least one device (no such abort goes unnamed).  Aborts for too few devices name nobody."""
    g = random.Random(2704)  # test rows and choices, not secrets
    rule_aborts = 0
    for k in range(60):
        rows = {u: sorted(g.sample(range(6), g.randint(1, 4))) for u in range(5)}
        drops = {u: g.choice([1, 2, 3, 4]) for u in range(3) if g.random() < 0.2}
        for u in (3, 4):
            if g.random() < 0.5:
                rows[u] = list(range(6))
            if g.random() < 0.8:
                drops[u] = g.choice([1, 2, 3, 4])
        cfg = rh._cfg(5, 3)
        try:
            run_round(cfg, rh._inputs(rows, 2705 + k), rows={u: np.array(r) for u, r in rows.items()},
                      drop_after=drops)
        except SecAggAborted as exc:
            names = exc.aborting_dropouts
            may_be_named = {u for u, stage in drops.items() if stage in (2, 3)}
            assert list(names) == sorted(set(names)) and set(names) <= may_be_named, (k, rows, drops, names)
            if "min_row_holders" in str(exc):
                rule_aborts += 1
                assert names, (k, rows, drops, str(exc))
            else:
                assert "threshold" in str(exc) and names == (), (k, str(exc))
    assert rule_aborts >= 10  # the sample does reach the rule (not a vacuous pass)


# ================================================================== aborts at Unmasking (S27-G2: named since the fix)

def _spoiling_round(seed: int) -> Round:
    """Three devices (threshold 2) holding the same rows; device 0 sends every message, its
    encrypted shares to devices 1 and 2 spoiled (one GCM tag bit each: the server cannot tell)."""
    rows = {u: [0, 1, 2] for u in range(3)}
    rnd = Round(rh._cfg(3, 2, length=3), rh._inputs(rows, seed), rows={u: np.array(r) for u, r in rows.items()})
    rnd.play(deal=lambda u, msg: flip_tag(flip_tag(msg, 1, True), 2, True) if u == 0 else msg)
    return rnd


def test_s27_g2_one_device_spoiling_its_shares_aborts_the_round_and_is_named_nowhere() -> None:
    """Device 0 takes part in every stage (it never drops, it signs, it unmasks) but its share
    ciphertexts to both peers do not open: each peer complains and leaves device 0 out of its
    unmask message, device 0's own unmask share is the only one of its seed, fewer than the
    threshold 2, and the round aborts.  Documented as possible (docs/secagg.md, "Shares that do not
    open": more than |U4| - threshold spoiled shares abort a round), but the abort named nobody:
    not an aborting dropout, not a cheater (a complaint cannot be verified).  So the S26-F1 door's
    bound on the rounds one device aborts did not hold: this device aborted every round it was in,
    never counted.  Fixed (session 27, helper H; the name is the finding's): the complaints alone
    left the seed short (both peers unmasked), so the abort names device 0 among
    ``aborting_dropouts``, which the door counts."""
    rnd = _spoiling_round(2710)
    with pytest.raises(SecAggAborted, match="self-mask seed of client 0") as aborted:
        rnd.server.result()
    assert rnd.server.complaints == {1: [0], 2: [0]}  # the operator can read it; nothing counts it
    named = set(aborted.value.aborting_dropouts) | set(rnd.server.cheaters)
    assert 0 in named, "the device whose spoiled shares aborted the round is not counted anywhere"


def test_s27_g2_over_the_app_a_spoiling_device_aborts_round_after_round_and_the_door_never_refuses_it(
        sfsl: Any, tmp_path: Path) -> None:
    """S27-G2 over ``secemb serve``'s app (three devices a round, threshold 2): device 0 spoils its
    secure-sum shares to devices 1 and 2 and sends every message.  Each round aborts at sum-unmask;
    the operator read the complaints, but device 0 had no strike and no aborting dropout, and the
    round after ``MAX_ABORTS`` such rounds still took it in (the door that S26-F1's mitigation
    added was not reached).  Fixed (session 27, helper H; the name is the finding's): each abort
    names device 0 among the aborting dropouts (still no strike: a complaint proves nothing), and
    the round after ``MAX_ABORTS`` of them refuses it.  Before the fix this test played
    ``MAX_ABORTS + 1`` rounds asserting that none named device 0 and required the refusal at the
    round after; the fix refuses it one round earlier, where the naming says it must."""
    served = Served(sfsl, tmp_path)

    def spoil_both(party: Any, body: bytes) -> bytes:
        return spoil_share_to(spoil_share_to(body, 1), 2)

    for r in range(1, MAX_ABORTS + 1):
        opened = served.round(r, {"sum-shares": spoil_both})
        assert opened["users"] == [0, 1, 2] and opened["refused"] == []
        doc = served.last()
        assert (doc["state"], doc[DROPOUTS], doc["proven_bad_shares"]) == ("aborted", [0], [])
        assert "self-mask seed of client 0" in doc["reason"] and doc["complaints"] == {"1": [0], "2": [0]}
    assert served.strikes()["strikes"] == {}
    assert served.admin("GET", "/v1/admin/exchange/dropouts")["dropouts"] == {"0": MAX_ABORTS}
    opened = served.http.open(MAX_ABORTS + 1, [0, 1, 2])
    assert opened["refused"] == [0], f"device 0 aborted {MAX_ABORTS} rounds and is still let in"


# ================================================================== what the journal keeps of a naming

def _aborted_doc(round_id: int, dropouts: list[int]) -> dict[str, Any]:
    return {"round_id": round_id, "users": [0, 1, 2, 3], "stages": [], "stage": None, "state": "aborted",
            "reason": "red team", "proven_bad_shares": [], DROPOUTS: dropouts}


def _refusing(monkeypatch: pytest.MonkeyPatch, events: tuple[str, ...]) -> None:
    """The journal's disk refuses the records of ``events`` from now on."""
    real = Journal.append

    def append(self: Journal, record: dict[str, Any]) -> None:
        if record.get("event") in events:
            raise StorageError(f"red team: the disk refuses the {record.get('event')} record")
        real(self, record)

    monkeypatch.setattr(Journal, "append", append)


def test_a_naming_whose_finding_record_the_disk_refused_counts_once_from_its_end_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The finding record refused, the end record taken: the running server and two restarts
    each count device 3's aborted round once."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2, 3])
    with monkeypatch.context() as mp:
        _refusing(mp, (FOUND,))
        state.ended(_aborted_doc(1, [3]))
    assert [r["event"] for r in Journal(tmp_path / JOURNAL).records()] == ["open", "end"]
    assert state.dropouts == {3: 1}
    assert _state(tmp_path).dropouts == state.dropouts
    assert _state(tmp_path).dropouts == state.dropouts


def test_a_clear_after_an_abort_whose_end_record_was_refused_is_kept_by_the_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 aborts naming device 3, its end record refused (the finding record taken); the
    operator clears; the restart records round 1 aborted with device 3 named (from the finding
    record) but inside the clear: device 3 is not counted again, as the running server did not."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2, 3])
    with monkeypatch.context() as mp:
        _refusing(mp, ("end",))
        state.ended(_aborted_doc(1, [3]))
    assert state.dropouts == {3: 1}
    state.clear_strikes()
    assert state.dropouts == {}
    after = _state(tmp_path)
    assert after.last is not None and (after.last["round_id"], after.last[DROPOUTS]) == (1, [3])
    assert after.dropouts == {} and _state(tmp_path).dropouts == {}


def test_s27_g3_a_naming_both_of_whose_records_the_disk_refused_is_lost_at_the_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 aborts naming device 3; the disk refuses both the finding record and the end
    record (each logged, neither retried: an aborted round owed no checkpoint, so the next opening
    went on).  The running server counted device 3 once; the restart recorded round 1 aborted with
    nobody named and counted nothing, so the door's decisions changed at a restart.  The same held
    for a device first proven cheating at the close that ends a round (its strikes).  Fixed
    (session 27, helper I; the name is the finding's): the refused end record is owed and written
    before the next opening (tests/server/test_s27_journal_owed.py: the strikes, a disk that keeps
    refusing), so the restart reads device 3's name from it."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2, 3])
    with monkeypatch.context() as mp:
        _refusing(mp, (FOUND, "end"))
        state.ended(_aborted_doc(1, [3]))
    state.opening(2, [0, 1, 2, 3])  # the next round opens: nothing of round 1 is retried
    assert state.dropouts == {3: 1}
    after = _state(tmp_path)
    assert after.dropouts == state.dropouts, "the restart forgot device 3's aborted round"


@pytest.mark.parametrize("field", [DROPOUTS, "proven_bad_shares"])
@pytest.mark.parametrize("record", [FOUND, "end"])
def test_s27_g4_a_journal_naming_a_device_outside_the_round_is_corrupt(record: str, field: str,
                                                                         tmp_path: Path) -> None:
    """Round 1 opened for devices 0-2; a finding record (or its end record) names device 7 an
    aborting dropout (or proven cheating: the strikes' field has the same gap).  The server never
    writes it (the secure sum names only devices of its U2, all of them the round's: the test
    above), as it never writes the other records the restart refuses as corrupt (a finding before
    the opening or after the end, an id twice, a negative id).  The restart counts device 7 (so
    such records refuse a device that was never in a round), where the journal's other impossible
    records stop the start.  Fixed (session 27, helper I; the name is the finding's): the restart
    refuses such a journal as corrupt (tests/server/test_s27_journal_names.py: the message, an end
    record without an opening, the running server's side)."""
    journal = Journal(tmp_path / JOURNAL)
    journal.append({"event": "open", "round_id": 1, "users": [0, 1, 2]})
    doc = {**_aborted_doc(1, []), "users": [0, 1, 2], field: [7]}
    if record == FOUND:
        journal.append({"event": FOUND, "round_id": 1, "proven_bad_shares": [], field: [7]})
    journal.append({"event": "end", "round_id": 1, "round": doc})
    try:
        state = _state(tmp_path)
    except CorruptState:
        return
    counted = state.dropouts if field == DROPOUTS else state.strikes
    assert counted == {}, f"device 7, never in round 1, is counted: {counted}"
