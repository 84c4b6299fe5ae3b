"""Fused server evaluation (``secemb.fss.fused``) and ``eval_full_dot`` against the unfused
building blocks, share by share, and against the plaintext truth after reconstruction."""

from __future__ import annotations

import numpy as np
import pytest
from fss_strategies import random_ring, ring_dtype
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import tree
from secemb.fss.fused import (
    AGGREGATION_TAG,
    RETRIEVAL_TAG,
    PreparedAggregation,
    bucket_shares,
    retrieve_and_prepare,
    retrieve_and_prepare_buckets,
)
from secemb.randomness import CtrDrbg

FAST = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _user_keys(alphas: np.ndarray, m: int, ring_bits: int, seed: int = 0):
    """What a SecEmb user makes: one path, a retrieval CW for payload 1."""
    p0, p1, state = fss.gen_path(alphas, m, _rng=CtrDrbg(seed))
    ones = np.ones((len(alphas), 1), ring_dtype(ring_bits))
    cw_ret = fss.convert_gen(state, ones, ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    return (p0, p1), state, cw_ret


def _unfused_aggregation(
    path: fss.PathKeys, party: int, cw: np.ndarray, ring_bits: int
) -> np.ndarray:
    leaves = fss.eval_full_path(path, party)
    return fss.convert_eval(
        leaves, cw, party, ring_bits=ring_bits, tag=AGGREGATION_TAG
    ).sum(axis=0, dtype=cw.dtype)


def _add_at(m: int, alphas: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.zeros((m, rows.shape[1]), rows.dtype)
    np.add.at(out, alphas, rows)
    return out


@st.composite
def _fused_cases(draw: st.DrawFn, max_domain: int = 600):
    m = draw(st.sampled_from([1, 2, 3, 128, 129, 257]) | st.integers(1, max_domain))
    k = draw(st.integers(1, 6))
    ring_bits = draw(st.sampled_from([32, 64]))
    width = draw(st.integers(1, 5))
    alphas = np.array(
        draw(st.lists(st.integers(0, m - 1), min_size=k, max_size=k)), np.int64
    )
    seed = draw(st.integers(0, 2**32))
    return m, alphas, ring_bits, width, seed


@FAST
@given(_fused_cases())
def test_retrieve_and_prepare_matches_unfused(case) -> None:
    m, alphas, ring_bits, width, seed = case
    gen = np.random.default_rng(seed)
    table = random_ring(gen, (m, width), ring_bits)
    grads = random_ring(gen, (len(alphas), width), ring_bits)
    (p0, p1), state, cw_ret = _user_keys(alphas, m, ring_bits, seed)
    cw_agg = fss.convert_gen(state, grads, ring_bits=ring_bits, tag=AGGREGATION_TAG)
    answers, shares = [], []
    for b, path in ((0, p0), (1, p1)):
        ans, prep = retrieve_and_prepare(path, b, cw_ret, table, width)
        assert isinstance(prep, PreparedAggregation)
        assert ans.shape == (len(alphas), width) and ans.dtype == table.dtype
        # retrieval share = the unfused sum_j Eval(k, j) * T[j]
        e = fss.convert_eval(
            fss.eval_full_path(path, b),
            cw_ret,
            b,
            ring_bits=ring_bits,
            tag=RETRIEVAL_TAG,
        )[..., 0]
        assert np.array_equal(ans, fss.ring_matmul(e, table, ring_bits))
        share = prep.apply(cw_agg)
        assert share.shape == (m, width) and share.dtype == table.dtype
        assert np.array_equal(share, _unfused_aggregation(path, b, cw_agg, ring_bits))
        answers.append(ans)
        shares.append(share)
    assert np.array_equal(answers[0] + answers[1], table[alphas])
    assert np.array_equal(shares[0] + shares[1], _add_at(m, alphas, grads))


@pytest.mark.parametrize(
    ("subtree_depth", "group_leaves"), [(1, 2), (2, 8), (3, 64), (7, 1 << 17)]
)
@pytest.mark.parametrize("m", [1, 5, 100, 1000])
def test_retrieve_and_prepare_independent_of_subtree_grouping(
    monkeypatch: pytest.MonkeyPatch, m: int, subtree_depth: int, group_leaves: int
) -> None:
    """Several keys per group, and groups ending inside a key: each leaf must still use its
    own key's retrieval correction word."""
    monkeypatch.setattr(tree, "SUBTREE_DEPTH", subtree_depth)
    monkeypatch.setattr(tree, "GROUP_LEAVES", group_leaves)
    gen = np.random.default_rng(m)
    alphas = gen.integers(0, m, 7)
    table = random_ring(gen, (m, 3), 32)
    grads = random_ring(gen, (7, 3), 32)
    (p0, p1), state, cw_ret = _user_keys(alphas, m, 32)
    cw_agg = fss.convert_gen(state, grads, ring_bits=32, tag=AGGREGATION_TAG)
    a0, prep0 = retrieve_and_prepare(p0, 0, cw_ret, table, 3)
    a1, prep1 = retrieve_and_prepare(p1, 1, cw_ret, table, 3)
    assert np.array_equal(a0 + a1, table[alphas])
    assert np.array_equal(
        prep0.apply(cw_agg) + prep1.apply(cw_agg), _add_at(m, alphas, grads)
    )


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_aggregation_over_several_users_sums_exactly(ring_bits: int) -> None:
    m, w = 500, 4
    gen = np.random.default_rng(ring_bits)
    table = random_ring(gen, (m, w), ring_bits)
    total = [np.zeros((m, w), table.dtype), np.zeros((m, w), table.dtype)]
    truth = np.zeros((m, w), table.dtype)
    for user in range(4):
        alphas = gen.choice(m, 10, replace=False)
        grads = random_ring(gen, (10, w), ring_bits)
        (p0, p1), state, cw_ret = _user_keys(alphas, m, ring_bits, user)
        cw_agg = fss.convert_gen(state, grads, ring_bits=ring_bits, tag=AGGREGATION_TAG)
        for b, path in ((0, p0), (1, p1)):
            _, prep = retrieve_and_prepare(path, b, cw_ret, table, w)
            total[b] += prep.apply(cw_agg)
        np.add.at(truth, alphas, grads)
    assert np.array_equal(total[0] + total[1], truth)
    # a single server's aggregate share alone says nothing obvious: it is not the truth
    assert not np.array_equal(total[0], truth)


def test_prepared_aggregation_does_not_change_when_applied_twice() -> None:
    gen = np.random.default_rng(0)
    (p0, _), state, cw_ret = _user_keys(np.array([3, 4]), 50, 32)
    _, prep = retrieve_and_prepare(p0, 0, cw_ret, random_ring(gen, (50, 2), 32), 2)
    cw = fss.convert_gen(state, random_ring(gen, (2, 2), 32), tag=AGGREGATION_TAG)
    first = prep.apply(cw)
    assert np.array_equal(prep.apply(cw), first)


# ------------------------------------------------------------------- eval_full_dot


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("m", [1, 2, 129, 1682])
def test_eval_full_dot_equals_beta_times_table_row(m: int, ring_bits: int) -> None:
    gen = np.random.default_rng([m, ring_bits])
    k = 5
    alphas = gen.integers(0, m, k)
    betas = random_ring(gen, (k, 1), ring_bits)
    table = random_ring(gen, (m, 7), ring_bits)
    k0, k1 = fss.gen(alphas, betas, m, ring_bits=ring_bits, _rng=CtrDrbg(m))
    d0, d1 = fss.eval_full_dot(k0, 0, table), fss.eval_full_dot(k1, 1, table)
    assert d0.shape == (k, 7) and d0.dtype == table.dtype
    assert np.array_equal(d0 + d1, betas * table[alphas])
    assert np.array_equal(
        d0, fss.ring_matmul(fss.eval_full(k0, 0)[..., 0], table, ring_bits)
    )


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_eval_full_dot_over_several_key_chunks_equals_beta_times_table_row(ring_bits: int) -> None:
    # m > LEAF_CHUNK: chunks of DOT_KEYS keys share one limb table; 2 full chunks + a ragged one
    m, k = fss.dpf.LEAF_CHUNK + 3, 2 * fss.dpf.DOT_KEYS + 5
    gen = np.random.default_rng([m, k, ring_bits])
    alphas = gen.integers(0, m, k)
    alphas[:2] = (0, m - 1)
    betas = random_ring(gen, (k, 1), ring_bits)
    table = random_ring(gen, (m, 3), ring_bits)
    k0, k1 = fss.gen(alphas, betas, m, ring_bits=ring_bits, _rng=CtrDrbg(k))
    d0, d1 = fss.eval_full_dot(k0, 0, table), fss.eval_full_dot(k1, 1, table)
    assert np.array_equal(d0 + d1, betas * table[alphas])


def test_eval_full_dot_fails_if_payload_width_not_one() -> None:
    k0, _ = fss.gen([1], np.ones((1, 2), np.uint32), 10)
    with pytest.raises(InvalidParameters, match="payload width 1"):
        fss.eval_full_dot(k0, 0, np.zeros((10, 3), np.uint32))


@pytest.mark.parametrize(
    "table",
    [
        np.zeros((10, 3), np.uint64),
        np.zeros((9, 3), np.uint32),
        np.zeros(10, np.uint32),
        np.zeros((10, 3), np.int32),
    ],
)
def test_eval_full_dot_fails_if_table_does_not_match(table: np.ndarray) -> None:
    k0, _ = fss.gen([1], np.ones((1, 1), np.uint32), 10)
    with pytest.raises(InvalidParameters, match="table"):
        fss.eval_full_dot(k0, 0, table)


# ------------------------------------------------------------------- bucket form


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("bucket_m", [1, 2, 40, 300])
def test_bucket_form_retrieves_and_aggregates(bucket_m: int, ring_bits: int) -> None:
    gen = np.random.default_rng([bucket_m, ring_bits])
    buckets, w = 6, 3
    alphas = gen.integers(0, bucket_m, buckets)
    tables = random_ring(gen, (buckets, bucket_m, w), ring_bits)
    grads = random_ring(gen, (buckets, w), ring_bits)
    (p0, p1), state, cw_ret = _user_keys(alphas, bucket_m, ring_bits)
    cw_agg = fss.convert_gen(state, grads, ring_bits=ring_bits, tag=AGGREGATION_TAG)
    answers, shares = [], []
    for b, path in ((0, p0), (1, p1)):
        ans, t, conv = retrieve_and_prepare_buckets(path, b, cw_ret, tables, w)
        assert t.shape == (buckets, bucket_m) and conv.shape == (buckets, bucket_m, w)
        leaves = fss.eval_full_path(path, b)
        assert np.array_equal(t, (leaves[..., 0] & 1).astype(np.uint8))
        share = bucket_shares(b, t, conv, cw_agg)
        assert np.array_equal(
            share,
            fss.convert_eval(
                leaves, cw_agg, b, ring_bits=ring_bits, tag=AGGREGATION_TAG
            ),
        )
        answers.append(ans)
        shares.append(share)
    assert np.array_equal(answers[0] + answers[1], tables[np.arange(buckets), alphas])
    want = np.zeros((buckets, bucket_m, w), tables.dtype)
    want[np.arange(buckets), alphas] = grads
    assert np.array_equal(shares[0] + shares[1], want)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_bucket_form_skips_positions_past_the_bucket_sizes(ring_bits: int) -> None:
    """With ``sizes`` (positions past a bucket's size hold zero rows) the conversion sum is
    the full one inside the sizes and zero past them; answers and control bits do not change."""
    gen = np.random.default_rng(ring_bits)
    buckets, bucket_m, w = 5, 37, 65
    sizes = np.array([37, 1, 20, 36, 9])
    live = np.arange(bucket_m)[None, :] < sizes[:, None]
    alphas = gen.integers(0, sizes)
    tables = random_ring(gen, (buckets, bucket_m, 2), ring_bits) * live[:, :, None].astype(ring_dtype(ring_bits))
    (p0, _), _, cw_ret = _user_keys(alphas, bucket_m, ring_bits)
    ans, t, conv = retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, w)
    ans_l, t_l, conv_l = retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, w, sizes=sizes)
    assert np.array_equal(ans_l, ans) and np.array_equal(t_l, t)
    assert np.array_equal(conv_l[live], conv[live]) and not conv_l[~live].any() and conv[~live].any()
    for bad in (sizes[:-1], sizes + 1):
        with pytest.raises(InvalidParameters, match="sizes"):
            retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, w, sizes=bad)


