"""The CDT sampler of the truncated discrete Gaussian (secemb.privacy.cdt): its table against
the pmf computed independently with mpmath, sampled moments and tails against sigma, the tie
path of the 128-bit comparison, determinism under a seeded DRBG, and the switch to the
rejection sampler above the table cap."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.privacy import cdt
from secemb.privacy.noise import discrete_gaussian
from secemb.randomness import CtrDrbg


def _exact_magnitude_pmf(sigma: float, bound: int) -> list:
    """P(|Y| = k), k = 0..bound, of N_Z(0, sigma^2) truncated to |Y| <= bound, at 60 digits."""
    with mpmath.workdps(60):
        w = [mpmath.mpf(1)] + [2 * mpmath.exp(-mpmath.mpf(k) ** 2 / (2 * mpmath.mpf(sigma) ** 2))
                               for k in range(1, bound + 1)]
        total = mpmath.fsum(w)
        return [x / total for x in w]


def _table_pmf(table: cdt.CdtTable) -> list[int]:
    """The magnitude pmf the table realizes, in units of 2^-128."""
    cum = [int(h) << 64 | int(lo) for h, lo in zip(table.hi.tolist(), table.lo.tolist(), strict=True)]
    edges = [0, *cum, 1 << 128]
    return [b - a for a, b in zip(edges, edges[1:], strict=False)]


@pytest.mark.parametrize(("sigma", "bound"), [(0.7, 9), (3.7, 44), (250.0, 3000)])
def test_table_pmf_is_within_2_to_minus_126_of_the_exact_pmf(sigma, bound):
    exact = _exact_magnitude_pmf(sigma, bound)
    got = _table_pmf(cdt.cdt_table(sigma, bound))
    assert len(got) == bound + 1
    with mpmath.workdps(60):
        worst = max(abs(mpmath.mpf(g) / 2**128 - e) for g, e in zip(got, exact, strict=True))
        distance = mpmath.fsum(abs(mpmath.mpf(g) / 2**128 - e) for g, e in zip(got, exact, strict=True)) / 2
    assert worst <= mpmath.mpf(2) ** -126
    assert distance <= (bound + 1) * mpmath.mpf(2) ** -127  # the bound docs/security.md states


def test_sampled_frequencies_match_the_exact_pmf():
    sigma, bound, n = 2.3, 27, 300_000
    y = discrete_gaussian(sigma, n, tail=bound, _rng=CtrDrbg(11))
    exact = [float(p) for p in _exact_magnitude_pmf(sigma, bound)]
    counts = np.bincount(np.abs(y), minlength=bound + 1)
    for k in range(8):
        se = math.sqrt(exact[k] * (1 - exact[k]) / n)
        assert abs(counts[k] / n - exact[k]) <= 5 * se, (k, counts[k] / n, exact[k])
    pos, neg = int(np.sum(y > 0)), int(np.sum(y < 0))
    assert abs(pos - neg) <= 5 * math.sqrt(pos + neg)  # the sign is a fair bit


@pytest.mark.parametrize("sigma", [40_000.0, 120_000.0])  # the CDT, and the rejection sampler above the cap
def test_moments_and_tails_match_sigma(sigma):
    n = 400_000
    y = discrete_gaussian(sigma, n, _rng=CtrDrbg(12)).astype(np.float64)
    assert abs(y.mean()) < 5 * sigma / math.sqrt(n)
    assert abs(y.var() / sigma**2 - 1) < 5 * math.sqrt(2 / n)
    assert abs(np.mean(y**4) / sigma**4 - 3) < 0.05  # Gaussian kurtosis
    for k in (1, 2, 3, 4):  # P(|Y| >= k sigma) against the continuous Gaussian's erfc (sigma >> 1)
        want = math.erfc(k / math.sqrt(2))
        assert abs(float(np.mean(np.abs(y) >= k * sigma)) - want) <= 5 * math.sqrt(want / n) + 1e-5, k
    assert float(np.abs(y).max()) <= 12 * sigma


def test_same_seed_same_noise():
    a = discrete_gaussian(5000.0, 10_000, _rng=CtrDrbg(7))
    b = discrete_gaussian(5000.0, 10_000, _rng=CtrDrbg(7))
    c = discrete_gaussian(5000.0, 10_000, _rng=CtrDrbg(8))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def _stream_rng(stream: list[bytes]):
    """An rng returning ``stream``'s items in order, each of exactly the length asked for."""
    def rng(n: int) -> bytes:
        out = stream.pop(0)
        assert len(out) == n
        return out
    return rng


