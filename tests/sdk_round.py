"""A device's round through the SDK up to its upload, shared by the tests that drive devices by hand
(retrieve, train on public test data, then upload and prove as each test needs)."""

from __future__ import annotations

import numpy as np

from secemb.client.device import DeviceClient, RoundInfo, RoundSession


def trained(client: DeviceClient, info: RoundInfo, items: np.ndarray, ratings: np.ndarray) -> RoundSession:
    """Device ``client``'s session of the round ``info`` announces, retrieved and trained on ``items`` and
    ``ratings`` (its local step from a fresh user state: public test data), ready to upload."""
    model = info.make_model()
    session = RoundSession(client, info, task=model.task, clip=info.clip())
    session.prepare(items, ratings)
    session.retrieve()
    state = model.new_user_store(1, np.random.default_rng(0), info.adam()).state(0)  # public test data only
    session.train(lambda rows, dense, batch: model.local_step(rows, dense, state, batch))
    return session
