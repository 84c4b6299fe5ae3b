"""Session 40, helper U: ``secemb admin count`` closes the m' phase as soon as every listed user has
sent its count share to *both* servers, instead of always waiting its whole ``--wait``; server 0 learns
server 1's progress through ``GET /v1/peer/count/users`` and answers its operator's ``GET
/v1/admin/count``.  Over HTTP, with two real ``secemb serve`` processes on 127.0.0.1
(:class:`~secemb.sim.cluster.LocalCluster`) and the command as its own process: every wait is bounded,
so a command that waits its whole ``--wait`` fails the test instead of hanging it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from _server_template import popen_secemb  # noqa: E402

from secemb.client.device import DeviceClient  # noqa: E402
from secemb.data import synthetic_like  # noqa: E402
from secemb.models import MatrixFactorization  # noqa: E402
from secemb.protocols import get_protocol  # noqa: E402
from secemb.server.errors import Conflict  # noqa: E402
from secemb.sim.local import InProcessServers  # noqa: E402
from secemb.sim.settings import cluster_settings  # noqa: E402
from secemb.training import TrainConfig  # noqa: E402
from secemb.round import messages  # noqa: E402
from secemb.sharing import share  # noqa: E402
from secemb.sim.cluster import LocalCluster  # noqa: E402
from secemb.transport.errors import RemoteError  # noqa: E402
from secemb.transport.signing import sign_headers, user_key  # noqa: E402

#: every request of these tests, and the wait for the command to open the phase (seconds)
WAIT_S = 30.0
#: the devices' rating counts (mean 7)
COUNTS = (5, 7, 9)


@contextlib.contextmanager
def _cluster() -> Iterator[LocalCluster]:
    """Two servers of 3 devices and 20 items, m' from the count phase, a floor of 2 users."""
    with tempfile.TemporaryDirectory(prefix="secemb-test-") as d:
        cluster = LocalCluster(d, num_items=20, num_users=3, min_users=2, model="mf", model_hparams={"dim": 4})
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


def _device(cluster: LocalCluster, user: int) -> DeviceClient:
    k0, k1 = cluster.device_keys(user)
    return DeviceClient(user, cluster.url(0), cluster.url(1), k0, k1, timeout=WAIT_S, tls=cluster.tls, min_users=2)


