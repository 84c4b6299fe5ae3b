"""The result types every driver shares: a run's configuration (:class:`TrainConfig`), its
per-round and per-epoch figures, the :class:`TrainResult` document, and the configuration
document (:func:`run_config`) an in-process and a networked run both describe themselves with.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from secemb.data import RatingData
from secemb.errors import InvalidParameters, SecembError, check_float, check_int
from secemb.metrics import get_metric
from secemb.models.base import RecModel, UserStore
from secemb.models.optim import AdamConfig
from secemb.options import DEFAULTS
from secemb.outputs import dumps_strict
from secemb.privacy.accounting import DPSettings, planned_rounds
from secemb.protocols.base import Protocol
from secemb.ring import FixedPoint

__all__ = [
    "EpochStats",
    "RoundStats",
    "TrainConfig",
    "TrainResult",
    "VerificationError",
    "run_config",
]

#: the defaults TrainConfig shares beside the run's options' (:data:`~secemb.options.DEFAULTS`): Adam's
#: constants (:class:`~secemb.models.optim.AdamConfig`) and the fixed point's (:class:`~secemb.ring.FixedPoint`)
_ADAM, _FIXED = AdamConfig(), FixedPoint()


class VerificationError(SecembError):
    """``verify=True`` found the protocol's output differing from the direct computation."""


