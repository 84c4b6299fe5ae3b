"""Shared pieces of the network tests: a small dataset, clusters of real server processes on
127.0.0.1 (free ports chosen by the OS), and signed clients."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any

from secemb.sim.settings import cluster_settings
from secemb.data import synthetic_like, train_test_split
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig

#: every network test stops by itself: per-request timeout and retry budget (seconds)
WAIT_S = 30.0


def small_data(num_users: int = 30, num_items: int = 60, num_ratings: int = 600, seed: int = 3):
    return train_test_split(synthetic_like(num_users, num_items, num_ratings, seed=seed), 0.2, seed=0)


def setup(protocol: str = "secemb", layout: str = "cuckoo", relay: bool = True, dim: int = 4, **cfg: Any):
    model = MatrixFactorization(dim=dim, reg=0.01)
    proto = get_protocol(protocol, layout=layout, relay=relay)
    config = TrainConfig(**{"epochs": 2, "users_per_round": 12, "seed": 5, **cfg})
    return model, proto, config


@contextlib.contextmanager
def cluster_for(model, proto, train_data, config, *, deadline_s: float = 60.0, faults=None,
                **extra: Any) -> Iterator[LocalCluster]:
    with tempfile.TemporaryDirectory(prefix="secemb-test-") as d:
        settings = cluster_settings(model, proto, train_data, config, deadline_s=deadline_s) | extra
        cluster = LocalCluster(d, faults=faults, **settings)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


def dump_logs(cluster: LocalCluster) -> str:
    out = []
    for p in (0, 1):
        try:
            out.append(f"--- server {p} log ---\n" + cluster.log(p).read_text()[-4000:])
        except OSError:
            pass
    return "\n".join(out)
