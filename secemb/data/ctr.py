"""Click-through (CTR) samples for DIN-style models: a Taobao-shaped synthetic generator and
MovieLens turned into clicks.

A sample is ``(user, target goods, history of goods, label)``: the user saw ``target`` and
clicked (``label = 1``) or not, after clicking the goods in ``history`` (most recent last).
Every goods has one public category (``goods_category``), the catalogue metadata of Taobao.

Sources
-------
* :class:`TaobaoShaped` -- the secure federated submodel learning paper's Taobao logs are
  proprietary; this is a stand-in with Table IV's counts (:data:`TAOBAO_SHAPES`: users, goods,
  categories, mean samples per client, history length) and a planted click model so that a
  model can learn something: categories, goods and users have latent vectors, a user favours a
  few categories, sees goods half from them and half by global (Zipf) popularity, and clicks
  with probability ``sigmoid(3 u.g - 1)``.  Every client is generated on its own from
  ``(seed, user)``, so the 100 clients of a round of the full 49,023-user shape can be drawn
  without materializing 15.85 M samples.
* :func:`movielens_clicks` -- real ratings as impressions: every rating is a sample with
  ``label = rating >= 4`` (no sampled negatives: the rated-but-disliked items are real
  non-clicks), history = the user's earlier clicked items, category = the item's first genre.

:func:`split_clicks` holds out the last ``test_fraction`` of each user's samples in time.
Nothing here imports torch or crypto.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secemb.data.ratings import RatingData
from secemb.errors import InvalidParameters

__all__ = ["TAOBAO_SHAPES", "ClickData", "TaobaoShape", "TaobaoShaped", "movielens_clicks", "split_clicks"]


@dataclass(frozen=True)
class ClickData:
    """CTR samples ordered by user, then time.

    Attributes
    ----------
    name: the source (``"taobao-mini"``, ``"ml-100k"``).
    num_users, num_goods, num_categories: id space sizes.
    goods_category: int64 (num_goods,), the public category of every goods.
    user: int64 (n,); target: int64 (n,) goods ids; history: int64 (n, L) goods ids, most
    recent last, ``-1`` = padding (left); label: float32 (n,) 0/1.
    """

    name: str
    num_users: int
    num_goods: int
    num_categories: int
    goods_category: np.ndarray
    user: np.ndarray
    target: np.ndarray
    history: np.ndarray
    label: np.ndarray

    def __post_init__(self) -> None:
        n = self.user.shape[0]
        if self.target.shape != (n,) or self.label.shape != (n,) or self.history.ndim != 2 \
                or self.history.shape[0] != n:
            raise InvalidParameters(f"click samples: inconsistent shapes user {self.user.shape}, target "
                                    f"{self.target.shape}, history {self.history.shape}, label {self.label.shape}")
        if self.goods_category.shape != (self.num_goods,):
            raise InvalidParameters(f"goods_category must have shape ({self.num_goods},), "
                                    f"got {self.goods_category.shape}")

    def __len__(self) -> int:
        return int(self.user.shape[0])

    @property
    def history_len(self) -> int:
        """L, the history window (columns of ``history``)."""
        return int(self.history.shape[1])

    def subset(self, index: np.ndarray | slice) -> ClickData:
        """The samples selected by ``index`` (bool mask or int positions), same id spaces."""
        return ClickData(self.name, self.num_users, self.num_goods, self.num_categories, self.goods_category,
                         self.user[index], self.target[index], self.history[index], self.label[index])

    def user_bounds(self) -> np.ndarray:
        """int64 (num_users + 1,): samples of user ``u`` are ``[b[u], b[u+1])``."""
        return np.searchsorted(self.user, np.arange(self.num_users + 1), side="left").astype(np.int64)

    def goods_of(self, lo: int, hi: int) -> np.ndarray:
        """int64 sorted: the distinct goods (targets and histories) of samples ``[lo, hi)``; a
        client's real index set."""
        h = self.history[lo:hi]
        return np.unique(np.concatenate([self.target[lo:hi], h[h >= 0]]))


