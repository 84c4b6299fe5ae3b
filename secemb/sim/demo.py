"""``secemb demo --network`` in Python: an :class:`~secemb.training.Experiment` run by two
server processes on 127.0.0.1 and simulated devices (:func:`run_networked_experiment`).

The experiment is built by the same :func:`~secemb.training.builder.build_experiment` as
:func:`secemb.training.run_experiment` (same preset, model and features, protocol, split), so the result
document -- ``model_sha256`` included -- can be compared with an in-process run of the same experiment.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from secemb.engine.settings import cluster_settings
from secemb.sim.coordinator import train_networked
from secemb.errors import InvalidParameters
from secemb.data.features import save_item_features
from secemb.training import Experiment
from secemb.training.builder import build_experiment
from secemb.training.results import EpochStats, RoundStats, TrainResult

__all__ = ["run_networked_experiment"]


def run_networked_experiment(
    exp: Experiment,
    *,
    workdir: str | os.PathLike | None = None,
    concurrency: int = 8,
    deadline_s: float = 120.0,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    on_round: Callable[[RoundStats], None] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_cluster: Callable[[Any], None] | None = None,
) -> TrainResult:
    """Start both servers (fresh state under ``workdir``, a temporary directory by
    default), train, stop the servers; the result.

    ``concurrency``: devices running at the same time.  ``on_cluster`` is called with the
    running :class:`~secemb.sim.cluster.LocalCluster` (its URLs, logs).

    Raises
    ------
    InvalidParameters, secemb.data.DatasetNotFoundError, secemb.training.VerificationError,
    secemb.engine.driver.RoundAborted
    """
    from secemb.sim.cluster import LocalCluster

    built = build_experiment(exp)
    model, protocol, config = built.model, built.protocol, built.config
    with tempfile.TemporaryDirectory(prefix="secemb-demo-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        if workdir is not None and any(root.glob("server*/checkpoint.npz")):
            raise InvalidParameters(f"{root} holds a previous run's state; use an empty directory")
        features = None
        if built.features is not None:  # the servers read the public item features from a file
            root.mkdir(parents=True, exist_ok=True)
            features = save_item_features(root / "item_features.npz", built.features)
        settings = cluster_settings(model, protocol, built.train_data, config, deadline_s=deadline_s,
                                    item_features=features)
        if exp.backend != "serial":
            settings.update(backend=exp.backend, workers=exp.workers)
        with LocalCluster(root, **settings) as cluster:
            cluster.start()
            if on_cluster is not None:
                on_cluster(cluster)
            return train_networked(
                cluster, model, protocol, built.train_data, built.test_data, config, workers=concurrency,
                deadline_s=deadline_s, on_start=on_start, on_round=on_round, on_epoch=on_epoch,
                extra_config=built.extra_config, val_data=built.val_data,
            )
