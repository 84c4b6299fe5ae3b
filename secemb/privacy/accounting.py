"""Privacy accounting with Google's ``dp-accounting`` (Rényi DP of the Poisson-sampled
Gaussian mechanism, Mironov, Talwar and Zhang 2019), and a run's DP plan.

:func:`plan_dp` turns a run's target ``(epsilon, delta)`` and clip bound into the noise every
party adds: the noise multiplier ``z`` is solved with
``dp_accounting.calibrate_dp_mechanism`` so that the accountant's epsilon after the run's
steps is at most the target; the noise scale in ring units is ``z`` times the sensitivity of
one user's encoded contribution (``clip * 2^f`` plus the rounding of its at most ``m w + P``
coordinates to the grid, ``sqrt(m w + P) / 2``).

Central DP (SecEmb + DP): each server adds ``N_Z(0, sigma^2)`` to its share; Poisson sampling
of users with rate ``q = n_p / n`` over ``epochs * ceil(n / n_p)`` rounds.  Local DP
(DP-FedRec): each device adds ``N_Z(0, sigma^2)`` to its own full-size upload; every upload is
seen, so there is no amplification (``q = 1``) and a user's releases are its ``epochs``
participations (the epoch permutation).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from secemb.errors import InvalidParameters, check_float, check_int
from secemb.privacy.noise import ClipSpec, clip_spec
from secemb.ring import FixedPoint

if TYPE_CHECKING:  # imported where used: dp-accounting pulls in scipy.signal (seconds), runs without DP skip it
    import dp_accounting

__all__ = ["ACCOUNTANT", "DPPlan", "DPSettings", "epsilon_spent", "noise_multiplier", "plan_dp", "planned_rounds"]

#: the accountant, named in the result's privacy block
ACCOUNTANT = f"dp-accounting {version('dp-accounting')} RDP (Poisson-sampled Gaussian)"


@dataclass(frozen=True)
class DPSettings:
    """A run's differential-privacy target.

    Attributes
    ----------
    epsilon, delta: the target ``(epsilon, delta)``; ``epsilon > 0`` finite, ``0 < delta < 1``.
    clip: the L2 bound on one user's round contribution (Delta_2), ``> 0``.
    level: ``"user"``: one user's whole round contribution is clipped (the guarantee covers
        all of a user's ratings; see docs/security.md for why record level is not offered).
    """

    epsilon: float
    delta: float
    clip: float
    level: str = "user"

    def __post_init__(self) -> None:
        check_float("dp epsilon (inf: no DP)", self.epsilon, above=0)
        check_float("dp delta", self.delta, above=0, below=1)
        check_float("dp clip", self.clip, above=0)
        if self.level != "user":
            raise InvalidParameters(
                f"dp level must be 'user', got {self.level!r} (record level is not rigorous here: the private "
                "user vector carries one rating's influence into the user's later gradients; docs/security.md)"
            )


def _event(z: float, q: float, steps: int) -> dp_accounting.DpEvent:
    import dp_accounting

    gauss = dp_accounting.GaussianDpEvent(z)
    one = gauss if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, gauss)
    return dp_accounting.SelfComposedDpEvent(one, steps)


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    """dp-accounting warns (through absl) for every RDP order whose series does not converge
    and is left out (a conservative omission); keep that off the console."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        yield
    finally:
        absl.setLevel(level)


def epsilon_spent(z: float, q: float, steps: int, delta: float) -> float:
    """The RDP accountant's epsilon after ``steps`` releases of the Gaussian mechanism with
    noise multiplier ``z``, each Poisson-sampled with rate ``q`` (``q = 1``: not sampled)."""
    from dp_accounting import rdp

    acc = rdp.RdpAccountant()
    acc.compose(_event(z, q, steps))
    with _quiet_absl():
        return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=64)
def noise_multiplier(epsilon: float, delta: float, q: float, steps: int) -> float:
    """The smallest noise multiplier (to ``dp_accounting``'s tolerance, rounded up) whose
    epsilon after ``steps`` releases at rate ``q`` is at most ``epsilon``."""
    import dp_accounting
    from dp_accounting import rdp

    with _quiet_absl():
        z = dp_accounting.calibrate_dp_mechanism(
            rdp.RdpAccountant, lambda z: _event(z, q, steps), epsilon, delta,
            dp_accounting.LowerEndpointAndGuess(0.0, 1.0), tol=1e-4,
        )
    while epsilon_spent(z, q, steps, delta) > epsilon:  # calibrate returns a point within tol of the target
        z *= 1.0 + 1e-4
    return float(z)


