"""``wire.read_rows``: the chosen rows of a little-endian array in a message body, as a native
array of their own (never a view of the body, which the transport may reuse)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.protocols.wire import read_rows


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.float64])
def test_read_rows_copies_the_chosen_rows_only(dtype) -> None:
    table = (np.arange(7 * 3, dtype=np.uint64) * 0x0101_0101 + 5).astype(dtype).reshape(7, 3)
    body = bytearray(b"\xaa" * 9 + table.astype(np.dtype(dtype).newbyteorder("<")).tobytes() + b"\xbb" * 4)
    rows = np.array([5, 0, 5, 2])
    got = read_rows(memoryview(body), 9, np.dtype(dtype), (7, 3), rows)
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative and got.shape == (4, 3)
    assert np.array_equal(got, table[[5, 0, 5, 2]])
    body[9 : 9 + table.nbytes] = b"\x00" * table.nbytes  # the body reused: the rows read stay
    assert np.array_equal(got, table[[5, 0, 5, 2]])
