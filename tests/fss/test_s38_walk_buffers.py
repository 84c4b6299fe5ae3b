"""Issue 34 (session 38, helper B4): ``retrieve_and_prepare_buckets(..., payload_out=)`` walks a caller's
strided payload views (a bucket range of a batch's arrays) into new C-contiguous buffers
(:func:`secemb.fss.fused._walk_buffer`) and copies them back, instead of walking into copies of the views:
the walk sets every key's sums (``fresh``), so the views' old values were copied in (~90 us a server's
walk of 20 devices' 125 buckets) and never read.

The premise is checked, not assumed: the buffers are filled with poison before the walk, and every key's
sums and control-bit counts still come out as the sums of its live leaves (``eval_full_path`` and
``convert``, independently), a bucket of size 0 included; the views' neighbours are untouched.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.fss import fused, kernels
from secemb.fss.convert import convert
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG, PayloadSums, retrieve_and_prepare_buckets
from secemb.randomness import CtrDrbg

BACKENDS = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")),
]


def test_walk_buffer_is_the_view_where_contiguous_else_a_new_array() -> None:
    batch = np.arange(3 * 5 * 4, dtype=np.uint32).reshape(3, 5, 4)
    assert fused._walk_buffer(batch) is batch
    view = batch[:, 1:3]
    got = fused._walk_buffer(view)
    assert got.shape == view.shape and got.dtype == view.dtype and got.flags.c_contiguous
    assert not np.may_share_memory(got, batch)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_walk_sets_every_key_of_a_poisoned_buffer(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    made: list[np.ndarray] = []

    def poisoned(view: np.ndarray) -> np.ndarray:
        buffer = np.full(view.shape, -7 if view.dtype == np.int64 else 0xA5A5A5A5, view.dtype)
        made.append(buffer)
        return buffer

    monkeypatch.setattr(fused, "_walk_buffer", poisoned)
    big_m, sizes = 20, np.array([20, 0, 13, 1, 7])
    users, buckets, width, ring_bits = 3, len(sizes), 65, 32
    gen = np.random.default_rng(3838)
    alphas = gen.integers(0, np.maximum(sizes, 1), (users, buckets)).reshape(-1)
    p0, _, state = fss.gen_path(alphas, big_m, _rng=CtrDrbg(3838))
    cw_ret = fss.convert_gen(state, np.ones((len(alphas), 1), np.uint32), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    tables = gen.integers(0, 2**32, (buckets, big_m, 2), dtype=np.uint64).astype(np.uint32)
    key_conv = gen.integers(1, 2**32, (users, buckets + 2, width), dtype=np.uint64).astype(np.uint32)
    t_count = np.full((users, buckets + 2), 9, np.int64)
    before = key_conv.copy(), t_count.copy()
    retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, width, sizes=sizes, payload_sums=True,
                                 payload_out=PayloadSums(key_conv[:, 1:-1], t_count[:, 1:-1]))
    assert len(made) == 2  # both views strided: both walked into (poisoned) buffers
    leaves = fss.eval_full_path(p0, 0)  # (U B, M, 2)
    live = np.arange(big_m)[None, :] < np.tile(sizes, users)[:, None]
    conv = convert(leaves, width, ring_bits, AGGREGATION_TAG) * live[..., None].astype(np.uint32)
    assert np.array_equal(key_conv[:, 1:-1], conv.sum(axis=1, dtype=np.uint32).reshape(users, buckets, width))
    assert np.array_equal(t_count[:, 1:-1], ((leaves[..., 0] & np.uint64(1)).astype(np.int64) * live).sum(axis=1)
                          .reshape(users, buckets))
    assert not key_conv[:, 2].any() and not t_count[:, 2].any()  # bucket 1: size 0, no live leaf
    for kept, was in zip((key_conv, t_count), before, strict=True):
        assert np.array_equal(kept[:, [0, -1]], was[:, [0, -1]])
