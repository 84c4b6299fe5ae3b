"""GREC's private inference (grec.txt §3.2, A.8; docs/inference.md).

* :mod:`~secemb.inference.mechanism`: clipping to a Frobenius norm, the analytic Gaussian
  mechanism with sensitivity ``2B``, the CSPRNG noise, :func:`privatize` (Eqs. 13, 15);
* :mod:`~secemb.inference.representation`: a device's representation ``H_u``, its private
  offset, and the server's score from a (noisy) representation, for MF, NCF, FM and DeepFM;
* :mod:`~secemb.inference.denoiser`: the denoiser F_p, a registered model
  (``"grec-denoiser"``) trained federatedly by :func:`secemb.training.train`;
* :mod:`~secemb.inference.service`: the inference exchange -- the device sends ``H~_u``
  only, the server scores its public candidate set, the device denoises locally;
* :mod:`~secemb.inference.saved`: a trained denoiser on disk (``secemb infer --denoiser``).
"""

from __future__ import annotations

from secemb.inference.denoiser import Denoiser, DenoiserContext
from secemb.inference.mechanism import (
    GaussianLDP,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    clip_frobenius,
    gaussian_noise,
    privatize,
)
from secemb.inference.representation import Representation, representation_for

__all__ = [
    "Denoiser",
    "DenoiserContext",
    "GaussianLDP",
    "Representation",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "clip_frobenius",
    "gaussian_noise",
    "privatize",
    "representation_for",
]
