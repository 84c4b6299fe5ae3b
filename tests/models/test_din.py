"""DIN: parameter counts, masking of the history padding, training signal, the refused predict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.errors import InvalidParameters
from secemb.metrics import get_metric
from secemb.models import DIN, get_model
from secemb.models.din import click_batch


def test_paper_sizes() -> None:
    # the paper: d = 18 for user, goods and category ids over 49,023 users, 143,534 goods, 4,815
    # categories; the MLPs follow the reference DIN (80/40 attention, 200/80 output)
    model = get_model("din", num_categories=4815, dim=18)
    assert model.sparse_width == 18 and model.private_size == 18
    assert model.dense_size - 4815 * 18 == model.mlp_size
    # attention 144*80+80 + 80*40+40 + 40+1 ; output (18+36+36)*200+200 + 200*80+80 + 80+1
    assert model.mlp_size == (144 * 80 + 80 + 80 * 40 + 40 + 41) + (90 * 200 + 200 + 200 * 80 + 80 + 81)


def _batch(hist: list[list[int]]) -> object:
    h = np.array(hist, dtype=np.int64)
    return click_batch(np.array([0]), h, np.array([1]), np.where(h >= 0, 0, -1), np.array([1.0]))


def test_padding_is_ignored() -> None:
    model = DIN(num_categories=2, dim=4)
    table, dense = model.init_public(5, np.random.default_rng(0))
    rows, d, u = torch.tensor(table), torch.tensor(dense), torch.zeros(4, dtype=torch.float64)
    a = model.logits_torch(rows, d, u, _batch([[-1, -1, 2, 3]]))
    b = model.logits_torch(rows, d, u, _batch([[2, 3]]))
    c = model.logits_torch(rows, d, u, _batch([[4, 3]]))
    assert torch.allclose(a, b) and not torch.allclose(a, c)
    empty = model.logits_torch(rows, d, u, _batch([[-1, -1]]))  # no history: finite
    assert torch.isfinite(empty).all()


def test_local_step_gradients_and_predict_refused() -> None:
    model = DIN(num_categories=2, dim=4)
    rng = np.random.default_rng(1)
    table, dense = model.init_public(5, rng)
    store = model.new_user_store(1, rng, __import__("secemb.models", fromlist=["AdamConfig"]).AdamConfig())
    step = model.local_step(table[[2, 3, 4]], dense, store.state(0),
                            click_batch(np.array([0, 1]), np.array([[-1, 2], [0, 2]]), np.array([1, 0]),
                                        np.array([[-1, 0], [1, 0]]), np.array([1.0, 0.0])))
    assert step.row_grads.shape == (3, 4) and step.dense_grad.shape == (model.dense_size,)
    cats = step.dense_grad[:8].reshape(2, 4)
    assert np.abs(cats).sum() > 0 and np.abs(step.row_grads).sum() > 0
    with pytest.raises(InvalidParameters, match="score"):
        model.predict(table, dense, store, np.array([0]), np.array([1]))
    with pytest.raises(InvalidParameters, match="click"):
        _ = model.task  # secemb train refuses DIN with a message, not a traceback


def test_centralized_sgd_learns_the_planted_clicks() -> None:
    torch.set_num_threads(1)
    data = TaobaoShaped("taobao-mini", seed=3).clients(np.arange(200))
    train, test = split_clicks(data)
    model = DIN(num_categories=data.num_categories, dim=18)
    rng = np.random.default_rng(0)
    table, dense = model.init_public(data.num_goods, rng)
    users = model.init_private(data.num_users, rng)
    auc = get_metric("auc")
    before = auc(model.score(table, dense, users, test), test.label, (0, 1))
    params = [torch.tensor(a, requires_grad=True) for a in (table, dense, users)]
    opt = torch.optim.SGD(params, lr=0.5)
    g = data.goods_category
    for _ in range(1):
        order = rng.permutation(len(train))
        for lo in range(0, len(train), 32):
            p = train.subset(order[lo:lo + 32])
            b = click_batch(p.target, p.history, g[p.target], np.where(p.history >= 0, g[np.maximum(p.history, 0)], -1),
                            p.label)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model.logits_torch(params[0], params[1], params[2][p.user], b), torch.as_tensor(b["label"]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    after = auc(model.score(*(t.detach().numpy() for t in params), test), test.label, (0, 1))
    assert before is not None and after is not None
    assert after > 0.6 and after > before + 0.05


def test_reg_adds_the_touched_embeddings_norm() -> None:
    plain, regd = DIN(num_categories=2, dim=4), DIN(num_categories=2, dim=4, reg=0.5)
    table, dense = plain.init_public(5, np.random.default_rng(2))
    rows, d, u = torch.tensor(table), torch.tensor(dense), torch.ones(4, dtype=torch.float64)
    batch = click_batch(np.array([0]), np.array([[-1, 2]]), np.array([1]), np.array([[-1, 0]]), np.array([1.0]))
    extra = 0.5 * ((rows[[0, 2]] ** 2).sum() + (d[:8].reshape(2, 4) ** 2).sum() + 4.0)  # goods 0, 2; cats 0, 1; user
    assert torch.isclose(regd.objective_torch(rows, d, u, batch) - plain.objective_torch(rows, d, u, batch), extra)
