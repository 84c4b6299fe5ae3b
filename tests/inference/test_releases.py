"""A device's release ledger: one release per representation version, sent again while the
representation and mechanism are unchanged; new releases are recorded and composed (checked
against the Gaussian mechanism's exact composition, written here independently)."""

from __future__ import annotations

import math
import os
import stat

import numpy as np
import pytest

from secemb.errors import InvalidMessage
from secemb.inference import GaussianLDP, privatize
from secemb.inference.releases import ReleaseLedger
from secemb.randomness import CtrDrbg


def _gdp_epsilon(mu: float, delta: float) -> float:
    """The exact epsilon of mu-GDP at ``delta`` (Dong, Roth and Su 2019, Corollary 2.13):
    the root of Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta, by bisection."""
    def phi(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2))

    def d(eps: float) -> float:
        return phi(-eps / mu + mu / 2) - math.exp(eps) * phi(-eps / mu - mu / 2)

    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    return hi


H = np.array([[0.4, -0.3, 0.2], [0.1, 0.0, -0.5]])


def test_same_representation_and_mechanism_reuse_the_release(tmp_path) -> None:
    mech = GaussianLDP(1.0, 1e-4, 1.0)
    path = tmp_path / "rel.npz"
    led = ReleaseLedger.load(path)
    assert led.releases == 0 and led.spent() == (0.0, 0.0)
    h1, z1, reused = led.release(H, mech, _rng=CtrDrbg(3))
    assert not reused
    expect_h, expect_z = privatize(H[None], mech, _rng=CtrDrbg(3))
    np.testing.assert_array_equal(h1, expect_h[0])
    np.testing.assert_array_equal(z1, expect_z[0])
    led.save()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # Z_u and H~_u reveal H_u
    back = ReleaseLedger.load(path)
    h2, z2, reused = back.release(H.copy(), mech, _rng=CtrDrbg(4))  # another noise source: not used
    assert reused and back.releases == 1
    np.testing.assert_array_equal(h2, h1)
    np.testing.assert_array_equal(z2, z1)


def test_a_new_representation_or_mechanism_is_a_new_composed_release() -> None:
    mech = GaussianLDP(1.0, 1e-4, 1.0)
    led = ReleaseLedger()
    led.release(H, mech, _rng=CtrDrbg(1))
    eps1, delta1 = led.spent()
    assert delta1 == 1e-4 and abs(eps1 - 1.0) < 1e-3  # one release: its own (epsilon, delta)
    moved = H + 1e-9  # a representation version that differs in one ulp-scale step
    _, _, reused = led.release(moved, mech, _rng=CtrDrbg(2))
    assert not reused and led.releases == 2
    _, _, reused = led.release(moved, GaussianLDP(2.0, 1e-4, 1.0), _rng=CtrDrbg(3))
    assert not reused and led.releases == 3
    eps, delta = led.spent()
    assert delta == pytest.approx(1e-4)  # the largest of the releases' deltas (since session 43: S43-G6)
    # Gaussian releases compose as mu-GDP with mu^2 = sum (2B / sigma_i)^2
    mus = [2.0 * m.bound / m.sigma for m in (mech, mech, GaussianLDP(2.0, 1e-4, 1.0))]
    exact = _gdp_epsilon(math.sqrt(sum(m * m for m in mus)), 1e-4)
    assert exact - 1e-6 <= eps <= exact + 1e-2  # the PLD accountant is exact up to its discretization
    assert eps < 1.0 + 1.0 + 2.0  # tighter than adding the epsilons


def test_a_damaged_ledger_is_refused(tmp_path) -> None:
    path = tmp_path / "rel.npz"
    path.write_bytes(b"not a ledger")
    with pytest.raises(InvalidMessage, match="not a GREC release ledger"):
        ReleaseLedger.load(path)
    np.savez(path, format=np.array("other"), ledger=np.zeros((0, 4)), h_sha256=np.array(""), h_tilde=np.zeros((0, 0)),
             z=np.zeros((0, 0)))
    with pytest.raises(InvalidMessage, match="format"):
        ReleaseLedger.load(path)
