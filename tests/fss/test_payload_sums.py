"""Each key's payload shares from the servers' walk (issue 34 (b), ``secemb.fss.fused``):
``S_b = (-1)^b (sum_x Convert_agg(s_b[k, x]) + t_count_b[k] CW_agg[k])`` over the key's live
positions, so that ``S_0 + S_1`` is the key's payload ``beta`` for honest keys (made with the real
key generation) in both layouts and rings, the same bits on the compiled kernels and the numpy
reference, and the device's own walk (:func:`payload_sums_of`) equals the servers'.  A key whose
two leaf states differ at two points gives the sum of its outputs there: the point-function
check (a) is what makes the sum the payload."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from fss_strategies import random_ring, ring_dtype

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import kernels, tree
from secemb.fss.convert import convert, convert_accumulate
from secemb.fss.fused import (
    AGGREGATION_TAG,
    RETRIEVAL_TAG,
    PayloadSums,
    bucket_shares,
    payload_shares,
    payload_sums_of,
    retrieve_and_prepare,
    retrieve_and_prepare_buckets,
)
from secemb.randomness import CtrDrbg

BACKENDS = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(kernels, "BACKEND", request.param)
    return str(request.param)


def _keys(alphas: np.ndarray, m: int, betas: np.ndarray, ring_bits: int, seed: int):
    """What a SecEmb device makes: a path per key, a retrieval CW (payload 1) and aggregation
    CWs for the payloads ``betas``."""
    p0, p1, state = fss.gen_path(alphas, m, _rng=CtrDrbg(seed))
    cw_ret = fss.convert_gen(state, np.ones((len(alphas), 1), ring_dtype(ring_bits)), ring_bits=ring_bits,
                             tag=RETRIEVAL_TAG)
    cw_agg = fss.convert_gen(state, betas, ring_bits=ring_bits, tag=AGGREGATION_TAG)
    return (p0, p1), cw_ret, cw_agg


def _outputs(path: fss.PathKeys, party: int, cw: np.ndarray, ring_bits: int) -> np.ndarray:
    """The unfused aggregation shares of every key at every position: ring (K, m, w)."""
    return fss.convert_eval(fss.eval_full_path(path, party), cw, party, ring_bits=ring_bits, tag=AGGREGATION_TAG)


def _sums_by_leaves(path: fss.PathKeys, party: int, width: int, ring_bits: int, live: np.ndarray) -> PayloadSums:
    """The payload sums from every leaf word (``eval_full_path``), masked by ``live`` bool (K, m)."""
    leaves = fss.eval_full_path(path, party)
    conv = convert(leaves, width, ring_bits, AGGREGATION_TAG) * live[..., None].astype(ring_dtype(ring_bits))
    t = (leaves[..., 0] & np.uint64(1)).astype(np.int64) * live
    return PayloadSums(conv.sum(axis=1, dtype=ring_dtype(ring_bits)), t.sum(axis=1))


def _same(a: PayloadSums, b: PayloadSums) -> bool:
    return (a.key_conv.dtype == b.key_conv.dtype and np.array_equal(a.key_conv, b.key_conv)
            and a.t_count.dtype == b.t_count.dtype == np.int64 and np.array_equal(a.t_count, b.t_count))


# ------------------------------------------------------------------------ full layout


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize(("m", "width"), [(1, 3), (129, 1), (200, 65), (1682, 5)])
def test_full_layout_shares_sum_to_the_payload(backend: str, m: int, width: int, ring_bits: int) -> None:
    gen = np.random.default_rng([m, width, ring_bits])
    alphas = gen.integers(0, m, 6)
    alphas[:2] = (0, m - 1)
    betas = random_ring(gen, (6, width), ring_bits)
    table = random_ring(gen, (m, 2), ring_bits)
    (p0, p1), cw_ret, cw_agg = _keys(alphas, m, betas, ring_bits, m + width)
    shares = []
    for b, path in ((0, p0), (1, p1)):
        plain_answers, plain = retrieve_and_prepare(path, b, cw_ret, table, width)
        answers, prep = retrieve_and_prepare(path, b, cw_ret, table, width, payload_sums=True)
        assert plain.payload is None and prep.payload is not None
        # the option changes nothing else
        assert np.array_equal(answers, plain_answers)
        assert np.array_equal(prep.t_bits, plain.t_bits) and np.array_equal(prep.signed_conv(), plain.signed_conv())
        assert _same(prep.payload, _sums_by_leaves(path, b, width, ring_bits, np.ones((6, m), bool)))
        # the device's walk of the same keys gives the same sums
        assert _same(payload_sums_of(path, b, width, ring_bits=ring_bits), prep.payload)
        # and the detached summary keeps them
        assert prep.without_conv().payload is prep.payload
        shares.append(payload_shares(b, prep.payload.key_conv, prep.payload.t_count, cw_agg))
    assert shares[0].dtype == betas.dtype and shares[0].shape == betas.shape
    assert np.array_equal(shares[0] + shares[1], betas)
    assert not np.array_equal(shares[0], betas)


# ---------------------------------------------------------------------- bucket layout

BIG_M, SIZES = 20, np.array([20, 13, 1, 7])  # bucket domain M, padded buckets (sizes < M) and a full one


def _bucket_alphas(gen: np.random.Generator, users: int) -> np.ndarray:
    """Key ``u B + i`` at a live position of bucket ``i``, the buckets' last positions included."""
    alphas = gen.integers(0, SIZES, (users, len(SIZES)))
    alphas[0] = SIZES - 1
    return alphas.reshape(-1)


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("width", [1, 65])
def test_bucket_layout_shares_sum_to_the_payload(backend: str, width: int, ring_bits: int) -> None:
    users, buckets = 3, len(SIZES)
    gen = np.random.default_rng([width, ring_bits])
    alphas = _bucket_alphas(gen, users)
    betas = random_ring(gen, (users * buckets, width), ring_bits)
    tables = random_ring(gen, (buckets, BIG_M, 2), ring_bits)
    (p0, p1), cw_ret, cw_agg = _keys(alphas, BIG_M, betas, ring_bits, width)
    live = np.arange(BIG_M)[None, :] < np.tile(SIZES, users)[:, None]  # (U B, M)
    shares = []
    for b, path in ((0, p0), (1, p1)):
        plain = retrieve_and_prepare_buckets(path, b, cw_ret, tables, width, sizes=SIZES)
        *out, sums = retrieve_and_prepare_buckets(path, b, cw_ret, tables, width, sizes=SIZES, payload_sums=True)
        assert all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(out, plain, strict=True))
        # the padding positions count in neither sum
        assert _same(sums, _sums_by_leaves(path, b, width, ring_bits, live))
        assert _same(payload_sums_of(path, b, width, ring_bits=ring_bits, sizes=SIZES), sums)
        shares.append(payload_shares(b, sums.key_conv, sums.t_count, cw_agg))
    assert np.array_equal(shares[0] + shares[1], betas)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_payload_sums_are_the_same_on_both_backends(monkeypatch: pytest.MonkeyPatch, ring_bits: int) -> None:
    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    gen = np.random.default_rng(ring_bits)
    alphas = _bucket_alphas(gen, 2)
    betas = random_ring(gen, (len(alphas), 33), ring_bits)
    tables = random_ring(gen, (len(SIZES), BIG_M, 1), ring_bits)
    (p0, _), cw_ret, _ = _keys(alphas, BIG_M, betas, ring_bits, 7)
    full_alphas = gen.integers(0, 1682, 5)
    (f0, _), f_ret, _ = _keys(full_alphas, 1682, random_ring(gen, (5, 33), ring_bits), ring_bits, 8)
    got: dict[str, list[PayloadSums]] = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        *_, bucket = retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, 33, sizes=SIZES, payload_sums=True)
        _, prep = retrieve_and_prepare(f0, 0, f_ret, random_ring(gen, (1682, 1), ring_bits), 33, payload_sums=True)
        assert prep.payload is not None
        got[name] = [bucket, payload_sums_of(p0, 0, 33, ring_bits=ring_bits, sizes=SIZES), prep.payload,
                     payload_sums_of(f0, 0, 33, ring_bits=ring_bits)]
    assert all(_same(a, b) for a, b in zip(got["numpy"], got["numba"], strict=True))


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_key_sums_of_the_accumulation_kernel_equal_the_reference(backend: str, ring_bits: int) -> None:
    """``convert_accumulate``'s per-key sums: keys of 24 positions from flat position 30 on,
    rows wrapping at 48 with 40 live; with and without the sums by row."""
    gen = np.random.default_rng(ring_bits)
    words = gen.integers(0, 2**64, (1037, 2), dtype=np.uint64)
    live = np.arange(48) % 24 < 20
    start, period, width = 30, 24, 65
    vals = convert(words, width, ring_bits, AGGREGATION_TAG)
    pos = start + np.arange(len(words))
    vals[~live[pos % 48]] = 0
    expected = np.zeros(((start + len(words) - 1) // period + 1, width), vals.dtype)
    for i, key in enumerate(pos // period):
        expected[key] += vals[i]
    by_row = np.zeros((48, width), vals.dtype)
    by_key = np.zeros_like(expected)
    convert_accumulate(words, AGGREGATION_TAG, by_row, start, live, key_acc=by_key, period=period)
    assert np.array_equal(by_key, expected)
    rows_only = np.zeros_like(by_row)
    convert_accumulate(words, AGGREGATION_TAG, rows_only, start, live)
    assert np.array_equal(by_row, rows_only)
    keys_only = np.zeros_like(expected)
    convert_accumulate(words, AGGREGATION_TAG, None, start, live, key_acc=keys_only, period=period)
    assert np.array_equal(keys_only, expected)


# ------------------------------------------------------------------- malicious keys


def _two_points(path: fss.PathKeys, key: int) -> fss.PathKeys:
    """``path`` with bit 1 of key ``key``'s last-level seed correction word flipped (the
    ``two-points`` attack, the same bytes to both servers): its leaf states now differ at
    ``alpha`` and at its sibling ``alpha ^ 1``."""
    cw_seed = path.cw_seed.copy()
    cw_seed[key, -1, 0] ^= np.uint64(2)
    return replace(path, cw_seed=cw_seed)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_a_two_point_key_gives_the_sum_of_its_outputs_not_its_payload(backend: str, ring_bits: int) -> None:
    m, width = 100, 4
    gen = np.random.default_rng(ring_bits)
    alphas = np.array([10, 41, 77])
    betas = random_ring(gen, (3, width), ring_bits)
    (p0, p1), cw_ret, cw_agg = _keys(alphas, m, betas, ring_bits, 3)
    bad = (_two_points(p0, 0), _two_points(p1, 0))
    table = random_ring(gen, (m, 1), ring_bits)
    outputs = _outputs(bad[0], 0, cw_agg, ring_bits) + _outputs(bad[1], 1, cw_agg, ring_bits)
    assert [list(np.flatnonzero(o.any(axis=1))) for o in outputs] == [[10, 11], [41], [77]]
    shares = []
    for b in (0, 1):
        _, prep = retrieve_and_prepare(bad[b], b, cw_ret, table, width, payload_sums=True)
        assert prep.payload is not None
        shares.append(payload_shares(b, prep.payload.key_conv, prep.payload.t_count, cw_agg))
    total = shares[0] + shares[1]
    assert np.array_equal(total[0], outputs[0, 10] + outputs[0, 11])
    assert not np.array_equal(total[0], betas[0])
    assert np.array_equal(total[1:], betas[1:])  # the honest keys still give their payloads


def test_a_second_point_in_a_buckets_padding_counts_nowhere(backend: str) -> None:
    """Bucket 3 holds 7 positions: a two-point key at 6 also differs at 7, a padding position
    that the aggregate ignores; its payload sum takes position 6 alone, as the aggregate does."""
    gen = np.random.default_rng(5)
    alphas = np.array([4, 0, 0, 6])
    betas = random_ring(gen, (4, 3), 32)
    (p0, p1), cw_ret, cw_agg = _keys(alphas, BIG_M, betas, 32, 5)
    bad = (_two_points(p0, 3), _two_points(p1, 3))
    outputs = _outputs(bad[0], 0, cw_agg, 32) + _outputs(bad[1], 1, cw_agg, 32)
    assert list(np.flatnonzero(outputs[3].any(axis=1))) == [6, 7]
    tables = random_ring(gen, (4, BIG_M, 1), 32)
    shares, aggregate = [], []
    for b in (0, 1):
        _, t, conv, sums = retrieve_and_prepare_buckets(bad[b], b, cw_ret, tables, 3, sizes=SIZES, payload_sums=True)
        shares.append(payload_shares(b, sums.key_conv, sums.t_count, cw_agg))
        aggregate.append(bucket_shares(b, t, conv, cw_agg)[3, : SIZES[3]])
    assert np.array_equal((shares[0] + shares[1])[3], outputs[3, 6])
    assert np.array_equal((aggregate[0] + aggregate[1]).sum(axis=0, dtype=np.uint32), outputs[3, 6])


# ---------------------------------------------------------------------- bad inputs


def test_payload_shares_fail_if_shapes_or_rings_do_not_match() -> None:
    conv, count, cw = np.zeros((3, 2), np.uint32), np.zeros(3, np.int64), np.zeros((3, 2), np.uint32)
    bad: list[Callable[[], object]] = [
        lambda: payload_shares(0, conv, count, cw.astype(np.uint64)),
        lambda: payload_shares(0, conv, count, cw[:2]),
        lambda: payload_shares(1, conv, count[:2], cw),
        lambda: payload_shares(2, conv, count, cw),
        lambda: payload_shares(0, conv, count, cw, out=np.zeros((3, 2), np.uint64)),
        lambda: payload_shares(0, conv, count, cw, out=np.zeros((2, 2), np.uint32)),
    ]
    for call in bad:
        with pytest.raises(InvalidParameters):
            call()


@pytest.mark.parametrize("party", [0, 1])
def test_payload_shares_into_out_overwrites_it_with_the_shares(party: int) -> None:
    conv = np.array([[1, 2], [3, 2**32 - 1]], np.uint32)
    count, cw = np.array([2, 1], np.int64), np.array([[5, 7], [2**31, 1]], np.uint32)
    want = np.array([[11, 16], [3 + 2**31, 0]], np.uint64) % 2**32  # key_conv + t_count CW, by hand
    if party:
        want = (2**32 - want) % 2**32
    out = np.full((2, 2), 99, np.uint32)
    assert payload_shares(party, conv, count, cw, out=out) is out
    np.testing.assert_array_equal(out, want.astype(np.uint32))
    np.testing.assert_array_equal(payload_shares(party, conv, count, cw), out)


def test_payload_sums_of_fails_on_bad_parameters() -> None:
    (p0, _), _, _ = _keys(np.array([1, 2, 3, 4]), BIG_M, np.zeros((4, 1), np.uint32), 32, 0)
    with pytest.raises(InvalidParameters, match="party"):
        payload_sums_of(p0, 1, 2, ring_bits=32)
    with pytest.raises(InvalidParameters, match="ring_bits"):
        payload_sums_of(p0, 0, 2, ring_bits=16)
    with pytest.raises(InvalidParameters, match="agg_width"):
        payload_sums_of(p0, 0, 0, ring_bits=32)
    with pytest.raises(InvalidParameters, match="dividing"):
        payload_sums_of(p0, 0, 2, ring_bits=32, sizes=np.array([5, 5, 5]))
    with pytest.raises(InvalidParameters, match="sizes"):
        payload_sums_of(p0, 0, 2, ring_bits=32, sizes=np.array([5, BIG_M + 1]))


def test_convert_accumulate_fails_without_somewhere_to_add_or_with_keys_out_of_range() -> None:
    words = np.zeros((10, 2), np.uint64)
    live = np.ones(5, bool)
    with pytest.raises(InvalidParameters):
        convert_accumulate(words, AGGREGATION_TAG, None, 0, live)
    with pytest.raises(InvalidParameters):
        convert_accumulate(words, AGGREGATION_TAG, None, 0, None, key_acc=np.zeros((2, 3), np.uint32), period=5)
    with pytest.raises(InvalidParameters, match="key_acc"):  # keys 0 and 1 of period 5 need two rows
        convert_accumulate(words, AGGREGATION_TAG, None, 0, live, key_acc=np.zeros((1, 3), np.uint32), period=5)
    with pytest.raises(InvalidParameters, match="key_acc"):
        convert_accumulate(words, AGGREGATION_TAG, np.zeros((5, 3), np.uint32), 0, live,
                           key_acc=np.zeros((2, 3), np.uint64), period=5)


@pytest.mark.parametrize(("subtree_depth", "group_leaves"), [(1, 2), (2, 8), (3, 64)])
def test_payload_sums_do_not_depend_on_the_leaf_grouping(backend: str, monkeypatch: pytest.MonkeyPatch,
                                                         subtree_depth: int, group_leaves: int) -> None:
    """Leaf groups that start and end inside a key: each converted leaf still goes to its own
    key's sum (the accumulation starts mid-key)."""
    monkeypatch.setattr(tree, "SUBTREE_DEPTH", subtree_depth)
    monkeypatch.setattr(tree, "GROUP_LEAVES", group_leaves)
    gen = np.random.default_rng(subtree_depth)
    for m, alphas, sizes in ((300, gen.integers(0, 300, 5), None), (BIG_M, _bucket_alphas(gen, 2), SIZES)):
        betas = random_ring(gen, (len(alphas), 5), 32)
        (p0, p1), _, cw_agg = _keys(alphas, m, betas, 32, m)
        sums = [payload_sums_of(p, b, 5, ring_bits=32, sizes=sizes) for b, p in ((0, p0), (1, p1))]
        shares = [payload_shares(b, s.key_conv, s.t_count, cw_agg) for b, s in enumerate(sums)]
        assert np.array_equal(shares[0] + shares[1], betas)
