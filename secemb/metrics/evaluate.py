"""Score a model on held-out data with metrics from the registry (what drivers call after
each epoch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from secemb.errors import InvalidParameters
from secemb.metrics.ranking import rank_next_items
from secemb.metrics.registry import get_metric
from secemb.models.sequential import SequenceModel

if TYPE_CHECKING:  # pragma: no cover
    from secemb.data import RatingData
    from secemb.models.base import RecModel, UserStore

__all__ = ["check_metrics", "evaluate"]


def check_metrics(model: RecModel, metric_names: Sequence[str], labels: np.ndarray | None = None) -> None:
    """Raise unless ``model`` can compute every metric of ``metric_names`` on data whose
    ratings are ``labels`` (when given) -- cheap: builders call it before training, so a wrong
    choice costs no epoch.

    Raises
    ------
    InvalidParameters
        An unknown or malformed metric name; ranking metrics for a model that does not rank
        next items (ranking needs a :class:`~secemb.models.SequenceModel`); ``auc`` on labels
        that are not all 0 or 1 (ratings).  The message names the metrics that fit.
    """
    metrics = [get_metric(n) for n in metric_names]
    ranking = [mt.name for mt in metrics if mt.needs == "ranking"]
    fits = "hr@K, ndcg@K and their _sampled forms" if isinstance(model, SequenceModel) else "rmse, mae"
    if ranking and not isinstance(model, SequenceModel):
        raise InvalidParameters(f"model {model.name!r} does not rank next items; ranking metrics {ranking} need a "
                                f"sequential model (metrics that fit {model.name!r}: {fits})")
    if labels is not None and labels.size and "auc" in [mt.name for mt in metrics] \
            and not np.isin(labels, (0.0, 1.0)).all():
        raise InvalidParameters(f"metric 'auc' scores 0/1 click labels, but the data's ratings range from "
                                f"{labels.min():g} to {labels.max():g} (metrics that fit {model.name!r}: {fits})")


def evaluate(
    model: RecModel,
    table: np.ndarray,
    dense: np.ndarray,
    store: UserStore | np.ndarray,
    data: RatingData,
    metric_names: Sequence[str],
    *,
    rating_range: tuple[float, float],
    context: RatingData | None = None,
    seed: int = 0,
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
    context: the interactions before ``data`` (what ranking metrics rank after; see
        :func:`~secemb.metrics.ranking.rank_next_items`); needed by ranking metrics only.
    seed: seed of the sampled negatives of ranking metrics.

    Returns
    -------
    dict
        canonical metric name -> value, in the order asked; ``None`` where ``data`` is empty.
        Predictions are computed once for all pointwise metrics.

    Raises
    ------
    InvalidParameters
        An unknown or malformed metric name (before anything is computed), ranking metrics
        without ``context``, or a model that cannot compute what a metric needs.
    """
    metrics = [get_metric(n) for n in metric_names]
    pointwise = [mt for mt in metrics if mt.needs == "pointwise"]
    ranking = [mt for mt in metrics if mt.needs == "ranking"]
    if ranking and context is None:
        raise InvalidParameters(f"ranking metrics {[mt.name for mt in ranking]} need the context the held-out "
                                "interactions follow")
    lo, hi = (float(x) for x in rating_range)
    out: dict[str, float | None] = {}
    if pointwise:
        pred = np.zeros(0)
        if data.num_ratings:
            pred = model.predict(table, dense, store, data.users, data.items)
        out.update({mt.name: mt(pred, data.ratings, (lo, hi)) for mt in pointwise})
    if ranking:
        assert context is not None  # checked above
        check_metrics(model, metric_names)
        assert isinstance(model, SequenceModel)  # checked by check_metrics
        seq_model = model

        def score(users: np.ndarray, history: np.ndarray, candidates: np.ndarray | None) -> np.ndarray:
            return seq_model.score_next(table, dense, store, users, history, candidates)

        out.update(rank_next_items(score, table.shape[0], seq_model.task.max_len, context, data, ranking, seed=seed))
    return {mt.name: out[mt.name] for mt in metrics}
