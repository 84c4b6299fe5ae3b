"""Issue 37: ``DPFKeys.to_rows`` -- the serialization of each equal batch of keys (one device's,
of keys made for many devices at once) as the rows of one array, written field by field for all
batches, into a new array or into the key columns of a caller's array of whole messages."""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss.keys import HEADER_BYTES


@pytest.mark.parametrize("m, width, k, parts, ring_bits",
                         [(1, 2, 4, 2, 32), (2, 1, 6, 3, 64), (9, 3, 10, 5, 32), (300, 2, 12, 4, 64), (5, 1, 0, 1, 32)])
def test_rows_are_each_batch_serialized_alone(m: int, width: int, k: int, parts: int, ring_bits: int) -> None:
    dtype = np.uint32 if ring_bits == 32 else np.uint64
    alphas = np.random.default_rng(m + k).integers(0, m, k)
    betas = np.random.default_rng(k).integers(0, 2**31, (k, width)).astype(dtype)
    k0, k1 = fss.gen(alphas, betas, m, ring_bits=ring_bits)
    c = k // parts
    for keys in (k0, k1):
        expected = [keys[i * c : (i + 1) * c].to_bytes() for i in range(parts)]
        rows = keys.to_rows(parts)
        assert rows.dtype == np.uint8 and [r.tobytes() for r in rows] == expected
        # into the middle columns of whole messages: the other columns are left as they were
        msgs = np.full((parts, 7 + len(expected[0]) + 5), 0xAB, np.uint8)
        assert keys.to_rows(parts, out=msgs[:, 7:-5]) is not None
        assert [r[7:-5].tobytes() for r in msgs] == expected
        assert (msgs[:, :7] == 0xAB).all() and (msgs[:, -5:] == 0xAB).all()
        assert all(len(e) == HEADER_BYTES + c * keys.params.key_bytes for e in expected)


def test_a_bad_split_or_destination_is_refused() -> None:
    k0, _ = fss.gen(np.array([1, 2, 3, 0]), np.ones((4, 1), np.uint32), 8)
    size = HEADER_BYTES + 2 * k0.params.key_bytes
    with pytest.raises(InvalidParameters, match="cannot split"):
        k0.to_rows(3)
    for bad in (np.empty((2, size), np.uint16), np.empty((2, size + 1), np.uint8), np.empty((size, 2), np.uint8).T,
                [[0] * size] * 2):
        with pytest.raises(InvalidParameters, match="out must be"):
            k0.to_rows(2, out=bad)  # type: ignore[arg-type]
