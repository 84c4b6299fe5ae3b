"""``secemb bench sfsl``: secure federated submodel learning measured in process, next to the
paper's values (secure-federated-submodel-learning.txt, Tables V-VI, Figures 5-6).

Every byte figure is ``len()`` of the messages that crossed (:class:`~secemb.protocols.sfsl.
RoundReport`); every time is a party's own ``time.perf_counter`` work.  Workloads are
Taobao-shaped (:class:`~secemb.data.ctr.TaobaoShaped`, Table IV's counts): each measured round
draws ``n`` of the 49,023 clients, generates their samples, and runs one full round (PSU,
perturbation, download, local training, secure sum) from a fresh DIN.

* :func:`table5` -- ε₁, ε∞ (from the presets) and p₇, p₈ averaged over the actual owner counts
  of the union of ``n`` clients' real goods sets.
* :func:`round_costs` -- one round's per-client traffic, client and server seconds (Figure 5;
  the PSU's share is Table VI); with ``dropout`` a share of the clients drops after ShareKeys in
  the PSU and as many others in the update's secure sum (Figure 6).
* :func:`training` -- SFSL training with AUC on held-out samples (the side-by-side table).
* :func:`curve` -- Figure 4: test AUC over rounds for SFSL under a preset or a plaintext
  baseline (:mod:`secemb.protocols.sfsl.baselines`: FL, centralized), within a time budget.
* :func:`plot_fig5`, :func:`plot_fig4` -- the PNGs, the paper's values as markers;
  :func:`merge` joins results of runs made in pieces.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from secemb.data.ctr import ClickData, TaobaoShaped
from secemb.models.din import DIN
from secemb.privacy.randomized_response import CPP_PRESETS, event_probabilities, get_cpp
from secemb.protocols.sfsl import SFSLDevice, SFSLRun, SFSLServer, TrainingSettings, sfsl_round, train_sfsl
from secemb.protocols.sfsl.baselines import BASELINES, train_baseline

__all__ = ["CURVES", "PAPER", "curve", "merge", "plot_fig4", "plot_fig5", "round_costs", "run", "table5", "training"]

#: the schemes of Figure 4: SFSL under a preset, or a baseline
CURVES = (*CPP_PRESETS, *BASELINES)

#: the paper's values (Table V, Table VI, the text of Sections VI-B/C about Figures 5 and 6)
PAPER: dict[str, Any] = {
    "table5": {"CPP1": {"eps_one": math.inf, "eps_inf": math.inf, "p7": 0.867, "p8": 0.0},
               "CPP2": {"eps_one": 2.02, "eps_inf": 2.71, "p7": 0.0, "p8": 0.103},
               "CPP3": {"eps_one": 1.27, "eps_inf": 1.95, "p7": 0.0, "p8": 0.195},
               "CPP4": {"eps_one": 0.51, "eps_inf": 1.10, "p7": 0.0, "p8": 0.342},
               "CPP5": {"eps_one": 0.0, "eps_inf": 0.0, "p7": 0.0, "p8": 0.0}},
    # Figure 5(a), n = 100, MB per client per round; SFL = secure federated learning
    "fig5_traffic_mb_n100": {"CPP1": 1.76, "CPP2": 2.33, "CPP3": 2.78, "CPP4": 3.40, "CPP5": 5.57, "SFL": 27.94},
    # Figure 5(b)/(c), CPP2, n = 100
    "fig5_cpp2_n100_s": {"client": 71.80, "server": 11.31},
    # Table VI, n = 20, 40, 60, 80, 100
    "table6": {"n": [20, 40, 60, 80, 100], "client_mb": [0.63, 0.70, 0.77, 0.84, 0.91],
               "client_s": [5.04, 10.09, 15.53, 26.49, 33.69], "server_s": [1.12, 1.68, 2.40, 3.13, 4.19]},
    # Figure 6 (text): PSU server time at 20 % dropout, n = 100
    "fig6_psu_server_s_20pct": 37.66,
    # Figure 4 (text of Section VI-A), n = 100, 5,000 rounds: the best AUC and the round it was reached
    # (CPP4's round is not given; CPP1 and CPP5 "have identical model performance")
    "fig4_best": {"centralized": {"auc": 0.641, "round": 803}, "CPP2": {"auc": 0.615, "round": 4908},
                  "CPP4": {"auc": 0.601, "round": None}, "fl": {"auc": 0.543, "round": 867}},
}


def _clients(world: TaobaoShaped, n: int, seed: int) -> ClickData:
    rng = np.random.default_rng([seed, n])
    return world.clients(np.sort(rng.choice(world.shape.users, size=n, replace=False)))


def table5(n: int = 100, shape: str = "taobao", seed: int = 0) -> dict[str, Any]:
    """Table V for ``n`` Taobao-shaped clients: per preset p5, p6, ε₁, ε∞, and p7, p8 averaged over
    the union's indices with their owner counts (and, for comparison, at the mean owner count)."""
    data = _clients(TaobaoShaped(shape, seed), n, seed)
    b = data.user_bounds()
    sets = [data.goods_of(b[u], b[u + 1]) for u in np.unique(data.user)]
    _, owners = np.unique(np.concatenate(sets), return_counts=True)
    rows = []
    for name, p in CPP_PRESETS.items():
        p7, p8 = event_probabilities(p, owners, n)
        m1 = float(owners.mean())
        # the paper's shortcut: the formulas at the mean owner count (n_j1 = mean, n_j0 = n - mean)
        p7_mean = p.p5 * (1 - p.p5) ** (m1 - 1) * (1 - p.p6) ** (n - m1)
        p8_mean = (1 - p.p5) ** m1 * (1 - (1 - p.p6) ** (n - m1))
        rows.append({"preset": name, "p1": p.p1, "p2": p.p2, "p5": p.p5, "p6": p.p6, "eps_one": p.eps_one,
                     "eps_inf": p.eps_inf, "p7": p7, "p8": p8, "p7_at_mean": p7_mean, "p8_at_mean": p8_mean,
                     "paper": PAPER["table5"][name]})
    return {"n": n, "shape": shape, "union": int(owners.size), "single_owner_share": float(np.mean(owners == 1)),
            "mean_owners": float(owners.mean()), "mean_set": float(np.mean([s.size for s in sets])), "presets": rows}


