"""The one-server door (issue 34, session 24): a device a *signed* secure aggregation shows to have
cheated -- named in a round's ``proven_bad_shares`` (docs/secagg.md, "Share commitments") -- has a
strike for that round; with ``MAX_REJECTIONS`` (3) strikes it is refused at the door of ``secemb
serve``'s app (403 at its stage messages and answers) and left out of the rounds the operator opens,
until the operator clears the strikes (journaled).  The strikes are rebuilt from the journal at a
restart.  Complaints and an unsigned aggregation's names never strike (docs/deployment.md,
"Strikes: a device proven to cheat").

The cheating is device 0's own: as a dealer it deals honest holder 1 a share of its PSU self-mask
seed off its polynomial, sealed and committed to (holder 1 keeps it and sends it back: finding E2's
framing, which now names the dealer), or as a holder it sends a wrong unmask share of the secure
sum.  Expected strike counts are the test's own tallies of the rounds it made device 0 cheat in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_exchange_attacks import SETS, Http, http_of
from test_s23_secagg_complaints import spoil_share_to

from secemb.errors import ProtocolError
from secemb.framing import HEADER_BYTES
from secemb.protocols.exchange import ExchangeServer
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import SecEANode, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import CtrDrbg
from secemb.secagg import SecAggClient, keys, shamir
from secemb.secagg.client import share_commitment
from secemb.secagg.identity import Roster
from secemb.server.exchange_app import StageCloser
from secemb.server.exchange_state import JOURNAL, ExchangeState
from secemb.server.persist import CorruptState, Journal

torch.set_num_threads(1)

FP = "d" * 64  # the configuration fingerprint of the state directory (any, the same across restarts)
SECRETS = (b"a" * 32, b"u" * 32)
N = shamir.SHARE_BYTES
CT = 8 + 2 * N + 16  # a sealed share pair: ids, two shares, the GCM tag
RECORD = 4 + CT + 32  # a signed shares record: recipient id, ciphertext, two share commitments
Cheat = Callable[[Any, bytes], bytes]  # (device 0's party, its genuine message) -> what it sends


def deal_bad_share(party: Any, body: bytes) -> bytes:
    """Device 0's PSU shares message with its share of its self-mask seed to holder 1 moved off
    its polynomial, sealed again under their channel key and committed to: holder 1 checks the
    commitment, keeps the share and sends it back at Unmasking."""
    dealer: SecAggClient = party._psu
    count = int.from_bytes(body[HEADER_BYTES : HEADER_BYTES + 4], "little")
    at = next(a for a in range(HEADER_BYTES + 4, HEADER_BYTES + 4 + count * RECORD, RECORD)
              if int.from_bytes(body[a : a + 4], "little") == 1) + 4
    key, rid = dealer._channel(1, keys.CHANNEL), dealer.config.round_id
    plain = keys.open_sealed(key, rid, 0, 1, body[at : at + CT])
    seed_share = (int.from_bytes(plain[8 + N :], "little") + 7) % shamir.PRIME
    sealed = keys.seal(key, rid, 0, 1, plain[: 8 + N] + seed_share.to_bytes(N, "little"))
    commitment = share_commitment(dealer.config, 0, 1, 1, seed_share)
    return body[:at] + sealed + body[at + CT : at + CT + 16] + commitment + body[at + CT + 32 :]


def lie_in_unmask(party: Any, body: bytes) -> bytes:
    """Device 0's unmask message with one bit of its last share flipped (not the share it was dealt)."""
    return body[:-5] + bytes([body[-5] ^ 1]) + body[-4:]


def spoil_share_to_2(party: Any, body: bytes) -> bytes:
    """Device 0's shares message with its encrypted share to device 2 spoiled: a complaint."""
    return spoil_share_to(body, 2)


@pytest.fixture(scope="module")
def sfsl() -> Any:
    from secemb.data.ctr import TaobaoShaped, split_clicks
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol

    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    return SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP1", batch=8, data=clicks)


