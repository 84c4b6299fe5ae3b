"""Session 26 red team (helper F): today's one-server changes, attacked by a deviating server and
colluding devices (fewer than the threshold).

* ``SecAggConfig.min_row_holders`` (finding R6 closed by helper C: 203cfb9, 4f63faf, 9ea5e27 and
  the lead's f21c0f8; docs/secagg.md, "Rows of few holders");
* the aborting close's ``found`` record (helper D, 06fae73: ``ExchangeState.ended``);
* Shamir's subset weights and leave-one-out openings (helper D, 78fc0b1).

Each attack is written as a test: one the code defeats is a regression test of the defence; one
that succeeds is ``xfail(strict=True)`` and names its finding (S26-Fn; its reason says what the
attack gets; the red team's report to the lead gives the severity and a suggested fix).  A documented limit that the
attack reaches is a ``test_limit_...`` asserting the leak (docs/secagg.md's "Not covered").

The deviating server of the secure-aggregation attacks is ``tests/secagg/test_s26_row_holders.py``'s
:class:`Deviant` (it builds every message itself and drives the real
:class:`~secemb.secagg.SecAggClient`); the expected values come from numpy over the test's inputs
or from ``tests/shamir_textbook.py``, never from the code under test.
"""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / d) for d in ("secagg", "server", ".")]  # the helpers below

import shamir_textbook as textbook  # noqa: E402
import test_s26_row_holders as rh  # noqa: E402
from test_s24_strikes import _state  # noqa: E402

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError  # noqa: E402
from secemb.secagg import (  # noqa: E402
    SecAggAborted, SecAggClient, SecAggConfig, SecAggServer, messages, run_round, shamir,
)
from secemb.secagg.client import SIGNED_ENTRY_BYTES  # noqa: E402
from secemb.secagg.identity import Roster  # noqa: E402
from secemb.secagg.shamir import PRIME, PointSet, combine_robust, lagrange_at_zero, openings_leaving_one_out  # noqa: E402
from secemb.server.exchange_state import JOURNAL  # noqa: E402
from secemb.server.persist import Journal  # noqa: E402

H = messages.HEADER_BYTES
N = shamir.SHARE_BYTES


def _revealed(unmask_msg: bytes) -> tuple[set[int], set[int]]:
    """The clients an unmask message sends a share of: (mask keys ``s^SK``, self-mask seeds ``b``)."""
    body, at, parts = unmask_msg[H:], 0, []
    for _ in range(2):
        count = struct.unpack_from("<I", body, at)[0]
        parts.append({struct.unpack_from("<I", body, at + 4 + i * (4 + N))[0] for i in range(count)})
        at += 4 + count * (4 + N)
    assert at == len(body)
    return parts[0], parts[1]


def _no_double_reveal(adv: rh.Deviant, honest: set[int]) -> None:
    """Bonawitz's invariant over every honest unmask message of the round: no client has both its
    mask key's and its seed's shares sent by honest clients."""
    keys_of, seeds_of = set(), set()
    for u, msg in adv.unmasked.items():
        if u in honest:
            s, b = _revealed(msg)
            keys_of |= s
            seeds_of |= b
    assert not keys_of & seeds_of, keys_of & seeds_of


# ================================================================== min_row_holders

