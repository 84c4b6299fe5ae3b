"""``secemb bench comm``: upload and download per user and round (Tables 2, 12, 13, 16 and the
R.R. columns of Table 3), measured from the bytes that crossed the in-process transport.

For every model (MF, NCF, FM, DeepFM) and dataset (ML-100K, ML-1M, ML-10M, ML-25M, Yelp, with
the paper's catalogue sizes m and m' = 200, 300, 300, 500, 500) each protocol runs **one real
round** of :func:`secemb.training.train` with two users: model built with the dataset's
Appendix H features (ML-100K's real files when RecBole is installed, otherwise features with
Table 7's counts), keys generated, servers evaluating, aggregate reconstructed.  Bytes per user
and round are ``len()`` of the user's messages (upload) and of the servers' messages to it
(download, including the dense vector the loop sends).  For the fixed-size protocols (every one
but the sparse baselines) the count depends only on (m, m', d, P), so two users suffice.

``secaggmask`` and ``topksecagg`` are message builders (:mod:`secemb.protocols.sparse_secagg`):
a round of 100 users drawn from the dataset (real ML-100K, otherwise its synthetic stand-in) is
set up (pairwise seeds, index sets, union) and the messages of three users are built and
measured; their download is the full model (plus the published union for TopkSecAgg).

``kvsagg`` (:mod:`secemb.protocols.kvsagg`) is a round protocol whose upload is a sketch sized
for the round's union of rows: its ``capacity`` is the number of distinct items rated by 100
users drawn from the dataset (as for TopkSecAgg: the paper's 100 users per round), and one real
round of two users then measures its bytes (they depend on the sketch size only).

Rows are appended to ``<out>/rows.jsonl`` as they are measured, each with its full
configuration (:func:`configuration`: model, dataset, requested protocol, m, m', mean ratings,
users per round, the SecEmb-Init evaluation limit); a later invocation reuses a row only for
the identical configuration (``fresh=True``, ``--fresh``: none), marks it ``from_cache``, and
the tables cover exactly the configurations asked for.

Server-side evaluation of SecEmb-Init's ``m' w`` element keys is skipped where ``m' m w`` >
:data:`INIT_EVAL_LIMIT` (minutes per user; the servers still parse and validate every key, the
bytes are the same).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from secemb.errors import InvalidParameters

__all__ = ["DATASETS", "MODELS", "PAPER", "PROTOCOLS", "configuration", "run"]

MODELS = ("mf", "ncf", "fm", "deepfm")
#: dataset -> (catalogue m, m', mean training ratings per user (80 % of Table 7's mean))
DATASETS: dict[str, tuple[int, int, int]] = {
    "ml-100k": (1682, 200, 85),
    "ml-1m": (3883, 300, 132),
    "ml-10m": (10681, 300, 114),
    "ml-25m": (62423, 500, 123),
    "yelp": (93386, 500, 81),
}
PROTOCOLS = ("secemb", "secemb-cuckoo-relay", "secfedrec", "secemb-init", "secemb-rowenc", "grec",
             "quant8", "ternary", "svd", "colr", "secaggmask", "topksecagg", "kvsagg")
INIT_EVAL_LIMIT = 1e8
_DS = ("ml-100k", "ml-1m", "ml-10m", "ml-25m", "yelp")


def _p(vals: str) -> dict[str, float]:
    return dict(zip(_DS, (float(x) for x in vals.split()), strict=True))


#: paper figures in MB: (table, model, protocol) -> dataset -> value
PAPER: dict[tuple[str, str, str], dict[str, float]] = {
    ("upload", "mf", "secfedrec"): _p("0.86 1.99 5.47 31.96 47.81"),
    ("upload", "mf", "secemb"): _p("0.17 0.27 0.28 0.51 0.52"),
    ("upload", "ncf", "secfedrec"): _p("0.44 1.00 4.11 23.98 29.89"),
    ("upload", "ncf", "secemb"): _p("0.13 0.20 0.26 0.46 0.44"),
    ("upload", "fm", "secfedrec"): _p("0.91 2.01 5.48 31.97 47.82"),
    ("upload", "fm", "secemb"): _p("0.18 0.28 0.29 0.53 0.53"),
    ("upload", "deepfm", "secfedrec"): _p("14.95 8.84 8.63 35.13 50.45"),
    ("upload", "deepfm", "secemb"): _p("14.22 7.10 3.45 3.68 3.16"),
    ("download", "mf", "secfedrec"): _p("0.43 0.99 2.73 15.98 23.91"),
    ("download", "mf", "secemb"): _p("0.10 0.15 0.15 0.26 0.26"),
    ("download", "ncf", "secfedrec"): _p("0.22 0.50 2.06 11.99 14.95"),
    ("download", "ncf", "secemb"): _p("0.05 0.08 0.12 0.20 0.44"),
    ("download", "fm", "secfedrec"): _p("1.12 1.74 3.59 20.97 29.88"),
    ("download", "fm", "secemb"): _p("0.11 0.16 0.16 0.26 0.26"),
    ("download", "deepfm", "secfedrec"): _p("8.14 5.15 5.17 22.55 31.20"),
    ("download", "deepfm", "secemb"): _p("7.12 3.57 1.74 1.84 1.57"),
    ("upload", "mf", "secemb-init"): _p("4.56 7.60 8.51 16.83 17.43"),
    ("upload", "mf", "secemb-rowenc"): _p("0.28 0.43 0.45 0.78 0.79"),
    ("upload", "ncf", "secemb-init"): _p("2.32 3.86 6.42 12.70 11.00"),
    ("upload", "ncf", "secemb-rowenc"): _p("0.18 0.28 0.38 0.67 0.61"),
    ("upload", "fm", "secemb-init"): _p("4.80 7.84 8.74 17.16 17.47"),
    ("upload", "fm", "secemb-rowenc"): _p("0.29 0.44 0.46 0.80 0.79"),
    ("upload", "deepfm", "secemb-init"): _p("18.84 14.66 11.89 20.23 20.10"),
    ("upload", "deepfm", "secemb-rowenc"): _p("14.33 7.27 3.61 3.95 3.43"),
    ("upload", "mf", "secaggmask"): _p("0.27 0.61 1.66 9.60 14.35"),
    ("upload", "mf", "topksecagg"): _p("0.32 0.66 0.91 1.17 1.95"),
    ("upload", "ncf", "secaggmask"): _p("0.14 0.31 1.25 7.21 8.98"),
    ("upload", "ncf", "topksecagg"): _p("0.17 0.34 0.69 0.89 1.23"),
    ("upload", "fm", "secaggmask"): _p("0.27 0.61 1.66 9.60 14.35"),
    ("upload", "fm", "topksecagg"): _p("0.32 0.66 0.91 1.17 1.95"),
    ("upload", "deepfm", "secaggmask"): _p("14.30 7.44 4.81 12.76 16.99"),
    ("upload", "deepfm", "topksecagg"): _p("14.36 7.49 4.07 4.32 4.58"),
    ("upload", "mf", "kvsagg"): _p("1.21 2.49 3.41 4.37 7.31"),
    ("upload", "ncf", "kvsagg"): _p("0.61 1.25 2.57 3.29 4.58"),
    ("upload", "fm", "kvsagg"): _p("1.21 2.49 3.41 4.37 7.31"),
    ("upload", "deepfm", "kvsagg"): _p("15.25 9.31 6.57 7.53 9.94"),
    # Table 3: upload reduction ratio (SecFedRec upload / protocol upload)
    ("rr", "mf", "quant8"): _p("4.00 4.00 4.00 4.00 4.00"),
    ("rr", "mf", "ternary"): _p("8.00 8.00 8.00 8.00 8.00"),
    ("rr", "mf", "svd"): _p("5.22 6.39 16.15 16.23 16.24"),
    ("rr", "mf", "colr"): _p("5.42 6.50 16.25 16.25 16.25"),
    ("rr", "ncf", "quant8"): _p("3.86 3.94 3.97 3.99 4.00"),
    ("rr", "ncf", "ternary"): _p("7.37 7.71 7.84 7.97 7.98"),
    ("rr", "ncf", "svd"): _p("3.15 4.02 11.81 12.17 10.22"),
    ("rr", "ncf", "colr"): _p("3.21 4.06 11.87 12.18 10.22"),
    ("rr", "fm", "quant8"): _p("3.41 3.86 3.98 4.00 4.00"),
    ("rr", "fm", "ternary"): _p("5.70 7.37 7.90 7.98 7.99"),
    ("rr", "fm", "svd"): _p("4.21 6.00 15.71 16.16 16.20"),
    ("rr", "fm", "colr"): _p("4.33 6.10 15.81 16.17 16.21"),
    ("rr", "deepfm", "quant8"): _p("1.05 1.21 1.92 3.16 3.47"),
    ("rr", "deepfm", "ternary"): _p("1.06 1.25 2.26 4.94 5.88"),
    ("rr", "deepfm", "svd"): _p("1.05 1.24 2.48 6.90 9.09"),
    ("rr", "deepfm", "colr"): _p("1.05 1.24 2.49 6.90 9.10"),
}


# ----------------------------------------------------------------------------- data


_CACHE: dict[str, Any] = {}


def round_data(dataset: str, data_dir: Any = None) -> tuple[Any, Any]:
    """``(RatingData, FeatureSet)`` for the comm round of ``dataset``: the real ML-100K when
    available, otherwise the synthetic stand-in with Table 7's shape (catalogue included)."""
    if dataset in _CACHE:
        return _CACHE[dataset]
    from secemb.data import DatasetNotFoundError, load_dataset, synthetic_like
    from secemb.data.features import load_features, synthetic_features
    from secemb.data.synthetic import SYNTHETIC_SHAPES

    data = feats = None
    if dataset == "ml-100k":
        try:
            data = load_dataset("ml-100k", data_dir)
            feats = load_features("ml-100k", data_dir)
        except DatasetNotFoundError:
            data = None
    if data is None:
        stand_in = "synthetic" if dataset == "ml-100k" else f"synthetic-{dataset}"
        n, m, r = SYNTHETIC_SHAPES[stand_in]
        if dataset == "ml-100k":
            n, m, r = 943, 1682, 100_000
        data = synthetic_like(n, m, r, 0, name=stand_in)
        feats = synthetic_features(dataset, n, m)
    _CACHE[dataset] = (data, feats)
    return data, feats


