"""Run a named experiment: dataset, split, preset, model, protocol -> :func:`train`.

This is what ``secemb train`` runs; it is also the shortest way to run one from Python (a
notebook)::

    import secemb
    result = secemb.Experiment(dataset="synthetic-mini", model="mf", protocol="secemb").run()
    result.metrics          # {"rmse": 0.97}: the kept (by default the last) epoch's test metrics
    result.traffic          # bytes per user and round, up and down; server to server
    result.model.recommend(user=0, k=10)
    result.model.save("my-model")   # what `secemb train --save-model` writes

:func:`run_experiment` returns the bare :class:`~secemb.training.TrainResult` instead.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from secemb.errors import InvalidParameters
from secemb.inference.trained import TrainedModel
from secemb.metrics import get_metric
from secemb.protocols import PROTOCOLS, protocol_class
from secemb.options import DEFAULT_MODEL, DEFAULTS, RunOptions
from secemb.round.results import EpochStats, RoundStats, TrainConfig, TrainResult
from secemb.training.builder import BuiltExperiment, build_experiment
from secemb.training.loop import train
from secemb.transport.inprocess import InProcessTransport

__all__ = ["Experiment", "ExperimentResult", "run_experiment"]

#: the round loop's defaults (:class:`~secemb.round.results.TrainConfig`) of the fields the command line does not set
_LOOP = TrainConfig()


@dataclass(frozen=True)
class Experiment:
    """A named experiment.  The fields the command line shares take their defaults from
    :class:`~secemb.options.RunOptions` (documented there; ``model`` None there is
    :data:`~secemb.options.DEFAULT_MODEL` here), so ``Experiment(...)`` trains what ``secemb
    train`` with the same options trains (``epochs=5`` by default, as there);
    ``rounds_per_epoch``, ``frac_bits`` and ``schedule`` default to
    :class:`~secemb.round.results.TrainConfig`'s.  :meth:`from_options` makes one of layered
    options (a config file).

    ``lr``, ``reg`` and ``dim`` default to the paper's preset (Table 8)
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

    ``valid_fraction``: the share of each user's training ratings held out as validation data
    (:func:`secemb.data.validation_split`; drawn from the training half, never the test set; 0:
    none, the default); scored after every epoch, never trained on.  A sequential model's task
    holds its own validation items out (leave-one-out) and takes no ``valid_fraction``.
    ``early_stop``: ``None`` (the default: the last epoch's model) or the patience ``P``: keep the
    best validation epoch's model and stop after ``P`` epochs without improvement
    (:attr:`~secemb.round.results.TrainConfig.early_stop`; needs validation data).

    ``metrics``: names from the metric registry (:func:`secemb.metrics.available_metrics`,
    e.g. ``("rmse", "mae")`` or ``("ndcg@10",)``) scored after every epoch; ``None`` the
    model's task's default (RMSE for rating models).  A list is kept as a tuple.

    :meth:`run` trains and returns an :class:`ExperimentResult`.

    Raises
    ------
    InvalidParameters
        On creation, if ``protocol`` is registered but its module cannot be imported,
        ``metrics`` is a string or names an unknown metric, or ``dp_delta``, ``dp_clip`` or
        ``dp_level`` is given (not its default) without a finite ``dp_epsilon``.
    """

    dataset: str = DEFAULTS.dataset
    data_dir: str | os.PathLike | None = DEFAULTS.data_dir
    download: bool = DEFAULTS.download
    test_fraction: float = 0.2
    model: str = DEFAULT_MODEL
    protocol: str = DEFAULTS.protocol
    layout: str | None = DEFAULTS.layout
    relay: bool | None = DEFAULTS.relay
    expansion: float = DEFAULTS.expansion
    backend: str = DEFAULTS.backend
    workers: int | None = DEFAULTS.workers
    bound: bool = DEFAULTS.bound
    epochs: int = DEFAULTS.epochs
    users_per_round: int = DEFAULTS.users_per_round
    m_prime: int | None = DEFAULTS.m_prime
    alpha: float = DEFAULTS.alpha
    m_prime_update: int = DEFAULTS.m_prime_update
    rounds_per_epoch: int | None = _LOOP.rounds_per_epoch
    seed: int = DEFAULTS.seed
    verify: bool = DEFAULTS.verify
    lr: float | None = DEFAULTS.lr
    reg: float | None = DEFAULTS.reg
    dim: int | None = DEFAULTS.dim
    ring_bits: int = DEFAULTS.ring_bits
    frac_bits: int = _LOOP.frac_bits
    lazy_adam: bool = DEFAULTS.lazy_adam
    schedule: Literal["interleaved", "staged"] = _LOOP.schedule
    dp_epsilon: float = DEFAULTS.dp_epsilon
    dp_delta: float = DEFAULTS.dp_delta
    dp_clip: float = DEFAULTS.dp_clip
    dp_level: str = DEFAULTS.dp_level
    metrics: tuple[str, ...] | None = DEFAULTS.metrics
    valid_fraction: float = DEFAULTS.valid_fraction
    early_stop: int | None = DEFAULTS.early_stop

    @classmethod
    def from_options(cls, options: RunOptions, **others: Any) -> Experiment:
        """The experiment of the run's layered options (``secemb train``'s and ``secemb demo``'s;
        :func:`~secemb.options.load_options` reads them from a config file): every field
        the options have, ``model`` when they name one, and ``others`` (the fields the command line
        does not set: ``test_fraction``, ``schedule``, ...).  ``sfsl_preset`` is a one-server
        protocol's option, not an experiment's.

        Raises
        ------
        InvalidParameters
            As on creation.
        """
        taken = {f.name for f in dataclasses.fields(cls)} - {"model"}
        values = {name: getattr(options, name) for name in RunOptions.model_fields if name in taken}
        if options.model is not None:
            values["model"] = options.model
        return cls(**values | others)

    def __post_init__(self) -> None:
        if self.dp_epsilon == DEFAULTS.dp_epsilon:  # no DP (inf): a DP option given alone would be silently ignored
            options = (("dp_delta", self.dp_delta, DEFAULTS.dp_delta), ("dp_clip", self.dp_clip, DEFAULTS.dp_clip),
                       ("dp_level", self.dp_level, DEFAULTS.dp_level))
            given = [f"{k}={v!r}" for k, v, default in options if v != default]
            if given:
                raise InvalidParameters(f"{', '.join(given)} needs a finite dp_epsilon (--dp-epsilon): without it "
                                        "the run has no differential privacy")
        if self.metrics is not None:
            if isinstance(self.metrics, str):
                raise InvalidParameters(f"metrics must be a sequence of metric names, got the string {self.metrics!r}")
            object.__setattr__(self, "metrics", tuple(get_metric(n).name for n in self.metrics))
        if self.protocol not in PROTOCOLS:
            return
        caps = protocol_class(self.protocol).capabilities
        if self.layout is None:
            object.__setattr__(self, "layout", "cuckoo" if "cuckoo" in caps.layouts else "full")
        if self.relay is None:
            object.__setattr__(self, "relay", caps.relay)

    def run(
        self,
        *,
        on_start: Callable[[dict[str, Any]], None] | None = None,
        on_round: Callable[[RoundStats], None] | None = None,
        on_epoch: Callable[[EpochStats], None] | None = None,
        behavior: Callable[[int, int], str | None] | None = None,
        after_round: Callable[[int, int, dict[str, Any], dict[int, BaseException]], None] | None = None,
    ) -> ExperimentResult:
        """Build (:func:`~secemb.training.builder.build_experiment`), train in process and
        return the :class:`ExperimentResult`; the callbacks, ``behavior`` (simulated device
        faults or malicious devices) and ``after_round`` are those of :func:`train`.

        Raises
        ------
        InvalidParameters, secemb.data.DatasetNotFoundError, secemb.training.VerificationError
            As :func:`run_experiment`.
        """
        built = build_experiment(self)
        result = _train_built(built, on_start=on_start, on_round=on_round, on_epoch=on_epoch, behavior=behavior,
                              after_round=after_round)
        return ExperimentResult(self, result, TrainedModel.from_training(built.model, built.train_data, result))


@dataclass(frozen=True)
class ExperimentResult:
    """What :meth:`Experiment.run` returns.

    Attributes
    ----------
    experiment: the experiment that ran.
    train_result: the full :class:`~secemb.training.TrainResult` (every epoch's metrics,
        timings, the configuration; ``to_dict()`` is the JSON document of ``secemb train``).
    model: the :class:`~secemb.inference.trained.TrainedModel` (public model, every device's
        private state): ``recommend(user, k)``, ``save(folder)``.
    """

    experiment: Experiment
    train_result: TrainResult
    model: TrainedModel

    @property
    def metrics(self) -> dict[str, float | None]:
        """The test metrics by name (``Experiment.metrics``) of the model kept: the last epoch's,
        or with ``early_stop`` the best validation epoch's."""
        kept = self.train_result.kept
        return {} if kept is None else dict(kept.test_metrics)

    @property
    def traffic(self) -> dict[str, float]:
        """Bytes that crossed the transport: per user and round up and down, server to server
        per round, and the one-time Eq. 11 count upload per user."""
        r = self.train_result
        return {"upload_bytes_per_user_round": r.upload_bytes_per_user_round,
                "download_bytes_per_user_round": r.download_bytes_per_user_round,
                "server_bytes_per_round": r.server_bytes_per_round,
                "count_bytes_per_user": r.count_bytes_per_user}

    @property
    def model_sha256(self) -> str:
        """SHA-256 of the public model (equal for equal runs, in process or networked)."""
        return self.train_result.model_sha256


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
    return _train_built(build_experiment(exp), transport=transport, on_start=on_start, on_round=on_round,
                        on_epoch=on_epoch)


def _train_built(
    built: BuiltExperiment,
    *,
    transport: InProcessTransport | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    behavior: Callable[[int, int], str | None] | None = None,
    after_round: Callable[[int, int, dict[str, Any], dict[int, BaseException]], None] | None = None,
) -> TrainResult:
    """:func:`train` on a built experiment."""
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
        behavior=behavior,
        after_round=after_round,
    )
