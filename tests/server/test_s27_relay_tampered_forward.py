"""Session 27 (helper D): once server 0 has forwarded a user's retrieval keys altered (server 1
left the user out of the round, ``relay_tampered``), a later forward of that user's keys --
even the correct bytes -- is refused as a later forwarded upload of the user is: the same
``RelayTampered`` error, no state changed, nothing evaluated.  Before session 27 server 1 kept
the user awaiting and evaluated a later correct forward (the user's roots still held)."""

from __future__ import annotations

from typing import Any

import pytest
from deviation_helpers import RATINGS, USERS, in_process
from secemb.client.device import Device, DeviceClient
from secemb.errors import RelayTampered
from secemb.server.node import FollowerNode
from secemb.server.peer import PeerUnreachable

VICTIM = USERS[1]
OUT = "round {r}: user {u} is out of the round (its relayed bytes were altered)"


def _status(node: FollowerNode, r: int) -> tuple[dict[str, Any], dict[str, Any]]:
    st = node.status()
    st.pop("boot_id")
    return st, node.round_status(r, None)


def test_a_correct_forward_after_a_tampered_one_is_refused_and_changes_nothing(monkeypatch):
    pair, servers = in_process()
    follower = servers.nodes[1]
    assert isinstance(follower, FollowerNode)
    honest = pair.leader.peer.relay_retrieval_many
    forwarded: dict[int, bytes] = {}

    def tamper(r: int, items: list[tuple[int, bytes]]) -> list[Any]:
        forwarded.update(items)
        return honest(r, [(u, b[:-1] + bytes([b[-1] ^ 1]) if u == VICTIM else b) for u, b in items])

    monkeypatch.setattr(pair.leader.peer, "relay_retrieval_many", tamper)
    r = int(pair.leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
    c = DeviceClient.over(VICTIM, pair.links(VICTIM), min_users=3)
    with pytest.raises(Exception, match="differs from the one the device committed to"):
        Device(c, *RATINGS.of(VICTIM)).participate(c.round_info())
    assert follower.round_status(r, None)["tampered"] == [VICTIM]
    before = _status(follower, r)
    relayed = set(follower.round.relayed)

    # server 0 now forwards the victim's keys exactly as the device made them: refused, nothing
    # changes, and the role is not asked to evaluate them (the roots the victim left are never used)
    evaluated: list[list[tuple[int, bytes]]] = []
    role = follower.relay_role
    real = role.evaluate_relay_many
    monkeypatch.setattr(role, "evaluate_relay_many", lambda items: evaluated.append(items) or real(items))
    for _ in range(2):
        [out] = follower.peer_relay_retrieval_many(r, [(VICTIM, forwarded[VICTIM])])
        assert isinstance(out, RelayTampered) and str(out) == OUT.format(r=r, u=VICTIM), out
        assert _status(follower, r) == before
        assert follower.round.relayed == relayed
    # through the node's batcher (the peer endpoint's path) alike
    with pytest.raises(RelayTampered) as exc:
        follower.peer_relay_retrieval(r, VICTIM, forwarded[VICTIM])
    assert str(exc.value) == OUT.format(r=r, u=VICTIM)
    assert _status(follower, r) == before
    assert evaluated == []
    # the same refusal as a forwarded upload of the user's
    [up] = follower.peer_relay_upload_many(r, [(VICTIM, b"\0")])
    assert isinstance(up, RelayTampered) and str(up) == str(out)

    # the other users' round goes on and commits without the victim
    monkeypatch.setattr(pair.leader.peer, "relay_retrieval_many", honest)
    for u in [u for u in USERS if u != VICTIM]:
        cu = DeviceClient.over(u, pair.links(u), min_users=3)
        Device(cu, *RATINGS.of(u)).participate(cu.round_info())
    outcome = pair.leader.close_round(r)
    assert outcome["state"] == "committed", outcome
    assert outcome["included"] == sorted(set(USERS) - {VICTIM})
    assert follower.round_status(r, None)["tampered"] == [VICTIM]
    assert [a["kind"] for a in follower.status()["alarms"]] == ["relay_tampered"]  # one alarm, not one per forward


def test_a_forward_batch_refuses_the_tampered_user_only(monkeypatch):
    """A later batch holding the tampered user and an honest one: the tampered user refused, the
    honest user's forward evaluated and answered (the refusal is per item)."""
    pair, servers = in_process()
    follower = servers.nodes[1]
    honest = pair.leader.peer.relay_retrieval_many
    other = USERS[2]
    forwarded: dict[int, bytes] = {}

    def tamper(r: int, items: list[tuple[int, bytes]]) -> list[Any]:
        """The victim's keys altered; the other's kept back (server 0 answers itself, as when
        server 1 does not answer)."""
        forwarded.update(items)
        sent = [(u, b[:-1] + bytes([b[-1] ^ 1]) if u == VICTIM else b) for u, b in items if u != other]
        outs = iter(honest(r, sent) if sent else [])
        return [PeerUnreachable("kept back") if u == other else next(outs) for u, _ in items]

    monkeypatch.setattr(pair.leader.peer, "relay_retrieval_many", tamper)
    r = int(pair.leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
    for u, why in ((VICTIM, "differs from the one the device committed to"), (other, "kept back")):
        c = DeviceClient.over(u, pair.links(u), min_users=3)
        with pytest.raises(Exception, match=why):
            Device(c, *RATINGS.of(u)).participate(c.round_info())
    assert follower.round_status(r, None)["tampered"] == [VICTIM]
    assert other not in follower.round.relayed
    outs = follower.peer_relay_retrieval_many(r, [(VICTIM, forwarded[VICTIM]), (other, forwarded[other])])
    assert isinstance(outs[0], RelayTampered) and str(outs[0]) == OUT.format(r=r, u=VICTIM)
    assert isinstance(outs[1], bytes) and outs[1], outs[1]
    assert follower.round.relayed == {other}
    assert follower.round_status(r, None)["tampered"] == [VICTIM]
