"""The representation split: server score of the clean H plus the device's offset equals the
model's own prediction, for MF, NCF, FM and DeepFM."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data.features import FeatureSet
from secemb.errors import InvalidParameters
from secemb.inference.representation import representation_for
from secemb.models import get_model


def _features(rng: np.random.Generator, users: int, items: int) -> FeatureSet:
    return FeatureSet("t", (rng.random((users, 7)) < 0.4).astype(np.uint8),
                      (rng.random((items, 18)) < 0.3).astype(np.uint8))


@pytest.mark.parametrize("name", ["mf", "ncf", "fm", "deepfm"])
def test_score_plus_offset_is_the_models_prediction(name: str) -> None:
    rng = np.random.default_rng(3)
    users, items = 6, 11
    kw = {"features": _features(rng, users, items)} if name in ("fm", "deepfm") else {}
    model = get_model(name, dim=8, reg=0.01, **kw)
    table, dense = model.init_public(items, rng)
    width = model.sparse_width - getattr(model, "frozen_columns", 0)  # not the feature codes
    table[:, :width] += rng.normal(0, 0.3, (items, width))
    dense = dense + rng.normal(0, 0.2, dense.shape)  # every weight non-zero, w_x included
    params = model.init_private(users, rng) + rng.normal(0, 0.3, (users, model.private_size))
    u = np.repeat(np.arange(users), items)
    i = np.tile(np.arange(items), users)
    want = model.predict(table, dense, params, u, i)
    rep = representation_for(model, dense)
    user_x = kw["features"].user.astype(np.float64) if kw else np.zeros((users, 0))
    h, offset = rep.clean(params, user_x)
    assert h.shape == (users, rep.rows, 8)
    got = rep.score(rep.summary(h)[u], table[i]) + offset[u]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_sequential_model_refused() -> None:
    model = get_model("sasrec", dim=8, reg=0.0)
    with pytest.raises(InvalidParameters, match="supports mf"):
        representation_for(model, np.zeros(model.dense_size))
