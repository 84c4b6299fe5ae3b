"""The trained model object (issue 13, items 9 and 13): save and load round trips for a rating,
a feature and a sequential model, the device state serialized by the store itself, and
recommend's contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.models import AdamConfig, UserStore
from secemb.training import Experiment, TrainedModel


def test_user_store_state_dict_round_trip() -> None:
    store = UserStore(np.arange(6.0).reshape(3, 2), AdamConfig(lr=0.1))
    store.state(1).apply_gradient(np.array([1.0, -2.0]))
    back = UserStore.from_state_dict(store.state_dict(), store.optimizer)
    assert np.array_equal(back.params, store.params) and back.steps(1) == 1 and back.steps(0) == 0
    back.state(1).apply_gradient(np.array([1.0, -2.0]))  # the moments came along: same second step
    store.state(1).apply_gradient(np.array([1.0, -2.0]))
    assert np.array_equal(back.params, store.params)


@pytest.mark.parametrize(("key", "value"), [("adam_m", np.zeros((3, 3))), ("adam_t", np.zeros(3)),
                                            ("params", np.zeros((3, 2), dtype=np.float32))])
def test_user_store_from_state_dict_names_the_bad_array(key: str, value: np.ndarray) -> None:
    state = UserStore(np.zeros((3, 2)), AdamConfig()).state_dict()
    state[key] = value
    with pytest.raises(InvalidParameters, match=key):
        UserStore.from_state_dict(state, AdamConfig())


@pytest.mark.parametrize("model", ["mf", "fm", "sasrec"])
def test_save_and_load_give_the_same_model_and_recommendations(model: str, tmp_path: Path) -> None:
    result = Experiment(dataset="synthetic-mini", model=model, protocol="plaintext", epochs=1, dim=8).run()
    trained = result.model
    loaded = TrainedModel.load(trained.save(tmp_path / "m"))
    assert loaded.model.spec() == trained.model.spec() and loaded.model_sha256 == result.model_sha256
    assert np.array_equal(loaded.user_store.params, trained.user_store.params)
    assert loaded.user_store.state_dict().keys() == trained.user_store.state_dict().keys()
    for user in (0, 50):
        a, b = trained.recommend(user, 10), loaded.recommend(user, 10)
        assert np.array_equal(a.items, b.items) and np.array_equal(a.scores, b.scores)
        assert not set(a.items.tolist()) & set(trained.rated(user).tolist())
    assert loaded.info["protocol"] == "plaintext" and loaded.info["dataset"] == "synthetic-mini"


def test_recommend_returns_every_unrated_item_when_k_is_larger() -> None:
    trained = Experiment(dataset="synthetic-mini", protocol="plaintext", epochs=1, dim=4).run().model
    rec = trained.recommend(3, k=10_000)
    assert rec.items.size == trained.num_items - trained.rated(3).size
    with pytest.raises(InvalidParameters, match="k must be an int >= 1"):
        trained.recommend(3, k=0)
