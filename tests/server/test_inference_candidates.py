"""GREC inference with a configured public candidate set (``[inference] candidates``) and the
device leaving out its own ratings (issue 16): the configuration key is validated (bad values
are refused with a clear message; ``secemb serve`` exits 2), the server scores exactly the
configured items whatever the device wants, an item outside the set is refused before any
release is sent, and the items the device rated are dropped on the device -- the server's view
is the same bytes with or without them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from test_inference_endpoint import ADMIN, DIM, ITEMS, MECH, PEER, USERS, _link, _Recorder
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.inference import infer_remote
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference import privatize
from secemb.randomness import CtrDrbg
from secemb.server.app import create_app
from secemb.server.config import ServerConfig, config_document, load_config
from secemb.server.node import make_node
from secemb.server.store import MemoryStore

CANDIDATES = [20, 3, 11, 7]  # as an operator might list them: the reply's order is ascending


def _cfg(tmp_path, **extra) -> ServerConfig:
    return ServerConfig(party=0, peer_url="https://127.0.0.1:9", state_dir=tmp_path, peer_secret=PEER,
                        admin_secret=ADMIN, user_secret=USERS, num_items=ITEMS, num_users=30, model="mf",
                        model_hparams={"dim": DIM}, m_prime=4, **extra)


@pytest.mark.parametrize("value, message", [
    ([], "at least one item id"),
    ([3, 7, 3], "distinct, got [3] more than once"),
    ([0, ITEMS], f"item ids in [0, {ITEMS}), got [{ITEMS}]"),
    ([-1, 2], "got [-1]"),
    ([1.5], "inference_candidates must be None or a non-empty list"),
    (["4"], "inference_candidates must be None or a non-empty list"),
    ([True], "inference_candidates must be None or a non-empty list"),
])
def test_a_bad_candidate_set_is_refused_with_its_reason(tmp_path, value, message) -> None:
    with pytest.raises(InvalidParameters) as err:
        _cfg(tmp_path, inference_candidates=value)
    assert message in str(err.value)


def test_the_candidate_set_is_read_from_the_file_and_shared_by_both_servers(tmp_path) -> None:
    cfg = _cfg(tmp_path, inference_candidates=CANDIDATES)
    doc = config_document(cfg)
    assert doc["inference"] == {"candidates": CANDIDATES}
    path = tmp_path / "server0.json"
    path.write_text(json.dumps(doc))
    loaded = load_config(path)
    assert loaded.candidates().tolist() == [3, 7, 11, 20]
    # both servers must agree on it (the fingerprint), and a deployment without it keeps its fingerprint
    assert loaded.fingerprint() != _cfg(tmp_path).fingerprint()
    assert _cfg(tmp_path, inference_candidates=[7, 3, 20, 11]).fingerprint() == loaded.fingerprint()
    assert "inference_candidates" not in _cfg(tmp_path).shared_doc()

    doc["inference"] = {"candidates": [3, 3]}
    path.write_text(json.dumps(doc))
    out = CliRunner().invoke(app, ["serve", "--config", str(path), "--insecure-http"])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert "[inference] candidates must be distinct" in " ".join(out.output.split())


@pytest.fixture()
def with_candidates(tmp_path):
    node = make_node(_cfg(tmp_path, inference_candidates=CANDIDATES), store=MemoryStore(0, "f"),
                     start_threads=False)
    node.table = node.table + np.random.default_rng(1).normal(0, 0.3, node.table.shape)
    rec = _Recorder(create_app(node))
    return node, rec, TestClient(rec)


def test_the_server_scores_its_configured_candidates_only(with_candidates) -> None:
    node, rec, client = with_candidates
    params = np.array([0.3, -0.2, 0.5, 0.1, 0.07])  # p_u (d = 4) and b_u
    ans = infer_remote(_link(client, 3), params, MECH, None, _rng=CtrDrbg(9))
    assert ans.info["candidates"] == [3, 7, 11, 20] and ans.info["num_candidates"] == 4
    assert ans.info["reply_bytes"] == ans.download_bytes == 8 + 8 * 4
    assert ans.items.tolist() == [3, 7, 11, 20]
    h_tilde = privatize(params[None, None, :DIM], MECH, _rng=CtrDrbg(9))[0][0, 0]
    t = node.table[ans.items]
    np.testing.assert_allclose(ans.scores, node.dense[0] + t[:, DIM] + t[:, :DIM] @ h_tilde + params[DIM],
                               rtol=0, atol=1e-12)
    some = infer_remote(_link(client, 3), params, MECH, np.array([11, 3]), _rng=CtrDrbg(9))
    np.testing.assert_array_equal(some.scores, ans.scores[[2, 0]])

    posts = sum(r[0] == "POST" for r in rec.seen)
    with pytest.raises(InvalidParameters, match=r"items \[5\] are not in the deployment's public candidate set"):
        infer_remote(_link(client, 3), params, MECH, np.array([3, 5]), _rng=CtrDrbg(9))
    assert sum(r[0] == "POST" for r in rec.seen) == posts  # refused before any release left the device


def test_rated_items_are_left_out_on_the_device_and_the_server_sees_the_same(with_candidates) -> None:
    _, rec, client = with_candidates
    params = np.array([0.3, -0.2, 0.5, 0.1, 0.07])
    full = infer_remote(_link(client, 3), params, MECH, None, _rng=CtrDrbg(4))
    mine = infer_remote(_link(client, 3), params, MECH, None, exclude=np.array([7, 20, 33]), _rng=CtrDrbg(4))
    assert mine.items.tolist() == [3, 11]
    np.testing.assert_array_equal(mine.scores, full.scores[[0, 2]])
    posts = [r for r in rec.seen if r[0] == "POST"]
    assert len(posts) == 2 and posts[0][1:] == posts[1][1:]  # path, query and body: byte-identical


class _Described:
    """A link whose description is ``info`` (the device refuses before it sends anything)."""

    def __init__(self, info) -> None:
        self.info = info

    def inference_info(self):
        return self.info

    def inference(self, body):  # pragma: no cover - never reached
        raise AssertionError("the device sent a request on a malformed description")


@pytest.mark.parametrize("candidates", [[], [3, 3], [7, 3], [0, ITEMS], ["1"], [True], "all"])
def test_the_device_refuses_a_malformed_candidate_set(candidates) -> None:
    info = {"model": {"name": "mf", "hparams": {"dim": DIM}}, "rows": 1, "dim": DIM, "num_items": ITEMS,
            "candidates": candidates, "num_candidates": 2}
    with pytest.raises(InvalidMessage, match="malformed inference description"):
        infer_remote(_Described(info), np.zeros(DIM + 1), MECH, None, _rng=CtrDrbg(1))
