"""Session 27 red team (helper L): today's one-server door, journal and complaint naming.

Attacked: helper H's naming of a device whose secret the complaints against it alone left short
(3206984, :meth:`~secemb.secagg.server.SecAggServer._holder_sets`), helper C's window of aborting
dropouts (5148510: refused at ``MAX_ABORTS`` of the last ``ABORT_WINDOW`` rounds the server ran),
helper I's owed end records and the journal's names (99a1852), and helper J's SFSL/SecEA outcomes
(f19f504).  The attackers are devices (fewer than the threshold) against the honest server, and a
disk that refuses a write.

Each attack is a test: one the code defeats is a regression test of the defence; one that
succeeds is ``xfail(strict=True)`` naming its finding (S27-Ln; the docstring says what the attack
gets and its severity).  The expected names and counts are the tests' own (the devices the test
made complain, lie or drop; the rounds it played), never the code's.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / d) for d in ("secagg", "server", ".")]  # the helpers below

from secagg_rounds import Hook, Round, drawn, move_unmask_share  # noqa: E402
from share_records import flip_tag  # noqa: E402
from test_s24_strikes import Served, _state  # noqa: E402

from secemb.errors import ProtocolError  # noqa: E402
from secemb.secagg import SecAggAborted, SecAggConfig, default_threshold  # noqa: E402
from secemb.server.exchange_state import DROPOUTS, JOURNAL, ExchangeState  # noqa: E402
from secemb.server.persist import Journal, StorageError  # noqa: E402
from secemb.server.verify import ABORT_WINDOW, MAX_ABORTS, MAX_REJECTIONS  # noqa: E402

# (signed, sparse): SFSL's PSU is signed and dense, its secure sum signed and sparse
SFSL_KINDS = [(True, False), (True, True)]
SFSL_IDS = ["signed", "signed-sparse"]


def _round(n: int, kind: tuple[bool, bool]) -> Round:
    signed, sparse = kind
    cfg = SecAggConfig(length=6, threshold=default_threshold(n), width=2, round_id=2727, signed=signed, sparse=sparse)
    return drawn(cfg, n, 5270 + n)


def _complaining(colluders: list[int], victims: list[int], signed: bool) -> Hook:
    """The relay hook under which each of ``colluders`` finds that none of ``victims``' shares to it
    opens -- in its unmask message the same omissions as a colluding device's false complaints."""
    def relay(u: int, msg: bytes) -> bytes:
        for v in victims if u in colluders else ():
            msg = flip_tag(msg, v, signed)
        return msg
    return relay


# ----------------------------------------------------------------------------- (1) framing

@pytest.mark.parametrize("kind", SFSL_KINDS, ids=SFSL_IDS)
def test_below_the_bound_two_colluders_complaining_about_every_honest_device_name_nobody(
        kind: tuple[bool, bool]) -> None:
    """Five devices (threshold 3), devices 3 and 4 colluding, every device unmasking: they
    complain about all three honest devices at once.  Each honest secret keeps its 3 honest
    holders (|U4| - threshold = 2 complaints are absorbed): the round commits with the exact sum
    and nobody is named -- the complaints are only recorded for the operator."""
    rnd = _round(5, kind)
    rnd.play(relay=_complaining([3, 4], [0, 1, 2], rnd.cfg.signed))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.aborting_dropouts == [] and rnd.server.cheaters == []
    assert rnd.server.complaints == {3: [0, 1, 2], 4: [0, 1, 2]}


