"""Lossy baselines: documented error bounds, exactness where the scheme is linear."""

import numpy as np
import pytest

from secemb.data import synthetic_like
from secemb.errors import InvalidParameters
from secemb.models import get_model
from secemb.protocols import get_protocol
from secemb.protocols.lossy import FACTOR_FRAC_BITS, colr_basis
from secemb.randomness import CtrDrbg
from secemb.ring import FixedPoint
from secemb.round.results import TrainConfig
from secemb.training.loop import train

FP = FixedPoint(32, 16)


def _round(name, grads, dense, *, rank=2, frozen=0, scale=None, seed=0):
    """Run one round of ``name`` by hand: returns the decoded (sparse, dense) sums."""
    w = grads[0][1].shape[1]
    proto = get_protocol(name, rank=rank, frozen_columns=frozen, **({"initial_scale": scale} if scale else {}))
    m = 12
    rc = proto.round_config(0, m, w, dense[0].size, grads[0][0].size)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    table = np.zeros((m, w), np.uint32)
    s0.begin_round(rc, table)
    s1.begin_round(rc, table)
    for u, ((idx, rows), dv) in enumerate(zip(grads, dense)):
        user = proto.make_user(rc, _rng=CtrDrbg(bytes([(u + 31 * seed) % 256]) * 16))
        q0, q1 = user.retrieval_request(idx)
        user.retrieval_result(s0.handle_retrieval(u, q0), s1.handle_retrieval(u, q1))
        u0, u1 = user.upload(FP.encode(rows), FP.encode(dv))
        s0.handle_upload(u, u0)
        s1.handle_upload(u, u1)
    sp, de = s0.combine(s1.aggregate_share())
    return FP.decode(sp), FP.decode(de), proto


def _inputs(seed=0, users=5, w=4, frozen=0):
    g = np.random.default_rng(seed)
    grads, dense, total = [], [], np.zeros((12, w))
    for _ in range(users):
        idx = g.choice(12, 3, replace=False)
        rows = g.normal(0, 0.01, (3, w))
        rows[:, w - frozen :] = 0 if frozen else rows[:, w - frozen :]
        grads.append((idx, rows))
        dense.append(g.normal(0, 0.1, 2))
        total[idx] += rows
    return grads, dense, total


@pytest.mark.parametrize("name, level", [("quant8", 127), ("ternary", 1)])
def test_quantizers_error_bound_and_exact_dense(name, level):
    grads, dense, total = _inputs()
    scale = 0.03 / level  # every value within the clipping range
    sp, de, _ = _round(name, grads, dense, scale=scale)
    assert np.allclose(de, sum(dense), atol=2**-15)  # dense is exact (fixed point only)
    # per element: each user's rounding error < scale; zeros stay exactly zero
    assert np.all(np.abs(sp - total) <= len(grads) * scale + 2**-15)
    assert np.all(sp[total == 0] == 0)


def test_quantizers_are_unbiased():
    idx = np.arange(3)
    rows = np.full((3, 4), 0.0037)
    errs = []
    for k in range(30):
        sp, _, _ = _round("ternary", [(idx, rows)], [np.zeros(2)], scale=0.01, seed=k)
        errs.append(sp[:3].mean() - 0.0037)
    assert abs(np.mean(errs)) < 0.001


def test_colr_equals_projection_of_the_sum():
    grads, dense, total = _inputs(w=5, frozen=1)
    sp, de, proto = _round("colr", grads, dense, rank=2, frozen=1)
    b = colr_basis(0, 2, 4)
    want = np.zeros_like(total)
    want[:, :4] = total[:, :4] @ b.T @ b
    assert np.allclose(sp, want, atol=len(grads) * 2 ** -(FACTOR_FRAC_BITS - 4) + 2**-15)
    assert np.all(sp[:, 4] == 0)  # frozen column untouched
    assert np.allclose(b @ b.T, np.eye(2))


def test_svd_full_rank_is_exact_up_to_fixed_point():
    grads, dense, total = _inputs(w=3)
    sp, _, _ = _round("svd", grads, dense, rank=3)
    assert np.allclose(sp, total, atol=1e-4)


def test_lossy_upload_sizes():
    m, w, p, r = 1682, 65, 1, 12
    sizes = {}
    for name in ("secfedrec", "quant8", "ternary", "svd", "colr"):
        proto = get_protocol(name, rank=r) if name != "secfedrec" else get_protocol(name)
        rc = proto.round_config(0, m, w, p, 200)
        sizes[name] = proto.upload_body_bytes(rc, 0)
        assert proto.upload_body_bytes(rc, 1) == sizes[name]
    assert sizes["secfedrec"] == (m * w + p) * 4
    assert sizes["quant8"] == m * w * 2 + 4 and sizes["ternary"] == m * w + 4
    assert sizes["svd"] == (m * r + r * w) * 4 + 4 and sizes["colr"] == m * r * 4 + 4


@pytest.mark.parametrize("name", ["quant8", "ternary", "svd", "colr"])
def test_lossy_protocols_train(name):
    data = synthetic_like(30, 40, 500, seed=2)
    res = train(get_model("mf", dim=4), get_protocol(name, rank=2), data, data,
                TrainConfig(epochs=2, users_per_round=10, m_prime=12))
    assert np.isfinite(res.final_rmse) and res.final_rmse < 2.0


@pytest.mark.parametrize(("options", "says"), [
    ({"frozen_columns": True}, "frozen_columns must be an int >= 0, got True"),
    ({"frozen_columns": -1}, "frozen_columns must be an int >= 0, got -1"),
    ({"initial_scale": 0.0}, "initial_scale must be a finite number > 0, got 0.0"),
    ({"min_scale": float("nan")}, "min_scale must be a finite number > 0, got nan"),
])
def test_lossy_options_out_of_range_are_refused(options, says):
    with pytest.raises(InvalidParameters, match=f"^{says}$"):
        get_protocol("svd", **options)
