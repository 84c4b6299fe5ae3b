"""Tests for secemb.sharing: two-party additive secret sharing in Z_{2^k}."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from secemb.errors import InvalidParameters
from secemb.randomness import CtrDrbg, random_words
from secemb.sharing import reconstruct, share

RING_DTYPES = [np.dtype(np.uint32), np.dtype(np.uint64)]


def _ring_arrays() -> st.SearchStrategy[np.ndarray]:
    return st.sampled_from(RING_DTYPES).flatmap(
        lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, max_side=6))
    )


# ---------------------------------------------------------------- correctness


@given(_ring_arrays())
def test_shares_reconstruct_to_secret(x: np.ndarray) -> None:
    s0, s1 = share(x)
    assert s0.shape == s1.shape == x.shape
    assert s0.dtype == s1.dtype == x.dtype
    assert isinstance(s1, np.ndarray)
    assert np.array_equal(reconstruct(s0, s1), x)


@given(_ring_arrays(), st.data())
def test_shares_add_to_shares_of_sum(x: np.ndarray, data: st.DataObject) -> None:
    y = data.draw(hnp.arrays(x.dtype, x.shape))
    x0, x1 = share(x)
    y0, y1 = share(y)
    assert np.array_equal(reconstruct(x0 + y0, x1 + y1), x + y)


def test_share_of_zero_dim_array_reconstructs() -> None:
    x = np.array(2**32 - 7, dtype=np.uint32)
    s0, s1 = share(x)
    assert s0.shape == s1.shape == ()
    assert isinstance(s1, np.ndarray)
    assert reconstruct(s0, s1) == x


def test_share_and_reconstruct_accept_numpy_scalars() -> None:
    s0, s1 = share(np.uint64(2**64 - 1))
    assert s0.shape == ()
    assert reconstruct(s0[()], s1[()]) == np.uint64(2**64 - 1)


def test_share_of_empty_array_is_empty() -> None:
    s0, s1 = share(np.zeros((0, 4), dtype=np.uint64))
    assert s0.shape == s1.shape == (0, 4)


def test_share_of_non_contiguous_array_reconstructs() -> None:
    x = np.arange(40, dtype=np.uint64).reshape(5, 8)[:, ::3]
    s0, s1 = share(x)
    assert np.array_equal(reconstruct(s0, s1), x)


def test_share_does_not_modify_input() -> None:
    x = np.arange(10, dtype=np.uint32)
    before = x.copy()
    share(x)
    assert np.array_equal(x, before)


# ---------------------------------------------------------------- randomness


def test_share_draws_first_share_from_injected_rng() -> None:
    x = np.arange(12, dtype=np.uint32).reshape(3, 4)
    s0, s1 = share(x, _rng=CtrDrbg(7))
    assert np.array_equal(s0, random_words(CtrDrbg(7), (3, 4), np.uint32))
    assert np.array_equal(s1, x - s0)


@pytest.mark.parametrize("dtype", RING_DTYPES)
def test_seeded_ctr_drbg_gives_reproducible_shares(dtype: np.dtype) -> None:
    x = np.arange(100, dtype=dtype)
    a = share(x, _rng=CtrDrbg(b"seed"))
    b = share(x, _rng=CtrDrbg(b"seed"))
    c = share(x, _rng=CtrDrbg(b"other seed"))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


def test_shares_are_fresh_by_default() -> None:
    x = np.zeros(64, dtype=np.uint64)
    assert not np.array_equal(share(x)[0], share(x)[0])


def test_share_never_uses_numpy_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("numpy's RNG must not be used for secret shares")

    for name in ("default_rng", "randint", "random", "bytes", "integers"):
        if hasattr(np.random, name):
            monkeypatch.setattr(np.random, name, forbidden)
    s0, s1 = share(np.ones(8, dtype=np.uint32))
    assert np.array_equal(reconstruct(s0, s1), np.ones(8, dtype=np.uint32))


def _unit_floats(u: np.ndarray) -> np.ndarray:
    """Map ring elements to [0, 1) by their top 32 bits."""
    if u.dtype == np.uint64:
        u = (u >> np.uint64(32)).astype(np.uint32)
    return u.astype(np.float64) / 2.0**32


@pytest.mark.parametrize("dtype", RING_DTYPES)
@pytest.mark.parametrize("secret", [0, 1, "max", "half"])
def test_each_share_alone_looks_uniform(dtype: np.dtype, secret: object) -> None:
    bits = dtype.itemsize * 8
    value = {0: 0, 1: 1, "max": (1 << bits) - 1, "half": 1 << (bits - 1)}[secret]  # type: ignore[index]
    n = 200_000
    x = np.full(n, value, dtype=dtype)
    for s in share(x):
        # Mean of uniform [0, 1) is 1/2 with standard error sqrt(1/12 / n) ~ 6.5e-4.
        assert abs(_unit_floats(s).mean() - 0.5) < 6 * np.sqrt(1 / 12 / n)
        # Each bit is set about half the time (standard error 1/(2 sqrt n) ~ 1.1e-3).
        for b in range(bits):
            freq = ((s >> dtype.type(b)) & dtype.type(1)).mean()
            assert abs(freq - 0.5) < 6 * 0.5 / np.sqrt(n), f"bit {b}"
        # Low byte histogram is flat (chi-squared, 255 dof; mean 255, sd ~ 22.6).
        counts = np.bincount((s & dtype.type(0xFF)).astype(np.int64), minlength=256)
        chi2 = float(((counts - n / 256) ** 2 / (n / 256)).sum())
        assert chi2 < 255 + 8 * 22.6


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(3, dtype=np.int64),
        np.zeros(3, dtype=np.int32),
        np.zeros(3, dtype=np.float64),
        np.zeros(3, dtype=np.uint16),
        np.zeros(3, dtype=">u4"),
        [1, 2, 3],
        5,
    ],
    ids=["int64", "int32", "float64", "uint16", "big-endian-uint32", "list", "int"],
)
def test_share_fails_if_not_ring_array(bad: object) -> None:
    with pytest.raises(TypeError, match="uint32 or uint64"):
        share(bad)  # type: ignore[arg-type]


def test_reconstruct_fails_if_shapes_differ() -> None:
    with pytest.raises(InvalidParameters, match="shape"):
        reconstruct(np.zeros(3, dtype=np.uint32), np.zeros(4, dtype=np.uint32))
    with pytest.raises(InvalidParameters, match="shape"):
        reconstruct(np.zeros((2, 3), dtype=np.uint32), np.zeros((3, 2), dtype=np.uint32))


def test_reconstruct_fails_if_dtypes_differ() -> None:
    with pytest.raises(InvalidParameters, match="dtype"):
        reconstruct(np.zeros(3, dtype=np.uint32), np.zeros(3, dtype=np.uint64))


def test_reconstruct_fails_if_share_not_ring_array() -> None:
    with pytest.raises(TypeError, match="s1"):
        reconstruct(np.zeros(3, dtype=np.uint32), np.zeros(3, dtype=np.float64))
    with pytest.raises(TypeError, match="s0"):
        reconstruct([0, 0, 0], np.zeros(3, dtype=np.uint32))  # type: ignore[arg-type]
