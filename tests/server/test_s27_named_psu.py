"""A device named by either secure aggregation of a round reaches the one-server door (session 27,
helper J; follow-up of helper H's fix of red team G's S27-G2).

Since H's fix a :class:`~secemb.secagg.SecAggServer` that aborts at Unmasking because the complaints
against one device alone left its secret short names that device in ``aborting_dropouts``, which
``secemb serve`` counts (docs/deployment.md, "Aborting dropouts").  SFSL runs two secure
aggregations a round, the PSU and the secure sum, and its outcome passed on the sum's names only:
a device spoiling its *PSU* shares aborted every round at ``psu-unmask`` and was counted nowhere.
SecEA's set-up runs one (its PSU), and its outcome had no ``aborting_dropouts`` at all.  Now each
outcome names the devices any of its aggregations named (sorted, each once).

The spoiling device sends every message; its encrypted PSU shares to two peers have one tag bit
flipped (the server cannot tell), so of the three devices (threshold 2) only its own unmask share of
its seed is left.  Expected names and counts are the test's own (the device it made spoil, the
rounds it played).
"""

# ruff: noqa: F811  (the fixture sfsl is imported from the session 24 test, then requested)

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_exchange_attacks import Http, http_of, secea_node, secea_world
from test_s23_secagg_complaints import spoil_share_to
from test_s24_strikes import FP, Served, _end, _state, sfsl  # noqa: F401 - sfsl: a fixture

from secemb.errors import ProtocolError
from secemb.protocols.exchange import ExchangeServer
from secemb.protocols.secea.staged import SecEASetupParty
from secemb.randomness import CtrDrbg
from secemb.server.exchange_app import StageCloser
from secemb.server.exchange_state import DROPOUTS, JOURNAL, ExchangeState
from secemb.server.persist import Journal
from secemb.server.verify import MAX_ABORTS


def _spoil_psu_shares(body: bytes) -> bytes:
    """Device 0's PSU shares message with its encrypted shares to devices 1 and 2 spoiled."""
    return spoil_share_to(spoil_share_to(body, 1), 2)


def _play_until_it_ends(http: Http, round_id: int, parties: dict[int, Any], stages: list[str],
                        replies: Callable[[str], bool], spoil: str) -> dict[str, Any]:
    """Round ``round_id``'s ``stages`` played by ``parties`` (device 0's message of ``spoil``
    spoiled by :func:`_spoil_psu_shares`), the server closing each stage once all have sent, until
    the round is no longer open; the operator's outcome of the round."""
    for stage in stages:
        for u, party in parties.items():
            body = party.message(stage)
            assert http.send(u, round_id, stage, _spoil_psu_shares(body) if (u, stage) == (0, spoil) else body) == 204
        out = http.outcome(round_id)
        if out["state"] != "open":
            return out
        if replies(stage):
            for u, party in parties.items():
                answer = http.fetch(u, round_id, stage)
                assert answer is not None, (stage, u)
                party.accept(stage, answer)
    return http.outcome(round_id)


