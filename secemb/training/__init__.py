"""Federated training: the round loop, server-side Adam, padding, and run orchestration.

* :func:`train` drives a protocol through a transport for a model and returns a
  :class:`TrainResult` (metrics, communication measured in bytes, timings, model hash);
* :func:`run_experiment` loads a dataset by name, applies the paper's presets and calls
  :func:`train` -- what ``secemb train`` runs;
* :class:`ServerAdam`, :func:`pad_or_truncate`, :mod:`secemb.training.messages`.
"""

from __future__ import annotations

from secemb.training.experiment import Experiment, run_experiment
from secemb.training.loop import (
    STAGES,
    EpochStats,
    RoundStats,
    TrainConfig,
    TrainResult,
    VerificationError,
    model_sha256,
    rmse,
    secure_m_prime,
    train,
)
from secemb.training.optimizer import ServerAdam
from secemb.protocols.placement import PaddedRequest, pad_or_truncate

__all__ = [
    "STAGES",
    "EpochStats",
    "Experiment",
    "PaddedRequest",
    "RoundStats",
    "ServerAdam",
    "TrainConfig",
    "TrainResult",
    "VerificationError",
    "model_sha256",
    "pad_or_truncate",
    "rmse",
    "run_experiment",
    "secure_m_prime",
    "train",
]
