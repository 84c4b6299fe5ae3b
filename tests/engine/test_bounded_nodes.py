"""Bounded payloads at the server nodes, in process (issue 34 (b)): devices play a round through
the device SDK (:meth:`~secemb.client.device.Device.participate` fetches server 0's challenge
and sends its proof after the upload); server 0's quorum counts a device once its proof is
kept; the close leaves out a device that sent none; the nodes refuse what does not fit (a
challenge or proof of a device that did not upload, a second proof, garbage, the steps at the
wrong server or without ``bound``) without changing their state; a failing peer aborts the
close."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from secemb.client.device import Device, RoundSession
from secemb.data import by_user, synthetic_like
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, SecembError
from secemb.models import MatrixFactorization
from secemb.protocols.secemb import SecEmbProtocol
from secemb.server.node import FollowerNode, LeaderNode
from secemb.server.peer import PeerUnreachable
from secemb.sim.local import InProcessServers, LocalPeer
from secemb.sim.settings import cluster_settings
from secemb.training import TrainConfig

FLOOR = 3
DATA = synthetic_like(30, 40, 600, seed=3)
RATINGS = by_user(DATA)
USERS = [u for u in range(DATA.num_users) if RATINGS.of(u)[0].size][:5]


def _servers(bound: bool = True, relay: bool = False) -> InProcessServers:
    model = MatrixFactorization(dim=4, reg=0.01)
    proto = SecEmbProtocol(layout="cuckoo", relay=relay, bound=bound, users_per_round=len(USERS) if bound else None)
    settings = cluster_settings(model, proto, DATA, TrainConfig(m_prime=4, seed=5), deadline_s=30.0,
                                min_users=FLOOR)
    return InProcessServers(settings, proto, model)


def _nodes(servers: InProcessServers) -> tuple[LeaderNode, FollowerNode]:
    leader, follower = servers.nodes
    assert isinstance(leader, LeaderNode) and isinstance(follower, FollowerNode)
    return leader, follower


def _open(servers: InProcessServers) -> int:
    return int(_nodes(servers)[0].open_round(participants=USERS, deadline_s=30.0)["round_id"])


def _upload(servers: InProcessServers, user: int) -> RoundSession:
    """Device ``user`` retrieves, trains and uploads through the SDK, without proving."""
    client = servers.servers().device(user)
    info = client.round_info()
    model = info.make_model()
    session = RoundSession(client, info, task=model.task)
    session.prepare(*RATINGS.of(user))
    session.retrieve()
    state = model.new_user_store(1, np.random.default_rng(0), info.adam()).state(0)  # public test data only
    session.train(lambda rows, dense, batch: model.local_step(rows, dense, state, batch))
    session.upload()
    return session


@pytest.mark.parametrize("relay", [False, True])
def test_participating_devices_prove_and_count_once_proved(relay: bool) -> None:
    servers = _servers(relay=relay)
    leader, _ = _nodes(servers)
    r = _open(servers)
    rnd = leader.round
    assert rnd is not None and rnd.proved == set()
    for u in USERS[:3]:
        client = servers.servers().device(u)
        Device(client, *RATINGS.of(u)).participate(client.round_info())
    late = _upload(servers, USERS[3])  # uploaded, not proved yet: it does not count for the quorum
    assert rnd.finished == set(USERS[:4]) and rnd.proved == set(USERS[:3]) and rnd.counted() == set(USERS[:3])
    assert late.prove() is True and rnd.counted() == set(USERS[:4])
    _upload(servers, USERS[4])  # never proves: left out at close like a dropout (its proof may be on its way)
    out = leader.close_round(r)
    assert out["state"] == "committed", out
    assert out["included"] == sorted(USERS[:4]) and out["rejected"] == []
    assert not any(a["kind"] == "device_rejected" for a in leader.alarms) and USERS[4] not in leader.rejections
    servers.stop()


def test_the_nodes_refuse_what_does_not_fit_and_keep_their_state() -> None:
    servers = _servers()
    leader, follower = _nodes(servers)
    r = _open(servers)
    rnd = leader.round
    assert rnd is not None
    with pytest.raises(ProtocolError, match="did not upload"):
        leader.challenge(r, USERS[0])  # retrieved nothing, uploaded nothing
    session = _upload(servers, USERS[0])
    with pytest.raises(ProtocolError, match="server 0's"):
        follower.challenge(r, USERS[0])
    challenge = leader.challenge(r, USERS[0])
    assert len(challenge) == 16 and leader.challenge(r, USERS[0]) == challenge
    bad: list[SecembError | None] = leader.proof_many(r, [(USERS[0], b"garbage"), (USERS[1], b"x")])
    assert isinstance(bad[0], InvalidMessage) and isinstance(bad[1], ProtocolError) and rnd.proved == set()
    assert session.prove() is True and rnd.proved == {USERS[0]}
    again = leader.proof_many(r, [(USERS[0], b"garbage")])[0]
    assert isinstance(again, SecembError) and rnd.proved == {USERS[0]}
    wrong_round = leader.proof_many(r + 1, [(USERS[0], b"garbage")])[0]
    assert isinstance(wrong_round, SecembError)
    with pytest.raises(ProtocolError):  # server 1 checks proofs only while the round closes
        follower.peer_bound(r, b"")
    servers.stop()


def test_a_round_larger_than_the_bound_is_not_opened() -> None:
    """The bound holds for ``users_per_round`` users (here 5): server 0 opens no round of more."""
    servers = _servers()
    leader, _ = _nodes(servers)
    more = [u for u in range(DATA.num_users) if RATINGS.of(u)[0].size][:6]
    with pytest.raises(InvalidParameters, match="at most users_per_round=5"):
        leader.open_round(participants=more, deadline_s=30.0)
    assert leader.round is None
    _open(servers)  # 5 are fine
    servers.stop()


def test_without_bound_the_steps_are_refused() -> None:
    servers = _servers(bound=False)
    leader, follower = _nodes(servers)
    r = _open(servers)
    session = _upload(servers, USERS[0])
    assert not session.proves and leader.round is not None and leader.round.proved is None
    with pytest.raises(ProtocolError, match="no bound proofs"):
        leader.challenge(r, USERS[0])
    assert isinstance(leader.proof_many(r, [(USERS[0], b"x")])[0], ProtocolError)
    with pytest.raises(ProtocolError, match="no bound proof"):
        session.prove()
    servers.stop()


def test_a_peer_that_fails_the_check_aborts_the_close(monkeypatch: pytest.MonkeyPatch) -> None:
    servers = _servers()
    leader, _ = _nodes(servers)
    r = _open(servers)
    for u in USERS[:3]:
        client = servers.servers().device(u)
        Device(client, *RATINGS.of(u)).participate(client.round_info())

    def down(self: Any, round_id: int, body: bytes) -> bytes:
        raise PeerUnreachable("server 1 is down")

    monkeypatch.setattr(LocalPeer, "bound", down)
    version = leader.version
    out = leader.close_round(r)
    assert out["state"] == "aborted" and "did not check the bound proofs" in out["reason"], out
    assert leader.version == version
    servers.stop()
