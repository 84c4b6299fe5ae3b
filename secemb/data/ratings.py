"""Rating data in memory: :class:`RatingData`, the train/test and validation splits and a per-user
CSR view.

Everything here is plain numpy; nothing imports torch or crypto.  Training randomness (the
split) uses a seeded :class:`numpy.random.Generator`, as the design notes ask.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secemb.data.ids import IdMap
from secemb.errors import InvalidParameters, check_float, check_int

__all__ = ["RatingData", "UserRatings", "by_user", "concat", "leave_one_out", "train_test_split", "validation_split"]


def _check_count(field: str, value: object) -> int:
    return check_int(field, value, low=0)


def _check_array(field: str, value: object, dtype: type, n: int | None) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise InvalidParameters(f"{field} must be a numpy array, got {type(value).__name__}")
    if value.dtype != dtype:
        raise InvalidParameters(f"{field} must have dtype {np.dtype(dtype)}, got {value.dtype}")
    if value.ndim != 1:
        raise InvalidParameters(f"{field} must be 1-D, got shape {value.shape}")
    if n is not None and value.shape[0] != n:
        raise InvalidParameters(f"{field} must have length {n}, got {value.shape[0]}")
    return value


def _check_ids(field: str, ids: np.ndarray, bound: int, bound_name: str) -> None:
    if ids.size == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= bound:
        bad = lo if lo < 0 else hi
        raise InvalidParameters(f"{field} must lie in [0, {bound_name}={bound}), found {bad}")


@dataclass(frozen=True)
class RatingData:
    """Explicit ratings ``(user, item, rating[, timestamp])`` with contiguous 0-based ids.

    Treat the arrays as read-only: they may be shared between a dataset and its splits.

    Attributes
    ----------
    name:
        Dataset name, e.g. ``"ml-100k"``; a split keeps the name of the whole.
    num_users, num_items:
        Sizes of the id spaces.  Some ids may have no rating (e.g. in a split).
    users, items:
        int64, shape (N,), values in ``[0, num_users)`` and ``[0, num_items)``.
    ratings:
        float32, shape (N,), finite.
    timestamps:
        int64, shape (N,), seconds since the epoch, or ``None``.
    ids:
        The raw ids behind the indices (and the items' titles), or ``None`` where the
        indices are the ids (synthetic data).  A split keeps the map of the whole.

    Raises
    ------
    InvalidParameters
        On a wrong type, dtype, shape, id range, a non-finite rating, or an id map whose
        sizes are not ``num_users`` and ``num_items``.
    """

    name: str
    num_users: int
    num_items: int
    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray
    timestamps: np.ndarray | None = None
    ids: IdMap | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InvalidParameters(f"name must be a str, got {type(self.name).__name__}")
        object.__setattr__(self, "num_users", _check_count("num_users", self.num_users))
        object.__setattr__(self, "num_items", _check_count("num_items", self.num_items))
        users = _check_array("users", self.users, np.int64, None)
        n = users.shape[0]
        _check_array("items", self.items, np.int64, n)
        _check_array("ratings", self.ratings, np.float32, n)
        if self.timestamps is not None:
            _check_array("timestamps", self.timestamps, np.int64, n)
        _check_ids("users", self.users, self.num_users, "num_users")
        _check_ids("items", self.items, self.num_items, "num_items")
        if n and not np.isfinite(self.ratings).all():
            raise InvalidParameters("ratings must be finite")
        if self.ids is not None:
            if not isinstance(self.ids, IdMap):
                raise InvalidParameters(f"ids must be an IdMap, got {type(self.ids).__name__}")
            mapped = self.num_users if self.ids.users is None else len(self.ids.users)
            if (mapped, len(self.ids.items)) != (self.num_users, self.num_items):
                raise InvalidParameters(f"ids: the map has {mapped} users and {len(self.ids.items)} items, the data "
                                        f"{self.num_users} and {self.num_items}")

    def __len__(self) -> int:
        return int(self.users.shape[0])

    @property
    def num_ratings(self) -> int:
        """Number of ratings N."""
        return int(self.users.shape[0])

    def subset(self, mask_or_index: np.ndarray) -> RatingData:
        """Return the ratings selected by a boolean mask or an index array, same id spaces."""
        sel = np.asarray(mask_or_index)
        ts = None if self.timestamps is None else self.timestamps[sel]
        return RatingData(
            self.name,
            self.num_users,
            self.num_items,
            self.users[sel],
            self.items[sel],
            self.ratings[sel],
            ts,
            self.ids,
        )

    def __repr__(self) -> str:
        return (
            f"RatingData(name={self.name!r}, num_users={self.num_users}, "
            f"num_items={self.num_items}, num_ratings={self.num_ratings}, "
            f"timestamps={'yes' if self.timestamps is not None else 'no'})"
        )


def train_test_split(
    data: RatingData, test_fraction: float = 0.2, seed: int = 0
) -> tuple[RatingData, RatingData]:
    """Split ratings at random into train and test, keeping a training rating for every user.

    Rule: draw a uniformly random permutation of the N ratings (``numpy.random.default_rng
    (seed)``); the first ``round(test_fraction * N)`` go to test.  Then every user that has
    ratings but none left in train gets back the one of its test ratings drawn last.  So the
    test set is at most ``round(test_fraction * N)`` ratings (slightly fewer when users with very
    few ratings are moved back), and every user with a rating has at least one in train.

    Both halves keep ``num_users``, ``num_items``, ``name`` and the original order of ratings;
    together they partition ``data``.  The result depends only on ``data`` and ``seed``.

    Raises
    ------
    InvalidParameters
        If ``test_fraction`` is not in ``[0, 1)`` or ``data`` is not a :class:`RatingData`.
    """
    if not isinstance(data, RatingData):
        raise InvalidParameters(f"data must be a RatingData, got {type(data).__name__}")
    test_fraction = check_float("test_fraction", test_fraction, low=0, below=1)
    n = data.num_ratings
    n_test = int(round(test_fraction * n))
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    is_test = np.zeros(n, dtype=bool)
    is_test[order[:n_test]] = True

    train_counts = np.bincount(data.users[~is_test], minlength=data.num_users)
    starved = (train_counts == 0) & (np.bincount(data.users, minlength=data.num_users) > 0)
    if starved.any():
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n, dtype=np.int64)
        cand = np.flatnonzero(starved[data.users])  # all ratings of starved users (all in test)
        # For each starved user, the rating drawn last: sort by (user, rank), take group ends.
        srt = cand[np.lexsort((rank[cand], data.users[cand]))]
        u = data.users[srt]
        last = np.flatnonzero(np.r_[u[1:] != u[:-1], True])
        is_test[srt[last]] = False
    return data.subset(~is_test), data.subset(is_test)


def validation_split(train: RatingData, valid_fraction: float, seed: int = 0) -> tuple[RatingData, RatingData]:
    """Hold a validation set out of the training ratings, user by user: ``(fit, validation)``.

    Rule: each user with ``n`` training ratings gives ``min(floor(valid_fraction * n + 0.5),
    n - 1)`` of them, drawn uniformly at random, to validation, so every user keeps at least one
    rating to train on (a user with one rating gives none).  The draw is one uniform key per
    rating from ``numpy.random.default_rng([seed, 2])`` (a stream apart from
    :func:`train_test_split`'s ``default_rng(seed)``); a user's lowest keys go to validation.
    In a federated run each device holds its own validation ratings: the split is per device,
    and nothing in it depends on another device's data.

    Only ``train`` is read -- pass the training half of :func:`train_test_split`, never the
    test half.  Both parts keep ``num_users``, ``num_items``, ``name`` and the order of the
    ratings; together they partition ``train``.  The result depends only on ``train`` and
    ``seed``; ``valid_fraction = 0`` gives ``(train, an empty set)``.

    Raises
    ------
    InvalidParameters
        ``train`` is not a :class:`RatingData`, or ``valid_fraction`` is not a float in
        ``[0, 1)``.
    """
    if not isinstance(train, RatingData):
        raise InvalidParameters(f"train must be a RatingData, got {type(train).__name__}")
    valid_fraction = check_float("valid_fraction", valid_fraction, low=0, below=1)
    keys = np.random.default_rng([seed, 2]).random(train.num_ratings)
    order = np.lexsort((keys, train.users))  # by user, each user's ratings by key
    counts = np.bincount(train.users, minlength=train.num_users)
    starts = np.cumsum(counts) - counts
    rank = np.empty(train.num_ratings, dtype=np.int64)
    rank[order] = np.arange(train.num_ratings, dtype=np.int64) - np.repeat(starts, counts)
    held = np.minimum(np.floor(float(valid_fraction) * counts + 0.5).astype(np.int64), np.maximum(counts - 1, 0))
    is_valid = rank < held[train.users]
    return train.subset(~is_valid), train.subset(is_valid)


def concat(a: RatingData, b: RatingData) -> RatingData:
    """The ratings of ``a`` then those of ``b`` (same name, id spaces and id map as ``a``).

    Raises
    ------
    InvalidParameters
        The id spaces differ, or only one of the two has timestamps.
    """
    if (a.num_users, a.num_items) != (b.num_users, b.num_items):
        raise InvalidParameters(f"id spaces differ: {(a.num_users, a.num_items)} and {(b.num_users, b.num_items)}")
    if (a.timestamps is None) != (b.timestamps is None):
        raise InvalidParameters("either both or neither of the rating sets must have timestamps")
    ts = None if a.timestamps is None or b.timestamps is None else np.concatenate([a.timestamps, b.timestamps])
    return RatingData(a.name, a.num_users, a.num_items, np.concatenate([a.users, b.users]),
                      np.concatenate([a.items, b.items]), np.concatenate([a.ratings, b.ratings]), ts, a.ids)


def leave_one_out(data: RatingData, *, min_len: int = 3) -> tuple[RatingData, RatingData, RatingData]:
    """SASRec's split ``(train, validation, test)``: every user with at least ``min_len``
    interactions gives its last one (by time, ties by item id) to the test set and its
    second-to-last to the validation set; the rest, and every interaction of shorter
    sequences, is training data.  Deterministic (no randomness).

    Raises
    ------
    InvalidParameters
        ``data`` has no timestamps, or ``min_len < 3``.
    """
    min_len = check_int("min_len", min_len, low=3)
    if data.timestamps is None:
        raise InvalidParameters(f"leave_one_out needs timestamps; dataset {data.name!r} has none")
    perm = np.lexsort((data.items, data.timestamps, data.users))
    counts = np.bincount(data.users, minlength=data.num_users)
    ends = np.cumsum(counts)
    long = counts >= min_len
    test = perm[ends[long] - 1]
    val = perm[ends[long] - 2]
    train = np.ones(data.num_ratings, dtype=bool)
    train[test] = train[val] = False
    return data.subset(train), data.subset(np.sort(val)), data.subset(np.sort(test))


@dataclass(frozen=True)
class UserRatings:
    """Ratings grouped by user (CSR): user ``u`` owns ``items[indptr[u]:indptr[u+1]]``.

    Attributes
    ----------
    indptr:
        int64, shape (num_users + 1,), non-decreasing, ``indptr[0] == 0``, ``indptr[-1] == N``.
    items:
        int64, shape (N,), sorted by user, then as ``order`` says.
    ratings:
        float32, shape (N,), aligned with ``items``.
    timestamps:
        int64, shape (N,), aligned with ``items``; ``None`` when the data has none.
    order:
        ``"item"`` (each user's ratings by item id, what the rating task trains on) or
        ``"time"`` (each user's interactions in the order they happened, ties by item id:
        what sequential models read).
    """

    indptr: np.ndarray
    items: np.ndarray
    ratings: np.ndarray
    timestamps: np.ndarray | None = None
    order: str = "item"

    def __post_init__(self) -> None:
        indptr = _check_array("indptr", self.indptr, np.int64, None)
        if indptr.shape[0] < 1:
            raise InvalidParameters("indptr must have length num_users + 1 >= 1, got 0")
        n = _check_array("items", self.items, np.int64, None).shape[0]
        _check_array("ratings", self.ratings, np.float32, n)
        if self.timestamps is not None:
            _check_array("timestamps", self.timestamps, np.int64, n)
        if self.order not in ORDERS:
            raise InvalidParameters(f"order must be one of {ORDERS}, got {self.order!r}")
        if indptr[0] != 0 or indptr[-1] != n or (np.diff(indptr) < 0).any():
            raise InvalidParameters(
                f"indptr must be non-decreasing from 0 to len(items)={n}, "
                f"got {indptr[0]}..{indptr[-1]}"
            )

    @property
    def num_users(self) -> int:
        """Number of users (rows)."""
        return int(self.indptr.shape[0] - 1)

    def _span(self, user: int) -> slice:
        user = check_int("user", user, low=0, high=self.num_users - 1)
        return slice(int(self.indptr[user]), int(self.indptr[user + 1]))

    def of(self, user: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(items, ratings)`` of ``user`` as views, in :attr:`order`.

        Raises
        ------
        InvalidParameters
            If ``user`` is not an int in ``[0, num_users)``.
        """
        span = self._span(user)
        return self.items[span], self.ratings[span]

    def timestamps_of(self, user: int) -> np.ndarray:
        """The timestamps of ``user``'s ratings (aligned with :meth:`of`), a view.

        Raises
        ------
        InvalidParameters
            If the data has no timestamps, or ``user`` is not an int in ``[0, num_users)``.
        """
        if self.timestamps is None:
            raise InvalidParameters("these ratings have no timestamps")
        return self.timestamps[self._span(user)]

    def counts(self) -> np.ndarray:
        """Number of ratings of each user, int64 of shape (num_users,)."""
        return np.diff(self.indptr)


#: the per-user orders :func:`by_user` builds
ORDERS = ("item", "time")


def by_user(data: RatingData, *, order: str = "item") -> UserRatings:
    """Group ``data`` by user into a :class:`UserRatings`, timestamps kept: each user's
    ratings by item id (``order="item"``, the rating task's view) or in the order they
    happened (``order="time"``, ties broken by item id).

    Raises
    ------
    InvalidParameters
        ``data`` is not a :class:`RatingData`, ``order`` is unknown, or ``order="time"`` for
        data without timestamps.
    """
    if not isinstance(data, RatingData):
        raise InvalidParameters(f"data must be a RatingData, got {type(data).__name__}")
    if order not in ORDERS:
        raise InvalidParameters(f"order must be one of {ORDERS}, got {order!r}")
    if order == "time":
        if data.timestamps is None:
            raise InvalidParameters(f"order='time' needs timestamps; dataset {data.name!r} has none")
        keys: tuple[np.ndarray, ...] = (data.items, data.timestamps, data.users)
    else:
        keys = (data.items, data.users)
    perm = np.lexsort(keys)
    indptr = np.zeros(data.num_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(data.users, minlength=data.num_users), out=indptr[1:])
    stamps = None if data.timestamps is None else data.timestamps[perm]
    return UserRatings(indptr, data.items[perm], data.ratings[perm], stamps, order)
