"""Item feature codes in table columns and the dense layout helper (secemb.models.features)."""

import numpy as np
import pytest
import torch

from secemb.models.features import BITS_PER_COLUMN, DenseLayout, code_columns, pack_codes, unpack_codes
from secemb.ring import FixedPoint


@pytest.mark.parametrize("l", [0, 1, 15, 16, 19, 30, 31])
def test_pack_unpack_roundtrip_through_fixed_point(l):
    rng = np.random.default_rng(l)
    bits = rng.integers(0, 2, size=(50, l))
    codes = pack_codes(bits)
    assert codes.shape == (50, code_columns(l))
    assert codes.max(initial=0) < 2**BITS_PER_COLUMN
    fp = FixedPoint(32, 16)
    back = fp.decode(fp.encode(codes))  # the path a row takes through retrieval
    for out in (unpack_codes(back, l), unpack_codes(torch.as_tensor(back), l).numpy()):
        assert out.dtype == np.float64 and out.shape == (50, l)
        assert np.array_equal(out, bits)


def test_dense_layout_slices_and_leaves():
    lay = DenseLayout([("a", ()), ("b", (2, 3)), ("c", (4,))])
    assert lay.size == 11
    flat = np.arange(11.0)
    v = lay.views(flat)
    assert v["a"] == 0.0 and v["b"].shape == (2, 3) and v["c"].tolist() == [7.0, 8.0, 9.0, 10.0]
    leaves = lay.leaves(flat)
    assert all(t.requires_grad for t in leaves.values())
    assert lay.views(leaves) is leaves
