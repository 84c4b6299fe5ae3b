"""Issue 33's smaller findings, one regression test each, named after the finding."""

from __future__ import annotations

import secrets

import pytest
from fastapi.testclient import TestClient

from secemb.errors import InvalidParameters

from secemb.server.app import create_app
from secemb.server.config import ServerConfig
from secemb.server.node import make_node
from secemb.server.store import MemoryStore
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
