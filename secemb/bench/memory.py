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
Server memory (``--server``, issue 37 goal 5)
    Peak resident memory of a fresh process playing server 0 of one round with ``n`` devices
    (:func:`server_round`): each device's retrieval request and upload (the device is played in
    the same process, one at a time, and dropped: its part of the peak is one device's, whatever
    ``n``; for the full-model baselines and plaintext a server 1 in the same process answers the
    device's second, empty, retrieval request), then the aggregate share over all but a tenth of
    them (the rest left out, as if silent at server 1, so their dense shares are taken out again).
    The peak (``VmHWM``) is read after the share; the growth is over the resident set right after
    the round began (the model in ring form and the evaluation table held).  Flat in ``n`` when the server's memory is
    O(model); O(devices x model) shows as a growth of ``n`` dense shares.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from secemb.bench.comm import DATASETS, MODELS
from secemb.bench.rss import reset_peak, status_kb

__all__ = ["SERVER_PROTOCOLS", "measure", "run", "server_round", "server_run"]

#: ``--server`` protocols: name -> get_protocol options (server 0's dense shares are explicit in all).
#: DP-FedRec's noise is the device's (played in the same process and dropped), so its scale here is
#: arbitrary: a server's memory does not depend on it.
SERVER_PROTOCOLS: dict[str, dict[str, Any]] = {
    "secemb": {"layout": "full", "relay": False},
    "secemb-cuckoo-relay": {"layout": "cuckoo", "relay": True},
    "secfedrec": {},
    "dp-fedrec": {"sigma": 1000.0, "clip": 0.1},
    "plaintext": {"layout": "full"},
}
#: protocols whose device completes a retrieval with both servers' replies before it uploads
#: (server 1's reply is empty in all three; a SecEmb device uploads without its result, given the
#: sketch seed its reply would carry)
_BOTH_REPLIES = frozenset({"secfedrec", "dp-fedrec", "plaintext"})


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


