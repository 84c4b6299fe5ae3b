"""``secemb bench accuracy``: Table 3 -- test RMSE (mean +- std over seeds) on MovieLens-100K
for MF, NCF, FM and DeepFM under SecEmb and under each lossy baseline, in one harness.

What runs
    Every run is :func:`secemb.training.train` (the federated round loop) on the 80/20 split of
    the seed, the Table 8 preset, 100 users per round, m' = 200 (the paper's), with the Appendix H
    features.  ``secemb`` rows are trained with the ``plaintext`` protocol: the loop's
    ``--verify`` proves every round of a SecEmb run bit-identical to the plaintext run of the same
    seed (ring sums are exact), and :func:`equivalence_check` re-proves it here for every model
    (two rounds of each under both protocols, same ``model_sha256``).  Lossy rows (``quant8``,
    ``ternary``, ``svd``, ``colr``) run their real protocol: compression, secret sharing,
    aggregation and decompression.

Choosing the epoch
    The 20 % split is cut at random into a validation half and a test half
    (:func:`split_held_out`).  ``selected`` is the test-half RMSE after the epoch with the
    lowest validation-half RMSE -- early stopping that never looks at the test half (NCF
    overfits after about 80 of the paper's 200 epochs).  ``final`` and ``best`` are on the
    whole 20 % split, as the paper's figures.

Resumable
    Each run writes ``<out>/runs/<model>-<protocol>-seed<k>.json`` (per-epoch RMSE, bytes,
    wall time); an existing file is reused, so an interrupted table continues where it stopped.

Output
    ``<out>/table3.md``, ``table3.csv`` (one row per model and protocol: RMSE of the last epoch,
    of the selected epoch and of the best epoch, mean +- std over seeds, epochs, seeds, wall
    time) and
    ``table3.png`` (test RMSE per epoch, one panel per model).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from secemb.errors import InvalidParameters

__all__ = ["PAPER_TABLE3", "equivalence_check", "run", "run_one", "split_held_out"]

#: Table 3, ML-100K column: (RMSE mean, std, upload reduction ratio)
PAPER_TABLE3: dict[tuple[str, str], tuple[float, float, float]] = {
    ("mf", "quant8"): (0.948, 0.004, 4.00), ("mf", "ternary"): (0.951, 0.002, 8.0),
    ("mf", "svd"): (0.952, 0.006, 5.22), ("mf", "colr"): (0.951, 0.001, 5.42),
    ("mf", "secemb"): (0.944, 0.003, 4.99),
    ("ncf", "quant8"): (0.950, 0.011, 3.86), ("ncf", "ternary"): (0.951, 0.005, 7.37),
    ("ncf", "svd"): (0.952, 0.006, 3.15), ("ncf", "colr"): (0.947, 0.005, 3.21),
    ("ncf", "secemb"): (0.949, 0.014, 3.44),
    ("fm", "quant8"): (0.945, 0.001, 3.41), ("fm", "ternary"): (0.948, 0.002, 5.70),
    ("fm", "svd"): (0.946, 0.001, 4.21), ("fm", "colr"): (0.944, 0.004, 4.33),
    ("fm", "secemb"): (0.937, 0.004, 5.05),
    ("deepfm", "quant8"): (0.947, 0.007, 1.05), ("deepfm", "ternary"): (0.949, 0.004, 1.06),
    ("deepfm", "svd"): (0.954, 0.005, 1.05), ("deepfm", "colr"): (0.952, 0.001, 1.05),
    ("deepfm", "secemb"): (0.939, 0.006, 1.05),
}


def _experiment(model_name: str, protocol: str, dataset: str, seed: int, data_dir: Any = None) -> Any:
    """The harness's experiment: the model's preset and features, the 80/20 split, the full
    layout; ``secemb`` is trained as its bit-identical plaintext twin (see the module
    docstring), a lossy baseline with Table 10's rank (the experiment builder does all of it)."""
    from secemb.training.experiment import Experiment

    return Experiment(dataset=dataset, data_dir=data_dir, model=model_name,
                      protocol="plaintext" if protocol == "secemb" else protocol, layout="full", relay=False,
                      seed=seed)


def _build(model_name: str, protocol: str, dataset: str, seed: int, data_dir: Any = None) -> Any:
    """:func:`~secemb.training.builder.build_experiment` of :func:`_experiment`."""
    from secemb.training.builder import build_experiment

    return build_experiment(_experiment(model_name, protocol, dataset, seed, data_dir))


def split_held_out(held_out: Any, seed: int) -> tuple[Any, Any]:
    """The 20 % split cut at random (``numpy.random.default_rng([seed, 1])``, a public
    choice) into a test half and a validation half: the validation half picks the epoch,
    the test half scores it."""
    to_val = np.random.default_rng([seed, 1]).random(len(held_out)) < 0.5
    return held_out.subset(~to_val), held_out.subset(to_val)


