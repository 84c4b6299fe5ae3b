"""The in-process engine holds one device's round buffers at a time, not a round's worth.

The staged schedule keeps every device's :class:`~secemb.client.device.RoundSession` until the
round closes.  Before :meth:`RoundSession.release`, each session kept its retrieved rows, the
dense vector, the step's gradients, the encoded gradients and the upload messages: DeepFM at
d = 128 (7 M dense values) reached 22.9 GB resident for 100 devices a round on ML-100K (6.9 GB
after; the rest is the servers' per-user uploads, kept until the round's included set is
known).  The check is structural: weak references to each device's gradient arrays, counted
when the next device trains -- no timing, no process-wide memory reading.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import secemb.client.device as device_mod
from secemb.client.device import RoundSession
from secemb.data import synthetic_like, train_test_split
from secemb.errors import ProtocolError
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.sim import devices
from secemb.training import TrainConfig, train


@pytest.fixture(scope="module")
def data():
    return train_test_split(synthetic_like(30, 40, 400, seed=3), 0.2, seed=0)


def _alive_when_training(monkeypatch, data, protocol: str, verify: bool, group: int = 1) -> list[int]:
    """Train one epoch (rounds of 10 devices) with the driver taking ``group`` devices at a time
    through the round after retrieval (``sim.devices.group_size``: 1 for a model whose buffers
    fill its bound, as DeepFM's do); at each device's step, how many arrays of the earlier
    devices' steps (row and dense gradients, their encodings) are still alive."""
    monkeypatch.setattr(devices, "group_size", lambda rc, itemsize: group)
    refs: list[weakref.ref] = []
    alive: list[int] = []
    real = device_mod.local_update

    def spy(*args, **kwargs):
        alive.append(sum(r() is not None for r in refs))
        g_ring, d_ring, result = real(*args, **kwargs)
        refs.extend(weakref.ref(a) for a in (g_ring, d_ring, result.row_grads, result.dense_grad))
        return g_ring, d_ring, result

    monkeypatch.setattr(device_mod, "local_update", spy)
    train(MatrixFactorization(dim=4), get_protocol(protocol, layout="full", relay=False), *data,
          TrainConfig(epochs=1, users_per_round=10, m_prime=8, verify=verify, schedule="staged"))
    assert len(alive) == 30
    return alive


@pytest.mark.parametrize("protocol", ["plaintext", "secemb"])
def test_a_staged_round_keeps_no_earlier_device_gradients(monkeypatch, data, protocol):
    assert max(_alive_when_training(monkeypatch, data, protocol, verify=False)) == 0


def test_a_staged_round_keeps_only_its_group_s_gradients(monkeypatch, data):
    """In groups of 4 (10 devices a round: 4, 4, 2), the four arrays of each earlier device of
    the same group, none of an earlier group's."""
    alive = _alive_when_training(monkeypatch, data, "secemb", verify=False, group=4)
    assert alive == [0, 4, 8, 12, 0, 4, 8, 12, 0, 4] * 3


def test_a_verified_round_keeps_only_the_encoded_gradients_it_checks(monkeypatch, data):
    alive = _alive_when_training(monkeypatch, data, "plaintext", verify=True)
    # two encoded arrays per earlier device of the same round (the check sums them at close),
    # plus at most the previous round's last device; the float gradients are gone
    assert alive[:10] == [2 * k for k in range(10)]
    assert all(a <= 2 * (k % 10 + 1) for k, a in enumerate(alive))


def test_release_belongs_after_upload():
    session = RoundSession.__new__(RoundSession)
    session._stage = 3
    with pytest.raises(ProtocolError, match="after upload"):
        session.release()
    np.testing.assert_equal(session._stage, 3)