@pytest.mark.parametrize("kind", SFSL_KINDS, ids=SFSL_IDS)
def test_at_the_even_n_bound_the_same_complaints_name_every_honest_device_of_the_round(
        kind: tuple[bool, bool]) -> None:
    """Four devices (threshold 3), devices 2 and 3 colluding (threshold - 1: within the model):
    their false complaints about devices 0 and 1 leave each honest secret 2 shares, and the abort
    names both honest devices and neither colluder.  The documented bound (docs/security.md,
    S27-G2: n - threshold + 1 complainers for even n), reached here for every honest device at once
    -- one round, one count against each of them; ten such rounds refuse them all for the window
    while the colluders are never counted (the operator sees only the complaints naming them)."""
    rnd = _round(4, kind)
    rnd.play(relay=_complaining([2, 3], [0, 1], rnd.cfg.signed))
    with pytest.raises(SecAggAborted, match=r"clients \[0, 1\] named") as aborted:
        rnd.server.result()
    assert aborted.value.aborting_dropouts == (0, 1) and rnd.server.aborting_dropouts == [0, 1]
    assert rnd.server.cheaters == [] and rnd.server.complaints == {2: [0, 1], 3: [0, 1]}


@pytest.mark.parametrize("sparse", [False, True], ids=["signed", "signed-sparse"])
def test_a_lie_does_not_stand_in_for_a_missing_complaint(sparse: bool) -> None:
    """Five devices (threshold 3), devices 3 and 4 colluding: 4 complains about device 0 and 3,
    rather than complaining too, lies about its share of device 1's seed -- all its shares are
    left out (named a cheater), so device 0's seed has its 3 honest holders only.  Device 0's
    secret still opens: a liar removed from U4 does not count as a complainer (the naming needs
    threshold holders *left*, and leaves out the liar's shares of every secret alike).  The round
    commits, 3 named for its lie, device 0 nowhere."""
    rnd = _round(5, (True, sparse))
    lie: Hook = lambda u, msg: move_unmask_share(msg, 1, 1, 1) if u == 3 else msg  # noqa: E731
    rnd.play(relay=_complaining([4], [0], True), unmask=lie)
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.aborting_dropouts == [] and rnd.server.cheaters == [3]
    assert rnd.server.complaints == {4: [0]}


@pytest.mark.parametrize("kind", SFSL_KINDS, ids=SFSL_IDS)
def test_a_colluder_dropping_at_unmask_takes_its_complaint_with_it(kind: tuple[bool, bool]) -> None:
    """Five devices (threshold 3), devices 3 and 4 colluding: 3 complains about device 0, and 4
    (which would be the second complainer) sends no unmask message to shrink U4 instead.  U4 is
    0-3: |U4| - threshold = 1 complaint absorbed, device 0's seed keeps its 3 honest holders and
    device 4's seed (4 sent its masked input) opens from the 4 unmaskers.  Dropping removes a
    complainer, so it never lowers the bound: the round commits, nobody named."""
    rnd = _round(5, kind)
    rnd.play(relay=_complaining([3], [0], rnd.cfg.signed), silent=(4,))
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.aborting_dropouts == [] and rnd.server.complaints == {3: [0]}


# ----------------------------------------------------------------------------- (2) the window

def _end(state: ExchangeState, rid: int, users: list[int], named: list[int]) -> None:
    state.ended({"round_id": rid, "users": users, "stages": [], "stage": None, "state": "aborted",
                 "reason": "test", "proven_bad_shares": [], DROPOUTS: named})


def test_round_id_jumps_and_refused_openings_do_not_move_the_window(tmp_path: Path) -> None:
    """Device 0 aborts ten rounds whose ids jump by 10**6 (refused: 41 more rounds, the count the
    test works out: round 1 of the ten leaves after round 51); then the node refuses 100 openings
    (ids 10**8 ..): no round, still 41, the id stays free; a restart reads the same; one more round
    (0 not in it: refused at the open) makes it 40."""
    state = _state(tmp_path)
    for k in range(MAX_ABORTS):
        rid = 1 + k * 10**6
        state.opening(rid, [0, 1, 2])
        _end(state, rid, [0, 1, 2], [0])
    assert (state.rounds, state.dropouts, state.let_in_after(0)) == (10, {0: 10}, ABORT_WINDOW + 1 - MAX_ABORTS)
    for k in range(100):
        state.opening(10**8 + k, [1, 2])
        state.refused(10**8 + k, "test: the node refuses")
    assert (state.rounds, state.let_in_after(0), state.refuses(0)) == (10, 41, True)
    state = _state(tmp_path)
    assert (state.rounds, state.let_in_after(0), state.refuses(0)) == (10, 41, True)
    state.opening(10**8, [1, 2])  # the refused openings' first id, still free
    _end(state, 10**8, [1, 2], [])
    assert (state.rounds, state.let_in_after(0)) == (11, 40)


