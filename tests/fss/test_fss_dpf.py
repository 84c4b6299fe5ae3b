"""Correctness of the batched DPF: gen / eval_full / eval_points, path sharing, bad input.

The property every test comes back to: for every key ``i``,
``eval(keys0, 0) + eval(keys1, 1) = beta_i`` at ``alpha_i`` and 0 elsewhere, modulo ``2^k``.
"""

from __future__ import annotations

import numpy as np
import pytest
from fss_reference import ref_eval, ref_parse
from fss_strategies import DPFCase, dpf_cases, point_function, random_ring, ring_dtype
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import tree
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG
from secemb.randomness import CtrDrbg

FAST = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _reconstruct_full(k0: fss.DPFKeys, k1: fss.DPFKeys) -> np.ndarray:
    return fss.eval_full(k0, 0) + fss.eval_full(k1, 1)


def _reconstruct_points(k0: fss.DPFKeys, k1: fss.DPFKeys, xs: np.ndarray) -> np.ndarray:
    return fss.eval_points(k0, 0, xs) + fss.eval_points(k1, 1, xs)


# ------------------------------------------------------------------- parameter sweep


def _keys_for(m: int) -> int:
    return 8 if m <= 3 else 3


@pytest.mark.parametrize("width", [1, 65])
@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("m", [1, 2, 3, 1682, 3883])
def test_full_domain_shares_sum_to_point_function(
    m: int, ring_bits: int, width: int
) -> None:
    gen = np.random.default_rng([m, ring_bits, width])
    k = _keys_for(m)
    alphas = gen.integers(0, m, k)
    alphas[0], alphas[-1] = 0, m - 1  # both ends of the domain
    betas = random_ring(gen, (k, width), ring_bits)
    k0, k1 = fss.gen(alphas, betas, m, ring_bits=ring_bits)
    y0, y1 = fss.eval_full(k0, 0), fss.eval_full(k1, 1)
    assert y0.shape == y1.shape == (k, m, width)
    assert y0.dtype == y1.dtype == ring_dtype(ring_bits)
    assert np.array_equal(y0 + y1, point_function(alphas, betas, m))
    # full domain equals pointwise, share by share (not just after reconstruction)
    xs = (
        np.arange(m)
        if m < 64
        else np.unique(np.r_[alphas, 0, m - 1, gen.integers(0, m, 40)])
    )
    assert np.array_equal(fss.eval_points(k0, 0, xs), y0[:, xs])
    assert np.array_equal(fss.eval_points(k1, 1, xs), y1[:, xs])


LARGE_M = (1 << 17) + 1  # depth 18, one leaf past a power of two


@pytest.mark.parametrize("width", [1, 65])
@pytest.mark.parametrize("ring_bits", [32, 64])
def test_point_shares_sum_to_point_function_on_large_domain(
    ring_bits: int, width: int
) -> None:
    gen = np.random.default_rng([ring_bits, width])
    alphas = np.array([0, LARGE_M - 1, 1 << 17, gen.integers(0, LARGE_M)])
    betas = random_ring(gen, (4, width), ring_bits)
    k0, k1 = fss.gen(alphas, betas, LARGE_M, ring_bits=ring_bits)
    xs = np.unique(np.r_[alphas, alphas[1:3] - 1, 1, gen.integers(0, LARGE_M, 60)])
    got = _reconstruct_points(k0, k1, xs)
    truth = np.zeros((4, xs.size, width), betas.dtype)
    for i, a in enumerate(alphas):
        truth[i, xs == a] = betas[i]
    assert np.array_equal(got, truth)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_full_domain_on_large_domain(ring_bits: int) -> None:
    alpha = np.array([LARGE_M - 1])  # the single leaf of the last, almost empty subtree
    beta = np.array([[123456789]], ring_dtype(ring_bits))
    k0, k1 = fss.gen(alpha, beta, LARGE_M, ring_bits=ring_bits, _rng=CtrDrbg(ring_bits))
    y = _reconstruct_full(k0, k1)
    assert y.shape == (1, LARGE_M, 1)
    assert int(y[0, -1, 0]) == 123456789
    assert np.count_nonzero(y) == 1
    xs = np.array([0, 1, 1 << 16, 1 << 17, LARGE_M - 1])
    assert np.array_equal(fss.eval_points(k0, 0, xs), fss.eval_full(k0, 0)[:, xs])


# ------------------------------------------------------------------- properties


