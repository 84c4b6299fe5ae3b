"""Discrete Gaussian noise in the fixed-point ring (hazmat layer).

:func:`discrete_gaussian` samples the discrete Gaussian ``N_Z(0, sigma^2)`` (probability of
``y`` proportional to ``exp(-y^2 / (2 sigma^2))``), truncated (below), from a
:data:`~secemb.randomness.RandomBytes` source (the OS CSPRNG by default; a seeded
:class:`~secemb.randomness.CtrDrbg` only in tests), by one of two samplers:

* while the truncated support has at most :data:`secemb.privacy.cdt.MAX_ENTRIES` magnitudes
  (``tail < 2^20``: ``sigma`` up to about 87,000 ring units at the default tail), inversion of
  its CDF tabulated in 128-bit fixed point (:mod:`secemb.privacy.cdt`): within statistical
  distance ``2^-106`` a sample of the exact truncated distribution, and several times faster
  than the rejection sampler (``secemb bench noise``; docs/security.md has the rates);
* above that (its table would exceed 20 MiB), the rejection sampler of Canonne, Kamath and
  Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020, Algorithm 3): a
  discrete Laplace proposal of scale ``t = floor(sigma) + 1``, accepted with probability
  ``exp(-(|y| - sigma^2/t)^2 / (2 sigma^2))``, vectorized over numpy arrays with 53-bit
  uniforms, so the probabilities it realizes are those of the exact algorithm up to float64
  rounding.

Magnitudes beyond ``tail`` are never drawn (outside the table, or rejected), so the noise is bounded and
the ring sum of the users' clipped values plus both servers' noise provably never wraps
(:class:`ClipSpec` reserves the room).  The truncation moves at most the mass beyond
``tail = TAIL_SIGMAS * sigma`` (below ``2 exp(-TAIL_SIGMAS^2 / 2)`` = 1e-31 per coordinate),
which adds that much per coordinate and release to the mechanism's delta (docs/security.md).

:class:`RingNoise` is what a server node holds: it adds fresh noise to its own aggregate share
(:meth:`RingNoise.draw`, added to the ring words its aggregate share message carries with
:func:`add_to_share`); both servers do, and each reconstructs the same noised sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from secemb.errors import InvalidParameters, check_float, check_int
from secemb.privacy import cdt
from secemb.randomness import RandomBytes, random_words, system_rng
from secemb.ring import FixedPoint

__all__ = ["TAIL_SIGMAS", "ClipSpec", "RingNoise", "add_to_share", "clip_spec", "discrete_gaussian", "to_ring"]

#: noise magnitudes beyond ``TAIL_SIGMAS * sigma`` are resampled (see the module docstring)
TAIL_SIGMAS = 12.0


def _uniforms(rng: RandomBytes, n: int) -> np.ndarray:
    """``n`` uniforms in (0, 1] with 53 random bits each."""
    words = random_words(rng, (n,), np.uint64) >> np.uint64(11)
    return (words.astype(np.float64) + 1.0) * 2.0**-53


def discrete_gaussian(sigma: float, n: int, *, tail: float | None = None,
                      _rng: RandomBytes | None = None) -> np.ndarray:
    """``n`` independent draws of ``N_Z(0, sigma^2)`` truncated to ``|y| <= tail``, int64
    (by the CDT while ``floor(tail) < cdt.MAX_ENTRIES``, else by rejection).

    Parameters
    ----------
    sigma: the scale, ``> 0`` and at most ``2^50`` (ring units).
    n: how many, ``>= 0``.
    tail: the largest magnitude kept (default ``TAIL_SIGMAS * sigma``); at least ``sigma``.
    _rng: random bytes (tests only; the OS CSPRNG by default).

    Raises
    ------
    InvalidParameters: ``sigma``, ``n`` or ``tail`` out of range.
    """
    sigma = check_float("sigma", sigma, above=0, high=2.0**50)
    n = check_int("n", n, low=0)
    bound = TAIL_SIGMAS * sigma if tail is None else check_float(f"tail (sigma={sigma})", tail, low=sigma)
    rng = _rng or system_rng
    if math.floor(bound) < cdt.MAX_ENTRIES:
        return cdt.sample(cdt.cdt_table(sigma, math.floor(bound)), n, rng)
    return _rejection(sigma, n, bound, rng)


def _rejection(sigma: float, n: int, bound: float, rng: RandomBytes) -> np.ndarray:
    """CKS20's Algorithm 3, truncated to ``|y| <= bound`` (see the module docstring)."""
    t = math.floor(sigma) + 1
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        want = int(1.6 * (n - filled)) + 16  # acceptance is above 0.6 for every sigma
        u = _uniforms(rng, 3 * want).reshape(3, want)
        mag = np.floor(-t * np.log(u[0]))  # geometric: P(mag = k) = (1 - e^{-1/t}) e^{-k/t}
        neg = u[1] <= 0.5
        keep = ~(neg & (mag == 0))  # the discrete Laplace counts 0 once
        keep &= u[2] <= np.exp(-((mag - sigma**2 / t) ** 2) / (2 * sigma**2))
        keep &= mag <= bound
        y = np.where(neg, -mag, mag)[keep].astype(np.int64)
        take = min(y.size, n - filled)
        out[filled : filled + take] = y[:take]
        filled += take
    return out


