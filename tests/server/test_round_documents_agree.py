"""Issue 33, item 5 (docs/security.md, "Threat model"): a device takes part only in a round both
servers announce identically -- one deviating server cannot, on its own, give a device another
round configuration (a looser clip bound, another learning rate, fewer users) than the honest
server announces.  Both servers in process (:func:`deviation_helpers.in_process`)."""

from __future__ import annotations

import copy

import pytest

from deviation_helpers import USERS, WAIT_S, client, in_process
from secemb.errors import ProtocolError


@pytest.mark.parametrize("field", ["training", "min_users", "n_p"])
def test_a_round_announced_differently_by_one_server_is_refused_before_any_request(monkeypatch, field):
    pair, servers = in_process()
    leader, follower = pair.leader, servers.nodes[1]
    honest = leader.round_info

    def deviating(user):  # server 0 announces its own version of one field to the devices
        doc = copy.deepcopy(honest(user))
        if field == "training":
            doc["training"]["lr"] = 10 * doc["training"]["lr"]
        else:
            doc[field] -= 1
        return doc

    r = int(leader.open_round(participants=USERS, deadline_s=WAIT_S)["round_id"])
    monkeypatch.setattr(leader, "round_info", deviating)
    with pytest.raises(ProtocolError, match="the servers announce different rounds"):
        client(pair, USERS[0]).round_info()
    assert leader.round is not None and follower.round is not None
    assert not leader.round.retrieved and not follower.round.retrieved  # nothing was sent to either
    assert leader.round_status(r, None)["state"] == "open"
