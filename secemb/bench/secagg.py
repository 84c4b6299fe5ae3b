"""``secemb bench secagg``: the private set union and secure aggregation of :mod:`secemb.secagg`
measured in process -- bytes are ``len()`` of the real messages, seconds each party's own work.

Two sweeps, in the setting of secure federated submodel learning's evaluation:

* PSU (its Table VI): ``n`` clients, the exact filter over a ``domain`` of goods (143,534, the
  paper's setting: identity hash, no partitions), each client's set ``set_size`` random goods;
  per-client upload and download, client seconds, server seconds.
* Dropouts (its Figure 6, PSU line): the largest ``n``, a share of the clients dropping after
  ShareKeys (they sent their Shamir shares, not their masked input: the case that makes the
  server recover pairwise masks); the server's seconds.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Sequence
from typing import Any

import numpy as np

from secemb.bench.progress import Steps, reported
from secemb.errors import InvalidParameters
from secemb.secagg import BloomParams, default_threshold, run_psu

__all__ = ["psu_costs", "run"]

def _mean(values: Sequence[float]) -> float:
    return float(np.mean(list(values))) if len(values) else 0.0


def psu_costs(n: int, domain: int, set_size: int, dropout: float = 0.0, seed: int = 0) -> dict[str, Any]:
    """One PSU of ``n`` clients with the exact filter over ``domain``; ``dropout`` of them drop
    after ShareKeys."""
    g = np.random.default_rng(seed)
    sets = {i: g.choice(domain, set_size, replace=False) for i in range(n)}
    drops = {i: 2 for i in range(math.floor(dropout * n))}
    res = run_psu(BloomParams.exact(domain), sets, default_threshold(n), drop_after=drops)
    live = res.receivers
    return {
        "n": n, "domain": domain, "set_size": set_size, "dropout": dropout, "threshold": default_threshold(n),
        "union": int(res.union.size),
        "client_upload_bytes": _mean([res.upload_bytes[c] for c in live]),
        "client_download_bytes": _mean([res.download_bytes[c] for c in live]),
        "client_s": _mean([res.client_seconds[c] for c in live]),
        "server_s": res.server_seconds,
        "server_unmask_s": res.transcript.server_seconds["Unmasking"],
    }


def run(
    ns: Sequence[int] = (20, 40, 60, 80, 100),
    dropouts: Sequence[float] = (0.0, 0.05, 0.1, 0.15, 0.2),
    domain: int = 143_534,
    set_size: int = 329,
    quick: bool = False,
    repeats: int = 1,
    progress: Steps | None = None,
) -> dict[str, Any]:
    """Both sweeps; seconds are the minimum over ``repeats`` runs (bytes do not vary);
    ``quick`` shrinks them to a smoke test (n <= 10, domain 2,000); ``progress`` hears of every
    run.  One untimed PSU of 3 clients runs first (the warm-up: first-call costs in no figure)."""
    if quick:
        ns, dropouts, domain, set_size = tuple(x for x in ns if x <= 10) or (6,), (0.0, 0.2), 2_000, 20
    if repeats < 1:
        raise InvalidParameters(f"repeats must be >= 1, got {repeats}")
    # the runs, in order: the PSU sweep over n, then the dropout sweep at the largest n (its
    # dropout-0 point is the sweep's own when the largest n comes last)
    settings = [(n, 0.0) for n in ns]
    reuse = {ratio for ratio in dropouts if ratio == 0 and ns[-1] == max(ns)}
    settings += [(max(ns), ratio) for ratio in dropouts if ratio not in reuse]
    plan = [(n, ratio, k) for n, ratio in dict.fromkeys(settings) for k in range(repeats)]
    psu_costs(3, 200, 10)  # warm-up, untimed: first-call costs are in no figure
    runs: dict[tuple[int, float], list[dict[str, Any]]] = {}
    for n, ratio, _ in reported(plan, progress,
                                lambda s: f"PSU n={s[0]}, dropout {s[1]:.0%}, run {s[2] + 1}/{repeats}"):
        runs.setdefault((n, ratio), []).append(psu_costs(n, domain, set_size, dropout=ratio))

    def best(n: int, ratio: float) -> dict[str, Any]:
        row = dict(runs[(n, ratio)][0])  # bytes are the same in every run (same sets, same dropouts)
        for key in ("client_s", "server_s", "server_unmask_s"):
            row[key] = min(r[key] for r in runs[(n, ratio)])
        row["repeats"] = repeats
        return row

    psu = [best(n, 0.0) for n in ns]
    drop = [psu[-1] if ratio in reuse else best(max(ns), ratio) for ratio in dropouts]
    return {"warm_up": "one untimed PSU of 3 clients over 200 goods before the timed runs",
            "machine": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "load_average": os.getloadavg(), "psu": psu, "dropout": drop}
