"""Cumulative-distribution-table (CDT) sampling of the truncated discrete Gaussian (hazmat).

The magnitude ``|Y|`` of ``Y ~ N_Z(0, sigma^2)`` truncated to ``|Y| <= K`` has the pmf
``q_0 = 1/S``, ``q_k = 2 exp(-k^2 / (2 sigma^2)) / S`` (``1 <= k <= K``, ``S`` the sum).
:func:`cdt_table` holds its CDF as 128-bit fixed point, ``T_k = round(2^128 * (q_0 + ... + q_k))``
(``k < K``, capped at ``2^128 - 1``), computed in exact integer arithmetic with 256 fractional
bits; :func:`sample` inverts it: a uniform 128-bit word ``U`` gives the magnitude
``#{k < K : T_k <= U}``, and one more uniform bit the sign.  The only departures from the
exact truncated discrete Gaussian are the rounding of each ``T_k`` (under ``2^-128``) and of
the integer arithmetic (under ``2^-129`` for ``K < 2^20``), so one sample's statistical
distance from it is at most ``(K + 1) * 2^-126`` -- below ``2^-106`` for every table this
module builds (:data:`MAX_ENTRIES`; docs/security.md turns it into the mechanism's delta).

Only the high 64 bits of ``U`` are drawn up front; the low 64 are drawn (fresh, uniform) for
the samples whose high word equals some ``T_k``'s, the only ones they can decide (probability
below ``K * 2^-64`` a sample).  The inversion of the high words is a binary search inside the
bucket of a 2^16-entry guide on the word's top 16 bits (a numba kernel).
"""

from __future__ import annotations

import decimal
import functools
import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from secemb.errors import InvalidParameters
from secemb.randomness import RandomBytes, random_words

__all__ = ["MAX_ENTRIES", "CdtTable", "cdt_table", "sample"]

#: the largest table built: ``K + 1`` magnitudes, 16 bytes each (16 MiB); larger ``K`` use the
#: rejection sampler (:func:`secemb.privacy.noise.discrete_gaussian`)
MAX_ENTRIES = 1 << 20
_FRAC = 256  # fractional bits of the table's integer arithmetic
_GUIDE_BITS = 16


@dataclass(frozen=True)
class CdtTable:
    """The CDF of the magnitude, ``T_k`` for ``k < K`` as uint64 ``hi`` / ``lo`` halves, and
    ``guide[b] = #{k : hi[k] < b * 2^48}`` (``b <= 2^16``; ``guide[2^16] = K``)."""

    sigma: float
    bound: int
    hi: np.ndarray
    lo: np.ndarray
    guide: np.ndarray


def _fixed_exp(num: int, sigma: float) -> int:
    """``round(2^_FRAC * exp(-num / (2 sigma^2)))``, evaluated with 100 significant digits
    (``sigma`` as a float is a dyadic rational, so its square is exact there)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 100
        x = -decimal.Decimal(num) / (2 * decimal.Decimal(sigma) ** 2)
        return int((x.exp() * (decimal.Decimal(2) ** _FRAC)).to_integral_value())


@functools.lru_cache(maxsize=4)
def cdt_table(sigma: float, bound: int) -> CdtTable:
    """The table of ``N_Z(0, sigma^2)`` truncated to ``|y| <= bound`` (cached for the last four).

    ``exp(-k^2 / (2 sigma^2))`` is built by the recurrence ``e_k = e_{k-1} g_{k-1}``,
    ``g_k = g_{k-1} exp(-1/sigma^2)`` in integers with 256 fractional bits: every step truncates
    by under one unit, so ``e_k`` is off by under ``(k + 1)^2 * 2^-256`` and the CDF by under
    ``2^-129`` for ``bound < 2^20``.

    Raises
    ------
    InvalidParameters: ``bound + 1 > MAX_ENTRIES``, ``bound < 0`` or ``sigma <= 0``.
    """
    if not (sigma > 0 and math.isfinite(sigma)) or not 0 <= bound < MAX_ENTRIES:
        raise InvalidParameters(f"no CDT for sigma={sigma!r}, bound={bound!r} (at most {MAX_ENTRIES - 1})")
    one = 1 << _FRAC
    e, g, g_step = one, _fixed_exp(1, sigma), _fixed_exp(2, sigma)
    cum = [one]  # q_0 * S, then the running sums
    for _ in range(bound):
        e = (e * g) >> _FRAC
        g = (g * g_step) >> _FRAC
        cum.append(cum[-1] + 2 * e)
    total, cap = cum[-1], (1 << 128) - 1
    words = b"".join(min(((c << 128) + total // 2) // total, cap).to_bytes(16, "little") for c in cum[:-1])
    pairs = np.frombuffer(words, dtype="<u8").reshape(-1, 2)
    hi, lo = np.ascontiguousarray(pairs[:, 1]), np.ascontiguousarray(pairs[:, 0])
    starts = np.arange(1 << _GUIDE_BITS, dtype=np.uint64) << np.uint64(64 - _GUIDE_BITS)
    guide = np.append(np.searchsorted(hi, starts, side="left"), bound).astype(np.int64)
    return CdtTable(float(sigma), int(bound), hi, lo, guide)


@njit(cache=True, nogil=True)
def _count_below(u, hi, guide, shift, out):  # noqa: ANN001, ANN201
    """``out[i] = #{k : hi[k] < u[i]}`` by binary search inside ``u[i]``'s guide bucket."""
    for i in range(u.shape[0]):
        x = u[i]
        b = x >> shift
        lo_i, hi_i = guide[b], guide[b + 1]
        while lo_i < hi_i:
            mid = (lo_i + hi_i) >> 1
            if hi[mid] < x:
                lo_i = mid + 1
            else:
                hi_i = mid
        out[i] = lo_i


def sample(table: CdtTable, n: int, rng: RandomBytes) -> np.ndarray:
    """``n`` draws of the table's truncated discrete Gaussian, int64.

    Draws ``8 n`` bytes (the high words), then ``ceil(n / 8)`` (the signs), then 8 bytes for
    each sample whose high word ties with a table word, in this order: the same ``rng`` stream
    gives the same noise."""
    u = random_words(rng, (n,), np.uint64)
    signs = np.unpackbits(random_words(rng, (-(-n // 8),), np.uint8), count=n).astype(bool)
    mag = np.empty(n, dtype=np.int64)
    _count_below(u, table.hi, table.guide, np.uint64(64 - _GUIDE_BITS), mag)
    if table.bound:
        ties = np.flatnonzero(table.hi[np.minimum(mag, table.bound - 1)] == u)
        for i, low in zip(ties.tolist(), random_words(rng, (ties.size,), np.uint64).tolist(), strict=True):
            k = int(mag[i])  # T_k's high word equals u[i]: count the T_k <= U among them
            while k < table.bound and table.hi[k] == u[i] and int(table.lo[k]) <= low:
                k += 1
            mag[i] = k
    return np.where(signs, -mag, mag)