@dataclass(frozen=True)
class DPPlan:
    """The noise of a run: who adds it (``central``: each server; else each device), the
    noise multiplier, the scale in ring units, and what the devices clip to."""

    settings: DPSettings
    central: bool
    noise_multiplier: float
    sigma_ring: float
    sampling_rate: float
    steps: int
    clip: ClipSpec

    def privacy_block(self, participations_max: int | None = None) -> dict[str, Any]:
        """The result's ``privacy`` block.  ``participations_max``: the most rounds any user
        took part in (central DP: then ``epsilon_known_participation`` is the guarantee against
        a server, which sees who takes part, composed over those rounds without sampling)."""
        s = self.settings
        block: dict[str, Any] = {
            "epsilon": epsilon_spent(self.noise_multiplier, self.sampling_rate, self.steps, s.delta),
            "epsilon_target": s.epsilon,
            "delta": s.delta,
            "noise_multiplier": self.noise_multiplier,
            "sampling_rate": self.sampling_rate,
            "steps": self.steps,
            "accountant": ACCOUNTANT,
            "level": s.level,
            "clip": s.clip,
            "noise": "each server, discrete Gaussian" if self.central else "each device, discrete Gaussian",
            "sigma_ring_units": self.sigma_ring,
        }
        if self.central and participations_max is not None:
            block["participations_max"] = participations_max
            block["epsilon_known_participation"] = (
                epsilon_spent(self.noise_multiplier, 1.0, participations_max, s.delta) if participations_max else 0.0
            )
        return block


def planned_rounds(epochs: int, active_users: int, users_per_round: int, rounds_per_epoch: int | None) -> int:
    """The rounds a run plans: ``epochs * ceil(n / n_p)``, or ``epochs * min(R, ceil(n / n_p))``
    when ``rounds_per_epoch = R`` cuts every epoch (``None``: no cut).

    Raises
    ------
    InvalidParameters: ``rounds_per_epoch`` neither ``None`` nor an int >= 1.
    """
    if rounds_per_epoch is not None:
        check_int("rounds_per_epoch", rounds_per_epoch, low=1)
    per_epoch = -(-active_users // users_per_round)
    return epochs * (per_epoch if rounds_per_epoch is None else min(per_epoch, rounds_per_epoch))


def plan_dp(settings: DPSettings, *, central: bool, fp: FixedPoint, coordinates: int, active_users: int,
            users_per_round: int, epochs: int, rounds_per_epoch: int | None = None) -> DPPlan:
    """The run's noise for ``settings``.

    Parameters
    ----------
    central: SecEmb + DP (servers add noise, Poisson sampling) or DP-FedRec (devices add it).
    fp: the ring; coordinates: ``m * width + dense_size``.
    active_users, users_per_round, epochs: ``n``, ``n_p`` and the run's epochs.
    rounds_per_epoch: the run's bound on rounds an epoch (``None``: all ``ceil(n / n_p)``);
        central DP's steps are the rounds that run.  Local DP (DP-FedRec) is unchanged: the
        epoch permutation puts a user in at most one round an epoch, run or not.

    Raises
    ------
    InvalidParameters: the noise does not fit the ring (:meth:`ClipSpec.coordinate_bound`);
        ``rounds_per_epoch`` neither ``None`` nor an int >= 1 (:func:`planned_rounds`).
    """
    rounds = planned_rounds(epochs, active_users, users_per_round, rounds_per_epoch)  # checks rounds_per_epoch
    if central:
        q, steps = min(1.0, users_per_round / max(active_users, 1)), rounds
    else:
        q, steps = 1.0, epochs
    z = noise_multiplier(settings.epsilon, settings.delta, q, steps)
    sensitivity = settings.clip * 2.0**fp.frac_bits + 0.5 * math.sqrt(coordinates)
    sigma = z * sensitivity
    clip = clip_spec(settings.clip, sigma, central=central)
    clip.coordinate_bound(fp, users_per_round if central else 1)  # refuses noise that leaves no room
    return DPPlan(settings, central, z, sigma, q, steps, clip)
