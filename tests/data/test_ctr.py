"""Click-through samples: the Taobao-shaped generator and MovieLens as clicks."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data import RatingData
from secemb.data.ctr import TAOBAO_SHAPES, TaobaoShaped, movielens_clicks, split_clicks
from secemb.errors import InvalidParameters


def test_taobao_shape_counts_and_determinism() -> None:
    full = TAOBAO_SHAPES["taobao"]  # Table IV of the paper
    assert (full.users, full.goods, full.categories, full.samples_per_client) == (49_023, 143_534, 4_815, 323)
    world = TaobaoShaped("taobao-mini", seed=1)
    a = world.clients(np.array([3, 5]))
    b = TaobaoShaped("taobao-mini", seed=1).clients(np.array([5]))
    # a client's samples depend on (seed, user) only
    assert np.array_equal(a.target[a.user == 5], b.target) and np.array_equal(a.history[a.user == 5], b.history)
    assert set(np.unique(a.label)) <= {0.0, 1.0}
    assert a.goods_category.shape == (2000,) and a.goods_category.max() < 60
    with pytest.raises(InvalidParameters):
        world.clients(np.array([5, 3]))
    with pytest.raises(InvalidParameters):
        TaobaoShaped("taobao-huge")


def test_histories_are_earlier_clicks_only() -> None:
    # user 0 rates items 0..5 at t = 0..5; ratings >= 4 are clicks
    r = RatingData("toy", 1, 6, np.zeros(6, np.int64), np.arange(6, dtype=np.int64),
                   np.array([5, 1, 4, 2, 5, 3], np.float32), np.arange(6, dtype=np.int64))
    genres = np.eye(6, 3, dtype=np.uint8)  # items 0..2 have genres 0..2, items 3..5 none
    d = movielens_clicks(r, genres, history=2)
    assert d.label.tolist() == [1, 0, 1, 0, 1, 0]
    assert d.history.tolist() == [[-1, -1], [-1, 0], [-1, 0], [0, 2], [0, 2], [2, 4]]
    assert d.goods_category.tolist() == [0, 1, 2, 3, 3, 3] and d.num_categories == 4
    train, test = split_clicks(d, 0.34)
    assert len(train) == 3 and test.target.tolist() == [3, 4, 5]


def test_movielens_clicks_needs_timestamps() -> None:
    r = RatingData("toy", 1, 2, np.zeros(2, np.int64), np.arange(2, dtype=np.int64), np.ones(2, np.float32))
    with pytest.raises(InvalidParameters):
        movielens_clicks(r, np.zeros((2, 1), np.uint8))