class Served:
    """SFSL served as ``secemb serve`` serves it (a durable state in ``state_dir``, the server
    closing each stage once every device still in has sent), restartable; four devices that live
    through the restarts, three a round (the deployment's ``users_per_round``: an SFSL device
    takes part in no round of another size)."""

    def __init__(self, sfsl: Any, state_dir: Path) -> None:
        self.sfsl, self.state_dir = sfsl, state_dir
        self.devices = {u: sfsl.make_device(u) for u in range(4)}
        self.http = self.restart()

    def restart(self) -> Http:
        hosted = self.sfsl.make_server()
        self.http = http_of(hosted.node, SECRETS, num_users=4, stage_deadline_s=600.0, model=hosted.model,
                            state=ExchangeState(self.state_dir, FP, hosted))
        return self.http

    def round(self, round_id: int, cheat: dict[str, Cheat] | None = None, users: tuple[int, ...] = (0, 1, 2)
              ) -> dict[str, Any]:
        """Round ``round_id`` opened for ``users`` and played by those it lists (device 0 sending
        ``cheat[stage](party, genuine)`` at those stages); the operator's answer to the open."""
        opened = self.http.open(round_id, list(users))
        parties = {u: self.devices[u].party(opened) for u in opened["users"]}
        for stage in opened["stages"]:
            for u, party in parties.items():
                body = party.message(stage)
                if u == 0 and cheat and stage in cheat:
                    body = cheat[stage](party, body)
                assert self.http.send(u, round_id, stage, body) == 204, (stage, u)
            if self.sfsl.plan().replies(stage):
                for u, party in parties.items():
                    answer = self.http.fetch(u, round_id, stage)
                    assert answer is not None, (stage, u)
                    party.accept(stage, answer)
        return opened

    def admin(self, method: str, path: str) -> Any:
        resp = self.http.call("admin", method, path, b"{}" if method == "POST" else b"")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def strikes(self) -> dict[str, Any]:
        out: dict[str, Any] = self.admin("GET", "/v1/admin/exchange/strikes")
        return out

    def last(self) -> dict[str, Any]:
        """The round document as the operator reads it."""
        out: dict[str, Any] = self.admin("GET", "/v1/exchange/round")
        return out


def test_a_device_proven_to_cheat_in_three_signed_rounds_is_refused_in_the_fourth_until_the_operator_clears_it(
        sfsl: Any, tmp_path: Path) -> None:
    served = Served(sfsl, tmp_path)
    # rounds 1 and 2: device 0 deals holder 1 a bad share of its seed; the dealer is named, not the holder
    for r in (1, 2):
        opened = served.round(r, {"psu-shares": deal_bad_share})
        assert opened["users"] == [0, 1, 2] and opened["refused"] == []
        doc = served.last()
        assert (doc["round_id"], doc["state"], doc["bad_shares"], doc["proven_bad_shares"], doc["complaints"]) == (
            r, "committed", [0], [0], {})  # holder 1 took the share (no complaint) and is not named
        device_doc = served.http.call(1, "GET", "/v1/exchange/round").json()
        assert "proven_bad_shares" not in device_doc and "bad_shares" not in device_doc
        assert served.strikes() == {"strikes": {"0": r}, "strike_limit": 3, "refused": []}

    served.restart()  # the journal keeps the strikes
    assert served.strikes() == {"strikes": {"0": 2}, "strike_limit": 3, "refused": []}

    # round 3: device 0 sends a share of the secure sum other than the one it was dealt
    served.round(3, {"sum-unmask": lie_in_unmask})
    doc = served.last()
    assert (doc["state"], doc["proven_bad_shares"]) == ("committed", [0])
    assert served.strikes() == {"strikes": {"0": 3}, "strike_limit": 3, "refused": [0]}

    # round 4: device 0 is left out of the round the operator opens for 0-3; its requests are 403
    opened = served.http.open(4, [0, 1, 2, 3])
    assert opened["users"] == [1, 2, 3] and opened["refused"] == [0]
    journal = (tmp_path / JOURNAL).read_bytes()
    before = served.last()
    for method, path, body in [("POST", "/v1/exchange/rounds/4/psu-advertise", b"\x00" * 64),
                               ("POST", "/v1/exchange/rounds/4/psu-advertise", b""),
                               ("POST", "/v1/exchange/rounds/5/no-such-stage", b"x"),
                               ("GET", "/v1/exchange/rounds/4/psu-advertise", b""),
                               ("GET", "/v1/exchange/rounds/3/psu-unmask", b"")]:
        resp = served.http.call(0, method, path, body)
        assert resp.status_code == 403, (path, resp.status_code, resp.text)
        assert resp.json() == {"error": "forbidden", "detail": (
            "device 0 was shown to have cheated in the secure aggregation of 3 signed rounds (proven_bad_shares; "
            "the limit is 3): refused until the operator clears the strikes ('secemb admin clear-alarms')")}
    assert (tmp_path / JOURNAL).read_bytes() == journal and served.last() == before
    assert before["stage"] == "psu-advertise" and before["users"] == [1, 2, 3]
    parties = {u: served.devices[u].party(opened) for u in (1, 2, 3)}  # the honest holders go on without it
    for stage in opened["stages"]:
        for u, party in parties.items():
            assert served.http.send(u, 4, stage, party.message(stage)) == 204
        if sfsl.plan().replies(stage):
            for u, party in parties.items():
                answer = served.http.fetch(u, 4, stage)
                assert answer is not None
                party.accept(stage, answer)
    doc = served.last()
    assert (doc["round_id"], doc["state"], doc["proven_bad_shares"]) == (4, "committed", [])

    served.restart()  # still refused after a restart
    assert served.strikes()["refused"] == [0]
    assert served.http.call(0, "GET", "/v1/exchange/rounds/4/download").status_code == 403

    # the operator clears the strikes: journaled, device 0 takes part again, and a restart keeps the clear
    assert served.admin("POST", "/v1/admin/exchange/strikes/clear") == {"cleared": {"0": 3}}
    assert served.strikes() == {"strikes": {}, "strike_limit": 3, "refused": []}
    cleared = [r for r in Journal(tmp_path / JOURNAL).records() if r.get("event") == "strikes_cleared"]
    assert cleared == [{"event": "strikes_cleared", "through_round": 4, "strikes": {"0": 3}}]
    assert served.round(5)["users"] == [0, 1, 2] and served.last()["state"] == "committed"
    served.restart()
    assert served.strikes()["strikes"] == {}
    # a strike after the clear counts from one, and a restart counts it so
    served.round(6, {"sum-unmask": lie_in_unmask})
    served.restart()
    assert served.strikes() == {"strikes": {"0": 1}, "strike_limit": 3, "refused": []}