def _two_users(data: Any, mean: int) -> np.ndarray:
    counts = np.bincount(data.users, minlength=data.num_users)
    order = np.argsort(np.abs(counts - mean), kind="stable")
    return np.sort(order[:2])


def _build_model(model: str, dataset: str, feats: Any) -> Any:
    from secemb.models import get_model, get_preset, uses_features

    preset = get_preset(model, dataset if dataset in _DS else "ml-100k")
    kw = {"features": feats} if uses_features(model) else {}
    return get_model(model, dim=preset.dim, reg=preset.reg, **kw)


def _protocol(name: str, model: Any, dataset: str, m: int, m_prime: int) -> Any:
    from secemb.protocols import get_protocol
    from secemb.protocols.lossy import lossy_options

    if name == "secemb":
        return get_protocol("secemb", layout="full", relay=False)
    if name == "secemb-cuckoo-relay":
        return get_protocol("secemb", layout="cuckoo", relay=True)
    opts = lossy_options(name, model, dataset)
    if name == "kvsagg":
        opts["capacity"] = round_union(dataset)
    if name == "secemb-init":
        opts["server_eval"] = m_prime * m * model.sparse_width <= INIT_EVAL_LIMIT
    return get_protocol(name, **opts)


def round_union(dataset: str, users: int = 100, data_dir: Any = None) -> int:
    """Distinct items rated by ``users`` users drawn (seed 0) from the dataset's comm data:
    the size of a round's aggregate key set, which sizes Kvsagg's sketch."""
    from secemb.data import by_user

    data, _ = round_data(dataset, data_dir)
    active = np.flatnonzero(by_user(data).counts() > 0)
    drawn = np.random.default_rng(0).choice(active, size=min(users, active.size), replace=False)
    return int(np.unique(data.items[np.isin(data.users, drawn)]).size)