def test_a_round_counts_a_device_once_whatever_names_it(tmp_path: Path) -> None:
    """SFSL's outcome is the union of the PSU's and the sum's names, and the state adds the finding
    record's: a round whose end record names device 0 (twice over: the state gets the finding
    record from the same names) is one count, at the running server and after a restart."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    _end(state, 1, [0, 1, 2], [0])
    assert state.dropouts == {0: 1} and _state(tmp_path).dropouts == {0: 1}
    kinds = [r["event"] for r in Journal(tmp_path / JOURNAL).records()]
    assert kinds == ["open", "found", "end"]


# ----------------------------------------------------------------------------- (3) the journal

# S27-L1 (low), fixed (session 27, helper M): ExchangeState.ended dropped a node's names outside the
# round's users (_within, S27-G4) but journaled a name given twice as it was; the running server counted
# it once, the restart refused the journal (CorruptState: 'names a device twice'). _within now returns
# the names sorted, each once. Assertions unchanged.
@pytest.mark.parametrize("field", ["proven_bad_shares", DROPOUTS])
def test_s27_l1_a_name_given_twice_is_counted_once_but_the_journal_then_refuses_the_restart(
        field: str, tmp_path: Path) -> None:
    """A node's outcome names device 0 twice in ``field``: the running server counts one; the
    restart must read the journal it wrote and count the same."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    state.ended({"round_id": 1, "users": [0, 1, 2], "stages": [], "stage": None, "state": "aborted",
                 "reason": "test", "proven_bad_shares": [], DROPOUTS: [], field: [0, 0]})
    running = (state.strikes, state.dropouts)
    assert running == (({0: 1}, {}) if field == "proven_bad_shares" else ({}, {0: 1}))
    restarted = _state(tmp_path)
    assert (restarted.strikes, restarted.dropouts) == running


# S27-L2 (low), fixed (session 27, helper M): a refused opening is no round only while the journal
# holds its 'refused' end record; when the disk refused that record, ExchangeState.refused raised
# StorageError (503) and nothing owed it, so a restart recorded the round aborted (one round more on the
# window's clock, the id used). Now the record is owed as an ended round's. Deliberately changed: refused
# no longer raises (as ended: the node's refusal is the caller's answer, the disk's error is logged and
# refuses the next opening, asserted here), and the restart comes once the owed record is written; a
# restart before that is the documented limit (tests/server/test_s27_journal_l2.py).
def test_s27_l2_a_refused_opening_whose_record_the_disk_refused_is_a_round_after_the_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Device 0 aborts rounds 1-10 (refused, 41 rounds left); the node refuses round 11's opening
    and the disk refuses that record: the running server counts no round (41 left, id 11 free) and
    refuses the next opening while the disk refuses.  Once the disk takes it (the next opening, of
    id 11 again, which the node refuses too), the restart must agree."""
    state = _state(tmp_path)
    for rid in range(1, MAX_ABORTS + 1):
        state.opening(rid, [0, 1, 2])
        _end(state, rid, [0, 1, 2], [0])
    state.opening(11, [1, 2])
    append = Journal.append

    def refuse(self: Journal, record: dict[str, Any]) -> None:
        if record.get("event") == "end":
            raise StorageError("could not write journal journal.jsonl: ENOSPC")
        append(self, record)

    monkeypatch.setattr(Journal, "append", refuse)
    state.refused(11, "test: the node refuses")
    with pytest.raises(StorageError):
        state.opening(11, [1, 2])
    monkeypatch.setattr(Journal, "append", append)
    assert (state.rounds, state.let_in_after(0)) == (10, 41)
    state.opening(11, [1, 2])
    state.refused(11, "test: the node refuses again")
    restarted = _state(tmp_path)
    assert (restarted.rounds, restarted.let_in_after(0)) == (10, 41)
    try:
        restarted.opening(11, [1, 2])
    except ProtocolError as exc:
        raise AssertionError(f"id 11 is no longer free after the restart: {exc}") from None


class _Disk:
    """The journal's disk: refuses the records of the events in :attr:`refusing` (none at first)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.refusing: tuple[str, ...] = ()
        append = Journal.append

        def maybe(journal: Journal, record: dict[str, Any]) -> None:
            if record.get("event") in self.refusing:
                raise StorageError("could not write journal journal.jsonl: ENOSPC")
            append(journal, record)

        monkeypatch.setattr(Journal, "append", maybe)


