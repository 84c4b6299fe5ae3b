"""Issue 33's smaller findings, one regression test each, named after the finding."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from secemb.data import synthetic_like
from secemb.sim.local import InProcessServers
from secemb.sim.settings import cluster_settings
from secemb.errors import InvalidParameters
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol

from secemb.server.app import create_app
from secemb.server.auth import MAX_FUTURE_S, AuthError, Verifier
from secemb.server.config import ServerConfig
from secemb.server.node import make_node
from secemb.server.store import MemoryStore
from secemb.training import TrainConfig
from secemb.transport.signing import sign_headers, user_key

PEER, ADMIN, USERS = b"p" * 32, b"a" * 32, b"u" * 32


def _config(tmp_path, party: int = 0, **kw) -> ServerConfig:
    fields = {"peer_url": "https://127.0.0.1:9", "num_users": 30} | kw
    return ServerConfig(party=party, state_dir=tmp_path, peer_secret=PEER, admin_secret=ADMIN, user_secret=USERS,
                        num_items=40, model="mf", model_hparams={"dim": 4}, m_prime=4, **fields)


def _client(tmp_path, num_users: int, party: int = 0) -> TestClient:
    cfg = _config(tmp_path, party, num_users=num_users)
    return TestClient(create_app(make_node(cfg, store=MemoryStore(party, "f"), start_threads=False)))


def _forged(key_id: str, method: str, path: str, body: bytes) -> dict[str, str]:
    """Well-formed headers of a stranger: a fresh timestamp and nonce, a signature under a key it guessed."""
    headers = sign_headers(key_id, secrets.token_bytes(32), method, path, "", body)
    return {**headers, "Content-Type": "application/octet-stream"}


def _answer(client: TestClient, key_id: str, method: str, path: str, size: int) -> tuple[int, str]:
    body = b"\x00" * size
    resp = client.request(method, path, content=body, headers=_forged(key_id, method, path, body))
    return resp.status_code, resp.text


def test_413_before_401_reveals_no_device_id(tmp_path):
    # a stranger probed ids with an oversized body: 413 for a known device id, 401 for an unknown
    # one, and found num_users by binary search; now a known and an unknown id get the same answer
    client = _client(tmp_path, num_users=30)
    known, unknown = ("user:0", "user:29"), ("user:30", "user:31", "user:1000", f"user:{2**63 - 1}")
    for size in (10, 5000):  # under, and over, the body limit of an upload while no round is open
        answers = {key_id: _answer(client, key_id, "POST", "/v1/rounds/1/upload", size) for key_id in known + unknown}
        assert len(set(answers.values())) == 1, answers
        assert next(iter(answers.values()))[0] == (401 if size == 10 else 413)
    # the operator's JSON limit (read before the signature too) no longer tells 20 users from 30
    sizes = (65536 + 24 * 20, 65536 + 24 * 30, 65536 + 24 * 32 + 1)
    small, large = _client(tmp_path / "a", num_users=20), _client(tmp_path / "b", num_users=30)
    for size in sizes:
        assert _answer(small, "admin", "POST", "/v1/admin/rounds", size)[0] == \
            _answer(large, "admin", "POST", "/v1/admin/rounds", size)[0] == (413 if size == sizes[-1] else 401)
    # a known device's properly signed request still gets through the signature
    body = b"\x00" * 10
    headers = sign_headers("user:3", user_key(USERS, 3), "POST", "/v1/rounds/1/upload", "", body)
    assert client.post("/v1/rounds/1/upload", content=body, headers=headers).status_code not in (401, 413)



@pytest.mark.parametrize("peer_url", ["http://10.0.0.2:8001", "http://peer.example:8001", "https://10.0.0.2:8001",
                                      "http://127.0.0.1.example:8001", "http://[2001:db8::1]:8001"])
def test_insecure_http_refuses_a_non_loopback_peer_url(tmp_path, peer_url):
    # plain HTTP to a peer on another host carried server 0's calls (relayed device messages,
    # aggregate shares, the model) in the clear: now a configuration error
    with pytest.raises(InvalidParameters, match="insecure_http calls a loopback peer only"):
        _config(tmp_path, insecure_http=True, peer_url=peer_url)
    for loopback in ("http://127.0.0.1:8001", "http://localhost:8001", "http://[::1]:8001"):
        _config(tmp_path, insecure_http=True, peer_url=loopback).check_listener()
    _config(tmp_path, peer_url=peer_url.replace("http://", "https://"))  # with TLS any host is fine


def test_a_future_timestamp_signed_before_a_restart_is_refused_after_it(tmp_path):
    # the red team signed a request 60 s ahead (inside the 120 s window): accepted before a
    # restart, and accepted again after it (the restarted server refuses only what was signed
    # before it started, and its nonce memory is empty)
    key, now_ms = user_key(USERS, 3), int(time.time() * 1000)
    client = _client(tmp_path, num_users=30)
    far = sign_headers("user:3", key, "GET", "/v1/round", timestamp_ms=now_ms + 60_000)
    assert client.get("/v1/round", headers=far).status_code == 401  # beyond MAX_FUTURE_S: refused outright
    assert client.get("/v1/round", headers=_forged("user:3", "GET", "/v1/round", b"")).status_code == 401
    # within the bound (clock skew) the server acts on the request only once its clock reached it ...
    ts = int(time.time() * 1000) + int(0.75 * MAX_FUTURE_S * 1000)
    near = sign_headers("user:3", key, "GET", "/v1/round", timestamp_ms=ts)
    assert client.get("/v1/round", headers=near).status_code == 404  # authenticated (no round is open)
    assert time.time() * 1000 >= ts
    # ... so a restart after it (a fresh verifier: empty nonce memory) refuses its replay
    restarted = _client(tmp_path / "restarted", num_users=30)
    assert restarted.get("/v1/round", headers=near).status_code == 401
    fresh = sign_headers("user:3", key, "GET", "/v1/round")
    assert restarted.get("/v1/round", headers=fresh).status_code == 404  # a request signed afresh passes


def test_a_verifier_bounds_the_future_skew_to_the_window():
    v = Verifier(0, PEER, ADMIN, USERS, 30, window_s=0.5, not_before_ms=0)
    assert v.future_ms == 500 and Verifier(0, PEER, ADMIN, USERS, 30, not_before_ms=0).future_ms == 1000 * MAX_FUTURE_S
    ahead = sign_headers("user:1", user_key(USERS, 1), "GET", "/v1/round", timestamp_ms=int(time.time() * 1000) + 400)
    assert v.verify(ahead, "GET", "/v1/round", "", b"").user_id == 1 and 0 < v.ahead_s(ahead) <= 0.4
    with pytest.raises(AuthError, match="outside the accepted window"):
        v.verify(sign_headers("user:1", user_key(USERS, 1), "GET", "/v1/round",
                              timestamp_ms=int(time.time() * 1000) + 900), "GET", "/v1/round", "", b"")


def _mean_count(lie: int | None) -> float:
    """The mean count the servers open over 10 devices that rated 16 of 40 items each; one of
    them sends shares of ``lie`` (an element of Z_2^32) instead of its count when given."""
    model, protocol = MatrixFactorization(dim=4, reg=0.01), get_protocol("secemb", layout="cuckoo", relay=True)
    settings = cluster_settings(model, protocol, synthetic_like(10, 40, 160, seed=1),
                                TrainConfig(epochs=1, users_per_round=10), min_users=10)
    servers = InProcessServers(settings, protocol, model)
    try:
        links, users = servers.servers(), list(range(10))
        links.admin[0].count_open(users)
        for u in users:
            links.device(u).send_count(16 if lie is None or u else lie, 32)
        return float(links.admin[0].count_close()["mean_count"])
    finally:
        servers.stop()


def test_a_liar_moves_the_mean_count_anywhere_in_0_m_not_by_m_over_n():
    # docs/security.md said one device moves the mean count by at most m/n: false, since a
    # device's count reaches the servers only as shares and they check only the opened total
    # (the red team moved it from 16.6 to 0.09 with one device, m/n = 5.5)
    m, n, honest = 40, 10, 16.0
    assert _mean_count(None) == honest
    assert _mean_count((1 - 9 * 16) % 2**32) == 1 / n  # a total of 1: the mean moved by 15.9, m/n is 4
    assert _mean_count(m * n - 9 * 16) == m  # a total of n m: the mean is m
    text = " ".join((Path(__file__).parents[2] / "docs" / "security.md").read_text().split())
    assert "by at most `m/n`" not in text and "any value in `[0, m]`" in text


def test_uvicorn_says_https_for_a_tls_server(tmp_path, monkeypatch, caplog):
    # session 39, helper U: `secemb serve` printed "Uvicorn running on http://..." for a server that
    # speaks only TLS (guarded_config hands the TLS context to TlsFirstProtocol, not to uvicorn)
    import logging
    from types import SimpleNamespace

    from secemb.server import listener
    from secemb.server.tls import init_pki

    files = init_pki(tmp_path / "pki", 0, ["127.0.0.1"])
    cfg = SimpleNamespace(insecure_http=False, tls_ca=files.ca, tls_cert=files.cert(0), tls_key=files.key(0),
                          host="127.0.0.1", port=0, read_timeout_s=5.0, max_connections=4)
    monkeypatch.setattr(listener, "guarded_config", lambda *a, **kw: kw["tls"])
    served = []
    monkeypatch.setattr(listener, "serve_until_stopped", served.append)
    logger = logging.getLogger("uvicorn.error")
    try:
        listener.run(None, cfg, log_level="info")
        assert served and served[0]  # TLS files handed on
        with caplog.at_level(logging.INFO, logger="uvicorn.error"):
            # as uvicorn's Server.startup logs it (its scheme from config.ssl, None here)
            logger.info("Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", "http", "127.0.0.1", 8700)
            logger.info("Started server process [%d]", 1)
        assert [r.getMessage() for r in caplog.records] == [
            "Uvicorn running on https://127.0.0.1:8700 (Press CTRL+C to quit)", "Started server process [1]"]
    finally:
        logger.removeFilter(listener._TLS_SCHEME)
