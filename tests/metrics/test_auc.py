"""AUC in the metric registry, against hand-computed values."""

from __future__ import annotations

import numpy as np

from secemb.metrics import get_metric


def test_auc_hand_computed() -> None:
    auc = get_metric("AUC")
    assert auc.higher_is_better and auc.needs == "pointwise"
    # perfect and reversed orderings
    assert auc(np.array([0.1, 0.2, 0.8, 0.9]), np.array([0, 0, 1, 1]), (0, 1)) == 1.0
    assert auc(np.array([0.9, 0.8, 0.2, 0.1]), np.array([0, 0, 1, 1]), (0, 1)) == 0.0
    # pairs (pos, neg): (0.5 vs 0.3) win, (0.5 vs 0.7) loss, (0.2 vs 0.3) loss, (0.2 vs 0.7) loss -> 1/4
    assert auc(np.array([0.5, 0.3, 0.2, 0.7]), np.array([1, 0, 1, 0]), (0, 1)) == 0.25
    # a tie counts one half: pos 0.4 vs neg 0.4 -> 1/2, vs neg 0.1 -> 1 ; (1.5) / 2
    assert auc(np.array([0.4, 0.4, 0.1]), np.array([1, 0, 0]), (0, 1)) == 0.75


def test_auc_undefined_with_one_class() -> None:
    auc = get_metric("auc")
    assert auc(np.array([0.1, 0.2]), np.array([1, 1]), (0, 1)) is None
    assert auc(np.array([]), np.array([]), (0, 1)) is None
