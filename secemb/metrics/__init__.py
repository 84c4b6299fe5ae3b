"""Evaluation metrics from a registry, by name (RecBole's ``evaluator/register.py`` idea).

Public API::

    register_metric(name, fn, *, needs="pointwise", higher_is_better=False, at_k=False)
    get_metric("rmse") / get_metric("ndcg@10") -> Metric
    available_metrics() -> ["mae", "rmse", ...]
    evaluate(model, table, dense, store, data, ["rmse", "mae"], rating_range=(1, 5))
        -> {"rmse": 0.93, "mae": 0.74}

Registered here: ``rmse`` and ``mae`` (pointwise, predictions clipped to the public rating
scale).  Adding a metric is one function plus its :func:`register_metric` call; the
contract of each kind (``needs``) is in :mod:`secemb.metrics.registry`.  Nothing here imports
torch or crypto.
"""

from __future__ import annotations

from secemb.metrics.evaluate import evaluate
from secemb.metrics.rating import mae, rmse
from secemb.metrics.registry import Metric, Needs, available_metrics, get_metric, register_metric

__all__ = ["Metric", "Needs", "available_metrics", "evaluate", "get_metric", "mae", "register_metric", "rmse"]

register_metric("rmse", rmse)
register_metric("mae", mae)
