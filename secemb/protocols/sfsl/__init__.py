"""Secure federated submodel learning (Niu et al., "Billion-scale federated learning on mobile
clients: a submodel design with tunable privacy", MobiCom 2020 / secure-federated-submodel-learning.txt).

* :mod:`~secemb.privacy.randomized_response` -- Algorithm 2 (index perturbation) and the
  privacy levels of Table V;
* :mod:`~secemb.protocols.sfsl.quantize` -- γ-level stochastic quantization and the weighted,
  count-normalized mean;
* :mod:`~secemb.protocols.sfsl.wire` -- the submodel request/reply bytes;
* :mod:`~secemb.protocols.sfsl.parties` -- the device and the cloud server (DIN);
* :mod:`~secemb.protocols.sfsl.round` -- one round (Algorithm 1: PSU, perturbed download,
  local training, secure sum) with byte counts and timings;
* :mod:`~secemb.protocols.sfsl.simulate` -- training over rounds with AUC.

The secure aggregation and the private set union are :mod:`secemb.secagg`'s.  How it is built
and every choice where the paper is silent: docs/sfsl.md.
"""

from secemb.protocols.sfsl.parties import RowSpace, SFSLDevice, SFSLServer, TrainingSettings
from secemb.protocols.sfsl.round import RoundReport, sfsl_round
from secemb.protocols.sfsl.simulate import SFSLResult, SFSLRun, train_sfsl

__all__ = ["RoundReport", "RowSpace", "SFSLDevice", "SFSLResult", "SFSLRun", "SFSLServer", "TrainingSettings",
           "sfsl_round", "train_sfsl"]