@FAST
@given(dpf_cases())
def test_shares_sum_to_point_function(case: DPFCase) -> None:
    k0, k1 = fss.gen(
        case.alphas,
        case.betas,
        case.domain_size,
        ring_bits=case.ring_bits,
        _rng=case.rng(),
    )
    assert np.array_equal(_reconstruct_full(k0, k1), case.truth)


@FAST
@given(dpf_cases(max_domain=2000), st.data())
def test_full_domain_equals_pointwise(case: DPFCase, data: st.DataObject) -> None:
    m = case.domain_size
    k0, k1 = fss.gen(
        case.alphas, case.betas, m, ring_bits=case.ring_bits, _rng=case.rng()
    )
    xs = np.array(
        data.draw(st.lists(st.integers(0, m - 1), min_size=0, max_size=20)),
        dtype=np.int64,
    )
    for b, keys in ((0, k0), (1, k1)):
        full = fss.eval_full(keys, b)
        points = fss.eval_points(keys, b, xs)
        assert points.shape == (len(case.alphas), xs.size, case.betas.shape[1])
        assert np.array_equal(points, full[:, xs])


@FAST
@given(dpf_cases(max_keys=3))
def test_same_seed_gives_identical_keys(case: DPFCase) -> None:
    a = fss.gen(
        case.alphas,
        case.betas,
        case.domain_size,
        ring_bits=case.ring_bits,
        _rng=case.rng(),
    )
    b = fss.gen(
        case.alphas,
        case.betas,
        case.domain_size,
        ring_bits=case.ring_bits,
        _rng=case.rng(),
    )
    assert a[0].to_bytes() == b[0].to_bytes() and a[1].to_bytes() == b[1].to_bytes()


def test_fresh_randomness_by_default() -> None:
    alphas, betas = np.array([5, 5]), np.ones((2, 1), np.uint32)
    k0a, _ = fss.gen(alphas, betas, 100)
    k0b, _ = fss.gen(alphas, betas, 100)
    assert k0a.to_bytes() != k0b.to_bytes()
    # and the two keys of one batch do not share roots
    assert not np.array_equal(k0a.path.roots[0], k0a.path.roots[1])


def test_duplicate_alphas_are_independent_keys() -> None:
    betas = np.array([[1], [2], [3]], np.uint32)
    k0, k1 = fss.gen([7, 7, 7], betas, 10, _rng=CtrDrbg(1))
    y = _reconstruct_full(k0, k1)
    assert np.array_equal(y[:, 7, 0], [1, 2, 3])
    assert len({bytes(r) for r in k0.path.roots}) == 3


def test_empty_batch() -> None:
    k0, k1 = fss.gen(
        np.zeros(0, np.int64), np.zeros((0, 4), np.uint64), 50, ring_bits=64
    )
    assert len(k0) == len(k1) == 0
    assert fss.eval_full(k0, 0).shape == (0, 50, 4)
    assert fss.eval_points(k1, 1, np.array([3])).shape == (0, 1, 4)
    assert len(k0.to_bytes()) == 49  # the framing header and the key parameters (docs/wire-format.md)


def test_eval_points_with_no_points() -> None:
    k0, _ = fss.gen([1, 2], np.ones((2, 3), np.uint32), 10)
    assert fss.eval_points(k0, 0, np.zeros(0, np.int64)).shape == (2, 0, 3)


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("m", [1, 2, 5, 130, 1000])
def test_eval_agrees_with_reference_implementation(m: int, ring_bits: int) -> None:
    """Share by share against tests/fss/fss_reference.py (spec-only, pure Python + AES)."""
    gen = np.random.default_rng([m, ring_bits])
    alphas = np.array([0, m - 1, gen.integers(0, m)])
    betas = random_ring(gen, (3, 3), ring_bits)
    k0, k1 = fss.gen(alphas, betas, m, ring_bits=ring_bits, _rng=CtrDrbg(m))
    xs = np.unique(np.r_[alphas, gen.integers(0, m, 4)])
    for b, keys in ((0, k0), (1, k1)):
        batch = ref_parse(keys.to_bytes())
        got = fss.eval_points(keys, b, xs)
        for i in range(3):
            for j, x in enumerate(xs):
                assert [int(v) for v in got[i, j]] == ref_eval(batch, i, int(x))


# ------------------------------------------------------------------- tree expansion internals


