"""Issue 37, goal 5 (GREC's DeepFM at d = 512: 112 M dense values, 900 MB a float64 copy): the
per-device and per-round O(model) steps hold as few model-sized buffers as they can, with the
same bits as the plain formulas -- the fixed-point encoding of a clipped gradient one buffer
(was three), the Adam step two scratch arrays (was up to four temporaries) -- and a server's
spilled share leaves its all-zero blocks off the disk (DeepFM's dense gradient is ~3/4 zeros).
The reference values are the formulas written out here, not the code under test."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from secemb.models.optim import AdamConfig, adam_update
from secemb.protocols.spill import _BLOCK_BYTES, SpilledShares
from secemb.ring import FixedPoint


def _peak_bytes(fn) -> int:  # noqa: ANN001
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("k", "f"), [(64, 24), (64, 16), (32, 16)])
def test_encode_clipped_is_the_formula_in_one_buffer(k: int, f: int) -> None:
    fp = FixedPoint(k, f)
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(scale=s, size=50_000) for s in (1e-9, 1e-3, 1.0, 1e4)])
    x[::5], x[::7] = 0.0, -0.0
    for n in (1, 3, 100):
        bound = fp.clip_bound(n)
        x[:3] = bound, -bound, 2 * bound
        scaled = np.rint(np.clip(x, -bound, bound) * 2.0**f)
        want = scaled.astype(np.int64).view(np.uint64) if k == 64 else scaled.astype(np.int32).view(np.uint32)
        got = fp.encode_clipped(x, n)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert np.array_equal(fp.encode_clipped(x.reshape(-1, 8), n), want.reshape(-1, 8))
    if k == 64:  # the clipped copy is the output: one array of x's size (the old code: three)
        assert _peak_bytes(lambda: fp.encode_clipped(x, 100)) < 1.5 * x.nbytes


def _adam_formula(param, grad, m, v, t, cfg: AdamConfig) -> None:  # noqa: ANN001
    b1, b2 = cfg.beta1, cfg.beta2
    m *= b1
    m += (1.0 - b1) * grad
    v *= b2
    v += (1.0 - b2) * (grad * grad)
    param -= cfg.lr * (m / (1.0 - np.power(b1, t))) / (np.sqrt(v / (1.0 - np.power(b2, t))) + cfg.eps)


@pytest.mark.parametrize("cfg", [AdamConfig(), AdamConfig(lr=0.025, beta1=0.5, beta2=0.9, eps=1e-6)])
def test_adam_update_is_the_formula_in_two_scratch_arrays(cfg: AdamConfig) -> None:
    rng = np.random.default_rng(3)
    for shape, t in (((100_000,), 3), ((500, 40), rng.integers(1, 9, (500, 1)))):
        want = [rng.normal(size=shape), rng.normal(size=shape), rng.normal(size=shape), rng.random(size=shape)]
        want[1][::3] = 0.0
        got = [a.copy() for a in want]
        for _ in range(3):
            _adam_formula(*want[:4], t, cfg)
            adam_update(*got[:4], t, cfg)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a.view(np.int64), b.view(np.int64))  # the same bits, -0.0 included
    p, g, m, v = (np.ones(200_000) for _ in range(4))
    assert _peak_bytes(lambda: adam_update(p, g, m, v, 2, cfg)) < 2.5 * p.nbytes  # the expression: ~3x


def test_spill_leaves_zero_blocks_off_the_disk_and_reads_them_back_as_zeros() -> None:
    words = _BLOCK_BYTES // 8
    rng = np.random.default_rng(0)
    blocky = rng.integers(0, 2**63, 9 * words + 7, dtype=np.uint64)
    blocky[words : 3 * words] = 0
    blocky[5 * words :] = 0
    blocky[-1] = 5  # the short last block is kept
    dense = rng.integers(1, 2**63, 5 * words + 3, dtype=np.uint64)
    narrow = rng.integers(0, 2**32, (3000, 600), dtype=np.uint64).astype(np.uint32)
    narrow[:1000] = 0
    arrays = {0: np.arange(10, dtype=np.uint64), 1: blocky, 2: np.zeros(4 * words + 1, np.uint64), 3: dense,
              4: np.ones(3, np.uint32), 5: narrow}
    spill = SpilledShares()
    spill.put_many(list(arrays.items())[:3])
    spill.put_many(list(arrays.items())[3:])
    for key, a in arrays.items():
        got = spill.get(key)
        assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a)
    file_bytes = spill._file.seek(0, 2)  # type: ignore[union-attr]
    # blocky: blocks 0, 3, 4 and the 7-word tail (2 + 1 blocks and the all-zero one skipped);
    # the zeros: nothing; dense: all; narrow: its non-zero rows' blocks (two thirds, rounded up)
    written = (3 * _BLOCK_BYTES + 56) + 0 + dense.nbytes + 80 + 12
    assert written <= file_bytes < written + narrow.nbytes * 0.7
    spill.close()


def test_memory_store_keeps_a_checkpoint_read_only_and_hands_out_copies() -> None:
    from secemb.server.store import CHECKPOINT, Checkpoint, MemoryStore

    store = MemoryStore(0, "fp")

    def ck(version: int, dense: np.ndarray, table: np.ndarray) -> Checkpoint:
        return Checkpoint(version, version, [1, 2], 4, 2.5, table, dense, f"sha{version}")

    d1, t1 = np.arange(6, dtype=np.float64), np.ones((2, 3))
    store.save(ck(1, d1, t1))
    assert store._cks[CHECKPOINT][1]["dense"] is d1  # kept, not copied (session 19, helper K)
    with pytest.raises(ValueError, match="read-only"):
        d1[0] = 99.0  # and it cannot change under the store
    d2, t2 = np.full(6, 7.0), np.zeros((3, 3))  # the table changes shape: a new array for it
    store.save(ck(2, d2, t2))
    got = store.load()
    assert got is not None and got.version == 2 and got.model_sha256 == "sha2"
    assert np.array_equal(got.dense, d2) and np.array_equal(got.table, t2) and got.table.shape == (3, 3)
    assert store._cks[CHECKPOINT][1]["dense"] is d2  # the new checkpoint's arrays, no copy
    got.dense[0] = -1.0  # what load hands out is a copy
    again = store.load()
    assert again is not None and again.dense[0] == 7.0


def test_dense_leaves_read_the_vector_in_place_and_their_gradients_are_those_of_copies() -> None:
    import torch

    from secemb.models.features import DenseLayout

    lay = DenseLayout([("a", ()), ("b", (2, 3)), ("c", (4,))])
    flat = np.arange(11.0) / 7
    leaves = lay.leaves(flat)
    assert all(np.shares_memory(leaves[k].detach().numpy(), flat) for k in ("b", "c"))
    copies = {k: torch.tensor(np.asarray(lay.view(flat, k)), requires_grad=True) for k in ("a", "b", "c")}
    grads = []
    for fields in (leaves, copies):
        loss = (fields["b"] ** 2).sum() * fields["a"] + (fields["c"] ** 3).sum()
        grads.append(torch.autograd.grad(loss, list(fields.values())))
    for g, h in zip(*grads, strict=True):
        assert torch.equal(g, h)
    assert np.array_equal(flat, np.arange(11.0) / 7)  # the vector is untouched
    f32 = lay.leaves(np.arange(11, dtype=np.float32))  # another dtype: float64 copies
    assert all(t.dtype == torch.float64 and t.requires_grad for t in f32.values())


def test_deepfm_representation_gathers_its_public_products_once_with_the_same_bits() -> None:
    from secemb.data import load_dataset
    from secemb.data.features import load_features
    from secemb.inference.representation import representation_for
    from secemb.models import get_model

    data = load_dataset("synthetic-mini", None, seed=0)
    feats = load_features("synthetic-mini", None, num_users=data.num_users, num_items=data.num_items, seed=0)
    model = get_model("deepfm", dim=8, reg=0.01, features=feats)
    rng = np.random.default_rng(5)
    table, dense = model.init_public(data.num_items, rng)
    rep = representation_for(model, dense)
    h = rng.normal(size=(6, rep.rows, 8))
    w1 = model.layout.views(dense)["W1"]
    lx = model.l_x
    deep = np.einsum("nrd,rdh->nh", h, np.concatenate([w1[:1], w1[2 : 2 + lx]], axis=0))  # the formula
    summary = rep.summary(h)
    assert np.array_equal(summary[:, 8 + 1 :], deep)
    gathered = rep._user_w1  # type: ignore[attr-defined]
    assert np.array_equal(rep.summary(h[:2]), summary[:2]) and rep._user_w1 is gathered  # type: ignore[attr-defined]
    if model.l_y:
        v = model.layout.views(dense)
        assert np.array_equal(rep._item_w1, np.einsum("gd,gdh->gh", v["V_y"], w1[2 + lx :]))  # type: ignore[attr-defined]
    scores = rep.score(np.repeat(summary, 3, axis=0), table[rng.integers(0, data.num_items, 18)])
    assert scores.shape == (18,) and np.all(np.isfinite(scores))
