"""Top-K ranking metrics and the next-item evaluation (leave-one-out) of sequential models.

:func:`hit_rate` and :func:`ndcg` follow the registry's ranking contract
(``fn(scores, relevant, *, k)``, :mod:`secemb.metrics.registry`).  :func:`rank_next_items`
builds their inputs: for every held-out interaction ``(u, i)``, the model scores candidates
after ``u``'s history (its last interactions before the held-out one) and ``i`` is the one
relevant candidate.  Two candidate sets, named in the metric (:attr:`Metric.candidates`):

* **full catalogue** (``hr@K``, ``ndcg@K``): every item; the items of the user's history are
  excluded (scored -inf), the held-out item never is;
* **sampled** (``hr_sampled@K``, ``ndcg_sampled@K``): the held-out item and 100 items drawn
  uniformly without replacement from those the user never interacted with (SASRec's
  protocol; all of them when fewer remain), from a generator seeded with the run's seed, so
  every epoch ranks against the same negatives.

Ties are broken against the held-out item (it is ranked after every candidate with an equal
score).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from secemb.data import by_user

if TYPE_CHECKING:  # pragma: no cover
    from secemb.data import RatingData
    from secemb.metrics.registry import Metric

__all__ = ["NextItemScorer", "hit_rate", "ndcg", "popularity_scorer", "rank_next_items", "recall"]

#: ``score(users int64 (n,), history int64 (n, L) item ids (-1 = padding), candidates int64 (n, c)
#: or None) -> float64 (n, c)``, or (n, num_items) for ``None`` (the whole catalogue); e.g. a
#: sequential model's :meth:`~secemb.models.sequential.SequenceModel.score_next` with its
#: parameters bound, or :func:`popularity_scorer`.
NextItemScorer = Callable[[np.ndarray, np.ndarray, "np.ndarray | None"], np.ndarray]

#: rows scored at once (bounds the (rows, m) score matrix of the full ranking)
_CHUNK = 512


def _top_k(scores: np.ndarray, relevant: np.ndarray, k: int) -> np.ndarray:
    """bool (n, k): whether the candidate at each of the first k ranks is relevant (ties after
    the relevant ones lose: sorted by score descending, relevant last among equals)."""
    order = np.lexsort((relevant, -scores), axis=1)[:, :k]
    return np.take_along_axis(relevant, order, axis=1)


def hit_rate(scores: np.ndarray, relevant: np.ndarray, *, k: int) -> float | None:
    """HR@k: share of rows with a relevant candidate among the k best scores.

    ``scores``: float64 (n, c); ``relevant``: bool (n, c), at least one True per row.
    ``None`` when ``n == 0``.
    """
    if scores.shape[0] == 0:
        return None
    return float(_top_k(scores, relevant, k).any(axis=1).mean())


def recall(scores: np.ndarray, relevant: np.ndarray, *, k: int) -> float | None:
    """Recall@k: the share of each row's relevant candidates among its k best scores,
    averaged over rows (with one relevant item per row, as in leave-one-out, it equals HR@k).

    ``scores``: float64 (n, c); ``relevant``: bool (n, c), at least one True per row.
    ``None`` when ``n == 0``.
    """
    if scores.shape[0] == 0:
        return None
    return float(np.mean(_top_k(scores, relevant, k).sum(axis=1) / relevant.sum(axis=1)))


def ndcg(scores: np.ndarray, relevant: np.ndarray, *, k: int) -> float | None:
    """NDCG@k with binary relevance: ``sum_{rank r < k, relevant} 1/log2(r + 2)`` over the
    ideal value, averaged over rows (a single relevant item: ``1/log2(rank + 2)``).

    ``scores``: float64 (n, c); ``relevant``: bool (n, c), at least one True per row.
    ``None`` when ``n == 0``.
    """
    if scores.shape[0] == 0:
        return None
    discount = 1.0 / np.log2(np.arange(k) + 2.0)
    dcg = _top_k(scores, relevant, k) @ discount
    ideal = np.cumsum(discount)[np.minimum(relevant.sum(axis=1), k) - 1]
    return float(np.mean(dcg / ideal))


def popularity_scorer(train: RatingData) -> NextItemScorer:
    """The popularity ranking: every user scores item ``i`` by its number of interactions in
    ``train`` (the baseline a sequential model must beat under the same protocol)."""
    counts = np.bincount(train.items, minlength=train.num_items).astype(np.float64)

    def score(users: np.ndarray, history: np.ndarray, candidates: np.ndarray | None) -> np.ndarray:
        if candidates is None:
            return np.broadcast_to(counts, (users.shape[0], counts.size)).copy()
        return counts[candidates]

    return score


def rank_next_items(score: NextItemScorer, num_items: int, max_len: int, context: RatingData, held_out: RatingData,
                    metrics: list[Metric], *, seed: int) -> dict[str, float | None]:
    """Score ``metrics`` (ranking metrics) on the held-out interactions.

    Parameters
    ----------
    score: the scores of next items after a history (:data:`NextItemScorer`).
    num_items: m, the catalogue size.
    max_len: L, the history length ``score`` reads.
    context: the interactions before the held-out ones (timestamps required); each user's last
        ``max_len`` of them, by time, are its history.
    held_out: one or more interactions per user to predict.
    metrics: resolved ranking metrics (their ``candidates``: ``None`` = full catalogue, else
        the number of sampled negatives).
    seed: seed of the negatives' generator.

    Returns
    -------
    dict: metric name -> mean over held-out interactions (``None`` if there are none).

    Raises
    ------
    InvalidParameters
        ``context`` has no timestamps.
    """
    if held_out.num_ratings == 0:
        return {mt.name: None for mt in metrics}
    seqs = by_user(context, order="time")
    L, m = max_len, num_items
    n = held_out.num_ratings
    users, targets = held_out.users, held_out.items
    history = np.full((n, L), -1, dtype=np.int64)
    seen: list[np.ndarray] = []
    for j, u in enumerate(users):
        items = seqs.of(int(u))[0]
        tail = items[-L:]
        history[j, L - tail.size:] = tail
        seen.append(np.unique(items))
    out: dict[str, float | None] = {}
    for size in sorted({mt.candidates for mt in metrics}, key=lambda c: -1 if c is None else c):
        group = [mt for mt in metrics if mt.candidates == size]
        sums = dict.fromkeys((mt.name for mt in group), 0.0)
        rng = np.random.default_rng([seed, 0x5EC])
        for lo in range(0, n, _CHUNK):
            sl = slice(lo, min(lo + _CHUNK, n))
            if size is None:
                scores = score(users[sl], history[sl], None)
                for r, items in enumerate(seen[sl]):
                    scores[r, items[items != targets[lo + r]]] = -np.inf
                relevant = np.zeros_like(scores, dtype=bool)
                relevant[np.arange(scores.shape[0]), targets[sl]] = True
            else:
                cand = np.full((sl.stop - lo, size + 1), -1, dtype=np.int64)
                for r, items in enumerate(seen[sl]):
                    free = np.setdiff1d(np.arange(m), np.union1d(items, targets[lo + r : lo + r + 1]),
                                        assume_unique=True)
                    draw = min(size, free.size)
                    cand[r, :draw] = rng.choice(free, size=draw, replace=False)
                cand[:, size] = targets[sl]
                scores = score(users[sl], history[sl], np.maximum(cand, 0))
                scores[cand < 0] = -np.inf
                relevant = np.zeros_like(scores, dtype=bool)
                relevant[:, size] = True
            for mt in group:
                value = mt(scores, relevant)
                assert value is not None  # the chunk is not empty
                sums[mt.name] += value * (sl.stop - lo)
        out.update({name: total / n for name, total in sums.items()})
    return {mt.name: out[mt.name] for mt in metrics}
