"""GREC's denoiser end to end on standalone devices, through the command line, for an MF
recommender and an FM one (and a DeepFM one, ``slow``) with the ML-100K stand-in's 84 user
features: ``secemb client`` trains a denoiser round against two server processes from the
device's recommender state file, the recommender's public model and (FM, DeepFM) its own
features (the mechanism comes from the announced spec), ``secemb admin save-denoiser`` writes
the deployment's trained denoiser, and ``secemb infer --credentials --denoiser --recommender``
post-processes the recommender deployment's reply on the device -- the same scores as the
in-process simulation's device with the full context on the release the device recorded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.device import Device, DeviceClient
from secemb.data import by_user, load_dataset, train_test_split
from secemb.data.features import load_features, save_item_features
from secemb.digest import model_sha256
from secemb.sim.settings import cluster_settings
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
from secemb.inference.releases import ReleaseLedger
from secemb.inference.saved import (
    load_denoiser,
    load_denoiser_on_device,
    load_public_recommender,
    save_denoiser,
    save_frozen_table,
)
from secemb.inference.service import InferenceDevice, InferenceServer, infer
from secemb.inference.trained import TrainedModel
from secemb.models import DeepFM, FactorizationMachine, MatrixFactorization, RecModel, UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols import get_protocol
from secemb.round.messages import decode_model
from secemb.server.deploy import init_deployment
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig

MECH = GaussianLDP(2.0, 1e-4, 1.0)  # not the default: the device must take it from the spec
HP = {"hat_d": 3, "hidden": 6}
SDK_USER, CLI_USER = 7, 9
runner = CliRunner()


def _state(path, params: np.ndarray) -> None:
    np.savez(path, params=params, m=np.zeros_like(params), v=np.zeros_like(params), t=np.int64(3))


def _model(cluster: LocalCluster, num_items: int, width: int, dense_size: int) -> tuple[np.ndarray, np.ndarray]:
    admin = cluster.admin(0)
    version = admin.get_json("/v1/admin/status")["model_version"]
    return decode_model(admin.get_bytes("/v1/admin/model"), version=version, num_items=num_items, width=width,
                        dense_size=dense_size)


def test_denoiser_spec_carries_the_mechanism() -> None:
    mf = MatrixFactorization(dim=2)
    ctx = DenoiserContext.for_device(mf, np.zeros(mf.dense_size), np.array([0.3, 0.1, 0.0]), MECH)
    den = Denoiser.for_context(ctx, **HP)
    assert (den.spec()["epsilon"], den.spec()["delta"], den.spec()["bound"]) == (2.0, 1e-4, 1.0)
    assert Denoiser.for_device(den.spec(), mf, np.zeros(1), np.array([0.3, 0.1, 0.0])).mechanism == MECH
    from secemb.errors import InvalidParameters

    with pytest.raises(InvalidParameters, match="mechanism"):  # a context of another mechanism
        Denoiser.for_context(ctx, epsilon=1.0, **HP)
    with pytest.raises(InvalidParameters, match="rows, dim"):  # a spec of another recommender
        Denoiser.for_device({**den.spec(), "dim": 3}, mf, np.zeros(1), np.array([0.3, 0.1, 0.0]))


def _recommender(kind: str, tmp_path, data) -> tuple[RecModel, np.ndarray | None, list[str], dict]:
    """``(model, every user's features or None, the device's feature arguments, extra cluster settings)``:
    MF, or FM / DeepFM with the ML-100K stand-in's 84 user features (the servers read the public item
    features)."""
    if kind == "mf":
        return MatrixFactorization(dim=4, reg=0.01), None, [], {}
    feats = load_features("synthetic", num_users=data.num_users, num_items=data.num_items, seed=0)
    model = (FactorizationMachine if kind == "fm" else DeepFM)(dim=4, reg=0.01, features=feats)
    assert model.l_x == 84
    return model, feats.user.astype(np.float64), ["--dataset", "synthetic"], \
        {"item_features": save_item_features(tmp_path / "items.npz", feats)}


# DeepFM: the same path as FM with its own summary (the first deep layer's user part); slow, its dense part is larger
@pytest.mark.parametrize("kind", ["mf", "fm", pytest.param("deepfm", marks=pytest.mark.slow)])
def test_client_trains_and_infer_uses_the_denoiser_on_a_standalone_device(tmp_path, kind) -> None:
    data = load_dataset("synthetic", seed=0)
    tr, _ = train_test_split(data, 0.2, seed=0)  # as `secemb client` reads it
    rec, user_x, feature_args, extra = _recommender(kind, tmp_path, data)
    proto = get_protocol("secemb", layout="full", relay=False)
    rng = np.random.default_rng(11)
    params = rng.normal(0.0, 0.4, (tr.num_users, rec.private_size))
    rec_settings = cluster_settings(rec, proto, tr, TrainConfig(m_prime=6), min_users=2, **extra)
    with LocalCluster(tmp_path / "rec", **rec_settings) as rec_cluster:
        rec_cluster.start()
        # the recommender: the deployment's public model, every device's private parameters
        table, dense = _model(rec_cluster, tr.num_items, rec.sparse_width, rec.dense_size)
        trained = TrainedModel(rec, table, dense, UserStore(params, AdamConfig()),
                               np.zeros(tr.num_users + 1, np.int64), np.zeros(0, np.int64),
                               {"protocol": "secemb", "dataset": "synthetic", "seed": 0, "config": {}})
        full_dir = trained.save(tmp_path / "rec-full")  # the simulation's: every user's state
        rec_dir = trained.save(tmp_path / "recommender")
        (rec_dir / "devices.npz").unlink()  # a device reads the public part only
        assert load_public_recommender(rec_dir)[2] == trained.model_sha256
        states = {u: tmp_path / f"rec-state-{u}.npz" for u in (SDK_USER, CLI_USER)}
        for u, path in states.items():
            _state(path, params[u])

        # ---- the denoiser's deployment: one round, a device of the SDK and one of `secemb client`
        ctx = DenoiserContext.from_trained(rec, table, dense, params, MECH, getattr(rec, "features", None))
        full = Denoiser.for_context(ctx, **HP)
        settings = cluster_settings(full, proto, tr, TrainConfig(m_prime=6, lr=0.025), min_users=2,
                                    frozen_table=save_frozen_table(tmp_path / "frozen.npz", table))
        with LocalCluster(tmp_path / "den", **settings) as cluster:
            cluster.start()
            before, dense0 = _model(cluster, tr.num_items, full.sparse_width, full.dense_size)
            cluster.admin(0).post_json("/v1/admin/rounds", {"participants": [SDK_USER, CLI_USER], "deadline_s": 60})
            creds = cluster.deployment.devices([CLI_USER])[0].save(tmp_path / "den-dev.json")
            base = ["client", "--user", str(CLI_USER), "--credentials", str(creds), "--min-users", "2", "--wait",
                    "30"]
            bad = runner.invoke(app, base)  # the rounds train a denoiser: the recommender is needed
            assert bad.exit_code == 2 and "--recommender" in bad.output and "Traceback" not in bad.output, bad.output
            bad = runner.invoke(app, [*base, "--recommender", str(rec_dir)])
            assert bad.exit_code == 2 and "together" in bad.output, bad.output

            k0, k1 = cluster.device_keys(SDK_USER)
            client = DeviceClient(SDK_USER, cluster.url(0), cluster.url(1), k0, k1, tls=cluster.tls, min_users=2)
            info = client.round_info()
            assert info.model["hparams"]["epsilon"] == MECH.epsilon  # announced
            mine = Denoiser.for_device(info.model["hparams"], rec, dense, params[SDK_USER],
                                       None if user_x is None else user_x[SDK_USER],
                                       table_sha256=load_public_recommender(rec_dir)[4])
            sdk = Device(client, *by_user(tr).of(SDK_USER), rng=np.random.default_rng(1))
            session = sdk.participate(info, model=mine)
            requested = [session.request.indices[session.request.indices >= 0]]

            out = runner.invoke(app, [*base, "--recommender", str(rec_dir), "--recommender-state",
                                      str(states[CLI_USER]), "--state-file", str(tmp_path / "den-state.npz")])
            assert out.exit_code == 0, out.output
            line = json.loads(out.output.strip().splitlines()[-1])
            assert line["outcome"] == "committed" and np.isfinite(line["loss"]) and line["upload_bytes"] > 0
            assert sdk.settle(wait_s=30) == "committed"
            client.close()
            after, dense1 = _model(cluster, tr.num_items, full.sparse_width, full.dense_size)
            # the operator writes the trained denoiser: `secemb admin save-denoiser`
            den_file = tmp_path / "denoiser.npz"
            saved = runner.invoke(app, ["admin", "save-denoiser", "--deployment", str(cluster.workdir), "--out",
                                        str(den_file), "--recommender", str(rec_dir)])
            assert saved.exit_code == 0, saved.output
            doc = json.loads(saved.output)
            assert doc["model_version"] == 1 and doc["model_sha256"] == model_sha256(after, dense1)
            assert doc["recommender_sha256"] == trained.model_sha256
            assert (doc["epsilon"], doc["delta"], doc["bound"]) == (MECH.epsilon, MECH.delta, MECH.bound)
        down = runner.invoke(app, ["admin", "save-denoiser", "--deployment", str(cluster.workdir), "--out",
                                   str(tmp_path / "again.npz"), "--recommender", str(rec_dir)])
        assert down.exit_code == 1 and "Traceback" not in down.output, down.output  # the servers are gone
        np.testing.assert_array_equal(after[:, HP["hat_d"]:], table)  # the frozen columns did not move
        moved = np.flatnonzero(np.any(after != before, axis=1))
        assert np.isin(np.unique(np.concatenate(requested)), moved).all() and moved.size > requested[0].size
        assert np.any(dense1 != dense0)
        direct = save_denoiser(tmp_path / "sdk.npz", full, after, dense1, recommender_sha256=trained.model_sha256)
        with np.load(den_file) as got, np.load(direct) as want_file:
            assert set(got.files) == set(want_file.files)
            for key in got.files:
                np.testing.assert_array_equal(got[key], want_file[key])

        # ---- private inference with the trained denoiser, on the device, against the recommender's deployment
        rec_creds = rec_cluster.deployment.devices([CLI_USER])[0].save(tmp_path / "rec-dev.json")
        releases = tmp_path / "releases.npz"
        base = ["infer", "--credentials", str(rec_creds), "--state-file", str(states[CLI_USER]), "--release-file",
                str(releases), "--json", *feature_args]
        items = [0, 5, 7, 100]
        res = runner.invoke(app, [*base, "--denoiser", str(den_file), "--recommender", str(rec_dir), "--items",
                                  ",".join(map(str, items))])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.output)
        assert doc["mode"] == "post-processing-ldp" and doc["epsilon"] == MECH.epsilon and doc["items"] == items
        assert doc["upload_bytes"] == 12 + 8 * full.rows * 4  # H~ only (FM: 85 x 4)
        ledger = ReleaseLedger.load(releases)
        assert ledger.current is not None and ledger.current[1] == MECH
        h_tilde, z = ledger.current[2], ledger.current[3]
        # the simulation's device: the full context (every user), user CLI_USER, the same release
        sim = load_denoiser(den_file, TrainedModel.load(full_dir), recommender=full_dir)
        sim_ctx = sim[0].context
        np.testing.assert_allclose(h_tilde - z, sim_ctx.h[CLI_USER], rtol=0, atol=1e-12)  # its own H_u
        device = InferenceDevice(sim_ctx.h[CLI_USER], float(sim_ctx.offset[CLI_USER]), MECH, num_items=tr.num_items,
                                 denoiser=sim, user=CLI_USER, release=(h_tilde, z))
        want = infer(device, InferenceServer(sim_ctx.rep, table), np.array(items), user=CLI_USER)
        np.testing.assert_array_equal(np.array(doc["scores"]), want)
        # the device's denoiser holds e only, no recommender row
        on_device = load_denoiser_on_device(den_file, rec, dense, params[CLI_USER], tr.num_items,
                                            None if user_x is None else user_x[CLI_USER],
                                            recommender_sha256=trained.model_sha256, recommender=rec_dir)
        assert on_device[1].shape == (tr.num_items, HP["hat_d"])
        public = ["--recommender", str(rec_dir)] if user_x is not None else []  # FM: V_x, w_x for H_u
        plain = json.loads(runner.invoke(app, [*base, *public, "--items", ",".join(map(str, items)), "--epsilon",
                                               "2"]).output)
        assert plain["release_reused"] and plain["mode"] == "ldp-no-denoiser" and plain["scores"] != doc["scores"]

        other = TrainedModel(rec, table, dense + 0.1, trained.user_store, trained.rated_indptr, trained.rated_items,
                             trained.info).save(tmp_path / "other")
        for args in (["--denoiser", str(den_file)],  # no recommender
                     # not the served model, nor the denoiser's
                     ["--denoiser", str(den_file), "--recommender", str(other)],
                     # not its mechanism
                     ["--denoiser", str(den_file), "--recommender", str(rec_dir), "--epsilon", "1"]):
            bad = runner.invoke(app, [*base, *args])
            assert bad.exit_code == 2 and "Traceback" not in bad.output, (args, bad.output)


def test_save_denoiser_refuses_bad_input(tmp_path) -> None:
    """``secemb admin save-denoiser`` exits 2, before any request, on a folder that is no
    deployment, a deployment of another model, an --out that is a folder, or a --recommender
    that is no saved recommender."""
    init_deployment(tmp_path / "mf", [["127.0.0.1"]] * 2, ports=(9, 9), num_items=20, num_users=5, model="mf")
    rec = MatrixFactorization(dim=2)
    TrainedModel(rec, np.zeros((20, rec.sparse_width)), np.zeros(rec.dense_size),
                 UserStore(np.zeros((5, rec.private_size)), AdamConfig()), np.zeros(6, np.int64), np.zeros(0, np.int64),
                 {"protocol": "secemb", "dataset": "toy", "seed": 0, "config": {}}).save(tmp_path / "rec")
    for args, says in (([str(tmp_path / "nowhere")], "not a deployment directory"),
                       ([str(tmp_path / "mf")], "not GREC's denoiser"),
                       ([str(tmp_path / "mf"), "--out", str(tmp_path)], "folder"),
                       ([str(tmp_path / "mf"), "--out", str(tmp_path / "d.npz"), "--recommender", str(tmp_path)],
                        "--recommender")):
        out = ["--out", str(tmp_path / "d.npz")] if len(args) == 1 else []
        rec_arg = [] if "--recommender" in args else ["--recommender", str(tmp_path / "rec")]
        bad = runner.invoke(app, ["admin", "save-denoiser", "--deployment", *args, *out, *rec_arg])
        assert bad.exit_code == 2 and says in bad.output and "Traceback" not in bad.output, (args, bad.output)
    assert not (tmp_path / "d.npz").exists()
