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
* :func:`baseline_costs` -- the same round's costs under the baselines of Figure 5 and Section
  VI-B (:data:`COST_BASELINES`): secure federated learning (SFL: the full model down, its
  update under the secure sum) and the pure, unsecured versions of federated submodel learning
  and federated learning (FSL, FL).
* :func:`memory` -- Section VI-D: peak resident memory measured in fresh processes, of one
  client's round work (under a preset or a baseline), of the server alone (a preset's round
  with the server in its own process) and of a whole in-process round.
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

from secemb.bench.rss import reset_peak, status_kb
from secemb.data.ctr import ClickData, TaobaoShaped
from secemb.errors import InvalidParameters
from secemb.models.din import DIN
from secemb.privacy.randomized_response import CPP_PRESETS, event_probabilities, get_cpp
from secemb.protocols.sfsl import SFSLDevice, SFSLRun, SFSLServer, TrainingSettings, sfsl_round, train_sfsl
from secemb.protocols.sfsl.baselines import BASELINES, train_baseline
from secemb.protocols.sfsl.protocol import ExchangePlayer
from secemb.protocols.sfsl.staged import MIN_ROW_HOLDERS, SFSL_PLAN, SFSLNode
from secemb.randomness import system_rng
from secemb.secagg.psu import BloomParams
from secemb.sim.local import LocalStageServer
from secemb.sim.player import Rounds

__all__ = ["COST_BASELINES", "CURVES", "PAPER", "baseline_costs", "curve", "memory", "merge", "plot_fig4",
           "plot_fig5", "round_costs", "run", "table5", "training"]

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
    # Section VI-B: the pure versions, MB per client per round, independent of n
    "pure_traffic_mb": {"FSL": 0.41, "FL": 20.70},
    # Section VI-D, n = 100, no dropout: memory MB per client and of the server (SFL's from the stated
    # reductions: 209 MB is 59.40 % below SFL's client, 1.58 GB 81.88 % below SFL's server)
    "memory_mb_n100": {"CPP2": {"client": 209, "server": 1580}, "CPP5": {"client": 281, "server": 3150},
                       "SFL": {"client": round(209 / (1 - 0.5940)), "server": round(1580 / (1 - 0.8188))}},
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


def _world(world: TaobaoShaped, n: int, seed: int) -> tuple[ClickData, np.random.Generator, DIN, np.ndarray,
                                                              SFSLServer]:
    """What a measured round starts from: ``n`` clients of ``world`` (:func:`_clients`), the training
    generator seeded with ``seed`` after it drew the DIN model's public parameters and the clients'
    private embeddings (both benchmark data, not secrets), the model, the embeddings and the server
    holding the public parameters."""
    data = _clients(world, n, seed)
    rng = np.random.default_rng(seed)
    model = DIN(num_categories=data.num_categories)
    table, dense = model.init_public(data.num_goods, rng)
    emb = model.init_private(data.num_users, rng)
    server = SFSLServer(model, table, dense, data.goods_category)
    return data, rng, model, emb, server


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
                seed: int = 0, min_row_holders: int = MIN_ROW_HOLDERS) -> dict[str, Any]:
    """One measured SFSL round (module docstring), its secure sum with ``min_row_holders``
    (:attr:`~secemb.protocols.sfsl.TrainingSettings.min_row_holders`; with 2 a client dropping
    after ShareKeys whose rows are left one surviving holder aborts the round:
    :class:`~secemb.secagg.SecAggAborted`); means over the clients that took part."""
    import torch

    torch.set_num_threads(1)
    world = TaobaoShaped(shape, seed)
    data, rng, model, emb, server = _world(world, n, seed)
    b = data.user_bounds()
    ids = [int(u) for u in np.unique(data.user)]
    devices = {u: SFSLDevice(u, data.subset(slice(b[u], b[u + 1])), get_cpp(preset), model, emb[u]) for u in ids}
    k = math.floor(dropout * n)
    psu_drop = {u: 2 for u in ids[:k]}
    drop = {u: 2 for u in ids[k:2 * k]}
    t0 = time.perf_counter()
    rep = sfsl_round(server, devices, 1, TrainingSettings(batch=batch, min_row_holders=min_row_holders), rng,
                     psu_drop_after=psu_drop, drop_after=drop)
    wall = time.perf_counter() - t0
    part = list(rep.perturbed_sizes)

    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values))

    stages = ("psu", "download", "secagg")
    return {
        "preset": preset, "n": n, "shape": shape, "batch": batch, "min_row_holders": min_row_holders,
        "dropout": dropout, "dropped_psu": k,
        "dropped_update": len(drop), "union": rep.union_size, "perturbed": mean([rep.perturbed_sizes[u] for u in part]),
        "upload_bytes": {s: mean([rep.upload_bytes[u].get(s, 0) for u in part]) for s in stages},
        "download_bytes": {s: mean([rep.download_bytes[u].get(s, 0) for u in part]) for s in stages},
        "psu_client_bytes": mean([rep.upload_bytes[u]["psu"] + rep.download_bytes[u]["psu"] for u in ids]),
        "client_s": {s: mean([rep.client_seconds[u].get(s, 0.0) for u in part])
                     for s in ("psu", "perturb", "train", "secagg")},
        "server_s": dict(rep.server_seconds), "round_wall_s": wall,
    }