@dataclass(frozen=True)
class TrainConfig:
    """Parameters of the round loop (the model's own hyperparameters live in the model).

    Defaults: an option of the run is its :class:`~secemb.options.RunOptions` default (what
    ``secemb train`` and :class:`~secemb.training.Experiment` default to: 5 epochs, 100 users a
    round, ...); ``lr`` and the Adam constants are :class:`~secemb.models.optim.AdamConfig`'s,
    ``frac_bits`` is :class:`~secemb.ring.FixedPoint`'s.

    Attributes
    ----------
    epochs: passes over the users, >= 1.
    users_per_round: users per round (n_p; the last round of an epoch may have fewer).
    m_prime: public request size m'; ``None`` chooses it by Eq. 11 with ``alpha``.
    alpha: multiplier of the mean rating count in Eq. 11 (2.5 reproduces the paper's m' on
        ML-100K/ML-1M/ML-10M within about 10%).
    seed: seed of the training generator.
    verify: check every round's retrieval and aggregate against the direct computation.
    lr: Adam step size of the servers and of every device.
    beta1, beta2, eps: Adam constants (servers and devices).
    lazy_adam: server Adam updates only rows with a non-zero aggregate (see optimizer.py).
    ring_bits, frac_bits: fixed-point ring Z_{2^k} and fractional bits.
    schedule: ``"interleaved"`` (each user retrieves, trains and uploads before the next
        starts) or ``"staged"`` (all retrievals of the round, then all uploads); both give the
        same model.
    rating_range: public rating scale ``(lo, hi)``: predictions are clipped to it for RMSE
        and the model may seed its global bias with it; ``None`` takes the min and max rating
        of the training set (the scale of MovieLens, 1-5, is public anyway).
    metrics: names from the metric registry (:mod:`secemb.metrics`) scored on the test and
        validation data after every epoch.
    sampling: how each round's users are chosen: ``"permutation"`` (each epoch a seeded
        permutation of the users cut into rounds of ``users_per_round``) or ``"poisson"``
        (each round every user independently with probability ``q = users_per_round / n``,
        ``ceil(n / users_per_round)`` rounds an epoch; what privacy amplification by
        sampling assumes).  Central DP needs ``"poisson"``, DP-FedRec ``"permutation"``.
    dp: differential privacy (:class:`~secemb.privacy.DPSettings`), ``None`` for none: the
        devices clip, and the servers (central: secemb, plaintext, secfedrec) or the devices
        (dp-fedrec) add noise calibrated to the target (:func:`secemb.privacy.plan_dp`).
    m_prime_update: run the Eq. 11 count again before every ``m_prime_update``-th epoch and
        use the new m' from then on (SecEmb Appendix L.2); 0: m' is fixed once.  Needs m' from
        the counts (``m_prime=None``).
    rounds_per_epoch: end every epoch after this many rounds (the users the epoch's
        permutation puts in later rounds, or its later Poisson rounds, sit it out), for runs too
        slow to finish an epoch; ``None``: every round.  Central DP's accountant counts the
        rounds that run (``epochs * min(rounds_per_epoch, ceil(n / users_per_round))``).
    early_stop: ``None`` (the default): the run trains every epoch and keeps the last epoch's
        model.  An int ``P >= 1``: after every epoch the run scores the validation data (which
        it then needs) with the first of ``metrics``, keeps a copy of the best epoch's public
        model and device-private state (:mod:`secemb.round.selection`; a tie keeps the
        earlier epoch), stops after ``P`` epochs in a row without a better score, and returns
        the kept copy (``TrainResult.epoch_kept``).  Refused with ``dp``: the choice of epoch
        reads the validation ratings without noise, which no DP guarantee covers.
    """

    epochs: int = DEFAULTS.epochs
    users_per_round: int = DEFAULTS.users_per_round
    m_prime: int | None = DEFAULTS.m_prime
    alpha: float = DEFAULTS.alpha
    seed: int = DEFAULTS.seed
    verify: bool = DEFAULTS.verify
    lr: float = _ADAM.lr
    beta1: float = _ADAM.beta1
    beta2: float = _ADAM.beta2
    eps: float = _ADAM.eps
    lazy_adam: bool = DEFAULTS.lazy_adam
    ring_bits: int = DEFAULTS.ring_bits
    frac_bits: int = _FIXED.frac_bits
    schedule: Literal["interleaved", "staged"] = "staged"
    rating_range: tuple[float, float] | None = None
    metrics: tuple[str, ...] = ("rmse",)
    sampling: Literal["permutation", "poisson"] = "permutation"
    dp: DPSettings | None = None
    m_prime_update: int = DEFAULTS.m_prime_update
    rounds_per_epoch: int | None = None
    early_stop: int | None = DEFAULTS.early_stop

    def __post_init__(self) -> None:
        optional = ("m_prime", "rounds_per_epoch", "early_stop")  # None or an int >= 1
        for name, low in (("epochs", 1), ("users_per_round", 1), ("seed", 0), ("m_prime_update", 0),
                          *((n, 1) for n in optional)):
            value = getattr(self, name)
            if value is not None or name not in optional:
                object.__setattr__(self, name, check_int(name, value, low=low))  # a numpy int as an int
        check_float("alpha", self.alpha, above=0)
        if self.schedule not in ("interleaved", "staged"):
            raise InvalidParameters(
                f"schedule must be 'interleaved' or 'staged', got {self.schedule!r}"
            )
        if self.rating_range is not None:
            lo, hi = self.rating_range
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise InvalidParameters(
                    f"rating_range must be (lo, hi) with lo < hi, got {self.rating_range!r}"
                )
        if isinstance(self.metrics, str) or not self.metrics:
            raise InvalidParameters(f"metrics must be a non-empty tuple of metric names, got {self.metrics!r}")
        object.__setattr__(self, "metrics", tuple(get_metric(n).name for n in self.metrics))
        if self.sampling not in ("permutation", "poisson"):
            raise InvalidParameters(f"sampling must be 'permutation' or 'poisson', got {self.sampling!r}")
        if self.m_prime_update and self.m_prime is not None:
            raise InvalidParameters("m_prime_update recounts m' from the devices' counts: it needs m_prime=None "
                                    f"(m' given as {self.m_prime})")
        if self.dp is not None and not isinstance(self.dp, DPSettings):
            raise InvalidParameters(f"dp must be a DPSettings or None, got {type(self.dp).__name__}")
        if self.early_stop is not None and self.dp is not None:
            raise InvalidParameters("early_stop chooses the epoch by the validation ratings without noise, which the "
                                    "DP guarantee does not cover: train without early_stop under DP")
        if self.dp is not None and self.verify:
            raise InvalidParameters("verify compares the model with the noiseless sums: it cannot run with DP")
        FixedPoint(self.ring_bits, self.frac_bits)  # validates both
        self.adam()  # validates lr and the Adam constants

    def adam(self) -> AdamConfig:
        """The Adam hyperparameters shared by the servers and the devices."""
        return AdamConfig(self.lr, self.beta1, self.beta2, self.eps)