def _server_child(model_name: str, dataset: str, dim: int, devices: int, protocol: str, q: Any) -> None:
    from secemb.bench.rss import reset_peak, status_kb
    from secemb.data.features import synthetic_features
    from secemb.models import get_model, uses_features
    from secemb.protocols import get_protocol

    m, m_prime, mean = DATASETS[dataset]
    feats = {"features": synthetic_features(dataset, 1, m)} if uses_features(model_name) else {}
    model = get_model(model_name, dim=dim, **feats)
    proto = get_protocol(protocol.replace("-cuckoo-relay", ""), **SERVER_PROTOCOLS[protocol])
    rng = np.random.default_rng(0)  # the devices' items and gradients: workload, not secrets
    server = proto.make_server(0)
    helper = proto.make_server(1) if protocol in _BOTH_REPLIES else None  # its (empty) reply completes a retrieval
    table = rng.integers(0, 2**32, (m, model.sparse_width), dtype=np.uint64).astype(np.uint32)

    def one_round(round_id: int, devices: int) -> list[int]:
        """A round of ``devices`` devices up to the aggregate share; the users it includes."""
        rc = proto.round_config(round_id, m, model.sparse_width, model.dense_size, m_prime)
        server.begin_round(rc, table)
        if helper is not None:
            helper.begin_round(rc, table)
        if round_id:  # the measured round: from its start
            reset_peak()
            marks.append(status_kb("VmRSS"))
        for u in range(devices):
            _play_device(proto, rc, server, helper, u, mean, rng)
        marks.append(status_kb("VmRSS"))
        include = list(range(devices - max(1, devices // 10)))  # a tenth left out (silent at server 1)
        server.aggregate_share(include=include)
        return include

    marks: list[int] = []
    one_round(0, 2)  # warm-up: kernels loaded and compiled outside the figures
    marks.clear()
    t0 = time.perf_counter()
    include = one_round(1, devices)
    peak = status_kb("VmHWM")
    base, held = marks
    q.put({"seconds": time.perf_counter() - t0, "rss_round_start_mib": base / 1024, "rss_before_close_mib": held / 1024,
           "peak_rss_mib": peak / 1024, "growth_mib": (peak - base) / 1024, "dense_size": model.dense_size,
           "left_out": devices - len(include)})


def _play_device(proto: Any, rc: Any, server: Any, helper: Any, u: int, mean: int, rng: np.random.Generator) -> None:
    """Device ``u``'s retrieval and upload to ``server`` (server 0; ``helper``: a server 1 whose
    empty reply completes a full-model retrieval), with a random dense gradient."""
    m = rc.num_items
    user = proto.make_user(rc)
    items = rng.choice(m, rc.m_prime if rc.layout == "full" else mean, replace=False)
    slots = items if rc.layout == "full" else rc.cuckoo().assign(items, rng)[0]
    m0, m1 = user.retrieval_request(slots)
    reply0 = server.handle_retrieval(u, m0)
    if helper is not None:
        user.retrieval_result(reply0, helper.handle_retrieval(u, m1))
    if hasattr(user, "_sketch_seed"):  # SecEmb: server 1 plays no part here, so no reply gives the seed
        user._sketch_seed = bytes(16)
    rows = np.zeros((rc.slots, rc.width), rc.dtype)
    dense = rng.integers(0, 2**16, rc.dense_size, dtype=np.uint64).astype(rc.dtype)
    server.handle_upload(u, user.upload(rows, dense)[0])


def server_round(model: str, dataset: str, dim: int, devices: int, protocol: str = "secemb") -> dict[str, Any]:
    """Server 0's peak memory over one round of ``devices`` devices, in a fresh process (see
    the module's "Server memory"); ``protocol`` one of :data:`SERVER_PROTOCOLS`."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_server_child, args=(model, dataset, dim, devices, protocol, q))
    proc.start()
    try:
        while True:  # until the child reports, or dies without a report
            try:
                res: dict[str, Any] = q.get(timeout=5)
                return res
            except queue.Empty:
                if not proc.is_alive():
                    raise RuntimeError(f"the server memory probe died (exit code {proc.exitcode})") from None
    finally:
        proc.join(timeout=60)


def server_run(model: str = "deepfm", dataset: str = "ml-100k", dim: int = 128,
               devices: Sequence[int] = (10, 50, 100), protocols: Sequence[str] = ("secemb",), *,
               out: str | Path | None = "results/memory", progress: Any = None) -> list[dict[str, Any]]:
    """:func:`server_round` for each protocol and number of devices; the table in
    ``out/server_memory.md`` and ``.csv``."""
    t_all = time.perf_counter()
    jobs = [(p, n) for p in protocols for n in devices]
    task = progress.add_task("server memory", total=len(jobs)) if progress is not None else None
    rows = []
    for p, n in jobs:
        res = server_round(model, dataset, dim, n, p)
        rows.append({"protocol": p, "model": model, "dataset": dataset, "d": dim, "devices": n,
                     "dense_mb": res["dense_size"] * 4 / 1e6, **res})
        if progress is not None:
            progress.update(task, advance=1, description=f"server memory {p} {n} devices")
    if out is not None:
        from secemb.bench.tables import write_csv, write_markdown

        out = Path(out)
        cols = ["protocol", "model", "dataset", "d", "devices", "left_out", "dense_mb", "rss_round_start_mib",
                "rss_before_close_mib", "peak_rss_mib", "growth_mib", "seconds"]
        write_csv(out / "server_memory.csv", rows, cols)
        write_markdown(out / "server_memory.md", "Server 0's peak resident memory over one round (issue 37, goal 5)",
                       rows, cols, [f"Wall time {time.perf_counter() - t_all:.0f} s. One fresh process per row "
                                    "plays server 0 and, one at a time, the devices; a tenth of them is left "
                                    "out at the close. MiB = 2^20 bytes; dense_mb: one device's dense share "
                                    "(10^6 bytes)."])
    return rows