def run_one(
    model_name: str,
    protocol: str,
    seed: int,
    epochs: int,
    *,
    dataset: str = "ml-100k",
    m_prime: int = 200,
    data_dir: Any = None,
    users_per_round: int = 100,
    on_epoch: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Train one configuration; return its result document (see module docstring)."""
    from dataclasses import replace

    from secemb.training.loop import train

    built = _build(model_name, protocol, dataset, seed, data_dir)
    tr, proto = built.train_data, built.protocol
    test, val = split_held_out(built.test_data, seed)
    cfg = replace(built.config, epochs=epochs, users_per_round=users_per_round, m_prime=min(m_prime, tr.num_items))
    t0 = time.perf_counter()
    res = train(built.model, proto, tr, test, cfg, on_epoch=on_epoch, val_data=val)
    t_half = np.array([e.test_rmse for e in res.epochs])
    v_half = np.array([e.val_rmse for e in res.epochs])
    # RMSE on the whole 20 % split, exactly, from the mean squared errors of its two halves
    curve = np.sqrt((len(test) * t_half**2 + len(val) * v_half**2) / (len(test) + len(val))).tolist()
    chosen = int(np.argmin(v_half))
    return {
        "model": model_name, "protocol": protocol, "trained_with": proto.name, "seed": seed,
        "dataset": dataset, "epochs": epochs, "m_prime": cfg.m_prime, "lr": cfg.lr, "reg": built.extra_config["reg"],
        "dim": built.extra_config["dim"], "rmse_per_epoch": curve, "final_rmse": curve[-1], "best_rmse": min(curve),
        "best_epoch": int(np.argmin(curve)) + 1,
        "test_half_per_epoch": t_half.tolist(), "val_half_per_epoch": v_half.tolist(),
        "selected_epoch": chosen + 1, "selected_rmse": float(t_half[chosen]),
        "upload_bytes_per_user_round": res.upload_bytes_per_user_round,
        "download_bytes_per_user_round": res.download_bytes_per_user_round,
        "model_sha256": res.model_sha256, "wall_s": time.perf_counter() - t0,
    }


def equivalence_check(
    model_name: str, *, dataset: str = "ml-100k", users: int = 60, data_dir: Any = None
) -> dict[str, Any]:
    """Two rounds of ``secemb`` (full layout, ``verify=True``) and of ``plaintext`` on the first
    ``users`` users: the public models must be bit-identical (same SHA-256)."""
    from dataclasses import replace

    from secemb.protocols import get_protocol
    from secemb.training.loop import train

    shas = {}
    t0 = time.perf_counter()
    for name in ("secemb", "plaintext"):
        built = _build(model_name, "plaintext", dataset, 0, data_dir)  # a fresh model for each twin
        tr = built.train_data
        sub = tr.subset(tr.users < users)
        cfg = replace(built.config, epochs=1, users_per_round=max(1, users // 2), m_prime=min(200, tr.num_items),
                      verify=(name == "secemb"), rating_range=(1.0, 5.0))
        res = train(built.model, get_protocol(name, layout="full"), sub, None, cfg)
        shas[name] = res.model_sha256
    return {"model": model_name, "rounds": 2, "sha256": shas, "identical": shas["secemb"] == shas["plaintext"],
            "wall_s": time.perf_counter() - t0}


def _fmt(vals: Sequence[float]) -> str:
    a = np.asarray(vals, dtype=np.float64)
    return f"{a.mean():.4f} ± {a.std(ddof=0):.4f}" if a.size else "n/a"


def run(
    models: Sequence[str] = ("mf", "ncf", "fm", "deepfm"),
    protocols: Sequence[str] = ("secemb",),
    seeds: Sequence[int] = (0, 1, 2, 3),
    epochs: dict[str, int] | int = 200,
    *,
    out: str | Path = "results/table3",
    dataset: str = "ml-100k",
    data_dir: Any = None,
    check: bool = True,
    progress: Any = None,
    cached_only: bool = False,
    threads: int | None = 1,
) -> dict[str, Any]:
    """Run (or resume) every configuration and write the table; returns the summary.
    ``cached_only`` tabulates the runs already in ``<out>/runs`` and trains nothing.
    ``threads`` sets torch's intra-op threads and numpy's BLAS threads (1: a device's step is
    small, and spinning threads only slow it down on a shared machine -- the svd baseline's
    per-user SVD of a 100 x 64 gradient took 95 ms on two contended BLAS threads and 0.7 ms on
    one; ``None`` leaves both defaults)."""
    from secemb.training.builder import experiment_hparams

    for m in models:  # a bad model name is reported before any data is read or run trained
        experiment_hparams(_experiment(m, "secemb", dataset, 0, data_dir))
    if threads is not None and not cached_only:
        import torch
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(threads)
        threadpool_limits(limits=threads, user_api="blas")  # process-wide, as torch's setting
    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    ep = (lambda m: epochs) if isinstance(epochs, int) else (lambda m: int(epochs.get(m, 200)))
    jobs = [(m, p, s) for s in seeds for p in protocols for m in models]
    paths = {job: out / "runs" / f"{job[0]}-{job[1]}-seed{job[2]}.json" for job in jobs}
    cached = {job: json.loads(path.read_text()) for job, path in paths.items() if path.is_file()}
    if not cached_only:  # a cached run answers its (model, protocol, seed) only at its own length
        for job, doc in cached.items():
            if doc["epochs"] != ep(job[0]):
                raise InvalidParameters(
                    f"{paths[job]} holds a {doc['epochs']}-epoch run, not {ep(job[0])}: move it away to train "
                    "again, or tabulate the cached runs with --cached-only"
                )
    task = progress.add_task("table 3 runs", total=len(jobs)) if progress is not None else None
    results: list[dict[str, Any]] = []
    for m, p, s in jobs:
        path = paths[m, p, s]
        if (m, p, s) in cached:
            doc = cached[m, p, s]
        elif cached_only:
            continue
        else:
            sub = None
            if progress is not None:
                sub = progress.add_task(f"{m} {p} seed {s}", total=ep(m))

            def advance(epoch: Any, sub: Any = sub) -> None:
                progress.update(sub, advance=1)

            doc = run_one(m, p, s, ep(m), dataset=dataset, data_dir=data_dir,
                          on_epoch=advance if sub is not None else None)
            path.write_text(json.dumps(doc, indent=1))
            if sub is not None:
                progress.remove_task(sub)
        results.append(doc)
        if task is not None:
            progress.update(task, advance=1)
    checks = []
    if check:
        for m in models:
            cpath = out / "runs" / f"equivalence-{m}.json"
            if cpath.is_file():
                checks.append(json.loads(cpath.read_text()))
            elif not cached_only:
                c = equivalence_check(m, dataset=dataset, data_dir=data_dir)
                cpath.write_text(json.dumps(c, indent=1))
                checks.append(c)
    rows = []
    for m in models:
        for p in protocols:
            docs = [d for d in results if d["model"] == m and d["protocol"] == p]
            if not docs:
                continue
            paper = PAPER_TABLE3.get((m, p))
            k = min(d["epochs"] for d in results if d["model"] == m)
            rows.append({
                "k": k, "rmse_at_k": _fmt([d["rmse_per_epoch"][k - 1] for d in docs]),
                "model": m, "protocol": p,
                "final_rmse": _fmt([d["final_rmse"] for d in docs]),
                "best_rmse": _fmt([d["best_rmse"] for d in docs]),
                "selected_rmse": _fmt([d["selected_rmse"] for d in docs if "selected_rmse" in d]),
                "final_mean": float(np.mean([d["final_rmse"] for d in docs])),
                "best_mean": float(np.mean([d["best_rmse"] for d in docs])),
                "paper": f"{paper[0]:.3f} ± {paper[1]:.3f}" if paper else "",
                "epochs": docs[0]["epochs"], "seeds": len(docs),
                "wall_s": float(sum(d["wall_s"] for d in docs)),
            })
    summary = {"dataset": dataset, "rows": rows, "equivalence": checks, "wall_s": time.perf_counter() - t_all}
    _write(out, summary, results)
    return summary


def _write(out: Path, summary: dict[str, Any], results: list[dict[str, Any]]) -> None:
    from secemb.bench.tables import write_csv, write_markdown

    cols = ["model", "protocol", "final_rmse", "selected_rmse", "best_rmse", "rmse_at_k", "k", "paper", "epochs",
            "seeds", "wall_s"]
    write_csv(out / "table3.csv", summary["rows"], cols)
    notes = [
        "RMSE on the 20% test split, mean ± std over seeds; `final` = after the last epoch; `selected` = on the "
        "test half of the split, after the epoch with the lowest RMSE on its validation half (no test data used "
        "to choose); `best` = best epoch on the whole split (chosen on test data: optimistic); "
        "`rmse_at_k` = after epoch k, the fewest epochs any protocol of that model ran (same-epoch comparison).",
        "`secemb` rows were trained with the plaintext protocol, proven bit-identical to SecEmb: "
        + ", ".join(f"{c['model']}: {'identical' if c['identical'] else 'DIFFERENT'}" for c in summary["equivalence"]),
    ]
    write_markdown(out / "table3.md", "Table 3 — test RMSE on " + summary["dataset"], summary["rows"], cols, notes)
    from secemb.bench.plots import line_panels

    panels: dict[str, dict[str, list[float]]] = {}
    for d in results:
        panels.setdefault(d["model"], {}).setdefault(f"{d['protocol']} s{d['seed']}", d["rmse_per_epoch"])
    line_panels(out / "table3.png", panels, xlabel="epoch", ylabel="test RMSE", title="Table 3: test RMSE per epoch")