def test_limit_a_colluding_co_holder_that_drops_opens_the_victims_row_although_the_victim_refuses() -> None:
    """Documented limit (docs/secagg.md, "Not covered": ``m - 1`` colluding clients holding the
    row), reached without the colluder surviving.  Device 1 (the server's) signs a row set with
    row 1, which only device 0 holds, so device 0 counts two holders in its U2 and contributes
    there, masked with device 1.  The server relays device 1's shares to device 0 alone and treats
    device 1 as dropped: device 0 refuses (rule 1), but devices 2-4 never saw device 1 (no rule
    applies to them), sign and send device 0's seed shares -- the threshold of them -- and device
    1's mask key is the server's own.  Row 1 opens to device 0's value."""
    rows = {0: [1], 1: [1], 2: [0], 3: [0], 4: [0]}
    cfg = rh._cfg(5, 3)
    x = rh._inputs(rows, 2601)
    adv = rh.Deviant(cfg, rows, x)
    adv.relay({u: [v for v in adv.ids if v != 1] for u in (2, 3, 4)})
    u3 = [0, 2, 3, 4]
    adv.survivors(u3)
    adv.unmask(u3)
    assert "row 1 has 1 surviving holder(s)" in adv.refused[0] and sorted(adv.unmasked) == [2, 3, 4]
    seeds = [_revealed(adv.unmasked[u])[1] for u in (2, 3, 4)]
    assert all(0 in b for b in seeds) and len(seeds) >= cfg.threshold  # device 0's seed opens
    _no_double_reveal(adv, {0, 2, 3, 4})
    # device 1's mask key is the colluder's: the server removes the pair's mask, the row is x_0
    assert adv.read_with_secrets(u3, [1], 1) == int(x[0][0])


def test_two_survivor_lists_open_a_mask_key_but_never_the_seed_with_it() -> None:
    """Bonawitz's double reveal, tried with the new rules: devices 0-2 are shown the survivor list
    of all seven, devices 3-6 a list without device 0 (its row set keeps six holders, so rule 1
    lets them reveal device 0's mask key).  Each group signs its own list; devices 0-2 cannot
    gather the threshold (4) of signatures over theirs (3, and the others' do not verify over it),
    so no honest device sends a share of device 0's seed: its input stays under ``PRG(b_0)``."""
    rows = {u: [0, 1] for u in range(7)}
    cfg = rh._cfg(7, 4)
    adv = rh.Deviant(cfg, rows, rh._inputs(rows, 2602))
    adv.relay({})
    every = adv.ids
    adv.survivors(every, shown=[0, 1, 2])
    adv.survivors([1, 2, 3, 4, 5, 6], shown=[3, 4, 5, 6])
    adv.unmask([0, 1, 2], signers=[0, 1, 2])
    adv.unmask([3, 4, 5, 6], signers=[3, 4, 5, 6])
    assert all("3 survivors signed the survivor list, fewer than the threshold 4" in adv.refused[u]
               for u in (0, 1, 2))
    assert sorted(adv.unmasked) == [3, 4, 5, 6]
    assert all(_revealed(adv.unmasked[u])[0] == {0} for u in (3, 4, 5, 6))  # the mask key: four shares
    _no_double_reveal(adv, set(every))
    # and a signature over the other list does not count: devices 0-2 are refused with all seven shown
    adv2 = rh.Deviant(cfg, rows, rh._inputs(rows, 2603))
    adv2.relay({})
    adv2.survivors(every, shown=[0, 1, 2])
    adv2.survivors([1, 2, 3, 4, 5, 6], shown=[3, 4, 5, 6])
    adv2.unmask([0])
    assert "did not sign the survivor list this client was sent" in adv2.refused[0] and adv2.unmasked == {}


def test_per_device_signature_sets_only_make_a_device_stricter() -> None:
    """The signatures message is per recipient: the server shows device 0 (the victim, row 1 with
    device 1) every signature but device 1's, the others all of them, having discarded nothing.
    Device 0 then sees device 1 as a survivor that did not sign and refuses (row 1: two surviving
    holders, one signer); the others unmask and the round's sums are exact -- withholding a
    signature can make a device refuse, never reveal more."""
    rows = {0: [1], 1: [1], 2: [0], 3: [0], 4: [0]}
    cfg = rh._cfg(5, 3)
    x = rh._inputs(rows, 2604)
    adv = rh.Deviant(cfg, rows, x)
    adv.relay({})
    adv.survivors(adv.ids)
    adv.unmask([0], signers=[0, 2, 3, 4])
    adv.unmask([1, 2, 3, 4])
    assert "row 1 has 2 surviving holder(s), 1 of them signers" in adv.refused[0]
    assert sorted(adv.unmasked) == [1, 2, 3, 4]
    assert all(_revealed(adv.unmasked[u])[0] == set() for u in (1, 2, 3, 4))  # no mask key: nobody dropped
    _no_double_reveal(adv, set(adv.ids))
    want = (int(x[0][0]) + int(x[1][0])) % 2**32
    assert adv.read_with_secrets(adv.ids, [], 1) == want  # the row is over both holders