def measure_round(model_name: str, dataset: str, protocol: str, *, data_dir: Any = None) -> dict[str, Any]:
    """One round with two users; bytes per user and round."""
    from secemb.round.results import TrainConfig
    from secemb.training.loop import train

    m, m_prime, mean = DATASETS[dataset]
    data, feats = round_data(dataset, data_dir)
    model = _build_model(model_name, dataset, feats)
    if protocol in ("secaggmask", "topksecagg"):
        return _measure_sparse(model, dataset, protocol, data)
    users = _two_users(data, mean)
    sub = data.subset(np.isin(data.users, users))
    proto = _protocol(protocol, model, dataset, m, m_prime)
    t0 = time.perf_counter()
    res = train(model, proto, sub, None, TrainConfig(epochs=1, users_per_round=2, m_prime=m_prime, seed=0,
                                                     rating_range=(1.0, 5.0)))
    return _row(model, dataset, protocol, res.upload_bytes_per_user_round, res.download_bytes_per_user_round,
                proto.layout, proto.relay, time.perf_counter() - t0, server_bytes=res.server_bytes_per_round,
                user_ms=res.user_ms_per_round, server_s=res.server_s_per_round,
                note="" if protocol != "secemb-init" or proto.server_eval else "server evaluation skipped",
                **({"capacity": proto.capacity, "cells": proto.cells(proto.round_config(0, m, model.sparse_width,
                                                                                        model.dense_size, m_prime))}
                   if protocol == "kvsagg" else {}))


