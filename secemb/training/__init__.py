"""Federated training: the round loop, server-side Adam, padding, and run orchestration.

* :func:`train` drives a protocol through a transport for a model and returns a
  :class:`TrainResult` (metrics, communication measured in bytes, timings, model hash);
* :func:`run_experiment` loads a dataset by name, applies the paper's presets and calls
  :func:`train` -- what ``secemb train`` runs; :meth:`Experiment.run` does the same and
  returns an :class:`ExperimentResult` with the :class:`TrainedModel` (recommend, save, load);
* :class:`ServerAdam`, :func:`pad_or_truncate`, :mod:`secemb.round.messages`.

This package sits above the round layer (:mod:`secemb.round`: the result types, messages,
update step) and the simulation it drives; nothing below it imports it, so it imports what it
re-exports directly.
"""

from __future__ import annotations

from secemb.digest import model_sha256
from secemb.inference.trained import TrainedModel
from secemb.metrics import rmse
from secemb.protocols.placement import PaddedRequest, pad_or_truncate
from secemb.protocols.stages import STAGES
from secemb.round.optimizer import ServerAdam
from secemb.round.results import EpochStats, RoundStats, TrainConfig, TrainResult, VerificationError
from secemb.training.experiment import Experiment, ExperimentResult, run_experiment
from secemb.training.loop import train

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
