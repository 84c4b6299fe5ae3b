"""``secemb demo --network`` in Python: an :class:`~secemb.training.Experiment` run by two
server processes on 127.0.0.1 and simulated devices (:func:`run_networked_experiment`).

The experiment is built exactly as :func:`secemb.training.run_experiment` builds it (same
preset, model, protocol, split), so the result document -- ``model_sha256`` included -- can
be compared with an in-process run of the same experiment.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from secemb.client.coordinator import cluster_settings, train_networked
from secemb.data import load_dataset, train_test_split
from secemb.errors import InvalidParameters
from secemb.models import get_model, get_preset
from secemb.protocols import get_protocol
from secemb.training import Experiment
from secemb.training.loop import EpochStats, RoundStats, TrainConfig, TrainResult

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
    running :class:`~secemb.server.cluster.LocalCluster` (its URLs, logs).

    Raises
    ------
    InvalidParameters, secemb.data.DatasetNotFoundError, secemb.training.VerificationError,
    secemb.client.coordinator.RoundAborted
    """
    from secemb.server.cluster import LocalCluster

    protocol = get_protocol(exp.protocol, layout=exp.layout, relay=exp.relay, expansion=exp.expansion)
    preset = get_preset(exp.model, exp.dataset.removeprefix("synthetic-"))
    dim = preset.dim if exp.dim is None else exp.dim
    reg = preset.reg if exp.reg is None else exp.reg
    lr = preset.lr if exp.lr is None else exp.lr
    model = get_model(exp.model, dim=dim, reg=reg)
    config = TrainConfig(
        epochs=exp.epochs, users_per_round=exp.users_per_round, m_prime=exp.m_prime, alpha=exp.alpha,
        seed=exp.seed, verify=exp.verify, lr=lr, lazy_adam=exp.lazy_adam, ring_bits=exp.ring_bits,
        frac_bits=exp.frac_bits, schedule=exp.schedule,
    )
    if not 0.0 < exp.test_fraction < 1.0:
        raise InvalidParameters(f"test_fraction must be in (0, 1), got {exp.test_fraction!r}")
    data = load_dataset(exp.dataset, exp.data_dir, download=exp.download, seed=exp.seed)
    train_data, test_data = train_test_split(data, exp.test_fraction, seed=exp.seed)
    extra = {"dataset": exp.dataset, "test_fraction": exp.test_fraction, "split_seed": exp.seed, "dim": dim,
             "reg": reg}
    settings = cluster_settings(model, protocol, train_data, config, deadline_s=deadline_s)
    if exp.backend != "serial":
        settings.update(backend=exp.backend, workers=exp.workers)
    with tempfile.TemporaryDirectory(prefix="secemb-demo-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        if workdir is not None and any(root.glob("server*/checkpoint.npz")):
            raise InvalidParameters(f"{root} holds a previous run's state; use an empty directory")
        with LocalCluster(root, **settings) as cluster:
            cluster.start()
            if on_cluster is not None:
                on_cluster(cluster)
            return train_networked(
                cluster, model, protocol, train_data, test_data, config, workers=concurrency,
                deadline_s=deadline_s, on_start=on_start, on_round=on_round, on_epoch=on_epoch,
                extra_config=extra,
            )
