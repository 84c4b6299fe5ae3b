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

``U`` is drawn lazily, without changing its distribution: first its top 32 bits ``p`` for
every sample, which decide the magnitude unless some ``T_k`` has the same top 32 bits; then, for
those samples only (probability below ``K * 2^-32`` a sample: 5e-5 measured at sigma = 44,487,
``K`` = 533,844), ``U``'s other 96 bits, fresh and uniform.  The inversion of ``p`` is one lookup in a
2^20-entry guide on its top 20 bits, which holds the answer for every bucket containing no
``T_k`` (most of the mass), else a binary search of the bucket's few entries -- a numba kernel
that also applies the sign.  (The first version drew the top 64 bits: twice the OS randomness,
and a guide of 2^16 buckets that sent nearly every sample into a binary search; docs/security.md
has the measured cost of both.)
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

#: the largest table built: ``K + 1`` magnitudes, 20 bytes each (20 MiB, and the 4 MiB guide); larger ``K`` use the
#: rejection sampler (:func:`secemb.privacy.noise.discrete_gaussian`)
MAX_ENTRIES = 1 << 20
_FRAC = 256  # fractional bits of the table's integer arithmetic
_PREFIX_BITS = 32  # the top bits of U drawn for every sample
_GUIDE_BITS = 20


@dataclass(frozen=True)
class CdtTable:
    """The CDF of the magnitude, ``T_k`` for ``k < K`` as uint64 ``hi`` / ``lo`` halves; ``top``
    its top 32 bits (uint32, nondecreasing) and ``guide[b] = #{k : top[k] < b * 2^12}``
    (int32, ``b <= 2^20``; ``guide[2^20] = K``)."""

    sigma: float
    bound: int
    hi: np.ndarray
    lo: np.ndarray
    top: np.ndarray
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
    top = (hi >> np.uint64(64 - _PREFIX_BITS)).astype(np.uint32)
    starts = (np.arange(1 << _GUIDE_BITS, dtype=np.uint64) << np.uint64(_PREFIX_BITS - _GUIDE_BITS)).astype(np.uint32)
    guide = np.append(np.searchsorted(top, starts, side="left"), bound).astype(np.int32)
    return CdtTable(float(sigma), int(bound), hi, lo, top, guide)


@njit(cache=True, nogil=True)
def _invert(p, signs, top, guide, shift, out, tie):  # noqa: ANN001, ANN201
    """``c = #{k : top[k] < p[i]}`` (the guide's bucket of ``p[i]``, a binary search only when
    the bucket holds entries), ``out[i] = -c`` if bit ``i`` of ``signs`` (little-endian in
    each byte) is set else ``c``, and ``tie[i]`` whether ``top[c] == p[i]``."""
    for i in range(p.shape[0]):
        x = p[i]
        b = x >> shift
        c, end = guide[b], guide[b + 1]
        t = False
        if c < end:
            hi_i = end
            while c < hi_i:
                mid = (c + hi_i) >> 1
                if top[mid] < x:
                    c = mid + 1
                else:
                    hi_i = mid
            t = c < end and top[c] == x
        tie[i] = t
        out[i] = -c if (signs[i >> 3] >> (i & 7)) & 1 else c


def sample(table: CdtTable, n: int, rng: RandomBytes) -> np.ndarray:
    """``n`` draws of the table's truncated discrete Gaussian, int64.

    Draws ``4 n`` bytes (the top 32 bits of each ``U``), then ``ceil(n / 8)`` (the signs), then
    12 bytes (``U``'s low 96 bits, little-endian) for each sample whose top bits equal some
    ``T_k``'s, in this order: the same ``rng`` stream gives the same noise."""
    p = random_words(rng, (n,), np.uint32)
    signs = random_words(rng, (-(-n // 8),), np.uint8)
    out = np.empty(n, dtype=np.int64)
    tie = np.empty(n, dtype=np.bool_)
    _invert(p, signs, table.top, table.guide, np.uint32(_PREFIX_BITS - _GUIDE_BITS), out, tie)
    ties = np.flatnonzero(tie)
    if ties.size:
        low_bits = 128 - _PREFIX_BITS
        rest = rng(12 * ties.size)
        for j, i in enumerate(ties.tolist()):
            r = int.from_bytes(rest[12 * j : 12 * j + 12], "little")
            k, x = abs(int(out[i])), int(p[i])  # T_k.. share U's top bits: count those <= U
            while k < table.bound and int(table.top[k]) == x and (
                    ((int(table.hi[k]) << 64 | int(table.lo[k])) & ((1 << low_bits) - 1)) <= r):
                k += 1
            out[i] = -k if (signs[i >> 3] >> (i & 7)) & 1 else k
    return out