@pytest.fixture
def one_roster(monkeypatch: pytest.MonkeyPatch) -> Roster:
    """Every :class:`Deviant` of the test enrolls its devices in this one roster (two rounds of
    the same deployment: the same certified devices)."""
    roster = Roster.generate()
    monkeypatch.setattr(rh.Roster, "generate", staticmethod(lambda: roster))
    return roster


def _psu_signatures(roster: Roster, round_id: int) -> dict[int, bytes]:
    """Devices 0 and 2-4's signatures over the survivor list ``[0, 2, 3, 4]`` in an honest dense
    signed round ``round_id`` (an SFSL round's PSU: secagg round ``2r``; device 1 drops after its
    shares), as the server received them."""
    cfg = SecAggConfig(length=8, threshold=3, round_id=round_id, signed=True)
    x = {u: np.full(8, u + 1, np.uint32) for u in range(5)}
    tr = run_round(cfg, x, drop_after={1: 2}, record=True, identities={u: roster.enroll(u) for u in range(5)})
    assert tr.survivors == [0, 2, 3, 4]
    return {sender: msg[H:] for stage, sender, _, msg in tr.messages if stage == "ConsistencyCheck"}


@pytest.mark.parametrize("source", ["earlier-round", "this-rounds-psu"])
def test_signatures_of_another_round_or_of_the_psu_do_not_open_the_sum(one_roster: Roster, source: str) -> None:
    """Replays across rounds and across an SFSL round's two aggregations: devices 0 and 2-4 signed
    the survivor list ``[0, 2, 3, 4]`` in the secure sum of round 12 (secagg round 25), or in
    round 13's PSU (secagg round 26, dense).  In round 13's secure sum (27) the server discards
    device 1 (row 1's only co-holder), shows that list to device 0 alone (it signs) and hands it,
    beside its own, devices 2-4's old signatures over the same ids, so that it would unmask
    without the others having seen the list.  They do not verify (each covers its round's header
    and key list): device 0 refuses, nothing leaves."""
    rows = {0: [1], 1: [1], 2: [0], 3: [0], 4: [0]}
    if source == "earlier-round":
        old = rh.Deviant(rh._cfg(5, 3, round_id=25), rows, rh._inputs(rows, 2605))
        old.relay({})
        old.survivors([0, 2, 3, 4])
        replayed = old.sigs
    else:
        replayed = _psu_signatures(one_roster, 26)
    new = rh.Deviant(rh._cfg(5, 3, round_id=27), rows, rh._inputs(rows, 2606))
    new.relay({})
    new.survivors([0, 2, 3, 4], shown=[0])
    new.sigs.update({u: replayed[u] for u in (2, 3, 4)})
    new.unmask([0])
    assert "did not sign the survivor list this client was sent" in new.refused[0] and new.unmasked == {}


@pytest.mark.parametrize("stale_round, stale_m", [(24, 2), (26, 1), (26, 2)],
                         ids=["earlier-round", "m=1-header", "control-this-round"])