# ------------------------------------------------------------------- bad input


def _prep_inputs(ring_bits: int = 32):
    (p0, p1), _, cw_ret = _user_keys(np.array([1, 2]), 20, ring_bits)
    table = np.zeros((20, 3), ring_dtype(ring_bits))
    return p0, p1, cw_ret, table


def test_retrieve_and_prepare_fails_if_keys_belong_to_other_party() -> None:
    p0, _, cw, table = _prep_inputs()
    with pytest.raises(InvalidParameters, match="keys belong to party"):
        retrieve_and_prepare(p0, 1, cw, table, 3)
    with pytest.raises(InvalidParameters, match="party"):
        retrieve_and_prepare(p0, 2, cw, table, 3)


@pytest.mark.parametrize(
    "table",
    [
        np.zeros((20, 3), np.int64),
        np.zeros((21, 3), np.uint32),
        np.zeros((20,), np.uint32),
        np.zeros((20, 3), np.uint64),
    ],
)
def test_retrieve_and_prepare_fails_if_table_does_not_match(table: np.ndarray) -> None:
    p0, _, cw, _ = _prep_inputs()
    with pytest.raises(InvalidParameters):
        retrieve_and_prepare(p0, 0, cw, table, 3)


def test_retrieve_and_prepare_fails_if_retrieval_cw_does_not_match() -> None:
    p0, _, cw, table = _prep_inputs()
    for bad in (
        cw[:1],
        cw.astype(np.uint64),
        cw.reshape(-1),
        np.concatenate([cw, cw], axis=1),
    ):
        with pytest.raises(InvalidParameters, match="retrieval_cw"):
            retrieve_and_prepare(p0, 0, bad, table, 3)


