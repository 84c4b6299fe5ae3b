"""Issue 33, item 5 -- what the defences against a deviating server do NOT cover, shown by
running it (docs/security.md, "Threat model": the rows marked "not protected").

* A server that offsets its aggregate share -- the one it sends the other server and, to stay
  in agreement, its own reconstruction -- moves the model both servers commit by an offset of
  its choice; the digests agree, no alarm.  "One model, agreed" makes the servers hold one
  model, not a correct one: the same power over the update one malicious device has.
* Whoever chooses the participants of two rounds that differ in one device (server 0 does; a
  malicious server with colluding devices can fill a round around a victim) learns, from the
  two aggregates alone, the rows the victim trained on that the others did not: the aggregate
  is revealed exactly and its non-zero rows are the union of the devices' rows.  Server 1
  accepts both rounds (each at its floor); only DP (``--dp-epsilon``) hides that.
* (Closed) The round's dense vector comes from server 0 alone: a vector crafted for one device
  is now refused by that device against both servers' ``dense_sha256`` (the last test).

Both servers in process (:func:`deviation_helpers.in_process`); the devices are the SDK's."""

from __future__ import annotations

import numpy as np
import pytest
from deviation_helpers import DATA, FLOOR, RATINGS, USERS, WAIT_S, Pair, client, in_process

from secemb.client.device import Device
from secemb.sim.local import LocalServerLink
from secemb.errors import ModelDisagreement
from secemb.privacy.noise import add_to_share
from secemb.round import messages

#: each device trains on two of its items (fewer than m' = 4: no truncation, its rows are fixed)
TWO = {u: (RATINGS.of(u)[0][:2], RATINGS.of(u)[1][:2]) for u in USERS}


def _round(pair: Pair, data: dict[int, tuple[np.ndarray, np.ndarray]]) -> dict:
    """One round of the devices in ``data`` (user -> its items and ratings), closed by server 0."""
    r = int(pair.leader.open_round(participants=sorted(data), deadline_s=WAIT_S)["round_id"])
    for u, (items, ratings) in data.items():
        c = client(pair, u)
        Device(c, items, ratings).participate(c.round_info())
    return pair.leader.close_round(r)


def test_an_offset_aggregate_share_moves_the_agreed_model_undetected(monkeypatch):
    pair, servers = in_process()
    leader, follower = servers.nodes
    j = min(set(range(DATA.num_items)) - set(np.concatenate([TWO[u][0] for u in USERS]).tolist()))
    w = leader.table.shape[1]
    delta = np.zeros(leader.table.size + leader.dense.size, leader.fp.dtype)
    delta[j * w] = leader.fp.encode(np.array([4.0]))[0]  # the aggregate's coordinate (j, 0) moved
    honest_share, honest_reconstruct = leader._own_share, leader._reconstruct
    got = {}

    def own_share(rnd, include):  # what server 0 sends server 1: its share plus delta
        return add_to_share(honest_share(rnd, include), delta)

    def reconstruct(rnd, role, peer_share, include, opt, table, dense):
        got["honest"] = honest_reconstruct(rnd, role, peer_share, include, opt, table.copy(), dense.copy())
        return honest_reconstruct(rnd, role, add_to_share(peer_share, delta), include, opt, table, dense)

    monkeypatch.setattr(leader, "_own_share", own_share)
    monkeypatch.setattr(leader, "_reconstruct", reconstruct)
    outcome = _round(pair, TWO)  # item j: no device trains on it, its honest step is zero
    assert outcome["state"] == "committed"
    assert (leader.version, follower.version) == (1, 1)
    assert leader.model_sha() == follower.model_sha() != got["honest"][2]  # agreed, and not the honest model
    moved = leader.table != got["honest"][0]
    assert moved[j, 0] and moved.sum() == 1  # exactly the coordinate server 0 chose
    assert np.array_equal(leader.table, follower.table)
    assert not leader.status()["alarms"] and not follower.status()["alarms"]


def test_two_rounds_differing_in_one_device_reveal_the_rows_it_alone_trained_on(monkeypatch):
    pair, servers = in_process()
    leader, follower = servers.nodes
    data = TWO
    victim, others = USERS[-1], USERS[:-1]
    assert len(others) == FLOOR
    exclusive = set(data[victim][0].tolist()) - set().union(*(data[u][0].tolist() for u in others))
    assert exclusive  # the fixture's victim has an item the others do not train on
    sums: list[np.ndarray] = []
    honest_reconstruct = leader._reconstruct

    def reconstruct(rnd, role, peer_share, include, opt, table, dense):  # what server 0 holds anyway
        sums.append(role.combine(peer_share, include=include)[0])
        return honest_reconstruct(rnd, role, peer_share, include, opt, table, dense)

    monkeypatch.setattr(leader, "_reconstruct", reconstruct)
    assert _round(pair, data)["state"] == "committed"  # the victim and the others
    assert _round(pair, {u: data[u] for u in others})["state"] == "committed"  # the others alone
    assert follower.version == 2 and not follower.status()["alarms"]  # server 1 released both shares
    rows_with, rows_without = ({int(i) for i in np.flatnonzero(s.any(axis=1))} for s in sums)
    assert rows_with == set().union(*(data[u][0].tolist() for u in USERS))  # the union of the devices' rows
    assert rows_with - rows_without == exclusive  # the victim's rows the others did not train on


def test_a_dense_vector_crafted_for_one_device_is_caught_by_that_device(monkeypatch):
    """The round's dense vector comes from server 0 alone.  Server 0 sends one device a crafted one
    (for MF a global bias of 1,000: the device's clipped gradients, far larger than the others',
    would mark its rows in the aggregate -- the red team's corrupted-answer attack through the dense
    download).  Both servers announce the DENSE message's digest, so the device refuses it, reports
    to both servers, and takes no part: the victim's rows leave no trace."""
    pair, servers = in_process()
    leader, follower = pair.leader, servers.nodes[1]
    victim = USERS[-1]
    honest_dense = LocalServerLink.dense

    def dense(link, round_id):  # server 0 knows who asks (a signed request)
        msg = honest_dense(link, round_id)
        if link.node is not leader or link.user != victim:
            return msg
        return messages.encode_dense(round_id, leader.fp.encode(np.array([1000.0])), leader.round.rc.ring_bits)

    monkeypatch.setattr(LocalServerLink, "dense", dense)
    r = int(pair.leader.open_round(participants=sorted(TWO), deadline_s=WAIT_S)["round_id"])
    for u in USERS[:-1]:
        c = client(pair, u)
        Device(c, *TWO[u]).participate(c.round_info())
    c = client(pair, victim)
    with pytest.raises(ModelDisagreement, match="dense vector"):
        Device(c, *TWO[victim]).participate(c.round_info())
    for node in (leader, follower):  # reported to both: the deployment halts (docs/deployment.md, "Alarms")
        assert [a["kind"] for a in node.status()["alarms"]] == ["model_disagreement"]
    outcome = pair.leader.close_round(r)
    assert outcome["state"] != "committed" and leader.version == 0
