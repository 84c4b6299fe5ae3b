"""Session 19 review (helper J) of bounded payloads (issue 34 (b)) at the nodes, in process: can a
deviating server 0 make server 1 verify a device's proof twice by way of a server-1 restart?

Server 1 answers each device's proof once (``bound_answer`` keeps the users it answered, in
memory only).  A restart loses that set -- and with it the round: a round left open or
closing by a restart ends aborted, and the device's proof seed ``sigma`` (server 1's share of
the proof, sent by the device at retrieval) is gone with the role's memory.  So the restarted
server 1 refuses the same check request (its round is not the current one), and no later
round can answer it: server 0 never holds ``sigma``.  These tests pin that (regression: they
pass), so that a future journal of the round's state must keep "answered once" with it.
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
from secemb.server.node import FollowerNode, make_node  # noqa: E402
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
