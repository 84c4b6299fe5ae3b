"""Shared checks of the torch models (NCF, FM, DeepFM)."""

import numpy as np
import torch

from secemb.data.features import synthetic_features
from secemb.models import get_model
from secemb.models.batch import rating_batch
from secemb.models.optim import AdamConfig


def setup(name, dim, *, users=6, items=20, base="ml-100k"):
    feats = synthetic_features(base, users, items, seed=3)
    model = get_model(name, dim=dim, reg=0.05, features=feats)
    rng = np.random.default_rng(0)
    table, dense = model.init_public(items, rng)
    store = model.new_user_store(users, rng, AdamConfig(lr=0.01))
    return model, feats, table, dense, store


def check_local_step(model, table, dense, store):
    rows = table[[3, 7, 11]].copy()
    pos = np.array([0, 1, 2, 1])
    ratings = np.array([4.0, 3.0, 5.0, 2.0])
    before = store.params[2].copy()
    step = model.local_step(rows, dense, store.state(2), rating_batch(pos, ratings))
    assert step.row_grads.shape == rows.shape
    assert step.dense_grad.shape == (model.dense_size,)
    assert np.isfinite(step.loss)
    assert not np.array_equal(before, store.params[2])  # the device's private step
    assert np.all(step.row_grads[:, model.trainable_width :] == 0)  # feature codes are constants
    # autograd against finite differences on a few coordinates of rows and dense
    def loss(r, d):
        return float(model.objective_torch(torch.tensor(r), torch.tensor(d), torch.tensor(before),
                                           rating_batch(pos, ratings), user=2))
    eps = 1e-6
    for (i, j) in [(0, 0), (1, model.trainable_width - 1), (2, 1)]:
        r1, r2 = rows.copy(), rows.copy()
        r1[i, j] += eps
        r2[i, j] -= eps
        assert abs((loss(r1, dense) - loss(r2, dense)) / (2 * eps) - step.row_grads[i, j]) < 1e-5
    rng = np.random.default_rng(1)
    for k in rng.choice(model.dense_size, size=4, replace=False):
        d1, d2 = dense.copy(), dense.copy()
        d1[k] += eps
        d2[k] -= eps
        assert abs((loss(rows, d1) - loss(rows, d2)) / (2 * eps) - step.dense_grad[k]) < 1e-5
    return step


def check_predict(model, table, dense, store):
    users = np.array([0, 1, 2, 5])
    items = np.array([1, 3, 3, 19])
    pred = model.predict(table, dense, store, users, items)
    assert pred.shape == (4,) and np.isfinite(pred).all()
    # one pair through forward directly
    ux = torch.as_tensor(model._user_x(users[:1]))
    f = model.forward(torch.as_tensor(store.params[users[:1]]), ux, torch.as_tensor(table[items[:1]]), torch.as_tensor(dense))
    assert abs(float(f[0]) - pred[0]) < 1e-12