def test_an_sfsl_device_spoiling_its_psu_shares_is_named_counted_and_refused_at_the_limit(
        sfsl: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Device 0 spoils its PSU shares to devices 1 and 2 in ``MAX_ABORTS`` rounds: each aborts at
    ``psu-unmask`` naming device 0 among the aborting dropouts (no strike: a complaint proves
    nothing), the door counts ``MAX_ABORTS`` rounds and refuses device 0 at the next round's open
    and at its stage requests (403).  Before, each abort's outcome carried the sum's names only --
    none, the sum never started -- and the next round took device 0 in."""
    served = Served(sfsl, tmp_path)
    for r in range(1, MAX_ABORTS + 1):
        opened = served.http.open(r, [0, 1, 2])
        assert opened["users"] == [0, 1, 2] and opened["refused"] == []
        parties = {u: served.devices[u].party(opened) for u in opened["users"]}
        out = _play_until_it_ends(served.http, r, parties, opened["stages"], sfsl.plan().replies, "psu-shares")
        assert (out["state"], out[DROPOUTS], out["proven_bad_shares"]) == ("aborted", [0], []), out
        assert out["union_size"] is None and out["complaints"] == {"1": [0], "2": [0]}  # the PSU's abort
        assert "self-mask seed of client 0" in out["reason"]
    assert served.strikes()["strikes"] == {}
    assert served.admin("GET", "/v1/admin/exchange/dropouts")["dropouts"] == {"0": MAX_ABORTS}
    ends = [rec["round"] for rec in Journal(tmp_path / JOURNAL).records() if rec["event"] == "end"]
    assert [(doc["round_id"], doc[DROPOUTS]) for doc in ends] == [(r, [0]) for r in range(1, MAX_ABORTS + 1)]
    opened = served.http.open(MAX_ABORTS + 1, [0, 1, 2])
    assert opened["refused"] == [0], f"device 0 aborted {MAX_ABORTS} rounds' PSU and is still let in"
    refusal = served.http.call(0, "POST", f"/v1/exchange/rounds/{MAX_ABORTS + 1}/psu-advertise", b"x")
    # named in rounds 1-10 of the 10 ended: the window lets it in once round 1 leaves it, 41 rounds on
    assert (refusal.status_code, refusal.json()["detail"]) == (403, (
        "device 0 was named for the abort of 10 of the last 50 rounds (aborting_dropouts: its dropout breached "
        "min_row_holders, or the complaints against it alone left its secret short; the limit is 10): refused "
        "for 41 more round(s), or until the operator clears it ('secemb admin clear-alarms')"))
    alarms = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ALARM")]
    assert alarms == [f"ALARM round {r}: device 0 was named for the abort (aborting_dropouts: its dropout breached "
                      "min_row_holders, or the complaints against it alone left its secret short; the round's "
                      f"reason says which): {r} of the last 50 rounds; at 10 it is refused until they leave the "
                      "window or the operator clears it: 'secemb admin clear-alarms'" for r in range(1, 11)]


def test_a_secea_silo_spoiling_its_set_up_psu_shares_is_named_and_counted(tmp_path: Path) -> None:
    """SecEA's set-up (three silos, PSU threshold 2) with silo 0 spoiling its PSU shares to silos 1
    and 2: the set-up aborts at ``psu-unmask`` naming silo 0 among the aborting dropouts, which the
    state counts and the journal's end record keeps (a restart counts it again).  Before, the
    set-up's outcome had no aborting dropouts and silo 0 was counted nowhere."""
    params, bloom, clients = secea_world(27)
    node = secea_node(params, bloom, 27)

    def state() -> ExchangeState:
        return ExchangeState(tmp_path, FP, ExchangeServer(node, 1 << 20, lambda: b"", 3))

    http = http_of(node, num_users=3, stage_deadline_s=600.0, state=state())
    doc = http.open(1, [0, 1, 2])
    parties = {i: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(100 + i)) for i, c in enumerate(clients)}
    out = _play_until_it_ends(http, 1, parties, doc["stages"], node.plan.replies, "psu-shares")
    assert (out["state"], out[DROPOUTS], out["proven_bad_shares"]) == ("aborted", [0], []), out
    assert out["complaints"] == {"1": [0], "2": [0]} and "self-mask seed of client 0" in out["reason"]
    assert http.call("admin", "GET", "/v1/admin/exchange/dropouts").json()["dropouts"] == {"0": 1}
    assert state().dropouts == {0: 1}  # rebuilt from the journal


def test_a_secea_silo_refused_before_its_set_up_committed_waits_for_the_clear(tmp_path: Path) -> None:
    """A journal of ten aborted set-ups of three silos, each naming silo 2 (as the previous test's
    abort names its spoiler): silo 2 is refused with 41 rounds to wait; the set-up, which needs
    every silo, is then refused by the node at each open (journaled as refused: no round), so the
    wait does not shrink however often the operator opens; the operator's clear lets silo 2 in."""
    for r in range(1, 11):
        Journal(tmp_path / JOURNAL).append(_end(r, **{DROPOUTS: [2]}))
    state = _state(tmp_path)
    rounds = StageCloser(state.server.node, state=state)
    assert state.refuses(2) and state.let_in_after(2) == 41
    for r in (11, 12, 13):
        with pytest.raises(ProtocolError, match="set-up .* comes first"):
            rounds.open_round(r, [0, 1, 2])
        assert state.let_in_after(2) == 41
    rounds.clear_strikes()
    assert not state.refuses(2) and rounds.open_round(11, [0, 1, 2])["users"] == [0, 1, 2]
