"""``secemb infer --credentials`` for a recommender with user features (FM with the ML-100K
stand-in's 84 user features): the device takes ``V_x`` and ``w_x`` from the recommender's
public folder (checked against the served model) and its own ``x_u`` from ``--dataset``, sends
the ``(l_x + 1) x d`` release, and its scores equal the in-process exchange's bit for bit on the
release it recorded; without its features or the public model it exits 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.data import load_dataset, train_test_split
from secemb.data.features import load_features, save_item_features
from secemb.sim.settings import cluster_settings
from secemb.inference import GaussianLDP
from secemb.inference.releases import ReleaseLedger
from secemb.inference.representation import representation_for
from secemb.inference.service import InferenceDevice, InferenceServer, infer
from secemb.inference.trained import TrainedModel
from secemb.models import FactorizationMachine, UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols import get_protocol
from secemb.round.messages import decode_model
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig

USER = 5
runner = CliRunner()


@pytest.mark.slow  # two server processes (~30 s on the loaded machine); the device path: test_infer_remote_features
def test_infer_with_user_features_against_a_deployment(tmp_path) -> None:
    data = load_dataset("synthetic", seed=0)
    tr, _ = train_test_split(data, 0.2, seed=0)
    feats = load_features("synthetic", num_users=data.num_users, num_items=data.num_items, seed=0)
    fm = FactorizationMachine(dim=4, features=feats)
    assert fm.l_x == 84
    settings = cluster_settings(fm, get_protocol("secemb", layout="full", relay=False), tr, TrainConfig(m_prime=6),
                                min_users=2, item_features=save_item_features(tmp_path / "items.npz", feats))
    params = np.random.default_rng(3).normal(0.0, 0.3, (data.num_users, fm.private_size))
    with LocalCluster(tmp_path / "fm", **settings) as cluster:
        cluster.start()
        admin = cluster.admin(0)
        table, dense = decode_model(admin.get_bytes("/v1/admin/model"), version=0, num_items=tr.num_items,
                                    width=fm.sparse_width, dense_size=fm.dense_size)
        dense = dense.copy()
        assert np.any(fm.layout.views(dense)["V_x"] != 0)  # the offset and H_u read the public V_x, w_x
        trained = TrainedModel(fm, table, dense, UserStore(params, AdamConfig()),
                               np.zeros(data.num_users + 1, np.int64), np.zeros(0, np.int64),
                               {"protocol": "secemb", "dataset": "synthetic", "seed": 0, "config": {}})
        rec_dir = trained.save(tmp_path / "recommender")
        (rec_dir / "devices.npz").unlink()  # every user's state and features: not the device's to read
        state = tmp_path / "state.npz"
        np.savez(state, params=params[USER], m=np.zeros(fm.private_size), v=np.zeros(fm.private_size), t=np.int64(1))
        creds = cluster.deployment.devices([USER])[0].save(tmp_path / "dev.json")
        releases = tmp_path / "releases.npz"
        base = ["infer", "--credentials", str(creds), "--state-file", str(state), "--release-file", str(releases),
                "--json", "--items", "0,3,9"]
        for args in ([], ["--dataset", "synthetic"], ["--recommender", str(rec_dir)]):  # public model, own features
            bad = runner.invoke(app, [*base, *args])
            assert bad.exit_code == 2 and "Traceback" not in bad.output, (args, bad.output)
        assert not releases.exists()  # refused before any release was drawn
        out = runner.invoke(app, [*base, "--recommender", str(rec_dir), "--dataset", "synthetic"])
        assert out.exit_code == 0, out.output
        doc = json.loads(out.output)
        assert doc["upload_bytes"] == 12 + 8 * 85 * 4 and doc["mode"] == "ldp-no-denoiser"

    ledger = ReleaseLedger.load(releases)
    assert ledger.current is not None
    h_tilde, z = ledger.current[2], ledger.current[3]
    rep = representation_for(fm, dense)
    h, offset = rep.clean(params[USER][None], feats.user[USER][None].astype(np.float64))
    np.testing.assert_allclose(h_tilde - z, h[0], rtol=0, atol=1e-12)  # the release is of the device's own H_u
    device = InferenceDevice(h[0], float(offset[0]), GaussianLDP(1.0, 1e-4, 1.0), num_items=tr.num_items,
                             release=(h_tilde, z))
    want = infer(device, InferenceServer(rep, table), np.array([0, 3, 9]))
    np.testing.assert_array_equal(np.array(doc["scores"]), want)
