"""Matrix factorization: shapes, the hand-derived gradients against autograd and finite
differences, the on-device Adam, prediction, the registry and the presets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from secemb.errors import InvalidParameters
from secemb.models.batch import rating_batch
from secemb.models import (
    PRESETS,
    AdamConfig,
    MatrixFactorization,
    RecModel,
    UserStore,
    get_model,
    get_preset,
)


def _setup(dim=8, n_items=30, n_users=4, seed=0):
    model = MatrixFactorization(dim=dim, reg=0.05)
    rng = np.random.default_rng(seed)
    table, dense = model.init_public(n_items, rng)
    table[:, dim] = rng.normal(0, 0.1, n_items)  # non-zero item biases for the checks
    store = model.new_user_store(n_users, rng, AdamConfig(lr=0.01))
    store.params[:, dim] = rng.normal(0, 0.1, n_users)
    return model, rng, table, dense, store


def test_sizes_and_init():
    model, _, table, dense, store = _setup(dim=8, n_items=30, n_users=4)
    assert (model.sparse_width, model.dense_size, model.private_size) == (9, 1, 9)
    assert table.shape == (30, 9) and table.dtype == np.float64
    assert dense.shape == (1,) and dense[0] == 3.0  # midpoint of the public 1-5 scale
    assert store.params.shape == (4, 9)
    fresh = MatrixFactorization(dim=8).init_public(30, np.random.default_rng(0))[0]
    assert np.all(fresh[:, 8] == 0)  # item biases start at 0
    assert 0.07 < fresh[:, :8].std() < 0.13


def test_init_is_deterministic_under_a_seed():
    m = MatrixFactorization(dim=4)
    a = m.init_public(10, np.random.default_rng(3))
    b = m.init_public(10, np.random.default_rng(3))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("item_pos", [[0, 1, 2, 3, 4], [4, 0, 2, 2, 1, 3, 0]])
def test_fast_gradients_match_autograd(item_pos):
    model, _, table, dense, store = _setup()
    rows = table[[3, 7, 11, 20, 25]]
    item_pos = np.array(item_pos)
    ratings = np.linspace(1, 5, item_pos.size)
    p0 = store.params[1].copy()
    fast = model.local_step(rows, dense, store.state(1), rating_batch(item_pos, ratings))
    p_fast = store.params[1].copy()

    store2 = UserStore(store.params, store.optimizer)
    store2.params[1] = p0
    ref = RecModel.local_step(model, rows, dense, store2.state(1), rating_batch(item_pos, ratings))
    np.testing.assert_allclose(fast.row_grads, ref.row_grads, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fast.dense_grad, ref.dense_grad, rtol=1e-12, atol=1e-14)
    assert fast.loss == pytest.approx(ref.loss, rel=1e-12)
    np.testing.assert_allclose(p_fast, store2.params[1], rtol=1e-12, atol=1e-14)
    assert fast.row_grads.shape == rows.shape and fast.dense_grad.shape == (1,)


def test_gradients_match_finite_differences():
    model, _, table, dense, store = _setup(dim=4)
    rows = table[[1, 2, 5]].copy()
    item_pos = np.array([0, 1, 2, 1])
    ratings = np.array([4.0, 2.0, 5.0, 3.0])
    priv = store.params[0].copy()

    def objective(rows_, dense_, priv_):
        with torch.no_grad():
            return float(
                model.objective_torch(
                    torch.tensor(rows_),
                    torch.tensor(dense_),
                    torch.tensor(priv_),
                    rating_batch(item_pos, ratings),
                )
            )

    res = model.local_step(rows, dense, store.state(0), rating_batch(item_pos, ratings))
    h = 1e-6
    num = np.zeros_like(rows)
    for idx in np.ndindex(rows.shape):
        plus, minus = rows.copy(), rows.copy()
        plus[idx] += h
        minus[idx] -= h
        num[idx] = (objective(plus, dense, priv) - objective(minus, dense, priv)) / (2 * h)
    np.testing.assert_allclose(res.row_grads, num, rtol=1e-6, atol=1e-8)
    d_num = (objective(rows, dense + h, priv) - objective(rows, dense - h, priv)) / (2 * h)
    assert res.dense_grad[0] == pytest.approx(d_num, rel=1e-6)
    assert res.loss == pytest.approx(objective(rows, dense, priv), rel=1e-12)


def test_local_step_moves_private_params_by_adam():
    model, _, table, dense, store = _setup()
    rows = table[:5]
    before = store.params[2].copy()
    others = np.delete(store.params, 2, axis=0).copy()
    model.local_step(rows, dense, store.state(2), rating_batch(np.arange(5), np.full(5, 5.0)))
    after = store.params[2]
    # first Adam step moves every coordinate with a non-zero gradient by about lr
    np.testing.assert_allclose(np.abs(after - before), 0.01, rtol=1e-3)
    assert np.array_equal(np.delete(store.params, 2, axis=0), others)
    assert store.steps(2) == 1


def test_local_step_reduces_loss_when_repeated():
    model, _, table, dense, store = _setup()
    rows = table[:6].copy()
    r = np.array([5.0, 1.0, 4.0, 2.0, 5.0, 3.0])
    losses = []
    for _ in range(200):
        res = model.local_step(rows, dense, store.state(0), rating_batch(np.arange(6), r))
        rows -= 0.05 * res.row_grads
        dense -= 0.05 * res.dense_grad
        losses.append(res.loss)
    assert losses[-1] < 0.2 * losses[0]


def test_predict_matches_formula():
    model, _, table, dense, store = _setup(dim=3)
    users, items = np.array([0, 3, 1]), np.array([5, 0, 29])
    pred = model.predict(table, dense, store, users, items)
    for j, (u, i) in enumerate(zip(users, items)):
        p, q = store.params[u], table[i]
        assert pred[j] == pytest.approx(dense[0] + p[3] + q[3] + p[:3] @ q[:3])
    assert np.array_equal(pred, model.predict(table, dense, store.params, users, items))


def test_bad_arguments_rejected():
    with pytest.raises(InvalidParameters):
        MatrixFactorization(dim=0)
    with pytest.raises(InvalidParameters):
        MatrixFactorization(reg=float("nan"))
    model, _, table, dense, store = _setup()
    with pytest.raises(InvalidParameters):
        model.local_step(table[:3, :4], dense, store.state(0), rating_batch(np.arange(3), np.ones(3)))
    with pytest.raises(InvalidParameters):
        model.local_step(table[:3], dense, store.state(0), rating_batch(np.array([0, 3]), np.ones(2)))
    with pytest.raises(InvalidParameters):
        model.local_step(table[:3], dense, store.state(0), rating_batch(np.arange(0), np.ones(0)))
    with pytest.raises(InvalidParameters):
        store.state(99)
    with pytest.raises(InvalidParameters):
        store.state(0).apply_gradient(np.zeros(3))


def test_registry_and_presets():
    m = get_model("mf", dim=16, reg=0.1)
    assert isinstance(m, MatrixFactorization) and m.dim == 16 and m.sparse_width == 17
    with pytest.raises(InvalidParameters, match="available"):
        get_model("nope")
    p = get_preset("mf", "ml-100k")
    assert (p.dim, p.lr, p.reg, p.m_prime) == (64, 0.025, 0.01, 200)
    assert get_preset("mf", "synthetic") == p
    assert get_preset("mf", "ml-1m").reg == 0.001
    assert get_preset("mf", "ml-10m").lr == 0.01
    assert get_preset("ncf", "ml-1m").lr == 0.0001
    assert set(PRESETS) == {"mf", "ncf", "fm", "deepfm", "sasrec", "caser"}
    with pytest.raises(InvalidParameters):
        get_preset("mf", "netflix")