@pytest.mark.parametrize("agg_width", [0, -1])
def test_retrieve_and_prepare_fails_if_agg_width_not_positive(agg_width: int) -> None:
    p0, _, cw, table = _prep_inputs()
    with pytest.raises(InvalidParameters, match="agg_width"):
        retrieve_and_prepare(p0, 0, cw, table, agg_width)


def test_apply_fails_if_correction_words_do_not_match() -> None:
    p0, _, cw, table = _prep_inputs()
    _, prep = retrieve_and_prepare(p0, 0, cw, table, 3)
    for bad in (
        np.zeros((2, 2), np.uint32),
        np.zeros((3, 3), np.uint32),
        np.zeros((2, 3), np.uint64),
        np.zeros(6, np.uint32),
    ):
        with pytest.raises(InvalidParameters, match="correction words"):
            prep.apply(bad)


def test_bucket_shares_fail_if_correction_words_do_not_match() -> None:
    t = np.zeros((2, 5), np.uint8)
    conv = np.zeros((2, 5, 3), np.uint32)
    with pytest.raises(InvalidParameters, match="correction words"):
        bucket_shares(0, t, conv, np.zeros((2, 3), np.uint64))
    with pytest.raises(InvalidParameters, match="correction words"):
        bucket_shares(0, t, conv, np.zeros((3, 3), np.uint32))