def round_costs(preset: str, n: int, *, shape: str = "taobao", batch: int = 32, dropout: float = 0.0,
                seed: int = 0) -> dict[str, Any]:
    """One measured SFSL round (module docstring); means over the clients that took part."""
    import torch

    torch.set_num_threads(1)
    world = TaobaoShaped(shape, seed)
    data = _clients(world, n, seed)
    rng = np.random.default_rng(seed)
    model = DIN(num_categories=data.num_categories)
    table, dense = model.init_public(data.num_goods, rng)
    emb = model.init_private(data.num_users, rng)
    server = SFSLServer(model, table, dense, data.goods_category)
    b = data.user_bounds()
    ids = [int(u) for u in np.unique(data.user)]
    devices = {u: SFSLDevice(u, data.subset(slice(b[u], b[u + 1])), get_cpp(preset), model, emb[u]) for u in ids}
    k = math.floor(dropout * n)
    psu_drop = {u: 2 for u in ids[:k]}
    drop = {u: 2 for u in ids[k:2 * k]}
    t0 = time.perf_counter()
    rep = sfsl_round(server, devices, 1, TrainingSettings(batch=batch), rng, psu_drop_after=psu_drop,
                     drop_after=drop)
    wall = time.perf_counter() - t0
    part = list(rep.perturbed_sizes)

    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values))

    stages = ("psu", "download", "secagg")
    return {
        "preset": preset, "n": n, "shape": shape, "batch": batch, "dropout": dropout, "dropped_psu": k,
        "dropped_update": len(drop), "union": rep.union_size, "perturbed": mean([rep.perturbed_sizes[u] for u in part]),
        "upload_bytes": {s: mean([rep.upload_bytes[u].get(s, 0) for u in part]) for s in stages},
        "download_bytes": {s: mean([rep.download_bytes[u].get(s, 0) for u in part]) for s in stages},
        "psu_client_bytes": mean([rep.upload_bytes[u]["psu"] + rep.download_bytes[u]["psu"] for u in ids]),
        "client_s": {s: mean([rep.client_seconds[u].get(s, 0.0) for u in part])
                     for s in ("psu", "perturb", "train", "secagg")},
        "server_s": dict(rep.server_seconds), "round_wall_s": wall,
    }