@pytest.mark.parametrize(
    ("subtree_depth", "group_leaves"),
    [(1, 2), (2, 16), (3, 1 << 17), (7, 256), (12, 1 << 17)],
)
@pytest.mark.parametrize("m", [1, 2, 3, 100, 129, 1000])
def test_full_domain_independent_of_subtree_grouping(
    monkeypatch: pytest.MonkeyPatch, m: int, subtree_depth: int, group_leaves: int
) -> None:
    """Group boundaries inside a key and keys sharing a group must not change any share."""
    gen = np.random.default_rng(m)
    alphas = gen.integers(0, m, 5)
    betas = random_ring(gen, (5, 2), 32)
    k0, k1 = fss.gen(alphas, betas, m, _rng=CtrDrbg(m))
    want0, want1 = fss.eval_full(k0, 0), fss.eval_full(k1, 1)
    monkeypatch.setattr(tree, "SUBTREE_DEPTH", subtree_depth)
    monkeypatch.setattr(tree, "GROUP_LEAVES", group_leaves)
    assert np.array_equal(fss.eval_full(k0, 0), want0)
    assert np.array_equal(fss.eval_full(k1, 1), want1)
    leaves = fss.eval_full_path(k1, 1)
    assert np.array_equal(fss.convert_eval(leaves, k1.cw_out, 1), want1)
    assert np.array_equal(want0 + want1, point_function(alphas, betas, m))


# ------------------------------------------------------------------- path sharing


@FAST
@given(dpf_cases(max_domain=1000))
def test_gen_path_plus_convert_gen_equals_gen(case: DPFCase) -> None:
    m, rb = case.domain_size, case.ring_bits
    k0, k1 = fss.gen(case.alphas, case.betas, m, ring_bits=rb, _rng=case.rng())
    p0, p1, state = fss.gen_path(case.alphas, m, _rng=case.rng())
    cw = fss.convert_gen(state, case.betas, ring_bits=rb)
    params = fss.DPFParams(m, case.betas.shape[1], rb)
    assert fss.DPFKeys(p0, cw, params).to_bytes() == k0.to_bytes()
    assert fss.DPFKeys(p1, cw, params).to_bytes() == k1.to_bytes()
    # the path part of a full key is exactly the path keys' body
    n_path = len(case.alphas) * params.path_key_bytes
    assert k0.to_bytes()[49 : 49 + n_path] == p0.to_bytes()[49:]


