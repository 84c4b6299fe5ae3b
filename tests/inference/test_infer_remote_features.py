"""The device's side of networked inference (:func:`secemb.client.inference.infer_remote`) for
a model with user features, against an in-memory link that answers as a deployment does
(``GET``/``POST /v1/inference``): ``H_u`` and the offset from the public ``V_x``, ``w_x`` and
the device's own ``x_u``; the request is exactly the release; the scores are the in-process
exchange's; a wrong recommender, missing features or the model from the description alone
are refused before any release is drawn.  (Against two server processes:
``test_net_inference_features.py``, slow.)"""

from __future__ import annotations

import numpy as np
import pytest

from secemb.client.inference import infer_remote
from secemb.data.features import synthetic_features
from secemb.digest import model_sha256
from secemb.errors import InvalidParameters
from secemb.inference import GaussianLDP
from secemb.inference.releases import ReleaseLedger
from secemb.inference.representation import representation_for
from secemb.inference.service import InferenceDevice, InferenceServer, infer, request_bytes
from secemb.models import FactorizationMachine
from secemb.randomness import CtrDrbg

MECH = GaussianLDP(1.0, 1e-4, 1.0)


class _Link:
    """A deployment's server 0 in memory: its description and its answer; records the bodies."""

    def __init__(self, model, table, dense) -> None:
        self.server = InferenceServer(representation_for(model, dense), table)
        self.sha = model_sha256(table, dense)
        self.model = model
        self.bodies: list[bytes] = []

    def inference_info(self):
        rep = self.server.rep
        return {"model": {"name": self.model.name, "hparams": self.model.spec()}, "model_version": 4,
                "model_sha256": self.sha, "rows": rep.rows, "dim": rep.dim, "num_items": self.server.table.shape[0],
                "candidates": None, "num_candidates": self.server.table.shape[0]}

    def inference(self, body: bytes):
        self.bodies.append(body)
        return self.server.answer(body), 4


def test_infer_remote_with_user_features() -> None:
    feats = synthetic_features("ml-100k", 12, 30, seed=1)
    fm = FactorizationMachine(dim=3, features=feats)
    table, dense = fm.init_public(30, np.random.default_rng(0))
    dense = dense + np.random.default_rng(1).normal(0, 0.2, dense.shape)  # V_x, w_x not zero
    params = np.random.default_rng(2).normal(0, 0.3, fm.private_size)
    x = feats.user[4].astype(np.float64)
    link = _Link(fm, table, dense)
    rec = (fm, dense, link.sha)
    items = np.array([0, 7, 29])

    with pytest.raises(InvalidParameters, match="user features"):  # the model from the description alone
        infer_remote(link, params, MECH, items)
    with pytest.raises(InvalidParameters, match="user features"):  # no x_u
        infer_remote(link, params, MECH, items, recommender=rec)
    with pytest.raises(InvalidParameters, match="not the model the deployment serves"):
        infer_remote(link, params, MECH, items, recommender=(fm, dense + 1.0, model_sha256(table, dense + 1.0)),
                     user_x=x)
    assert link.bodies == []  # all refused before any request

    ledger = ReleaseLedger()
    ans = infer_remote(link, params, MECH, items, recommender=rec, user_x=x, ledger=ledger, _rng=CtrDrbg(3))
    assert ledger.current is not None
    h_tilde, z = ledger.current[2], ledger.current[3]
    rep = representation_for(fm, dense)
    h, offset = rep.clean(params[None], x[None])
    assert h.shape == (1, feats.l_x + 1, 3)
    np.testing.assert_allclose(h_tilde - z, h[0], rtol=0, atol=1e-12)
    assert len(link.bodies[0]) == request_bytes(feats.l_x + 1, 3) == ans.upload_bytes
    want = infer(InferenceDevice(h[0], float(offset[0]), MECH, num_items=30, release=(h_tilde, z)),
                 InferenceServer(rep, table), items)
    np.testing.assert_array_equal(ans.scores, want)
    np.testing.assert_array_equal(ans.items, items)
