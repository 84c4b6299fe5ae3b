"""GREC's denoiser end to end on standalone devices, through the command line: ``secemb client``
trains a denoiser round against two server processes from the device's recommender state file
and the recommender's public model (the mechanism comes from the announced spec), and ``secemb
infer --credentials --denoiser --recommender`` post-processes the recommender deployment's reply
on the device -- the same scores as the in-process simulation's device with the full context on
the release the device recorded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.device import Device, DeviceClient
from secemb.data import by_user, load_dataset, train_test_split
from secemb.engine.settings import cluster_settings
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
from secemb.inference.releases import ReleaseLedger
from secemb.inference.saved import load_denoiser, load_denoiser_on_device, load_public_recommender, \
    save_denoiser, save_frozen_table
from secemb.inference.service import InferenceDevice, InferenceServer, infer
from secemb.models import MatrixFactorization, UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols import get_protocol
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig
from secemb.training.messages import decode_model
from secemb.training.trained import TrainedModel

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


def test_client_trains_and_infer_uses_the_denoiser_on_a_standalone_device(tmp_path) -> None:
    tr, _ = train_test_split(load_dataset("synthetic", seed=0), 0.2, seed=0)  # as `secemb client` reads it
    mf = MatrixFactorization(dim=4, reg=0.01)
    proto = get_protocol("secemb", layout="full", relay=False)
    rng = np.random.default_rng(11)
    params = rng.normal(0.0, 0.4, (tr.num_users, mf.private_size))
    rec_settings = cluster_settings(mf, proto, tr, TrainConfig(m_prime=6), min_users=2)
    with LocalCluster(tmp_path / "rec", **rec_settings) as rec_cluster:
        rec_cluster.start()
        # the recommender: the deployment's public model, every device's private parameters
        table, dense = _model(rec_cluster, tr.num_items, mf.sparse_width, mf.dense_size)
        trained = TrainedModel(mf, table, dense, UserStore(params, AdamConfig()), np.zeros(tr.num_users + 1, np.int64),
                               np.zeros(0, np.int64), {"protocol": "secemb", "dataset": "synthetic", "seed": 0,
                                                       "config": {}})
        rec_dir = trained.save(tmp_path / "recommender")
        (rec_dir / "devices.npz").unlink()  # a device reads the public part only
        assert load_public_recommender(rec_dir)[2] == trained.model_sha256
        states = {u: tmp_path / f"rec-state-{u}.npz" for u in (SDK_USER, CLI_USER)}
        for u, path in states.items():
            _state(path, params[u])

        # ---- the denoiser's deployment: one round, a device of the SDK and one of `secemb client`
        full = Denoiser.for_context(DenoiserContext.from_trained(mf, table, dense, params, MECH), **HP)
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
            mine = Denoiser.for_device(info.model["hparams"], mf, dense, params[SDK_USER])
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
        np.testing.assert_array_equal(after[:, HP["hat_d"]:], table)  # the frozen columns did not move
        moved = np.flatnonzero(np.any(after != before, axis=1))
        assert np.isin(np.unique(np.concatenate(requested)), moved).all() and moved.size > requested[0].size
        assert np.any(dense1 != dense0)
        den_file = save_denoiser(tmp_path / "denoiser.npz", full, after, dense1)

        # ---- private inference with the trained denoiser, on the device, against the recommender's deployment
        rec_creds = rec_cluster.deployment.devices([CLI_USER])[0].save(tmp_path / "rec-dev.json")
        releases = tmp_path / "releases.npz"
        base = ["infer", "--credentials", str(rec_creds), "--state-file", str(states[CLI_USER]), "--release-file",
                str(releases), "--json"]
        items = [0, 5, 7, 100]
        res = runner.invoke(app, [*base, "--denoiser", str(den_file), "--recommender", str(rec_dir), "--items",
                                  ",".join(map(str, items))])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.output)
        assert doc["mode"] == "post-processing-ldp" and doc["epsilon"] == MECH.epsilon and doc["items"] == items
        assert doc["upload_bytes"] == 12 + 8 * 4  # H~ only
        ledger = ReleaseLedger.load(releases)
        assert ledger.current is not None and ledger.current[1] == MECH
        h_tilde, z = ledger.current[2], ledger.current[3]
        # the simulation's device: the full context (every user), user CLI_USER, the same release
        sim = load_denoiser(den_file, TrainedModel.load(trained.save(tmp_path / "rec-full")))
        ctx = sim[0].context
        device = InferenceDevice(ctx.h[CLI_USER], float(ctx.offset[CLI_USER]), MECH, num_items=tr.num_items,
                                 denoiser=sim, user=CLI_USER, release=(h_tilde, z))
        want = infer(device, InferenceServer(ctx.rep, table), np.array(items), user=CLI_USER)
        np.testing.assert_array_equal(np.array(doc["scores"]), want)
        # the device's denoiser holds e only, no recommender row
        on_device = load_denoiser_on_device(den_file, mf, dense, params[CLI_USER], tr.num_items)
        assert on_device[1].shape == (tr.num_items, HP["hat_d"])
        plain = json.loads(runner.invoke(app, [*base, "--items", ",".join(map(str, items)), "--epsilon", "2"]).output)
        assert plain["release_reused"] and plain["mode"] == "ldp-no-denoiser" and plain["scores"] != doc["scores"]

        other = TrainedModel(mf, table, dense + 0.1, trained.user_store, trained.rated_indptr, trained.rated_items,
                             trained.info).save(tmp_path / "other")
        for args in (["--denoiser", str(den_file)],  # no recommender
                     ["--denoiser", str(den_file), "--recommender", str(other)],  # not the served model
                     # not its mechanism
                     ["--denoiser", str(den_file), "--recommender", str(rec_dir), "--epsilon", "1"]):
            bad = runner.invoke(app, [*base, *args])
            assert bad.exit_code == 2 and "Traceback" not in bad.output, (args, bad.output)
