"""Synthetic, MovieLens-like rating data (deterministic in the seed, no files needed).

Model (all draws from one ``numpy.random.default_rng(seed)``; this is training data, not
crypto):

* **User activity** is long-tailed: ``min_per_user`` plus a log-normal share (sigma 1) of the
  remaining ratings, rounded so the total is exactly ``num_ratings`` and capped at
  ``num_items``.
* **Item popularity** is Zipf-like: the item of popularity rank r (ranks assigned to ids at
  random) has weight ``(r + r0) ** -alpha``.  Each user rates its count of *distinct* items,
  drawn with probability proportional to the weights (sampling without replacement).
* **Ratings** come from a low-rank model: ``mu + b_u + b_i + <p_u, q_i> + noise``, rounded
  and clipped to 1..5.  Item biases lean slightly towards popular items.  The
  interaction term has standard deviation ~0.6, the noise 0.6, so a matrix factorisation
  model can beat the global mean clearly (the oracle RMSE is about 0.65 against a rating
  standard deviation about 1.1).
* **Timestamps**: each user is active over a random window inside the ML-100K period.

Output is sorted by user, then timestamp; there are no duplicate (user, item) pairs and every
user has at least ``min_per_user`` ratings.
"""

from __future__ import annotations


import numpy as np

from secemb.data.ratings import RatingData
from secemb.errors import InvalidParameters, check_int

__all__ = ["STANDS_FOR", "SYNTHETIC_SHAPES", "synthetic_like"]

# name -> (num_users, num_items, num_ratings).  "synthetic" is smaller than ML-100K so that a
# secure run over a few epochs takes about a minute; the others copy Table 7 of the SecEmb
# paper (items as counted there: the whole catalogue, e.g. 3,883 movies for ML-1M).
SYNTHETIC_SHAPES: dict[str, tuple[int, int, int]] = {
    "synthetic": (943, 1_682, 35_000),
    # a smoke-test size: a secure run over the network takes seconds
    "synthetic-mini": (120, 300, 3_000),
    "synthetic-ml-1m": (6_040, 3_883, 1_000_209),
    "synthetic-ml-10m": (69_878, 10_681, 10_000_054),
    "synthetic-ml-25m": (162_541, 62_423, 25_000_095),
    "synthetic-yelp": (10_000, 93_386, 1_007_956),
}

#: stand-in name -> the paper dataset whose presets (Table 8) and side-feature counts it uses
STANDS_FOR: dict[str, str] = {
    "synthetic": "ml-100k",
    "synthetic-mini": "ml-100k",
    "synthetic-ml-1m": "ml-1m",
    "synthetic-ml-10m": "ml-10m",
    "synthetic-ml-25m": "ml-25m",
    "synthetic-yelp": "yelp",
}

_ZIPF_ALPHA = 1.0
_ZIPF_OFFSET_FRACTION = 0.02  # r0 = 2% of the catalogue flattens the very head
_RANK = 8
_MU = 3.35
_USER_BIAS_SD = 0.45
_ITEM_BIAS_SD = 0.5
_POPULARITY_BIAS = 0.2  # item bias gain per standard deviation of log popularity
_INTERACTION_SD = 0.7
_NOISE_SD = 0.7
_T_START, _T_END = 874_724_710, 893_286_638  # ML-100K's first and last timestamps


def _user_counts(rng: np.random.Generator, n: int, m: int, total: int, minimum: int) -> np.ndarray:
    """Long-tailed integer counts in [minimum, m] summing exactly to ``total``."""
    counts = np.full(n, minimum, dtype=np.int64)
    extra = total - minimum * n
    share = rng.lognormal(0.0, 1.0, n)
    while extra > 0:
        open_ = counts < m
        w = np.where(open_, share, 0.0)
        want = w / w.sum() * extra
        add = np.minimum(np.floor(want).astype(np.int64), m - counts)
        short = extra - int(add.sum())
        if short > 0:  # largest remainders first, then by id (deterministic)
            frac = np.where(open_ & (counts + add < m), want - np.floor(want), -1.0)
            take = np.argsort(-frac, kind="stable")[:short]
            take = take[frac[take] >= 0]
            add[take] += 1
        counts += add
        extra = total - int(counts.sum())
    return counts


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    keys = np.sort(keys)
    if keys.shape[0] > 1:
        keys = keys[np.r_[True, keys[1:] != keys[:-1]]]
    return keys