def split_clicks(data: ClickData, test_fraction: float = 0.2) -> tuple[ClickData, ClickData]:
    """``(train, test)``: the last ``ceil(test_fraction * n_u)`` samples of each user with at
    least 2 samples are held out (time order within a user); a user's history features never
    look into its own test period because histories only contain earlier clicks.

    Raises
    ------
    InvalidParameters
        ``test_fraction`` outside ``(0, 1)``.
    """
    if not 0.0 < test_fraction < 1.0:
        raise InvalidParameters(f"test_fraction must be in (0, 1), got {test_fraction}")
    b = data.user_bounds()
    counts = np.diff(b)
    held = np.where(counts >= 2, np.ceil(counts * test_fraction).astype(np.int64), 0)
    pos = np.arange(len(data)) - np.repeat(b[:-1], counts)
    test = pos >= np.repeat(counts - held, counts)
    return data.subset(~test), data.subset(test)


def _histories(users: np.ndarray, goods: np.ndarray, clicked: np.ndarray, window: int) -> np.ndarray:
    """int64 (n, window): for each event (ordered by user, then time) the user's last ``window``
    clicked goods strictly before it, most recent last, -1 padded on the left."""
    n = users.shape[0]
    out = np.full((n, window), -1, dtype=np.int64)
    if n == 0:
        return out
    # index among the user's clicks of the last click before each event
    new_user = np.r_[True, users[1:] != users[:-1]]
    start = np.maximum.accumulate(np.where(new_user, np.arange(n), 0))
    clicks_before = np.cumsum(clicked) - clicked  # clicks strictly before, globally
    before_user = (np.cumsum(clicked) - clicked)[start]
    click_pos = np.flatnonzero(clicked)
    for k in range(window):  # a few columns, vectorized over events
        back = clicks_before - 1 - (window - 1 - k)
        ok = back >= before_user
        out[ok, k] = goods[click_pos[back[ok]]]
    return out


@dataclass(frozen=True)
class TaobaoShape:
    """Counts of a Taobao-shaped dataset (Table IV of the paper for ``"taobao"``)."""

    users: int
    goods: int
    categories: int
    samples_per_client: int
    history: int


#: Table IV's shape and scaled-down presets for tests and this machine
TAOBAO_SHAPES: dict[str, TaobaoShape] = {
    "taobao": TaobaoShape(49_023, 143_534, 4_815, 323, 50),
    "taobao-small": TaobaoShape(2_000, 20_000, 600, 120, 30),
    "taobao-mini": TaobaoShape(200, 2_000, 60, 40, 10),
}

_LATENT = 8