def test_a_key_list_entry_signed_for_another_round_or_rule_is_refused(one_roster: Roster, stale_round: int,
                                                                      stale_m: int) -> None:
    """The server wants a co-holder for device 0's row 1 that it controls the fate of: it splices
    into round 26's key list device 1's entry of another run in which device 1 signed row 1 -- an
    earlier round, or the same round id under ``min_row_holders = 1`` (a forged header).  Device 0
    checks every entry's signature over the round's header (round id and ``m`` included) and
    refuses the key list: it shares no key and contributes nothing.  The control splices an entry
    device 1 signed under this round's parameters: taken (the splice itself is sound)."""
    cfg = rh._cfg(5, 3)
    stale_cfg = rh._cfg(5, 3, round_id=stale_round, m=stale_m)
    stale = SecAggServer(stale_cfg)
    for u, r in {0: [2], 1: [1], 2: [0], 3: [0], 4: [0]}.items():
        stale.receive_advertise(u, SecAggClient(u, stale_cfg, identity=one_roster.enroll(u)).advertise(np.array(r)))
    live = SecAggServer(cfg)
    victim = SecAggClient(0, cfg, identity=one_roster.enroll(0))
    live.receive_advertise(0, victim.advertise(np.array([1])))
    for u, r in {1: [0], 2: [0], 3: [0], 4: [0]}.items():
        live.receive_advertise(u, SecAggClient(u, cfg, identity=one_roster.enroll(u)).advertise(np.array(r)))
    size = 4 + 64 + SIGNED_ENTRY_BYTES + cfg.bitmap_bytes
    old, body = bytearray(stale.keys_messages()[0][H:]), bytearray(live.keys_messages()[0][H:])
    assert len(old) == len(body) == 4 + 5 * size
    body[4 + size : 4 + 2 * size] = old[4 + size : 4 + 2 * size]  # device 1's entry (second in the list)
    spliced = messages.frame("keys", cfg.round_id, messages.SERVER, bytes(body))
    if (stale_round, stale_m) == (cfg.round_id, cfg.min_row_holders):
        assert victim.share_keys(spliced)
        return
    with pytest.raises(InvalidMessage, match="keys for device 1 that device 1 did not sign"):
        victim.share_keys(spliced)


# ------------------------------------------------------------------ one device aborts every round

DOS_ROWS = {0: [0, 4], 1: [1, 4], 2: [2, 4], 3: [3, 4], 4: [0, 1, 2, 3, 4]}


@pytest.mark.parametrize("after", [2, 3], ids=["after-shares", "after-masked-input"])
def test_s26_f1_one_device_claiming_every_row_and_dropping_aborts_the_round(after: int) -> None:
    """Devices 0-3 each hold one row alone (0-3) and row 4 with the others; device 4 (the
    attacker) signs a row set of every candidate row, so each honest device counts two holders of
    its own row in its U2 and contributes there.  Device 4 then drops -- after its shares (rule 1:
    every honest row keeps one surviving holder) or after its masked input, before signing (rule 2:
    two surviving holders, one signer).  The honest server aborts at the close (every survivor
    would refuse).  Before min_row_holders the same dropout cost nothing (four survivors,
    threshold 3).  The mitigation (session 26, helper I; the round still aborts): the abort names
    device 4 as the dropout whose rows caused it (``SecAggAborted.aborting_dropouts``), and the
    one-server server counts such aborts against the device and refuses it at the door at
    ``MAX_ABORTS`` (tests/server/test_s26_dropout_aborts.py)."""
    cfg = rh._cfg(5, 3, length=5)
    x = rh._inputs(DOS_ROWS, 2607)
    with pytest.raises(SecAggAborted, match="min_row_holders") as aborted:
        run_round(cfg, x, rows={u: np.array(r) for u, r in DOS_ROWS.items()}, drop_after={4: after})
    assert aborted.value.aborting_dropouts == (4,)


def test_the_same_dropout_without_the_claimed_rows_commits() -> None:
    """The control of S26-F1: device 4 holding row 4 only (as the others do) drops after its
    shares; the round commits over devices 0-3, row 4 summed exactly, rows 0-3 zero (one holder)."""
    rows = {**DOS_ROWS, 4: [4]}
    cfg = rh._cfg(5, 3, length=5)
    x = rh._inputs(rows, 2608)
    tr = run_round(cfg, x, rows={u: np.array(r) for u, r in rows.items()}, drop_after={4: 2})
    assert tr.survivors == [0, 1, 2, 3]
    want = sum(int(x[u][1]) for u in range(4)) % 2**32
    assert tr.total[:, 0].tolist() == [0, 0, 0, 0, want]


# ================================================================== the found record and the journal

def _doc(round_id: int, proven: list[int], state: str = "aborted") -> dict[str, Any]:
    return {"round_id": round_id, "users": [0, 1, 2], "stages": [], "stage": None, "state": state,
            "reason": "red team", "proven_bad_shares": proven}


