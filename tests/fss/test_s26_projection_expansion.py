"""Session 26 (issue 34): the projections' compiled row expansion writes a stream byte's four
ternary entries as one word (:data:`secemb.fss._projection_kernels.ENTRY_WORDS`), and the AES
counter blocks are made once a stream size (:func:`secemb.fss.projections._counter_blocks`).
The expected entries come from the module docstring's specification in plain Python
(``projection_spec``, ``cryptography``'s own AES-CTR mode), not from the code under test.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from projection_spec import spec_rows

from secemb.fss import kernels
from secemb.fss.projections import _stream_bytes, _streams, row_key

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")


def _expanded(rows: int, length: int) -> np.ndarray:
    """A scratch of ``rows`` expanded rows of ``length`` entries: int8 (rows, 4 ceil(length / 4))."""
    return np.empty((rows, 4 * -(-length // 4)), np.int8)


def _spec_entry(v: int, q: int) -> int:
    return ((v >> (2 * q)) & 1) - ((v >> (2 * q + 1)) & 1)


def test_every_byte_value_expands_to_its_four_entries() -> None:
    from secemb.fss._projection_kernels import ENTRY_WORDS, expand_rows

    stream = np.arange(256, dtype=np.uint8)[None, :]  # one row of 1,024 entries: every byte once, in order
    t = _expanded(1, 1024)
    expand_rows(stream, 0, t, ENTRY_WORDS)
    assert t.dtype == np.int8
    assert t[0].tolist() == [_spec_entry(v, q) for v in range(256) for q in range(4)]


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 63, 16251])
def test_rows_of_a_seed_match_the_specification(length: int) -> None:
    from secemb.fss._projection_kernels import ENTRY_WORDS, expand_rows

    rows = 7
    seeds = [os.urandom(16) for _ in range(2)]
    streams = _streams([row_key(s) for s in seeds], _stream_bytes(rows, length))
    t = _expanded(rows, length)
    t[...] = 5  # not an entry: a word the expansion skips would show
    for s, seed in enumerate(seeds):  # the second seed overwrites the same scratch
        expand_rows(streams, s, t, ENTRY_WORDS)
        assert t[:, :length].tolist() == spec_rows(seed, rows, length)
        assert set(np.unique(t).tolist()) <= {-1, 0, 1}


def test_streams_of_alternating_sizes_match_aes_ctr() -> None:
    from secemb.fss._projection_kernels import ENTRY_WORDS, expand_rows

    # the counter blocks are kept per size: sizes used in turn must each give their own stream
    seed = os.urandom(16)
    for length in (16251, 40, 16251, 9, 40):
        got = _streams([row_key(seed)], _stream_bytes(3, length))
        t = _expanded(3, length)
        expand_rows(got, 0, t, ENTRY_WORDS)
        assert t[:, :length].tolist() == spec_rows(seed, 3, length)