def test_complaints_never_strike(sfsl: Any, tmp_path: Path) -> None:
    """Device 0 spoils its encrypted share to device 2 in three rounds (device 2 complains of it,
    unverifiably): no strike, device 0 is in the fourth round."""
    served = Served(sfsl, tmp_path)
    for r in (1, 2, 3):
        served.round(r, {"psu-shares" if r % 2 else "sum-shares": spoil_share_to_2})
        doc = served.last()
        assert (doc["state"], doc["complaints"], doc["bad_shares"], doc["proven_bad_shares"]) == (
            "committed", {"2": [0]}, [], [])
    assert served.strikes()["strikes"] == {}
    assert served.round(4)["users"] == [0, 1, 2] and served.last()["state"] == "committed"


@pytest.mark.parametrize("signed", [True, False])
def test_only_a_signed_aggregations_name_strikes(signed: bool, tmp_path: Path) -> None:
    """SecEA's set-up with five silos (PSU threshold 3), silo 0 sending a wrong unmask share:
    a signed PSU names it as a proof (a strike), the paper's unsigned one (``signed=False``) names
    it on a leave-one-out a dealer could frame (``bad_shares`` only, no strike)."""
    params = SecEAParams(5, 1, dim=2)
    sets = [*SETS, [2, 4], [3]]
    bloom = union_bloom(16, sum(len(s) for s in sets))
    roster = Roster.generate() if signed else None
    rng = CtrDrbg(5)
    clients = [SecEAClient(i, params, np.array(s), key_bits=1024, signed=signed,
                           identity=None if roster is None else roster.enroll(i), _rng=rng) for i, s in enumerate(sets)]
    node = SecEANode(params, bloom, key_bits=1024, signed=signed, _rng=CtrDrbg(6))
    state = ExchangeState(tmp_path, FP, ExchangeServer(node, 1 << 20, lambda: b"", 5))
    rounds = StageCloser(node, state=state)
    doc = rounds.open_round(1, list(range(5)))
    parties = {i: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(10 + i)) for i, c in enumerate(clients)}
    for stage in doc["stages"]:
        for u, party in parties.items():
            body = party.message(stage)
            rounds.receive(1, stage, u, lie_in_unmask(party, body) if stage == "psu-unmask" and u == 0 else body)
        rounds.close(1, stage)
        if node.plan.replies(stage):
            for u, party in parties.items():
                party.accept(stage, node.reply(1, stage, u))
    out = node.outcome(1)
    assert out["state"] == "committed" and out["bad_shares"] == [0]
    assert out["proven_bad_shares"] == ([0] if signed else [])
    assert state.strikes == ({0: 1} if signed else {})
    assert rounds.strikes()["strikes"] == ({"0": 1} if signed else {})


