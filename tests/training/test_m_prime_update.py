"""The periodic update of m' (SecEmb Appendix L.2; ``TrainConfig.m_prime_update``): the Eq. 11
count runs again between epochs through the same secure count phase (the servers open the mean
only), later rounds use the new m', and server 1 never releases count sums over two different
user sets (which would give away the counts of the users in the difference)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.client.device import DeviceClient
from secemb.data import synthetic_like
from secemb.errors import InvalidParameters
from secemb.models import get_model
from secemb.protocols import get_protocol
from secemb.round.results import TrainConfig
from secemb.server.count import CountPhase
from secemb.server.errors import Conflict
from secemb.training.loop import train


@pytest.fixture(scope="module")
def data():
    return synthetic_like(24, 300, 400, seed=1)


def _run(data, update: int, epochs: int = 3):
    cfg = TrainConfig(epochs=epochs, users_per_round=8, seed=2, m_prime_update=update)
    return train(get_model("mf", dim=4), get_protocol("secemb", layout="full"), data, None, cfg)


def test_counts_that_grow_move_m_prime_and_the_traffic(data, monkeypatch):
    # a dynamic setting: every device reports 6 more distinct items at each count than the last
    # (new ratings arriving), so the opened mean -- and with it m' = ceil(2.5 mean) -- grows
    calls: dict[int, int] = {}
    real = DeviceClient.send_count

    def growing(self, count, ring_bits):
        k = calls[self.user_id] = calls.get(self.user_id, -1) + 1
        return real(self, count + 6 * k, ring_bits)

    monkeypatch.setattr(DeviceClient, "send_count", growing)
    grown = _run(data, update=1)
    updates = grown.config["m_prime_updates"]
    first = grown.config["m_prime"]
    assert [u["epoch"] for u in updates] == [2, 3]
    mean0 = grown.config["mean_rating_count"]
    for k, u in enumerate(updates, start=1):
        assert u["mean_count"] == pytest.approx(mean0 + 6 * k)
        assert u["m_prime"] == min(int(np.ceil(2.5 * u["mean_count"])), 300)
    assert first < updates[0]["m_prime"] < updates[1]["m_prime"]
    assert set(calls.values()) == {2}  # every device counted three times
    # SecEmb's upload is m' keys and m' correction words: later epochs send more bytes
    monkeypatch.setattr(DeviceClient, "send_count", real)
    fixed = _run(data, update=0)
    assert grown.upload_bytes_per_user_round > fixed.upload_bytes_per_user_round
    assert grown.count_bytes_per_user == pytest.approx(3 * fixed.count_bytes_per_user)


def test_static_counts_keep_m_prime_and_the_model(data):
    every = _run(data, update=2, epochs=3)
    never = _run(data, update=0, epochs=3)
    assert every.config["m_prime_updates"] == [{"epoch": 3, "m_prime": never.config["m_prime"],
                                                "mean_count": never.config["mean_rating_count"]}]
    assert every.model_sha256 == never.model_sha256


def test_server1_releases_recounts_over_the_first_set_only():
    phase = CountPhase(np.dtype(np.uint32))
    for attempt in range(2):
        phase.open(None)
        for u in range(5):
            phase.submit(u, np.array([attempt + u], np.uint32))
        phase.freeze()
        assert int(phase.total([0, 1, 2, 3, 4], once=True)[0]) == sum(attempt + u for u in range(5))
    phase.open(None)
    for u in range(5):
        phase.submit(u, np.array([9], np.uint32))
    phase.freeze()
    with pytest.raises(Conflict, match="recount must cover the users of the first count"):
        phase.total([0, 1, 2, 3], once=True)  # minus user 4: would open user 4's new count


def test_m_prime_update_needs_m_prime_from_the_counts():
    with pytest.raises(InvalidParameters, match="m_prime_update"):
        TrainConfig(m_prime=10, m_prime_update=1)
    with pytest.raises(InvalidParameters, match="m_prime_update"):
        TrainConfig(m_prime_update=-1)
