"""Server Adam against torch.optim.Adam, and the lazy row semantics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from secemb.errors import InvalidParameters
from secemb.models import AdamConfig
from secemb.training import ServerAdam


def _torch_adam(p0, d0, grads, dgrads, cfg):
    p = torch.tensor(p0, requires_grad=True)
    d = torch.tensor(d0, requires_grad=True)
    opt = torch.optim.Adam([p, d], lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    for g, dg in zip(grads, dgrads):
        opt.zero_grad()
        p.grad = torch.tensor(g)
        d.grad = torch.tensor(dg)
        opt.step()
    return p.detach().numpy(), d.detach().numpy()


@pytest.mark.parametrize("lazy", [False, True])
def test_matches_torch_adam_on_dense_gradients(lazy):
    rng = np.random.default_rng(0)
    cfg = AdamConfig(lr=0.03, beta1=0.8, beta2=0.99, eps=1e-7)
    p0, d0 = rng.normal(size=(6, 4)), rng.normal(size=2)
    grads = [rng.normal(size=(6, 4)) for _ in range(25)]  # no zero rows: lazy == dense
    dgrads = [rng.normal(size=2) for _ in range(25)]
    table, dense = p0.copy(), d0.copy()
    opt = ServerAdam(6, 4, 2, cfg, lazy=lazy)
    for g, dg in zip(grads, dgrads):
        opt.step(table, dense, g, dg)
    ref_t, ref_d = _torch_adam(p0, d0, grads, dgrads, cfg)
    np.testing.assert_allclose(table, ref_t, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(dense, ref_d, rtol=1e-12, atol=1e-13)


def test_dense_mode_equals_torch_with_zero_rows():
    rng = np.random.default_rng(1)
    cfg = AdamConfig(lr=0.01)
    p0, d0 = rng.normal(size=(5, 3)), rng.normal(size=1)
    grads = []
    for _ in range(20):
        g = rng.normal(size=(5, 3))
        g[rng.random(5) < 0.5] = 0.0
        grads.append(g)
    dgrads = [rng.normal(size=1) for _ in range(20)]
    table, dense = p0.copy(), d0.copy()
    opt = ServerAdam(5, 3, 1, cfg, lazy=False)
    for g, dg in zip(grads, dgrads):
        opt.step(table, dense, g, dg)
    ref_t, ref_d = _torch_adam(p0, d0, grads, dgrads, cfg)
    np.testing.assert_allclose(table, ref_t, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(dense, ref_d, rtol=1e-12, atol=1e-13)


def test_lazy_rows_follow_their_own_adam():
    """A lazy row is untouched in rounds without gradient, and otherwise follows a dense Adam
    that sees only its non-zero rounds."""
    rng = np.random.default_rng(2)
    cfg = AdamConfig(lr=0.02)
    p0 = rng.normal(size=(4, 3))
    table, dense = p0.copy(), np.zeros(0)
    opt = ServerAdam(4, 3, 0, cfg, lazy=True)
    seen: dict[int, list[np.ndarray]] = {i: [] for i in range(4)}
    for step in range(30):
        g = rng.normal(size=(4, 3))
        active = rng.random(4) < 0.4
        g[~active] = 0.0
        before = table.copy()
        moved = opt.step(table, dense, g, np.zeros(0))
        assert moved == int(active.sum())
        assert np.array_equal(table[~active], before[~active])
        for i in np.flatnonzero(active):
            seen[i].append(g[i])
    for i in range(4):
        if not seen[i]:
            assert np.array_equal(table[i], p0[i])
            continue
        ref, _ = _torch_adam(
            p0[i : i + 1],
            np.zeros(0),
            [s[None] for s in seen[i]],
            [np.zeros(0)] * len(seen[i]),
            cfg,
        )
        np.testing.assert_allclose(table[i], ref[0], rtol=1e-12, atol=1e-13)


def test_rejects_bad_shapes_and_values():
    opt = ServerAdam(3, 2, 1, AdamConfig())
    t, d = np.zeros((3, 2)), np.zeros(1)
    with pytest.raises(InvalidParameters):
        opt.step(t, d, np.zeros((2, 2)), np.zeros(1))
    with pytest.raises(InvalidParameters):
        opt.step(t, d, np.zeros((3, 2)), np.zeros(2))
    with pytest.raises(InvalidParameters):
        opt.step(t, d, np.full((3, 2), np.nan), np.zeros(1))
    with pytest.raises(InvalidParameters):
        AdamConfig(lr=-1.0)
    with pytest.raises(InvalidParameters):
        AdamConfig(beta2=1.0)
