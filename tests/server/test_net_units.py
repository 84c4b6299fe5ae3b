"""Unit tests of the server's building blocks: request signing, the atomic checkpoint and the
journal, configuration files."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secemb.errors import InvalidParameters
from secemb.server.auth import AuthError, Verifier
from secemb.server.config import ServerConfig, config_document, load_config
from secemb.server.persist import CorruptState, Journal, atomic_write, load_checkpoint, save_checkpoint
from secemb.transport.signing import canonical_request, sign_headers, user_key

PEER, ADMIN, USERS = b"p" * 32, b"a" * 32, b"u" * 32


def _verifier(party: int = 1, window: float = 60.0) -> Verifier:
    return Verifier(party, PEER, ADMIN, USERS, num_users=100, window_s=window)


def test_signed_request_verifies_as_its_principal():
    v = _verifier()
    h = sign_headers("server0", PEER, "POST", "/v1/peer/rounds/3/share", "", b"{}")
    p = v.verify(h, "POST", "/v1/peer/rounds/3/share", "", b"{}")
    assert (p.kind, p.key_id) == ("peer", "server0")
    h = sign_headers("user:42", user_key(USERS, 42), "GET", "/v1/round")
    p = v.verify(h, "GET", "/v1/round", "", b"")
    assert (p.kind, p.user_id) == ("user", 42)
    p = v.verify(sign_headers("admin", ADMIN, "GET", "/x"), "GET", "/x", "", b"")
    assert p.kind == "admin"


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(["method", "path", "query", "body", "key_id"]), junk=st.text(min_size=1, max_size=5))
def test_any_change_after_signing_is_refused(field, junk):
    v = _verifier()
    req = {"method": "POST", "path": "/v1/rounds/1/upload", "query": "a=1", "body": b"payload"}
    h = sign_headers("user:7", user_key(USERS, 7), req["method"], req["path"], req["query"], req["body"])
    if field == "key_id":
        h["X-Secemb-Key-Id"] = "user:8"
    elif field == "body":
        req["body"] += junk.encode()
    else:
        req[field] = req[field] + junk
    with pytest.raises(AuthError):
        v.verify(h, req["method"], req["path"], req["query"], req["body"])


def test_peer_keys_are_directional_and_users_bounded():
    with pytest.raises(AuthError):  # server 1 never accepts its own id
        _verifier(party=1).verify(sign_headers("server1", PEER, "GET", "/"), "GET", "/", "", b"")
    with pytest.raises(AuthError):  # user id outside [0, num_users)
        _verifier().verify(sign_headers("user:100", user_key(USERS, 100), "GET", "/"), "GET", "/", "", b"")
    assert user_key(USERS, 1) != user_key(USERS, 2) != user_key(b"v" * 32, 2)


def test_stale_future_and_replayed_requests_are_refused():
    v = _verifier(window=5)
    now = int(time.time() * 1000)
    for ts in (now - 60_000, now + 60_000):
        with pytest.raises(AuthError, match="window"):
            v.verify(sign_headers("admin", ADMIN, "GET", "/", timestamp_ms=ts), "GET", "/", "", b"")
    h = sign_headers("admin", ADMIN, "GET", "/")
    v.verify(h, "GET", "/", "", b"")
    with pytest.raises(AuthError, match="replay"):
        v.verify(h, "GET", "/", "", b"")


@pytest.mark.parametrize("headers", [{}, {"X-Secemb-Key-Id": "admin"},
                                     {"X-Secemb-Key-Id": "admin", "X-Secemb-Timestamp": "x", "X-Secemb-Nonce": "ab" * 8,
                                      "X-Secemb-Signature": "0" * 64}])
def test_missing_or_malformed_headers_are_refused(headers):
    with pytest.raises(AuthError):
        _verifier().verify(headers, "GET", "/", "", b"")


def test_canonical_request_separates_fields():
    a = canonical_request("admin", "GET", "/a", "b=1", 1, "n", b"")
    b = canonical_request("admin", "GET", "/a\nb=1", "", 1, "n", b"")
    assert a != b


def test_checkpoint_round_trip_and_atomic_replace(tmp_path):
    path = tmp_path / "ck.npz"
    assert load_checkpoint(path) is None
    arrays = {"table": np.arange(12.0).reshape(3, 4), "t": np.arange(3, dtype=np.int64)}
    save_checkpoint(path, {"version": 1}, arrays)
    meta, got = load_checkpoint(path)
    assert meta == {"version": 1} and all(np.array_equal(got[k], arrays[k]) for k in arrays)
    save_checkpoint(path, {"version": 2}, arrays)
    assert load_checkpoint(path)[0]["version"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["ck.npz"]  # no temporary left behind


def test_corrupt_checkpoint_is_reported(tmp_path):
    path = tmp_path / "ck.npz"
    atomic_write(path, b"not a zip")
    with pytest.raises(CorruptState):
        load_checkpoint(path)


def test_journal_drops_a_torn_last_line_and_rejects_corruption(tmp_path):
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    j.append({"ev": "open", "round": 0})
    j.append({"ev": "committed", "round": 0})
    with open(path, "ab") as f:
        f.write(b'{"ev": "open", "rou')  # crash while appending
    j2 = Journal(path)
    assert j2.records() == [{"ev": "open", "round": 0}, {"ev": "committed", "round": 0}]
    j2.append({"ev": "open", "round": 1})
    assert [r["round"] for r in Journal(path).records()] == [0, 0, 1]
    path.write_bytes(b'{"a": 1}\nnot json\n{"b": 2}\n')
    with pytest.raises(CorruptState):
        Journal(path)


def _cfg(tmp_path, **kw):
    base = dict(party=0, peer_url="http://127.0.0.1:1", state_dir=tmp_path, peer_secret=PEER.hex(),
                admin_secret=ADMIN.hex(), user_secret=USERS.hex(), num_items=50, num_users=20)
    return ServerConfig(**(base | kw))


def test_config_file_round_trip_toml_json_and_overrides(tmp_path):
    cfg = _cfg(tmp_path, model_hparams={"dim": 4, "reg": 0.01}, m_prime=5)
    doc = config_document(cfg)
    (tmp_path / "c.json").write_text(json.dumps(doc))
    assert load_config(tmp_path / "c.json") == cfg
    toml = "\n".join(
        f"[{sec}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in vals.items() if not isinstance(v, dict))
        + ("\n[model.hparams]\ndim = 4\nreg = 0.01" if sec == "model" else "")
        for sec, vals in doc.items()
    )
    (tmp_path / "c.toml").write_text(toml)
    assert load_config(tmp_path / "c.toml") == cfg
    assert load_config(tmp_path / "c.toml", port=9999).port == 9999
    assert cfg.fingerprint() == cfg.replace(port=1234, party=1).fingerprint()
    assert cfg.fingerprint() != cfg.replace(lr=0.5).fingerprint()


def test_config_errors_name_the_problem(tmp_path, monkeypatch):
    (tmp_path / "bad.json").write_text(json.dumps({"server": {"party": 0, "prot": 1}}))
    with pytest.raises(InvalidParameters, match="unknown key 'prot'"):
        load_config(tmp_path / "bad.json")
    (tmp_path / "p.json").write_text(json.dumps({"server": {"party": 1}}))
    with pytest.raises(InvalidParameters, match="party"):
        load_config(tmp_path / "p.json", party=0)
    with pytest.raises(InvalidParameters, match="missing"):
        load_config(tmp_path / "p.json")
    with pytest.raises(InvalidParameters, match=">= 32 bytes"):
        _cfg(tmp_path, peer_secret="abcd")
    with pytest.raises(InvalidParameters):
        _cfg(tmp_path, layout="diagonal")
    doc = config_document(_cfg(tmp_path))
    secrets = doc.pop("secrets")
    (tmp_path / "nosecrets.json").write_text(json.dumps(doc))
    for name, env in (("peer", "SECEMB_PEER_SECRET"), ("admin", "SECEMB_ADMIN_SECRET"), ("users", "SECEMB_USER_SECRET")):
        monkeypatch.setenv(env, secrets[name])
    assert load_config(tmp_path / "nosecrets.json").peer_secret == PEER
    assert os.environ["SECEMB_PEER_SECRET"] == PEER.hex()
