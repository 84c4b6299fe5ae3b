"""Click-through metrics (pointwise contract of :mod:`secemb.metrics.registry`).

:func:`auc` is the area under the ROC curve of click scores against 0/1 labels: the
probability that a random clicked sample scores above a random non-clicked one, ties counting
one half (the Mann-Whitney statistic over average ranks).  Nothing here imports torch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["auc"]


def auc(pred: np.ndarray, truth: np.ndarray, rating_range: tuple[float, float] | None = None) -> float | None:
    """ROC AUC of scores ``pred`` (float64 (n,), any monotone scale: logits or probabilities)
    against labels ``truth`` (0/1, (n,)); ``rating_range`` is ignored (pointwise contract).

    Returns ``None`` when ``n == 0`` or only one class is present (AUC undefined).
    """
    pred = np.asarray(pred, dtype=np.float64).ravel()
    pos = np.asarray(truth).ravel() > 0.5
    n_pos = int(pos.sum())
    n_neg = pos.size - n_pos
    if pred.size != pos.size:
        raise ValueError(f"pred and truth must have the same length, got {pred.size} and {pos.size}")
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(pred, kind="mergesort")
    sorted_pred = pred[order]
    # average rank (1-based) of each run of equal scores
    starts = np.flatnonzero(np.r_[True, sorted_pred[1:] != sorted_pred[:-1]])
    ends = np.r_[starts[1:], sorted_pred.size]
    run_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(pred.size)
    ranks[order] = np.repeat(run_rank, ends - starts)
    u = ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))
