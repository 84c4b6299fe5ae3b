"""Devices with sequences against two running servers: the device SDK (Device.participate)
and ``secemb client`` train a sequential model (SASRec, Caser) on the device's chronological
leave-one-out training sequence; the request carries the sequence's items and the sampled
negatives, and the committed model moves exactly the rows of those requests (lazy Adam)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _server_template import popen_secemb

from secemb.client.device import Device, DeviceClient
from secemb.data import by_user, leave_one_out, load_dataset
from secemb.sim.settings import cluster_settings
from secemb.models import get_model
from secemb.protocols import get_protocol
from secemb.round.messages import decode_model
from secemb.server.deploy import Deployment
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
USERS = (7, 9)


def _cluster(tmp_path: Path, model_name: str) -> tuple[LocalCluster, object, object]:
    train = leave_one_out(load_dataset("synthetic-mini", seed=0))[0]
    model = get_model(model_name, dim=8)
    proto = get_protocol("secemb", layout="cuckoo", relay=True)
    config = TrainConfig(m_prime=model.task.default_m_prime(train.num_items), lr=0.01)
    settings = cluster_settings(model, proto, train, config, min_users=2)
    return LocalCluster(tmp_path / "cluster", **settings), model, train


def _decode(cluster: LocalCluster, admin, model) -> np.ndarray:
    """Server 0's current item table (the MODEL message, through ``admin``)."""
    version = admin.get_json("/v1/admin/status")["model_version"]
    raw = admin.get_bytes("/v1/admin/model")
    return decode_model(raw, version=version, num_items=cluster.configs[0].num_items, width=model.sparse_width,
                        dense_size=model.dense_size)[0]


def _client(tmp_path: Path, user: int, *extra: str) -> subprocess.Popen:
    """``secemb client`` for ``user`` (a subprocess that waits for its round; forked from the suite's warm
    template where it can be: tests/_server_template.py)."""
    [creds] = Deployment(tmp_path / "cluster").add_devices([user])
    return popen_secemb(
        [sys.executable, "-c", "from secemb.cli import main; main()", "client", "--user", str(user), "--credentials",
         str(creds), "--dataset", "synthetic-mini", "--wait", "60", "--min-users", "2", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _last_line(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, out + err
    return json.loads(out.strip().splitlines()[-1])


def test_device_sdk_and_client_command_train_sasrec_on_sequences_over_https(tmp_path):
    cluster, model, train = _cluster(tmp_path, "sasrec")
    with cluster:
        cluster.start()
        admin = cluster.admin(0)
        before = _decode(cluster, admin, model)
        rid = admin.post_json("/v1/admin/rounds", {"participants": list(USERS), "deadline_s": 60})["round_id"]
        requested, devices = [], []
        for u in USERS:  # round 1: the device SDK
            k0, k1 = cluster.device_keys(u)
            items, ratings = by_user(train, order="time").of(u)
            dc = DeviceClient(u, cluster.url(0), cluster.url(1), k0, k1, tls=cluster.tls, min_users=2)
            device = Device(dc, items, ratings, rng=np.random.default_rng(u))
            info = dc.round_info()
            assert (info.round_id, info.participant, info.make_task().name) == (rid, True, "sequential")
            session = device.participate(info)
            devices.append(device)
            got = session.request.indices[session.request.indices >= 0]
            last = items[-(model.task.max_len + 1):]
            # the request: the sequence's last L + 1 items (history and targets) and its negatives
            assert np.array_equal(np.intersect1d(got, items), np.unique(last))
            assert np.setdiff1d(got, items).size > 0 and got.size == session.num_distinct <= info.config.m_prime
            assert session.upload_bytes > 0 and np.isfinite(session.result.loss)
            requested.append(got)
        for device in devices:
            assert device.settle(wait_s=30) == "committed"
        assert admin.get_json(f"/v1/rounds/{rid}/status")["included"] == list(USERS)
        after = _decode(cluster, admin, model)
        moved = np.flatnonzero(np.any(after != before, axis=1))
        assert np.array_equal(moved, np.unique(np.concatenate(requested)))  # negatives' gradients aggregated too
        # round 2: user 7 through secemb client (the task and split from the round document), 9 the SDK
        proc = _client(tmp_path, USERS[0])
        rid = admin.post_json("/v1/admin/rounds", {"participants": list(USERS), "deadline_s": 60})["round_id"]
        devices[1].participate(devices[1].client.round_info())
        line = _last_line(proc)
        assert (line["user"], line["round_id"], line["outcome"]) == (USERS[0], rid, "committed")
        assert line["upload_bytes"] > 0 and np.isfinite(line["loss"])
        assert devices[1].settle(wait_s=30) == "committed"
        assert admin.get_json(f"/v1/rounds/{rid}/status")["included"] == list(USERS)
        moved = np.flatnonzero(np.any(_decode(cluster, admin, model) != after, axis=1))
        seq7 = by_user(train, order="time").of(USERS[0])[0][-(model.task.max_len + 1):]
        assert np.isin(seq7, moved).all()  # the client trained on its leave-one-out sequence
        for device in devices:
            device.client.close()
        admin.close()


@pytest.mark.slow
def test_client_command_trains_caser_with_its_private_user_vector(tmp_path):
    cluster, model, _ = _cluster(tmp_path, "caser")
    with cluster:
        cluster.start()
        admin = cluster.admin(0)
        rid = admin.post_json("/v1/admin/rounds", {"participants": list(USERS), "deadline_s": 60})["round_id"]
        state = tmp_path / "device7.npz"
        procs = [_client(tmp_path, USERS[0], "--state-file", str(state)), _client(tmp_path, USERS[1])]
        lines = [_last_line(p) for p in procs]
        assert [(x["user"], x["round_id"], x["outcome"]) for x in lines] == [(u, rid, "committed") for u in USERS]
        assert admin.get_json(f"/v1/rounds/{rid}/status")["included"] == list(USERS)
    with np.load(state) as z:  # Caser's user embedding stays on the device, one Adam step taken
        assert z["params"].shape == (model.private_size,) == (8,) and int(z["t"]) == 1
