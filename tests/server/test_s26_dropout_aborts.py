"""Aborting dropouts (issue 34, session 26, helper I: red team F's S26-F1).

With ``min_row_holders`` (docs/secagg.md, "Rows of few holders") one device can abort every SFSL
round it is in: it signs a row set of every candidate row, so each honest device that holds a
row alone counts two holders and contributes there, then drops after ShareKeys (rule 1) or after
its masked input, before signing (rule 2); the honest server aborts.  The mitigation: the abort
names the devices whose own rows breached the rule (:attr:`SecAggAborted.aborting_dropouts`,
:attr:`SecAggServer.aborting_dropouts`, the SFSL node's outcome), the one-server server journals
them with the round's end, counts the rounds each device's dropouts aborted, and refuses a device
at the door at :data:`~secemb.server.verify.MAX_ABORTS` until the operator clears it (session 27:
at ``MAX_ABORTS`` of the last :data:`~secemb.server.verify.ABORT_WINDOW` rounds, until they leave
the window or the clear; tests/server/test_s27_dropout_window.py).  A suspicion, not a proof: an
honest device that drops there is counted too.

Expected names are the tests' own (the device the test made drop, the rows the test gave), never
the code's.
"""

# ruff: noqa: F811  (the fixture sfsl is imported from the session 24 test, then requested)

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_s24_strikes import Served, _end, _state, sfsl  # noqa: F401 - sfsl: a fixture

from secemb.secagg import SecAggAborted, SecAggClient, SecAggConfig, run_round
from secemb.server.exchange_state import DROPOUTS, FOUND, JOURNAL
from secemb.server.persist import CorruptState, Journal, StorageError
from secemb.server.verify import ABORT_WINDOW, MAX_ABORTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "secagg"))
import test_s26_row_holders as rh  # noqa: E402