@pytest.mark.parametrize("seed", range(24))
def test_random_rounds_refusals_clears_disk_refusals_and_restarts_count_as_the_rule_says(
        seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four devices over 300 steps drawn from ``seed`` (the schedule only; no secret): rounds with
    random names (aborting dropouts, proven cheaters, the latter sometimes found before the end),
    ids jumping by up to 1,000, node-refused openings, the operator's clears, a disk refusing the
    end, finding, open or clear records for a step, and restarts (whenever nothing is owed, a
    round possibly open).  After every step the state's clock, window counts and strikes are the
    test's own model of the rule: a round is each ended round (and each round open at a restart),
    a node-refused opening none; a device's count is the rounds among the last ``ABORT_WINDOW``
    since the last clear naming it; refused at ``MAX_ABORTS`` or ``MAX_REJECTIONS`` strikes."""
    rng = random.Random(seed)  # the schedule of a test, not a secret
    disk, devices = _Disk(monkeypatch), [0, 1, 2, 3]
    state = _state(tmp_path)
    clock, named, strikes = 0, {u: [] for u in devices}, {u: 0 for u in devices}
    owed, last_id, open_round = False, 0, None  # open_round: (id, the proven its journaled finding holds)

    def window() -> dict[int, int]:
        return {u: k for u in devices if (k := sum(1 for n in named[u] if n > clock - ABORT_WINDOW))}

    def refused(u: int) -> bool:
        return window().get(u, 0) >= MAX_ABORTS or strikes[u] >= MAX_REJECTIONS

    for step in range(300):
        disk.refusing = rng.choice([(), (), (), ("end",), ("found",), ("end", "found"), ("open",),
                                    ("strikes_cleared",)])
        draw = rng.random()
        if draw < 0.05 and not owed:
            disk.refusing = ()
            if open_round is not None:  # recorded aborted at the restart, with its finding record's names
                clock += 1
                for u in open_round[1]:
                    strikes[u] += 1
                open_round = None
            state = _state(tmp_path)
        elif draw < 0.06 and open_round is None:
            try:
                state.clear_strikes()
            except StorageError:
                assert "strikes_cleared" in disk.refusing
            else:
                named, strikes = {u: [] for u in devices}, {u: 0 for u in devices}
        elif open_round is None:
            rid, users = last_id + rng.choice([1, 1, 7, 1000]), [u for u in devices if not refused(u)]
            try:
                state.opening(rid, users)
            except StorageError:
                assert "open" in disk.refusing or owed and "end" in disk.refusing
                owed = owed and "end" in disk.refusing
                continue
            owed = False
            if len(users) < 2 or rng.random() < 0.1:
                disk.refusing = ()  # S27-L2 aside: the refused record is written
                state.refused(rid, "test: the node refuses")
                continue
            last_id, open_round = rid, (rid, set())
            proven = [u for u in users if rng.random() < 0.04]
            if proven and rng.random() < 0.5:
                state.found(rid, proven)
                if "found" not in disk.refusing:
                    open_round = (rid, set(proven))
        else:
            rid, users = open_round[0], [u for u in devices if not refused(u)]
            proven = sorted(open_round[1] | {u for u in users if rng.random() < 0.04})
            dropped = [u for u in users if rng.random() < 0.2]
            doc = {"round_id": rid, "users": users, "stages": [], "stage": None, "state": "aborted",
                   "reason": "test", "proven_bad_shares": proven, DROPOUTS: dropped}
            state.ended(doc)
            clock, open_round, owed = clock + 1, None, "end" in disk.refusing
            for u in proven:
                strikes[u] += 1
            for u in dropped:
                named[u].append(clock)
        assert (state.rounds, state.dropouts) == (clock, window()), step
        assert state.strikes == {u: k for u, k in strikes.items() if k}, step
        assert [state.refuses(u) for u in devices] == [refused(u) for u in devices], step


# ----------------------------------------------------------------------------- (1) over secemb serve's app

@pytest.fixture(scope="module")
def sfsl_of_four() -> Any:
    """SFSL on taobao-mini with rounds of four devices (an even round: threshold 3, so two
    colluding devices are below it), as test_s24_strikes's fixture with ``users_per_round=4``."""
    from secemb.data.ctr import TaobaoShaped, split_clicks
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol

    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    return SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=4), sfsl_preset="CPP1", batch=8, data=clicks)


