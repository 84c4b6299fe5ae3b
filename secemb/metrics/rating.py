"""Rating-prediction metrics: RMSE and MAE of predictions clipped to the public rating scale.

Clipping uses only the public scale (``rating_range``), never users' data: a prediction of
5.7 on a 1-5 scale is scored as 5.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mae", "rmse"]


def _clipped_error(pred: np.ndarray, truth: np.ndarray, rating_range: tuple[float, float]) -> np.ndarray:
    return np.clip(pred, *rating_range) - np.asarray(truth, dtype=np.float64)


def rmse(pred: np.ndarray, truth: np.ndarray, rating_range: tuple[float, float]) -> float | None:
    """Root mean squared error of ``pred`` clipped to ``rating_range``; ``None`` if empty.

    ``pred``: float64 (n,); ``truth``: (n,), any float dtype (converted to float64).
    """
    if truth.shape[0] == 0:
        return None
    diff = _clipped_error(pred, truth, rating_range)
    return float(np.sqrt(np.mean(diff * diff)))


def mae(pred: np.ndarray, truth: np.ndarray, rating_range: tuple[float, float]) -> float | None:
    """Mean absolute error of ``pred`` clipped to ``rating_range``; ``None`` if empty.

    ``pred``: float64 (n,); ``truth``: (n,), any float dtype (converted to float64).
    """
    if truth.shape[0] == 0:
        return None
    return float(np.mean(np.abs(_clipped_error(pred, truth, rating_range))))