@FAST
@given(dpf_cases(max_domain=1000))
def test_eval_full_path_plus_convert_eval_equals_eval_full(case: DPFCase) -> None:
    k0, k1 = fss.gen(
        case.alphas,
        case.betas,
        case.domain_size,
        ring_bits=case.ring_bits,
        _rng=case.rng(),
    )
    for b, keys in ((0, k0), (1, k1)):
        leaves = fss.eval_full_path(keys.path, b)
        assert (
            leaves.shape == (len(keys), case.domain_size, 2)
            and leaves.dtype == np.uint64
        )
        assert np.array_equal(
            leaves, fss.eval_full_path(keys, b)
        )  # DPFKeys accepted too
        shares = fss.convert_eval(leaves, keys.cw_out, b, ring_bits=case.ring_bits)
        assert np.array_equal(shares, fss.eval_full(keys, b))


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_one_path_serves_retrieval_and_aggregation(ring_bits: int) -> None:
    m, k, w = 700, 6, 9
    gen = np.random.default_rng(ring_bits)
    alphas = gen.integers(0, m, k)
    grads = random_ring(gen, (k, w), ring_bits)
    ones = np.ones((k, 1), ring_dtype(ring_bits))
    p0, p1, state = fss.gen_path(alphas, m, _rng=CtrDrbg(5))
    cw_ret = fss.convert_gen(state, ones, ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    cw_agg = fss.convert_gen(state, grads, ring_bits=ring_bits, tag=AGGREGATION_TAG)
    leaves = [fss.eval_full_path(p0, 0), fss.eval_full_path(p1, 1)]
    ret = sum(
        fss.convert_eval(leaves[b], cw_ret, b, ring_bits=ring_bits, tag=RETRIEVAL_TAG)
        for b in (0, 1)
    )
    agg = sum(
        fss.convert_eval(leaves[b], cw_agg, b, ring_bits=ring_bits, tag=AGGREGATION_TAG)
        for b in (0, 1)
    )
    assert np.array_equal(ret, point_function(alphas, ones, m))
    assert np.array_equal(agg, point_function(alphas, grads, m))
    # a correction word is only meaningful under its own tag
    wrong = sum(
        fss.convert_eval(leaves[b], cw_ret, b, ring_bits=ring_bits, tag=AGGREGATION_TAG)
        for b in (0, 1)
    )
    assert not np.array_equal(wrong, ret)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_retrieval_and_aggregation_tags_give_different_correction_words(
    ring_bits: int,
) -> None:
    """Same path, same payload: the two output correction words must be unrelated, or the
    aggregation CW would be computable from the retrieval CW (and vice versa)."""
    k, w = 2000, 3
    betas = random_ring(np.random.default_rng(0), (k, w), ring_bits)
    _, _, state = fss.gen_path(np.arange(k) % 97, 97, _rng=CtrDrbg(3))
    a = fss.convert_gen(state, betas, ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    b = fss.convert_gen(state, betas, ring_bits=ring_bits, tag=AGGREGATION_TAG)
    c = fss.convert_gen(state, betas, ring_bits=ring_bits)  # default tag
    assert np.mean(a == b) < 1e-3 and np.mean(a == c) < 1e-3 and np.mean(b == c) < 1e-3
    # the difference of the two CWs is not a function of the payload alone
    diff = (a - b).astype(np.float64)
    assert np.unique(diff).size > 0.99 * diff.size


def test_gen_fails_if_given_a_conversion_tag() -> None:
    # one-shot keys always use DEFAULT_TAG; tagged conversions go through gen_path/convert_gen
    with pytest.raises(TypeError):
        fss.gen([3], np.array([[7]], np.uint32), 10, tag="other")


# ------------------------------------------------------------------- bad input

U32 = np.uint32


def _betas(k: int = 1, d: int = 1, dtype: type = U32) -> np.ndarray:
    return np.ones((k, d), dtype)


def test_gen_fails_if_alpha_out_of_domain() -> None:
    with pytest.raises(
        InvalidParameters, match=r"alpha 10 is outside the domain \[0, 10\)"
    ):
        fss.gen([10], _betas(), 10)


def test_gen_fails_if_alpha_negative() -> None:
    with pytest.raises(InvalidParameters, match="alpha -1"):
        fss.gen([-1], _betas(), 10)


def test_gen_fails_if_alpha_wraps_as_uint64() -> None:
    with pytest.raises(InvalidParameters):
        fss.gen(np.array([2**64 - 1], np.uint64), _betas(), 10)


def test_gen_fails_if_alpha_out_of_domain_for_one_key_of_many() -> None:
    with pytest.raises(InvalidParameters, match="alpha 5"):
        fss.gen([0, 4, 5, 1], _betas(4), 5)


@pytest.mark.parametrize(
    "alphas", [np.array([1.0]), np.array([True]), np.array(["1"]), np.array([1 + 0j])]
)
def test_gen_fails_if_alphas_not_integers(alphas: np.ndarray) -> None:
    with pytest.raises(TypeError, match="alphas must be integers"):
        fss.gen(alphas, _betas(), 10)


@pytest.mark.parametrize("alphas", [np.array(3), np.zeros((1, 1), np.int64)])
def test_gen_fails_if_alphas_not_one_dimensional(alphas: np.ndarray) -> None:
    with pytest.raises(InvalidParameters, match="alphas must have shape"):
        fss.gen(alphas, _betas(), 10)


@pytest.mark.parametrize(
    ("dtype", "ring_bits"),
    [
        (np.int64, 32),
        (np.int32, 32),
        (np.uint64, 32),
        (np.uint32, 64),
        (np.float64, 32),
    ],
)
def test_gen_fails_if_betas_have_wrong_dtype(dtype: type, ring_bits: int) -> None:
    with pytest.raises(TypeError, match="betas must have dtype"):
        fss.gen([1], _betas(dtype=dtype), 10, ring_bits=ring_bits)


def test_gen_fails_if_betas_one_dimensional() -> None:
    with pytest.raises(InvalidParameters, match=r"betas must have shape \(1, d\)"):
        fss.gen([1], np.ones(1, U32), 10)


def test_gen_fails_if_betas_have_zero_width() -> None:
    with pytest.raises(InvalidParameters, match="betas"):
        fss.gen([1], np.ones((1, 0), U32), 10)


def test_gen_fails_if_key_counts_differ() -> None:
    with pytest.raises(InvalidParameters, match=r"betas must have shape \(2, d\)"):
        fss.gen([1, 2], _betas(1), 10)
    with pytest.raises(InvalidParameters):
        fss.gen([1], _betas(2), 10)


@pytest.mark.parametrize("m", [0, -1, -(2**40), 2**40 + 1])
def test_gen_fails_if_domain_size_out_of_range(m: int) -> None:
    with pytest.raises(InvalidParameters, match="domain_size"):
        fss.gen(np.zeros(0, np.int64), np.zeros((0, 1), U32), m)


@pytest.mark.parametrize("m", [10.0, True, "10", None])
def test_gen_fails_if_domain_size_not_an_int(m: object) -> None:
    with pytest.raises(TypeError, match="domain_size must be an int"):
        fss.gen([1], _betas(), m)  # type: ignore[arg-type]


def test_gen_accepts_numpy_integer_domain_size() -> None:
    k0, _ = fss.gen([3], _betas(), np.int64(10))
    assert k0.params.domain_size == 10 and type(k0.params.domain_size) is int


@pytest.mark.parametrize("ring_bits", [0, 8, 16, 128, 33])
def test_gen_fails_if_ring_bits_unsupported(ring_bits: int) -> None:
    with pytest.raises(InvalidParameters, match="ring_bits"):
        fss.gen([1], _betas(), 10, ring_bits=ring_bits)


def test_convert_gen_fails_if_ring_bits_unsupported() -> None:
    _, _, state = fss.gen_path([1], 10)
    with pytest.raises(InvalidParameters, match="ring_bits"):
        fss.convert_gen(state, _betas(), ring_bits=16)


def test_convert_gen_fails_if_betas_do_not_match_state() -> None:
    _, _, state = fss.gen_path([1, 2], 10)
    with pytest.raises(InvalidParameters):
        fss.convert_gen(state, _betas(3), ring_bits=32)


def test_gen_path_fails_if_alpha_out_of_domain() -> None:
    with pytest.raises(InvalidParameters, match="alpha 10"):
        fss.gen_path([10], 10)


@pytest.mark.parametrize("party", [2, -1, "0", None, 0.0 + 0.5])
def test_eval_fails_if_party_invalid(party: object) -> None:
    k0, _ = fss.gen([1], _betas(), 10)
    with pytest.raises(InvalidParameters, match="party"):
        fss.eval_full(k0, party)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters, match="party"):
        fss.eval_points(k0, party, np.array([1]))  # type: ignore[arg-type]


def test_eval_fails_if_keys_belong_to_other_party() -> None:
    k0, k1 = fss.gen([1], _betas(), 10)
    for fn in (
        lambda: fss.eval_full(k0, 1),
        lambda: fss.eval_full(k1, 0),
        lambda: fss.eval_points(k1, 0, np.array([1])),
        lambda: fss.eval_full_path(k0.path, 1),
        lambda: fss.eval_full_dot(k1, 0, np.zeros((10, 2), U32)),
    ):
        with pytest.raises(InvalidParameters, match="keys belong to party"):
            fn()


@pytest.mark.parametrize("xs", [np.array([10]), np.array([-1]), np.array([0, 11])])
def test_eval_points_fails_if_point_out_of_domain(xs: np.ndarray) -> None:
    k0, _ = fss.gen([1], _betas(), 10)
    with pytest.raises(InvalidParameters, match="outside the domain"):
        fss.eval_points(k0, 0, xs)


def test_eval_points_fails_if_points_not_integers() -> None:
    k0, _ = fss.gen([1], _betas(), 10)
    with pytest.raises(TypeError):
        fss.eval_points(k0, 0, np.array([1.0]))
    with pytest.raises(InvalidParameters):
        fss.eval_points(k0, 0, np.array([[1]]))


def test_convert_eval_fails_if_correction_words_do_not_match() -> None:
    k0, _ = fss.gen([1, 2], _betas(2, 3), 10)
    leaves = fss.eval_full_path(k0, 0)
    with pytest.raises(InvalidParameters):
        fss.convert_eval(leaves, k0.cw_out[:1], 0)
    with pytest.raises(TypeError):
        fss.convert_eval(
            leaves, k0.cw_out.astype(np.uint64), 0
        )  # ring_bits defaults to 32


def test_errors_are_value_errors() -> None:
    """Generic handlers catching ValueError still see parameter errors."""
    with pytest.raises(ValueError):
        fss.gen([10], _betas(), 10)
