"""The metric registry, RMSE/MAE and evaluate(); expected values computed by hand."""

import math

import numpy as np
import pytest

from secemb.data import RatingData
from secemb.errors import InvalidParameters
from secemb.metrics import available_metrics, evaluate, get_metric, mae, register_metric, rmse
from secemb.metrics import registry
from secemb.models import MatrixFactorization


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_rmse_and_mae_clip_to_the_public_scale():
    # clipped predictions [1, 3, 5] against [1, 2, 5]: errors [0, 1, 0]
    pred, truth = np.array([0.5, 3.0, 6.0]), np.array([1, 2, 5], dtype=np.float32)
    assert rmse(pred, truth, (1.0, 5.0)) == pytest.approx(math.sqrt(1 / 3), rel=1e-15)
    assert mae(pred, truth, (1.0, 5.0)) == pytest.approx(1 / 3, rel=1e-15)
    # in range, errors [1, 3]: RMSE sqrt(5), MAE 2
    assert rmse(np.array([2.0, 4.0]), np.array([1.0, 1.0]), (1.0, 5.0)) == pytest.approx(math.sqrt(5))
    assert mae(np.array([2.0, 4.0]), np.array([1.0, 1.0]), (1.0, 5.0)) == 2.0


def test_empty_held_out_data_scores_none():
    assert rmse(np.zeros(0), np.zeros(0), (1.0, 5.0)) is None
    assert mae(np.zeros(0), np.zeros(0), (1.0, 5.0)) is None


def test_registry_lists_and_resolves_rating_metrics():
    assert {"rmse", "mae"} <= set(available_metrics())
    m = get_metric(" RMSE ")
    assert (m.name, m.needs, m.higher_is_better, m.k) == ("rmse", "pointwise", False, None)
    assert m(np.array([2.0]), np.array([1.0]), (1.0, 5.0)) == 1.0


def test_cut_off_names_are_parsed(scratch_registry):
    seen = []

    def top(scores, relevant, *, k):
        seen.append(k)
        return 1.0

    register_metric("hits", top, needs="ranking", higher_is_better=True, at_k=True)
    m = get_metric("HITS@10")
    assert (m.name, m.needs, m.k, m.higher_is_better) == ("hits@10", "ranking", 10, True)
    assert m(np.zeros((1, 3)), np.zeros((1, 3), bool)) == 1.0 and seen == [10]
    assert "hits@K" in available_metrics()


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("nope", "unknown metric 'nope'"), ("rmse@5", "takes no cut-off"), ("hits", "needs a cut-off"),
     ("hits@0", "int >= 1, got '0'"), ("hits@x", "int >= 1, got 'x'")],
)
def test_bad_metric_names_are_refused(scratch_registry, name, fragment):
    register_metric("hits", lambda s, r, *, k: 0.0, needs="ranking", at_k=True)
    with pytest.raises(InvalidParameters, match=fragment):
        get_metric(name)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(("NDCG", len), "metric name must match"), (("a@b", len), "metric name must match"),
     (("x", 3), "fn must be callable"), (("x", len, "listwise"), "needs must be one of")],
)
def test_bad_registrations_are_refused(scratch_registry, args, fragment):
    name, fn, *needs = args
    with pytest.raises(InvalidParameters, match=fragment):
        register_metric(name, fn, **({"needs": needs[0]} if needs else {}))


def _tiny_mf():
    # dim 1: table rows [q_i, b_i], dense [mu], private [p_u, b_u]
    model = MatrixFactorization(dim=1)
    table = np.array([[1.0, 0.5], [2.0, -1.0]])
    dense = np.array([4.5])
    params = np.array([[1.0, 0.0], [0.5, 0.25]])
    return model, table, dense, params


def test_evaluate_scores_held_out_pairs():
    model, table, dense, params = _tiny_mf()
    # (user 0, item 0): 4.5 + 0 + 0.5 + 1*1 = 6.0 -> clipped 5; (user 1, item 1): 4.5 + 0.25 - 1 + 0.5*2 = 4.75
    data = RatingData("t", 2, 2, np.array([0, 1]), np.array([0, 1]), np.array([5.0, 3.0], np.float32))
    out = evaluate(model, table, dense, params, data, ["mae", "RMSE"], rating_range=(1, 5))
    assert list(out) == ["mae", "rmse"]  # canonical names, in the order asked
    assert out["mae"] == pytest.approx(0.875, rel=1e-15)  # (0 + 1.75) / 2
    assert out["rmse"] == pytest.approx(1.75 / math.sqrt(2), rel=1e-15)


def test_evaluate_on_empty_data_gives_none():
    model, table, dense, params = _tiny_mf()
    empty = RatingData("t", 2, 2, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    assert evaluate(model, table, dense, params, empty, ["rmse", "mae"], rating_range=(1, 5)) == {
        "rmse": None, "mae": None}


def test_evaluate_refuses_metrics_it_cannot_feed(scratch_registry):
    model, table, dense, params = _tiny_mf()
    data = RatingData("t", 2, 2, np.array([0]), np.array([0]), np.array([5.0], np.float32))
    register_metric("hits", lambda s, r, *, k: 0.0, needs="ranking", at_k=True)
    with pytest.raises(InvalidParameters, match="need the context"):
        evaluate(model, table, dense, params, data, ["rmse", "hits@5"], rating_range=(1, 5))
    with pytest.raises(InvalidParameters, match="'mf' does not rank next items"):
        evaluate(model, table, dense, params, data, ["rmse", "hits@5"], rating_range=(1, 5), context=data)
    with pytest.raises(InvalidParameters, match="unknown metric"):
        evaluate(model, table, dense, params, data, ["rmsee"], rating_range=(1, 5))


def test_recall_at_k_counts_the_share_of_relevant_items_in_the_top_k():
    from secemb.metrics import get_metric

    scores = np.array([[0.9, 0.8, 0.1, 0.7], [0.1, 0.2, 0.3, 0.4]])
    relevant = np.array([[True, False, True, False], [False, False, False, True]])
    # row 0: top-2 = items 0, 1 -> 1 of its 2 relevant; row 1: top-2 = items 3, 2 -> 1 of 1
    assert get_metric("recall@2")(scores, relevant) == pytest.approx((0.5 + 1.0) / 2)
    # k = 4: everything retrieved
    assert get_metric("recall@4")(scores, relevant) == 1.0
    # one relevant item a row: recall@k is HR@k
    one = np.array([[False, True, False, False], [False, False, False, True]])
    assert get_metric("recall@1")(scores, one) == get_metric("hr@1")(scores, one) == 0.5