def _admin_count(cluster: LocalCluster, *args: str) -> subprocess.Popen:
    """``secemb admin count --deployment <the cluster's> ARGS`` as a process, returned once server 0's
    count phase is open (at most WAIT_S seconds)."""
    proc = popen_secemb([sys.executable, "-m", "secemb", "admin", "count", "--deployment", str(cluster.workdir),
                         *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    admin, deadline = cluster.admin(0, timeout=WAIT_S), time.monotonic() + WAIT_S
    try:
        while admin.get_json("/v1/admin/status")["count"]["state"] != "open":
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command did not open the count phase"
            time.sleep(0.1)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """The command's stdout and stderr once it exited 0 within ``timeout`` seconds (killed otherwise)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"admin count still waited after {timeout} s; stderr: {err}")
    assert proc.returncode == 0, (out, err)
    return out, err


def test_count_closes_once_every_device_sent_its_share_to_both_servers() -> None:
    # session 39's operator: `admin count` sat its whole --wait (60 s by default) although every device had
    # sent its shares; without --users it now closes once all of the deployment's 3 devices are in at both
    with _cluster() as cluster:
        start = time.monotonic()
        proc = _admin_count(cluster, "--wait", "300")
        for u, c in enumerate(COUNTS):
            _device(cluster, u).send_count(c, 32)
        out, err = _finish(proc, WAIT_S)  # a tenth of --wait: the test fails if it waits the whole of it
        took = time.monotonic() - start
        assert json.loads(out)["users"] == 3 and json.loads(out)["mean_count"] == 7.0, out
        assert "3 of 3 users at server 0, 3 of 3 at server 1, 3 at both" in err, err
        assert "for 300 s at most" in err and took < WAIT_S, (err, took)


def test_a_share_at_server_0_only_keeps_the_count_waiting_to_its_deadline() -> None:
    # device 2 sends its share to server 0 and not to server 1: the phase is not complete (the close
    # would leave device 2 out), so the command waits its --wait and the mean covers devices 0 and 1
    wait = 4.0
    with _cluster() as cluster:
        start = time.monotonic()
        proc = _admin_count(cluster, "--wait", f"{wait:g}", "--users", "0-2")
        for u in (0, 1):
            _device(cluster, u).send_count(COUNTS[u], 32)
        only0 = messages.encode_count(share(np.array([COUNTS[2]], np.uint32))[0], 32, 0)
        _device(cluster, 2).links[0].count(only0)
        out, err = _finish(proc, wait + WAIT_S)
        took = time.monotonic() - start
        assert took >= wait, (took, err)
        assert json.loads(out)["users"] == 2 and json.loads(out)["mean_count"] == 6.0, out
        assert "3 of 3 users at server 0, 2 of 3 at server 1, 2 at both" in err, err


def _get(cluster: LocalCluster, party: int, path: str, key_id: str, key: bytes) -> httpx.Response:
    """A signed ``GET path`` to server ``party`` as ``key_id`` (over server 0's certificate when it plays
    server 0 to server 1)."""
    peer = key_id == "server0" and party == 1
    return httpx.get(cluster.url(party) + path, headers=sign_headers(key_id, key, "GET", path, "", b""),
                     timeout=WAIT_S, trust_env=False, verify=cluster.peer_tls() if peer else cluster.tls)


def test_the_progress_routes_refuse_strangers_and_a_closed_phase_with_4xx() -> None:
    with _cluster() as cluster:
        admin0, peer = cluster.admin_secrets[0], cluster.peer_secret
        wrong = b"w" * 32
        device = ("user:1", user_key(cluster.user_secrets[0], 1))
        cases = [  # (party, path, key id, key, status)
            (0, "/v1/admin/count", "admin", wrong, 401),
            (0, "/v1/admin/count", "admin", cluster.admin_secrets[1], 401),  # server 1's operator
            (0, "/v1/admin/count", *device, 403),
            (1, "/v1/peer/count/users", "server0", wrong, 401),
            (1, "/v1/peer/count/users", "admin", cluster.admin_secrets[1], 403),  # server 1's own operator
            (1, "/v1/peer/count/users", "user:1", user_key(cluster.user_secrets[1], 1), 403),
            (1, "/v1/admin/count", "admin", cluster.admin_secrets[1], 404),  # server 0's route
            (0, "/v1/admin/count", "admin", admin0, 409),  # no phase open yet
            (1, "/v1/peer/count/users", "server0", peer, 409),
        ]
        for party, path, key_id, key, status in cases:
            resp = _get(cluster, party, path, key_id, key)
            assert resp.status_code == status, (party, path, key_id, resp.status_code, resp.text)
        assert "the count phase is not open" in _get(cluster, 0, "/v1/admin/count", "admin", admin0).json()["detail"]
        # opened for devices 0-2, device 0 at both servers, device 1 at server 1 only
        assert cluster.admin(0).post_json("/v1/admin/count/open", {"users": [0, 1, 2]}) == {"state": "open"}
        _device(cluster, 0).send_count(4, 32)
        _device(cluster, 1).links[1].count(messages.encode_count(share(np.array([3], np.uint32))[1], 32, 1))
        assert _get(cluster, 1, "/v1/peer/count/users", "server0", peer).json() == {"users": [0, 1]}
        assert _get(cluster, 0, "/v1/admin/count", "admin", admin0).json() == {
            "state": "open", "expected": 3, "server0": 1, "server1": 2, "both": 1}
        # the strangers still learn nothing once it is open
        for party, path, key_id, key, status in cases[:7]:
            assert _get(cluster, party, path, key_id, key).status_code == status, (party, path, key_id)
        # closed (too few users at both: server 0 reopens its side, server 1 stays frozen): a clear 409
        with pytest.raises(RemoteError) as refused:
            cluster.admin(0).post_json("/v1/admin/count/close")
        assert refused.value.status == 409, refused.value
        resp = _get(cluster, 0, "/v1/admin/count", "admin", admin0)
        assert resp.status_code == 409 and "server 1" in resp.json()["detail"], resp.text
        assert _get(cluster, 1, "/v1/peer/count/users", "server0", peer).status_code == 409
        for p in (0, 1):
            assert cluster.alive(p)


def test_in_process_the_progress_counts_a_user_at_both_only_once_both_servers_hold_its_share() -> None:
    # the same leader code through the in-process links (the simulations' LocalAdminLink and LocalPeer)
    model, protocol = MatrixFactorization(dim=4, reg=0.01), get_protocol("secemb", layout="cuckoo", relay=True)
    settings = cluster_settings(model, protocol, synthetic_like(4, 20, 40, seed=1),
                                TrainConfig(epochs=1, users_per_round=4), min_users=2)
    servers = InProcessServers(settings, protocol, model)
    try:
        links = servers.servers()
        with pytest.raises(Conflict, match="the count phase is not open"):
            links.admin[0].count_progress()
        links.admin[0].count_open([0, 1, 2])
        assert links.admin[0].count_progress() == {"state": "open", "expected": 3, "server0": 0, "server1": 0,
                                                   "both": 0}
        links.device(0).send_count(3, 32)
        links.device(1).links[1].count(messages.encode_count(share(np.array([3], np.uint32))[1], 32, 1))
        assert links.admin[0].count_progress() == {"state": "open", "expected": 3, "server0": 1, "server1": 2,
                                                   "both": 1}
        links.device(2).send_count(5, 32)
        assert links.admin[0].count_progress()["both"] == 2
    finally:
        servers.stop()
