"""``secemb bench compare``: every protocol of the four papers on the same data, side by side.

All rows train MF on MovieLens-100K with the same seeded 80/20 split (``train_test_split``,
seed 0) and report test RMSE, ``len()`` of the bytes each client sent and received per round,
and the seconds of a client and of the server(s) per round, measured in this run.

* The two-server / device family (943 devices, one per user, 100 per round): SecEmb as in the
  paper (full layout, no relay) and ours (cuckoo layout, relay), GREC, SecFedRec and plaintext
  FL, each through :class:`secemb.Experiment` for ``epochs`` epochs.
* SecEA (N = ``secea_silos`` silos of users, one server): accuracy from ``secea_rounds`` rounds of
  its experiment (:func:`secemb.bench.secea.accuracy`, the protocol's arithmetic every round),
  traffic and time from one round of the complete protocol with 2048-bit Paillier on the
  ``secea_items`` most-rated items (:func:`secemb.bench.secea.cost`; 0 = the whole catalogue).
  Its clients are silos, not devices: a per-client figure is per silo.
* SFSL (secure federated submodel learning; DIN, a click-through model, as in its paper): trained
  through :func:`secemb.protocols.sfsl.simulate.train_sfsl` on click samples made from the same
  ML-100K ratings (rating >= 4 is a click); its accuracy is AUC, not RMSE.  "not available" if
  the module cannot be imported.

"What the server learns" is the protocol's stated leakage (docs/protocol.md, docs/secea.md),
not a measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from secemb.bench.progress import Steps, reported
from secemb.data import load_movielens

__all__ = ["FAMILY", "KEYS", "LEARNS", "run", "merge", "table_rows", "plot"]

#: label -> Experiment keywords
FAMILY: dict[str, dict[str, Any]] = {
    "SecEmb (paper: full layout, no relay)": {"protocol": "secemb", "layout": "full", "relay": False},
    "SecEmb (ours: cuckoo layout, relay)": {"protocol": "secemb", "layout": "cuckoo", "relay": True},
    "GREC": {"protocol": "grec"},
    "SecFedRec": {"protocol": "secfedrec"},
    "plaintext FL": {"protocol": "plaintext"},
}
#: short key (``--only``) -> row label
KEYS: dict[str, str] = {
    "secemb-paper": "SecEmb (paper: full layout, no relay)",
    "secemb-cuckoo": "SecEmb (ours: cuckoo layout, relay)",
    "grec": "GREC",
    "secfedrec": "SecFedRec",
    "plaintext": "plaintext FL",
    "secea": "SecEA",
    "sfsl": "SFSL",
}
#: label -> what each server (and, for SecEA, a coalition of clients) learns
LEARNS: dict[str, str] = {
    "SecEmb (paper: full layout, no relay)": "each of 2 non-colluding servers: the aggregate update; not which or "
                                              "how many items a user rated (m' public)",
    "SecEmb (ours: cuckoo layout, relay)": "the same as the paper's layout (docs/security.md)",
    "GREC": "each of 2 non-colluding servers: the aggregate update; full-model download",
    "SecFedRec": "each of 2 non-colluding servers: the aggregate update; full-model download",
    "plaintext FL": "the server: every user's rated items and update",
    "SecEA": "server: each silo's |E_n|, the entity union, who dropped; <= T silos: nothing beyond the "
             "averages of their own entities and the union",
    "SFSL": "server: perturbed (LDP) index sets, the union, aggregated updates",
}


def _family_row(label: str, kwargs: dict[str, Any], epochs: int, seed: int) -> dict[str, Any]:
    from secemb.training.experiment import Experiment

    start = time.perf_counter()
    res = Experiment(dataset="ml-100k", model="mf", epochs=epochs, seed=seed, m_prime=200, **kwargs).run()
    tr = res.train_result
    return {"protocol": label, "clients": "943 devices, 2 servers" if kwargs["protocol"] != "plaintext"
            else "943 devices, 1 server", "rmse": tr.final_rmse, "epochs": epochs,
            "up_bytes": tr.upload_bytes_per_user_round, "down_bytes": tr.download_bytes_per_user_round,
            "budget": f"{epochs} epoch(s)",
            "client_s": tr.user_ms_per_round / 1000.0, "server_s": tr.server_s_per_round,
            "wall_s": time.perf_counter() - start, "learns": LEARNS[label]}


def _secea_row(silos: int, rounds: int, items: int, seed: int) -> dict[str, Any]:
    from secemb.bench import secea

    data = load_movielens("ml-100k")
    start = time.perf_counter()
    acc = secea.accuracy(data, silos, rounds=rounds, local_epochs=2, kinds=("secea",), seed=seed)
    cost = secea.cost(data, silos, cost_items=items, seed=seed)
    cl = cost["clients"]
    scope = "whole catalogue" if not items else f"{items} most-rated items"
    return {"protocol": "SecEA", "clients": f"{silos} silos, 1 server (cost: {scope})",
            "rmse": acc["rmse"]["secea"][-1], "epochs": rounds, "budget": f"{rounds} rounds x 2 local epochs",
            "up_bytes": float(np.mean([c["up_bytes"] for c in cl])),
            "down_bytes": float(np.mean([c["down_bytes"] for c in cl])),
            "client_s": cost["client_seconds_mean"], "server_s": float(sum(cost["server_seconds"].values())),
            "wall_s": time.perf_counter() - start, "learns": LEARNS["SecEA"],
            "exact": bool(acc.get("secea_equals_fixed_point_average")) and bool(cost["exact"])}


def _sfsl_row(rounds: int, clients: int, seed: int) -> dict[str, Any]:
    """SFSL (secemb.protocols.sfsl, DIN) on click samples made from the same ML-100K ratings
    (rating >= 4 is a click), ``rounds`` rounds of ``clients`` devices: AUC, bytes and seconds
    per device and round from its round reports.  "not available" if the module is missing."""
    try:
        from secemb.data.ctr import movielens_clicks, split_clicks
        from secemb.data.features import movielens_features
        from secemb.protocols.sfsl.simulate import SFSLRun, train_sfsl
    except ImportError as exc:
        return {"protocol": "SFSL", "clients": f"not available ({exc})", "budget": "-", "rmse": None,
                "metric": None, "up_bytes": None, "down_bytes": None, "client_s": None, "server_s": None,
                "learns": LEARNS["SFSL"], "available": False}
    clicks = movielens_clicks(load_movielens("ml-100k"), movielens_features("ml-100k").item.astype(np.uint8))
    train, test = split_clicks(clicks, 0.2)
    start = time.perf_counter()
    res = train_sfsl(train, test, SFSLRun(rounds=rounds, clients_per_round=clients, eval_every=rounds, seed=seed))
    reps = res.reports
    return {"protocol": "SFSL", "clients": f"{clients} devices per round, 1 server (DIN, ML-100K clicks)",
            "budget": f"{rounds} rounds", "rmse": None, "metric": ("AUC", res.auc.get(rounds)),
            "up_bytes": float(np.mean([r.per_client("upload") for r in reps])),
            "down_bytes": float(np.mean([r.per_client("download") for r in reps])),
            "client_s": float(np.mean([r.per_client("seconds") for r in reps])),
            "server_s": float(np.mean([sum(r.server_seconds.values()) for r in reps])),
            "wall_s": time.perf_counter() - start, "learns": LEARNS["SFSL"], "available": True}


def run(*, epochs: int = 1, accuracy_epochs: int = 20, seed: int = 0, secea_silos: int = 3, secea_rounds: int = 10,
        secea_items: int = 100, sfsl_rounds: int = 2, sfsl_clients: int = 10, only: tuple[str, ...] | None = None,
        progress: Steps | None = None) -> dict[str, Any]:
    """All rows (``only``: a subset of labels, for tests and partial runs).  ``accuracy_epochs``
    adds a plaintext row trained that long: the RMSE that SecEmb, GREC and SecFedRec reach with
    the same budget, since they reproduce the plaintext model bit for bit (0: skip).  A warm-up
    (:func:`secemb.bench.server.warm_up`, untimed) compiles the DPF kernels first, so no row's
    seconds include compilation; ``progress`` hears of every row."""
    from secemb.bench.server import warm_up

    def wanted(label: str) -> bool:
        return only is None or label in only

    def untimed_warm_up() -> None:
        warm_up()

    plan: list[tuple[str, Callable[[], dict[str, Any] | None]]] = [("warm-up (untimed)", untimed_warm_up)]
    for label, kwargs in FAMILY.items():
        if wanted(label):
            plan.append((f"{label}: {epochs} epoch(s)", partial(_family_row, label, kwargs, epochs, seed)))
    if accuracy_epochs and wanted("plaintext FL"):
        def reference() -> dict[str, Any]:
            ref = _family_row("plaintext FL", FAMILY["plaintext FL"], accuracy_epochs, seed)
            return {**ref, "protocol": "plaintext FL (accuracy reference; the lossless rows reach it bit for bit)"}

        plan.append((f"plaintext FL: {accuracy_epochs} epochs (accuracy reference)", reference))
    if wanted("SecEA"):
        plan.append((f"SecEA: {secea_silos} silos", partial(_secea_row, secea_silos, secea_rounds, secea_items, seed)))
    if wanted("SFSL"):
        plan.append((f"SFSL: {sfsl_rounds} rounds of {sfsl_clients} devices",
                     partial(_sfsl_row, sfsl_rounds, sfsl_clients, seed)))
    rows = [row for _, step in reported(plan, progress, lambda p: p[0]) if (row := step()) is not None]
    return {"dataset": "ml-100k", "model": "mf", "seed": seed, "rows": rows,
            "warm_up": "one untimed round of every SecEmb variant at m = 1,682 first: no compilation in any figure"}


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows of several partial runs (``--only``) in the order of :data:`KEYS`, one per
    protocol (a later result replaces an earlier one's row of the same protocol)."""
    rows: dict[str, dict[str, Any]] = {}
    for res in results:
        for row in res["rows"]:
            rows[row["protocol"]] = row
    order = list(KEYS.values())

    def rank(name: str) -> int:
        base = name.split(" (accuracy")[0]
        return order.index(base) + (1 if "reference" in name else 0) if base in order else len(order)

    return {"dataset": "ml-100k", "model": "mf", "rows": [rows[k] for k in sorted(rows, key=rank)]}


