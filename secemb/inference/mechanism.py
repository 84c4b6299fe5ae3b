"""The local-DP mechanism of GREC's inference (grec.txt Eqs. 7, 13-15; docs/inference.md).

A device's representation ``H_u`` (float64, ``(R, d)``) is clipped to Frobenius norm ``B``,
Gaussian noise of scale ``sigma`` is added to every entry, and the noisy matrix is clipped to
``B`` again (Eq. 15, post-processing).  What leaves the device is the re-clipped ``H~_u``; the
device keeps ``Z_u = H~_u - H_u`` for its denoiser.

Calibration (two corrections to the paper, docs/inference.md):

* **Sensitivity 2B.**  Two inputs clipped to norm ``B`` differ by at most ``2B`` in Frobenius
  norm (replacement of the whole input, the local model's neighbouring relation), not ``B``.
* **Analytic Gaussian mechanism** (Balle & Wang, ICML 2018, Theorem 8): ``sigma`` is the
  smallest value with ``Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) <= delta`` for
  ``D = 2B``.  It is exact for every ``eps > 0`` (the classic ``sqrt(2 ln(1.25/delta)) D / eps``
  of Eq. 14 is only proven for ``eps < 1``, yet Table 12 uses ``eps = 10``), and never larger
  than the classic value where that one holds.

Noise comes from a :data:`~secemb.randomness.RandomBytes` source (the OS CSPRNG by default;
a seeded :class:`~secemb.randomness.CtrDrbg` in tests only): 53-bit uniforms, Box-Muller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from secemb.errors import InvalidParameters, check_float
from secemb.randomness import RandomBytes, random_words, system_rng

__all__ = [
    "GaussianLDP",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "clip_frobenius",
    "gaussian_noise",
    "privatize",
]


def _check_eps_delta(epsilon: float, delta: float) -> None:
    check_float("epsilon", epsilon, above=0)
    check_float("delta", delta, above=0, below=1)


def _check_positive(name: str, value: float) -> None:
    check_float(name, value, above=0)


def _phi(x: float) -> float:
    """The standard normal CDF (``math.erfc``: accurate in the far left tail)."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """The smallest ``delta`` for which ``N(0, sigma^2 I)`` on an L2-``sensitivity`` query is
    ``(epsilon, delta)``-DP (Balle & Wang 2018, Theorem 8)::

        Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D)"""
    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return _phi(a - b) - math.exp(epsilon) * _phi(-a - b)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The analytic Gaussian mechanism's ``sigma``: the smallest ``sigma`` with
    :func:`analytic_gaussian_delta` ``<= delta`` (the delta is decreasing in ``sigma``), by
    bisection on ``log sigma`` to float64 precision; the value returned satisfies the bound.

    Raises
    ------
    InvalidParameters
        ``epsilon`` not finite and > 0 (at most 700), ``delta`` not in (0, 1),
        ``sensitivity`` not > 0.
    """
    _check_eps_delta(epsilon, delta)
    _check_positive("sensitivity", sensitivity)
    if epsilon > 700:
        raise InvalidParameters(f"epsilon must be at most 700 (e^epsilon in float64), got {epsilon!r}")

    def ok(log_sigma: float) -> bool:
        return analytic_gaussian_delta(math.exp(log_sigma), epsilon, sensitivity) <= delta

    lo, hi = math.log(sensitivity) - 10.0, math.log(sensitivity) + 10.0
    while ok(lo):
        lo -= 10.0
    while not ok(hi):
        hi += 10.0
    for _ in range(200):  # |hi - lo| halves each time; stop when it no longer shrinks
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return math.exp(hi)


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Dwork & Roth's ``sqrt(2 ln(1.25/delta)) * sensitivity / epsilon`` (Eq. 14 with the
    sensitivity made explicit); valid for ``epsilon < 1`` only.  For comparison."""
    _check_eps_delta(epsilon, delta)
    _check_positive("sensitivity", sensitivity)
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


@dataclass(frozen=True)
class GaussianLDP:
    """One release of a representation clipped to Frobenius norm ``bound`` under
    ``(epsilon, delta)``-LDP.  ``sigma`` is the analytic Gaussian mechanism's for the
    sensitivity ``2 * bound``.

    Attributes
    ----------
    epsilon: finite, > 0.
    delta: in (0, 1).
    bound: the clipping norm B, finite, > 0.
    """

    epsilon: float
    delta: float
    bound: float

    def __post_init__(self) -> None:
        _check_eps_delta(self.epsilon, self.delta)
        _check_positive("bound", self.bound)

    @property
    def sensitivity(self) -> float:
        """``2 B``: the largest Frobenius distance of two clipped inputs."""
        return 2.0 * float(self.bound)

    @cached_property
    def sigma(self) -> float:
        """The per-entry noise standard deviation (computed once)."""
        return analytic_gaussian_sigma(float(self.epsilon), float(self.delta), self.sensitivity)


def clip_frobenius(h: np.ndarray, bound: float) -> np.ndarray:
    """``H min(1, B / ||H||_F)`` over the last two axes: float64 ``(..., R, d)`` -> same shape
    (a new array; a zero matrix stays zero)."""
    _check_positive("bound", bound)
    h = np.asarray(h, dtype=np.float64)
    if h.ndim < 2:
        raise InvalidParameters(f"representation must have >= 2 dimensions (..., R, d), got {h.shape}")
    norms = np.sqrt(np.einsum("...ij,...ij->...", h, h))
    scale = np.minimum(1.0, bound / np.maximum(norms, np.finfo(np.float64).tiny))
    return h * scale[..., None, None]


def gaussian_noise(shape: tuple[int, ...], sigma: float, *, _rng: RandomBytes | None = None) -> np.ndarray:
    """float64 ``N(0, sigma^2)`` of ``shape`` from cryptographic random bytes (Box-Muller on
    53-bit uniforms in (0, 1]).  ``_rng``: random bytes (tests only; the OS CSPRNG by default)."""
    _check_positive("sigma", sigma)
    n = int(np.prod(shape, dtype=np.int64))
    half = (n + 1) // 2
    words = random_words(_rng or system_rng, (2, half), np.uint64) >> np.uint64(11)
    u = (words.astype(np.float64) + 1.0) * 2.0**-53
    radius = np.sqrt(-2.0 * np.log(u[0]))
    angle = 2.0 * np.pi * u[1]
    z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:n]
    return (sigma * z).reshape(shape)


def privatize(
    h: np.ndarray, mechanism: GaussianLDP, *, _rng: RandomBytes | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 13 and 15 for one or many devices: clip ``H`` to ``B``, add ``N(0, sigma^2)`` to
    every entry, clip the sum to ``B`` again.

    Parameters
    ----------
    h: float64 ``(..., R, d)``, the clean representation(s) ``H_u``.
    mechanism: the ``(epsilon, delta, B)`` of the release.
    _rng: random bytes (tests only; the OS CSPRNG by default).

    Returns
    -------
    (h_tilde, z): ``H~_u`` (what the device sends) and ``Z_u = H~_u - H_u`` (what it keeps),
    both float64 of ``h``'s shape.
    """
    if not isinstance(mechanism, GaussianLDP):
        raise InvalidParameters(f"mechanism must be a GaussianLDP, got {type(mechanism).__name__}")
    h = np.asarray(h, dtype=np.float64)
    clipped = clip_frobenius(h, mechanism.bound)
    noisy = clipped + gaussian_noise(h.shape, mechanism.sigma, _rng=_rng)
    h_tilde = clip_frobenius(noisy, mechanism.bound)
    return h_tilde, h_tilde - h
