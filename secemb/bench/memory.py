"""``secemb bench memory``: per-user memory and storage during training (SecEmb Appendix K.2,
Figure 8), SecEmb (the device holds only its rows) against full-model training (SecFedRec).

Storage
    Parameters the device keeps for a round: SecEmb ``m'_u w`` (its rated rows; ``m'_u`` = the
    dataset's mean training count) ``+ P + P_u``; full model ``m w + P + P_u`` (``P_u`` the
    private vector).  Counted from the arrays the round actually holds (their ``.size``).
Memory
    Peak resident memory of a fresh process doing one user's round work -- receiving its
    parameters (the rows it holds, all ``m`` for the full model, and the dense vector) in ring
    form, decoding them, one local step with batch size 1 (one rating, as the paper), encoding
    the gradient -- minus the process's resident memory just before (after imports, with only
    the model object and the features built).  Read from ``/proc/self/status`` (``VmHWM`` - ``VmRSS``), one
    spawned process per configuration, so nothing is shared between measurements.  Linux only.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from secemb.bench.comm import DATASETS, MODELS
from secemb.bench.rss import reset_peak, status_kb

__all__ = ["measure", "run"]


def _child(model_name: str, dataset: str, mode: str, q: Any) -> None:
    from secemb.bench.comm import _build_model
    from secemb.data.features import synthetic_features
    from secemb.models.batch import rating_batch
    from secemb.models.optim import AdamConfig
    from secemb.ring import FixedPoint

    import torch  # noqa: F401  (imported before the baseline, like every other library)

    torch.set_num_threads(1)
    m, m_prime, mean = DATASETS[dataset]
    held = m if mode == "full" else mean
    # features with the dataset's counts; one user (the device), ``held`` catalogue rows
    feats = synthetic_features(dataset, 1, held)
    model = _build_model(model_name, dataset, feats)
    fp = FixedPoint(32, 16)
    reset_peak()
    base = status_kb("VmRSS")
    # everything from here is the device's round: its parameters arrive, it trains, encodes
    table, dense = model.init_public(held, np.random.default_rng(0))
    rows_ring, dense_ring = fp.encode(table), fp.encode(dense)  # as received
    del table, dense
    store = model.new_user_store(1, np.random.default_rng(1), AdamConfig())
    rows = fp.decode(rows_ring)
    dense_f = fp.decode(dense_ring)
    step = model.local_step(rows, dense_f, store.state(0), rating_batch(np.array([0]), np.array([4.0])))
    g = fp.encode_clipped(step.row_grads, 100)
    d = fp.encode_clipped(step.dense_grad, 100)
    peak = status_kb("VmHWM")
    storage = rows.size + dense_f.size + store.private_size
    q.put({"memory_mb": (peak - base) * 1024 / 1e6, "storage_params": int(storage), "held_rows": int(held),
           "grad_bytes": int(g.nbytes + d.nbytes)})


def measure(model: str, dataset: str, mode: str) -> dict[str, Any]:
    """Memory and storage of one user in a fresh process (``mode``: ``secemb`` or ``full``)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(model, dataset, mode, q))
    proc.start()
    res = q.get(timeout=600)
    proc.join()
    return res


def run(models: Sequence[str] = MODELS, datasets: Sequence[str] = ("ml-1m", "ml-10m", "ml-25m", "yelp"), *,
        out: str | Path | None = "results/memory", progress: Any = None) -> list[dict[str, Any]]:
    t_all = time.perf_counter()
    jobs = [(d, mo) for d in datasets for mo in models]
    task = progress.add_task("memory", total=2 * len(jobs)) if progress is not None else None
    rows = []
    for d, mo in jobs:
        r: dict[str, Any] = {"model": mo, "dataset": d, "m": DATASETS[d][0]}
        for mode, label in (("secemb", "secemb"), ("full", "secfedrec")):
            res = measure(mo, d, mode)
            r[f"{label}_memory_mb"] = res["memory_mb"]
            r[f"{label}_storage_kparams"] = res["storage_params"] / 1e3
            if progress is not None:
                progress.update(task, advance=1, description=f"memory {mo} {d} {mode}")
        r["memory_saving"] = r["secfedrec_memory_mb"] / max(r["secemb_memory_mb"], 1e-9)
        r["storage_saving"] = r["secfedrec_storage_kparams"] / r["secemb_storage_kparams"]
        rows.append(r)
    if out is not None:
        from secemb.bench.plots import line_panels
        from secemb.bench.tables import write_csv, write_markdown

        out = Path(out)
        cols = ["model", "dataset", "m", "secemb_memory_mb", "secfedrec_memory_mb", "memory_saving",
                "secemb_storage_kparams", "secfedrec_storage_kparams", "storage_saving"]
        write_csv(out / "memory.csv", rows, cols)
        write_markdown(out / "memory.md", "Appendix K.2 — per-user training memory (MB) and storage (10^3 parameters)",
                       rows, cols, [f"Wall time {time.perf_counter() - t_all:.0f} s. Paper's average savings (memory / "
                                    "storage): ML-1M 12x / 13x, ML-10M 21x / 23x, ML-25M 101x / 111x, "
                                    "Yelp 214x / 247x."])
        order = list(dict.fromkeys(datasets))  # as asked for; the default is the natural order
        panels = {mo: {label: [next(r[key] for r in rows if r["model"] == mo and r["dataset"] == d) for d in order]
                       for label, key in (("secemb", "secemb_memory_mb"), ("full model", "secfedrec_memory_mb"))}
                  for mo in dict.fromkeys(models)}
        line_panels(out / "memory.png", panels, xlabel="dataset", ylabel="peak MB per user", x=order, logy=True,
                    title="Per-user training memory (Appendix K.2)")
    return rows
