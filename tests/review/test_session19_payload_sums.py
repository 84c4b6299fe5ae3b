"""Review of session 19's payload sums (secemb/fss/fused.py, convert.py, _numba_kernels.py), issue 34 (b).

Found: a walk of no keys (``K = 0``) with ``payload_sums`` failed with numpy's ``ValueError`` on
both backends (``_payload_sums`` reshaped an empty array with an inferred axis), and so did the
bucket form's answers with or without payload sums (the same reshape, older than this session).
Also pinned: a key of an empty bucket (size 0) has no
live position, so its shares sum to 0 whatever its payload, on both backends, and the device's
walk agrees with the servers'."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss.fused import (
    payload_shares,
    payload_sums_of,
    retrieve_and_prepare,
    retrieve_and_prepare_buckets,
)

sys.path[:0] = [str(Path(__file__).parents[1] / "fss")]  # the payload sums' own test helpers
from test_payload_sums import _keys, backend  # noqa: E402, F401  (backend: the fixture)


@pytest.mark.usefixtures("backend")
def test_no_keys_give_empty_payload_sums() -> None:
    (p0, _), cw_ret, _ = _keys(np.array([], np.int64), 5, np.zeros((0, 3), np.uint32), 32, 0)
    _, prep = retrieve_and_prepare(p0, 0, cw_ret, np.zeros((5, 2), np.uint32), 3, payload_sums=True)
    assert prep.payload is not None
    assert prep.payload.key_conv.shape == (0, 3) and prep.payload.key_conv.dtype == np.uint32
    assert prep.payload.t_count.shape == (0,) and prep.payload.t_count.dtype == np.int64
    sums = payload_sums_of(p0, 0, 3, ring_bits=32)
    assert sums.key_conv.shape == (0, 3) and sums.t_count.shape == (0,)
    answers, *_, bucket = retrieve_and_prepare_buckets(p0, 0, cw_ret, np.zeros((1, 5, 2), np.uint32), 3,
                                                       payload_sums=True)
    assert answers.shape == (0, 2) and bucket.key_conv.shape == (0, 3) and bucket.t_count.shape == (0,)


@pytest.mark.usefixtures("backend")
def test_a_key_of_an_empty_bucket_sums_to_zero() -> None:
    sizes = np.array([0, 5])  # bucket 0 holds no item; keys 0 and 2 are in it
    betas = (np.arange(8, dtype=np.uint32).reshape(4, 2) + 1) * 1000
    (p0, p1), cw_ret, cw_agg = _keys(np.array([0, 3, 4, 1]), 5, betas, 32, 1)
    tables = np.zeros((2, 5, 1), np.uint32)
    shares = []
    for b, path in ((0, p0), (1, p1)):
        *_, sums = retrieve_and_prepare_buckets(path, b, cw_ret, tables, 2, sizes=sizes, payload_sums=True)
        device = payload_sums_of(path, b, 2, ring_bits=32, sizes=sizes)
        assert np.array_equal(device.key_conv, sums.key_conv) and np.array_equal(device.t_count, sums.t_count)
        assert sums.t_count[[0, 2]].tolist() == [0, 0] and not sums.key_conv[[0, 2]].any()
        shares.append(payload_shares(b, sums.key_conv, sums.t_count, cw_agg))
    assert (shares[0] + shares[1]).tolist() == [[0, 0], [3000, 4000], [0, 0], [7000, 8000]]


def test_payload_shares_refuse_what_is_not_a_ring_or_a_count() -> None:
    conv, count, cw = np.zeros((3, 2), np.uint32), np.zeros(3, np.int64), np.zeros((3, 2), np.uint32)
    bad = [
        (conv, count + 0.5, cw),  # counts that are not integers were truncated
        (conv.astype(np.int64), count, cw.astype(np.int64)),  # signed int64 is not a ring
        (conv, count, cw.tolist()),  # was AttributeError
    ]
    for args in bad:
        with pytest.raises(InvalidParameters):
            payload_shares(0, *args)  # type: ignore[arg-type]


def test_bucket_sizes_that_are_not_integers_are_refused() -> None:
    (p0, _), cw_ret, _ = _keys(np.array([0, 3]), 5, np.zeros((2, 2), np.uint32), 32, 2)
    sizes = np.array([2.5, 5.0])  # was silently truncated to 2
    with pytest.raises(InvalidParameters, match="sizes"):
        payload_sums_of(p0, 0, 2, ring_bits=32, sizes=sizes)
    with pytest.raises(InvalidParameters, match="sizes"):
        retrieve_and_prepare_buckets(p0, 0, cw_ret, np.zeros((2, 5, 1), np.uint32), 2, sizes=sizes)
