"""Review (session 18b) of this session's in-place buffers: ``MemoryStore._write`` copying a
checkpoint into the replaced one's arrays, ``SpilledShares`` leaving all-zero blocks off the
disk, ``FixedPoint.encode_clipped`` scaling and casting in its clipped copy, ``adam_update``'s
two scratch arrays.  What no existing test checks:

* store: a save that fails part way (one array cannot be copied) changes nothing -- not even
  the arrays that would have been reused in place -- and what an earlier load handed out never
  changes with later saves, also for a read-only or non-contiguous array saved;
* spill: arrays whose size is not a multiple of the block, all zero, or with their only
  non-zero bytes in the first / last block / last byte, in every dtype the servers spill, put
  in one batch with small arrays and some keys replaced, read back exactly;
* encode_clipped and adam_update on non-contiguous and read-only inputs: the same bits as the
  straightforward expressions, and the caller's inputs never modified.

Regression coverage (passes on the code reviewed)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.models.optim import AdamConfig, adam_update
from secemb.protocols.spill import _BLOCK_BYTES, _JOIN_BYTES, SpilledShares
from secemb.ring import FixedPoint
from secemb.server.store import Checkpoint, MemoryStore


class _Uncopyable:
    """An "array" of another shape that numpy cannot copy (a save that fails part way)."""

    shape, dtype = (1,), np.dtype(np.float64)

    def __array__(self, dtype=None, copy=None):  # noqa: ANN001, ANN204 - numpy's protocol
        raise MemoryError("no memory for this copy")


def _ck(version: int, table: np.ndarray, dense: object) -> Checkpoint:
    return Checkpoint(version, version, [0], 4, 1.5, table, dense, f"sha{version}")  # type: ignore[arg-type]


def test_a_failed_save_changes_nothing_and_earlier_loads_never_change() -> None:
    store = MemoryStore(0, "fp")
    t1, d1 = np.arange(12.0).reshape(3, 4), np.full(5, 2.0)
    store.save(_ck(1, t1, d1))
    first = store.load()
    assert first is not None
    t2 = np.asfortranarray(np.arange(12.0).reshape(3, 4) + 100)  # same shape and dtype: copied in place
    t2.flags.writeable = False
    store.save(_ck(2, t2, d1[::-1]))  # a read-only and a non-contiguous array
    second = store.load()
    assert second is not None and np.array_equal(second.table, t2) and np.array_equal(second.dense, d1[::-1])
    assert np.array_equal(first.table, t1) and np.array_equal(first.dense, d1)  # the earlier load's arrays
    with pytest.raises(MemoryError):
        store.save(_ck(3, np.zeros((3, 4)), _Uncopyable()))  # the table would be copied in place
    third = store.load()
    assert third is not None and third.version == 2 and third.model_sha256 == "sha2"
    assert np.array_equal(third.table, t2) and np.array_equal(third.dense, d1[::-1])
    assert np.array_equal(second.table, t2)


def _spill_cases() -> list[np.ndarray]:
    out = []
    for dtype in (np.uint32, np.uint64, np.float64):
        item = np.dtype(dtype).itemsize
        for size in (_JOIN_BYTES - item, _JOIN_BYTES, 3 * _BLOCK_BYTES + _JOIN_BYTES + item, 6 * _BLOCK_BYTES,
                     5 * item):
            n = size // item
            for where in ("none", "first", "last-block", "last-byte", "scattered"):
                a = np.zeros(n, dtype)
                if where == "first":
                    a[0] = 1
                elif where == "last-block":
                    a[-(n % (_BLOCK_BYTES // item) or 3)] = 2
                elif where == "last-byte":
                    a.view(np.uint8)[-1] = 1
                elif where == "scattered":
                    a[:: 7919] = 3
                out.append(a)
    return out


def test_spilled_shares_read_back_exactly_whatever_their_zero_blocks() -> None:
    cases = _spill_cases()
    spill = SpilledShares()
    try:
        half = len(cases) // 2
        spill.put_many([(k, a) for k, a in enumerate(cases[:half])])
        # the rest in one batch with non-contiguous views, and two earlier keys replaced
        cases[1], cases[5] = cases[5][::-1].copy(), np.ones(3, np.uint32)
        batch = [(k, cases[k][::-1][::-1] if k % 2 else cases[k]) for k in range(half, len(cases))]
        spill.put_many([*batch, (1, cases[1]), (5, cases[5])])
        for k, a in enumerate(cases):
            got = spill.get(k)
            assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a), k
    finally:
        spill.close()


@pytest.mark.parametrize(("k", "f"), [(64, 24), (32, 16)])
def test_encode_clipped_leaves_its_input_alone_and_ignores_its_layout(k: int, f: int) -> None:
    fp = FixedPoint(k, f)
    bound = fp.clip_bound(3)
    rng = np.random.default_rng(2)
    base = rng.normal(scale=bound / 2, size=(300, 40))
    base[:, 0], base[:, 1], base[:, 2], base[:, 3] = bound, -bound, 3 * bound, -0.0
    for x in (base.T, base[:, ::3], np.asfortranarray(base)):
        x.flags.writeable = False
        before = x.copy()
        scaled = np.rint(np.clip(x, -bound, bound) * 2.0**f)
        want = scaled.astype(np.int64).view(np.uint64) if k == 64 else scaled.astype(np.int32).view(np.uint32)
        got = fp.encode_clipped(x, 3)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert np.array_equal(x.view(np.int64), before.view(np.int64))


def test_adam_update_on_strided_views_is_the_expression_and_leaves_grad_alone() -> None:
    cfg = AdamConfig(lr=0.01)
    rng = np.random.default_rng(4)
    state = [rng.normal(size=(60, 20)), rng.normal(size=(60, 20)), rng.random(size=(60, 20))]
    grad = rng.normal(size=(20, 60)).T  # a transposed view
    grad.flags.writeable = False
    grad_before = grad.copy()
    want = [a.copy() for a in state]
    t = rng.integers(1, 6, (60, 1))
    b1, b2 = cfg.beta1, cfg.beta2
    p, m, v = want
    m *= b1
    m += (1.0 - b1) * grad
    v *= b2
    v += (1.0 - b2) * (grad * grad)
    p -= cfg.lr * (m / (1.0 - np.power(b1, t))) / (np.sqrt(v / (1.0 - np.power(b2, t))) + cfg.eps)
    got = [np.asfortranarray(a) for a in state]  # param, m, v of another layout, updated in place
    adam_update(got[0], grad, got[1], got[2], t, cfg)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a.view(np.int64), b.view(np.int64))
    assert np.array_equal(grad, grad_before)