class TaobaoShaped:
    """The synthetic Taobao-shaped click generator (module docstring).

    Parameters
    ----------
    shape: a key of :data:`TAOBAO_SHAPES` or a :class:`TaobaoShape`.
    seed: the world's seed (catalogue, latent vectors); client ``u``'s samples come from
        ``(seed, u)`` alone.
    """

    def __init__(self, shape: str | TaobaoShape = "taobao-mini", seed: int = 0) -> None:
        if isinstance(shape, str):
            if shape not in TAOBAO_SHAPES:
                raise InvalidParameters(f"unknown Taobao shape {shape!r}; available: {sorted(TAOBAO_SHAPES)}")
            self.name = shape
            shape = TAOBAO_SHAPES[shape]
        else:
            self.name = "taobao-custom"
        if min(shape.users, shape.goods, shape.categories, shape.samples_per_client, shape.history) < 1:
            raise InvalidParameters(f"every count of a Taobao shape must be >= 1, got {shape}")
        self.shape, self.seed = shape, int(seed)
        rng = np.random.default_rng([self.seed, 0x7A0BA0])
        c = shape.categories
        cat_pop = 1.0 / np.arange(1, c + 1) ** 1.0
        self.goods_category = rng.choice(c, size=shape.goods, p=cat_pop / cat_pop.sum()).astype(np.int64)
        self._cat_vec = rng.normal(0.0, 1.0, (c, _LATENT)) / np.sqrt(_LATENT)
        self._goods_vec = self._cat_vec[self.goods_category] + rng.normal(0.0, 0.5, (shape.goods, _LATENT)) \
            / np.sqrt(_LATENT)
        goods_pop = 1.0 / np.arange(1, shape.goods + 1) ** 0.8
        self._goods_p = rng.permutation(goods_pop / goods_pop.sum())
        self._by_cat = np.argsort(self.goods_category, kind="stable")
        self._cat_start = np.searchsorted(self.goods_category[self._by_cat], np.arange(c + 1))
        self._cat_p = cat_pop / cat_pop.sum()

    def client(self, user: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Client ``user``'s events in time order: ``(goods int64 (T,), clicked bool (T,), n_samples)``
        where the last ``n_samples`` events are its samples and the earlier ones only history."""
        s = self.shape
        rng = np.random.default_rng([self.seed, 1, int(user)])
        favourites = rng.choice(s.categories, size=3, replace=False, p=self._cat_p)
        u = self._cat_vec[favourites].mean(axis=0) * 2.0 + rng.normal(0.0, 0.3, _LATENT) / np.sqrt(_LATENT)
        n_samples = max(2, int(rng.poisson(s.samples_per_client)))
        total = n_samples + s.history
        from_fav = rng.random(total) < 0.5
        cats = favourites[rng.integers(0, 3, total)]
        lo, hi = self._cat_start[cats], self._cat_start[cats + 1]
        fav_goods = self._by_cat[np.minimum(lo + (rng.random(total) * np.maximum(hi - lo, 1)).astype(np.int64),
                                            np.maximum(hi - 1, lo))]
        fav_goods = np.where(hi > lo, fav_goods, rng.choice(s.goods, size=total, p=self._goods_p))
        pop_goods = rng.choice(s.goods, size=total, p=self._goods_p)
        goods = np.where(from_fav, fav_goods, pop_goods).astype(np.int64)
        logit = 3.0 * (self._goods_vec[goods] @ u) - 1.0
        clicked = rng.random(total) < 1.0 / (1.0 + np.exp(-logit))
        return goods, clicked, n_samples

    def clients(self, users: np.ndarray) -> ClickData:
        """The samples of ``users`` (int64, ascending): targets are each client's last
        ``n_samples`` events, histories its clicks before them (window ``shape.history``)."""
        users = np.asarray(users, dtype=np.int64)
        if users.size and (users.min() < 0 or users.max() >= self.shape.users or np.any(np.diff(users) <= 0)):
            raise InvalidParameters(f"users must be ascending ids in [0, {self.shape.users})")
        parts = [self.client(int(u)) for u in users]
        sizes = np.array([g.size for g, _, _ in parts], dtype=np.int64)
        n_samples = np.array([n for _, _, n in parts], dtype=np.int64)
        ev_user = np.repeat(users, sizes)
        goods = np.concatenate([g for g, _, _ in parts] or [np.empty(0, np.int64)])
        clicked = np.concatenate([c for _, c, _ in parts] or [np.empty(0, bool)])
        hist = _histories(ev_user, goods, clicked, self.shape.history)
        # each client's last n_samples events are its samples
        pos = np.arange(goods.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        is_sample = pos >= np.repeat(sizes - n_samples, sizes)
        return ClickData(self.name, self.shape.users, self.shape.goods, self.shape.categories, self.goods_category,
                         ev_user[is_sample], goods[is_sample], hist[is_sample],
                         clicked[is_sample].astype(np.float32))


def movielens_clicks(ratings: RatingData, item_genres: np.ndarray, *, history: int = 20,
                     threshold: float = 4.0) -> ClickData:
    """MovieLens ratings as click samples (module docstring).

    Parameters
    ----------
    ratings: with timestamps (ML-100K/1M).
    item_genres: uint8 (num_items, g) 0/1 multi-hot genres (:func:`secemb.data.features.
        movielens_features`'s ``item``); the category is the first genre set (an item without
        any gets category ``g``, "none").
    history: L, the clicked items kept before each sample.
    threshold: ``label = rating >= threshold``.

    Raises
    ------
    InvalidParameters
        No timestamps, or genres that do not cover the items.
    """
    if ratings.timestamps is None:
        raise InvalidParameters(f"{ratings.name}: click samples need timestamps")
    if item_genres.ndim != 2 or item_genres.shape[0] != ratings.num_items:
        raise InvalidParameters(f"item_genres must be (num_items={ratings.num_items}, g), got {item_genres.shape}")
    g = item_genres.shape[1]
    has = item_genres.any(axis=1)
    category = np.where(has, np.argmax(item_genres, axis=1), g).astype(np.int64)
    order = np.lexsort((ratings.items, ratings.timestamps, ratings.users))
    users, items = ratings.users[order], ratings.items[order]
    clicked = ratings.ratings[order] >= threshold
    hist = _histories(users, items, clicked, history)
    return ClickData(ratings.name, ratings.num_users, ratings.num_items, g + 1, category, users, items, hist,
                     clicked.astype(np.float32))
