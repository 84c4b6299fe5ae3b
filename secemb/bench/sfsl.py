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
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from secemb.data.ctr import ClickData, TaobaoShaped
from secemb.models.din import DIN
from secemb.privacy.randomized_response import CPP_PRESETS, event_probabilities, get_cpp
from secemb.protocols.sfsl import SFSLDevice, SFSLRun, SFSLServer, TrainingSettings, sfsl_round, train_sfsl

__all__ = ["PAPER", "round_costs", "run", "table5", "training"]

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


def run(parts: Sequence[str] = ("table5", "fig5", "fig6"), *, ns: Sequence[int] = (20, 40, 60),
        presets: Sequence[str] = tuple(CPP_PRESETS), n_large: Sequence[int] = (100,),
        large_presets: Sequence[str] = ("CPP2",), dropouts: Sequence[float] = (0.0, 0.1, 0.2),
        dropout_n: int = 40, dropout_presets: Sequence[str] = ("CPP2", "CPP5"), shape: str = "taobao",
        batch: int = 32, seed: int = 0, on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The requested parts: ``table5``; ``fig5`` (every preset at each of ``ns``, the
    ``large_presets`` at each of ``n_large``; Table VI is its PSU share); ``fig6`` (the
    ``dropout_presets`` at ``dropout_n`` clients against ``dropouts``)."""
    step = on_step or (lambda _msg: None)
    out: dict[str, Any] = {"machine": platform.platform(), "processor": platform.processor() or platform.machine(),
                           "paper": PAPER, "shape": shape, "batch": batch}
    if "table5" in parts:
        step("Table V")
        out["table5"] = table5(max([*ns, *n_large]), shape, seed)
    if "fig5" in parts:
        out["fig5"] = []
        for n, names in [*((n, presets) for n in ns), *((n, large_presets) for n in n_large)]:
            for name in names:
                step(f"Figure 5: {name}, n={n}")
                out["fig5"].append(round_costs(name, n, shape=shape, batch=batch, seed=seed))
    if "fig6" in parts:
        out["fig6"] = []
        for name in dropout_presets:
            for ratio in dropouts:
                step(f"Figure 6: {name}, n={dropout_n}, dropout {ratio:.0%}")
                out["fig6"].append(round_costs(name, dropout_n, shape=shape, batch=batch, dropout=ratio, seed=seed))
    return out
