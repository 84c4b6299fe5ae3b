"""Score a model on held-out data with metrics from the registry (what drivers call after
each epoch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from secemb.errors import InvalidParameters
from secemb.metrics.registry import get_metric

if TYPE_CHECKING:  # pragma: no cover
    from secemb.data import RatingData
    from secemb.models.base import RecModel, UserStore

__all__ = ["evaluate"]


def evaluate(
    model: RecModel,
    table: np.ndarray,
    dense: np.ndarray,
    store: UserStore | np.ndarray,
    data: RatingData,
    metric_names: Sequence[str],
    *,
    rating_range: tuple[float, float],
) -> dict[str, float | None]:
    """Score the public model ``(table, dense)`` with the private parameters ``store`` on the
    held-out ``data``.

    Parameters
    ----------
    model: the model whose :meth:`~secemb.models.base.RecModel.predict` scores pairs.
    table: float64 (num_items, sparse_width); dense: float64 (dense_size,).
    store: the users' private parameters (a :class:`~secemb.models.UserStore` or its
        float64 (num_users, private_size) array).
    data: held-out ratings (same id spaces as the training data).
    metric_names: registered names, e.g. ``["rmse", "mae"]`` (see :func:`get_metric`).
    rating_range: the public rating scale ``(lo, hi)``; pointwise metrics clip to it.

    Returns
    -------
    dict
        canonical metric name -> value, in the order asked; ``None`` where ``data`` is empty.
        Predictions are computed once for all pointwise metrics.

    Raises
    ------
    InvalidParameters
        An unknown or malformed metric name (before anything is computed), or a metric that
        needs a ranking over candidates (not built by this function yet).
    """
    metrics = [get_metric(n) for n in metric_names]
    for metric in metrics:
        if metric.needs != "pointwise":
            raise InvalidParameters(
                f"metric {metric.name!r} needs {metric.needs!r} inputs; evaluate builds pointwise "
                "predictions on held-out pairs only"
            )
    lo, hi = (float(x) for x in rating_range)
    pred = np.zeros(0)
    if metrics and data.num_ratings:
        pred = model.predict(table, dense, store, data.users, data.items)
    return {m.name: m(pred, data.ratings, (lo, hi)) for m in metrics}