def training(train: ClickData, test: ClickData, preset: str, *, clients_per_round: int = 20, rounds: int = 50,
             batch: int = 8, lr: float = 1.0, bound: float = 1.0, eval_every: int = 10, seed: int = 0,
             progress: Callable[[int, Any], None] | None = None) -> dict[str, Any]:
    """SFSL training on ``train`` with AUC on ``test``; per-round costs averaged over rounds."""
    import torch

    torch.set_num_threads(1)
    run = SFSLRun(preset=preset, clients_per_round=clients_per_round, rounds=rounds,
                  settings=TrainingSettings(lr=lr, batch=batch, bound=bound), eval_every=eval_every, seed=seed)
    res = train_sfsl(train, test, run, progress=progress)
    reps = res.reports
    return {
        "preset": preset, "dataset": train.name, "clients_per_round": clients_per_round, "rounds": rounds,
        "batch": batch, "lr": lr, "bound": bound, "auc": {str(k): v for k, v in res.auc.items()},
        "final_auc": res.auc[max(res.auc)] if res.auc else None,
        "client_traffic_bytes": float(np.mean([r.per_client("traffic") for r in reps])),
        "client_upload_bytes": float(np.mean([r.per_client("upload") for r in reps])),
        "client_s": float(np.mean([r.per_client("seconds") for r in reps])),
        "server_s": float(np.mean([sum(r.server_seconds.values()) for r in reps])),
        "p7": float(np.mean(res.p7)), "p8": float(np.mean(res.p8)), "wall_s": res.seconds,
    }


def plan(parts: Sequence[str] = ("table5", "fig5", "fig6"), *, ns: Sequence[int] = (20, 40, 60),
         presets: Sequence[str] = tuple(CPP_PRESETS), n_large: Sequence[int] = (100,),
         large_presets: Sequence[str] = ("CPP2",), dropouts: Sequence[float] = (0.0, 0.1, 0.2),
         dropout_n: int = 40, dropout_presets: Sequence[str] = ("CPP2", "CPP5")) -> list[tuple[str, str, int, float]]:
    """The measurements :func:`run` makes for ``parts``, in order: ``(part, preset, n, dropout)``
    (``table5`` has one, at the largest n)."""
    steps: list[tuple[str, str, int, float]] = []
    if "table5" in parts:
        steps.append(("table5", "", max([*ns, *n_large]), 0.0))
    if "fig5" in parts:
        steps += [("fig5", name, n, 0.0) for n, names in [*((n, presets) for n in ns), *((n, large_presets)
                                                                                         for n in n_large)]
                  for name in names]
    if "fig6" in parts:
        steps += [("fig6", name, dropout_n, ratio) for name in dropout_presets for ratio in dropouts]
    return steps


