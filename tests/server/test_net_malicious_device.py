"""Malicious devices over the network (issue 34): two ``secemb serve`` processes on 127.0.0.1
run the verification step between upload and close (``POST /v1/peer/rounds/{r}/verify``);
devices running an attack are left out of every round they take part in, the round goes on for
the others (``verify=True``: both servers hold the model of the optimizer step on the direct
sums of exactly the included devices' gradients), and server 0 reports them: the round's
``rejected`` ids and a non-halting ``device_rejected`` alarm in its status."""

from __future__ import annotations

import pytest

from net_helpers import WAIT_S, cluster_for, dump_logs, setup, small_data
from secemb.protocols.adversary import AdversaryRecord, attack_behavior
from secemb.server.verify import rejected
from secemb.sim.coordinator import train_networked


@pytest.mark.parametrize(("relay", "attack"), [(False, "inconsistent-keys"), (True, "two-points")])
def test_attackers_are_rejected_over_http(relay: bool, attack: str) -> None:
    tr, te = small_data()
    model, proto, config = setup("secemb", "cuckoo", relay, m_prime=8, epochs=1, users_per_round=8, verify=True)
    record = AdversaryRecord(attack, 3)
    with cluster_for(model, proto, tr, config, min_users=2) as cluster:
        try:
            got = train_networked(cluster, model, proto, tr, te, config, workers=8, wait_s=WAIT_S,
                                  behavior=attack_behavior(attack, 3), after_round=record.after_round)
        except Exception:
            print(dump_logs(cluster))
            raise
        status = cluster.admin(0).get_json("/v1/admin/status")
    assert got.verified_rounds == got.rounds >= 2
    tried = [r for r in record.rounds if r["rejected_devices"]]
    assert tried and all(r["malicious_included"] == [] and r["refused_devices"] == [] for r in record.rounds)
    kinds = {a["kind"] for a in status["alarms"]}
    assert "device_rejected" in kinds and status.get("halted") in (None, "", False)


def test_digests_are_compared_in_full() -> None:
    """A user whose digests differ, or who is missing on either side, is rejected (server 1's
    answer itself is checked: ``test_s29_sketch_node.py``)."""
    assert rejected({1: b"a" * 32, 2: b"b" * 32}, {1: b"a" * 32, 2: b"c" * 32}) == [2]
    assert rejected({1: b"a" * 32}, {}) == [1]