def _aborted(rows: dict[int, list[int]], drop_after: dict[int, int]) -> SecAggAborted:
    """The abort of a signed sparse round (m = 2, threshold n // 2 + 1) of ``rows`` and ``drop_after``."""
    cfg = rh._cfg(len(rows), len(rows) // 2 + 1, length=max(max(r) for r in rows.values()) + 1)
    with pytest.raises(SecAggAborted) as got:
        run_round(cfg, rh._inputs(rows, 2611), rows={u: np.array(r) for u, r in rows.items()}, drop_after=drop_after)
    return got.value


# ================================================================== who the abort names

def test_an_honest_dropout_is_named_and_a_harmless_one_is_not() -> None:
    """Rule 1: device 1 shares row 0 with device 0 alone and drops after its shares (row 0 keeps
    one surviving holder: aborted); device 4 drops too, its row 5 held by the four survivors: not
    named."""
    rows = {0: [0, 5], 1: [0, 5], 2: [5], 3: [5], 4: [5], 5: [5]}
    exc = _aborted(rows, {1: 2, 4: 2})
    assert "MaskedInputCollection" in str(exc) and exc.aborting_dropouts == (1,)


def test_two_non_signers_sharing_the_short_row_are_both_named() -> None:
    """Rule 2: row 0 is held by devices 0, 3 and 4; 3 and 4 survive but do not sign (three
    surviving holders, one signer); device 5 does not sign either, its only row held by all
    seven.  Each of 3 and 4 alone would leave row 0 two signers: both are named, 5 is not."""
    rows = {0: [0, 5], 1: [1, 5], 2: [2, 5], 3: [0, 5], 4: [0, 5], 5: [5], 6: [5]}
    exc = _aborted(rows, {3: 3, 4: 3, 5: 3})
    assert "ConsistencyCheck" in str(exc) and exc.aborting_dropouts == (3, 4)


def test_an_abort_for_too_few_clients_names_nobody() -> None:
    """Three of five drop after their shares (device 1 holding row 0 with device 0 alone): the
    threshold (3) aborts the round first, and names nobody."""
    rows = {0: [0, 1], 1: [0, 1], 2: [1], 3: [1], 4: [1]}
    exc = _aborted(rows, {1: 2, 2: 2, 3: 2})
    assert "threshold" in str(exc) and exc.aborting_dropouts == ()


def test_the_control_an_unsigned_config_never_counts_holders() -> None:
    """min_row_holders 1 (the paper's rule): the same dropout commits, nobody is named."""
    rows = {0: [0, 5], 1: [0, 5], 2: [5], 3: [5], 4: [5], 5: [5]}
    cfg = SecAggConfig(length=6, threshold=4, round_id=26, sparse=True, signed=True, min_row_holders=1)
    tr = run_round(cfg, rh._inputs(rows, 2613), rows={u: np.array(r) for u, r in rows.items()}, drop_after={1: 2})
    assert tr.survivors == [0, 2, 3, 4, 5]


# ================================================================== the one-server door

def claim_every_row(party: Any, body: bytes) -> bytes:
    """Device 0's sum advertise with a row set of every candidate row of the round and the public
    rows (signed by it: its own choice, nothing bounds it), its later messages from that client."""
    party._sum = SecAggClient(party.device.user, party.sum_config, identity=party.identity, _rng=party._rng)
    cfg = party.sum_config
    rows = np.concatenate([cfg.candidate_rows, np.arange(cfg.private_rows, cfg.length)])
    party._values = np.zeros((rows.size, cfg.width), np.uint32)  # its masked input, if it sends one
    out: bytes = party._sum.advertise(rows)
    return out


def _attack(served: Served, round_id: int, stop: str) -> dict[str, Any]:
    """Round ``round_id`` for devices 0-2, device 0 claiming every row and sending nothing from
    ``stop`` on (``sum-masked``: it drops after its shares; ``sum-consistency``: after its masked
    input); the operator closes ``stop`` (409: the node aborted the round).  The operator's round
    document."""
    opened = served.http.open(round_id, [0, 1, 2])
    parties = {u: served.devices[u].party(opened) for u in opened["users"]}
    for stage in opened["stages"]:
        for u, party in parties.items():
            if u == 0 and stage == stop:
                continue
            body = party.message(stage)
            assert served.http.send(u, round_id, stage, claim_every_row(party, body) if u == 0 and
                                    stage == "sum-advertise" else body) == 204, (stage, u)
        if stage == stop:
            resp = served.http.call("admin", "POST", f"/v1/admin/exchange/rounds/{round_id}/{stage}/close", b"{}")
            assert resp.status_code == 409, resp.text
            return served.last()
        for u, party in parties.items():
            answer = served.http.fetch(u, round_id, stage) if served.sfsl.plan().replies(stage) else None
            if answer is not None:
                party.accept(stage, answer)
    raise AssertionError("the round did not reach the stage")


def _dropouts(served: Served) -> dict[str, Any]:
    out: dict[str, Any] = served.admin("GET", "/v1/admin/exchange/dropouts")
    return out


def test_a_device_whose_dropouts_abort_max_aborts_rounds_is_refused_until_the_operator_clears_it(
        sfsl: Any, tmp_path: Path) -> None:
    """S26-F1 over ``secemb serve``'s app: device 0 claims every row and drops (after its shares,
    then after its masked input, alternately): ten rounds aborted (rounds 1-2 and 4-11), each naming
    device 0 (the operator's document, the journal), an honest round 3 between them unaffected and a
    restart after it keeping the count; after round 11 its dropouts aborted 10 of the last 50 rounds
    (session 27: the window; session 26 refused it at 3 in the deployment's life), so round 12
    leaves it out (403 at its requests, naming the 40 rounds until its round 1 leaves the window
    after round 51), commits without it (39 left), and a restart keeps the refusal; the operator's
    clear lets it in again."""
    assert (MAX_ABORTS, ABORT_WINDOW) == (10, 50)
    served = Served(sfsl, tmp_path)
    attacked = [1, 2, *range(4, 12)]
    for n, r in enumerate(attacked, 1):
        if r == 4:
            served.round(3)  # honest: commits, counts nothing
            assert served.last()["state"] == "committed" and served.last()[DROPOUTS] == []
            served.restart()  # the journal keeps the count
            assert _dropouts(served)["dropouts"] == {"0": 2}
        doc = _attack(served, r, "sum-masked" if r % 2 else "sum-consistency")
        assert (doc["round_id"], doc["state"], doc[DROPOUTS], doc["proven_bad_shares"]) == (r, "aborted", [0], [])
        assert "min_row_holders" in doc["reason"]
        if r < 11:
            assert _dropouts(served) == {"dropouts": {"0": n}, "dropout_limit": 10, "dropout_window": 50,
                                         "refused": [], "let_in_after": {}}
    device_doc = served.http.call(1, "GET", "/v1/exchange/round").json()
    assert DROPOUTS not in device_doc
    assert served.strikes()["strikes"] == {}  # a suspicion, not a strike
    assert _dropouts(served) == {"dropouts": {"0": 10}, "dropout_limit": 10, "dropout_window": 50,
                                 "refused": [0], "let_in_after": {"0": 40}}
    ends = [r for r in Journal(tmp_path / JOURNAL).records() if r["event"] in ("end", FOUND)]
    assert [(r["event"], r["round_id"], r.get(DROPOUTS), r.get("round", {}).get(DROPOUTS)) for r in ends] == [
        rec for r in range(1, 12) for rec in ([("end", 3, None, [])] if r == 3 else
                                              [(FOUND, r, [0], None), ("end", r, None, [0])])]

    opened = served.http.open(12, [0, 1, 2, 3])
    assert opened["users"] == [1, 2, 3] and opened["refused"] == [0]
    for method, path, body in [("POST", "/v1/exchange/rounds/12/psu-advertise", b"\x00" * 64),
                               ("GET", "/v1/exchange/rounds/12/psu-advertise", b"")]:
        resp = served.http.call(0, method, path, body)
        assert resp.status_code == 403, (path, resp.status_code, resp.text)
        assert resp.json() == {"error": "forbidden", "detail": (
            "device 0 was named for the abort of 10 of the last 50 rounds (aborting_dropouts: its dropout "
            "breached min_row_holders, or the complaints against it alone left its secret short; the limit is "
            "10): refused for 40 more round(s), or until the operator clears it ('secemb admin clear-alarms')")}
    parties = {u: served.devices[u].party(opened) for u in (1, 2, 3)}  # the others go on without it
    for stage in opened["stages"]:
        for u, party in parties.items():
            assert served.http.send(u, 12, stage, party.message(stage)) == 204
        if sfsl.plan().replies(stage):
            for u, party in parties.items():
                answer = served.http.fetch(u, 12, stage)
                assert answer is not None
                party.accept(stage, answer)
    assert served.last()["state"] == "committed"
    for device in (0, 1):  # the operator's endpoint is the operator's
        assert served.http.call(device, "GET", "/v1/admin/exchange/dropouts", b"").status_code == 403

    served.restart()  # still refused after a restart, one round nearer its return
    assert _dropouts(served)["let_in_after"] == {"0": 39}
    assert served.http.call(0, "GET", "/v1/exchange/rounds/12/download").status_code == 403

    assert served.admin("POST", "/v1/admin/exchange/strikes/clear") == {"cleared": {}}
    assert _dropouts(served) == {"dropouts": {}, "dropout_limit": 10, "dropout_window": 50, "refused": [],
                                 "let_in_after": {}}
    served.restart()
    assert _dropouts(served)["dropouts"] == {}
    assert served.round(13)["users"] == [0, 1, 2] and served.last()["state"] == "committed"


# ================================================================== the journal

def test_an_abort_whose_end_record_the_disk_refused_still_counts_after_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The finding record written before the end record names the dropouts: the running server
    counts device 3 once, a restart that writes the missing end record counts it once too."""
    state = _state(tmp_path)
    state.opening(1, [0, 1, 2, 3])
    real = Journal.append

    def refuse_end(self: Journal, record: dict[str, Any]) -> None:
        if record.get("event") == "end":
            raise StorageError("test: the disk refuses the end record")
        real(self, record)

    monkeypatch.setattr(Journal, "append", refuse_end)
    state.ended({"round_id": 1, "users": [0, 1, 2, 3], "stages": [], "stage": None, "state": "aborted",
                 "reason": "test", "proven_bad_shares": [], DROPOUTS: [3]})
    monkeypatch.setattr(Journal, "append", real)
    assert state.dropouts == {3: 1} and state.strikes == {}
    after = _state(tmp_path)
    assert after.dropouts == {3: 1} and after.strikes == {}
    assert after.last is not None and after.last[DROPOUTS] == [3]
    assert _state(tmp_path).dropouts == {3: 1}


def test_the_counts_are_rebuilt_after_the_last_clear_each_device_once_a_round(tmp_path: Path) -> None:
    """Rounds 1-2 name device 0, a clear through round 2, round 3 names 0 and 1 (its finding
    record and its end record, counted once), round 4 device 0: device 0 has 2, device 1 has 1;
    ten rounds after the clear naming device 0 (rounds 3-12, all in the window) refuse it (session
    27; session 26: three)."""
    journal = Journal(tmp_path / JOURNAL)
    for rec in [_end(1, **{DROPOUTS: [0]}), _end(2, **{DROPOUTS: [0]}),
                {"event": "strikes_cleared", "through_round": 2, "strikes": {}},
                {"event": "open", "round_id": 3, "users": [0, 1, 2]},
                {"event": FOUND, "round_id": 3, "proven_bad_shares": [], DROPOUTS: [0, 1]},
                _end(3, **{DROPOUTS: [0, 1]}), _end(4, **{DROPOUTS: [0]})]:
        journal.append(rec)
    state = _state(tmp_path)
    assert state.dropouts == {0: 2, 1: 1} and not state.refuses(0)
    for r in range(5, 12):
        journal.append(_end(r, **{DROPOUTS: [0]}))
    assert _state(tmp_path).dropouts == {0: 9, 1: 1} and not _state(tmp_path).refuses(0)
    journal.append(_end(12, **{DROPOUTS: [0]}))
    assert _state(tmp_path).refuses(0) and not _state(tmp_path).refuses(1)


@pytest.mark.parametrize("value", [[0, 0], "0", [-1], [True]], ids=["twice", "not-a-list", "negative", "bool"])
def test_a_damaged_aborting_dropouts_field_is_a_corrupt_journal(value: Any, tmp_path: Path) -> None:
    journal = Journal(tmp_path / JOURNAL)
    journal.append({"event": "open", "round_id": 1, "users": [0, 1, 2]})
    journal.append(_end(1, **{DROPOUTS: value}))
    before = (tmp_path / JOURNAL).read_bytes()
    with pytest.raises(CorruptState, match=DROPOUTS):
        _state(tmp_path)
    assert (tmp_path / JOURNAL).read_bytes() == before
