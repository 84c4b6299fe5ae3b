"""Issue 37 goal 1 (session 28, helper D): ``DPFKeys.to_rows`` writes the control-bit correction
words ``t^R`` level by level (bit ``i % 8`` of byte ``i // 8``) instead of through ``np.packbits``:
the rows stay each batch's ``to_bytes()``, at depths around the byte boundaries, and a non-zero
word other than 1 counts as 1 (as ``np.packbits``, and ``to_bytes``, take it)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from secemb import fss
from secemb.fss.keys import HEADER_BYTES


@pytest.mark.parametrize("m", [2, 3, 129, 255, 256, 257, 1 << 16, (1 << 16) + 1, 1 << 17])
def test_rows_are_to_bytes_at_depths_around_byte_boundaries(m: int) -> None:
    gen = np.random.default_rng(m)
    parts, c = 3, 5
    alphas = gen.integers(0, m, parts * c)
    keys, _ = fss.gen(alphas, gen.integers(0, 2**32, (parts * c, 2), dtype=np.uint32), m)
    assert keys.params.depth in (1, 2, 7, 8, 9, 16, 17)
    rows = keys.to_rows(parts)
    assert [r.tobytes() for r in rows] == [keys[i * c : (i + 1) * c].to_bytes() for i in range(parts)]
    start = HEADER_BYTES + 16 * c + 16 * c * keys.params.depth  # after the roots and seed words
    bits = rows[:, start : start + c * ((keys.params.depth + 7) // 8)]
    unpacked = np.unpackbits(bits.reshape(parts * c, -1), axis=1, bitorder="little")
    assert np.array_equal(unpacked[:, : keys.params.depth], keys.path.cw_tr)  # each level's bit where it belongs
    assert not unpacked[:, keys.params.depth:].any()  # padding bits zero


def test_a_nonzero_control_word_counts_as_one() -> None:
    m, parts, c = 1 << 11, 2, 4
    keys, _ = fss.gen(np.arange(parts * c) * 37 % m, np.ones((parts * c, 1), np.uint32), m)
    tr = keys.path.cw_tr.copy()
    tr[tr == 1] = np.array([1, 2, 128, 255], np.uint8)[np.arange(np.count_nonzero(tr)) % 4]
    odd = dataclasses.replace(keys, path=dataclasses.replace(keys.path, cw_tr=tr))
    assert (odd.path.cw_tr > 1).any()
    assert [r.tobytes() for r in odd.to_rows(parts)] == [r.tobytes() for r in keys.to_rows(parts)]
    assert [r.tobytes() for r in odd.to_rows(parts)] == [odd[i * c : (i + 1) * c].to_bytes() for i in range(parts)]
