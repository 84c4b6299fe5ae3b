"""Differential privacy of the aggregate (SecEmb Appendix G) and the DP-FedRec baseline.

* :mod:`secemb.privacy.noise` (hazmat): the discrete Gaussian sampler over cryptographic
  randomness, ring noise for the servers, and the devices' clipping (:class:`ClipSpec`).
* :mod:`secemb.privacy.accounting`: the target (:class:`DPSettings`), the noise multiplier
  solved with ``dp-accounting`` and the run's plan (:func:`plan_dp`, :class:`DPPlan`).

What the guarantee is, and against whom: docs/security.md ("Differential privacy").
"""

from secemb.privacy.accounting import DPPlan, DPSettings, epsilon_spent, noise_multiplier, plan_dp
from secemb.privacy.noise import ClipSpec, RingNoise, discrete_gaussian

__all__ = [
    "ClipSpec",
    "DPPlan",
    "DPSettings",
    "RingNoise",
    "discrete_gaussian",
    "epsilon_spent",
    "noise_multiplier",
    "plan_dp",
]