#: Figure 5's cost baselines (:func:`baseline_costs`): secure federated learning, and the pure
#: (unsecured) federated submodel learning and federated learning of Section VI-B
COST_BASELINES = ("SFL", "FSL", "FL")


def baseline_costs(scheme: str, n: int, *, shape: str = "taobao", batch: int = 32, seed: int = 0) -> dict[str, Any]:
    """One round of ``n`` Taobao-shaped clients (the clients, model and settings of
    :func:`round_costs`) under a baseline of :data:`COST_BASELINES`; means over the clients.

    * ``FSL`` (pure federated submodel learning): a client asks for the rows of its real goods
      set S (SFSL's request message, in the clear), gets W_S (SFSL's reply), trains on all its
      samples and uploads in the clear its rows' ids (uint32), their float32 updates and its
      uint32 per-row counts, in the one framing (32-byte header).
    * ``FL`` (pure federated learning): every client gets the whole model (SFSL's reply for all
      143,534 goods, their categories -- a category of no goods is never trained by anyone and
      not sent -- and the dense layers; the request is not counted: the model is broadcast),
      trains the full model on its samples and uploads the float32 update of every parameter
      and its uint32 training-set size, framed as above.
    * ``SFL`` (secure federated learning): FL's download and training; the update goes through
      the dense secure sum (:func:`secemb.secagg.run_round`, threshold ``n // 2 + 1``, no
      dropout): the quantized update ``n_i z`` of every row (SFSL's quantization, γ = 2^15) and
      one row holding ``n_i``, the FedAvg weights; the server applies the weighted mean.

    Bytes are ``len()`` of what crossed; seconds each party's own ``time.perf_counter`` work:
    ``client_s`` ``train`` (local training and encoding the upload) and ``update`` (the secure
    sum's client side; 0 in the clear), ``server_s`` ``download`` (the replies), ``update`` (the
    secure sum, or summing the clear uploads) and ``apply`` (the model update).

    Raises
    ------
    InvalidParameters
        An unknown scheme.
    """
    import torch

    from secemb.framing import HEADER_BYTES
    from secemb.protocols.sfsl.quantize import dequantize_mean, max_weight, quantize
    from secemb.secagg import SecAggConfig, default_threshold, run_round

    if scheme not in COST_BASELINES:
        raise InvalidParameters(f"scheme must be one of {COST_BASELINES}, got {scheme!r}")
    torch.set_num_threads(1)
    data, rng, model, emb, server = _world(TaobaoShaped(shape, seed), n, seed)
    sp, d = server.space, model.dim
    settings = TrainingSettings(batch=batch, max_weight=min(TrainingSettings().max_weight, max_weight(n)))
    full = scheme != "FSL"
    everything = np.arange(sp.goods, dtype=np.int64)
    b = data.user_bounds()
    ids = [int(u) for u in np.unique(data.user)]
    up: dict[str, list[float]] = {"download": [], "update": []}
    down: dict[str, list[float]] = {"download": [], "update": []}
    client_s: dict[str, list[float]] = {"train": [], "update": []}
    server_s = {"download": 0.0, "update": 0.0, "apply": 0.0}
    sizes = []
    total = np.zeros((sp.length, d))
    weight = np.zeros(sp.length)
    inputs: dict[int, np.ndarray] = {}
    t_round = time.perf_counter()
    for u in ids:
        # CPP5 over the whole catalogue asks for every row; CPP1 over the real set for exactly S
        dev = SFSLDevice(u, data.subset(slice(b[u], b[u + 1])), get_cpp("CPP5" if full else "CPP1"), model, emb[u])
        req = dev.request(everything if full else dev.real, 1)
        t0 = time.perf_counter()
        reply = server.reply(req, 1)
        server_s["download"] += time.perf_counter() - t0
        up["download"].append(0 if full else len(req))
        down["download"].append(len(reply))
        t0 = time.perf_counter()
        rows, deltas, weights = dev.local_update(reply, 1, sp, settings, rng)
        if scheme == "SFL":
            z, _ = quantize(deltas, settings.bound, settings.levels, rng)
            n_i = np.uint32(min(dev.trained, settings.max_weight))
            inputs[u] = np.zeros((sp.length + 1, d), np.uint32)  # the rows of the model, then the weight's
            inputs[u][rows] = z * n_i
            inputs[u][-1, 0] = n_i
        else:  # in the clear: FSL its rows' ids, updates and counts; FL every update and its sample count
            body = (deltas.astype("<f4").tobytes() + np.uint32(dev.trained).astype("<u4").tobytes() if full
                    else rows.astype("<u4").tobytes() + deltas.astype("<f4").tobytes()
                    + weights.astype("<u4").tobytes())
        client_s["train"].append(time.perf_counter() - t0)
        sizes.append(rows.size)
        if scheme != "SFL":
            up["update"].append(HEADER_BYTES + len(body))
            down["update"].append(0)
            client_s["update"].append(0.0)
            t0 = time.perf_counter()  # the server reads the clear upload and adds it up
            k = rows.size
            if full:
                v = float(np.frombuffer(body, "<u4", 1, 4 * k * d)[0])
                total[rows] += v * np.frombuffer(body, "<f4", k * d).reshape(k, d)
                weight[rows] += v
            else:
                at = np.frombuffer(body, "<u4", k)
                v_rows = np.frombuffer(body, "<u4", k, 4 * k * (d + 1)).astype(np.float64)
                total[at] += v_rows[:, None] * np.frombuffer(body, "<f4", k * d, 4 * k).reshape(k, d)
                weight[at] += v_rows
            server_s["update"] += time.perf_counter() - t0
    if scheme == "SFL":
        tr = run_round(SecAggConfig(length=sp.length + 1, threshold=default_threshold(n), width=d, round_id=3),
                       inputs)
        for u in ids:
            up["update"].append(tr.upload_bytes[u])
            down["update"].append(tr.download_bytes[u])
            client_s["update"].append(tr.client_seconds[u])
        server_s["update"] = float(sum(tr.server_seconds.values()))
        t0 = time.perf_counter()
        s = tr.total.reshape(sp.length + 1, d)
        server.add(dequantize_mean(s[:-1], np.full(sp.length, s[-1, 0]), settings.bound, settings.levels))
    else:
        t0 = time.perf_counter()
        server.add(np.divide(total, weight[:, None], out=np.zeros_like(total), where=weight[:, None] > 0))
    server_s["apply"] = time.perf_counter() - t0

    def mean(values: dict[str, list[float]]) -> dict[str, float]:
        return {k: float(np.mean(v)) for k, v in values.items()}

    return {"scheme": scheme, "n": n, "shape": shape, "batch": batch, "rows": float(np.mean(sizes)),
            "upload_bytes": mean(up), "download_bytes": mean(down), "client_s": mean(client_s),
            "server_s": server_s, "round_wall_s": time.perf_counter() - t_round}


