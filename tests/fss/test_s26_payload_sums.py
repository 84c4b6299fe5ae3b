"""The walk's per-key payload sums in the compiled conversion kernel (issue 34, session 26):
``convert_accumulate``'s compiled kernel adds each key's sum into ``key_acc`` through a
C-contiguous view of the key's values (``_add_held``), and ``convert.convert_accumulate``
gives it a contiguous copy where a caller's view is not contiguous in its last axis.  Both
backends against per-word Python sums of :func:`convert`'s values (the specification of the
sums, not the kernel): keys whose runs cross the kernel's steps, rows that wrap inside a key,
dead rows, payload widths with and without a vector tail, both rings, the batch's (U, G, w)
views with gaps between them, and a view strided in its last axis."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.fss import kernels
from secemb.fss.convert import convert, convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG

BACKENDS = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")),
]


def _python_sums(words: np.ndarray, vals: np.ndarray, start: int, period: int, live: np.ndarray,
                 ring_bits: int) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Sums by row, by key and each key's count of control bits 1, one word at a time in Python
    integers, over the words of live rows."""
    big_m, width, mod = live.size, vals.shape[1], 1 << ring_bits
    keys = (start + len(words) - 1) // period + 1
    rows = [[0] * width for _ in range(big_m)]
    by_key = [[0] * width for _ in range(keys)]
    ones = [0] * keys
    for i in range(len(words)):
        pos = start + i
        if not live[pos % big_m]:
            continue
        row, key = rows[pos % big_m], by_key[pos // period]
        for e in range(width):
            row[e] = (row[e] + int(vals[i, e])) % mod
            key[e] = (key[e] + int(vals[i, e])) % mod
        ones[pos // period] += int(words[i, 0]) & 1
    return rows, by_key, ones


# (ring bits, width, period, rows M, start, words): the round's shape (w = 65 in uint32: 17 AES
# blocks, 60 words a kernel step) with keys of 32 positions; keys longer than a step (period 150);
# rows that wrap inside a key (period > M); widths of no vector tail and of one element
CASES = [
    (32, 65, 32, 256, 0, 3000),
    (32, 65, 150, 600, 17, 2500),
    (64, 65, 40, 24, 5, 1500),
    (32, 64, 32, 128, 64, 2000),
    (64, 1, 7, 21, 3, 900),
    (32, 9, 1, 10, 0, 400),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("ring_bits", "width", "period", "big_m", "start", "n"), CASES)
def test_key_sums_equal_per_word_python_sums(backend: str, ring_bits: int, width: int, period: int, big_m: int,
                                             start: int, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows, keys and counts into the batch's views: ``key_acc`` (U, G, w) the middle G of
    (U, G + 3, w), ``key_t`` likewise; the gaps keep their values."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng([ring_bits, width, period])
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = gen.random(big_m) < 0.7
    vals = convert(words, width, ring_bits, AGGREGATION_TAG)
    rows, by_key, ones = _python_sums(words, vals, start, period, live, ring_bits)
    keys, g = len(by_key), 5
    u = -(-keys // g)
    dtype = vals.dtype
    batch = gen.integers(0, 2**63, (u, g + 3, width)).astype(dtype)
    counts = gen.integers(0, 1000, (u, g + 3))
    was, was_counts = batch.copy(), counts.copy()
    view, t_view = batch[:, 2 : 2 + g], counts[:, 2 : 2 + g]
    view[...] = 0
    t_view[...] = 0
    acc = np.zeros((big_m, width), dtype)
    convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=view, period=period, key_t=t_view)
    assert acc.tolist() == rows
    assert view.reshape(-1, width)[:keys].tolist() == by_key and not view.reshape(-1, width)[keys:].any()
    assert t_view.reshape(-1)[:keys].tolist() == ones
    for kept, before in ((batch, was), (counts, was_counts)):
        assert np.array_equal(kept[:, :2], before[:, :2]) and np.array_equal(kept[:, 2 + g :], before[:, 2 + g :])
    keys_only = np.zeros((keys, width), dtype)  # the device's walk: by key only
    convert_accumulate(words, AGGREGATION_TAG, None, start, live, key_acc=keys_only, period=period)
    assert keys_only.tolist() == by_key


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ring_bits", [32, 64])
def test_key_sums_into_a_view_strided_in_its_last_axis(backend: str, ring_bits: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``key_acc`` every other element of a wider array (what the compiled kernel cannot add
    into by address): the same sums, added to what it held, and the elements between untouched."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(ring_bits)
    words = gen.integers(0, 2**64, (700, 2), dtype=np.uint64)
    live = np.arange(40) % 20 < 13
    start, period, width = 11, 20, 33
    vals = convert(words, width, ring_bits, AGGREGATION_TAG)
    rows, by_key, _ = _python_sums(words, vals, start, period, live, ring_bits)
    keys, dtype, mod = len(by_key), vals.dtype, 1 << ring_bits
    wide = gen.integers(0, 2**63, (keys, 2 * width)).astype(dtype)
    was = wide.copy()
    view = wide[:, ::2]
    acc = np.zeros((40, width), dtype)
    convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=view, period=period)
    assert acc.tolist() == rows
    assert view.tolist() == [[(int(a) + b) % mod for a, b in zip(old, new, strict=True)]
                             for old, new in zip(was[:, ::2], by_key, strict=True)]
    assert np.array_equal(wide[:, 1::2], was[:, 1::2])


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
def test_compiled_and_reference_sums_are_the_same_bits_on_a_bounded_rounds_walk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The round's shape at full size (ML-100K cuckoo: 125 buckets of 32 positions, 20 users,
    w = 65 in uint32), one call as a server's walk makes it: the compiled kernel's rows, key sums
    and counts equal the numpy reference's bit for bit."""
    gen = np.random.default_rng(26)
    users, buckets, period, width = 20, 125, 32, 65
    words = gen.integers(0, 2**64, (users * buckets * period, 2), dtype=np.uint64)
    live = (np.arange(period)[None, :] < gen.integers(10, 33, buckets)[:, None]).reshape(-1)
    got = []
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        acc = np.zeros((buckets * period, width), np.uint32)
        batch, counts = np.zeros((users, 2 * buckets, width), np.uint32), np.zeros((users, 2 * buckets), np.int64)
        convert_accumulate(words, AGGREGATION_TAG, acc, 0, live, key_acc=batch[:, :buckets], period=period,
                           key_t=counts[:, :buckets])
        got.append((acc, batch, counts))
    for ref, compiled in zip(*got, strict=True):
        assert np.array_equal(ref, compiled)
    assert got[0][1][:, :buckets].any(axis=2).all() and not got[0][1][:, buckets:].any()
