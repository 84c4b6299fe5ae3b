"""The synthetic generator: determinism, shape, long tails, learnability, stand-in shapes."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data import load_dataset, synthetic_like, train_test_split
from secemb.data.synthetic import SYNTHETIC_SHAPES
from secemb.errors import InvalidParameters


@pytest.fixture(scope="module")
def default():
    return load_dataset("synthetic")


def _pairs(d):
    return d.users * d.num_items + d.items


def test_default_shape_and_types(default):
    d = default
    assert d.name == "synthetic"
    assert (d.num_users, d.num_items, len(d)) == (943, 1_682, 35_000)
    assert d.users.dtype == d.items.dtype == d.timestamps.dtype == np.int64
    assert d.ratings.dtype == np.float32
    assert set(np.unique(d.ratings).tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert 3.2 < d.ratings.mean() < 3.8 and 0.9 < d.ratings.std() < 1.3


def test_deterministic_in_seed(default):
    again = load_dataset("synthetic", seed=0)
    for f in ("users", "items", "ratings", "timestamps"):
        assert np.array_equal(getattr(default, f), getattr(again, f))
    other = load_dataset("synthetic", seed=1)
    assert not np.array_equal(default.items, other.items)


def test_no_duplicates_and_min_five_per_user(default):
    assert np.unique(_pairs(default)).size == len(default)
    assert np.bincount(default.users, minlength=default.num_users).min() >= 5


def test_long_tails(default):
    item_counts = np.sort(np.bincount(default.items, minlength=default.num_items))[::-1]
    top10 = item_counts[: default.num_items // 10].sum() / len(default)
    assert top10 > 0.35  # ML-100K: 0.43
    user_counts = np.bincount(default.users, minlength=default.num_users)
    assert user_counts.max() > 8 * np.median(user_counts)


def test_sorted_by_user_then_time(default):
    u, t = default.users, default.timestamps
    assert (np.diff(u) >= 0).all()
    same = u[1:] == u[:-1]
    assert (np.diff(t)[same] >= 0).all()


def _als_rmse(train, test, k=8, lam=5.0, iters=6):
    """Tiny biased ALS (numpy) to check the data carries learnable low-rank signal."""
    rng = np.random.default_rng(0)
    n, m = train.num_users, train.num_items
    mu = float(train.ratings.mean())
    bu, bi = np.zeros(n), np.zeros(m)
    p, q = rng.normal(0, 0.1, (n, k)), rng.normal(0, 0.1, (m, k))
    for _ in range(iters):
        for side in (0, 1):
            idx, other, fixed, size = (
                (train.users, train.items, q, n) if side == 0 else (train.items, train.users, p, m)
            )
            feats = np.c_[fixed[other], np.ones(other.shape[0])]
            res = train.ratings - mu - (bi[train.items] if side == 0 else bu[train.users])
            a = np.zeros((size, k + 1, k + 1))
            b = np.zeros((size, k + 1))
            np.add.at(a, idx, feats[:, :, None] * feats[:, None, :])
            np.add.at(b, idx, feats * res[:, None])
            sol = np.linalg.solve(a + lam * np.eye(k + 1), b[..., None])[..., 0]
            if side == 0:
                p, bu = sol[:, :k], sol[:, k]
            else:
                q, bi = sol[:, :k], sol[:, k]
    pred = mu + bu[test.users] + bi[test.items] + (p[test.users] * q[test.items]).sum(1)
    return float(np.sqrt(np.mean((np.clip(pred, 1, 5) - test.ratings) ** 2)))


def test_matrix_factorisation_beats_global_mean(default):
    train, test = train_test_split(default, 0.2, seed=0)
    global_rmse = float(np.sqrt(np.mean((test.ratings - train.ratings.mean()) ** 2)))
    assert _als_rmse(train, test) < 0.9 * global_rmse


def test_synthetic_like_small_and_dense_shapes():
    d = synthetic_like(10, 20, 100, seed=5)
    assert (d.num_users, d.num_items, len(d)) == (10, 20, 100)
    assert np.unique(_pairs(d)).size == 100
    full = synthetic_like(3, 5, 15)  # every user rates every item
    assert np.array_equal(np.sort(_pairs(full)), np.arange(15))
    named = synthetic_like(4, 6, 20, name="tiny")
    assert named.name == "tiny"
    assert synthetic_like(4, 6, 20).name == "synthetic-4x6x20"


@pytest.mark.parametrize(
    "args, message",
    [
        ((10, 20, 49), "num_ratings must be in"),  # fewer than 5 per user
        ((3, 5, 16), "num_ratings must be in"),  # more than users x items
        ((0, 5, 0), "num_users must be an int >= 1, got 0"),
        ((3, 4, 12), "min_per_user=5 exceeds num_items=4"),
        ((3.0, 5, 15), "num_users must be an int >= 1, got 3.0"),
    ],
)
def test_synthetic_like_rejects_impossible_shapes(args, message):
    with pytest.raises(InvalidParameters, match=message):
        synthetic_like(*args)


def test_stand_in_shapes_follow_table_7():
    assert SYNTHETIC_SHAPES == {
        "synthetic": (943, 1_682, 35_000),
        "synthetic-mini": (120, 300, 3_000),  # a smoke-test size, not a paper dataset
        "synthetic-ml-1m": (6_040, 3_883, 1_000_209),
        "synthetic-ml-10m": (69_878, 10_681, 10_000_054),
        "synthetic-ml-25m": (162_541, 62_423, 25_000_095),
        "synthetic-yelp": (10_000, 93_386, 1_007_956),
    }


def test_ml1m_stand_in_is_built_quickly():
    d = load_dataset("synthetic-ml-1m", seed=2)
    assert (d.num_users, d.num_items, len(d)) == (6_040, 3_883, 1_000_209)
    assert np.bincount(d.users, minlength=d.num_users).min() >= 5
    assert np.unique(_pairs(d)).size == len(d)
