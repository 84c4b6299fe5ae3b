"""Issue 37 goal 3: with threads, a cuckoo batch's buckets are evaluated in ranges that shrink
toward the end (``fss.tasks.tapered``), so the threads run out of work together: the ranges
cover the buckets once, in order, none above the cache bound's size, each a share of what is
left; the round's results do not depend on the ranges (tests/protocols/test_backends.py)."""

from __future__ import annotations

import pytest

from secemb.fss.tasks import tapered


@pytest.mark.parametrize(("n", "largest", "workers"), [(375, 63, 2), (375, 63, 4), (1000, 10, 2), (7, 3, 2),
                                                       (5, 1, 3), (1, 8, 2), (0, 4, 2), (12, 100, 1)])
def test_ranges_cover_the_buckets_in_order_and_shrink(n: int, largest: int, workers: int) -> None:
    spans = tapered(n, largest, workers)
    assert [lo for lo, _ in spans] == [0, *(hi for _, hi in spans)][: len(spans)]  # consecutive from 0
    assert (spans[-1][1] if spans else 0) == n and (spans != []) == (n > 0)
    sizes = [hi - lo for lo, hi in spans]
    assert all(1 <= s <= largest for s in sizes)
    assert all(a >= b for a, b in zip(sizes[:-2], sizes[1:-1], strict=True))  # non-increasing but the remainder


def test_the_ml1m_split_for_two_threads() -> None:
    """375 buckets, at most 63 a range (the 1 MiB fold bound), two threads: three full ranges,
    then a quarter of what is left each time, down to 63 // 8 = 7 buckets."""
    assert [hi - lo for lo, hi in tapered(375, 63, 2)] == [63, 63, 63, 47, 35, 26, 20, 15, 11, 8, 7, 7, 7, 3]