def test_retrieve_and_prepare_buckets_fails_if_tables_do_not_match() -> None:
    p0, _, cw, _ = _prep_inputs()
    with pytest.raises(InvalidParameters, match="tables"):
        retrieve_and_prepare_buckets(p0, 0, cw, np.zeros((3, 20, 2), np.uint32), 2)
    with pytest.raises(InvalidParameters, match="tables"):
        retrieve_and_prepare_buckets(p0, 0, cw, np.zeros((2, 20, 2), np.float64), 2)


def test_apply_bits_in_key_blocks_matches_direct_product(monkeypatch):
    """Blocks of APPLY_KEYS keys (here 8, with a ragged last block) sum to the direct product."""
    from secemb.fss import fused

    g = np.random.default_rng(5)
    k, m, w = 37, 300, 3
    t = g.integers(0, 2, (k, m), dtype=np.uint8)
    cw = g.integers(0, 2**32, (k, w), dtype=np.uint64).astype(np.uint32)
    expect = (t.astype(np.uint64).T @ cw.astype(np.uint64)).astype(np.uint32)  # mod 2^64, then 2^32
    monkeypatch.setattr(fused, "APPLY_KEYS", 8)
    for party in (0, 1):
        got = fused.PreparedAggregation(party, 32, m, w, np.packbits(t, axis=1), None).apply_bits(cw)
        assert np.array_equal(got, expect if party == 0 else (-expect.astype(np.int64)).astype(np.uint32))
