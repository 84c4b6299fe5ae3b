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

from secemb.protocols import PROTOCOLS, protocol_class
from secemb.training.results import EpochStats, RoundStats, TrainResult
from secemb.training.loop import train
from secemb.training.builder import build_experiment
from secemb.transport.inprocess import InProcessTransport

__all__ = ["Experiment", "run_experiment"]


@dataclass(frozen=True)
class Experiment:
    """A named experiment.  ``lr``, ``reg`` and ``dim`` default to the paper's preset (Table 8)
    of ``model`` on ``dataset`` (synthetic data and own rating files use the ML-100K preset; a
    model without presets needs all three); the other fields are
    those of :class:`~secemb.training.loop.TrainConfig`, plus data loading and the split.

    ``layout`` and ``relay`` left ``None`` become the protocol's best supported setting on
    creation (the cuckoo layout where it is declared, else full; relay where declared); a
    value given explicitly is kept, and building the protocol refuses it if unsupported.
    An unknown protocol leaves them ``None``; :func:`run_experiment` reports it.

    ``dp_epsilon`` (``inf``: no DP, the run is exactly the one without these options),
    ``dp_delta``, ``dp_clip`` and ``dp_level``: differential privacy
    (:class:`~secemb.privacy.DPSettings`); under central DP the users are Poisson-sampled.

    Raises
    ------
    InvalidParameters
        On creation, if ``protocol`` is registered but its module cannot be imported.
    """

    dataset: str = "synthetic"
    data_dir: str | os.PathLike | None = None
    download: bool = False
    test_fraction: float = 0.2
    model: str = "mf"
    protocol: str = "secemb"
    layout: str | None = None
    relay: bool | None = None
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
    dp_epsilon: float = float("inf")
    dp_delta: float = 1e-5
    dp_clip: float = 1.0
    dp_level: str = "user"

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            return
        caps = protocol_class(self.protocol).capabilities
        if self.layout is None:
            object.__setattr__(self, "layout", "cuckoo" if "cuckoo" in caps.layouts else "full")
        if self.relay is None:
            object.__setattr__(self, "relay", caps.relay)


def run_experiment(
    exp: Experiment,
    *,
    transport: InProcessTransport | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
) -> TrainResult:
    """Build (:func:`~secemb.training.builder.build_experiment`) and train; return the
    :class:`TrainResult`.

    Raises
    ------
    InvalidParameters
        Unknown dataset, model or protocol (or a protocol not available yet), a bad value, or
        a model without presets and without all of dim, lr and reg.
    secemb.data.DatasetNotFoundError
        MovieLens files are missing (the message says where to put them).
    secemb.training.VerificationError
        ``verify=True`` and the protocol's output differs from the direct computation.
    """
    built = build_experiment(exp)
    return train(
        built.model,
        built.protocol,
        built.train_data,
        built.test_data,
        built.config,
        transport=transport,
        on_round=on_round,
        on_epoch=on_epoch,
        on_start=on_start,
        extra_config=built.extra_config,
        val_data=built.val_data,
    )
