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

from secemb.fss import fused, kernels
from test_s30_fresh_sums import walk_over_stale_views  # pytest puts tests/fss on sys.path

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
    walk_over_stale_views(3838, 9)  # every key's sums and counts, the size-0 bucket, the neighbours
    assert len(made) == 2  # both views strided: both walked into (poisoned) buffers