def to_ring(ring_bits: int, values: np.ndarray) -> np.ndarray:
    """int64 ``values`` as elements of Z_{2^ring_bits} (two's complement; ring_bits 32 or 64)."""
    as_u64 = np.asarray(values, dtype=np.int64).view(np.uint64)
    return as_u64 if ring_bits == 64 else as_u64.astype(np.uint32)


def add_to_share(share: bytes, noise: np.ndarray) -> bytes:
    """``share`` with the ring vector ``noise`` added to its last ``noise.size`` words.

    Every protocol that declares ``Capabilities.central_dp`` ends its aggregate share message
    with its ring share of the aggregate: the sparse ``(m, width)`` part, then the dense
    ``(dense_size,)`` part, little-endian -- so the noise lands on exactly those words and the
    framing before them is untouched."""
    dt = noise.dtype.newbyteorder("<")
    size = noise.size * dt.itemsize
    if len(share) < size:
        raise InvalidParameters(f"the share has {len(share)} bytes, fewer than the {size} of its aggregate")
    head, tail = share[: len(share) - size], np.frombuffer(share, dtype=dt, offset=len(share) - size)
    return head + (tail + noise).astype(dt).tobytes()


@dataclass(frozen=True)
class ClipSpec:
    """How a device clips its round contribution under DP.

    ``l2``: the bound on the L2 norm of the whole contribution (row gradients and dense
    gradient together; user level).  ``reserve``: ring units of each sum coordinate kept
    free for the servers' noise (both servers' ``tail``); ``per_user``: ring units each
    device keeps free for its own noise (DP-FedRec).  :meth:`coordinate_bound` widens the
    Appendix L.2 bound by these, so the sum of ``n_p`` clipped contributions plus all noise
    never wraps.
    """

    l2: float
    reserve: int = 0
    per_user: int = 0

    def coordinate_bound(self, fp: FixedPoint, n_p: int) -> float:
        """The largest ``|x|`` a coordinate may have: ``floor((2^{k-1} - 1 - reserve) / n_p)
        - per_user`` ring units, over ``2^f``.

        Raises
        ------
        InvalidParameters: the noise leaves no room (use ``ring_bits=64`` or fewer ``frac_bits``).
        """
        units = ((1 << (fp.ring_bits - 1)) - 1 - self.reserve) // max(int(n_p), 1) - self.per_user
        if units < 1:
            raise InvalidParameters(
                f"the DP noise (reserve {self.reserve}, per user {self.per_user} ring units) leaves no room in "
                f"Z_2^{fp.ring_bits} with {fp.frac_bits} fractional bits for {n_p} users: use ring_bits=64 "
                "or fewer frac_bits"
            )
        return float(units) / 2.0**fp.frac_bits

    def clip(self, rows: np.ndarray, dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, dense)`` scaled by ``min(1, l2 / ||(rows, dense)||_2)``."""
        norm = math.sqrt(float(np.sum(np.square(rows))) + float(np.sum(np.square(dense))))
        scale = min(1.0, self.l2 / norm) if norm > 0 else 1.0
        return rows * scale, dense * scale


def clip_spec(l2: float, sigma: float, *, central: bool) -> ClipSpec:
    """What a device clips to when noise of scale ``sigma`` (ring units, truncated at
    ``floor(TAIL_SIGMAS * sigma)``) is added: by each server (``central``: every sum coordinate
    keeps room for both servers' tails) or by each device (its own tail)."""
    tail = math.floor(TAIL_SIGMAS * sigma)
    return ClipSpec(l2, reserve=2 * tail) if central else ClipSpec(l2, per_user=tail)


class RingNoise:
    """One server's noise: ``N_Z(0, sigma^2)`` per coordinate, in ring units of ``fp``.

    Parameters
    ----------
    fp: the ring.
    sigma: the scale in ring units (``> 0``).
    _rng: random bytes (tests only; the OS CSPRNG by default).
    """

    def __init__(self, fp: FixedPoint, sigma: float, *, _rng: RandomBytes | None = None) -> None:
        self.fp, self.sigma = fp, float(sigma)
        self.tail = math.floor(TAIL_SIGMAS * self.sigma)
        self._rng = _rng or system_rng
        discrete_gaussian(self.sigma, 0, tail=self.tail)  # validates sigma

    def draw(self, n: int) -> np.ndarray:
        """``n`` fresh noise values as ring elements."""
        return to_ring(self.fp.ring_bits, discrete_gaussian(self.sigma, n, tail=self.tail, _rng=self._rng))

