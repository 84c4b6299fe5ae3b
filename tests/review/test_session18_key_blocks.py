"""Review of session 18's parse into one key batch (``DPFKeys.from_bytes_many(into=, blocks=)``,
fss/keys.py): ``blocks`` names where each input's keys go in ``into``; a list that names one
block twice (``[0, 0]``, or ``[1, -1]`` in a batch of two blocks: numpy reads ``-1`` as the
last) or a block outside the batch is the caller's mistake and is refused with
:class:`~secemb.errors.InvalidParameters` before anything is written -- not parsed into a
batch where a returned view holds another input's keys (before: ``[0, 0]`` handed back the
second input's keys as the first's, silently), nor failed with numpy's ``IndexError`` /
``ValueError``."""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.randomness import CtrDrbg

M, K, D = 300, 3, 2
EXPECT = {"domain_size": M, "party": 0, "count": K, "payload_width": D, "ring_bits": 32}


def _data(seed: int) -> bytes:
    """Party 0's serialized keys of a batch of K fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    betas = rng.integers(0, 2**32, (K, D), dtype=np.uint64).astype(np.uint32)
    return fss.gen(rng.integers(0, M, K), betas, M, ring_bits=32, _rng=CtrDrbg(seed))[0].to_bytes()


@pytest.mark.parametrize("blocks", [[0, 0], [1, -1], [-1, 0], [0, 2], [2, 3], [1, 2]],
                         ids=["twice", "twice-negative", "negative", "past-end", "both-past-end", "one-past-end"])
def test_blocks_that_overlap_or_leave_the_batch_are_refused_before_any_write(blocks: list[int]) -> None:
    data = [_data(1), _data(2)]
    into = fss.DPFKeys.empty(fss.DPFParams(M, D, 32), 0, 2 * K)
    into.cw_out[:] = 7
    into.path.roots[:] = 7
    with pytest.raises(InvalidParameters, match="blocks"):
        fss.DPFKeys.from_bytes_many(data, into=into, blocks=blocks, **EXPECT)
    assert np.all(into.cw_out == 7) and np.all(into.path.roots == 7)  # nothing written


def test_a_refused_input_s_block_is_checked_too() -> None:
    """Every input's block is the caller's: one named twice is refused even where that input
    itself is refused (its keys would not be written)."""
    bad = bytearray(_data(1))
    bad[49] ^= 1  # the first key's root control bit: not party 0's
    into = fss.DPFKeys.empty(fss.DPFParams(M, D, 32), 0, 2 * K)
    with pytest.raises(InvalidParameters, match="blocks"):
        fss.DPFKeys.from_bytes_many([bytes(bad), _data(2)], into=into, blocks=[1, 1], **EXPECT)
