"""Session 21 hardening (helper H), from helper F's observation 2: server 1 refuses, on its own, a
round of more users than the bounded payloads' ``users_per_round``.

docs/deployment.md, "Bounded payloads": ``users_per_round`` "is the ``n`` the bound is proved
for" and a larger round could wrap the bounded sum; server 0 refuses to open one (422).  Server 1
mirrored any round server 0 asked it to, so a deviating server 0 could open one.  Now
``FollowerNode.peer_open`` refuses it too (``InvalidParameters``, 422 over HTTP) before anything
changes: no round, nothing journaled, no alarm.  In process, bound for 5 users (the setup of
``tests/engine/test_bounded_nodes.py``), cuckoo, relay on and off; and over HTTP against a real
server 1 (:class:`~secemb.sim.cluster.LocalCluster`, 127.0.0.1, TLS), signed as server 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402

from secemb.errors import InvalidParameters  # noqa: E402
from secemb.models import MatrixFactorization  # noqa: E402
from secemb.protocols.secemb import SecEmbProtocol  # noqa: E402
from secemb.server import leader as leader_module  # noqa: E402
from secemb.server.errors import Conflict  # noqa: E402
from secemb.server.store import DiskStore  # noqa: E402
from secemb.sim.cluster import LocalCluster  # noqa: E402
from secemb.sim.settings import cluster_settings  # noqa: E402
from secemb.training import TrainConfig  # noqa: E402
from secemb.transport.errors import RemoteError  # noqa: E402
from secemb.transport.network import ApiClient  # noqa: E402

BOUND = len(tbn.USERS)  # the bound's users_per_round in tbn._servers: 5
SIX = [u for u in range(tbn.DATA.num_users) if tbn.RATINGS.of(u)[0].size][: BOUND + 1]


@pytest.mark.parametrize("relay", [False, True])
def test_server_1_refuses_a_deviating_server_0s_round_larger_than_the_bound(monkeypatch: pytest.MonkeyPatch,
                                                                             relay: bool) -> None:
    """Server 0 deviates: it skips its own check and asks server 1 to mirror a round of 6 users
    while the bound is proved for 5.  Server 1 refuses (naming ``users_per_round=5``); it holds no
    round, journals nothing and raises no alarm, and server 0 records its round aborted.  An honest
    round of 5 opens afterwards at both."""
    servers = tbn._servers(relay=relay)
    leader, follower = tbn._nodes(servers)
    try:
        assert follower.prover is not None and follower.prover.bound_users == BOUND
        journal, max_round = list(follower.store.records()), follower.max_round
        monkeypatch.setattr(leader_module, "check_bound_users", lambda n_p, bound_users: None)  # the deviation
        with pytest.raises(Conflict, match=f"the other server refused: .*at most users_per_round={BOUND}"):
            leader.open_round(participants=SIX, deadline_s=30.0)
        assert follower.round is None and follower.max_round == max_round
        assert follower.store.records() == journal  # nothing journaled
        assert not follower.alarms and not follower.halted
        assert leader.round is None and (leader.outcomes.get(max_round + 1) or {}).get("state") == "aborted"
        monkeypatch.undo()
        r = tbn._open(servers)  # five are fine, at both servers
        assert follower.round is not None and follower.round.round_id == r and follower.round.n_p == BOUND
    finally:
        servers.stop()


def test_server_1_refuses_the_round_document_directly() -> None:
    """The same document sent to server 1 directly (as a deviating server 0 would over
    ``POST /v1/peer/rounds``): ``InvalidParameters`` (422), before any state changes."""
    servers = tbn._servers()
    leader, follower = tbn._nodes(servers)
    try:
        r = tbn._open(servers)  # an honest round of 5 gives a valid document to alter
        doc = leader._round_doc(leader.round)
        leader.close_round(r)  # aborted (nobody uploaded): the next round may open
        journal = list(follower.store.records())
        doc |= {"round_id": r + 1, "n_p": BOUND + 1, "participants": SIX, "quorum": BOUND + 1,
                "min_users": leader.cfg.min_users}
        doc["config"] = dict(doc["config"], round_id=r + 1)
        with pytest.raises(InvalidParameters, match=f"at most users_per_round={BOUND} users; this round would have 6"):
            follower.peer_open(doc)
        assert follower.store.records() == journal and follower.max_round == r and not follower.alarms
        doc |= {"n_p": BOUND, "participants": SIX[:BOUND], "quorum": BOUND}
        assert follower.peer_open(doc) == {"round_id": r + 1, "state": "open"}  # the altered fields were the cause
    finally:
        servers.stop()


def test_server_1_answers_422_over_http_and_journals_nothing(tmp_path: Path) -> None:
    """Two ``secemb serve`` processes, bound for 5 users.  Server 0 opens (and closes) an honest
    round of 5, whose document a deviating server 0 alters to 6 participants and posts to server
    1's ``/v1/peer/rounds`` signed with the peer secret over mutual TLS: 422 naming
    ``users_per_round=5``; server 1's journal on disk is unchanged and its status shows no round
    and no alarm."""
    pytest.importorskip("uvicorn")
    proto = SecEmbProtocol(layout="cuckoo", relay=False, bound=True, users_per_round=BOUND)
    settings = cluster_settings(MatrixFactorization(dim=4, reg=0.01), proto, tbn.DATA,
                                TrainConfig(m_prime=4, seed=5), deadline_s=30.0, min_users=tbn.FLOOR)
    with LocalCluster(tmp_path / "dep", **settings) as c:
        c.start()
        doc = c.admin(0).post_json("/v1/admin/rounds", {"participants": tbn.USERS, "deadline_s": 30.0})
        r = int(doc["round_id"])
        assert c.admin(0).post_json(f"/v1/admin/rounds/{r}/close")["state"] == "aborted"  # nobody uploaded
        cfg1 = c.configs[1]
        journal = DiskStore(cfg1.state_dir, 1, cfg1.fingerprint()).records()
        doc |= {"round_id": r + 1, "n_p": BOUND + 1, "participants": SIX, "quorum": BOUND + 1, "state": "open"}
        doc["config"] = dict(doc["config"], round_id=r + 1)
        peer = ApiClient(c.url(1), "server0", c.peer_secret, tls=c.peer_tls())
        with pytest.raises(RemoteError) as err:
            peer.post_json("/v1/peer/rounds", doc)
        assert err.value.status == 422 and f"at most users_per_round={BOUND}" in err.value.detail, err.value
        assert DiskStore(cfg1.state_dir, 1, cfg1.fingerprint()).records() == journal
        status = c.admin(1).get_json("/v1/admin/status")
        assert status["max_round"] == r and not status["alarms"] and not status["halted"], status
