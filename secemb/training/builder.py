"""Build an experiment -- data, split, hyperparameters, features, model, protocol, training
configuration -- once, for every driver: :func:`secemb.training.run_experiment` (``secemb
train``), the networked demo (``secemb demo --network``) and the benchmark harnesses.  Two runs
built from one :class:`~secemb.training.Experiment` then differ only in how they are driven,
so their ``model_sha256`` can be compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from secemb.data import DATASETS, RatingData, load_dataset, validation_split
from secemb.data.features import FeatureSet, load_features
from secemb.data.synthetic import STANDS_FOR
from secemb.errors import InvalidParameters, check_float
from secemb.metrics.evaluate import check_metrics
from secemb.models import MODELS, PRESETS, RecModel, get_model, get_preset, uses_features
from secemb.privacy.accounting import DPSettings
from secemb.protocols import get_protocol
from secemb.protocols.backends import make_backend
from secemb.protocols.base import Protocol
from secemb.protocols.lossy import lossy_options
from secemb.round.results import TrainConfig

if TYPE_CHECKING:  # pragma: no cover
    from secemb.training.experiment import Experiment

__all__ = ["BuiltExperiment", "build_experiment", "experiment_hparams"]


@dataclass(frozen=True)
class BuiltExperiment:
    """Everything a driver needs to run an :class:`~secemb.training.Experiment`.

    Attributes
    ----------
    model: the model, built with ``features`` when it uses them.
    protocol: the protocol, with the experiment's options (and backend) applied.
    config: the training configuration.
    train_data, test_data: the split of the dataset (same id spaces) by the model's task
        (:meth:`~secemb.models.task.Task.split`: a random split for ratings, leave-one-out for
        sequences).
    extra_config: what the run records beside ``config`` (dataset, split, dim, reg).
    features: the dataset's side features for a feature model (FM, DeepFM), else ``None``.
    val_data: the validation set: the task's own (leave-one-out's second-to-last items) or,
        with ``valid_fraction``, the ratings :func:`~secemb.data.validation_split` held out of
        the training split (``train_data`` is then what is left); else ``None``.
    """

    model: RecModel
    protocol: Protocol
    config: TrainConfig
    train_data: RatingData
    test_data: RatingData
    extra_config: dict[str, Any]
    features: FeatureSet | None
    val_data: RatingData | None = None


def _preset_dataset(name: str) -> str:
    """The dataset whose Table 8 preset ``name`` uses: a synthetic stand-in its model's, own
    rating files (any name outside :data:`~secemb.data.DATASETS`) ML-100K's."""
    return STANDS_FOR.get(name, name) if name in DATASETS else "ml-100k"


def experiment_hparams(exp: Experiment) -> dict[str, Any]:
    """``{"dim", "lr", "reg"}`` of ``exp``: the values given, the rest from the paper's preset
    (Table 8) of ``exp.model`` on the dataset.  A model without presets (one added with
    :func:`~secemb.models.register_model`) needs all three.

    Raises
    ------
    InvalidParameters
        A value is missing and there is no preset for the model (the message names the
        missing fields).
    """
    given = {"dim": exp.dim, "lr": exp.lr, "reg": exp.reg}
    missing = [k for k, v in given.items() if v is None]
    if not missing:
        return given
    if exp.model not in PRESETS:
        if exp.model not in MODELS:  # a typo: giving dim, lr and reg would not help
            raise InvalidParameters(f"no preset for model {exp.model!r}: no such model; available: {sorted(MODELS)}")
        raise InvalidParameters(
            f"no preset for model {exp.model!r}; known: {sorted(PRESETS)} -- give {', '.join(missing)} "
            "(dim, lr and reg all given need no preset)"
        )
    preset = get_preset(exp.model, _preset_dataset(exp.dataset))
    return {k: getattr(preset, k) if v is None else v for k, v in given.items()}