def test_over_the_app_two_colluders_in_rounds_of_four_get_both_honest_devices_refused(
        sfsl_of_four: Any, tmp_path: Path) -> None:
    """The documented even-n bound end to end (docs/security.md, S27-G2: ``threshold - 1``
    complainers with every device unmasking): rounds of four devices over ``secemb serve``'s app,
    devices 2 and 3 colluding.  Each takes the secure sum's relayed shares of devices 0 and 1 as not
    opening (their tags flipped before the colluder's own client reads them: the same unmask message
    as a false complaint) and otherwise plays honestly.  Every round aborts at sum-unmask naming 0
    and 1 (never 2 or 3, no strike), and after ``MAX_ABORTS`` rounds the open refuses both honest
    devices while the colluders are let in: two devices below the threshold shut the honest half of
    a round out for the window (each round costs them an abort they could have caused anyway by
    withholding their unmask messages, naming nobody).  A first round played without the false
    complaints commits."""
    served = Served(sfsl_of_four, tmp_path)

    def play(r: int, framing: bool) -> dict[str, Any]:
        opened = served.http.open(r, [0, 1, 2, 3])
        assert opened["users"] == [0, 1, 2, 3] and opened["refused"] == []
        parties = {u: served.devices[u].party(opened) for u in opened["users"]}
        for stage in opened["stages"]:
            for u, party in parties.items():
                assert served.http.send(u, r, stage, party.message(stage)) == 204, (r, stage, u)
            if served.last()["state"] != "open":
                break
            if sfsl_of_four.plan().replies(stage):
                for u, party in parties.items():
                    answer = served.http.fetch(u, r, stage)
                    assert answer is not None, (r, stage, u)
                    if framing and u in (2, 3) and stage == "sum-shares":
                        for victim in (0, 1):
                            answer = flip_tag(answer, victim, True)
                    party.accept(stage, answer)
        return served.last()

    control = play(1, framing=False)  # the same round without the false complaints commits
    assert (control["state"], control[DROPOUTS], control["complaints"]) == ("committed", [], {})
    for r in range(2, MAX_ABORTS + 2):
        doc = play(r, framing=True)
        assert (doc["state"], doc[DROPOUTS], doc["proven_bad_shares"]) == ("aborted", [0, 1], []), r
        assert doc["complaints"] == {"2": [0, 1], "3": [0, 1]}
    assert served.strikes()["strikes"] == {}
    assert served.admin("GET", "/v1/admin/exchange/dropouts")["dropouts"] == {"0": MAX_ABORTS, "1": MAX_ABORTS}
    opened = served.http.open(MAX_ABORTS + 2, [0, 1, 2, 3])
    assert opened["refused"] == [0, 1] and opened["users"] == [2, 3]