@dataclass(frozen=True)
class EpochStats:
    """Metrics after one epoch: test RMSE (predictions clipped to the rating scale; ``None``
    with no test data or when ``rmse`` is not among the run's metrics), the mean local
    objective over the epoch's participations, the RMSE on the validation data if
    :func:`train` was given any (for choosing an epoch without looking at the test data), and
    every metric of the run (``TrainConfig.metrics``) on both, by name."""

    epoch: int
    test_rmse: float | None
    train_loss: float
    val_rmse: float | None = None
    test_metrics: dict[str, float | None] = field(default_factory=dict)
    val_metrics: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundStats:
    """What one round cost; passed to the ``on_round`` callback."""

    round_id: int
    epoch: int
    users: int
    upload_bytes: int
    download_bytes: int
    server_bytes: int
    user_s: float
    server0_s: float
    server1_s: float
    optimizer_s: float
    verified: bool
    train_loss: float


@dataclass
class TrainResult:
    """Outcome of :func:`train`.  :meth:`to_dict` gives the documented JSON document.

    Communication is ``len()`` of the bytes that crossed the transport.  ``aborted_rounds``
    counts round attempts that ended aborted and were retried (networked runs with faults).  Per-user figures are
    totals divided by the number of user participations (one user in one round).  The one-time
    Eq. 11 count exchange is reported apart (``count_bytes_per_user``), as is server-to-server
    traffic (aggregate share and model sync).
    """

    config: dict[str, Any]
    epochs: list[EpochStats]
    upload_bytes_per_user_round: float
    download_bytes_per_user_round: float
    server_bytes_per_round: float
    count_bytes_per_user: float
    user_ms_per_round: float
    server_s_per_round: float
    server0_s_per_round: float
    server1_s_per_round: float
    optimizer_s_per_round: float
    verified_rounds: int
    rounds: int
    participations: int
    truncated_participations: int
    model_sha256: str
    wall_s: float
    table: np.ndarray = field(repr=False)
    dense: np.ndarray = field(repr=False)
    user_store: UserStore = field(repr=False)
    aborted_rounds: int = 0
    #: differential privacy spent (:meth:`secemb.privacy.DPPlan.privacy_block`); ``None`` without DP
    privacy: dict[str, Any] | None = None
    #: the epoch whose model ``table``, ``dense``, ``user_store`` and ``model_sha256`` are: the
    #: best validation epoch under ``TrainConfig.early_stop``; 0 (the default) becomes the last epoch
    epoch_kept: int = 0

    def __post_init__(self) -> None:
        if not self.epoch_kept and self.epochs:
            self.epoch_kept = self.epochs[-1].epoch

    @property
    def kept(self) -> EpochStats | None:
        """The statistics of the kept epoch (:attr:`epoch_kept`); ``None`` for a run of no epoch."""
        return next((e for e in self.epochs if e.epoch == self.epoch_kept), None)

    def selection(self) -> dict[str, Any]:
        """Which epoch the model is and how it was chosen (the result document's and a saved
        model's ``selection``): ``epoch_kept``, ``epochs_run``, ``valid_fraction`` (the share of
        each user's training ratings held out for validation, as the config records it; 0 where
        it records none), ``early_stop`` (the patience; ``None``: the last epoch kept),
        ``metric`` (the validation metric that chose; ``None`` without early stopping) and
        ``valid_per_epoch`` (that metric on the validation data after each epoch; ``None``
        without early stopping)."""
        patience = self.config.get("early_stop")
        metric = self.config["metrics"][0] if patience is not None else None
        return {"epoch_kept": self.epoch_kept, "epochs_run": len(self.epochs),
                "valid_fraction": self.config.get("valid_fraction", 0.0), "early_stop": patience, "metric": metric,
                "valid_per_epoch": None if metric is None else [e.val_metrics.get(metric) for e in self.epochs]}

    def to_dict(self) -> dict[str, Any]:
        """The result document (the schema is documented in docs/training.md)."""
        return {
            "config": dict(self.config),
            "epochs": [asdict(e) for e in self.epochs],
            "comm": {
                "upload_bytes_per_user_round": self.upload_bytes_per_user_round,
                "download_bytes_per_user_round": self.download_bytes_per_user_round,
            },
            "time": {
                "user_ms_per_round": self.user_ms_per_round,
                "server_s_per_round": self.server_s_per_round,
            },
            "verified_rounds": self.verified_rounds,
            "rounds": self.rounds,
            "model_sha256": self.model_sha256,
            "selection": self.selection(),
            **({} if self.privacy is None else {"privacy": dict(self.privacy)}),
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as strict JSON text (``json.dumps`` keywords pass through).

        Raises
        ------
        secemb.outputs.NonFiniteValue
            A figure is NaN or infinite (not JSON); the message names it.
        """
        return dumps_strict(self.to_dict(), **kwargs)

    @property
    def final_rmse(self) -> float | None:
        """Test RMSE of the model the result holds: the kept epoch's (:attr:`epoch_kept`; the
        last epoch's without early stopping)."""
        kept = self.kept
        return None if kept is None else kept.test_rmse


def run_config(
    model: RecModel,
    protocol: Protocol,
    cfg: TrainConfig,
    train_data: RatingData,
    test_data: RatingData | None,
    m_prime: int,
    m_prime_source: str,
    mean_count: float | None,
    rating_range: tuple[float, float],
    active_users: int,
    extra_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``config`` document of a run's result (shared by every driver, so that an
    in-process run and a networked run describe themselves identically)."""
    return {
        **(extra_config or {}),
        "model": model.name,
        "model_hparams": model.hparams(),
        "protocol": getattr(protocol, "name", type(protocol).__name__),
        "layout": protocol.layout,
        "relay": protocol.relay,
        "expansion": protocol.expansion if protocol.layout == "cuckoo" else None,
        "epochs": cfg.epochs,
        "users_per_round": cfg.users_per_round,
        "m_prime": m_prime,
        "m_prime_source": m_prime_source,
        "alpha": cfg.alpha,
        "mean_rating_count": mean_count,
        "seed": cfg.seed,
        "verify": cfg.verify,
        "lr": cfg.lr,
        "adam_betas": [cfg.beta1, cfg.beta2],
        "adam_eps": cfg.eps,
        "lazy_adam": cfg.lazy_adam,
        "ring_bits": cfg.ring_bits,
        "frac_bits": cfg.frac_bits,
        "schedule": cfg.schedule,
        "rating_range": list(rating_range),
        "metrics": list(cfg.metrics),
        "sampling": cfg.sampling,
        "dp": None if cfg.dp is None else asdict(cfg.dp),
        "num_users": train_data.num_users,
        "num_items": train_data.num_items,
        "num_train_ratings": len(train_data),
        "num_test_ratings": 0 if test_data is None else len(test_data),
        "active_users": active_users,
        "rounds_per_epoch": cfg.rounds_per_epoch,
        "early_stop": cfg.early_stop,
        "total_rounds": planned_rounds(cfg.epochs, active_users, cfg.users_per_round, cfg.rounds_per_epoch),
    }


