"""Standalone devices (the device SDK, :class:`~secemb.client.device.Device`) train GREC's
denoiser against two server processes on 127.0.0.1: each device holds only a one-device
context (:meth:`DenoiserContext.for_device`: its recommender parameters, the recommender's
public dense vector, the mechanism), retrieves its rows -- the denoiser's ``e_i`` and the
recommender's frozen row -- through SecEmb, and takes exactly the step the simulation's device
takes with the full context and the same noise stream.  The committed model moves the
requested items' ``e_i`` only; the frozen columns stay the recommender's table."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.client.device import Device, DeviceClient
from secemb.data import by_user, synthetic_like, train_test_split
from secemb.digest import table_sha256
from secemb.sim.settings import cluster_settings
from secemb.errors import InvalidParameters
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
from secemb.inference.saved import save_frozen_table
from secemb.models import MatrixFactorization, UserStore
from secemb.models.optim import AdamConfig
from secemb.protocols import get_protocol
from secemb.randomness import CtrDrbg
from secemb.round.messages import decode_model
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig, train

USERS = (3, 8)
MECH = GaussianLDP(1.0, 1e-4, 1.0)
HP = {"hat_d": 3, "hidden": 6}


@pytest.fixture(scope="module")
def trained():
    tr, te = train_test_split(synthetic_like(30, 24, 500, seed=4), 0.2, seed=0)
    mf = MatrixFactorization(dim=4, reg=0.01)
    rec = train(mf, get_protocol("plaintext"), tr, te, TrainConfig(epochs=2, users_per_round=10, lr=0.05))
    return tr, mf, rec


def test_one_device_context_checks_its_inputs(trained) -> None:
    _, mf, rec = trained
    with pytest.raises(InvalidParameters, match="params must have shape"):
        DenoiserContext.for_device(mf, rec.dense, rec.user_store.params[:2], MECH)
    with pytest.raises(InvalidParameters, match="user features"):
        DenoiserContext.for_device(mf, rec.dense, rec.user_store.params[0], MECH, user_x=np.ones(3))
    den = Denoiser.for_context(DenoiserContext.for_device(mf, rec.dense, rec.user_store.params[0], MECH), **HP)
    with pytest.raises(InvalidParameters, match="items"):  # a device cannot initialize the model
        den.init_public(24, np.random.default_rng(0))


def test_device_sdk_trains_the_denoiser_against_two_servers(trained, tmp_path) -> None:
    tr, mf, rec = trained
    full = Denoiser.for_context(DenoiserContext.from_trained(mf, rec.table, rec.dense, rec.user_store, MECH), **HP)
    proto = get_protocol("secemb", layout="full", relay=False)
    table_file = save_frozen_table(tmp_path / "frozen_table.npz", full.public_table)
    settings = cluster_settings(full, proto, tr, TrainConfig(m_prime=6, lr=0.025), frozen_table=table_file,
                                min_users=2)
    per_user = by_user(tr)
    with LocalCluster(tmp_path / "cluster", **settings) as cluster:
        cluster.start()
        admin = cluster.admin(0)

        def model() -> tuple[np.ndarray, np.ndarray]:
            version = admin.get_json("/v1/admin/status")["model_version"]
            return decode_model(admin.get_bytes("/v1/admin/model"), version=version, num_items=tr.num_items,
                                width=full.sparse_width, dense_size=full.dense_size)

        before, dense0 = model()
        admin.post_json("/v1/admin/rounds", {"participants": list(USERS), "deadline_s": 60})
        devices, requested = [], []
        for u in USERS:
            k0, k1 = cluster.device_keys(u)
            client = DeviceClient(u, cluster.url(0), cluster.url(1), k0, k1, tls=cluster.tls, min_users=2)
            info = client.round_info()
            ctx = DenoiserContext.for_device(mf, rec.dense, rec.user_store.params[u], MECH,
                                             table_sha256=table_sha256(rec.table))  # its recommender's table
            mine = Denoiser.for_context(ctx, _rng=CtrDrbg(100 + u), **HP)
            assert mine.spec() == info.model["hparams"]  # the announced model, with the device's context
            store = UserStore(mine.init_private(1, np.random.default_rng(0)), info.adam())
            seen = []

            def hook(rows, dense, batch, mine=mine, store=store, seen=seen):
                seen.append((rows.copy(), dense.copy(), batch))
                return mine.local_step(rows, dense, store.state(0), batch)

            device = Device(client, *per_user.of(u), store=store, user=0, rng=np.random.default_rng(u))
            session = device.participate(info, model=mine, hook=hook)
            devices.append(device)
            requested.append(session.request.indices[session.request.indices >= 0])
            # the simulation's device (full context, user u) takes the same step on the same inputs
            rows, dense, batch = seen[0]
            fp = info.fixed_point()
            np.testing.assert_array_equal(dense, fp.decode(fp.encode(dense0)))  # the round's dense, in the ring
            sim = Denoiser.for_context(full.context, _rng=CtrDrbg(100 + u), **HP)
            sim_store = UserStore(sim.init_private(tr.num_users, np.random.default_rng(0)), AdamConfig())
            want = sim.local_step(rows, dense, sim_store.state(u), batch)
            np.testing.assert_array_equal(session.result.row_grads, want.row_grads)
            np.testing.assert_array_equal(session.result.dense_grad, want.dense_grad)
            assert session.result.loss == want.loss
        for device in devices:
            assert device.settle(wait_s=30) == "committed"
        after, dense1 = model()
        np.testing.assert_array_equal(after[:, HP["hat_d"]:], rec.table)  # the frozen columns did not move
        moved = np.flatnonzero(np.any(after != before, axis=1))
        np.testing.assert_array_equal(moved, np.unique(np.concatenate(requested)))
        assert np.any(dense1 != dense0)
        for device in devices:
            device.client.close()
        admin.close()