def _state(tmp_path: Path) -> ExchangeState:
    """A server's state over the journal in ``tmp_path`` (a SecEA node: no checkpoint needed)."""
    params = SecEAParams(3, 1, dim=2)
    node = SecEANode(params, union_bloom(16, 9), key_bits=1024, _rng=CtrDrbg(1))
    return ExchangeState(tmp_path, FP, ExchangeServer(node, 1 << 20, lambda: b"", 3))


def _end(round_id: int, **fields: Any) -> dict[str, Any]:
    return {"event": "end", "round_id": round_id, "round": {"round_id": round_id, "users": [0, 1, 2], "stages": [],
                                                            "stage": None, "state": "aborted", **fields}}


def test_the_strikes_are_rebuilt_from_the_end_records_after_the_last_clear(tmp_path: Path) -> None:
    """Rounds 1-3 name device 0 (round 2 device 1 too), a clear through round 2, then round 2's
    record again (a committed round's end written late: the disk refused it at first) and round 4
    naming device 0; records without the field (written before session 24, or an unsigned
    round's ``bad_shares`` only) strike nobody: device 0 has rounds 3 and 4, device 1 none."""
    journal = Journal(tmp_path / JOURNAL)
    for rec in [_end(1, proven_bad_shares=[0]), _end(2, proven_bad_shares=[0, 1]), _end(3, proven_bad_shares=[0]),
                {"event": "strikes_cleared", "through_round": 2, "strikes": {"0": 3, "1": 1}},
                _end(2, proven_bad_shares=[0, 1]), _end(4, proven_bad_shares=[0]), _end(5, bad_shares=[1]),
                _end(6, bad_shares=[2], proven_bad_shares=[])]:
        journal.append(rec)
    state = _state(tmp_path)
    assert state.strikes == {0: 2}
    assert not state.refuses(0)
    state.ended(_end(7, proven_bad_shares=[0])["round"])
    assert state.refuses(0) and not state.refuses(1)
    assert _state(tmp_path).strikes == {0: 3}  # the restart counts round 7 from its record
    assert state.clear_strikes() == {0: 3} and state.strikes == {}
    assert _state(tmp_path).strikes == {}


@pytest.mark.parametrize("bad", ["0", [0, 0], [-1], [True], {"0": 1}])
def test_a_journal_whose_proven_bad_shares_is_not_a_list_of_distinct_devices_is_corrupt(bad: Any,
                                                                                          tmp_path: Path) -> None:
    Journal(tmp_path / JOURNAL).append(_end(1, proven_bad_shares=bad))
    with pytest.raises(CorruptState, match="proven_bad_shares"):
        _state(tmp_path)


def test_a_round_the_door_leaves_too_few_devices_for_is_the_nodes_refusal_and_its_id_stays_free(
        tmp_path: Path) -> None:
    """The door's leaving devices out can leave a round the node refuses (SecEA's set-up needs every
    silo): the refusal is the node's, journaled as refused, and the id stays free."""
    Journal(tmp_path / JOURNAL).append(_end(1, proven_bad_shares=[2]))
    for r in (2, 3):
        Journal(tmp_path / JOURNAL).append(_end(r, proven_bad_shares=[2]))
    state = _state(tmp_path)
    rounds = StageCloser(state.server.node, state=state)
    with pytest.raises(ProtocolError, match="set-up .* comes first"):
        rounds.open_round(4, [0, 1, 2])
    assert state.strikes == {2: 3} and state.last is not None and state.last["round_id"] == 3
    records = Journal(tmp_path / JOURNAL).records()
    assert [(r["event"], r["round_id"], r.get("users"), r.get("round", {}).get("state")) for r in records[3:]] == [
        ("open", 4, [0, 1], None), ("end", 4, None, "refused")]
