"""Federated training: the round loop, server-side Adam, padding, and run orchestration.

* :func:`train` drives a protocol through a transport for a model and returns a
  :class:`TrainResult` (metrics, communication measured in bytes, timings, model hash);
* :func:`run_experiment` loads a dataset by name, applies the paper's presets and calls
  :func:`train` -- what ``secemb train`` runs; :meth:`Experiment.run` does the same and
  returns an :class:`ExperimentResult` with the :class:`TrainedModel` (recommend, save, load);
* :class:`ServerAdam`, :func:`pad_or_truncate`, :mod:`secemb.training.messages`.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it; imported on first use, so that the engine (which
#: the training loop is built on) can import the result types without a cycle
_HOME = {
    "STAGES": "secemb.protocols.stages",
    "EpochStats": "secemb.training.results",
    "Experiment": "secemb.training.experiment",
    "ExperimentResult": "secemb.training.experiment",
    "PaddedRequest": "secemb.protocols.placement",
    "RoundStats": "secemb.training.results",
    "ServerAdam": "secemb.training.optimizer",
    "TrainConfig": "secemb.training.results",
    "TrainResult": "secemb.training.results",
    "TrainedModel": "secemb.training.trained",
    "VerificationError": "secemb.training.results",
    "model_sha256": "secemb.training.results",
    "pad_or_truncate": "secemb.protocols.placement",
    "rmse": "secemb.metrics",
    "run_experiment": "secemb.training.experiment",
    "train": "secemb.training.loop",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'secemb.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "STAGES",
    "EpochStats",
    "Experiment",
    "ExperimentResult",
    "PaddedRequest",
    "RoundStats",
    "ServerAdam",
    "TrainConfig",
    "TrainResult",
    "TrainedModel",
    "VerificationError",
    "model_sha256",
    "pad_or_truncate",
    "rmse",
    "run_experiment",
    "train",
]
