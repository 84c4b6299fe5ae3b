"""RatingData validation, train_test_split and the per-user CSR view."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data import RatingData, UserRatings, by_user, load_dataset, train_test_split
from secemb.errors import InvalidParameters


def _data(users, items, ratings, num_users=None, num_items=None, timestamps=None):
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    return RatingData(
        "t",
        int(users.max()) + 1 if num_users is None else num_users,
        int(items.max()) + 1 if num_items is None else num_items,
        users,
        items,
        np.asarray(ratings, dtype=np.float32),
        None if timestamps is None else np.asarray(timestamps, dtype=np.int64),
    )


# ----------------------------------------------------------------------------- RatingData


def test_rating_data_accepts_valid_arrays():
    d = _data([0, 1, 1], [2, 0, 1], [1, 2, 3], timestamps=[5, 6, 7])
    assert d.num_ratings == len(d) == 3
    assert "num_ratings=3" in repr(d)


def test_rating_data_accepts_empty():
    e = np.zeros(0, dtype=np.int64)
    d = RatingData("e", 0, 0, e, e.copy(), np.zeros(0, dtype=np.float32), None)
    assert len(d) == 0


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("users", np.array([0, 1], dtype=np.int32), "users must have dtype int64"),
        ("items", np.array([0, 1], dtype=np.int64), "items must have length 3"),
        ("ratings", np.array([1, 2, 3], dtype=np.float64), "ratings must have dtype float32"),
        ("ratings", [1.0, 2.0, 3.0], "ratings must be a numpy array"),
        ("timestamps", np.array([1, 2], dtype=np.int64), "timestamps must have length 3"),
        ("users", np.array([[0, 1, 1]], dtype=np.int64), "users must be 1-D"),
    ],
)
def test_rating_data_rejects_bad_arrays(field, value, message):
    kwargs = dict(
        name="t",
        num_users=2,
        num_items=3,
        users=np.array([0, 1, 1], dtype=np.int64),
        items=np.array([2, 0, 1], dtype=np.int64),
        ratings=np.array([1, 2, 3], dtype=np.float32),
        timestamps=None,
    )
    kwargs[field] = value
    with pytest.raises(InvalidParameters, match=message):
        RatingData(**kwargs)


def test_rating_data_rejects_ids_out_of_range():
    with pytest.raises(InvalidParameters, match=r"users must lie in \[0, num_users=2\), found 2"):
        _data([0, 2], [0, 0], [1, 1], num_users=2)
    with pytest.raises(InvalidParameters, match="found -1"):
        _data([0, 1], [0, -1], [1, 1], num_items=3)
    with pytest.raises(InvalidParameters, match="num_items must be an int"):
        _data([0, 1], [0, 1], [1, 1], num_items=2.0)


def test_rating_data_rejects_non_finite_rating():
    with pytest.raises(InvalidParameters, match="finite"):
        _data([0, 1], [0, 1], [1, np.nan])


def test_rating_data_is_frozen():
    d = _data([0], [0], [1])
    with pytest.raises(AttributeError):
        d.num_users = 5  # type: ignore[misc]


# ----------------------------------------------------------------------------- split


def test_split_partitions_and_keeps_shape():
    data = load_dataset("synthetic", seed=3)
    train, test = train_test_split(data, 0.2, seed=1)
    assert train.num_users == test.num_users == data.num_users
    assert train.num_items == test.num_items == data.num_items
    assert train.name == test.name == data.name
    assert len(train) + len(test) == len(data)
    assert abs(len(test) - 0.2 * len(data)) <= 0.01 * len(data)
    key = lambda d: d.users * data.num_items + d.items  # noqa: E731 (no duplicate pairs)
    assert np.intersect1d(key(train), key(test)).size == 0
    both = np.sort(np.concatenate([key(train), key(test)]))
    assert np.array_equal(both, np.sort(key(data)))
    assert train.timestamps is not None and test.timestamps is not None


def test_split_is_deterministic_in_seed():
    data = load_dataset("synthetic")
    a, _ = train_test_split(data, 0.2, seed=7)
    b, _ = train_test_split(data, 0.2, seed=7)
    c, _ = train_test_split(data, 0.2, seed=8)
    assert np.array_equal(a.users, b.users) and np.array_equal(a.items, b.items)
    assert not (np.array_equal(a.users, c.users) and np.array_equal(a.items, c.items))


def test_split_keeps_a_training_rating_for_every_user():
    # many users with 1 or 2 ratings and a huge test fraction: the fix-up rule must kick in
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(300), rng.integers(1, 4, 300))
    items = np.concatenate([np.arange(c) for c in np.bincount(users)])
    data = _data(users, items, np.ones(users.shape[0]))
    for seed in range(5):
        train, test = train_test_split(data, 0.9, seed=seed)
        assert (np.bincount(train.users, minlength=300) >= 1).all()
        assert len(train) + len(test) == len(data)
        assert len(test) <= round(0.9 * len(data))


def test_split_user_without_ratings_is_fine():
    data = _data([0, 0, 2, 2], [0, 1, 0, 1], [1, 2, 3, 4], num_users=4)
    train, test = train_test_split(data, 0.5, seed=0)
    counts = np.bincount(train.users, minlength=4)
    assert counts[0] >= 1 and counts[2] >= 1 and counts[1] == counts[3] == 0


def test_split_zero_fraction_gives_empty_test():
    data = _data([0, 1], [0, 1], [1, 2])
    train, test = train_test_split(data, 0.0)
    assert len(train) == 2 and len(test) == 0


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5, True, "0.2"])
def test_split_rejects_bad_fraction(fraction):
    with pytest.raises(InvalidParameters, match="test_fraction"):
        train_test_split(_data([0], [0], [1]), fraction)


# ----------------------------------------------------------------------------- by_user


def test_by_user_groups_and_sorts():
    data = _data([2, 0, 2, 0, 2], [5, 3, 1, 0, 3], [1, 2, 3, 4, 5], num_users=4, num_items=6)
    ur = by_user(data)
    assert isinstance(ur, UserRatings)
    assert ur.indptr.tolist() == [0, 2, 2, 5, 5]
    assert ur.counts().tolist() == [2, 0, 3, 0]
    assert ur.counts().dtype == np.int64
    items, ratings = ur.of(2)
    assert items.tolist() == [1, 3, 5] and ratings.tolist() == [3, 5, 1]
    assert ur.of(0)[0].tolist() == [0, 3] and ur.of(0)[1].tolist() == [4, 2]
    assert ur.of(1)[0].size == 0
    assert np.shares_memory(ur.of(2)[0], ur.items)  # views, not copies
    assert ur.items.dtype == np.int64 and ur.ratings.dtype == np.float32


def test_by_user_matches_data_on_synthetic():
    data = load_dataset("synthetic")
    ur = by_user(data)
    assert np.array_equal(ur.counts(), np.bincount(data.users, minlength=data.num_users))
    for u in (0, 17, data.num_users - 1):
        items, ratings = ur.of(u)
        mine = data.users == u
        order = np.argsort(data.items[mine])
        assert np.array_equal(items, data.items[mine][order])
        assert np.array_equal(ratings, data.ratings[mine][order])


@pytest.mark.parametrize("user", [-1, 4, 1.0, True])
def test_user_ratings_of_rejects_bad_user(user):
    ur = by_user(_data([0, 3], [0, 1], [1, 2]))
    with pytest.raises(InvalidParameters, match="user"):
        ur.of(user)


def test_user_ratings_rejects_inconsistent_indptr():
    with pytest.raises(InvalidParameters, match="indptr"):
        UserRatings(
            np.array([0, 2, 1], dtype=np.int64),
            np.zeros(1, dtype=np.int64),
            np.zeros(1, dtype=np.float32),
        )


def test_by_user_keeps_timestamps_and_the_interaction_order():
    # user 0 rated items 7, 2, 5 at times 30, 10, 10; user 1 item 3 at time 5
    users = np.array([0, 0, 1, 0], dtype=np.int64)
    items = np.array([7, 2, 3, 5], dtype=np.int64)
    ratings = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    stamps = np.array([30, 10, 5, 10], dtype=np.int64)
    data = RatingData("t", 2, 8, users, items, ratings, stamps)
    by_item = by_user(data)
    assert by_item.order == "item"
    assert by_item.of(0)[0].tolist() == [2, 5, 7] and by_item.timestamps_of(0).tolist() == [10, 10, 30]
    by_time = by_user(data, order="time")
    assert by_time.of(0)[0].tolist() == [2, 5, 7]  # ties at t=10 broken by item id
    assert by_time.of(0)[1].tolist() == [2.0, 4.0, 1.0] and by_time.timestamps_of(1).tolist() == [5]
    later = RatingData("t", 1, 8, np.zeros(3, np.int64), np.array([1, 2, 3], np.int64),
                       np.ones(3, np.float32), np.array([3, 2, 1], np.int64))
    assert by_user(later, order="time").of(0)[0].tolist() == [3, 2, 1]
    assert by_user(later).of(0)[0].tolist() == [1, 2, 3]


def test_by_user_refuses_time_order_without_timestamps_and_unknown_orders():
    data = RatingData("t", 1, 3, np.zeros(2, np.int64), np.array([0, 1], np.int64), np.ones(2, np.float32))
    with pytest.raises(InvalidParameters, match="needs timestamps"):
        by_user(data, order="time")
    with pytest.raises(InvalidParameters, match="order must be one of"):
        by_user(data, order="random")
    with pytest.raises(InvalidParameters, match="no timestamps"):
        by_user(data).timestamps_of(0)
