"""Issue 37 (session 24, helper B): a device's reading of its answers in one pass
(:func:`secemb.fss.fused.unmask_slots`): the compiled kernel writes the same rows, row-tag suffixes
and tag words, and flags the same users, as the numpy reference, and both equal what the test
computes from the definition; refusals of mismatched arrays."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.fused import unmask_slots


def _case(ring_bits: int, n: int = 6, slots: int = 9, width: int = 5, tag: int = 3):
    dt = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
    gen = np.random.default_rng(ring_bits + n)
    items = gen.integers(0, 1000, (n, slots), dtype=np.int64)
    items[gen.random((n, slots)) < 0.4] = -1
    items[0] = -1  # a user with no real slot
    answers = gen.integers(0, np.iinfo(dt).max, (n, slots, width + tag), dtype=dt, endpoint=True)
    answers[items < 0] = 0
    answers[2, np.flatnonzero(items[2] < 0)[0], width + 1] = 1  # user 2: an empty slot's answer is not zero
    unmask = gen.integers(0, np.iinfo(dt).max, (n, slots), dtype=dt, endpoint=True)
    return answers, unmask, items, width, tag


def _read(answers, unmask, items, width, tag):
    n, slots, _ = answers.shape
    real = int(np.count_nonzero(items >= 0))
    rows = [np.full((slots, width), 7, answers.dtype) for _ in range(n)]
    suffix = np.full((real, 8 + width * answers.dtype.itemsize), 7, np.uint8)
    tags = np.full((real, tag), 7, answers.dtype)
    kept = (answers.copy(), unmask.copy(), items.copy())
    filled = unmask_slots(answers, unmask, items, rows, suffix, tags)
    assert all(np.array_equal(a, b) for a, b in zip(kept, (answers, unmask, items), strict=True))  # only read
    return np.stack(rows), suffix, tags, filled


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_unmask_slots_is_the_definition_on_both_backends(monkeypatch: pytest.MonkeyPatch, ring_bits: int) -> None:
    case = _case(ring_bits)
    answers, unmask, items, width, tag = case
    got = {}
    for backend in ("numpy", "numba"):
        if backend == "numba" and not kernels.compiled():
            continue
        monkeypatch.setattr(kernels, "BACKEND", backend)
        got[backend] = _read(*case)
    if "numba" in got:
        assert all(np.array_equal(a, b) for a, b in zip(got["numpy"], got["numba"], strict=True))
    rows, suffix, tags, filled = got["numpy"]
    with np.errstate(over="ignore"):
        unmasked = answers * unmask[:, :, None]
    assert np.array_equal(rows, unmasked[:, :, :width])
    real = items >= 0
    want = [int(j).to_bytes(8, "little") + unmasked[u, s, :width].astype(answers.dtype.newbyteorder("<")).tobytes()
            for (u, s), j in zip(np.argwhere(real), items[real], strict=True)]
    assert [bytes(r) for r in suffix] == want
    assert np.array_equal(tags, unmasked[real][:, width:])
    assert filled.tolist() == [False, False, True, False, False, False]


def test_unmask_slots_refuses_mismatched_arrays() -> None:
    answers, unmask, items, width, tag = _case(32)
    n, slots, _ = answers.shape
    real = int(np.count_nonzero(items >= 0))
    rows = [np.empty((slots, width), answers.dtype) for _ in range(n)]
    suffix = np.empty((real, 8 + 4 * width), np.uint8)
    tags = np.empty((real, tag), answers.dtype)
    bad = [
        (answers.astype(np.uint64), unmask, items, rows, suffix, tags),  # unmask of another dtype
        (answers, unmask, items.astype(np.int32), rows, suffix, tags),
        (answers, unmask, items, rows[:-1], suffix, tags),
        (answers, unmask, items, [*rows[:-1], np.empty((slots, 2 * width), answers.dtype)[:, ::2]], suffix,
         tags),  # a row array not C-contiguous
        (answers, unmask, items, rows, suffix[1:], tags),  # one real slot short
        (answers, unmask, items, rows, suffix, tags[:, :-1]),
    ]
    for args in bad:
        with pytest.raises(InvalidParameters, match="unmask_slots"):
            unmask_slots(*args)
