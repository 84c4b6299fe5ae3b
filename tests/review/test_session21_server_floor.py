"""Session 21 review (helper F), finding F1: the round's announced ``min_users`` was not enforced
by the honest server 1.

A device takes part only in a round whose announced ``min_users`` is at least its own floor:
``DeviceClient``'s contract is that it "takes part in no round announced for fewer users, or whose
aggregate the servers would release with fewer" (``secemb/client/device.py``; docs/security.md,
"The floor": "the device SDK refuses a round whose announced set is below the device's own
floor"), and both servers announce the round's ``min_users`` (the device compares the two
documents).  Server 0 enforces it at close (docs/deployment.md, "Rounds": "with fewer than
``min_users`` users the round is aborted"), but server 1 released its aggregate share for any set
of at least its *configured* floor.  So a deviating server 0 could announce ``min_users = 5`` to
get devices of floor 5 into a round and then have server 1 release the aggregate of 3 of them
(server 1's configured floor being 3): the devices' floor was only as strong as server 1's
configuration, whatever server 1 had announced to them.

Fix (``FollowerNode.peer_share``): server 1 releases a round's aggregate share only for at least
the larger of its configured floor and the ``min_users`` it announced for the round.  In process,
both servers' configured floor 3 (``test_bounded_nodes``' setup), bounded payloads, cuckoo with
relay.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402
import test_session21_verify_journal as j21  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.errors import ProtocolError  # noqa: E402
from secemb.server.errors import Conflict  # noqa: E402
from secemb.server.node import FollowerNode, LeaderNode  # noqa: E402

USERS = tbn.USERS  # five users; both servers' configured floor is tbn.FLOOR = 3
ANNOUNCED = 5


def _round_of_floor_5_devices(srv: j21.InProcessServers) -> tuple[LeaderNode, FollowerNode, int]:
    """A round announced with ``min_users = 5``, in which the five devices, each of floor 5, take part."""
    leader, follower = srv.nodes
    assert isinstance(leader, LeaderNode) and isinstance(follower, FollowerNode)
    assert leader.cfg.min_users == follower.cfg.min_users == tbn.FLOOR < ANNOUNCED
    r = int(leader.open_round(participants=USERS, deadline_s=30.0, min_users=ANNOUNCED)["round_id"])
    for u in USERS:
        client = srv.servers().device(u)
        client.min_users = ANNOUNCED
        info = client.round_info()
        assert info.min_users == ANNOUNCED  # what both servers announce, and the device accepted
        Device(client, *tbn.RATINGS.of(u)).participate(info)
    return leader, follower, r


def test_a_device_of_floor_5_refuses_a_round_announced_for_fewer() -> None:
    """The device's side of the contract (it held before)."""
    srv = j21.servers("cuckoo", True)
    try:
        leader = srv.nodes[0]
        assert isinstance(leader, LeaderNode)
        leader.open_round(participants=USERS, deadline_s=30.0, min_users=ANNOUNCED - 1)
        client = srv.servers().device(USERS[0])
        client.min_users = ANNOUNCED
        with pytest.raises(ProtocolError, match="this device's floor is 5"):
            client.round_info()
    finally:
        srv.stop()


def test_server_1_releases_no_aggregate_share_below_the_min_users_it_announced() -> None:
    """Server 0 deviates at close: it asks server 1 for the aggregate share of 3 of the round's 5
    devices (at server 1's configured floor, below the ``min_users`` both announced).  Server 1
    refuses (409), so no aggregate of fewer than the announced 5 comes out; the share of all 5 is
    released, and the round commits as usual."""
    srv = j21.servers("cuckoo", True)
    try:
        leader, follower, r = _round_of_floor_5_devices(srv)
        assert follower.round is not None and follower.round.min_users == ANNOUNCED
        follower.peer_close(r)
        with pytest.raises(Conflict, match=f"min_users={ANNOUNCED}"):
            follower.peer_share(r, sorted(USERS)[:3])
        assert follower.round.share is None and follower.round.share_include is None  # nothing released
        assert follower.peer_share(r, sorted(USERS))  # the whole set is fine
    finally:
        srv.stop()
