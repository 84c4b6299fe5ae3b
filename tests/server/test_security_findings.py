"""Regression tests of issue 12's security findings, one (or a few) per finding, named after it.
The node-level tests run the server nodes in process (no sockets); the app-level ones drive
the FastAPI app through Starlette's test client."""

from __future__ import annotations

import errno
import math
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from secemb.client.device import DeviceClient
from secemb.data import synthetic_like, train_test_split
from secemb.sim.driver import run
from secemb.sim.local import InProcessServers, LocalServerLink
from secemb.sim.settings import cluster_settings
from secemb.errors import InvalidParameters, ProtocolError
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.round import messages
from secemb.round.policy import DEFAULT_MIN_USERS
from secemb.server import persist
from secemb.server.app import create_app
from secemb.server.auth import AuthError, Busy, RateLimited, Verifier
from secemb.server.config import ServerConfig
from secemb.server.errors import Conflict
from secemb.server.node import make_node
from secemb.server.persist import CorruptState, Journal, StorageError, load_checkpoint, save_checkpoint
from secemb.server.store import DiskStore, MemoryStore
from secemb.sharing import share
from secemb.training import TrainConfig
from secemb.transport.signing import sign_headers, user_key

PEER, ADMIN, USERS = b"p" * 32, b"a" * 32, b"u" * 32
_SETTINGS = {"num_items": 40, "num_users": 30, "model": "mf", "model_hparams": {"dim": 4, "reg": 0.01},
             "m_prime": 4, "protocol": "secemb", "layout": "cuckoo", "relay": True,
             "protocol_options": {"bound": False}}  # the unbounded protocol these nodes run (a configuration's default is on)


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
    floor = r"^min_users \(this server's floor: 3; n_p=4\) must be an int in \[3, 4\], got 2$"
    with pytest.raises(InvalidParameters, match=floor):
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
        assert (cluster.pki[0].key(0).stat().st_mode & 0o777) == 0o600


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


# ---------------------------------------------------------------- finding 6: a full disk
def _enospc_after(monkeypatch, module, budget: list[int]):
    """Make ``module.os.write`` write at most ``budget[0]`` more bytes, then fail with ENOSPC
    (a short write first, as a filling disk does)."""
    real = module.os.write

    def write(fd, data):
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data)[: budget[0]])
        budget[0] -= n
        return n

    monkeypatch.setattr(module.os, "write", write)


def test_finding6_a_full_disk_never_tears_or_joins_journal_records(tmp_path, monkeypatch):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    j.append({"ev": "open", "round": 0})
    intact = path.read_bytes()
    budget = [10]  # the disk fills 10 bytes into the next record
    _enospc_after(monkeypatch, persist, budget)
    with pytest.raises(StorageError, match="ENOSPC"):
        j.append({"ev": "committed", "round": 0, "version": 1})
    assert path.read_bytes() == intact and j.records() == [{"ev": "open", "round": 0}]
    budget[0] = 10 ** 6  # space is back: the next record starts on its own line
    j.append({"ev": "aborted", "round": 1})
    j.append({"ev": "open", "round": 2})
    assert Journal(path).records() == [{"ev": "open", "round": 0}, {"ev": "aborted", "round": 1},
                                       {"ev": "open", "round": 2}]


