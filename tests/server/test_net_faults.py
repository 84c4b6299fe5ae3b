"""kill -9 of either server at many points of a round, then a restart: training completes and
the final model is exactly the model of an uninterrupted run (aborted rounds are retried with
the same users and placements after the devices undid their local step) -- no update lost,
none applied twice.  The servers run as real processes; a supervisor restarts a dead one."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from net_helpers import WAIT_S, cluster_for, dump_logs, setup, small_data
from secemb.sim.coordinator import train_networked
from secemb.training import train
from secemb.transport.errors import RemoteError


def _run(relay: bool, faults: dict[int, str], *, before_round=None):
    tr, te = small_data()
    model, proto, config = setup("secemb", "cuckoo", relay, m_prime=8, epochs=2, users_per_round=10)
    ref = train(model, proto, tr, te, config)
    with cluster_for(model, proto, tr, config, faults=faults, deadline_s=20) as cluster:
        cluster.supervise()
        try:
            got = train_networked(cluster, model, proto, tr, te, config, workers=5, wait_s=WAIT_S, max_attempts=8,
                                  device_randomness="reproducible",
                                  before_round=(lambda i, a, r, u: before_round(cluster, i, a, r)) if before_round else None)
        except Exception:
            print(dump_logs(cluster))
            raise
        restarts = list(cluster.restarts)
        fired = sorted(p.name for party in (0, 1) for p in (cluster.workdir / f"faults{party}").glob("fired-*")) \
            if faults else []
        status = [cluster.admin(p).get_json("/v1/admin/status") for p in (0, 1)]
    return ref, got, restarts, fired, status


@pytest.mark.parametrize(
    "relay,faults",
    [
        # relay: crash server 0 after a round was journaled, mid-upload, and after the commit
        # (before server 1 is synced); crash server 1 before its share leaves and after it
        # stored the sync (before answering)
        (True, {0: "open,upload:4,commit", 1: "share,sync"}),
        # no relay: crash server 0 mid-retrieval and while closing, server 1 mid-upload and
        # when asked to close
        (False, {0: "retrieval:5,close", 1: "upload:3,close"}),
    ],
)
def test_kill9_at_round_points_then_restart_gives_the_uninterrupted_model(relay, faults):
    ref, got, restarts, fired, status = _run(relay, faults)
    want = sum(len(spec.split(",")) for spec in faults.values())
    assert len(fired) == want, fired
    assert sum(restarts) == want
    assert got.model_sha256 == ref.model_sha256
    assert got.rounds == ref.rounds
    assert getattr(got, "aborted_rounds") >= 1
    # both servers end on the same model version: one per committed round, none twice
    assert status[0]["model_version"] == status[1]["model_version"] == ref.rounds
    assert status[0]["model_sha256"] == status[1]["model_sha256"] == ref.model_sha256


def test_external_kill9_of_each_server_during_a_round():
    """The harness itself sends SIGKILL to server 1 in round 1 and to server 0 in round 3,
    while the devices are running."""

    def killer(cluster, index, attempt, round_id):
        if attempt == 1 and index in (1, 3):
            party = 1 if index == 1 else 0

            def go():
                time.sleep(0.15)
                cluster.kill(party, signal.SIGKILL)

            threading.Thread(target=go, daemon=True).start()

    ref, got, restarts, _, status = _run(True, {}, before_round=killer)
    assert restarts == [1, 1]
    assert got.model_sha256 == ref.model_sha256
    assert status[0]["model_version"] == status[1]["model_version"] == ref.rounds


def test_restarted_server_keeps_its_model_and_refuses_stale_rounds():
    tr, te = small_data()
    model, proto, config = setup("secemb", "cuckoo", True, m_prime=8, epochs=1, users_per_round=15)
    with cluster_for(model, proto, tr, config) as cluster:
        got = train_networked(cluster, model, proto, tr, te, config, workers=5, wait_s=WAIT_S)
        before = [cluster.admin(p).get_json("/v1/admin/status") for p in (0, 1)]
        for p in (0, 1):
            cluster.restart(p)
        after = [cluster.admin(p).get_json("/v1/admin/status") for p in (0, 1)]
        for b, a in zip(before, after):
            assert (a["model_version"], a["model_sha256"], a["max_round"]) == (
                b["model_version"], b["model_sha256"], b["max_round"])
            assert a["boot_id"] != b["boot_id"]
        assert after[0]["model_sha256"] == got.model_sha256
        # the last round is over: its id is not accepted again by either server
        last = after[0]["max_round"]
        admin0 = cluster.admin(0)
        assert admin0.post_json(f"/v1/admin/rounds/{last}/close")["state"] == "committed"
        # a new round gets a fresh id, strictly after every id used before the restart
        floor = list(range(cluster.min_users))  # the fewest participants a round may have
        doc = admin0.post_json("/v1/admin/rounds", {"participants": floor, "deadline_s": 5})
        assert doc["round_id"] == last + 1
        with pytest.raises(RemoteError) as e:
            cluster.admin(0).post_json("/v1/admin/rounds", {"participants": floor})
        assert e.value.status == 409