def _row(model: Any, dataset: str, protocol: str, up: float, down: float, layout: str, relay: bool, wall: float,
         **extra: Any) -> dict[str, Any]:
    m, m_prime, _ = DATASETS[dataset]
    return {
        "protocol": protocol.replace("-cuckoo-relay", ""), "model": model.name, "dataset": dataset, "m": m,
        "m_prime": m_prime, "d": model.dim, "upload_mb": up / 1e6, "download_mb": down / 1e6, "layout": layout,
        "relay": relay, "width": model.sparse_width, "dense_size": model.dense_size, "upload_bytes": up,
        "download_bytes": down, "wall_s": wall, **extra,
    }


def _measure_sparse(model: Any, dataset: str, protocol: str, data: Any) -> dict[str, Any]:
    from secemb.data import by_user
    from secemb.protocols.sparse_secagg import SecAggMaskRound, TopkSecAggRound

    m, _, _ = DATASETS[dataset]
    w, p = model.sparse_width, model.dense_size
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    per_user = by_user(data)
    active = np.flatnonzero(per_user.counts() > 0)
    users = rng.choice(active, size=min(100, active.size), replace=False)
    n = users.size
    full_download = (m * w + p) * 4
    measured = users[:3]
    dense = np.zeros(p, np.uint32)
    sizes = []
    if protocol == "secaggmask":
        rnd = SecAggMaskRound(n, m * w, p)
        for k, u in enumerate(measured):
            g = np.zeros((m, w), np.uint32)
            g[np.unique(per_user.of(int(u))[0]), : getattr(model, "trainable_width", w)] = 1  # non-zero rows
            sizes.append(len(rnd.upload(k, g.reshape(-1), dense)))
        down = full_download
    else:
        topk = TopkSecAggRound(n, m, w, p)
        idx_bytes = [len(topk.index_message(k, np.unique(per_user.of(int(u))[0]), rng)) for k, u in enumerate(users)]
        union = topk.publish_union()
        for k in range(len(measured)):
            g = np.zeros((m, w), np.uint32)
            sizes.append(idx_bytes[k] + len(topk.value_message(k, g, dense)))
        down = full_download + len(union)
    return _row(model, dataset, protocol, float(np.mean(sizes)), float(down), "full", False,
                time.perf_counter() - t0, round_users=int(n))