def _fmt(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _accuracy(row: dict[str, Any]) -> str:
    if row.get("rmse") is not None:
        return f"RMSE {row['rmse']:.4f}"
    metric = row.get("metric")
    return "n/a" if not metric or metric[1] is None else f"{metric[0]} {metric[1]:.4f}"


def table_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """(protocol, clients, budget, accuracy, up KB, down KB, client s, server s, learns) per row."""
    return [(r["protocol"], r["clients"], r["budget"], _accuracy(r),
             _fmt(None if r["up_bytes"] is None else r["up_bytes"] / 1e3, ",.1f"),
             _fmt(None if r["down_bytes"] is None else r["down_bytes"] / 1e3, ",.1f"),
             _fmt(r["client_s"], ".3f"), _fmt(r["server_s"], ".2f"), r["learns"]) for r in result["rows"]]


def plot(result: dict[str, Any], path: str) -> None:
    """One PNG: a panel per measure, a bar per protocol with its value on it (a log axis only
    where a measure spans a decade or more)."""
    from secemb.bench.plots import bar_panels

    rows = [r for r in result["rows"] if r["up_bytes"] is not None and "reference" not in r["protocol"]]
    short = {label: key for key, label in KEYS.items()}
    names = [short.get(r["protocol"], r["protocol"]).replace("-", "\n") for r in rows]

    def bars(key: str, scale: float = 1.0) -> dict[str, float | None]:
        return {n: None if r[key] is None else r[key] / scale for n, r in zip(names, rows, strict=True)}

    panels = {
        "upload, KB per client and round": bars("up_bytes", 1e3),
        "download, KB per client and round": bars("down_bytes", 1e3),
        "client seconds per round": bars("client_s"),
        "server seconds per round": bars("server_s"),
        "test RMSE": bars("rmse"),
    }
    sfsl = any(r["protocol"] == "SFSL" for r in rows)
    bar_panels(path, panels, notes={"test RMSE": "SFSL reports AUC, not RMSE: n/a"} if sfsl else None,
               title="secemb bench compare: MF on ML-100K (same split), measured")
