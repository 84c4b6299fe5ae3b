"""Issue 33, item 5 (docs/security.md, "What holds"): server 1 releases its aggregate share of a
round for one user set only.  Asked again for the same set it sends the same bytes; asked for
another set -- a subset still at its floor, whose difference from the first would open one
device's gradient -- it refuses.  Both servers in process (:func:`deviation_helpers.in_process`)."""

from __future__ import annotations

import pytest

from deviation_helpers import FLOOR, RATINGS, USERS, WAIT_S, client, in_process
from secemb.client.device import Device
from secemb.server.errors import Conflict
from secemb.server.node import FollowerNode


def test_server1_releases_its_aggregate_share_for_one_user_set_a_round():
    pair, servers = in_process()
    leader, follower = pair.leader, servers.nodes[1]
    assert isinstance(follower, FollowerNode)
    r = int(leader.open_round(participants=USERS, deadline_s=WAIT_S)["round_id"])
    for u in USERS:
        c = client(pair, u)
        Device(c, *RATINGS.of(u)).participate(c.round_info())
    assert follower.peer_close(r)["uploaded"] == sorted(USERS)
    share = follower.peer_share(r, USERS)  # a deviating server 0 asks for the whole set ...
    assert follower.peer_share(r, list(reversed(USERS))) == share  # ... the same set: the same bytes
    subset = USERS[:FLOOR]  # ... then for one device fewer, still at the floor: refused
    with pytest.raises(Conflict, match="a share for another user set was already given"):
        follower.peer_share(r, subset)
