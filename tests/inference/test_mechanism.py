"""The LDP mechanism: the analytic Gaussian sigma against values computed independently,
clipping, CSPRNG noise, privatize (Eqs. 13, 15)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld

from secemb.errors import InvalidParameters
from secemb.inference import (
    GaussianLDP,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    clip_frobenius,
    gaussian_noise,
    privatize,
)
from secemb.randomness import CtrDrbg


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _delta_by_hand(sigma: float, eps: float, sens: float) -> float:
    """Balle & Wang 2018, Theorem 8, written out with math.erfc (plain floats, no log space)."""
    a, b = sens / (2 * sigma), eps * sigma / sens
    return _phi(a - b) - math.exp(eps) * _phi(-a - b)


def _sigma_by_bisection(eps: float, delta: float, sens: float) -> float:
    lo, hi = 1e-3 * sens, 1e3 * sens
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _delta_by_hand(mid, eps, sens) <= delta else (mid, hi)
    return hi


@pytest.mark.parametrize(("eps", "delta", "sens"), [(1.0, 1e-4, 2.0), (0.5, 1e-5, 1.0), (0.1, 1e-4, 2.0),
                                                     (5.0, 1e-6, 1.0)])
def test_sigma_matches_an_independent_bisection(eps: float, delta: float, sens: float) -> None:
    assert analytic_gaussian_sigma(eps, delta, sens) == pytest.approx(_sigma_by_bisection(eps, delta, sens), rel=1e-9)


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-4), (10.0, 1e-4), (0.1, 1e-5)])
def test_sigma_is_tight_by_dp_accounting(eps: float, delta: float) -> None:
    """Google's PLD accountant (a separate implementation) finds delta(eps) = the target at
    sigma, and a larger delta at 0.98 sigma (sigma is the smallest that works)."""
    sens = 2.0
    sigma = analytic_gaussian_sigma(eps, delta, sens)

    def accountant_delta(s: float) -> float:
        dist = pld.from_gaussian_mechanism(s, sensitivity=sens, value_discretization_interval=1e-3)
        return float(dist.get_delta_for_epsilon(eps))

    assert accountant_delta(sigma) == pytest.approx(delta, rel=0.02)
    assert accountant_delta(0.98 * sigma) > 1.05 * delta


def test_known_value_and_the_classic_formula() -> None:
    # eps = 1, delta = 1e-5, sensitivity 1: the classic formula gives sqrt(2 ln(125000)) = 4.8448
    assert classic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.8448, abs=5e-4)
    for eps in (0.1, 0.5, 0.9):  # where the classic formula is valid, the analytic one is smaller
        assert analytic_gaussian_sigma(eps, 1e-4, 1.0) < classic_gaussian_sigma(eps, 1e-4, 1.0)


def test_mechanism_uses_sensitivity_two_b() -> None:
    mech = GaussianLDP(1.0, 1e-4, 0.75)
    assert mech.sensitivity == 1.5
    assert mech.sigma == pytest.approx(_sigma_by_bisection(1.0, 1e-4, 1.5), rel=1e-9)
    assert mech.sigma == pytest.approx(2 * GaussianLDP(1.0, 1e-4, 0.375).sigma, rel=1e-9)  # linear in B


@pytest.mark.parametrize("bad", [{"epsilon": 0.0}, {"epsilon": math.inf}, {"delta": 0.0}, {"delta": 1.0},
                                 {"bound": -1.0}, {"bound": math.nan}])
def test_bad_parameters_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(InvalidParameters):
        GaussianLDP(**{"epsilon": 1.0, "delta": 1e-4, "bound": 1.0, **bad})


def test_clipping_norms() -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(0, 1, (5, 3, 4))
    h[0] *= 1e-3  # under the bound: untouched
    h[1] = 0.0
    out = clip_frobenius(h, 1.0)
    norms = np.sqrt((out**2).sum((1, 2)))
    np.testing.assert_allclose(out[0], h[0])
    np.testing.assert_array_equal(out[1], 0.0)
    np.testing.assert_allclose(norms[2:], 1.0, rtol=1e-12)  # over the bound: exactly B ...
    for k in range(2, 5):  # ... in the same direction
        np.testing.assert_allclose(out[k] * np.linalg.norm(h[k]), h[k], rtol=1e-12)
    with pytest.raises(InvalidParameters):
        clip_frobenius(np.ones(3), 1.0)


def test_noise_comes_from_the_byte_source_and_is_standard_normal() -> None:
    a = gaussian_noise((400, 500), 2.0, _rng=CtrDrbg(1))
    b = gaussian_noise((400, 500), 2.0, _rng=CtrDrbg(1))
    c = gaussian_noise((400, 500), 2.0, _rng=CtrDrbg(2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert abs(a.mean()) < 0.02 and a.std() == pytest.approx(2.0, rel=0.01)
    assert (np.abs(a) > 2.0 * 1.96).mean() == pytest.approx(0.05, abs=0.003)  # the tails of N(0, 4)
    assert gaussian_noise((3,), 1.0).shape == (3,)  # the OS CSPRNG by default


def test_privatize_sends_a_clipped_matrix_and_keeps_the_difference() -> None:
    rng = np.random.default_rng(1)
    h = rng.normal(0, 1, (4, 2, 8))
    mech = GaussianLDP(1.0, 1e-4, 1.5)
    sent, kept = privatize(h, mech, _rng=CtrDrbg(5))
    assert np.sqrt((sent**2).sum((1, 2))).max() <= 1.5 + 1e-12  # Eq. 15's second clip
    np.testing.assert_allclose(kept, sent - h)
    # the sent matrix is clip(clip(H) + N(0, sigma^2)) with the byte source's noise
    noise = gaussian_noise(h.shape, mech.sigma, _rng=CtrDrbg(5))
    np.testing.assert_allclose(sent, clip_frobenius(clip_frobenius(h, 1.5) + noise, 1.5))
