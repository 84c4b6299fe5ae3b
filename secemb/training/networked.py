"""``secemb demo --network`` in Python: an :class:`~secemb.training.Experiment` run by two
server processes on 127.0.0.1 and simulated devices (:func:`run_networked_experiment`).

The experiment is built by the same :func:`~secemb.training.builder.build_experiment` as
:func:`secemb.training.run_experiment` (same preset, model and features, protocol, split).  The
simulated devices draw their private state from their own entropy, as deployed devices do; with
``device_randomness="reproducible"`` they draw it from the run's seed, and the result document --
``model_sha256`` included -- equals an in-process run of the same experiment.

Orchestration, like :mod:`secemb.training.experiment`: it runs an experiment on the
simulation's servers (:mod:`secemb.sim`), which never import it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from secemb.data import RatingData
from secemb.data.features import FeatureSet, save_item_features
from secemb.errors import InvalidParameters
from secemb.inference.saved import save_frozen_table
from secemb.models.base import RecModel
from secemb.protocols.base import Protocol
from secemb.round.results import EpochStats, RoundStats, TrainConfig, TrainResult
from secemb.sim.cluster import LocalCluster
from secemb.sim.coordinator import train_networked
from secemb.sim.settings import DeviceRandomness, cluster_settings
from secemb.training.builder import build_experiment
from secemb.training.experiment import Experiment

__all__ = ["run_networked_experiment", "train_on_local_cluster"]


def run_networked_experiment(
    exp: Experiment,
    *,
    workdir: str | os.PathLike | None = None,
    concurrency: int = 8,
    deadline_s: float = 120.0,
    batch_wait_ms: float | None = None,
    device_randomness: DeviceRandomness = "private",
    on_start: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_cluster: Callable[[Any], None] | None = None,
) -> TrainResult:
    """Start both servers (fresh state under ``workdir``, a temporary directory by
    default), train, stop the servers; the result.

    ``concurrency``: devices running at the same time; ``batch_wait_ms``: the servers'
    ``[server] batch_wait_ms`` (``None``: their default); ``device_randomness``: where the
    devices' private draws come from (:data:`~secemb.sim.settings.DeviceRandomness`).
    ``on_cluster`` is called with the running :class:`~secemb.sim.cluster.LocalCluster` (its
    URLs, logs).

    Raises
    ------
    InvalidParameters, secemb.data.DatasetNotFoundError, secemb.training.VerificationError,
    secemb.sim.driver.RoundAborted
    """
    built = build_experiment(exp)
    backend: dict[str, Any] = {} if exp.backend == "serial" else {"backend": exp.backend, "workers": exp.workers}
    if batch_wait_ms is not None:
        backend["batch_wait_ms"] = batch_wait_ms
    return train_on_local_cluster(
        built.model, built.protocol, built.train_data, built.test_data, built.config, workdir=workdir,
        features=built.features, server_options=backend, concurrency=concurrency, deadline_s=deadline_s,
        on_cluster=on_cluster, on_start=on_start, on_round=on_round, on_epoch=on_epoch,
        extra_config=built.extra_config, val_data=built.val_data, device_randomness=device_randomness,
    )


def train_on_local_cluster(
    model: RecModel,
    protocol: Protocol,
    train_data: RatingData,
    test_data: RatingData | None,
    config: TrainConfig,
    *,
    workdir: str | os.PathLike | None = None,
    features: FeatureSet | None = None,
    frozen_table: np.ndarray | None = None,
    server_options: dict[str, Any] | None = None,
    concurrency: int = 8,
    deadline_s: float = 120.0,
    on_cluster: Callable[[Any], None] | None = None,
    **options: Any,
) -> TrainResult:
    """:func:`~secemb.sim.coordinator.train_networked` against two server processes started
    on 127.0.0.1 for this run (fresh state under ``workdir``, a temporary directory by
    default), configured by :func:`~secemb.sim.settings.cluster_settings`; the servers are
    stopped after it.  The devices draw their private state from their own entropy unless
    ``options`` say ``device_randomness="reproducible"``.

    The public data a server process needs beyond its configuration is written beside the
    state directories for the servers to read: ``features``' item features (FM, DeepFM) and
    ``frozen_table``, the recommender's public table that fills GREC's denoiser's frozen
    columns (``[model] frozen_table``).  ``server_options``: more
    :class:`~secemb.server.config.ServerConfig` fields (the backend); ``options``: the keyword
    options of :func:`~secemb.sim.driver.run` (callbacks, ``extra_config``, ``val_data``).

    Raises
    ------
    InvalidParameters
        ``workdir`` holds a previous run's state.
    """
    with tempfile.TemporaryDirectory(prefix="secemb-demo-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        if workdir is not None and any(root.glob("server*/checkpoint.npz")):
            raise InvalidParameters(f"{root} holds a previous run's state; use an empty directory")
        root.mkdir(parents=True, exist_ok=True)
        # the public data the server processes read from files
        feature_file = None if features is None else save_item_features(root / "item_features.npz", features)
        table_file = None if frozen_table is None else save_frozen_table(root / "frozen_table.npz", frozen_table)
        settings = cluster_settings(model, protocol, train_data, config, deadline_s=deadline_s,
                                    item_features=feature_file, frozen_table=table_file)
        settings.update(server_options or {})
        with LocalCluster(root, **settings) as cluster:
            cluster.start()
            if on_cluster is not None:
                on_cluster(cluster)
            return train_networked(cluster, model, protocol, train_data, test_data, config, workers=concurrency,
                                   deadline_s=deadline_s, **options)
