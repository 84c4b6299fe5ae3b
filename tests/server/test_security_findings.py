"""Regression tests of issue 12's security findings, one (or a few) per finding, named after it.
The node-level tests run the server nodes in process (no sockets); the app-level ones drive
the FastAPI app through Starlette's test client."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from secemb.client.device import DeviceClient
from secemb.engine.local import InProcessServers, LocalServerLink
from secemb.errors import InvalidParameters, ProtocolError
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.server.app import create_app
from secemb.server.config import DEFAULT_MIN_USERS, ServerConfig
from secemb.server.errors import Conflict
from secemb.server.node import make_node
from secemb.server.store import MemoryStore
from secemb.sharing import share
from secemb.training import messages
from secemb.transport.signing import sign_headers

PEER, ADMIN, USERS = b"p" * 32, b"a" * 32, b"u" * 32
_SETTINGS = {"num_items": 40, "num_users": 30, "model": "mf", "model_hparams": {"dim": 4, "reg": 0.01},
             "m_prime": 4, "protocol": "secemb", "layout": "cuckoo", "relay": True}


def _cfg(party: int, tmp_path, **kw) -> ServerConfig:
    return ServerConfig(party=party, peer_url="https://127.0.0.1:9", state_dir=tmp_path, peer_secret=PEER,
                        admin_secret=ADMIN, user_secret=USERS, **(_SETTINGS | kw))


def _servers(min_users: int = 3) -> InProcessServers:
    proto = get_protocol("secemb", layout="cuckoo", relay=True)
    return InProcessServers(_SETTINGS | {"min_users": min_users}, proto, MatrixFactorization(dim=4, reg=0.01))


# ---------------------------------------------------------------- finding 2: peer endpoints check the party
def test_finding2_server0_refuses_peer_calls_signed_by_server1(tmp_path):
    node = make_node(_cfg(0, tmp_path), peer=_servers().nodes[0].peer, store=MemoryStore(0, "f"),
                     start_threads=False)
    client = TestClient(create_app(node))
    before = node.count.status()
    for path, body in (("/v1/peer/count/open", b'{"users": null}'), ("/v1/peer/count/close", b"{}"),
                       ("/v1/peer/count/share", b'{"include": [1, 2, 3]}'), ("/v1/peer/status", b"")):
        method = "GET" if path.endswith("status") else "POST"
        headers = sign_headers("server1", PEER, method, path, "", body) | {"Content-Type": "application/json"}
        resp = client.request(method, path, content=body or None, headers=headers)
        assert resp.status_code == 401, (path, resp.status_code, resp.text)
    assert node.count.status() == before


# ---------------------------------------------------------------- finding 3: the floor
def test_finding3_floor_defaults_to_10_and_never_goes_below_2(tmp_path):
    assert _cfg(0, tmp_path).min_users == DEFAULT_MIN_USERS == 10
    with pytest.raises(InvalidParameters, match="min_users must be an int >= 2, got 1"):
        _cfg(0, tmp_path, min_users=1)


def test_finding3_server0_opens_no_round_below_its_floor():
    leader = _servers(min_users=3).nodes[0]
    with pytest.raises(InvalidParameters, match="n_p=2 user.*floor is min_users=3"):
        leader.open_round(participants=[1, 2])
    with pytest.raises(InvalidParameters, match=r"min_users must be an int in \[3"):
        leader.open_round(participants=[1, 2, 3, 4], min_users=2)
    assert leader.round is None


def test_finding3_server1_refuses_a_round_or_share_below_its_own_floor():
    servers = _servers(min_users=2)
    leader, follower = servers.nodes
    follower.cfg = follower.cfg.replace(min_users=4)  # server 1 is configured with a higher floor
    with pytest.raises(Conflict, match="floor is min_users=4"):
        leader.open_round(participants=[1, 2, 3])
    assert follower.round is None
    doc = leader.open_round(participants=[1, 2, 3, 4, 5], min_users=4)
    r = doc["round_id"]
    follower.peer_close(r)
    # a deviating server 0 asks for server 1's share of a small subset: refused before anything
    with pytest.raises(Conflict, match="share of 1 user.*fewer than min_users=4"):
        follower.peer_share(r, [1])
    with pytest.raises(Conflict, match="share of 3 user"):
        follower.peer_share(r, [1, 2, 2, 3])


def test_finding3_server1_releases_one_count_sum_per_phase_and_none_below_the_floor():
    servers = _servers(min_users=3)
    follower = servers.nodes[1]
    follower.peer_count_open(None)
    for u in range(5):
        follower.count_submit(u, messages.encode_count(share(np.array([7], np.uint32))[1], 32, 1))
    follower.peer_count_close()
    with pytest.raises(Conflict, match="fewer than min_users=3"):
        follower.peer_count_share([0, 1])
    first = follower.peer_count_share([0, 1, 2, 3])
    assert follower.peer_count_share([3, 2, 1, 0]) == first  # the same set again: the same bytes
    with pytest.raises(Conflict, match="another user set"):  # the difference would open user 4's share
        follower.peer_count_share([0, 1, 2, 3, 4])


def test_finding3_server0_opens_no_mean_count_below_its_floor():
    servers = _servers(min_users=3)
    leader, follower = servers.nodes
    leader.cfg = leader.cfg.replace(m_prime=None)
    leader.m_prime = None
    leader.count_open(None)
    for u in (0, 1):
        shares = share(np.array([9], np.uint32))
        for p in (1, 0):
            servers.nodes[p].count_submit(u, messages.encode_count(shares[p], 32, p))
    with pytest.raises(Conflict, match="2 user.*fewer than min_users=3"):
        leader.count_close()
    assert leader.m_prime is None and follower.count.status()["state"] == "closed"


def test_finding3_device_refuses_a_round_below_its_floor():
    servers = _servers(min_users=3)
    leader, follower = servers.nodes
    leader.open_round(participants=[1, 2, 3])

    def device(floor: int) -> DeviceClient:
        return DeviceClient.over(1, (LocalServerLink(leader, 1, servers.tp), LocalServerLink(follower, 1, servers.tp)),
                                 min_users=floor)

    assert device(3).round_info().min_users == 3
    with pytest.raises(ProtocolError, match="n_p=3 users with min_users=3; this device's floor is 10"):
        device(DEFAULT_MIN_USERS).round_info()
    with pytest.raises(InvalidParameters, match=">= 2"):
        device(1)


# ---------------------------------------------------------------- finding 1: TLS by default
def test_finding1_no_tls_by_default_a_server_without_tls_files_refuses_to_serve(tmp_path):
    cfg = _cfg(0, tmp_path)
    with pytest.raises(InvalidParameters, match=r"TLS is required: \[tls\] ca, \[tls\] cert, \[tls\] key missing"):
        cfg.check_listener()
    with pytest.raises(InvalidParameters, match="insecure_http binds loopback only"):
        _cfg(0, tmp_path, insecure_http=True, host="0.0.0.0")
    _cfg(0, tmp_path, insecure_http=True).check_listener()  # loopback: allowed, explicitly


def test_finding1_no_tls_by_default_cluster_traffic_is_verified_tls_and_peers_mutual_tls(tmp_path):
    import httpx

    from net_helpers import WAIT_S, cluster_for, setup, small_data
    from secemb.transport.network import ApiClient

    tr, _ = small_data()
    model, proto, config = setup()
    with cluster_for(model, proto, tr, config) as cluster:
        url1 = cluster.url(1)
        assert url1.startswith("https://")
        with pytest.raises(httpx.ConnectError):  # the system's CAs do not know the private CA
            httpx.get(url1 + "/v1/health", trust_env=False)
        with pytest.raises(httpx.HTTPError):  # no plain HTTP on the TLS port
            httpx.get(url1.replace("https://", "http://") + "/v1/health", trust_env=False, timeout=WAIT_S)
        assert httpx.get(url1 + "/v1/health", verify=cluster.tls, trust_env=False).status_code == 200
        # the right HMAC without server 0's certificate is refused; with it, accepted
        no_cert = ApiClient(url1, "server0", cluster.peer_secret, tls=cluster.tls, timeout=WAIT_S)
        with pytest.raises(Exception) as e:
            no_cert.get_json("/v1/peer/status")
        assert getattr(e.value, "status", None) == 401
        mutual = ApiClient(url1, "server0", cluster.peer_secret, tls=cluster.peer_tls(), timeout=WAIT_S)
        assert mutual.get_json("/v1/peer/status")["party"] == 1
        # a configuration file holds secrets: owner-only, in an owner-only directory
        assert (cluster.config_paths[0].stat().st_mode & 0o777) == 0o600
        assert (cluster.workdir.stat().st_mode & 0o777) == 0o700
        assert (cluster.pki.key(0).stat().st_mode & 0o777) == 0o600


# ---------------------------------------------------------------- finding 5: bad input is a 4xx, never a 500
def test_finding5_content_length_isdigit_but_not_int_is_a_400(tmp_path):
    """``Content-Length: ²`` (byte 0xB2, Latin-1) reaches the app only in process: HTTP servers
    drop it first.  It passes ``isdigit()`` and fails ``int()``; strict parsing answers 400."""
    node = make_node(_cfg(0, tmp_path), peer=_servers().nodes[0].peer, store=MemoryStore(0, "f"),
                     start_threads=False)
    client = TestClient(create_app(node), raise_server_exceptions=False)
    before = node.status()
    headers = sign_headers("admin", ADMIN, "POST", "/v1/admin/rounds", "", b"{}")
    for cl in (b"\xb2", "\uff12".encode(), b"1_0", b" 2"):
        resp = client.post("/v1/admin/rounds", content=b"{}", headers={**headers, "Content-Length": cl})
        assert resp.status_code == 400 and "Content-Length" in resp.json()["detail"], (cl, resp.text)
    assert node.status() == before
