"""``secemb client`` trains an FM recommender (and a DeepFM one, ``slow``) with user features
against two server processes on 127.0.0.1: the servers build the model from the public item
features file (``[model] item_features``), the round announces its hyperparameters only, and
the device builds the model with its own features (``--dataset``'s: its user row and the
public item matrix) because the round's sizes are those of the model with features.  Its step
-- loss and updated private vector -- is bit for bit the simulation's device's (the full
feature set, the same user) on the rows and dense vector of the round; its upload is the same
size as a device of the SDK's; features that do not fit the round are refused (exit 2) before
the device joins."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.device import Device, DeviceClient
from secemb.data import by_user, load_dataset, train_test_split
from secemb.data.features import FeatureSet, load_features, save_item_features
from secemb.sim.settings import cluster_settings
from secemb.errors import InvalidParameters
from secemb.models import DeepFM, FactorizationMachine, UserStore
from secemb.models.task import RATING
from secemb.protocols import get_protocol
from secemb.round.messages import decode_model
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig

M_PRIME = 30  # every chosen user's distinct items fit: no truncation draw
runner = CliRunner()


def test_for_device_keeps_one_row() -> None:
    feats = FeatureSet("t", np.eye(3, dtype=np.uint8), np.ones((4, 2), np.uint8))
    own = feats.for_device(1)
    np.testing.assert_array_equal(own.user, [[0, 1, 0]])
    assert not np.shares_memory(own.user, feats.user)  # a copy: the device's set keeps no other row alive
    np.testing.assert_array_equal(own.item, feats.item)
    for bad in (3, -1, True):
        try:
            feats.for_device(bad)
        except InvalidParameters:
            continue
        raise AssertionError(f"for_device({bad!r}) accepted")


@pytest.mark.parametrize("model_class", [FactorizationMachine, pytest.param(DeepFM, marks=pytest.mark.slow)])
def test_client_trains_fm_with_its_own_features(tmp_path, model_class) -> None:
    data = load_dataset("synthetic", seed=0)
    tr, _ = train_test_split(data, 0.2, seed=0)  # as `secemb client` reads it
    feats = load_features("synthetic", num_users=data.num_users, num_items=data.num_items, seed=0)
    fm = model_class(dim=4, reg=0.01, features=feats)
    assert fm.l_x == 84 and fm.frozen_columns > 0
    counts = np.bincount(tr.users, minlength=tr.num_users)
    cli_user, sdk_user = (int(u) for u in np.flatnonzero((counts >= 5) & (counts <= M_PRIME))[:2])
    settings = cluster_settings(fm, get_protocol("secemb", layout="full", relay=False), tr,
                                TrainConfig(m_prime=M_PRIME, lr=0.05), min_users=2,
                                item_features=save_item_features(tmp_path / "items.npz", feats))
    params = np.random.default_rng(5).normal(0.0, 0.3, (tr.num_users, fm.private_size))
    state = tmp_path / "state.npz"
    np.savez(state, params=params[cli_user], m=np.zeros(fm.private_size), v=np.zeros(fm.private_size),
             t=np.int64(0))
    with LocalCluster(tmp_path / "fm", **settings) as cluster:
        cluster.start()
        admin = cluster.admin(0)
        table, dense = decode_model(admin.get_bytes("/v1/admin/model"), version=0, num_items=tr.num_items,
                                    width=fm.sparse_width, dense_size=fm.dense_size)
        admin.post_json("/v1/admin/rounds", {"participants": [cli_user, sdk_user], "deadline_s": 60})
        creds = cluster.deployment.devices([cli_user])[0].save(tmp_path / "dev.json")
        base = ["client", "--user", str(cli_user), "--credentials", str(creds), "--min-users", "2", "--wait", "30",
                "--state-file", str(state)]
        # another dataset's features do not give the round's FM: refused before joining
        bad = runner.invoke(app, [*base, "--dataset", "synthetic-ml-1m"])  # 30 user features, not 84
        assert bad.exit_code == 2 and "table width" in bad.output and "Traceback" not in bad.output, bad.output

        k0, k1 = cluster.device_keys(sdk_user)
        client = DeviceClient(sdk_user, cluster.url(0), cluster.url(1), k0, k1, tls=cluster.tls, min_users=2)
        info = client.round_info()
        assert info.model["hparams"] == fm.spec()  # the announcement names no feature
        mine = info.make_model(feats.for_device(sdk_user))
        sdk = Device(client, *by_user(tr).of(sdk_user), rng=np.random.default_rng(1))
        sdk_session = sdk.participate(info, model=mine)

        out = runner.invoke(app, base)
        assert out.exit_code == 0, out.output
        line = json.loads(out.output.strip().splitlines()[-1])
        assert line["outcome"] == "committed" and line["upload_bytes"] == sdk_session.upload_bytes
        assert sdk.settle(wait_s=30) == "committed"
        client.close()
        admin.close()

    # the simulation's device: the full feature set, user cli_user, the round's rows and dense in the ring
    fp = info.fixed_point()
    sample = RATING.sample(*by_user(tr).of(cli_user), tr.num_items, np.random.default_rng(0))
    rows, dense_u = fp.decode(fp.encode(table[sample.items])), fp.decode(fp.encode(dense))
    store = UserStore(params.copy(), info.adam())
    want = fm.local_step(rows, dense_u, store.state(cli_user), sample.batch)
    assert line["loss"] == want.loss
    with np.load(state) as z:
        np.testing.assert_array_equal(z["params"], store.params[cli_user])
    # the features mattered: without the device's user row the step differs
    blank = FeatureSet("blank", np.zeros_like(feats.user), feats.item)
    other = model_class(dim=4, reg=0.01, features=blank).local_step(
        rows, dense_u, UserStore(params.copy(), info.adam()).state(cli_user), sample.batch)
    assert other.loss != want.loss
