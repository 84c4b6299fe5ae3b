"""Recommender models split into public (server-held) and private (device-held) parameters.

``get_model(name, **hparams)`` builds a registered model; ``"mf"`` (biased matrix
factorization), ``"ncf"``, ``"fm"`` and ``"deepfm"`` (the last three take
``features=FeatureSet``; see :mod:`secemb.models.features`), and the sequential ``"sasrec"``
and ``"caser"`` (:mod:`secemb.models.sequential`; their task: :mod:`secemb.models.task`), and
``"din"`` (:mod:`secemb.models.din`, click-through samples of :mod:`secemb.data.ctr`).  A
model declares ``sparse_width`` (columns of the public item table), ``dense_size`` (length of
the public dense vector) and ``private_size`` (length of each user's private vector); see
:mod:`secemb.models.base`.  Importing this package does not import torch (only the generic
autograd path does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.models.base import RecModel, StepResult, UserState, UserStore
from secemb.models.deepfm import DeepFM
from secemb.models.din import DIN
from secemb.models.fm import FactorizationMachine
from secemb.models.mf import MatrixFactorization
from secemb.models.ncf import NCF
from secemb.models.optim import AdamConfig, adam_update
from secemb.models.presets import PAPER_M_PRIME, PRESETS, Preset, get_preset
from secemb.models.sequential import SASRec, Caser, SequenceModel
from secemb.models.task import RATING, RatingTask, Sample, SequenceTask, Task

__all__ = [
    "announced_model",
    "MODELS",
    "PAPER_M_PRIME",
    "PRESETS",
    "AdamConfig",
    "Caser",
    "DIN",
    "DeepFM",
    "FactorizationMachine",
    "MatrixFactorization",
    "NCF",
    "Preset",
    "RATING",
    "RatingTask",
    "RecModel",
    "SASRec",
    "Sample",
    "SequenceModel",
    "SequenceTask",
    "StepResult",
    "Task",
    "UserState",
    "UserStore",
    "adam_update",
    "get_model",
    "get_preset",
    "register_model",
    "uses_features",
]

MODELS: dict[str, Callable[..., RecModel]] = {
    "mf": MatrixFactorization,
    "ncf": NCF,
    "fm": FactorizationMachine,
    "deepfm": DeepFM,
    "sasrec": SASRec,
    "caser": Caser,
    "din": DIN,
}


def register_model(name: str, factory: Callable[..., RecModel]) -> None:
    """Register ``factory(**hparams) -> RecModel`` under ``name`` (e.g. ``"ncf"``)."""
    if not isinstance(name, str) or not name:
        raise InvalidParameters(f"model name must be a non-empty str, got {name!r}")
    MODELS[name] = factory


def _factory(name: str) -> Callable[..., RecModel]:
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise InvalidParameters(f"unknown model {name!r}; available: {sorted(MODELS)}") from None


def uses_features(name: str) -> bool:
    """Whether model ``name`` is built with the dataset's side features (``features=``).

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered.
    """
    return bool(getattr(_factory(name), "uses_features", False))


def get_model(name: str, **hparams: object) -> RecModel:
    """Build model ``name`` with ``hparams`` (for ``"mf"``: ``dim``, ``reg``, ``init_std``).

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered, or a hyperparameter is invalid.
    """
    return _factory(name)(**hparams)


def announced_model(name: Any, hparams: Any, source: str, **extra: object) -> RecModel:
    """The model another party announces (a round document, an inference description):
    :func:`get_model` of ``name`` with ``hparams`` and this party's own ``extra`` (e.g. its
    features); ``source`` names the announcement in the error ("the round 3").

    Raises
    ------
    InvalidMessage
        No model of that name, hyperparameters not a mapping, one the model does not take
        (TypeError), or a value it refuses (ValueError, InvalidParameters among them) or numpy
        cannot size (OverflowError) -- the announcing party's fault, not the caller's.
    """
    try:
        return get_model(name, **hparams, **extra)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InvalidMessage(f"{source} announces a model this device cannot build ({exc!r})") from None