def _reset_peak() -> None:
    """Reset this process's VmHWM to its current RSS (Linux >= 4.0), or raise :class:`OSError`."""
    if not reset_peak():
        raise OSError("cannot reset the peak RSS (/proc/self/clear_refs needs Linux >= 4.0)")


def _memory_child(what: str, scheme: str, n: int, shape: str, batch: int, seed: int, min_row_holders: int,
                  q: Any) -> None:
    """In a fresh process: the peak RSS of ``what`` (``client``: one client's round work;
    ``round``: a whole in-process round) above the RSS before it, and both absolute, in MB."""
    import gc

    import torch

    torch.set_num_threads(1)
    if what == "round":
        _reset_peak()
        base = status_kb("VmRSS")
        if scheme in COST_BASELINES:
            baseline_costs(scheme, n, shape=shape, batch=batch, seed=seed)
        else:
            round_costs(scheme, n, shape=shape, batch=batch, seed=seed, min_row_holders=min_row_holders)
        q.put({"base_kb": base, "peak_kb": status_kb("VmHWM")})
        return
    from secemb.secagg.psu import BloomParams, psu_input

    data, rng, model, emb, server = _world(TaobaoShaped(shape, seed), n, seed)
    space = server.space
    b = data.user_bounds()
    ids = np.unique(data.user)
    sizes = np.array([b[u + 1] - b[u] for u in ids])
    u = int(ids[np.argsort(sizes, kind="stable")[ids.size // 2]])  # the client with the median sample count
    full = scheme in ("SFL", "FL")
    union = (np.arange(space.goods) if full else
             np.unique(np.concatenate([data.goods_of(b[v], b[v + 1]) for v in ids])).astype(np.int64))
    dev = SFSLDevice(u, data.subset(slice(b[u], b[u + 1])), get_cpp("CPP5" if full else "CPP1" if scheme == "FSL"
                                                                      else scheme), model, emb[u])
    req = dev.request(dev.real if scheme == "FSL" else union, 1)
    reply = server.reply(req, 1)  # the server's side, before the client's baseline
    del server, req  # the public model (table, dense) goes with the server that holds it
    gc.collect()
    _reset_peak()
    base = status_kb("VmRSS")
    # the client's round work: its PSU vector (SFSL), the submodel it receives, local training
    # and its secure-sum input (SFL: every row of the model and the weight row)
    if scheme not in COST_BASELINES:
        psu_input(BloomParams.exact(space.goods), dev.real)
    rows, values = dev.train(reply, 1, space, TrainingSettings(batch=batch), rng)
    if scheme == "SFL":
        upload = np.zeros((space.length + 1, space.dim), np.uint32)
        upload[rows] = values[:, :space.dim]
    q.put({"base_kb": base, "peak_kb": status_kb("VmHWM"), "rows": int(rows.size), "samples": int(b[u + 1] - b[u])})


class _NodeInChild:
    """An :class:`~secemb.protocols.base.ExchangeNode` whose calls run in another process
    (:func:`_server_child`) over ``conn``: the rounds are played through it as through the node."""

    plan = SFSL_PLAN

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _call(self, method: str, *args: Any) -> Any:
        self.conn.send((method, args))
        ok, value = self.conn.recv()
        if not ok:
            raise RuntimeError(f"the server process refused {method}: {value}")
        return value

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        return dict(self._call("open_round", round_id, users))

    def receive(self, round_id: int, stage: str, user: int, body: bytes) -> None:
        self._call("receive", round_id, stage, user, body)

    def close(self, round_id: int, stage: str) -> None:
        self._call("close", round_id, stage)

    def reply(self, round_id: int, stage: str, user: int) -> bytes | None:
        out = self._call("reply", round_id, stage, user)
        return None if out is None else bytes(out)

    def outcome(self, round_id: int) -> dict[str, Any]:
        return dict(self._call("outcome", round_id))


def _server_child(n: int, shape: str, batch: int, seed: int, min_row_holders: int, conn: Any) -> None:
    """In a fresh process: the SFSL server (:class:`SFSLNode` over the public model of
    :func:`_world`, the clients' data freed) answering the node calls that come over ``conn``
    (``(method, args)``; ``None`` ends); first sends its RSS once the node is built and the
    peak reset, last its peak (kB)."""
    import gc

    data, _, _, emb, server = _world(TaobaoShaped(shape, seed), n, seed)
    node = SFSLNode(server, TrainingSettings(batch=batch, min_row_holders=min_row_holders))
    del data, emb, server
    gc.collect()
    _reset_peak()
    conn.send(status_kb("VmRSS"))
    while (call := conn.recv()) is not None:
        method, args = call
        try:
            conn.send((True, getattr(node, method)(*args)))
        except Exception as exc:  # noqa: BLE001 -- the parent raises it, with its type and message
            conn.send((False, f"{type(exc).__name__}: {exc}"))
    conn.send(status_kb("VmHWM"))


def _server_memory(scheme: str, n: int, shape: str, batch: int, seed: int, min_row_holders: int) -> dict[str, Any]:
    """One round of ``scheme`` (a preset) at ``n`` clients with the server in a fresh process
    (:func:`_server_child`) and the clients in this one, played by the engine's stages
    (:class:`~secemb.protocols.sfsl.protocol.ExchangePlayer`, the messages carried over a pipe);
    the server's peak and the round's traffic."""
    import multiprocessing as mp

    import torch

    torch.set_num_threads(1)
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_server_child, args=(n, shape, batch, seed, min_row_holders, theirs))
    proc.start()
    node = _NodeInChild(mine)
    try:
        if not mine.poll(600):
            raise RuntimeError(f"the server process (exit code {proc.exitcode}) sent nothing in 10 minutes")
        base = int(mine.recv())
        data, rng, model, emb, server = _world(TaobaoShaped(shape, seed), n, seed)
        b = data.user_bounds()
        devices = {int(u): SFSLDevice(int(u), data.subset(slice(b[u], b[u + 1])), get_cpp(scheme), model, emb[u])
                   for u in np.unique(data.user)}
        local = LocalStageServer(node)
        player = ExchangePlayer(Rounds(SFSL_PLAN, local.admin, local.link, lambda: b""), server.space,
                                BloomParams.exact(server.space.goods), server.table.shape)
        rep = player.play(devices, 1, TrainingSettings(batch=batch, min_row_holders=min_row_holders), rng,
                          psu_drop_after={}, drop_after={},
                          _rng=system_rng)
        mine.send(None)
        peak = int(mine.recv())
    except EOFError:
        raise RuntimeError(f"the server process exited with code {proc.exitcode} before reporting") from None
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.terminate()
    return {"base_kb": base, "peak_kb": peak, "union": rep.union_size,
            "perturbed": float(np.mean(list(rep.perturbed_sizes.values()))),
            "client_bytes": float(np.mean([sum(rep.upload_bytes[u].values()) + sum(rep.download_bytes[u].values())
                                           for u in rep.upload_bytes]))}


def memory(scheme: str, n: int, what: str = "client", *, shape: str = "taobao", batch: int = 32,
           seed: int = 0, min_row_holders: int = MIN_ROW_HOLDERS) -> dict[str, Any]:
    """Section VI-D, measured: peak resident memory (``VmHWM``, reset just before the measured
    work; Linux) in a fresh process (multiprocessing spawn: numpy, torch and secemb imported,
    nothing else of this process inherited), for ``scheme`` (a preset, or a baseline of
    :data:`COST_BASELINES`) at ``n`` clients.

    * ``what="client"``: one client's round work -- the client with the median sample count of
      the round's ``n``: its PSU vector (SFSL presets), the submodel reply it receives (the
      union is that of the ``n`` clients' real sets, as the PSU gives), its local training and
      its secure-sum input (SFL: the whole model's rows); the secure sum's own masking is not
      in it.  The reply is built before the measurement and the server's objects freed.
    * ``what="server"`` (presets only): the server alone -- one round of ``n`` clients with the
      server (:class:`SFSLNode` over the public model) in a fresh process of its own that holds
      nothing else, the clients in this one, the messages carried over a pipe and the stages
      played by the engine (:class:`~secemb.protocols.sfsl.protocol.ExchangePlayer`); its peak
      above its RSS once the model is built (the messages it receives and holds, the PSU and the
      secure sum's state, the replies, the update).  The row adds the round's ``union``, mean
      ``perturbed`` set size and mean ``client_bytes`` (up + down).
    * ``what="round"``: the whole round of :func:`round_costs` / :func:`baseline_costs` in one
      process (the server and all ``n`` clients): an upper bound of the server's memory.

    Returns ``work_mb`` (peak minus the RSS just before the work), ``process_mb`` (the peak),
    ``base_mb``, MB = 10^6 bytes.

    Raises
    ------
    InvalidParameters
        An unknown scheme or ``what``, or ``what="server"`` for a baseline.
    RuntimeError
        The fresh process died before reporting (e.g. it could not import the program), or the
        server process refused a call.
    """
    import multiprocessing as mp
    import queue

    if (scheme not in (*CPP_PRESETS, *COST_BASELINES) or what not in ("client", "server", "round")
            or (what == "server" and scheme not in CPP_PRESETS)):
        raise InvalidParameters(f"scheme must be a preset (what 'client', 'server' or 'round') or one of "
                                f"{COST_BASELINES} (what 'client' or 'round'), got {scheme!r}, {what!r}")
    kb = 1024 / 1e6
    if what == "server":
        res = _server_memory(scheme, n, shape, batch, seed, min_row_holders)
        return {"scheme": scheme, "n": n, "what": what, "shape": shape, "batch": batch,
                "work_mb": (res["peak_kb"] - res["base_kb"]) * kb, "process_mb": res["peak_kb"] * kb,
                "base_mb": res["base_kb"] * kb, **{k: res[k] for k in ("union", "perturbed", "client_bytes")}}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_memory_child, args=(what, scheme, n, shape, batch, seed, min_row_holders, q))
    proc.start()
    try:
        while True:  # the child's result, or its exit without one (it failed: its traceback is on stderr)
            try:
                res = q.get(timeout=5)
                break
            except queue.Empty:
                if proc.is_alive():
                    continue
            try:  # it exited: the result it put before, if any
                res = q.get(timeout=5)
                break
            except queue.Empty:
                raise RuntimeError(f"the memory probe's process exited with code {proc.exitcode} and no "
                                   "result") from None
    finally:
        proc.join()
    out = {"scheme": scheme, "n": n, "what": what, "shape": shape, "batch": batch,
           "work_mb": (res["peak_kb"] - res["base_kb"]) * kb, "process_mb": res["peak_kb"] * kb,
           "base_mb": res["base_kb"] * kb}
    out.update({k: res[k] for k in ("rows", "samples") if k in res})
    return out


def training(train: ClickData, test: ClickData, preset: str, *, clients_per_round: int = 20, rounds: int = 50,
             batch: int = 8, lr: float = 1.0, bound: float = 1.0, eval_every: int = 10, seed: int = 0,
             min_row_holders: int = MIN_ROW_HOLDERS, progress: Callable[[int, Any], None] | None = None
             ) -> dict[str, Any]:
    """SFSL training on ``train`` with AUC on ``test`` (the secure sum's ``min_row_holders``);
    per-round costs averaged over rounds."""
    import torch

    torch.set_num_threads(1)
    run = SFSLRun(preset=preset, clients_per_round=clients_per_round, rounds=rounds,
                  settings=TrainingSettings(lr=lr, batch=batch, bound=bound, min_row_holders=min_row_holders),
                  eval_every=eval_every, seed=seed)
    res = train_sfsl(train, test, run, progress=progress)
    reps = res.reports
    return {
        "preset": preset, "dataset": train.name, "clients_per_round": clients_per_round, "rounds": rounds,
        "batch": batch, "lr": lr, "bound": bound, "min_row_holders": min_row_holders,
        "auc": {str(k): v for k, v in res.auc.items()},
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
         dropout_n: int = 40, dropout_presets: Sequence[str] = ("CPP2", "CPP5"),
         baselines: Sequence[str] = COST_BASELINES, baseline_ns: Sequence[int] = (20,),
         memory_schemes: Sequence[str] = ("CPP2", "CPP5", "SFL", "FSL", "FL"), memory_ns: Sequence[int] = (20,),
         memory_what: Sequence[str] = ("client", "round")) -> list[tuple[str, str, int, float]]:
    """The measurements :func:`run` makes for ``parts``, in order: ``(part, preset or baseline,
    n, dropout)`` (``table5`` has one, at the largest n; ``baselines``: each of ``baselines`` at
    each of ``baseline_ns``; ``memory``: ``what/scheme`` for each of ``memory_what``,
    ``memory_schemes`` and ``memory_ns``, ``server`` for the presets only)."""
    steps: list[tuple[str, str, int, float]] = []
    if "table5" in parts:
        steps.append(("table5", "", max([*ns, *n_large]), 0.0))
    if "fig5" in parts:
        steps += [("fig5", name, n, 0.0) for n, names in [*((n, presets) for n in ns), *((n, large_presets)
                                                                                         for n in n_large)]
                  for name in names]
    if "fig6" in parts:
        steps += [("fig6", name, dropout_n, ratio) for name in dropout_presets for ratio in dropouts]
    if "baselines" in parts:
        steps += [("baselines", name, n, 0.0) for n in baseline_ns for name in baselines]
    if "memory" in parts:
        steps += [("memory", f"{what}/{name}", n, 0.0) for n in memory_ns for what in memory_what
                  for name in memory_schemes if what != "server" or name in CPP_PRESETS]
    return steps


def run(parts: Sequence[str] = ("table5", "fig5", "fig6"), *, ns: Sequence[int] = (20, 40, 60),
        presets: Sequence[str] = tuple(CPP_PRESETS), n_large: Sequence[int] = (100,),
        large_presets: Sequence[str] = ("CPP2",), dropouts: Sequence[float] = (0.0, 0.1, 0.2),
        dropout_n: int = 40, dropout_presets: Sequence[str] = ("CPP2", "CPP5"),
        baselines: Sequence[str] = COST_BASELINES, baseline_ns: Sequence[int] = (20,),
        memory_schemes: Sequence[str] = ("CPP2", "CPP5", "SFL", "FSL", "FL"), memory_ns: Sequence[int] = (20,),
        memory_what: Sequence[str] = ("client", "round"), shape: str = "taobao", batch: int = 32, seed: int = 0,
        min_row_holders: int = MIN_ROW_HOLDERS, on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The requested parts: ``table5``; ``fig5`` (every preset at each of ``ns``, the
    ``large_presets`` at each of ``n_large``; Table VI is its PSU share); ``fig6`` (the
    ``dropout_presets`` at ``dropout_n`` clients against ``dropouts``); ``baselines`` (Figure 5's
    cost baselines, :func:`baseline_costs`, at each of ``baseline_ns``); ``memory`` (Section
    VI-D, :func:`memory`) -- the steps of
    :func:`plan`, each announced to ``on_step`` before it runs; SFSL's secure sums with
    ``min_row_holders``.  Before the first measured round
    an untimed round of 2 clients warms up (first-call costs are in no figure)."""
    step = on_step or (lambda _msg: None)
    out: dict[str, Any] = {"machine": platform.platform(), "processor": platform.processor() or platform.machine(),
                           "paper": PAPER, "shape": shape, "batch": batch, "min_row_holders": min_row_holders}
    out.update({part: [] for part in ("fig5", "fig6", "baselines", "memory") if part in parts})
    if "fig5" in parts or "fig6" in parts or "baselines" in parts:
        round_costs("CPP2", 2, shape="taobao-mini", batch=batch, seed=seed)  # warm-up, untimed
        out["warm_up"] = "one untimed round of 2 taobao-mini clients before the measured rounds"
    for part, name, n, ratio in plan(parts, ns=ns, presets=presets, n_large=n_large, large_presets=large_presets,
                                     dropouts=dropouts, dropout_n=dropout_n, dropout_presets=dropout_presets,
                                     baselines=baselines, baseline_ns=baseline_ns, memory_schemes=memory_schemes,
                                     memory_ns=memory_ns, memory_what=memory_what):
        if part == "table5":
            step("Table V")
            out["table5"] = table5(n, shape, seed)
        elif part == "fig5":
            step(f"Figure 5: {name}, n={n}")
            out["fig5"].append(round_costs(name, n, shape=shape, batch=batch, seed=seed,
                                           min_row_holders=min_row_holders))
        elif part == "baselines":
            step(f"Figure 5 baseline: {name}, n={n}")
            out["baselines"].append(baseline_costs(name, n, shape=shape, batch=batch, seed=seed))
        elif part == "memory":
            what, scheme = name.split("/")
            step(f"Section VI-D memory: {what}, {scheme}, n={n}")
            out["memory"].append(memory(scheme, n, what, shape=shape, batch=batch, seed=seed,
                                        min_row_holders=min_row_holders))
        else:
            step(f"Figure 6: {name}, n={n}, dropout {ratio:.0%}")
            out["fig6"].append(round_costs(name, n, shape=shape, batch=batch, dropout=ratio, seed=seed,
                                           min_row_holders=min_row_holders))
    return out


class _OutOfTime(Exception):
    """Raised from the progress callback of :func:`curve` when its time budget is spent."""


def curve(train: ClickData, test: ClickData, scheme: str, *, clients_per_round: int = 20, rounds: int = 100,
          batch: int = 2, lr: float = 1.0, eval_every: int = 5, seconds: float | None = None, seed: int = 0,
          min_row_holders: int = MIN_ROW_HOLDERS, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Figure 4: test AUC every ``eval_every`` rounds of ``scheme`` (a preset: SFSL; ``"fl"``,
    ``"centralized"``: the plaintext baselines), the paper's training (SGD, lr decayed x0.999 a
    round; SFSL's secure sum with ``min_row_holders``).  With ``seconds``, training stops after
    the first evaluated round past that wall time (``rounds_run`` < ``rounds``,
    ``stopped_by_time``)."""
    import torch

    torch.set_num_threads(1)
    run = SFSLRun(preset=scheme if scheme in CPP_PRESETS else "CPP1", clients_per_round=clients_per_round,
                  rounds=rounds, settings=TrainingSettings(lr=lr, batch=batch, min_row_holders=min_row_holders),
                  eval_every=eval_every, seed=seed)
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
            "lr": lr, "min_row_holders": min_row_holders if scheme in CPP_PRESETS else None,
            "rounds_planned": rounds, "rounds_run": done, "stopped_by_time": done < rounds,
            "auc": {str(k): v for k, v in auc.items()}, "best_auc": auc[best] if best else None,
            "best_round": best, "wall_s": time.perf_counter() - start}


def merge(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One result from several of :func:`run`'s (a sweep run in pieces): their ``fig4``/``fig5``/
    ``fig6``/``baselines``/``memory``/``train`` rows concatenated in order (a later row for the same preset and n, or
    dataset, scheme and training settings, replaces an earlier one; ``min_row_holders`` is among them, absent --
    ``None`` -- in rows written before session 26, which were all measured with 1); the first result's other
    fields."""
    out: dict[str, Any] = dict(results[0]) if results else {}
    for key, ident in (("fig5", ("preset", "n", "min_row_holders")),
                       ("fig6", ("preset", "n", "dropout", "min_row_holders")), ("baselines", ("scheme", "n")),
                       ("memory", ("what", "scheme", "n")),
                       ("fig4", ("dataset", "scheme", "clients_per_round", "batch", "lr", "min_row_holders")),
                       ("train", ("dataset", "preset", "rounds", "min_row_holders"))):
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


def plot_fig5(rows: Sequence[dict[str, Any]], path: str | Path, baselines: Sequence[dict[str, Any]] = ()) -> None:
    """Figure 5 (traffic, client and server seconds per round against n, one line per preset
    and per cost baseline of ``baselines``, :func:`baseline_costs`' rows) and Table VI (the
    PSU's share) as one PNG, the paper's values as unfilled markers."""
    from secemb.bench.plots import line_panels

    mb, s = 1e6, "seconds per round"
    measures = {
        "(a) traffic per client": lambda r: (sum(r["upload_bytes"].values()) + sum(r["download_bytes"].values())) / mb,
        "(b) client time": lambda r: sum(r["client_s"].values()),
        "(c) server time": lambda r: sum(r["server_s"].values()),
    }
    panels: dict[str, dict[str, list[float]]] = {name: {} for name in measures}
    xs: dict[str, dict[str, list[float]]] = {name: {} for name in measures}
    lines = [(p, [r for r in rows if r["preset"] == p]) for p in sorted({r["preset"] for r in rows})]
    lines += [(f"{b} (baseline)", [r for r in baselines if r["scheme"] == b]) for b in COST_BASELINES
              if any(r["scheme"] == b for r in baselines)]
    for label, group in lines:
        mine = sorted(group, key=lambda r: r["n"])
        for name, f in measures.items():
            panels[name][label] = [f(r) for r in mine]
            xs[name][label] = [r["n"] for r in mine]
    # Table VI: the PSU is the same work under every preset: the mean over the presets at each n
    ns = sorted({r["n"] for r in rows})
    psu = {"client MB": [float(np.mean([r["psu_client_bytes"] / mb for r in rows if r["n"] == n])) for n in ns],
           "client s": [float(np.mean([r["client_s"]["psu"] for r in rows if r["n"] == n])) for n in ns],
           "server s": [float(np.mean([r["server_s"]["psu"] for r in rows if r["n"] == n])) for n in ns]}
    panels["(d) PSU per round (Table VI)"] = psu
    xs["(d) PSU per round (Table VI)"] = {label: ns for label in psu}
    t6 = PAPER["table6"]
    paper_n = [100]
    traffic_refs = {f"paper {p}": (paper_n, [v]) for p, v in PAPER["fig5_traffic_mb_n100"].items()}
    traffic_refs.update({f"paper pure {p}": (paper_n, [v]) for p, v in PAPER["pure_traffic_mb"].items()})
    refs = {"(a) traffic per client": traffic_refs,
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
