"""Central DP reaches the devices through the servers: the round document announces the clip
bound and the noise scale ([privacy] clip and sigma), and a device of the SDK
(Device.participate) clips its whole round contribution to it before encoding -- the same
ClipSpec as the run's DP plan -- in process and over HTTPS to two server processes."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from secemb.client.device import Device, DeviceClient
from secemb.data import by_user, synthetic_like, train_test_split
from secemb.sim.local import InProcessServers, LocalServerLink, server_configs
from secemb.sim.settings import cluster_settings, dp_plan_of
from secemb.errors import InvalidParameters
from secemb.models import MatrixFactorization
from secemb.privacy import DPSettings
from secemb.protocols import get_protocol
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig

USERS = (3, 5, 8)
CLIP = 0.02


def _setup():
    tr, _ = train_test_split(synthetic_like(60, 50, 900, seed=3), 0.2, seed=0)
    model = MatrixFactorization(dim=8, reg=0.01)
    protocol = get_protocol("secemb", layout="cuckoo", relay=True)
    cfg = TrainConfig(epochs=2, users_per_round=20, m_prime=20, sampling="poisson", dp=DPSettings(4.0, 1e-5, CLIP))
    return tr, model, protocol, cfg, cluster_settings(model, protocol, tr, cfg, min_users=2)


def _participate_and_check(tr, model, protocol, cfg, client_for) -> None:
    """Every user of USERS takes part with the SDK; its upload is clipped as the plan says."""
    plan = dp_plan_of(model, protocol, tr, cfg)
    assert plan is not None and plan.central
    for u in USERS:
        dc = client_for(u)
        info = dc.round_info()
        assert info.clip() == plan.clip and info.training["dp_sigma"] == plan.sigma_ring
        session = Device(dc, *by_user(tr).of(u), rng=np.random.default_rng(u)).participate(info)
        fp = info.fixed_point()
        rows, dense = fp.decode(session.g_ring), fp.decode(session.d_ring)
        sent = math.sqrt(float(np.sum(rows**2) + np.sum(dense**2)))
        raw = math.sqrt(float(np.sum(session.result.row_grads**2) + np.sum(session.result.dense_grad**2)))
        assert raw > 2 * CLIP  # the device had more to send
        assert sent <= CLIP + 2.0**-fp.frac_bits * math.sqrt(rows.size + dense.size)  # clipped (up to the grid)
        assert sent > CLIP / 2  # scaled, not zeroed
        assert np.abs(np.concatenate([rows.ravel(), dense])).max() <= plan.clip.coordinate_bound(fp, info.n_p)


def test_in_process_devices_clip_to_the_announced_bound():
    tr, model, protocol, cfg, settings = _setup()
    servers = InProcessServers(settings, protocol, model)
    leader, follower = servers.nodes
    try:
        leader.open_round(participants=list(USERS))
        _participate_and_check(tr, model, protocol, cfg, lambda u: DeviceClient.over(
            u, (LocalServerLink(leader, u, servers.tp), LocalServerLink(follower, u, servers.tp)), min_users=2))
    finally:
        servers.stop()


def test_noise_without_a_clip_bound_is_refused():
    *_, settings = _setup()
    with pytest.raises(InvalidParameters, match=r"\[privacy\] sigma and clip go together"):
        server_configs({**settings, "dp_clip": 0.0})
    with pytest.raises(InvalidParameters, match=r"\[privacy\] sigma and clip go together"):
        server_configs({**settings, "dp_sigma": 0.0})
    assert "dp_clip" not in server_configs({**settings, "dp_sigma": 0.0, "dp_clip": 0.0})[0].shared_doc()


def test_standalone_dp_fedrec_devices_clip_to_the_announced_protocol_options():
    # local DP: the servers add nothing; the deployment announces the devices' own noise scale and
    # the clip bound it is calibrated for as the protocol options sigma and clip ([protocol.options]);
    # a device of the SDK clips to them -- the ClipSpec of the run's plan -- before it noises its upload
    tr, _ = train_test_split(synthetic_like(60, 50, 900, seed=3), 0.2, seed=0)
    model = MatrixFactorization(dim=8, reg=0.01)
    cfg = TrainConfig(epochs=2, users_per_round=20, m_prime=20, dp=DPSettings(4.0, 1e-5, CLIP), ring_bits=64)
    plan = dp_plan_of(model, get_protocol("dp-fedrec", layout="full"), tr, cfg)
    assert plan is not None and not plan.central
    protocol = get_protocol("dp-fedrec", layout="full", sigma=plan.sigma_ring, clip=CLIP)
    settings = cluster_settings(model, protocol, tr, TrainConfig(epochs=2, users_per_round=20, m_prime=20,
                                                                 ring_bits=64), min_users=2)
    assert settings["protocol_options"] == {"sigma": plan.sigma_ring, "clip": CLIP} and settings["dp_sigma"] == 0
    servers = InProcessServers(settings, protocol, model)
    leader, follower = servers.nodes
    try:
        leader.open_round(participants=list(USERS))
        for u in USERS:
            links = (LocalServerLink(leader, u, servers.tp), LocalServerLink(follower, u, servers.tp))
            dc = DeviceClient.over(u, links, min_users=2)
            info = dc.round_info()
            assert "dp_clip" not in info.training and info.clip() == plan.clip
            session = Device(dc, *by_user(tr).of(u), rng=np.random.default_rng(u)).participate(info)
            fp = info.fixed_point()
            rows, dense = fp.decode(session.g_ring), fp.decode(session.d_ring)
            sent = math.sqrt(float(np.sum(rows**2) + np.sum(dense**2)))
            raw = math.sqrt(float(np.sum(session.result.row_grads**2) + np.sum(session.result.dense_grad**2)))
            assert raw > 2 * CLIP and CLIP / 2 < sent <= CLIP + 2.0**-fp.frac_bits * math.sqrt(rows.size + dense.size)
    finally:
        servers.stop()
    with pytest.raises(InvalidParameters, match="sigma and clip go together"):
        get_protocol("dp-fedrec", sigma=plan.sigma_ring)
    with pytest.raises(InvalidParameters, match="sigma and clip go together"):
        get_protocol("dp-fedrec", clip=CLIP)


@pytest.mark.slow
def test_devices_clip_over_https(tmp_path):
    tr, model, protocol, cfg, settings = _setup()
    with LocalCluster(tmp_path / "cluster", **settings) as cluster:
        cluster.start()
        with cluster.admin(0) as admin:
            rid = admin.post_json("/v1/admin/rounds", {"participants": list(USERS), "deadline_s": 60})["round_id"]

            def client_for(u: int) -> DeviceClient:
                k0, k1 = cluster.device_keys(u)
                return DeviceClient(u, cluster.url(0), cluster.url(1), k0, k1, tls=cluster.tls, min_users=2)

            _participate_and_check(tr, model, protocol, cfg, client_for)
            end = time.monotonic() + 60
            status = admin.get_json(f"/v1/rounds/{rid}/status")
            while status["state"] not in ("committed", "aborted") and time.monotonic() < end:
                time.sleep(0.1)
                status = admin.get_json(f"/v1/rounds/{rid}/status")
            assert status["state"] == "committed" and status["included"] == list(USERS)
