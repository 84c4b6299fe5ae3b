"""Dropouts (Appendix L.2) over the network: a device that retrieves and never uploads, uploads
that reach only one server, and a device that misses the deadline are left out of the
aggregate; the round closes on the deadline and goes on for everyone else.  ``verify=True``
checks after every round that both servers hold the model obtained by the optimizer step on
the direct sums of exactly the included devices' gradients."""

from __future__ import annotations

import pytest

from net_helpers import WAIT_S, cluster_for, dump_logs, setup, small_data
from secemb.sim.coordinator import train_networked
from secemb.transport.errors import RemoteError


@pytest.mark.parametrize("protocol,relay", [("secemb", False), ("secemb", True), ("plaintext", False)])
def test_dropped_partial_and_late_devices_are_left_out(protocol, relay):
    tr, te = small_data()
    model, proto, config = setup(protocol, "cuckoo", relay, m_prime=8, epochs=1, users_per_round=8, verify=True)
    faults: dict[tuple[int, int], str] = {}

    def behavior(index: int, user: int) -> str | None:
        return faults.get((index, user))

    rounds: dict[int, tuple[int, list[int]]] = {}  # round index -> (round id, users)

    def before_round(index: int, attempt: int, round_id: int, users: list[int]) -> None:
        rounds[index] = (round_id, sorted(users))
        ids = sorted(users)
        if index == 0:
            faults.update({(0, ids[0]): "drop", (0, ids[1]): "only0", (0, ids[2]): "only1"})
        elif index == 1:
            faults[(1, ids[0])] = "late:3"

    errors: dict[int, dict[int, BaseException]] = {}

    def after_round(index: int, attempt: int, outcome, errs) -> None:
        errors[index] = errs

    with cluster_for(model, proto, tr, config, deadline_s=1.5, min_users=2) as cluster:  # rounds lose 3 of 8
        try:
            got = train_networked(cluster, model, proto, tr, te, config, workers=8, wait_s=WAIT_S,
                                  close_when_done=False, deadline_s=1.5, behavior=behavior,
                                  before_round=before_round, after_round=after_round)
        except Exception:
            print(dump_logs(cluster))
            raise
        admin0 = cluster.admin(0)
        statuses = {i: admin0.get_json(f"/v1/rounds/{r}/status") for i, (r, _) in rounds.items()}
        assert all(s["state"] == "committed" for s in statuses.values())
    assert got.verified_rounds == got.rounds >= 2
    ids0 = rounds[0][1]
    inc0 = set(statuses[0]["included"])
    # with relay a device uploads to server 0 only anyway (server 0 forwards): "only0" counts
    left_out = {ids0[0], ids0[2]} if relay else set(ids0[:3])
    assert inc0 == set(ids0) - left_out
    ids1 = rounds[1][1]
    assert set(statuses[1]["included"]) == set(ids1) - {ids1[0]}
    # the late device's upload was refused: the round had closed (409)
    late = errors[1][ids1[0]]
    assert isinstance(late, RemoteError) and late.status == 409 and "closed" in late.detail
    assert set(errors[1]) == {ids1[0]}
    assert not errors[0]  # dropping out is not an error for the device
    assert "deadline" in statuses[0]["reason"] and "deadline" in statuses[1]["reason"]
