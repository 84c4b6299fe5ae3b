"""``secemb bench server``: the servers' computation per round, full-domain layout against
the cuckoo layout, measured by running the protocol roles on random keys.

Each configuration runs one round: ``users`` users request ``m'`` random items each (for the
full layout, exactly ``m'`` rows; for the cuckoo layout, their items cuckoo-inserted into
``B`` buckets), both servers answer every retrieval as one batch, absorb every upload and
produce their aggregate shares; ``server_s_per_round`` is the busier server's time in its
role calls (the two servers run in parallel in a deployment).  Through a :class:`TimedBackend`,
``server_tasks_s_per_round`` is the part of that time spent in the backend's maps (the work
its workers share); the rest runs in the server's own thread whatever the worker count, and
``server_outside_cpu_s_per_round`` is that thread's CPU time there (a clock other jobs on the
machine do not stretch, as they stretch wall time).  The user side is not timed.
The protocol bytes each user sent and received are counted too (``len()`` of the messages;
the public dense-parameter download of the training loop is not part of this round).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from secemb.bench.machine import machine_info
from secemb.bench.progress import Steps, reported
from secemb.errors import InvalidParameters
from secemb.protocols.backends import Backend, Handle
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbRelayServer

__all__ = ["CONFIGS", "WARM_UP", "TimedBackend", "measure", "run", "warm_up"]

#: (name, m, m', users for the full layout, users for the cuckoo layout): at Yelp size one
#: full-layout user costs each server ~10 s, so both layouts are also compared at 10 users
CONFIGS = [
    ("ml1m", 3883, 300, 100, 100),
    ("yelp", 93386, 500, 10, 100),
]


class TimedBackend(Backend):
    """``inner`` with the wall time of its maps added up in ``map_s`` (seconds), and the CPU
    time the calling thread spent in them in ``map_cpu_s`` (the tasks it ran itself: all of
    them serially, its share of them with the thread backend, none while processes run them)."""

    def __init__(self, inner: Backend) -> None:
        self.inner, self.workers, self.in_process, self.map_s = inner, inner.workers, inner.in_process, 0.0
        self.map_cpu_s = 0.0

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return self.inner.map(fn, tasks)
        finally:
            self.map_s += time.perf_counter() - start
            self.map_cpu_s += time.thread_time() - cpu

    def publish(self, value: Any) -> Handle:
        return self.inner.publish(value)

    def release(self, handle: Handle) -> None:
        self.inner.release(handle)

    def close(self) -> None:
        self.inner.close()


def measure(layout: str, relay: bool, m: int, m_prime: int, d: int, users: int, seed: int = 0,
            backend: Backend | None = None) -> dict[str, Any]:
    """One round with ``users`` users (servers evaluating through ``backend``, default serial);
    returns the JSON record of the measurement."""
    proto = SecEmbProtocol(layout=layout, relay=relay, backend=backend)
    cfg = proto.round_config(0, m, d + 1, 1, m_prime)
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 2**32, (m, d + 1), dtype=np.uint64).astype(np.uint32)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    busy = [0.0, 0.0]
    cpu = [0.0, 0.0]  # this process's CPU time in each server's calls (not a backend's workers')
    tasks = [0.0, 0.0]  # wall time of each server's calls inside the backend's maps
    # the calling thread's CPU time in each server's calls outside the backend's maps: what no
    # worker takes over, on a clock that other jobs on the machine do not stretch
    outside_cpu = [0.0, 0.0]
    timer = backend if isinstance(backend, TimedBackend) else None

    def timed(party: int, fn: Callable[..., Any], *args: Any) -> Any:
        t0, c0, m0 = time.perf_counter(), time.process_time(), timer.map_s if timer else 0.0
        th0, mc0 = time.thread_time(), timer.map_cpu_s if timer else 0.0
        out = fn(*args)
        busy[party] += time.perf_counter() - t0
        cpu[party] += time.process_time() - c0
        outside_cpu[party] += time.thread_time() - th0 - ((timer.map_cpu_s - mc0) if timer else 0.0)
        if timer:
            tasks[party] += timer.map_s - m0
        return out

    timed(0, s0.begin_round, cfg, table)
    timed(1, s1.begin_round, cfg, table)
    roles, reqs = [], []
    up = down = 0  # bytes between the users and the servers (protocol messages)
    for _ in range(users):
        role = proto.make_user(cfg)
        request = place(cfg, rng.choice(m, m_prime, replace=False), rng)
        roles.append((role, request))
        reqs.append(role.retrieval_request(request.indices))
        up += sum(len(q) for q in reqs[-1])
    ids = range(users)
    digest = hashlib.sha256()  # of what the users retrieved and the aggregate: fixed by the seed
    a1 = timed(1, s1.handle_retrieval_many, [(u, reqs[u][1]) for u in ids])
    a0 = timed(0, s0.handle_retrieval_many, [(u, reqs[u][0]) for u in ids])
    if relay:
        assert isinstance(s0, SecEmbRelayServer) and isinstance(s1, SecEmbRelayServer)  # make_server's, with relay
        masked = timed(1, s1.relay_retrieval_many, [(u, a0[u]) for u in ids])
        a0 = timed(0, s0.complete_retrieval_many, [(u, masked[u]) for u in ids])
    uploads = []
    for u, (role, request) in enumerate(roles):
        down += len(a0[u]) + (len(a1[u]) if a1[u] is not None else 0)
        digest.update(role.retrieval_result(a0[u], a1[u]).tobytes())
        grads = np.zeros((cfg.slots, d + 1), np.uint32)
        grads[request.real_pos] = rng.integers(0, 2**32, (request.real_pos.size, d + 1), dtype=np.uint64)
        uploads.append(role.upload(grads, np.zeros(1, np.uint32)))
        up += len(uploads[-1][0]) + (len(uploads[-1][1] or b""))
    # each server absorbs the round's uploads as one batch (as a node does what arrives together)
    fwds = timed(0, s0.handle_upload_many, [(u, uploads[u][0]) for u in ids])
    if not relay:
        timed(1, s1.handle_upload_many, [(u, uploads[u][1]) for u in ids])
    else:
        assert isinstance(s1, SecEmbRelayServer)  # server 0 forwards with relay only
        timed(1, s1.relay_upload_many, [(u, fwds[u]) for u in ids])
    share = timed(1, s1.aggregate_share)
    sparse, dense = timed(0, s0.combine, share)
    digest.update(sparse.tobytes() + dense.tobytes())
    busier = busy.index(max(busy))
    return {
        "layout": layout,
        "relay": relay,
        "m": m,
        "m_prime": m_prime,
        "d": d,
        "users": users,
        "server_s_per_round": busy[busier],
        "server_cpu_s_per_round": cpu[busier],
        "server_tasks_s_per_round": tasks[busier] if timer else None,
        "server_outside_cpu_s_per_round": outside_cpu[busier] if timer else None,
        "upload_bytes_per_user": up / users,
        "download_bytes_per_user": down / users,
        # the rows retrieved and the reconstructed aggregate depend on the seed only (not on
        # the keys' randomness): equal whatever backend evaluated them
        "result_sha256": digest.hexdigest(),
    }


def traffic(users: int = 2) -> list[dict[str, Any]]:
    """Per-user protocol bytes of every variant at the sizes of ML-100K, ML-1M and Yelp
    (d = 64, dense size 1 as for MF), each measured by running a round."""
    rows = []
    for name, m, mp in (("ml100k", 1682, 200), ("ml1m", 3883, 300), ("yelp", 93386, 500)):
        for layout, relay in (("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)):
            rec = measure(layout, relay, m, mp, 64, users)
            rec["dataset"] = name
            rows.append(rec)
    return rows


def failure_rate(m: int, m_prime: int, users: int, expansion: float = 1.25, seed: int = 0) -> dict[str, Any]:
    """Cuckoo insertion failures over ``users`` users of ``m'`` random items each: the
    fraction of items dropped and of users who dropped any."""
    from secemb.fss.cuckoo import CuckooLayout

    layout = CuckooLayout.for_request_size(m, m_prime, expansion)
    rng = np.random.default_rng(seed)
    drops = [layout.assign(rng.choice(m, m_prime, replace=False), rng)[1].size for _ in range(users)]
    return {
        "m": m,
        "m_prime": m_prime,
        "buckets": layout.num_buckets,
        "bucket_size": layout.bucket_size,
        "users": users,
        "dropped_item_rate": sum(drops) / (users * m_prime),
        "users_with_drops": sum(1 for x in drops if x) / users,
    }


#: what the result says about the first-call costs
WARM_UP = ("one untimed round of every variant (full; cuckoo; cuckoo + relay) at m = 1,682 before the timings: "
           "kernel compilation and first-call costs are in no figure")


def warm_up(backend: Backend | None = None) -> None:
    """One untimed round of every variant (full, cuckoo, cuckoo + relay) of 2 users at
    m = 1,682 through ``backend``: the kernels compile (or load from numba's cache) and
    first-call costs are paid here, not in a timed round."""
    for layout, relay in (("full", False), ("cuckoo", False), ("cuckoo", True)):
        measure(layout, relay, 1682, 20, 8, 2, backend=backend)


def run(
    quick: bool = False, progress: Steps | None = None, full_users: int | None = None, backend: str = "serial",
) -> dict[str, Any]:
    """All configurations, plus the sweep over m behind the plot; ``quick`` shrinks them;
    ``full_users`` overrides the number of users of the full-layout runs (and of the cuckoo
    runs compared with them); ``progress`` hears of every step.  ``backend`` ``"gpu"``: the
    servers evaluate on the CUDA device, and the result's ``gpu`` entry holds that GPU's raw
    AES rate and the kernels' leaves per second measured in the same run
    (:func:`secemb.bench.gpu.run`; raises :class:`~secemb.errors.InvalidParameters` without a
    CUDA device)."""
    if backend not in ("serial", "gpu"):
        raise InvalidParameters(f"backend must be 'serial' or 'gpu', got {backend!r}")
    d = 64
    configs = [("tiny", 1682, 200, 2, 2)] if quick else CONFIGS
    if full_users:
        configs = [(n, m, mp, full_users, cu) for n, m, mp, _, cu in configs]
    # the plan: (step name, kind, arguments)
    plan: list[tuple[str, str, tuple[Any, ...]]] = []
    if backend == "gpu":
        plan.append(("GPU: raw AES and kernel throughput", "gpu", ()))
    plan.append(("warm-up (untimed)", "warm-up", ()))
    for name, m, mp, full_n, cuckoo_n in configs:
        runs = [("full", False, full_n), ("cuckoo", False, full_n), ("cuckoo", True, full_n)]
        if cuckoo_n != full_n:
            runs.append(("cuckoo", True, cuckoo_n))
        plan += [(f"{name}: {layout}{' relay' if relay else ''}, {users} users", "record",
                  (name, layout, relay, m, mp, users)) for layout, relay, users in runs]
    for m in [1682] if quick else [1682, 3883, 10681, 30000, 93386]:
        plan += [(f"sweep m={m}: {layout}", "sweep", (layout, m)) for layout in ("full", "cuckoo")]
    plan.append(("cuckoo insertion failures", "insertion", ()))
    if not quick:
        plan.append(("traffic of every variant", "traffic", ()))
    evaluator: Backend | None = None
    result: dict[str, Any] = {"records": [], "sweep": [], "insertion": [], "traffic": [], "backend": backend,
                              "warm_up": WARM_UP, "gpu": None}
    for _, kind, args in reported(plan, progress, lambda step: step[0]):
        if kind == "gpu":
            from secemb.bench import gpu as bench_gpu
            from secemb.protocols.backends import GpuBackend

            result["gpu"] = bench_gpu.run(quick, yelp_round=False)
            evaluator = GpuBackend()
        elif kind == "warm-up":
            warm_up(evaluator)
        elif kind == "record":
            name, layout, relay, m, mp, users = args
            rec = measure(layout, relay, m, mp, d, users, backend=evaluator)
            result["records"].append({**rec, "dataset": name, "backend": backend})
        elif kind == "sweep":
            result["sweep"].append(measure(args[0], False, args[1], 200, d, 2, backend=evaluator))
        elif kind == "insertion":
            result["insertion"] = [failure_rate(m, mp, 100 if quick else 2000) for _, m, mp, _, _ in configs]
        else:
            result["traffic"] = traffic()
    result["machine"] = machine_info()
    return result


def plot(sweep: list[dict[str, Any]], path: str) -> None:
    """Server time per round against m for both layouts (log-log), to ``path`` (PNG)."""
    from secemb.bench.plots import line_panels

    ms = sorted({r["m"] for r in sweep})
    series = {f"{layout} layout": [next((r["server_s_per_round"] for r in sweep
                                         if r["layout"] == layout and r["m"] == m), float("nan")) for m in ms]
              for layout in ("full", "cuckoo")}
    users, mp = sweep[0]["users"], sweep[0]["m_prime"]
    line_panels(path, {f"m' = {mp}, d = 64, {users} users": series}, xlabel="items m",
                ylabel="server seconds per round", title="SecEmb server computation", x=ms, logx=True, logy=True)