def test_a_finding_at_the_ending_close_strikes_once_over_two_restarts(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Device 1 proven mid-round (a found record), device 2 at the close that ends the round (the
    ended() found record), the end record refused by the disk: the running server strikes each
    once; a restart writes the missing end record and strikes each once; a second restart reads
    the found records and that end record and still strikes each once (no double count)."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    state.found(1, [1])
    real = Journal.append

    def refuse_end(self: Journal, record: dict[str, Any]) -> None:
        if record.get("event") == "end":
            from secemb.server.persist import StorageError
            raise StorageError("red team: the disk refuses the end record")
        real(self, record)

    monkeypatch.setattr(Journal, "append", refuse_end)
    state.ended(_doc(1, [1, 2]))
    monkeypatch.setattr(Journal, "append", real)
    assert state.strikes == {1: 1, 2: 1}
    events = [(r["event"], r.get("proven_bad_shares")) for r in Journal(tmp_path / JOURNAL).records()]
    assert events == [("open", None), ("found", [1]), ("found", [1, 2])]
    assert _state(tmp_path).strikes == {1: 1, 2: 1}
    assert _state(tmp_path).strikes == {1: 1, 2: 1}


def test_s26_f2_a_round_reopened_after_a_refusal_and_open_at_a_restart_is_aborted_there(tmp_path: Path) -> None:
    """Round 1 is refused by the node (its id stays free: the door left too few devices,
    ``test_a_round_the_door_leaves_too_few_devices_for_is_the_nodes_refusal_and_its_id_stays_free``),
    the operator opens round 1 again, device 0 is proven cheating in it (a found record), and the
    server stops.  The restart must abort round 1 (the round that was open) and refuse its id, as
    it does for a round without the earlier refusal.  Before the fix (session 26, helper I: the
    journal read in order) it took the refusal's end record for round 1's end: round 1 could open
    again, and if device 0 was proven again there (a second strike for the running server), the
    restart after counted one."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    state.refused(1, "red team: the node refused the round")
    state.opening(1, [0, 1, 2])
    state.found(1, [0])
    after = _state(tmp_path)  # kill -9 and restart
    assert after.strikes == {0: 1}
    assert after.last is not None and (after.last["round_id"], after.last["state"]) == (1, "aborted")
    with pytest.raises(ProtocolError, match="does not follow round 1"):
        after.opening(1, [0, 1, 2])


def test_the_control_of_s26_f2_without_the_refusal_the_restart_aborts_the_open_round(tmp_path: Path) -> None:
    """The same journal less the refused first opening: the restart records round 1 as aborted,
    strikes device 0 once, and round 1's id does not open again."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2])
    state.found(1, [0])
    after = _state(tmp_path)
    assert after.strikes == {0: 1}
    assert after.last is not None and (after.last["round_id"], after.last["state"]) == (1, "aborted")
    with pytest.raises(ProtocolError, match="does not follow round 1"):
        after.opening(1, [0, 1, 2])


# ================================================================== Shamir on adversarial point sets

_GEN = random.Random(2609)  # test points and shares, not secrets

EDGE_SETS = {
    "field-top": [PRIME - 1, PRIME - 2, PRIME - 3, 1, 2],
    "field-halves": [(PRIME - 1) // 2, (PRIME + 1) // 2, PRIME - 1, 1, 7, 3],
    "id-top": [2**32 - 1, 2**32 - 2, 1, 2**31, 5, 9, 2**32 - 3],
    "dense-boundary": [9, 1, 2, 3, 4, 5, 6, 7, 8, 10],  # top = 10 = 2 * 5 for a subset of 5: the factorial path's edge
}


@pytest.mark.parametrize("name", sorted(EDGE_SETS))
def test_subset_weights_and_coefficients_at_the_fields_edges_are_the_textbooks(name: str) -> None:
    """Every subset of at least two points (in a scrambled order) of a set at the field's edge or
    the ids' top: its weights from the set's and the Lagrange coefficients with ``within`` equal
    the textbook's, and ``lagrange_at_zero``'s cache keeps the first answer right when a second
    ``within`` holds the same points."""
    points = EDGE_SETS[name]
    full = PointSet(points)
    for size in range(2, len(points) + 1):
        for _ in range(4):
            xs = _GEN.sample(points, size)
            sub = full.subset(xs)
            assert list(sub.weights) == textbook.weights(xs)
            inner = _GEN.sample(xs, _GEN.randrange(1, size + 1))
            fresh = PointSet(points)
            assert fresh.lagrange_at_zero(inner, within=sub) == textbook.lagrange_at_zero(inner)
            assert fresh.lagrange_at_zero(inner, within=full.subset(points)) == textbook.lagrange_at_zero(inner)
            assert list(sub.subset(inner).weights) == textbook.weights(inner)


@pytest.mark.parametrize("name", sorted(EDGE_SETS))
def test_leave_one_out_openings_at_the_fields_edges_are_the_textbooks(name: str) -> None:
    """``openings_leaving_one_out`` over a set's points (plain and with its weights) against the
    textbook opening of each leave-one-out subset, for shares on a polynomial of degree ``m - 2``
    (every opening the secret) and arbitrary shares."""
    xs = EDGE_SETS[name]
    m = len(xs)
    f = [_GEN.randrange(PRIME) for _ in range(m - 1)]
    columns = [[textbook.poly_at(f, x) for x in xs], [_GEN.randrange(PRIME) for _ in xs]]
    for given in (xs, PointSet(xs).subset(xs)):
        out = openings_leaving_one_out(given, columns)
        assert [row[0] for row in out] == [f[0]] * m
        for i in range(m):
            rest = [x for j, x in enumerate(xs) if j != i]
            lam = textbook.lagrange_at_zero(rest)
            assert out[i][1] == sum(lv * y for lv, y in zip(lam, [y for j, y in enumerate(columns[1]) if j != i],
                                                          strict=True)) % PRIME


def test_a_liar_at_the_fields_top_point_is_named_and_left_out() -> None:
    """``combine_robust`` with the round's points at the field's edge (``within``), one holder at
    ``p - 1`` off the polynomial: it is named and the secrets are the dealt ones."""
    points = EDGE_SETS["field-top"] + [11, 12]
    t = 3
    polys = [[_GEN.randrange(PRIME) for _ in range(t)] for _ in range(2)]
    holders = [PRIME - 1, 1, 11, PRIME - 3, 12]
    shares = [[textbook.poly_at(f, x) for f in polys] for x in holders]
    shares[0][1] = (shares[0][1] + 1) % PRIME
    secrets, bad = combine_robust(holders, shares, t, within=PointSet(points))
    assert (secrets, bad) == ([polys[0][0], polys[1][0]], 0)


@pytest.mark.parametrize("xs", [[1, 2, 2], [0, 1, 2], [1, PRIME, 2], [-1, 1, 2], [1, 2, PRIME + 3]],
                         ids=["duplicate", "zero", "p", "negative", "above-p"])
def test_holder_sets_with_a_repeated_zero_or_outside_point_are_refused_on_every_new_path(xs: list[int]) -> None:
    """Duplicates, 0 and points outside ``[1, p)``: refused by the leave-one-out openings, by a
    point set, by a subset of a valid set that names them, by ``lagrange_at_zero`` and by
    ``combine_robust`` (plain and within a set) -- never an answer (``p + 3`` would alias 3)."""
    good = PointSet([1, 2, 3, 4])
    with pytest.raises(InvalidParameters):
        openings_leaving_one_out(xs, [[1, 2, 3]])
    with pytest.raises(InvalidParameters):
        PointSet(xs)
    with pytest.raises(InvalidParameters):
        good.subset(xs)
    with pytest.raises(InvalidParameters):
        lagrange_at_zero(xs)
    with pytest.raises(InvalidParameters):
        good.lagrange_at_zero(xs)
    for within in (None, good):
        with pytest.raises((InvalidParameters, InvalidMessage)):
            combine_robust(xs, [[1], [2], [3]], 2, within=within)