def test_finding6_a_torn_tail_is_cut_at_recovery_and_damage_before_it_is_corruption(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    for r in range(3):
        j.append({"ev": "open", "round": r})
    intact = path.read_bytes()
    lines = intact.split(b"\n")
    path.write_bytes(intact + lines[0][:17])  # a record torn mid-write (no newline)
    assert [r["round"] for r in Journal(path).records()] == [0, 1, 2]
    assert path.read_bytes() == intact  # the tail was cut off on disk, not just skipped
    flipped = lines[2].replace(b'"round": 2', b'"round": 7')  # bad checksum, complete line, last
    path.write_bytes(b"\n".join(lines[:2] + [flipped]) + b"\n")
    assert [r["round"] for r in Journal(path).records()] == [0, 1]
    path.write_bytes(b"\n".join([lines[0], flipped, lines[1]]) + b"\n")  # damage before the last record
    with pytest.raises(CorruptState, match="record 2"):
        Journal(path)
    path.write_bytes(b'{"ev": "open", "round": 0}\n{"ev": "open", "round": 1}\n')  # unframed lines
    with pytest.raises(CorruptState):
        Journal(path)


def test_finding6_a_failed_checkpoint_write_keeps_the_old_one_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.npz"
    arrays = {"table": np.arange(6.0).reshape(3, 2)}
    save_checkpoint(path, {"version": 1}, arrays)
    _enospc_after(monkeypatch, persist, [100])
    with pytest.raises(StorageError, match="ENOSPC"):
        save_checkpoint(path, {"version": 2}, {"table": np.ones((300, 2))})
    assert load_checkpoint(path)[0] == {"version": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]


def test_finding6_temporaries_of_a_killed_writer_are_removed_when_the_store_opens(tmp_path):
    for name in (".checkpoint.npz.tmp.4242.1", ".journal.jsonl.tmp.17.3"):
        (tmp_path / name).write_bytes(b"half a file")
    (tmp_path / "notes.txt").write_text("the operator's")
    DiskStore(tmp_path, 0, "f")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.jsonl", "notes.txt"]


def test_finding6_disk_full_at_the_commit_point_aborts_the_round_and_changes_no_model(monkeypatch):
    data = train_test_split(synthetic_like(40, 30, 500, seed=5), 0.2, seed=0)
    model, cfg = MatrixFactorization(dim=4, reg=0.01), TrainConfig(epochs=1, users_per_round=20, seed=1)

    def trained(fail_writes: int):
        protocol = get_protocol("secemb", layout="cuckoo", relay=True)
        servers = InProcessServers(cluster_settings(model, protocol, data[0], cfg), protocol, model)
        leader = servers.nodes[0]
        real, left = leader.store._write, [fail_writes]

        def write(meta, arrays):  # the disk is full for the first `fail_writes` commits of a round
            if meta["version"] >= 1 and left[0] > 0:
                left[0] -= 1
                raise StorageError("could not write file checkpoint.npz: ENOSPC (No space left on device)")
            real(meta, arrays)

        monkeypatch.setattr(leader.store, "_write", write)
        try:
            result = run(servers.servers(), model, protocol, *data, cfg, device_randomness="reproducible")
        finally:
            servers.stop()
        aborted = [r for r in leader.store.records() if r["ev"] == "aborted"]
        return result, aborted

    clean, none = trained(0)
    full, aborted = trained(1)
    assert none == [] and len(aborted) == 1 and "checkpoint could not be written" in aborted[0]["reason"]
    assert full.aborted_rounds == 1
    assert full.model_sha256 == clean.model_sha256  # the retried round gives the uninterrupted model


def test_finding6_storage_failure_is_a_503_with_no_state_change(tmp_path):
    servers = _servers(min_users=3)
    leader = make_node(_cfg(0, tmp_path), peer=servers.nodes[0].peer, store=MemoryStore(0, "f"), start_threads=False)
    client = TestClient(create_app(leader))

    def refuse(record):
        raise StorageError("could not write journal journal.jsonl: ENOSPC (No space left on device)")

    leader.store.append = refuse  # type: ignore[method-assign]
    body = b'{"participants": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}'
    headers = sign_headers("admin", ADMIN, "POST", "/v1/admin/rounds", "", body) | {"Content-Type": "application/json"}
    resp = client.post("/v1/admin/rounds", content=body, headers=headers)
    assert resp.status_code == 503 and resp.json()["error"] == "storage_unavailable", resp.text
    assert leader.round is None and servers.nodes[1].round is None and leader.max_round == -1


# ---------------------------------------------------------------- finding 11: a lost checkpoint
def test_finding11_a_deleted_checkpoint_with_committed_rounds_is_refused_with_the_recovery(tmp_path):
    node = make_node(_cfg(0, tmp_path), start_threads=False)
    store = node.store
    store.append({"ev": "open", "round": 0, "version": 0, "n_p": 10})
    store.append({"ev": "committed", "round": 0, "version": 1, "included": list(range(10)), "reason": ""})
    backup = (tmp_path / "checkpoint.npz").read_bytes()
    sha = node.model_sha()
    (tmp_path / "checkpoint.npz").unlink()
    with pytest.raises(CorruptState, match=r"no checkpoint.*1 committed.*round 0.*backup.*BOTH"):
        make_node(_cfg(0, tmp_path), start_threads=False)
    assert not (tmp_path / "checkpoint.npz").exists()  # refused before writing a fresh model
    (tmp_path / "checkpoint.npz").write_bytes(backup)  # the documented recovery: restore the backup
    assert make_node(_cfg(0, tmp_path), start_threads=False).model_sha() == sha


def test_finding11_a_journal_of_aborted_rounds_only_is_a_fresh_start(tmp_path):
    store = DiskStore(tmp_path, 1, _cfg(1, tmp_path).fingerprint())
    store.append({"ev": "open", "round": 0, "version": 0, "n_p": 10})
    store.append({"ev": "aborted", "round": 0, "reason": "deadline"})
    node = make_node(_cfg(1, tmp_path), start_threads=False)
    # a fresh start: server 1 initializes model version 0 itself (issue 33: both hold the model)
    assert node.version == 0 and node.max_round == 0


# ---------------------------------------------------------------- finding 4: resources before authentication
def _signed(key_id: str = "admin", secret: bytes = ADMIN, path: str = "/v1/admin/status") -> dict[str, str]:
    return sign_headers(key_id, secret, "GET", path)


def test_finding4_a_used_nonce_is_refused_before_any_body_is_read():
    v = Verifier(0, PEER, ADMIN, USERS, num_users=30)
    h = _signed()
    v.verify(h, "GET", "/v1/admin/status", "", b"")
    with pytest.raises(AuthError, match="replay"):
        v.principal_of(h)  # the header check alone: the app has not read the body yet


def test_finding4_nonce_memory_is_bounded_and_never_forgets_an_unexpired_nonce():
    v = Verifier(0, PEER, ADMIN, USERS, num_users=30, rate_per_s=1000.0, max_nonces=3)
    kept = [_signed() for _ in range(3)]
    for h in kept:
        v.verify(h, "GET", "/v1/admin/status", "", b"")
    with pytest.raises(Busy, match="3 admin requests are within the replay window"):
        v.verify(_signed(), "GET", "/v1/admin/status", "", b"")
    assert v.nonces_held() == 3
    for h in kept:  # all three still refused as replays: none was evicted to make room
        with pytest.raises(AuthError, match="replay"):
            v.verify(h, "GET", "/v1/admin/status", "", b"")


def test_finding4_each_key_is_rate_limited_after_its_signature_and_junk_does_not_drain_it():
    v = Verifier(0, PEER, ADMIN, USERS, num_users=30, rate_per_s=5.0)
    for _ in range(50):  # junk signatures in the user's name: refused, charge nothing
        h = sign_headers("user:3", b"x" * 32, "GET", "/v1/round")
        with pytest.raises(AuthError, match="bad signature"):
            v.verify(h, "GET", "/v1/round", "", b"")
    ok = 0
    with pytest.raises(RateLimited, match="user:3 exceeds 5 requests/s"):
        for _ in range(100):
            v.verify(sign_headers("user:3", user_key(USERS, 3), "GET", "/v1/round"), "GET", "/v1/round", "", b"")
            ok += 1
    assert 20 <= ok <= 22  # the burst (4 x rate), plus what refilled meanwhile
    v.verify(sign_headers("user:4", user_key(USERS, 4), "GET", "/v1/round"), "GET", "/v1/round", "", b"")
    peer = Verifier(1, PEER, ADMIN, USERS, num_users=30, rate_per_s=5.0)  # server 1: server 0's calls are not limited
    for _ in range(100):
        peer.verify(sign_headers("server0", PEER, "GET", "/v1/peer/status"), "GET", "/v1/peer/status", "", b"")


def test_finding_nonce_memory_is_per_credential_class_devices_never_make_the_operator_or_peer_busy():
    """Issue 33: 8 device keys within their rate limits filled a global 1,024-entry nonce memory in
    3.2 s and the operator's and the peer's calls got 503 busy."""
    v = Verifier(1, PEER, ADMIN, USERS, num_users=30, rate_per_s=1000.0, max_nonces=8)
    for u in range(8):
        v.verify(sign_headers(f"user:{u}", user_key(USERS, u), "GET", "/v1/round"), "GET", "/v1/round", "", b"")
    with pytest.raises(Busy, match="8 user requests"):
        v.verify(sign_headers("user:9", user_key(USERS, 9), "GET", "/v1/round"), "GET", "/v1/round", "", b"")
    for _ in range(8):  # the operator and the peer each keep a memory of their own
        v.verify(_signed(), "GET", "/v1/admin/status", "", b"")
        v.verify(sign_headers("server0", PEER, "GET", "/v1/peer/status"), "GET", "/v1/peer/status", "", b"")
    assert (v.nonces_held("user"), v.nonces_held("admin"), v.nonces_held("peer"), v.nonces_held()) == (8, 8, 8, 24)
    with pytest.raises(Busy, match="8 admin requests"):
        v.verify(_signed(), "GET", "/v1/admin/status", "", b"")


# ---------------------------------------------------------------- finding 10: small leaks
def _app_client(tmp_path, **kw) -> tuple[TestClient, object]:
    node = make_node(_cfg(0, tmp_path, **kw), peer=_servers().nodes[0].peer, store=MemoryStore(0, "f"),
                     start_threads=False)
    return TestClient(create_app(node)), node


def test_finding10_every_401_has_the_same_body_whatever_the_reason(tmp_path):
    client, _ = _app_client(tmp_path)
    path = "/v1/admin/status"
    good = sign_headers("admin", ADMIN, "GET", path)
    client.get(path, headers=good)
    cases = {
        "no credentials": {},
        "unknown key id": sign_headers("server7", ADMIN, "GET", path),
        "user id out of range": sign_headers("user:30", user_key(USERS, 30), "GET", path),
        "bad signature": sign_headers("admin", b"b" * 32, "GET", path),
        "stale": sign_headers("admin", ADMIN, "GET", path, timestamp_ms=1),
        "replay": good,
        "signed by server 1": sign_headers("server1", PEER, "GET", path),
    }
    bodies = {}
    for why, headers in cases.items():
        resp = client.get(path, headers=headers)
        assert resp.status_code == 401, (why, resp.status_code)
        bodies[why] = resp.content
    assert set(bodies.values()) == {b'{"error":"unauthorized","detail":"authentication failed"}'}, bodies


def test_finding10_no_403_without_a_valid_signature(tmp_path):
    client, _ = _app_client(tmp_path)
    path = "/v1/admin/status"
    forged = sign_headers("user:3", b"x" * 32, "GET", path)  # a device's id, no device key
    assert client.get(path, headers=forged).status_code == 401
    device = sign_headers("user:3", user_key(USERS, 3), "GET", path)  # a real device, wrong endpoint
    assert client.get(path, headers=device).status_code == 403


def test_finding10_api_docs_and_schema_are_off_unless_enabled(tmp_path):
    client, _ = _app_client(tmp_path)
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert client.get(path).status_code == 404, path
    client, _ = _app_client(tmp_path / "on", docs=True)
    assert client.get("/openapi.json").status_code == 200 and client.get("/docs").status_code == 200


def test_finding10_a_503_does_not_carry_the_peer_address(tmp_path):
    port = 9  # the discard port: nothing listens on loopback, the connection is refused
    cfg = _cfg(0, tmp_path).replace(peer_url=f"https://127.0.0.1:{port}", peer_timeout_s=2.0)
    node = make_node(cfg, store=MemoryStore(0, "f"), start_threads=False)
    client = TestClient(create_app(node))
    body = b'{"participants": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}'
    headers = sign_headers("admin", ADMIN, "POST", "/v1/admin/rounds", "", body) | {"Content-Type": "application/json"}
    resp = client.post("/v1/admin/rounds", content=body, headers=headers)
    assert resp.status_code == 503 and resp.json()["error"] == "peer_unavailable", resp.text
    assert "127.0.0.1" not in resp.text and f":{port}" not in resp.text, resp.text


# ---------------------------------------------------------------- finding 7: replays across a restart
def test_finding7_a_request_captured_before_a_restart_is_refused_after_it(tmp_path):
    servers = _servers(min_users=3)
    body = b'{"participants": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}'
    path = "/v1/admin/rounds"
    open_round = sign_headers("admin", ADMIN, "POST", path, "", body) | {"Content-Type": "application/json"}
    count = sign_headers("user:4", user_key(USERS, 4), "POST", "/v1/count", "", b"\0" * 28)
    time.sleep(0.01)  # the restart comes after the capture

    def boot(state):  # a server process starting on its state directory
        node = make_node(_cfg(0, state), peer=servers.nodes[0].peer, start_threads=False)
        return TestClient(create_app(node)), node

    client, node = boot(tmp_path)
    for headers, url, content in ((open_round, path, body), (count, "/v1/count", b"\0" * 28)):
        resp = client.post(url, content=content, headers=headers)
        assert resp.status_code == 401, (url, resp.text)  # signed before this server started
    assert node.round is None and node.max_round == -1
    fresh = sign_headers("admin", ADMIN, "POST", path, "", body) | {"Content-Type": "application/json"}
    assert client.post(path, content=body, headers=fresh).status_code == 200  # a client re-signs and passes


# ---------------------------------------------------------------- finding 12: malicious count shares
def _count_phase(counts: dict[int, int], **cfg) -> tuple[object, object]:
    servers = _servers(min_users=3)
    leader = servers.nodes[0]
    leader.cfg = leader.cfg.replace(m_prime=None, **cfg)
    leader.m_prime = None
    leader.count_open(None)
    for u, c in counts.items():
        shares = share(np.array([c % 2**32], np.uint32))
        for p in (1, 0):
            servers.nodes[p].count_submit(u, messages.encode_count(shares[p], 32, p))
    return servers, leader


def test_finding12_a_count_share_outside_0_m_fails_the_phase_and_sets_nothing():
    m = _SETTINGS["num_items"]
    for bad in (m * 6 + 1, 2**31 - 1, 2**32 - 100):  # above n*m in total; near the wrap; "-100"
        servers, leader = _count_phase({u: 3 for u in range(5)} | {5: bad})
        with pytest.raises(Conflict, match=r"outside \[0, n\*m\].*outside \[0, m\]"):
            leader.count_close()
        assert leader.m_prime is None and leader.count.status()["state"] == "open"  # reopened: can run again


def test_finding12_an_in_range_liar_moves_m_prime_at_most_to_the_operators_cap():
    m = _SETTINGS["num_items"]
    honest = {u: 2 for u in range(9)}
    _, leader = _count_phase(honest | {9: m}, m_prime_max=6)  # one device claims every item
    doc = leader.count_close()
    assert doc["mean_count"] == (9 * 2 + m) / 10 and leader.m_prime == 6
    _, leader = _count_phase(honest | {9: 2})
    assert leader.count_close()["m_prime"] == math.ceil(leader.cfg.alpha * 2)  # Eq. 11 on the honest mean
