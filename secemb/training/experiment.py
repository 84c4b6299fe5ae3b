"""Run a named experiment: dataset, split, preset, model, protocol -> :func:`train`.

This is what ``secemb train`` runs; it is also the shortest way to reproduce a run from
Python::

    from secemb.training import Experiment, run_experiment
    result = run_experiment(Experiment(dataset="ml-100k", protocol="plaintext", epochs=200,
                                       m_prime=200))
    print(result.final_rmse, result.model_sha256)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from secemb.data import load_dataset, train_test_split
from secemb.errors import InvalidParameters
from secemb.data.features import load_features
from secemb.models import get_model, get_preset, uses_features
from secemb.protocols import get_protocol
from secemb.protocols.lossy import lossy_options
from secemb.protocols.backends import make_backend
from secemb.training.loop import EpochStats, RoundStats, TrainConfig, TrainResult, train
from secemb.transport.inprocess import InProcessTransport

__all__ = ["Experiment", "run_experiment"]


@dataclass(frozen=True)
class Experiment:
    """A named experiment.  ``lr``, ``reg`` and ``dim`` default to the paper's preset (Table 8)
    of ``model`` on ``dataset`` (synthetic data uses the ML-100K preset); the other fields are
    those of :class:`~secemb.training.loop.TrainConfig`, plus data loading and the split."""

    dataset: str = "synthetic"
    data_dir: str | os.PathLike | None = None
    download: bool = False
    test_fraction: float = 0.2
    model: str = "mf"
    protocol: str = "secemb"
    layout: str = "cuckoo"
    relay: bool = True
    expansion: float = 1.25
    backend: str = "serial"
    workers: int | None = None
    epochs: int = 1
    users_per_round: int = 100
    m_prime: int | None = None
    alpha: float = 2.5
    seed: int = 0
    verify: bool = False
    lr: float | None = None
    reg: float | None = None
    dim: int | None = None
    ring_bits: int = 32
    frac_bits: int = 16
    lazy_adam: bool = True
    schedule: Literal["interleaved", "staged"] = "staged"


def _preset_dataset(name: str) -> str:
    return name.removeprefix("synthetic-")


def run_experiment(
    exp: Experiment,
    *,
    transport: InProcessTransport | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
) -> TrainResult:
    """Load, split, build and train; return the :class:`TrainResult`.

    Raises
    ------
    InvalidParameters
        Unknown dataset, model or protocol (or a protocol not available yet), or a bad value.
    secemb.data.DatasetNotFoundError
        MovieLens files are missing (the message says where to put them).
    secemb.training.VerificationError
        ``verify=True`` and the protocol's output differs from the direct computation.
    """
    options: dict[str, Any] = {"layout": exp.layout, "relay": exp.relay, "expansion": exp.expansion}
    get_protocol(exp.protocol, **options)  # a bad protocol or option fails before any data is loaded
    preset = get_preset(exp.model, _preset_dataset(exp.dataset))
    dim = preset.dim if exp.dim is None else exp.dim
    reg = preset.reg if exp.reg is None else exp.reg
    lr = preset.lr if exp.lr is None else exp.lr
    if not 0.0 < exp.test_fraction < 1.0:
        raise InvalidParameters(f"test_fraction must be in (0, 1), got {exp.test_fraction!r}")
    data = load_dataset(exp.dataset, exp.data_dir, download=exp.download, seed=exp.seed)
    train_data, test_data = train_test_split(data, exp.test_fraction, seed=exp.seed)
    hparams: dict[str, Any] = {"dim": dim, "reg": reg}
    if uses_features(exp.model):  # FM, DeepFM: Appendix H side features
        hparams["features"] = load_features(
            exp.dataset, exp.data_dir, num_users=data.num_users, num_items=data.num_items, seed=exp.seed
        )
    model = get_model(exp.model, **hparams)
    options.update(lossy_options(exp.protocol, model, _preset_dataset(exp.dataset)))
    if exp.backend != "serial":
        options["backend"] = make_backend(exp.backend, exp.workers)
    protocol = get_protocol(exp.protocol, **options)
    config = TrainConfig(
        epochs=exp.epochs,
        users_per_round=exp.users_per_round,
        m_prime=exp.m_prime,
        alpha=exp.alpha,
        seed=exp.seed,
        verify=exp.verify,
        lr=lr,
        lazy_adam=exp.lazy_adam,
        ring_bits=exp.ring_bits,
        frac_bits=exp.frac_bits,
        schedule=exp.schedule,
    )
    extra = {
        "dataset": exp.dataset,
        "test_fraction": exp.test_fraction,
        "split_seed": exp.seed,
        "dim": dim,
        "reg": reg,
    }
    return train(
        model,
        protocol,
        train_data,
        test_data,
        config,
        transport=transport,
        on_round=on_round,
        on_epoch=on_epoch,
        on_start=on_start,
        extra_config=extra,
    )
