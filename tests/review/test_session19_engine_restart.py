"""Session 19 review (helper J) of bounded payloads (issue 34 (b)) at the nodes, in process: can a
deviating server 0 make server 1 verify a device's proof twice by way of a server-1 restart?

Server 1 answers each device's proof once (``bound_answer`` keeps the users it answered, in
memory only).  A restart loses that set -- and with it the round: a round left open or
closing by a restart ends aborted, and the device's proof seed ``sigma`` (server 1's share of
the proof, sent by the device at retrieval) is gone with the role's memory.  So the restarted
server 1 refuses the same check request (its round is not the current one), and no later
round can answer it: server 0 never holds ``sigma``.  These tests pin that (regression: they
pass), so that a future journal of the round's state must keep "answered once" with it.
A restart of server 0 between a device's upload and its proof likewise ends the round aborted
(the second test).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.errors import SecembError  # noqa: E402
from secemb.server.errors import Conflict  # noqa: E402
from secemb.server.node import FollowerNode, LeaderNode, make_node  # noqa: E402
from secemb.sim.local import LocalPeer  # noqa: E402


def test_a_server_1_restart_after_its_bound_answer_refuses_the_same_request_again() -> None:
    servers = tbn._servers()
    leader, follower = tbn._nodes(servers)
    peer = leader.peer
    assert isinstance(peer, LocalPeer)
    asked: list[tuple[int, bytes]] = []
    restarted: list[FollowerNode] = []
    real_bound = peer.bound

    def bound_then_restart(round_id: int, body: bytes) -> Any:
        answer = real_bound(round_id, body)
        asked.append((round_id, body))
        fresh = make_node(follower.cfg, store=follower.store, protocol=follower.protocol, model=follower.model)
        assert isinstance(fresh, FollowerNode)
        restarted.append(fresh)
        peer.follower = fresh  # server 1 came back on the same state store, its memory lost
        return answer

    peer.bound = bound_then_restart  # type: ignore[method-assign]
    try:
        r = tbn._open(servers)
        for u in tbn.USERS[:4]:
            client = servers.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        out = leader.close_round(r)
        assert asked and restarted
        # the close cannot finish at a server 1 that forgot the round
        assert out["state"] == "aborted" and "server 1" in out["reason"], out
        fresh = restarted[0]
        assert fresh.round is None or fresh.round.round_id != r or fresh.round.state == "aborted"
        with pytest.raises(SecembError, match="not the current round"):  # a deviating server 0 asks again
            fresh.peer_bound(*asked[0])
        assert fresh.version == follower.version  # nothing committed by the aborted round
    finally:
        servers.stop()


def test_a_server_0_restart_between_upload_and_proof_aborts_the_round_and_the_next_one_commits() -> None:
    """Server 0 keeps challenges and proofs in memory: a restart between a device's upload and
    its proof ends the round aborted ("server restarted during the round", as without bound,
    since the uploads are in memory too); the device's challenge and proof are then refused
    with a 409 (Conflict), and the next round opens and commits with the same devices."""
    servers = tbn._servers()
    leader, follower = tbn._nodes(servers)
    try:
        r = tbn._open(servers)
        for u in tbn.USERS[:3]:
            client = servers.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        late = tbn.USERS[3]
        tbn._upload(servers, late)
        version = leader.version
        fresh = make_node(leader.cfg, peer=leader.peer, store=leader.store, protocol=leader.protocol,
                          model=leader.model, start_threads=False)
        assert isinstance(fresh, LeaderNode)
        servers.nodes = (fresh, follower)  # the devices' links from here on reach the restarted server 0
        assert fresh.round_status(r, None)["state"] == "aborted"
        assert fresh.round_status(r, None)["reason"] == "server restarted during the round"
        with pytest.raises(Conflict):
            fresh.challenge(r, late)
        assert isinstance(fresh.proof_many(r, [(late, b"x" * 64)])[0], Conflict)
        r2 = int(fresh.open_round(participants=tbn.USERS, deadline_s=30.0)["round_id"])
        assert r2 > r
        for u in tbn.USERS[:4]:
            client = servers.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        out = fresh.close_round(r2)
        assert out["state"] == "committed" and out["included"] == sorted(tbn.USERS[:4]) and out["rejected"] == []
        assert fresh.version == version + 1
    finally:
        servers.stop()