def _dp_options(exp: Experiment) -> dict[str, Any]:
    """TrainConfig's ``dp`` and ``sampling`` for the experiment: none for ``dp_epsilon = inf``;
    Poisson sampling for a protocol whose servers add the noise (central DP)."""
    if exp.dp_epsilon == float("inf"):
        return {}
    dp = DPSettings(exp.dp_epsilon, exp.dp_delta, exp.dp_clip, exp.dp_level)
    central = get_protocol(exp.protocol, layout=exp.layout).capabilities.central_dp
    return {"dp": dp, "sampling": "poisson" if central else "permutation"}


def build_experiment(exp: Experiment) -> BuiltExperiment:
    """Load, split and build ``exp``.  Bad options fail before any data is loaded.

    Raises
    ------
    InvalidParameters
        Unknown dataset, model or protocol, a bad option or value, a missing hyperparameter
        (:func:`experiment_hparams`).
    secemb.data.DatasetNotFoundError
        Dataset files are missing (the message says where to put them).
    """
    options: dict[str, Any] = {"layout": exp.layout, "relay": exp.relay, "expansion": exp.expansion}
    if exp.bound:  # bounded payloads (SecEmb's option; another protocol refuses it): n of the bound
        if exp.dp_epsilon != float("inf"):
            # central DP samples each round's users by Poisson sampling, so a round may exceed the
            # n the bound's t is made for (server 0 refuses to open it): refused before any round
            raise InvalidParameters("--bound proves payloads for a fixed number of users per round; it cannot be "
                                    "combined with --dp-epsilon, whose Poisson sampling varies that number")
        options |= {"bound": True, "users_per_round": exp.users_per_round}
    get_protocol(exp.protocol, **options)  # a bad protocol or option fails before any data is loaded
    hp = experiment_hparams(exp)
    check_float("test_fraction", exp.test_fraction, above=0, below=1)
    check_float("valid_fraction", exp.valid_fraction, low=0, below=1)
    data = load_dataset(exp.dataset, exp.data_dir, download=exp.download, seed=exp.seed)
    features = None
    if uses_features(exp.model):  # FM, DeepFM: Appendix H side features
        features = load_features(
            exp.dataset, exp.data_dir, num_users=data.num_users, num_items=data.num_items, seed=exp.seed
        )
    model = get_model(exp.model, dim=hp["dim"], reg=hp["reg"], **({} if features is None else {"features": features}))
    task = model.task
    train_data, val_data, test_data = task.split(data, exp.test_fraction, exp.seed)
    if exp.valid_fraction:
        if val_data is not None:
            raise InvalidParameters(f"the {task.name} task holds its own validation set out (leave-one-out's "
                                    "second-to-last items; early_stop uses it): give no valid_fraction")
        train_data, val_data = validation_split(train_data, exp.valid_fraction, exp.seed)
    if exp.early_stop is not None and val_data is None:
        raise InvalidParameters("early_stop keeps the best validation epoch: give valid_fraction > 0")
    metrics = task.metrics if exp.metrics is None else exp.metrics
    check_metrics(model, metrics, train_data.ratings)  # before any epoch
    options.update(lossy_options(exp.protocol, model, _preset_dataset(exp.dataset)))
    if exp.backend != "serial":
        options["backend"] = make_backend(exp.backend, exp.workers)
    config = TrainConfig(
        epochs=exp.epochs,
        users_per_round=exp.users_per_round,
        m_prime=exp.m_prime if exp.m_prime is not None else task.default_m_prime(data.num_items),
        alpha=exp.alpha,
        m_prime_update=exp.m_prime_update,
        rounds_per_epoch=exp.rounds_per_epoch,
        seed=exp.seed,
        verify=exp.verify,
        lr=hp["lr"],
        lazy_adam=exp.lazy_adam,
        ring_bits=exp.ring_bits,
        frac_bits=exp.frac_bits,
        schedule=exp.schedule,
        metrics=metrics,
        early_stop=exp.early_stop,
        **_dp_options(exp),
    )
    extra = {"dataset": exp.dataset, "test_fraction": exp.test_fraction, "valid_fraction": float(exp.valid_fraction),
             "split_seed": exp.seed,
             "dim": hp["dim"], "reg": hp["reg"], "task": task.name, "evaluation": task.evaluation}
    return BuiltExperiment(model, get_protocol(exp.protocol, **options), config, train_data, test_data, extra, features,
                           val_data)
