"""Session 21 review (helper D) of the verified uploads with bounded payloads (issue 34) at the
nodes, in process: attacks on the verification path's messages, each expected outcome read from
docs/security.md ("Bounded payloads: the check", "The check") and docs/deployment.md ("Alarms").
Regression tests (they pass):

* A round in which every device is rejected ends cleanly: aborted (fewer than ``min_users``), every
  device listed under ``rejected`` with one strike each, both servers' models unchanged; the next
  round of honest devices commits.  Both layouts, relay or not.
* Three such rounds refuse the attackers at server 0's door (403: ``Forbidden``) until the
  operator clears their strikes (a clear of the alarms keeps them: session 31, S31-R2); then they
  take part again.
* A device cannot get a second challenge: a second upload to server 0 after it read its challenge
  is refused and the challenge stays the one drawn for its first batch.
* A proof that arrives while the round closes (after server 0 built its check request) is refused
  (409: ``Conflict``) and changes nothing; the device is left out without a strike.
* A deviating server 1 that answers device A with device B's verifier message (and B with A's)
  gets both rejected, nobody else; the round commits with the rest.
* Numeric edge: an honest device whose one non-zero coordinate is ``T - 1`` (every projection at
  the top of ``[-T, T)``) passes, with certainty, in both layouts, relay or not; 20 of them sum
  exactly, without wrapping; a device whose coordinate is ``T`` cannot prove (it would need every
  one of the 40 rows to miss the coordinate's +1 sign: probability ``(3/4)^40 < 2^-16``).
* A proof changed in one place (server 1's seed, ``part_1``, one witness or proof element, each
  still parsing) is rejected, and only its device.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402
import test_bounded_payloads as tbp  # type: ignore[import-not-found]  # noqa: E402
import test_session21_verify_journal as j21  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.errors import InvalidParameters, SecembError  # noqa: E402
from secemb.framing import HEADER_BYTES  # noqa: E402
from secemb.fss.field import P  # noqa: E402
from secemb.fss.rangeproof import PART_BYTES, SEED_BYTES  # noqa: E402
from secemb.server.auth import Forbidden  # noqa: E402
from secemb.server.errors import Conflict  # noqa: E402
from secemb.server.node import FollowerNode, LeaderNode  # noqa: E402
from secemb.server.verify import MAX_REJECTIONS  # noqa: E402
from secemb.sim.local import LocalPeer  # noqa: E402

USERS = tbn.USERS
LAYOUTS = [("cuckoo", True), ("cuckoo", False), ("full", True), ("full", False)]
# T = 2^(t - 1) at tbp's 20 users (hand values): full t = floor(log2((2^31 - 1) / 20)) = 26; cuckoo counts
# an item's 3 buckets (session 31), t = floor(log2((2^31 - 1) / 60)) = 25
TS = {"full": 1 << 25, "cuckoo": 1 << 24}


def _nodes(srv: Any) -> tuple[LeaderNode, FollowerNode]:
    leader, follower = srv.nodes
    assert isinstance(leader, LeaderNode) and isinstance(follower, FollowerNode)
    return leader, follower


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_a_round_in_which_every_device_is_rejected_aborts_cleanly_and_the_next_commits(layout: str,
                                                                                      relay: bool) -> None:
    srv = j21.servers(layout, relay)
    leader, follower = _nodes(srv)
    try:
        version, sha0, sha1 = leader.version, leader.model_sha(), follower.model_sha()
        r = j21.play(srv, [], USERS)
        out = leader.close_round(r)
        assert out["state"] == "aborted" and "fewer than min_users" in out["reason"], out
        assert out["rejected"] == sorted(USERS) and not out["included"], out
        assert leader.rejections == dict.fromkeys(USERS, 1)
        assert (leader.version, leader.model_sha(), follower.version, follower.model_sha()) == \
            (version, sha0, version, sha1)
        assert follower.round is not None and follower.round.state == "aborted"  # told by server 0
        r2 = j21.play(srv, USERS, [])
        out2 = leader.close_round(r2)
        assert out2["state"] == "committed" and out2["included"] == sorted(USERS) and out2["rejected"] == [], out2
        assert leader.version == follower.version == version + 1 and leader.model_sha() == follower.model_sha()
    finally:
        srv.stop()


def test_three_rejected_rounds_refuse_the_attackers_at_the_door_until_their_strikes_are_cleared() -> None:
    srv = j21.servers("cuckoo", True)
    leader, _ = _nodes(srv)
    attackers = USERS[:2]
    try:
        for _ in range(MAX_REJECTIONS):
            out = leader.close_round(j21.play(srv, USERS[2:], attackers))
            assert out["state"] == "committed" and out["rejected"] == sorted(attackers), out
        assert leader.rejections == dict.fromkeys(attackers, MAX_REJECTIONS)
        r = int(leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
        for u in attackers:  # refused at retrieval (403), whatever they would send
            client = srv.servers().device(u)
            with pytest.raises(Forbidden, match="failed the servers' verification"):
                Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        for u in USERS[2:]:
            client = srv.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        assert leader.close_round(r)["included"] == sorted(USERS[2:])
        assert leader.clear_alarms()["cleared"] == MAX_REJECTIONS  # the strikes stay
        assert leader.rejections == dict.fromkeys(attackers, MAX_REJECTIONS)
        assert leader.clear_strikes() == {"cleared": {str(u): MAX_REJECTIONS for u in sorted(attackers)}}
        assert leader.rejections == {}
        out = leader.close_round(j21.play(srv, USERS, []))  # honest now: admitted again
        assert out["state"] == "committed" and out["included"] == sorted(USERS), out
    finally:
        srv.stop()


@pytest.mark.parametrize("relay", [False, True])
def test_a_second_upload_after_the_challenge_is_refused_and_the_challenge_stays(relay: bool) -> None:
    """A device that would like another challenge (and keep the easier one) uploads to server 0
    again after reading its challenge, the same bytes and then other ones: each is refused, the
    challenge is the first one, and the device proves and is included as usual."""
    srv = j21.servers("cuckoo", relay)
    leader, _ = _nodes(srv)
    try:
        r = int(leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
        session = tbn._upload(srv, USERS[0])
        first = leader.challenge(r, USERS[0])
        body = session._uploads[0]
        other = body[:-1] + bytes([body[-1] ^ 1])
        for again in (body, other):
            refused = leader.upload_many(r, [(USERS[0], again)])[0]
            assert isinstance(refused, SecembError), refused
            assert leader.challenge(r, USERS[0]) == first
        assert session.prove() is True
        for u in USERS[1:3]:
            client = srv.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        out = leader.close_round(r)
        assert out["state"] == "committed" and out["included"] == sorted(USERS[:3]) and out["rejected"] == [], out
    finally:
        srv.stop()


def test_a_proof_arriving_while_the_round_closes_is_refused_without_a_strike(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = j21.servers("cuckoo", False)
    leader, _ = _nodes(srv)
    late = USERS[3]
    try:
        r = int(leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
        for u in USERS[:3]:
            client = srv.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        session = tbn._upload(srv, late)
        assert isinstance(session.role, tbp.SecEmbUser)
        proof = session.role.bound_proof(leader.challenge(r, late))  # honest, read before the close
        seen: list[SecembError | None] = []
        real = LocalPeer.bound

        def racing(self: LocalPeer, round_id: int, body: bytes) -> bytes:
            seen.extend(leader.proof_many(r, [(late, proof)]))  # the proof lands during the check
            return real(self, round_id, body)

        monkeypatch.setattr(LocalPeer, "bound", racing)
        out = leader.close_round(r)
        assert len(seen) == 1 and isinstance(seen[0], Conflict), seen
        assert out["state"] == "committed" and out["included"] == sorted(USERS[:3]) and out["rejected"] == [], out
        assert late not in leader.rejections and not any(a["kind"] == "device_rejected" for a in leader.alarms)
    finally:
        srv.stop()


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_server_1_answering_a_device_with_another_devices_message_rejects_both_only(
        monkeypatch: pytest.MonkeyPatch, layout: str, relay: bool) -> None:
    srv = j21.servers(layout, relay)
    leader, _ = _nodes(srv)
    try:
        r = j21.play(srv, USERS, [])
        real = LocalPeer.bound

        def swapped(self: LocalPeer, round_id: int, body: bytes) -> bytes:
            answer = real(self, round_id, body)
            size = (len(answer) - HEADER_BYTES) // len(USERS)  # one verifier message per proved device
            msgs = [answer[HEADER_BYTES + size * j : HEADER_BYTES + size * (j + 1)] for j in range(len(USERS))]
            msgs[0], msgs[1] = msgs[1], msgs[0]  # the request lists the devices sorted
            return answer[:HEADER_BYTES] + b"".join(msgs)

        monkeypatch.setattr(LocalPeer, "bound", swapped)
        out = leader.close_round(r)
        ordered = sorted(USERS)
        assert out["state"] == "committed" and out["rejected"] == ordered[:2], out
        assert out["included"] == ordered[2:], out
    finally:
        srv.stop()


@pytest.mark.parametrize(("layout", "relay"), tbp.LAYOUTS)
def test_coordinates_at_the_top_of_the_range_pass_and_sum_exactly(layout: str, relay: bool) -> None:
    """Every device has one non-zero coordinate of magnitude ``T - 1`` -- in its dense part for
    even ids (``+(T - 1)``), in a real slot's payload for odd ids (``-(T - 1)``) -- and proves
    its honest upload: all 20 pass and both sums are exact (``10 (T - 1)`` is far from wrapping:
    the bound keeps ``n 2T <= 2^(k-1)``)."""
    T = TS[layout]  # noqa: N806 - the bound's T
    rnd = tbp.Round(layout, relay)
    for uid in range(tbp.USERS):
        rnd.retrieve(uid)
        rows = np.zeros((rnd.cfg.slots, rnd.cfg.width), np.int64)
        dense = np.zeros(rnd.cfg.dense_size, np.int64)
        if uid % 2:
            rows[int(np.flatnonzero(rnd.slots[uid] >= 0)[0]), 0] = -(T - 1)
        else:
            dense[0] = T - 1
        rnd.upload(uid, rows.astype(np.uint32), dense.astype(np.uint32))
        rnd.prove(uid)
    assert int(rnd.expected_dense[0]) == 10 * (T - 1)
    assert int(rnd.expected.view(np.int32).astype(np.int64).sum()) == -10 * (T - 1)  # the sparse sums, signed
    rnd.close_exact(set())


def test_a_coordinate_of_exactly_t_cannot_be_proved() -> None:
    rnd = tbp.Round("cuckoo", True)
    rnd.retrieve(0)
    dense = np.zeros(rnd.cfg.dense_size, np.int64)
    dense[0] = TS["cuckoo"]
    rnd.upload(0, np.zeros((rnd.cfg.slots, rnd.cfg.width), np.uint32), dense.astype(np.uint32))
    with pytest.raises(InvalidParameters):  # some row has the +1 sign there: projection T, outside [-T, T)
        rnd.users[0].bound_proof(rnd.s0.challenge(0))


def _plus_one(proof: bytes, at: int) -> bytes:
    """``proof`` with its field element at byte offset ``at`` increased by 1 mod p."""
    v = (int.from_bytes(proof[at : at + 8], "little") + 1) % P
    return proof[:at] + v.to_bytes(8, "little") + proof[at + 8 :]


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_a_proof_changed_in_one_place_is_rejected_and_only_that_device(layout: str, relay: bool) -> None:
    """Four devices each send their honest proof changed in one place -- server 1's seed, the
    forwarded ``part_1``, the first witness element (+1 mod p), the last proof element (+1 mod p);
    each still parses (the elements stay below ``p``).  Each is rejected, the 16 others pass, the
    aggregate is theirs exactly."""
    rnd = tbp.Round(layout, relay)
    head = HEADER_BYTES + SEED_BYTES + PART_BYTES  # the field elements start here (rangeproof.message_bytes)
    changes = {
        0: lambda p: p[:HEADER_BYTES] + bytes([p[HEADER_BYTES] ^ 1]) + p[HEADER_BYTES + 1 :],
        1: lambda p: p[: HEADER_BYTES + SEED_BYTES] + bytes([p[HEADER_BYTES + SEED_BYTES] ^ 1])
        + p[HEADER_BYTES + SEED_BYTES + 1 :],
        2: lambda p: _plus_one(p, head),
        3: lambda p: _plus_one(p, len(p) - 8),
    }
    for uid in range(tbp.USERS):
        rnd.retrieve(uid)
        rnd.upload(uid, *rnd.honest_upload(uid), honest=uid not in changes)
        proof = rnd.users[uid].bound_proof(rnd.s0.challenge(uid))
        rnd.s0.handle_proof(uid, changes[uid](proof) if uid in changes else proof)
    rnd.close_exact(set(changes))