def _sample_items(
    rng: np.random.Generator, counts: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each user u, ``counts[u]`` distinct items drawn with probability ~ ``weights``.

    Each round draws, for every user still short, as many items (with replacement) as it
    lacks and keeps the new distinct ones, so no user ever gets more than it needs.  The few
    users still short after some rounds (the heaviest ones, whose missing items are rare)
    get exact weighted sampling without replacement (Gumbel top-k) over their unrated items.
    Returns (users, items) sorted by user then item.
    """
    n, m = counts.shape[0], weights.shape[0]
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    have = np.zeros(0, dtype=np.int64)  # sorted keys user * m + item
    need = counts.copy()
    for _ in range(12):
        users = np.flatnonzero(need > 0)
        if users.shape[0] == 0:
            break
        u = np.repeat(users, need[users])
        i = np.minimum(np.searchsorted(cdf, rng.random(u.shape[0]), side="right"), m - 1)
        keys = _sorted_unique(u * m + i)
        if have.shape[0]:
            pos = np.searchsorted(have, keys)
            pos[pos == have.shape[0]] = 0
            keys = keys[have[pos] != keys]
        need -= np.bincount(keys // m, minlength=n)
        # both parts are sorted: a stable (merge-based) sort of their concatenation is cheap
        have = np.sort(np.concatenate([have, keys]), kind="stable")
    short = np.flatnonzero(need > 0)
    if short.shape[0]:
        logw = np.log(weights)
        extra = []
        for v in short:
            lo, hi = np.searchsorted(have, [v * m, (v + 1) * m])
            score = logw + rng.gumbel(size=m)
            score[have[lo:hi] - v * m] = -np.inf
            top = np.argpartition(-score, need[v] - 1)[: need[v]]
            extra.append(v * m + top)
        have = np.sort(np.concatenate([have, *extra]))
    return have // m, have % m


def synthetic_like(
    num_users: int,
    num_items: int,
    num_ratings: int,
    seed: int = 0,
    *,
    name: str | None = None,
    min_per_user: int = 5,
) -> RatingData:
    """Generate a long-tailed, MovieLens-like rating dataset of the given shape.

    Parameters
    ----------
    num_users, num_items, num_ratings:
        Shape.  Requires ``min_per_user * num_users <= num_ratings <= num_users * num_items``
        and ``min_per_user <= num_items``.
    seed:
        Seed of the :class:`numpy.random.Generator`; same arguments, same data.
    name:
        ``RatingData.name``; default ``"synthetic-{users}x{items}x{ratings}"``.
    min_per_user:
        Minimum number of ratings of every user.

    Returns
    -------
    RatingData
        Integer ratings 1..5 (float32), timestamps, sorted by user then timestamp.

    Raises
    ------
    InvalidParameters
        On an impossible shape.
    """
    n = check_int("num_users", num_users, low=1)
    m = check_int("num_items", num_items, low=1)
    total = check_int("num_ratings", num_ratings, low=0)
    minimum = check_int("min_per_user", min_per_user, low=1)
    if minimum > m:
        raise InvalidParameters(f"min_per_user={minimum} exceeds num_items={m}")
    if not minimum * n <= total <= n * m:
        raise InvalidParameters(
            f"num_ratings must be in [min_per_user * num_users, num_users * num_items] = "
            f"[{minimum * n}, {n * m}], got {total}"
        )
    if name is None:
        name = f"synthetic-{n}x{m}x{total}"
    rng = np.random.default_rng(seed)

    counts = _user_counts(rng, n, m, total, minimum)
    rank = np.empty(m, dtype=np.float64)
    rank[rng.permutation(m)] = np.arange(1, m + 1)
    weights = (rank + _ZIPF_OFFSET_FRACTION * m) ** -_ZIPF_ALPHA
    users, items = _sample_items(rng, counts, weights)

    # Ratings from a low-rank latent model with biases.
    scale = np.sqrt(_INTERACTION_SD / np.sqrt(_RANK))
    p = rng.normal(0.0, scale, (n, _RANK)).astype(np.float32)
    q = rng.normal(0.0, scale, (m, _RANK)).astype(np.float32)
    logw = np.log(weights)
    item_bias = rng.normal(0.0, _ITEM_BIAS_SD, m) + _POPULARITY_BIAS * (logw - logw.mean()) / (
        logw.std() or 1.0
    )
    user_bias = rng.normal(0.0, _USER_BIAS_SD, n)
    ratings = np.empty(total, dtype=np.float32)
    step = 1 << 20
    for lo in range(0, total, step):
        u, i = users[lo : lo + step], items[lo : lo + step]
        score = (
            _MU
            + user_bias[u]
            + item_bias[i]
            + np.einsum("ij,ij->i", p[u], q[i])
            + rng.normal(0.0, _NOISE_SD, u.shape[0])
        )
        ratings[lo : lo + step] = np.clip(np.rint(score), 1.0, 5.0)

    # Timestamps: each user active in a random window of the ML-100K period.
    span = _T_END - _T_START
    start = rng.integers(_T_START, _T_END, n)
    length = np.minimum(rng.exponential(0.15 * span, n).astype(np.int64) + 86_400, _T_END - start)
    timestamps = start[users] + (rng.random(total) * length[users]).astype(np.int64)

    # sort by user, then timestamp, then item (stable on the (user, item) order of the pairs)
    order = np.argsort(users * (1 << 32) + (timestamps - _T_START), kind="stable")
    return RatingData(
        name=name,
        num_users=n,
        num_items=m,
        users=users[order],
        items=items[order],
        ratings=ratings[order],
        timestamps=timestamps[order],
    )