def configuration(model: str, dataset: str, protocol: str) -> dict[str, Any]:
    """Everything a measured row depends on: the cache key of ``<out>/rows.jsonl``."""
    if dataset not in DATASETS:
        raise InvalidParameters(f"dataset: expected one of {', '.join(DATASETS)}, got {dataset!r}")
    m, m_prime, mean = DATASETS[dataset]
    return {"model": model, "dataset": dataset, "requested": protocol, "m": m, "m_prime": m_prime,
            "mean_ratings": mean, "round_users": 2, "init_eval_limit": INIT_EVAL_LIMIT}


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def run(
    models: Sequence[str] = MODELS,
    datasets: Sequence[str] = tuple(DATASETS),
    protocols: Sequence[str] = PROTOCOLS,
    *,
    out: str | Path | None = "results/comm",
    data_dir: Any = None,
    progress: Any = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    fresh: bool = False,
) -> list[dict[str, Any]]:
    """Measure every (model, dataset, protocol), reusing rows of ``<out>/rows.jsonl`` measured
    with the identical :func:`configuration` unless ``fresh`` (those rows get
    ``from_cache=True``); write Markdown/CSV/PNG of exactly these rows into ``out``."""
    single_thread()
    t_all = time.perf_counter()
    jobs = [configuration(mo, d, p) for d in datasets for mo in models for p in protocols]
    task = progress.add_task("comm", total=len(jobs)) if progress is not None else None
    cache_path = Path(out) / "rows.jsonl" if out is not None else None
    cached: dict[str, dict[str, Any]] = {}
    if cache_path is not None and cache_path.is_file() and not fresh:
        for line in cache_path.read_text().splitlines():
            r = json.loads(line)
            if "config" in r:  # rows of earlier versions carry no configuration: never reused
                cached[_key(r["config"])] = r
    rows = []
    for config in jobs:
        mo, d, p = config["model"], config["dataset"], config["requested"]
        if progress is not None:
            progress.update(task, description=f"comm {mo} {d} {p}")
        if _key(config) in cached:
            rows.append({**cached[_key(config)], "from_cache": True})
            if progress is not None:
                progress.update(task, advance=1)
            continue
        row = measure_round(mo, d, p, data_dir=data_dir)
        row["requested"] = p
        row["config"] = config
        table = "rr" if p in ("quant8", "ternary", "svd", "colr") else "upload"
        in_paper = p != "secemb-cuckoo-relay"
        row["paper_upload_mb"] = PAPER.get(("upload", mo, row["protocol"]), {}).get(d) if in_paper else None
        row["paper_download_mb"] = PAPER.get(("download", mo, row["protocol"]), {}).get(d) if in_paper else None
        row["paper_rr"] = PAPER.get((table, mo, p), {}).get(d) if table == "rr" else None
        rows.append(row)
        if cache_path is not None:  # resumable: one JSON line per measured configuration
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            with open(cache_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
        row["from_cache"] = False
        if on_row is not None:
            on_row(row)
        if progress is not None:
            progress.update(task, advance=1)
    _add_ratios(rows)
    if out is not None:
        write(Path(out), rows, time.perf_counter() - t_all)
    return rows


def single_thread() -> None:
    """One torch intra-op thread: a device's step is small, and on a shared machine spinning
    worker threads only slow it down."""
    import torch

    torch.set_num_threads(1)


def _add_ratios(rows: list[dict[str, Any]]) -> None:
    base = {(r["model"], r["dataset"]): r["upload_bytes"] for r in rows if r["protocol"] == "secfedrec"}
    for r in rows:
        b = base.get((r["model"], r["dataset"]))
        r["rr"] = b / r["upload_bytes"] if b else None


def _dev(meas: float, paper: float | None) -> str:
    return "" if not paper else f"{100 * (meas / paper - 1):+.1f}%"


def write(out: Path, rows: list[dict[str, Any]], wall: float) -> None:
    from secemb.bench.plots import line_panels
    from secemb.bench.tables import markdown_table, write_csv
    from secemb.outputs import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    cols = ["protocol", "model", "dataset", "m", "m_prime", "d", "width", "dense_size", "layout", "relay",
            "upload_mb", "download_mb", "paper_upload_mb", "paper_download_mb", "rr", "paper_rr", "wall_s"]
    write_csv(out / "comm.csv", rows, cols)
    parts = [f"# Communication per user and round (MB = 10^6 bytes), measured\n\nWall time: {wall:.0f} s.\n"]
    views = [
        ("Table 2 / 12 — SecFedRec and SecEmb (full layout, no relay: the paper's protocol)", ("secfedrec", "secemb"),
         "full"),
        ("SecEmb as secemb runs it by default (cuckoo layout, relay)", ("secemb",), "cuckoo"),
        ("Table 16 — ablations and GREC", ("secemb-init", "secemb-rowenc", "grec"), None),
        ("Table 13 — sparse secure aggregation", ("secaggmask", "topksecagg", "kvsagg"), None),
        ("Table 3 — lossy baselines (R.R. = SecFedRec upload / upload)", ("quant8", "ternary", "svd", "colr"), None),
    ]
    for title, protos, layout in views:
        sel = [r for r in rows if r["protocol"] in protos and (layout is None or r["layout"] == layout)]
        if not sel:
            continue
        view = []
        for r in sel:
            view.append({
                "model": r["model"], "dataset": r["dataset"], "protocol": r["protocol"],
                "upload MB": f"{r['upload_mb']:.3f}", "paper up": r["paper_upload_mb"] or "",
                "Δ up": _dev(r["upload_mb"], r["paper_upload_mb"]),
                "download MB": f"{r['download_mb']:.3f}", "paper down": r["paper_download_mb"] or "",
                "Δ down": _dev(r["download_mb"], r["paper_download_mb"]),
                "R.R.": f"{r['rr']:.2f}" if r.get("rr") else "", "paper R.R.": r.get("paper_rr") or "",
            })
        parts.append(f"\n## {title}\n\n" + markdown_table(view, list(view[0])))
    atomic_write_text(out / "comm.md", "".join(parts))
    order = [d for d in DATASETS if any(r["dataset"] == d for r in rows)]  # natural order, as in Table 7
    panels: dict[str, dict[str, list[float]]] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        for p in ("secfedrec", "secemb", "secemb-rowenc", "secemb-init", "grec"):
            vals = {r["dataset"]: r["upload_mb"] for r in rows
                    if r["model"] == model and r["protocol"] == p and r["layout"] == "full"}
            if vals:
                panels.setdefault(model, {})[p] = [vals.get(d, float("nan")) for d in order]
    line_panels(out / "comm.png", panels, xlabel="dataset", ylabel="upload MB per user and round",
                title="Upload per user and round (measured; full layout, no relay)", x=order, logy=True)
