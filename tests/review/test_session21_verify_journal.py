"""Session 21 review (helper D) of the verified uploads (issue 34) at the nodes, in process: the
rejection count across a restart of server 0 in the middle of the close.

docs/security.md ("The check"): "A device rejected in 3 rounds (``MAX_REJECTIONS``, counted from
the journal across restarts) is refused at server 0's door".  So a rejection the close decided
(the device left out, the ``device_rejected`` alarm journaled) must survive a crash of server 0
at any later point of the same close, and a clean close followed by a restart must not count it
twice.  The crash is injected at the named fault points of :mod:`secemb.server.faults` (a
``BaseException``, so no handler of the close catches it: as for the real ``SIGKILL``, nothing
after the point runs), and server 0 comes back on the same state store.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.data import by_user, synthetic_like  # noqa: E402
from secemb.models import MatrixFactorization  # noqa: E402
from secemb.protocols.adversary import with_attack  # noqa: E402
from secemb.protocols.secemb import SecEmbProtocol  # noqa: E402
from secemb.server import faults  # noqa: E402
from secemb.server.node import LeaderNode, make_node  # noqa: E402
from secemb.sim.local import InProcessServers  # noqa: E402
from secemb.sim.settings import cluster_settings  # noqa: E402
from secemb.training import TrainConfig  # noqa: E402

USERS = tbn.USERS
HONEST, ATTACKER = USERS[:4], USERS[4]


class Crash(BaseException):
    """Server 0 died here (no ``except Exception`` of the close catches it)."""


def servers(layout: str, relay: bool) -> InProcessServers:
    """Bounded payloads on, as a deployment's default: ``layout``, relay or not, min_users 3."""
    model = MatrixFactorization(dim=4, reg=0.01)
    proto = SecEmbProtocol(layout=layout, relay=relay, bound=True, users_per_round=len(USERS))
    data = synthetic_like(30, 40, 600, seed=3)
    assert by_user(data).of(USERS[0])[0].size  # the same data as tbn's
    settings = cluster_settings(model, proto, data, TrainConfig(m_prime=4, seed=5), deadline_s=30.0,
                                min_users=tbn.FLOOR)
    return InProcessServers(settings, proto, model)


def play(srv: InProcessServers, honest: list[int], attackers: list[int], attack: str = "oversized-payload") -> int:
    """Open a round for ``USERS``; the honest devices and the attackers (running ``attack``)
    take part through the device SDK; the round id."""
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    r = int(leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
    for u in honest + attackers:
        client = srv.servers().device(u)
        info = client.round_info()
        proto = with_attack(info.make_protocol(), attack) if u in attackers else None
        Device(client, *tbn.RATINGS.of(u)).participate(info, protocol=proto)
    return r


def crash_at(point: str) -> Any:
    """A :func:`secemb.server.faults.hit` that kills the caller at ``point``."""

    def hit(name: str, count: int | None = None) -> None:
        if name == point:
            raise Crash(point)

    return hit


def restarted(leader: LeaderNode) -> LeaderNode:
    """Server 0 started again on the same state store (its memory lost)."""
    fresh = make_node(leader.cfg, peer=leader.peer, store=leader.store, protocol=leader.protocol,
                      model=leader.model, start_threads=False)
    assert isinstance(fresh, LeaderNode)
    return fresh


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_a_clean_close_then_a_restart_counts_the_rejection_once(layout: str, relay: bool) -> None:
    srv = servers(layout, relay)
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    try:
        r = play(srv, HONEST, [ATTACKER])
        out = leader.close_round(r)
        assert out["state"] == "committed" and out["included"] == sorted(HONEST), out
        assert out["rejected"] == [ATTACKER] and leader.rejections == {ATTACKER: 1}
        fresh = restarted(leader)
        assert fresh.rejections == {ATTACKER: 1}  # not 2: the alarm and the round's record are one rejection
        assert fresh.round_status(r, None)["rejected"] == [ATTACKER]
    finally:
        srv.stop()


@pytest.mark.parametrize("point", ["share", "commit"])
@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_a_rejection_survives_a_crash_of_server_0_later_in_the_same_close(monkeypatch: pytest.MonkeyPatch,
                                                                        layout: str, relay: bool, point: str) -> None:
    """The close rejects the attacker (its ``device_rejected`` alarm is journaled) and dies later
    in the same close, before its outcome record: while it exchanges the aggregate shares
    (``share``: the round is then aborted by the restart) or right after it wrote the checkpoint
    of the round without the attacker (``commit``: the round is then committed, recovered from
    the checkpoint).  After the restart the attacker's rejection still counts, once, and the
    round's outcome lists it: the alarm the operator sees and the door's count agree."""
    srv = servers(layout, relay)
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    try:
        r = play(srv, HONEST, [ATTACKER])
        version = leader.version
        if point == "commit":
            monkeypatch.setattr(faults, "hit", crash_at(point))
        else:
            monkeypatch.setattr(leader.peer, "share", lambda *a: crash_at(point)(point))
        with pytest.raises(Crash):
            leader.close_round(r)
        monkeypatch.undo()
        assert leader.rejections == {ATTACKER: 1}
        fresh = restarted(leader)
        assert [a["kind"] for a in fresh.alarms] == ["device_rejected"]  # the journaled alarm came back
        status = fresh.round_status(r, None)
        want = ("committed", version + 1) if point == "commit" else ("aborted", version)
        assert (status["state"], fresh.version) == want, status
        assert fresh.rejections == {ATTACKER: 1}, "the rejection of a crashed close was lost"
        assert status["rejected"] == [ATTACKER], status
        assert restarted(fresh).rejections == {ATTACKER: 1}  # a second restart counts it once too
    finally:
        srv.stop()


def test_a_clear_of_the_strikes_forgets_a_rejection_across_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a crashed close the operator clears the alarms (which keeps the rejection: session
    31, S31-R2), then the strikes (which forget it: docs/deployment.md, "Alarms"): a restart
    after each counts what the running server did; a later rejection of the same device counts
    one."""
    srv = servers("cuckoo", False)
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    try:
        r = play(srv, HONEST, [ATTACKER])
        monkeypatch.setattr(faults, "hit", crash_at("commit"))
        with pytest.raises(Crash):
            leader.close_round(r)
        monkeypatch.undo()
        fresh = restarted(leader)
        assert fresh.rejections == {ATTACKER: 1}
        assert fresh.clear_alarms() == {"cleared": 1} and fresh.rejections == {ATTACKER: 1}
        fresh = restarted(fresh)
        assert fresh.rejections == {ATTACKER: 1} and fresh.status()["alarms"] == []
        assert fresh.clear_strikes() == {"cleared": {str(ATTACKER): 1}} and fresh.rejections == {}
        again = restarted(fresh)
        assert again.rejections == {} and again.round_status(r, None)["rejected"] == [ATTACKER]
        srv.nodes = (again, srv.nodes[1])
        r2 = play(srv, HONEST, [ATTACKER])
        assert again.close_round(r2)["rejected"] == [ATTACKER]
        assert restarted(again).rejections == {ATTACKER: 1}
    finally:
        srv.stop()