def _magnitudes_by_128_bit_comparison(table: cdt.CdtTable, us: list[int]) -> list[int]:
    """``#{k : T_k <= U}`` for each 128-bit ``U``, written out on Python integers."""
    full = [int(h) << 64 | int(x) for h, x in zip(table.hi.tolist(), table.lo.tolist(), strict=True)]
    return [sum(t <= u for t in full) for u in us]


def test_a_top_bits_tie_is_decided_by_the_low_96_bits():
    table = cdt.cdt_table(1.0, 5)
    full = [int(h) << 64 | int(x) for h, x in zip(table.hi.tolist(), table.lo.tolist(), strict=True)]
    k = 1  # U's top 32 bits equal to T_1's: the low 96 bits decide between magnitude 1 and 2
    t1_top, t1_low = full[k] >> 96, full[k] & ((1 << 96) - 1)
    prefixes = [t1_top, t1_top, t1_top - 1, (1 << 32) - 1]
    lows = [t1_low, t1_low - 1]  # U = T_1 (counts it: magnitude 2), U = T_1 - 1 (magnitude 1)
    signs = 0b0110  # samples 1 and 2 negative (bit i of the byte, little-endian)
    stream = [np.array(prefixes, "<u4").tobytes(), bytes([signs]), b"".join(x.to_bytes(12, "little") for x in lows)]
    y = cdt.sample(table, 4, _stream_rng(stream))
    us = [prefixes[0] << 96 | lows[0], prefixes[1] << 96 | lows[1], prefixes[2] << 96, (1 << 128) - 1]
    want = _magnitudes_by_128_bit_comparison(table, us)
    assert y.tolist() == [want[0], -want[1], -want[2], want[3]]
    assert want[:2] == [2, 1] and want[3] == 5 and not stream


def test_a_run_of_equal_top_bits_counts_every_entry_below_u():
    """Near the top of a wide table many T_k share their top 32 bits: every one <= U counts."""
    table = cdt.cdt_table(40.0, 480)
    full = [int(h) << 64 | int(x) for h, x in zip(table.hi.tolist(), table.lo.tolist(), strict=True)]
    tops = [t >> 96 for t in full]
    x = max(set(tops), key=tops.count)  # the prefix shared by the most entries
    run = [t for t in full if t >> 96 == x]
    assert len(run) >= 3
    lows = [run[1] & ((1 << 96) - 1), (run[-1] & ((1 << 96) - 1)) - 1, 0, (1 << 96) - 1]
    stream = [np.array([x] * 4, "<u4").tobytes(), bytes([0]), b"".join(v.to_bytes(12, "little") for v in lows)]
    y = cdt.sample(table, 4, _stream_rng(stream))
    assert y.tolist() == _magnitudes_by_128_bit_comparison(table, [x << 96 | v for v in lows]) and not stream


def test_table_cap_and_bad_parameters():
    with pytest.raises(InvalidParameters):
        cdt.cdt_table(1e6, cdt.MAX_ENTRIES)
    with pytest.raises(InvalidParameters):
        cdt.cdt_table(0.0, 10)


@pytest.mark.parametrize(("sigma", "bound"), [(3.0, 40), (5000.0, 65_000), (44_487.0, 533_844)])
def test_the_compiled_inversion_equals_numpys_searchsorted(sigma, bound):
    """The guide-and-binary-search kernel counts ``#{k : top[k] < p}`` as numpy's
    ``searchsorted`` (the reference) does, flags ``top[count] == p`` and applies the sign bit:
    random words, the table's own top words and their neighbours, and the guide's bucket edges."""
    table = cdt.cdt_table(sigma, bound)
    gen = np.random.default_rng(int(sigma))
    edges = (np.arange(1 << 20, dtype=np.uint64) << np.uint64(12)).astype(np.uint32)
    p = np.concatenate([gen.integers(0, 2**32, 20_000, dtype=np.uint32, endpoint=False), table.top,
                        table.top + np.uint32(1), table.top - np.uint32(1), edges, edges - np.uint32(1)])
    signs = gen.integers(0, 256, -(-p.size // 8), dtype=np.uint8)
    got, tie = np.empty(p.size, np.int64), np.empty(p.size, np.bool_)
    cdt._invert(p, signs, table.top, table.guide, np.uint32(12), got, tie)
    want = np.searchsorted(table.top, p, side="left")
    negative = np.unpackbits(signs, count=p.size, bitorder="little").astype(bool)
    assert np.array_equal(got, np.where(negative, -want, want))
    assert np.array_equal(tie, (table.top[np.minimum(want, bound - 1)] == p) & (want < bound))
