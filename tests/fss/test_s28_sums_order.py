"""``convert_accumulate``'s compiled kernel in class order (issues 34 and 37, session 28): summing by
row only with ``M`` a multiple of ``period`` it takes the words class by class (keys ``k`` and
``k + M / period`` add to the same rows), four whole keys of a class at a time position by position,
not in word order; summing by row and by key, in the same class order where ``acc``'s rows are
contiguous and there are at least as many keys as classes (``_both_by_class``, helper C's
1d48577; ``tests/fss/test_s28_fused_sums.py`` for its chunks), else in word order; by key only, in
word order.  Both backends against per-word
Python sums of :func:`convert`'s values (the specification, not the kernel), on the shapes where
the order's bookkeeping could go wrong: a first and a last key cut by ``start`` and ``N``, fewer
keys than classes, one class (``M = period``), ``M`` not a multiple of ``period`` (word order),
a class whose rows are all dead, a single word, keys longer than a step, and each of the three
kinds of call (rows, keys, both; with and without the counts)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.fss import kernels
from secemb.fss.convert import convert, convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG
from test_s26_payload_sums import _python_sums  # per-word sums in Python integers (pytest puts tests/fss on sys.path)

BACKENDS = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")),
]


# (ring bits, width, period, rows M, start, words, live): the bucket layout's class order with keys
# cut at both ends (start 45 = key 1's position 13, 1,000 words end inside key 32); fewer keys
# (3) than classes (8); one class (M = period); M not a multiple of period (the word order); a
# class of dead rows (rows 32..63); a single word; keys longer than a step (period 200, classes of
# 2 keys); every row live; none live; rows that wrap every three words (word order); a first key
# short of one position; one word left after the last whole step (w = 4: 1,024 words a step)
CASES = [
    (32, 65, 32, 256, 45, 1000, "random"),
    (32, 65, 32, 256, 64, 96, "random"),
    (64, 17, 24, 24, 7, 700, "random"),
    (32, 65, 30, 100, 3, 900, "random"),
    (32, 33, 32, 128, 0, 1200, "dead class"),
    (64, 65, 16, 64, 37, 1, "all"),
    (32, 65, 200, 400, 150, 1300, "random"),
    (64, 8, 8, 40, 5, 640, "all"),
    (32, 9, 8, 32, 0, 200, "none"),
    (32, 5, 2, 3, 1, 300, "all"),
    (32, 7, 4, 16, 1, 200, "all"),
    (32, 4, 8, 16, 0, 1025, "all"),
]


def _live(kind: str, big_m: int, gen: np.random.Generator) -> np.ndarray:
    if kind == "all":
        return np.ones(big_m, bool)
    if kind == "none":
        return np.zeros(big_m, bool)
    live = gen.random(big_m) < 0.6
    if kind == "dead class":
        live[32:64] = False
    return live


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("ring_bits", "width", "period", "big_m", "start", "n", "kind"), CASES)
def test_sums_in_class_order_equal_per_word_python_sums(backend: str, ring_bits: int, width: int, period: int,
                                                       big_m: int, start: int, n: int, kind: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows only (keys of ``period`` positions, as the walk calls it, and of one: the rows of a
    class staged GROUP keys at a time, position by position), keys only, both, both with counts:
    each call's sums are the specification's (added to what the arrays held: a key's row and its
    count start non-zero)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng([ring_bits, width, period, big_m, start, n])
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = _live(kind, big_m, gen)
    vals = convert(words, width, ring_bits, AGGREGATION_TAG)
    rows, by_key, ones = _python_sums(words, vals, start, period, live, ring_bits)
    keys, dtype, mod = len(by_key), vals.dtype, 1 << ring_bits
    acc0 = gen.integers(0, 2**63, (big_m, width)).astype(dtype)
    key0 = gen.integers(0, 2**63, (keys, width)).astype(dtype)
    t0 = gen.integers(0, 1000, keys)
    want_rows = [[(int(a) + b) % mod for a, b in zip(r0, r, strict=True)] for r0, r in zip(acc0, rows, strict=True)]
    want_keys = [[(int(a) + b) % mod for a, b in zip(k0, k, strict=True)] for k0, k in zip(key0, by_key, strict=True)]
    want_ones = [int(a) + b for a, b in zip(t0, ones, strict=True)]

    for keys_of in (period, 1):  # rows only: the walk's call (its keys of period positions), and one word a key
        acc = acc0.copy()
        convert_accumulate(words, AGGREGATION_TAG, acc, start, live, period=keys_of)
        assert acc.tolist() == want_rows
    key_acc = key0.copy()
    convert_accumulate(words, AGGREGATION_TAG, None, start, live, key_acc=key_acc, period=period)
    assert key_acc.tolist() == want_keys
    acc, key_acc = acc0.copy(), key0.copy()
    convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=key_acc, period=period)
    assert acc.tolist() == want_rows and key_acc.tolist() == want_keys
    acc, key_acc, key_t = acc0.copy(), key0.copy(), t0.copy()
    convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=key_acc, period=period, key_t=key_t)
    assert acc.tolist() == want_rows and key_acc.tolist() == want_keys and key_t.tolist() == want_ones


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
def test_class_order_in_a_batchs_views_equals_the_reference_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's call of the bucket walk (keys of buckets 40..79 of 125 for 7 users: each user's
    keys a block of the batch's (U, B, w) array), with both sums and with rows only: rows, key
    sums and counts of the compiled kernel equal the numpy reference's, the batch outside the
    task's buckets untouched."""
    gen = np.random.default_rng(28)
    users, buckets, lo, hi, period, width = 7, 125, 40, 80, 32, 65
    words = gen.integers(0, 2**64, (users * (hi - lo) * period, 2), dtype=np.uint64)
    live = (np.arange(period)[None, :] < gen.integers(0, 33, hi - lo)[:, None]).reshape(-1)
    got = []
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        acc = np.zeros(((hi - lo) * period, width), np.uint32)
        batch = np.full((users, buckets, width), 7, np.uint32)
        counts = np.full((users, buckets), 3, np.int64)
        batch[:, lo:hi] = 0
        counts[:, lo:hi] = 0
        convert_accumulate(words, AGGREGATION_TAG, acc, 0, live, key_acc=batch[:, lo:hi], period=period,
                           key_t=counts[:, lo:hi])
        rows_only = np.zeros_like(acc)
        convert_accumulate(words, AGGREGATION_TAG, rows_only, 0, live, period=period)
        got.append((acc, batch, counts, rows_only))
    for ref, compiled in zip(*got, strict=True):
        assert np.array_equal(ref, compiled)
    acc, batch, counts, rows_only = got[0]
    assert np.array_equal(rows_only, acc)
    assert (batch[:, :lo] == 7).all() and (batch[:, hi:] == 7).all() and (counts[:, :lo] == 3).all()
    assert acc.any() and counts[:, lo:hi].any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_words_change_nothing(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No words, from a position inside a key past ``key_acc``'s last: nothing is added or
    counted."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    acc, key_acc = np.ones((8, 5), np.uint32), np.ones((1, 5), np.uint32)
    key_t = np.ones(1, np.int64)
    convert_accumulate(np.empty((0, 2), np.uint64), AGGREGATION_TAG, acc, 13, np.ones(8, bool), key_acc=key_acc,
                       period=4, key_t=key_t)
    assert (acc == 1).all() and (key_acc == 1).all() and key_t.tolist() == [1]
