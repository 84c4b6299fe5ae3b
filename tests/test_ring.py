"""Tests for secemb.ring: fixed-point encoding in Z_{2^k}."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from secemb.errors import InvalidParameters
from secemb.ring import FixedPoint

PARAMS = [(32, 16), (32, 0), (32, 30), (64, 16), (64, 32), (64, 0)]
PARTY_COUNTS = [1, 2, 3, 7, 100, 1000, 65_537]


def _fp_ids(p: tuple[int, int]) -> str:
    return f"k{p[0]}-f{p[1]}"


def _ring_sum(fp: FixedPoint, enc: np.ndarray) -> np.ndarray:
    """Sum along axis 0 in the ring (numpy unsigned sums wrap mod 2^k)."""
    return np.sum(enc, axis=0, dtype=fp.dtype)


def _signed(fp: FixedPoint, u: np.ndarray) -> list[int]:
    """Exact signed integer value of ring elements (Python ints)."""
    half = 1 << (fp.ring_bits - 1)
    return [int(v) - (1 << fp.ring_bits) if int(v) >= half else int(v) for v in u.ravel()]


# ---------------------------------------------------------------- parameters


@pytest.mark.parametrize(("k", "f"), PARAMS, ids=map(_fp_ids, PARAMS))
def test_dtype_matches_ring_bits(k: int, f: int) -> None:
    assert FixedPoint(k, f).dtype == np.dtype(np.uint32 if k == 32 else np.uint64)


def test_defaults_are_32_bit_ring_with_16_fractional_bits() -> None:
    fp = FixedPoint()
    assert (fp.ring_bits, fp.frac_bits, fp.dtype) == (32, 16, np.dtype(np.uint32))


@pytest.mark.parametrize("k", [0, 8, 16, 31, 33, 63, 128, True, 32.0])
def test_init_fails_if_ring_bits_not_32_or_64(k: object) -> None:
    with pytest.raises(InvalidParameters, match="ring_bits"):
        FixedPoint(ring_bits=k, frac_bits=0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("k", "f"), [(32, -1), (32, 31), (32, 32), (64, 63), (64, -3), (32, 1.5)])
def test_init_fails_if_frac_bits_out_of_range(k: int, f: object) -> None:
    with pytest.raises(InvalidParameters, match="frac_bits"):
        FixedPoint(ring_bits=k, frac_bits=f)  # type: ignore[arg-type]


def test_init_accepts_largest_frac_bits() -> None:
    assert FixedPoint(32, 30).frac_bits == 30
    assert FixedPoint(64, 62).frac_bits == 62


def test_fixed_point_is_frozen_and_hashable() -> None:
    fp = FixedPoint()
    with pytest.raises(AttributeError):
        fp.frac_bits = 3  # type: ignore[misc]
    assert hash(fp) == hash(FixedPoint(32, 16))


# ---------------------------------------------------------------- known answers


def test_encode_known_answers_k32_f16() -> None:
    fp = FixedPoint(32, 16)
    got = fp.encode([0.0, 1.0, -1.0, 0.5, -0.5, 2.0**-16, -(2.0**-16), 3.25])
    want = [0, 65536, 2**32 - 65536, 32768, 2**32 - 32768, 1, 2**32 - 1, 3 * 65536 + 16384]
    assert got.dtype == np.uint32
    assert got.tolist() == want


def test_encode_known_answers_k64_f16() -> None:
    fp = FixedPoint(64, 16)
    got = fp.encode([1.0, -1.0, 2.0**40, -(2.0**40), -(2.0**-16)])
    want = [65536, 2**64 - 65536, 2**56, 2**64 - 2**56, 2**64 - 1]
    assert got.dtype == np.uint64
    assert got.tolist() == want


def test_encode_rounds_half_to_even() -> None:
    fp = FixedPoint(32, 0)
    got = fp.encode([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 2.5001])
    assert _signed(fp, got) == [0, 2, 2, 0, -2, -2, 2, 3]


def test_encode_rounds_below_resolution_to_nearest_even() -> None:
    fp = FixedPoint(32, 16)
    # 2^-17 is half a unit: ties go to even (0); 3 * 2^-17 is 1.5 units: to 2.
    assert fp.encode([2.0**-17, 3 * 2.0**-17, -(2.0**-17)]).tolist() == [0, 2, 0]


def test_decode_known_answers_k32_f16() -> None:
    fp = FixedPoint(32, 16)
    u = np.array([0, 65536, 2**32 - 65536, 2**31, 2**31 - 1, 2**32 - 1], dtype=np.uint32)
    got = fp.decode(u)
    assert got.dtype == np.float64
    assert got.tolist() == [0.0, 1.0, -1.0, -32768.0, (2**31 - 1) / 2**16, -(2.0**-16)]


def test_decode_known_answers_k64_f16() -> None:
    fp = FixedPoint(64, 16)
    u = np.array([2**64 - 65536, 2**63, 2**56, 1], dtype=np.uint64)
    assert fp.decode(u).tolist() == [-1.0, -(2.0**47), 2.0**40, 2.0**-16]


def test_encode_and_decode_keep_shape() -> None:
    fp = FixedPoint()
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7 - 1
    enc = fp.encode(x)
    assert enc.shape == (2, 3, 4)
    assert fp.decode(enc).shape == (2, 3, 4)
    scalar = fp.encode(-1.0)
    assert isinstance(scalar, np.ndarray) and scalar.shape == ()
    assert fp.decode(scalar).shape == ()
    assert fp.encode(np.zeros((0, 5))).shape == (0, 5)


def test_decode_accepts_numpy_scalar_of_ring_dtype() -> None:
    assert float(FixedPoint(32, 16).decode(np.uint32(2**32 - 65536))) == -1.0


def test_encode_accepts_float32_and_int_input() -> None:
    fp = FixedPoint(32, 8)
    assert fp.encode(np.array([1.5], dtype=np.float32)).tolist() == [384]
    assert fp.encode([3, -2]).tolist() == [768, 2**32 - 512]


# ---------------------------------------------------------------- round trip


@st.composite
def _fp_and_values(draw: st.DrawFn) -> tuple[FixedPoint, list[float]]:
    k, f = draw(st.sampled_from(PARAMS))
    fp = FixedPoint(k, f)
    lim = math.ldexp(1.0, k - 1 - f) * 0.999
    xs = draw(st.lists(st.floats(-lim, lim, allow_nan=False), min_size=1, max_size=20))
    return fp, xs


@given(_fp_and_values())
def test_round_trip_is_within_half_resolution(case: tuple[FixedPoint, list[float]]) -> None:
    fp, xs = case
    x = np.array(xs)
    back = fp.decode(fp.encode(x))
    assert np.all(np.abs(back - x) <= 2.0 ** -(fp.frac_bits + 1))


@given(st.sampled_from(PARAMS), st.data())
def test_decode_then_encode_is_identity_for_ring_elements(p: tuple[int, int], data: st.DataObject) -> None:
    k, f = p
    fp = FixedPoint(k, f)
    # Any element except -2^(k-1) (encode keeps magnitudes below 2^(k-1)); for k = 64 only
    # elements whose signed value float64 holds exactly.
    top = (1 << (k - 1)) - 1 if k == 32 else (1 << 53)
    vals = data.draw(st.lists(st.integers(-top, top), min_size=1, max_size=20))
    u = np.array([v % (1 << k) for v in vals], dtype=fp.dtype)
    assert np.array_equal(fp.encode(fp.decode(u)), u)


def test_largest_encodable_value_round_trips() -> None:
    fp = FixedPoint(32, 16)
    x = (2**31 - 1) / 2**16
    enc = fp.encode([x, -x])
    assert enc.tolist() == [2**31 - 1, 2**31 + 1]
    assert fp.decode(enc).tolist() == [x, -x]


# ---------------------------------------------------------------- encode errors


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(("k", "f"), [(32, 16), (64, 16)])
def test_encode_fails_if_value_not_finite(bad: float, k: int, f: int) -> None:
    with pytest.raises(InvalidParameters, match="finite"):
        FixedPoint(k, f).encode([0.0, bad, 1.0])


@pytest.mark.parametrize(("k", "f"), PARAMS, ids=map(_fp_ids, PARAMS))
def test_encode_fails_if_value_too_large(k: int, f: int) -> None:
    fp = FixedPoint(k, f)
    too_big = math.ldexp(1.0, k - 1 - f)  # |x 2^f| = 2^(k-1)
    for x in (too_big, -too_big, 1e300):
        with pytest.raises(InvalidParameters, match="largest") as info:
            fp.encode([0.0, x])
        msg = str(info.value)
        assert repr(abs(x)) in msg  # names the largest |x| received
        assert "<=" in msg and f"2^{k - 1} - 1" in msg  # and the largest allowed


def test_encode_fails_if_value_rounds_up_to_two_to_the_k_minus_1() -> None:
    fp = FixedPoint(32, 16)
    x = (2**31 - 0.5) / 2**16  # below 2^15, but rint(x 2^16) = 2^31 (ties to even)
    with pytest.raises(InvalidParameters):
        fp.encode([x])


def test_encode_error_names_allowed_bound() -> None:
    with pytest.raises(InvalidParameters) as info:
        FixedPoint(32, 16).encode([40000.0])
    assert "32767.99998474121" in str(info.value)
    assert "40000.0" in str(info.value)


# ---------------------------------------------------------------- decode errors


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(3, dtype=np.float64),
        np.zeros(3, dtype=np.int32),
        np.zeros(3, dtype=np.uint64),
        np.zeros(3, dtype=np.uint16),
        [0, 1, 2],
        5,
    ],
    ids=["float64", "int32", "uint64", "uint16", "list", "int"],
)
def test_decode_fails_if_dtype_wrong_k32(bad: object) -> None:
    with pytest.raises(TypeError, match="uint32"):
        FixedPoint(32, 16).decode(bad)  # type: ignore[arg-type]


def test_decode_fails_if_dtype_wrong_k64() -> None:
    with pytest.raises(TypeError, match="uint64"):
        FixedPoint(64, 16).decode(np.zeros(3, dtype=np.uint32))


# ---------------------------------------------------------------- clip bound


@pytest.mark.parametrize(("k", "f"), PARAMS, ids=map(_fp_ids, PARAMS))
@pytest.mark.parametrize("n", PARTY_COUNTS)
def test_clip_bound_is_paper_bound_rounded_down_to_grid(k: int, f: int, n: int) -> None:
    fp = FixedPoint(k, f)
    r_u = fp.clip_bound(n)
    paper = ((1 << (k - 1)) - 1) / (n * 2.0**f)
    assert 0 < r_u <= paper
    # At most one grid step below (plus float64 rounding of large k = 64 bounds).
    assert paper - r_u <= 2.0**-f + paper * 2.0**-52
    # R_u 2^f is an integer and n of it never exceed 2^(k-1) - 1.
    scaled = math.ldexp(r_u, f)
    assert scaled == int(scaled)
    assert n * int(scaled) <= (1 << (k - 1)) - 1


@pytest.mark.parametrize("n", [0, -1, 2.0, True, None])
def test_clip_bound_fails_if_n_parties_not_positive_integer(n: object) -> None:
    with pytest.raises(InvalidParameters, match="n_parties"):
        FixedPoint().clip_bound(n)  # type: ignore[arg-type]


def test_encode_clipped_fails_if_n_parties_invalid() -> None:
    with pytest.raises(InvalidParameters, match="n_parties"):
        FixedPoint().encode_clipped([1.0], 0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_encode_clipped_fails_if_value_not_finite(bad: float) -> None:
    with pytest.raises(InvalidParameters, match="finite"):
        FixedPoint().encode_clipped([bad], 4)


@pytest.mark.parametrize(("k", "f"), PARAMS, ids=map(_fp_ids, PARAMS))
@pytest.mark.parametrize("n", PARTY_COUNTS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_sum_of_n_values_at_bound_does_not_wrap(k: int, f: int, n: int, sign: float) -> None:
    fp = FixedPoint(k, f)
    r_u = fp.clip_bound(n)
    # Values exactly at the bound and far beyond it (clipped to it) alike.
    for x in (sign * r_u, sign * 1e30):
        enc = fp.encode_clipped(np.full((n, 2), x), n)
        total = _ring_sum(fp, enc)
        want = int(sign) * n * int(math.ldexp(r_u, f))  # exact Python int
        assert _signed(fp, total) == [want] * 2
        decoded = fp.decode(total)
        assert np.all(np.sign(decoded) == sign)
        assert np.allclose(decoded, sign * n * r_u, rtol=1e-12, atol=0)


@pytest.mark.parametrize(("k", "f"), PARAMS, ids=map(_fp_ids, PARAMS))
@pytest.mark.parametrize("n", [2, 3, 7, 100, 65_537])
def test_sum_of_n_values_just_beyond_bound_would_wrap(k: int, f: int, n: int) -> None:
    """The bound is tight: one grid step more per party, unclipped, wraps the sum."""
    fp = FixedPoint(k, f)
    scaled = math.ldexp(fp.clip_bound(n), f)
    step = max(1.0, float(np.spacing(scaled)))  # next representable grid point
    over = math.ldexp(scaled + step, -f)
    enc = fp.encode(np.full(n, over))  # encodes fine for one party ...
    total = _ring_sum(fp, enc)
    assert fp.decode(total) < 0  # ... but n of them wrap to a negative sum
    # Clipping prevents it.
    assert fp.decode(_ring_sum(fp, fp.encode_clipped(np.full(n, over), n))) > 0


def test_single_party_just_beyond_bound_cannot_be_encoded() -> None:
    for k, f in PARAMS:
        fp = FixedPoint(k, f)
        scaled = math.ldexp(fp.clip_bound(1), f)
        over = math.ldexp(scaled + max(1.0, float(np.spacing(scaled))), -f)
        with pytest.raises(InvalidParameters):
            fp.encode([over])


@given(
    st.sampled_from(PARAMS),
    st.lists(st.floats(-1e40, 1e40, allow_nan=False, allow_infinity=False), min_size=1, max_size=40),
)
def test_sum_of_clipped_encodings_equals_exact_integer_sum(p: tuple[int, int], xs: list[float]) -> None:
    fp = FixedPoint(*p)
    n = len(xs)
    enc = fp.encode_clipped(np.array(xs), n)
    r_u = fp.clip_bound(n)
    clipped_ints = [int(np.rint(math.ldexp(min(max(x, -r_u), r_u), fp.frac_bits))) for x in xs]
    assert _signed(fp, enc) == clipped_ints
    assert _signed(fp, _ring_sum(fp, enc).reshape(1)) == [sum(clipped_ints)]


@pytest.mark.parametrize(("k", "f"), PARAMS, ids=map(_fp_ids, PARAMS))
def test_encode_decode_and_clip_equal_the_ldexp_formulas_bit_for_bit(k: int, f: int) -> None:
    """The encoder scales by a power of two with a multiplication (exact, as ``ldexp``) and
    ``encode_clipped`` skips the range check its clip makes unnecessary: the ring elements are
    those of ``rint(ldexp(x, f))`` in two's complement, and decode those of
    ``ldexp(signed, -f)``, for values across the whole range, ties, subnormals and signed zeros."""
    fp = FixedPoint(k, f)
    rng = np.random.default_rng(k + f)
    top = fp.clip_bound(1)
    res = 2.0**-f
    x = np.concatenate([np.clip(rng.normal(0, 1, 5000), -top, top), rng.uniform(-top, top, 5000),
                        rng.normal(0, 1e-9, 50), [0.0, -0.0, 5e-324, -5e-324, res / 2, -res / 2, 1.5 * res,
                                                  -2.5 * res, top, -top]])

    def ring(v: np.ndarray) -> np.ndarray:
        return np.rint(np.ldexp(v, f)).astype(np.int64).view(np.uint64).astype(fp.dtype)

    assert np.array_equal(fp.encode(x), ring(x))
    for n in (1, 7, 1000):
        wide = x * 1e9
        assert np.array_equal(fp.encode_clipped(wide, n), ring(np.clip(wide, -fp.clip_bound(n), fp.clip_bound(n))))
    u = rng.integers(0, 2**63, 5000, dtype=np.uint64).astype(fp.dtype) * np.array(3, dtype=fp.dtype)
    want = np.ldexp(u.view(np.int64 if k == 64 else np.int32).astype(np.float64), -f)
    assert np.array_equal(fp.decode(u), want) and np.array_equal(np.signbit(fp.decode(u)), np.signbit(want))
    assert fp.encode(1.25).shape == () and fp.encode_clipped(3.0, 2).shape == () and fp.decode(fp.encode(1.0)) == 1.0
