"""``convert_accumulate``'s both sums in class order through the ``sum_keys`` intrinsics (issue 34,
session 28): four whole keys of a class position by position, each row's sum of the four values
added in one pass and each key's sum held in vector registers across its positions.  Since session
32 a call adds up to :data:`~secemb.fss._aesni.SUM_VECTORS` vectors of each value, the last one
masked to the value's end (``_sum_plan``; the widths around those sizes: ``test_s32_masked_sums``).
Both backends against per-word Python sums of :func:`convert`'s values (the specification, not the
kernel), on the shapes where the calls and groups could go wrong: widths of whole vectors (64
uint32, 32 uint64), two calls and one value left in the last (129 uint32, 65 uint64), fewer than
a call's vectors (20 values), groups of two and three keys (six and seven keys a class), cut first
and last keys, steps that end inside a key, and a row-strided ``acc`` (the word-order path)."""

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

# (ring bits, width, period, rows M, start, words): 4 classes of 16 positions (M = 64) unless said
CASES = [
    (32, 64, 16, 64, 0, 1024),  # one whole chunk, 16 keys: four a class, one group each
    (64, 32, 16, 64, 0, 1024),  # one whole chunk of uint64
    (32, 129, 16, 64, 3, 1100),  # two chunks and one value; first and last keys cut
    (64, 65, 16, 64, 5, 1000),  # two chunks of uint64 and one value
    (32, 20, 16, 64, 0, 1500),  # no whole chunk
    (32, 65, 16, 64, 0, 6 * 64),  # six keys a class: a group of four and one of two
    (64, 65, 16, 64, 7, 7 * 64),  # seven keys a class, cut: groups of one to four
    (32, 65, 32, 256, 45, 5000),  # the walk's width and period, steps ending inside keys
]


def _expected(words: np.ndarray, ring_bits: int, width: int, period: int, start: int, live: np.ndarray,
              acc0: np.ndarray, key0: np.ndarray, t0: np.ndarray) -> tuple[list, list, list]:
    vals = convert(words, width, ring_bits, AGGREGATION_TAG)
    rows, by_key, ones = _python_sums(words, vals, start, period, live, ring_bits)
    mod = 1 << ring_bits
    return ([[(int(a) + b) % mod for a, b in zip(r0, r, strict=True)] for r0, r in zip(acc0, rows, strict=True)],
            [[(int(a) + b) % mod for a, b in zip(k0, k, strict=True)] for k0, k in zip(key0, by_key, strict=True)],
            [int(a) + b for a, b in zip(t0, ones, strict=True)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("ring_bits", "width", "period", "big_m", "start", "n"), CASES)
def test_both_sums_equal_per_word_python_sums(backend: str, ring_bits: int, width: int, period: int, big_m: int,
                                              start: int, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows, key sums and counts of a both-sums call equal the specification's, added to what the
    arrays held (non-zero), with and without the counts; the key sums into a batch's (U, G, w)
    view leave the rest of the batch as it was."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng([ring_bits, width, period, big_m, start, n, 34])
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = gen.random(big_m) < 0.7
    dtype = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
    keys = (start + n - 1) // period + 1
    acc0 = gen.integers(0, 2**63, (big_m, width)).astype(dtype)
    key0 = gen.integers(0, 2**63, (keys, width)).astype(dtype)
    t0 = gen.integers(0, 1000, keys)
    want_rows, want_keys, want_ones = _expected(words, ring_bits, width, period, start, live, acc0, key0, t0)

    acc, key_acc = acc0.copy(), key0.copy()
    convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=key_acc, period=period)
    assert acc.tolist() == want_rows and key_acc.tolist() == want_keys
    acc, key_t = acc0.copy(), t0.copy()
    batch = np.full((keys, 3, width), 9, dtype)  # key k at [k, 1]: a strided view of the batch
    batch[:, 1] = key0
    convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=batch[:, 1:2], period=period, key_t=key_t[:, None])
    assert acc.tolist() == want_rows and batch[:, 1].tolist() == want_keys and key_t.tolist() == want_ones
    assert (batch[:, 0] == 9).all() and (batch[:, 2] == 9).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_sums_into_an_acc_strided_in_its_last_axis(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``acc`` whose row values are not contiguous (every other column of a wider array) gets
    the same sums, and the columns between them are not written."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(3428)
    ring_bits, width, period, big_m, start, n = 32, 65, 16, 64, 0, 1024
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = gen.random(big_m) < 0.7
    wide = gen.integers(0, 2**32, (big_m, 2 * width), dtype=np.uint64).astype(np.uint32)
    acc0, other = wide[:, ::2].copy(), wide[:, 1::2].copy()
    key0 = np.zeros((n // period, width), np.uint32)
    want_rows, want_keys, _ = _expected(words, ring_bits, width, period, start, live, acc0, key0,
                                        np.zeros(n // period, np.int64))
    key_acc = key0.copy()
    convert_accumulate(words, AGGREGATION_TAG, wide[:, ::2], start, live, key_acc=key_acc, period=period)
    assert wide[:, ::2].tolist() == want_rows and key_acc.tolist() == want_keys
    assert np.array_equal(wide[:, 1::2], other)