def run(parts: Sequence[str] = ("table5", "fig5", "fig6"), *, ns: Sequence[int] = (20, 40, 60),
        presets: Sequence[str] = tuple(CPP_PRESETS), n_large: Sequence[int] = (100,),
        large_presets: Sequence[str] = ("CPP2",), dropouts: Sequence[float] = (0.0, 0.1, 0.2),
        dropout_n: int = 40, dropout_presets: Sequence[str] = ("CPP2", "CPP5"), shape: str = "taobao",
        batch: int = 32, seed: int = 0, on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The requested parts: ``table5``; ``fig5`` (every preset at each of ``ns``, the
    ``large_presets`` at each of ``n_large``; Table VI is its PSU share); ``fig6`` (the
    ``dropout_presets`` at ``dropout_n`` clients against ``dropouts``) -- the steps of
    :func:`plan`, each announced to ``on_step`` before it runs.  Before the first measured round
    an untimed round of 2 clients warms up (first-call costs are in no figure)."""
    step = on_step or (lambda _msg: None)
    out: dict[str, Any] = {"machine": platform.platform(), "processor": platform.processor() or platform.machine(),
                           "paper": PAPER, "shape": shape, "batch": batch}
    out.update({part: [] for part in ("fig5", "fig6") if part in parts})
    if "fig5" in parts or "fig6" in parts:
        round_costs("CPP2", 2, shape="taobao-mini", batch=batch, seed=seed)  # warm-up, untimed
        out["warm_up"] = "one untimed round of 2 taobao-mini clients before the measured rounds"
    for part, name, n, ratio in plan(parts, ns=ns, presets=presets, n_large=n_large, large_presets=large_presets,
                                     dropouts=dropouts, dropout_n=dropout_n, dropout_presets=dropout_presets):
        if part == "table5":
            step("Table V")
            out["table5"] = table5(n, shape, seed)
        elif part == "fig5":
            step(f"Figure 5: {name}, n={n}")
            out["fig5"].append(round_costs(name, n, shape=shape, batch=batch, seed=seed))
        else:
            step(f"Figure 6: {name}, n={n}, dropout {ratio:.0%}")
            out["fig6"].append(round_costs(name, n, shape=shape, batch=batch, dropout=ratio, seed=seed))
    return out


class _OutOfTime(Exception):
    """Raised from the progress callback of :func:`curve` when its time budget is spent."""


def curve(train: ClickData, test: ClickData, scheme: str, *, clients_per_round: int = 20, rounds: int = 100,
          batch: int = 2, lr: float = 1.0, eval_every: int = 5, seconds: float | None = None, seed: int = 0,
          progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Figure 4: test AUC every ``eval_every`` rounds of ``scheme`` (a preset: SFSL; ``"fl"``,
    ``"centralized"``: the plaintext baselines), the paper's training (SGD, lr decayed x0.999 a
    round).  With ``seconds``, training stops after the first evaluated round past that wall
    time (``rounds_run`` < ``rounds``, ``stopped_by_time``)."""
    import torch

    torch.set_num_threads(1)
    run = SFSLRun(preset=scheme if scheme in CPP_PRESETS else "CPP1", clients_per_round=clients_per_round,
                  rounds=rounds, settings=TrainingSettings(lr=lr, batch=batch), eval_every=eval_every, seed=seed)
    start = time.perf_counter()
    live: dict[int, dict[int, float]] = {}

    def on_round(r: int, res: Any) -> None:
        live[r] = dict(res.auc)
        if progress is not None:
            progress(r)
        if seconds is not None and r % eval_every == 0 and time.perf_counter() - start > seconds:
            raise _OutOfTime

    try:
        if scheme in BASELINES:
            train_baseline(train, test, run, scheme, progress=on_round)
        else:
            train_sfsl(train, test, run, progress=on_round)
    except _OutOfTime:
        pass
    done = max(live)
    auc = live[done]
    best = max(auc, key=lambda k: auc[k]) if auc else None
    return {"dataset": train.name, "scheme": scheme, "clients_per_round": clients_per_round, "batch": batch,
            "lr": lr, "rounds_planned": rounds, "rounds_run": done, "stopped_by_time": done < rounds,
            "auc": {str(k): v for k, v in auc.items()}, "best_auc": auc[best] if best else None,
            "best_round": best, "wall_s": time.perf_counter() - start}


def merge(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One result from several of :func:`run`'s (a sweep run in pieces): their ``fig4``/``fig5``/
    ``fig6``/``train`` rows concatenated in order (a later row for the same preset and n, or
    dataset, scheme and training settings, replaces an earlier one); the first result's other fields."""
    out: dict[str, Any] = dict(results[0]) if results else {}
    for key, ident in (("fig5", ("preset", "n")), ("fig6", ("preset", "n", "dropout")),
                       ("fig4", ("dataset", "scheme", "clients_per_round", "batch", "lr")),
                       ("train", ("dataset", "preset", "rounds"))):
        rows: dict[tuple[Any, ...], Any] = {}
        for res in results:
            for row in res.get(key, []):
                rows[tuple(row.get(k) for k in ident)] = row
        if rows:
            out[key] = list(rows.values())
    return out


def _scheme_label(scheme: str, lr: float = 1.0) -> str:
    name = {"fl": "FL (FedAvg, full model)", "centralized": "centralized"}.get(scheme, f"SFSL {scheme}")
    return name if lr == 1.0 else f"{name}, lr {lr:g}"


def plot_fig5(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Figure 5 (traffic, client and server seconds per round against n, one line per preset)
    and Table VI (the PSU's share) as one PNG, the paper's values as unfilled markers."""
    from secemb.bench.plots import line_panels

    mb, s = 1e6, "seconds per round"
    measures = {
        "(a) traffic per client": lambda r: (sum(r["upload_bytes"].values()) + sum(r["download_bytes"].values())) / mb,
        "(b) client time": lambda r: sum(r["client_s"].values()),
        "(c) server time": lambda r: sum(r["server_s"].values()),
    }
    panels: dict[str, dict[str, list[float]]] = {name: {} for name in measures}
    xs: dict[str, dict[str, list[float]]] = {name: {} for name in measures}
    for preset in sorted({r["preset"] for r in rows}):
        mine = sorted((r for r in rows if r["preset"] == preset), key=lambda r: r["n"])
        for name, f in measures.items():
            panels[name][preset] = [f(r) for r in mine]
            xs[name][preset] = [r["n"] for r in mine]
    # Table VI: the PSU is the same work under every preset: the mean over the presets at each n
    ns = sorted({r["n"] for r in rows})
    psu = {"client MB": [float(np.mean([r["psu_client_bytes"] / mb for r in rows if r["n"] == n])) for n in ns],
           "client s": [float(np.mean([r["client_s"]["psu"] for r in rows if r["n"] == n])) for n in ns],
           "server s": [float(np.mean([r["server_s"]["psu"] for r in rows if r["n"] == n])) for n in ns]}
    panels["(d) PSU per round (Table VI)"] = psu
    xs["(d) PSU per round (Table VI)"] = {label: ns for label in psu}
    t6 = PAPER["table6"]
    paper_n = [100]
    refs = {"(a) traffic per client": {f"paper {p}": (paper_n, [v]) for p, v in PAPER["fig5_traffic_mb_n100"].items()},
            "(b) client time": {"paper CPP2": (paper_n, [PAPER["fig5_cpp2_n100_s"]["client"]])},
            "(c) server time": {"paper CPP2": (paper_n, [PAPER["fig5_cpp2_n100_s"]["server"]])},
            "(d) PSU per round (Table VI)": {"paper client MB": (t6["n"], t6["client_mb"]),
                                             "paper client s": (t6["n"], t6["client_s"]),
                                             "paper server s": (t6["n"], t6["server_s"])}}
    batch = sorted({r["batch"] for r in rows})
    line_panels(path, panels, xlabel="clients per round n", ylabel=s, xs=xs, logy=True, refs=refs,
                ylabels={"(a) traffic per client": "MB per client per round",
                         "(b) client time": f"client {s} (training batch {'/'.join(map(str, batch))})",
                         "(c) server time": f"server {s}", "(d) PSU per round (Table VI)": "MB or seconds"},
                title="SFSL Figure 5 / Table VI on Taobao-shaped clients; diamonds: the paper's values "
                      "(2 shared cores, loaded)")


def plot_fig4(curves: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Figure 4: test AUC against the round, one panel per dataset, one line per scheme; the
    paper's best AUCs (Taobao, n = 100, 5,000 rounds) as unfilled markers at their rounds."""
    from secemb.bench.plots import line_panels

    panels: dict[str, dict[str, list[float]]] = {}
    xs: dict[str, dict[str, list[float]]] = {}
    refs: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for c in curves:
        rounds = sorted(int(k) for k in c["auc"])
        name = f"{c['dataset']}, n = {c['clients_per_round']}, batch {c['batch']}"
        label = _scheme_label(c["scheme"], c["lr"])
        panels.setdefault(name, {})[label] = [c["auc"][str(k)] for k in rounds]
        xs.setdefault(name, {})[label] = [float(k) for k in rounds]
        best = PAPER["fig4_best"].get(c["scheme"])
        if best and best["round"] and c["lr"] == 1.0:  # the paper's step size
            refs.setdefault(name, {})[f"paper {label}"] = ([best["round"]], [best["auc"]])
    line_panels(path, panels, xlabel="round (log scale)", ylabel="test AUC", xs=xs, logx=True, refs=refs,
                title="SFSL Figure 4: test AUC by round\ndiamonds: the paper's best AUCs\n"
                      "(Taobao, n = 100, 5,000 rounds)")
