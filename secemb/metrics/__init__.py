"""Evaluation metrics from a registry, by name (RecBole's ``evaluator/register.py`` idea).

Public API::

    register_metric(name, fn, *, needs="pointwise", higher_is_better=False, at_k=False)
    get_metric("rmse") / get_metric("ndcg@10") -> Metric
    available_metrics() -> ["mae", "rmse", ...]
    evaluate(model, table, dense, store, data, ["rmse", "mae"], rating_range=(1, 5))
        -> {"rmse": 0.93, "mae": 0.74}

Registered here: ``rmse`` and ``mae`` (pointwise, predictions clipped to the public rating
scale); ``auc`` (pointwise over 0/1 click labels, :mod:`secemb.metrics.ctr`); ``hr@K`` and
``ndcg@K`` (next-item ranking over the full catalogue) and
``hr_sampled@K`` and ``ndcg_sampled@K`` (over the held-out item and 100 sampled negatives),
see :mod:`secemb.metrics.ranking`.  Adding a metric is one function plus its :func:`register_metric` call; the
contract of each kind (``needs``) is in :mod:`secemb.metrics.registry`.  Nothing here imports
torch or crypto.
"""

from __future__ import annotations

from secemb.metrics.ctr import auc
from secemb.metrics.evaluate import evaluate
from secemb.metrics.ranking import hit_rate, ndcg, rank_next_items, recall
from secemb.metrics.rating import mae, rmse
from secemb.metrics.registry import Metric, Needs, available_metrics, get_metric, register_metric

__all__ = ["SAMPLED_NEGATIVES", "Metric", "Needs", "auc", "available_metrics", "evaluate", "get_metric", "hit_rate",
           "mae", "ndcg", "rank_next_items", "recall", "register_metric", "rmse"]

#: negatives beside each held-out item in the sampled ranking metrics (SASRec's protocol)
SAMPLED_NEGATIVES = 100

register_metric("rmse", rmse)
register_metric("mae", mae)
register_metric("auc", auc, higher_is_better=True)
register_metric("hr", hit_rate, needs="ranking", higher_is_better=True, at_k=True)
register_metric("ndcg", ndcg, needs="ranking", higher_is_better=True, at_k=True)
register_metric("recall", recall, needs="ranking", higher_is_better=True, at_k=True)
register_metric("hr_sampled", hit_rate, needs="ranking", higher_is_better=True, at_k=True,
                candidates=SAMPLED_NEGATIVES)
register_metric("ndcg_sampled", ndcg, needs="ranking", higher_is_better=True, at_k=True,
                candidates=SAMPLED_NEGATIVES)
