"""Issue 34 (session 30, helper K): ``convert_accumulate(..., fresh=True)`` sets, rather than adds
to, the key sums (``key_acc``) and control-bit counts (``key_t``) of the keys whose first position
is among its words, so that the walk (:func:`secemb.fss.fused._walk`) sums into arrays nobody
zeroed first (``retrieve_and_prepare_buckets`` used to zero a batch's ``payload_out`` views).  A
key cut at ``start`` is added to, as before, and the keys below it are not touched.

Checked on both backends against per-word Python sums of :func:`convert`'s values (the
specification, ``test_s26_payload_sums._python_sums``), with non-zero values in the arrays before
the call, on the kernel's three paths (class order with both sums, word order with both sums or
keys only) and their shapes (groups of one to four keys, keys cut at either end, widths with and
without a vector tail, rows that wrap inside a key), keys with no live row (set to zero), a walk
cut into calls at arbitrary places, and the walk itself (stale ``payload_out`` views, a bucket of
size 0).
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.fss import kernels
from secemb.fss.convert import convert, convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG, PayloadSums, retrieve_and_prepare_buckets
from secemb.randomness import CtrDrbg
from test_s26_payload_sums import _python_sums  # per-word sums in Python integers (pytest puts tests/fss on sys.path)

BACKENDS = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")),
]

# (ring bits, width, period, rows M, start, words): class order (M a multiple of the period and the
# words' keys spanning more than a class) unless said
CASES = [
    (32, 64, 16, 64, 0, 1024),  # one whole chunk, groups of four
    (32, 129, 16, 64, 3, 1100),  # two chunks and a value; first and last keys cut
    (64, 65, 16, 64, 7, 7 * 64),  # seven keys a class, cut: groups of one to four
    (32, 65, 32, 256, 45, 5000),  # the walk's width and period, steps ending inside keys
    (32, 65, 150, 600, 17, 2500),  # keys longer than a step; word order (fewer keys than a class)
    (64, 65, 40, 24, 5, 1500),  # rows that wrap inside a key: word order
    (64, 1, 7, 21, 3, 900),  # one value a key
    (32, 9, 1, 10, 0, 400),  # one position a key
]


def _want(words: np.ndarray, ring_bits: int, width: int, period: int, start: int, live: np.ndarray,
          acc0: np.ndarray, key0: np.ndarray, t0: np.ndarray) -> tuple[list, list, list]:
    """Rows added to ``acc0``; keys that start among the words set to their sums, the one cut at
    ``start`` added to, the ones below untouched; counts likewise."""
    vals = convert(words, width, ring_bits, AGGREGATION_TAG)
    rows, by_key, ones = _python_sums(words, vals, start, period, live, ring_bits)
    mod = 1 << ring_bits
    first = -(-start // period)  # the first key that starts among the words
    keys = [[(int(a) * (k < first) + b) % mod for a, b in zip(key0[k], by_key[k], strict=True)]
            for k in range(len(by_key))]
    return ([[(int(a) + b) % mod for a, b in zip(r0, r, strict=True)] for r0, r in zip(acc0, rows, strict=True)],
            keys, [int(t0[k]) * (k < first) + ones[k] for k in range(len(ones))])


def _arrays(gen: np.random.Generator, ring_bits: int, width: int, big_m: int, keys: int) -> tuple[np.ndarray, ...]:
    dtype = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
    return (gen.integers(0, 2**63, (big_m, width)).astype(dtype), gen.integers(1, 2**63, (keys, width)).astype(dtype),
            gen.integers(1, 1000, keys))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("ring_bits", "width", "period", "big_m", "start", "n"), CASES)
def test_fresh_sets_the_keys_that_start_among_the_words(backend: str, ring_bits: int, width: int, period: int,
                                                        big_m: int, start: int, n: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sums into a batch's (U, G, w) view with counts (the gaps keep their values), into a
    plain (K, w) array without counts, and keys only (no ``acc``)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng([ring_bits, width, period, big_m, start, n, 30])
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = gen.random(big_m) < 0.7
    keys = (start + n - 1) // period + 1
    acc0, key0, t0 = _arrays(gen, ring_bits, width, big_m, keys)
    want_rows, want_keys, want_ones = _want(words, ring_bits, width, period, start, live, acc0, key0, t0)

    g = 3
    u = -(-keys // g)
    batch = np.full((u, g + 2, width), 9, acc0.dtype)
    counts = np.full((u, g + 2), 7, np.int64)
    at = np.divmod(np.arange(keys), g)
    at = at[0], at[1] + 1  # key k at [k // g, 1 + k % g]
    batch[at], counts[at] = key0, t0
    acc = acc0.copy()
    convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=batch[:, 1 : g + 1], period=period,
                       key_t=counts[:, 1 : g + 1], fresh=True)
    assert acc.tolist() == want_rows
    assert batch[at].tolist() == want_keys and counts[at].tolist() == want_ones
    assert (batch[:, 0] == 9).all() and (batch[:, -1] == 9).all()
    assert (counts[:, 0] == 7).all() and (counts[:, -1] == 7).all()

    acc, key_acc = acc0.copy(), key0.copy()
    convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=key_acc, period=period, fresh=True)
    assert acc.tolist() == want_rows and key_acc.tolist() == want_keys
    key_acc = key0.copy()
    convert_accumulate(words, AGGREGATION_TAG, None, start, live, key_acc=key_acc, period=period, fresh=True)
    assert key_acc.tolist() == want_keys


@pytest.mark.parametrize("backend", BACKENDS)
def test_fresh_into_an_acc_strided_in_its_last_axis(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The word-order path with both sums (an ``acc`` whose row values are not contiguous)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(3430)
    ring_bits, width, period, big_m, start, n = 32, 65, 16, 64, 5, 1024
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = gen.random(big_m) < 0.7
    keys = (start + n - 1) // period + 1
    acc0, key0, t0 = _arrays(gen, ring_bits, width, big_m, keys)
    want_rows, want_keys, want_ones = _want(words, ring_bits, width, period, start, live, acc0, key0, t0)
    wide = np.zeros((big_m, 2 * width), acc0.dtype)
    wide[:, ::2] = acc0
    key_acc, key_t = key0.copy(), t0.copy()
    convert_accumulate(words, AGGREGATION_TAG, wide[:, ::2], start, live, key_acc=key_acc, period=period,
                       key_t=key_t, fresh=True)
    assert wide[:, ::2].tolist() == want_rows and key_acc.tolist() == want_keys and key_t.tolist() == want_ones
    assert not wide[:, 1::2].any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("period", "big_m"), [(16, 64), (40, 24)])
def test_a_walk_cut_into_calls_sums_into_stale_arrays(backend: str, period: int, big_m: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls over consecutive pieces of the words (cut inside keys, at key boundaries, pieces of
    one word), every one ``fresh``, into arrays full of stale values: each key's sum and count
    over all its positions, as from zero; keys whose rows are all dead (a whole class of rows
    not live, with ``M`` a multiple of the period) come out zero."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng([period, big_m, 3431])
    ring_bits, width, n = 32, 65, 3000
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = gen.random(big_m) < 0.7
    if big_m % period == 0:
        live[period : 2 * period] = False  # the second class: its keys have no live row
    keys = (n - 1) // period + 1
    _, key0, t0 = _arrays(gen, ring_bits, width, big_m, keys)
    rows, by_key, ones = _python_sums(words, convert(words, width, ring_bits, AGGREGATION_TAG), 0, period, live,
                                      ring_bits)
    cuts = sorted({0, n, 1, 2, period, 3 * period, 3 * period + 1, *gen.integers(0, n, 12).tolist()})
    acc = np.zeros((big_m, width), np.uint32)
    key_acc, key_t = key0.copy(), t0.copy()
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        convert_accumulate(words[lo:hi], AGGREGATION_TAG, acc, lo, live, key_acc=key_acc, period=period,
                           key_t=key_t, fresh=True)
    assert acc.tolist() == rows and key_acc.tolist() == by_key and key_t.tolist() == ones
    if big_m % period == 0:
        dead = [k for k in range(keys) if (k * period) % big_m == period]
        assert dead and not key_acc[dead].any() and not key_t[dead].any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_walk_overwrites_stale_payload_views_and_an_empty_bucket(backend: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``retrieve_and_prepare_buckets(..., payload_out=)`` no longer zeroes the views first: stale
    values (and a bucket of size 0, whose keys have no live leaf) come out as the sums of every
    key's live leaves (``eval_full_path``, independently); the rest of the batch untouched."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    walk_over_stale_views(3432, -5)


def walk_over_stale_views(seed: int, stale_t: int) -> None:
    """Walk 3 users' keys of 5 buckets (sizes 20, 0, 13, 1, 7) into stale strided views of a batch's
    payload arrays (control-bit counts ``stale_t``) and check every key's sums and counts against
    ``eval_full_path`` and ``convert`` (independently), the size-0 bucket's zero, the neighbours untouched."""
    big_m, sizes = 20, np.array([20, 0, 13, 1, 7])
    users, buckets, width, ring_bits = 3, len(sizes), 65, 32
    gen = np.random.default_rng(seed)
    alphas = gen.integers(0, np.maximum(sizes, 1), (users, buckets)).reshape(-1)
    p0, _, state = fss.gen_path(alphas, big_m, _rng=CtrDrbg(seed))
    cw_ret = fss.convert_gen(state, np.ones((len(alphas), 1), np.uint32), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    tables = gen.integers(0, 2**32, (buckets, big_m, 2), dtype=np.uint64).astype(np.uint32)
    key_conv = gen.integers(1, 2**32, (users, buckets + 2, width), dtype=np.uint64).astype(np.uint32)
    t_count = np.full((users, buckets + 2), stale_t, np.int64)
    before = key_conv.copy(), t_count.copy()
    retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, width, sizes=sizes, payload_sums=True,
                                 payload_out=PayloadSums(key_conv[:, 1:-1], t_count[:, 1:-1]))
    leaves = fss.eval_full_path(p0, 0)  # (U B, M, 2)
    live = np.arange(big_m)[None, :] < np.tile(sizes, users)[:, None]
    conv = convert(leaves, width, ring_bits, AGGREGATION_TAG) * live[..., None].astype(np.uint32)
    assert np.array_equal(key_conv[:, 1:-1], conv.sum(axis=1, dtype=np.uint32).reshape(users, buckets, width))
    assert np.array_equal(t_count[:, 1:-1], ((leaves[..., 0] & np.uint64(1)).astype(np.int64) * live).sum(axis=1)
                          .reshape(users, buckets))
    assert not key_conv[:, 2].any() and not t_count[:, 2].any()  # bucket 1: size 0
    for kept, was in zip((key_conv, t_count), before, strict=True):
        assert np.array_equal(kept[:, [0, -1]], was[:, [0, -1]])
