"""GREC inference over HTTP (``/v1/inference``), in process through Starlette's test client:
the server's whole view of a device's inference is its noisy representation (an HTTP-level
transcript test), the scores are the model's on that representation, bad bodies are 4xx and
change nothing, and only devices may ask."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from secemb.client.inference import infer_remote
from secemb.errors import InvalidParameters
from secemb.inference import GaussianLDP, privatize
from secemb.inference.releases import ReleaseLedger
from secemb.inference.service import decode_reply, encode_request
from secemb.randomness import CtrDrbg
from secemb.server.app import create_app
from secemb.server.config import ServerConfig
from secemb.server.node import make_node
from secemb.server.store import MemoryStore
from secemb.transport.http import HttpServerLink
from secemb.transport.signing import sign_headers, user_key

PEER, ADMIN, USERS = b"p" * 32, b"a" * 32, b"u" * 32
ITEMS, DIM = 40, 4
MECH = GaussianLDP(1.0, 1e-4, 1.0)


class _Recorder:
    """ASGI wrapper keeping ``[method, path, query, body]`` of every HTTP request the app receives."""

    def __init__(self, app) -> None:
        self.app, self.seen = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rec = [scope["method"], scope["path"], scope["query_string"], b""]
        self.seen.append(rec)

        async def rx():
            msg = await receive()
            if msg["type"] == "http.request":
                rec[3] += msg.get("body", b"")
            return msg

        return await self.app(scope, rx, send)


def _node(tmp_path, model: str = "mf", hparams: dict | None = None, party: int = 0):
    cfg = ServerConfig(party=party, peer_url="https://127.0.0.1:9", state_dir=tmp_path, peer_secret=PEER,
                       admin_secret=ADMIN, user_secret=USERS, num_items=ITEMS, num_users=30, model=model,
                       model_hparams=hparams or {"dim": DIM}, m_prime=4)
    return make_node(cfg, store=MemoryStore(party, "f"), start_threads=False)


@pytest.fixture()
def served(tmp_path):
    node = _node(tmp_path)
    rng = np.random.default_rng(1)
    node.table = node.table + rng.normal(0, 0.3, node.table.shape)  # item biases and vectors not all alike
    rec = _Recorder(create_app(node))
    return node, rec, TestClient(rec)


def _link(client: TestClient, user: int) -> HttpServerLink:
    return HttpServerLink(0, user, "http://testserver", user_key(USERS, user), http=client)


def _post(client, body: bytes, key_id: str = "user:3", key: bytes | None = None):
    key = user_key(USERS, 3) if key is None else key
    headers = sign_headers(key_id, key, "POST", "/v1/inference", "", body)
    headers["Content-Type"] = "application/octet-stream"
    return client.post("/v1/inference", content=body, headers=headers)


def test_http_transcript_is_the_noisy_representation_whatever_the_items(served) -> None:
    node, rec, client = served
    params = np.array([0.3, -0.2, 0.5, 0.1, 0.07])  # p_u (d = 4) and b_u
    views, answers = [], []
    for wanted in ([1, 2], [30, 31, 39]):  # two queries of the same device, the same noise stream
        rec.seen.clear()
        answers.append(infer_remote(_link(client, 3), params, MECH, np.array(wanted), _rng=CtrDrbg(7)))
        views.append([tuple(r) for r in rec.seen])
    assert views[0] == views[1]  # byte for byte: what the device asked about never reaches the server
    assert [(m, p, q) for m, p, q, _ in views[0]] == [("GET", "/v1/inference", b"", ), ("POST", "/v1/inference", b"")]
    assert views[0][0][3] == b""
    h_tilde = privatize(params[None, None, :DIM], MECH, _rng=CtrDrbg(7))[0][0]
    assert views[0][1][3] == encode_request(h_tilde)  # exactly clip(clip(H) + N(0, sigma^2)), nothing else
    assert np.linalg.norm(h_tilde) <= MECH.bound + 1e-12
    # the reply is every item's score on H~ (MF: mu + b_i + q_i . p~), the device adds b_u itself
    t, mu = node.table, node.dense[0]
    for ans, wanted in zip(answers, ([1, 2], [30, 31, 39]), strict=True):
        assert ans.download_bytes == 8 + 8 * ITEMS and ans.upload_bytes == 12 + 8 * DIM
        expect = mu + t[wanted, DIM] + t[wanted, :DIM] @ h_tilde[0] + params[DIM]
        np.testing.assert_allclose(ans.scores, expect, rtol=0, atol=1e-12)
        assert ans.model_version == 0 and not ans.reused


def test_a_ledger_sends_the_same_release_again_until_the_representation_changes(served, tmp_path) -> None:
    _, rec, client = served
    ledger = ReleaseLedger.load(tmp_path / "rel.npz")
    params = np.array([0.3, -0.2, 0.5, 0.1, 0.07])
    rec.seen.clear()
    first = infer_remote(_link(client, 3), params, MECH, None, ledger=ledger)
    again = infer_remote(_link(client, 3), params, MECH, None, ledger=ReleaseLedger.load(tmp_path / "rel.npz"))
    posts = [body for m, _, _, body in rec.seen if m == "POST"]
    assert posts[0] == posts[1] and again.reused and not first.reused  # OS noise: equal only if reused
    np.testing.assert_array_equal(first.scores, again.scores)
    moved = params + np.array([0.01, 0, 0, 0, 0])  # the device trained: a new representation version
    third = infer_remote(_link(client, 3), moved, MECH, None, ledger=ledger)
    assert not third.reused and ReleaseLedger.load(tmp_path / "rel.npz").releases == 2
    assert [body for m, _, _, body in rec.seen if m == "POST"][2] != posts[0]


@pytest.mark.parametrize("body, status", [
    (b"", 400),                                                       # empty
    (b"GRQ1" + b"\0" * (8 + 8 * DIM), 400),                           # R = d = 0 announced, right length
    (b"XXXX" + encode_request(np.zeros((1, DIM)))[4:], 400),           # wrong magic
    (encode_request(np.zeros((2, DIM // 2))), 400),                    # wrong shape, same length
    (encode_request(np.full((1, DIM), np.nan)), 400),                  # non-finite
    (encode_request(np.zeros((1, DIM)))[:-1], 400),                    # short
    (encode_request(np.zeros((1, DIM))) + b"\0", 413),                 # one byte over the exact size
    (encode_request(np.zeros((50, DIM))), 413),                        # a large body
])
def test_bad_bodies_are_4xx_and_change_nothing(served, body, status) -> None:
    node, _, client = served
    before = (node.status(), node.table.copy(), node.dense.copy())
    resp = _post(client, body)
    assert resp.status_code == status, resp.text
    assert "Traceback" not in resp.text and resp.json()["error"] in ("invalid_message", "payload_too_large")
    after = node.status()
    assert after == before[0]
    np.testing.assert_array_equal(node.table, before[1])
    np.testing.assert_array_equal(node.dense, before[2])


def test_only_signed_devices_may_ask(served) -> None:
    node, _, client = served
    body = encode_request(np.zeros((1, DIM)))
    assert client.post("/v1/inference", content=body).status_code == 401  # unsigned
    assert _post(client, body, key=b"x" * 32).status_code == 401  # forged device key
    assert _post(client, body, key_id="admin", key=ADMIN).status_code == 403  # the operator sends no release
    ok = _post(client, body)
    assert ok.status_code == 200 and ok.headers["x-secemb-model-version"] == "0"
    assert decode_reply(ok.content, ITEMS).shape == (ITEMS,)
    path = "/v1/inference"
    assert client.get(path).status_code == 401
    info = client.get(path, headers=sign_headers("user:5", user_key(USERS, 5), "GET", path)).json()
    assert info == {"stage": "inference", "model": {"name": "mf", "hparams": {"dim": DIM}}, "model_version": 0,
                    "model_sha256": node.model_sha(), "rows": 1, "dim": DIM, "num_items": ITEMS, "candidates": None,
                    "num_candidates": ITEMS, "request_bytes": 12 + 8 * DIM, "reply_bytes": 8 + 8 * ITEMS}


def test_a_model_without_grec_inference_is_404_and_server1_serves_its_own_model(tmp_path) -> None:
    seq = _node(tmp_path / "seq", model="sasrec", hparams={"dim": 4})
    client = TestClient(create_app(seq))
    path = "/v1/inference"
    resp = client.get(path, headers=sign_headers("user:3", user_key(USERS, 3), "GET", path))
    assert resp.status_code == 404 and "no GREC inference" in resp.json()["detail"]
    assert _post(client, encode_request(np.zeros((1, 4)))).status_code == 404
    assert _post(client, encode_request(np.zeros((8, 4)))).status_code == 413  # a small body limit all the same
    follower = _node(tmp_path / "s1", party=1)
    client = TestClient(create_app(follower))
    resp = _post(client, encode_request(np.zeros((1, DIM))))  # server 1 builds model version 0 itself (issue 33)
    assert resp.status_code == 200 and resp.headers["x-secemb-model-version"] == "0"


def test_the_device_refuses_parameters_of_another_model(served) -> None:
    _, _, client = served
    with pytest.raises(InvalidParameters, match="private parameters"):
        infer_remote(_link(client, 3), np.zeros(9), MECH, None)
    with pytest.raises(InvalidParameters, match="item ids"):
        infer_remote(_link(client, 3), np.zeros(DIM + 1), MECH, np.array([ITEMS]))


def test_a_committed_model_version_is_served_from_then_on(served) -> None:
    node, _, client = served
    body = encode_request(np.full((1, DIM), 0.25))
    old = decode_reply(_post(client, body).content, ITEMS)
    with node.lock:  # what a commit does: new arrays, the next version
        node.table, node.version = node.table * 2.0, 1
    resp = _post(client, body)
    assert resp.headers["x-secemb-model-version"] == "1"
    t = node.table
    expect = node.dense[0] + t[:, DIM] + t[:, :DIM] @ np.full(DIM, 0.25)
    np.testing.assert_allclose(decode_reply(resp.content, ITEMS), expect, rtol=0, atol=1e-12)
    assert not np.allclose(decode_reply(resp.content, ITEMS), old)


@pytest.mark.parametrize("model, hparams", [("mf", {"dim": 4}), ("ncf", {"dim": 4}), ("fm", {"dim": 4}),
                                            ("deepfm", {"dim": 4})])
def test_every_rating_model_is_served_as_in_process(tmp_path, model, hparams) -> None:
    from secemb.inference.representation import representation_for
    from secemb.inference.service import InferenceServer

    node = _node(tmp_path, model=model, hparams=hparams)
    client = TestClient(create_app(node))
    rep = representation_for(node.model, node.dense)
    params = np.random.default_rng(2).normal(0, 0.3, node.model.private_size)
    ans = infer_remote(_link(client, 3), params, MECH, None, _rng=CtrDrbg(9))
    h, offset = rep.clean(params[None], np.zeros((1, 0)))
    request = encode_request(privatize(h, MECH, _rng=CtrDrbg(9))[0][0])
    expect = decode_reply(InferenceServer(rep, node.table).answer(request), ITEMS) + offset[0]
    np.testing.assert_array_equal(ans.scores, expect)
    assert ans.upload_bytes == len(request) == 12 + 8 * rep.rows * rep.dim
