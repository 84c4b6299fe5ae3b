"""Issue 14: the in-process engine's lanes (devices prepared and finished by the calling
thread while lane threads take earlier parts of the round through both servers) give the
model of the plain sequential run, bit for bit, with and without relay, for a feature model
too, and with a device that drops out mid-round."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data import synthetic_like
from secemb.engine.driver import run
from secemb.engine.local import InProcessServers
from secemb.engine.settings import cluster_settings
from secemb.models import FactorizationMachine, MatrixFactorization
from secemb.protocols import get_protocol
from secemb.training import TrainConfig


def _train(model, protocol, data, cfg, lanes, behavior=None):
    servers = InProcessServers(cluster_settings(model, protocol, data, cfg), protocol, model, lanes=lanes)
    try:
        return run(servers.servers(), model, protocol, data, None, cfg, behavior=behavior)
    finally:
        servers.stop()


@pytest.mark.parametrize(("relay", "model"), [(True, "mf"), (False, "mf"), (True, "fm")])
def test_lanes_give_the_sequential_model(relay, model):
    data = synthetic_like(48, 40, 700, seed=3)
    cfg = TrainConfig(epochs=2, users_per_round=24, m_prime=12, seed=11)
    protocol = get_protocol("secemb", layout="cuckoo", relay=relay)
    make = (lambda: MatrixFactorization(dim=4, reg=0.01)) if model == "mf" else (lambda: FactorizationMachine(dim=4))
    one = _train(make(), protocol, data, cfg, lanes=1)
    three = _train(make(), protocol, data, cfg, lanes=3)  # 6 parts of 4 devices, 3 threads
    assert one.model_sha256 == three.model_sha256
    assert np.array_equal(one.table, three.table)
    # the same bytes crossed: traffic does not depend on the split
    assert one.upload_bytes_per_user_round == three.upload_bytes_per_user_round
    assert one.server_bytes_per_round == three.server_bytes_per_round


def test_lanes_give_the_sequential_model_when_devices_drop_out():
    data = synthetic_like(48, 40, 700, seed=4)
    cfg = TrainConfig(epochs=1, users_per_round=24, m_prime=12, seed=5)
    protocol = get_protocol("secemb", layout="cuckoo", relay=True)

    def behavior(round_index: int, user: int) -> str | None:  # a few devices in every part
        return "drop" if user % 7 == 3 else None

    one = _train(MatrixFactorization(dim=4, reg=0.01), protocol, data, cfg, 1, behavior)
    three = _train(MatrixFactorization(dim=4, reg=0.01), protocol, data, cfg, 3, behavior)
    assert one.model_sha256 == three.model_sha256
    assert one.participations == three.participations
