"""``secemb bench scale``: the busier server's time per round against the number of workers
of the process backend (:class:`~secemb.protocols.backends.ProcessBackend`) and the thread
backend (:class:`~secemb.protocols.backends.ThreadBackend`), next to the serial backend in
the same run, and next to what the machine itself gives as many concurrent streams of the
servers' hot loop (:func:`machine_ceiling`): the ceiling any backend can reach there.

Each configuration runs the round of :func:`secemb.bench.server.measure` (``users`` users
of ``m'`` random items, both servers answering every retrieval as one batch, absorbing every
upload and aggregating) once to warm up (the pool starts, its workers load the compiled
kernels) and ``repeat`` times timed.  Three figures per configuration, from the fastest of the
timed rounds (the JSON also lists every timed round's first two): the busier server's time in
its role calls (the whole round: parsing, evaluation, masks, uploads, aggregation); the wall time of the
backend's maps, the part the workers share (the two servers' evaluations; with threads also
the aggregates' control-bit products and scatter, which the other backends keep in the server's
process rather than copy the bits); and the busier server's time outside its maps, which no
number of workers shortens (:func:`amdahl_bound` turns it into a bound on the speed-up at any
worker count, labelled as such; the same part on the server thread's CPU clock,
``outside_tasks_cpu_s``, gives the bound again from CPU times, which other jobs do not stretch).
On a machine shared
with other jobs those wall times say little; the CPU seconds of the same round say where the
work ran: the busier server's in this process, and the workers' (``/proc/<pid>/stat``, Linux,
both servers' evaluations).  Every round's
retrieved rows and reconstructed aggregate must hash to the serial backend's (they depend on
the seed only), or the benchmark fails.

Peak memory per worker is each worker process's peak resident set (``VmHWM`` of
``/proc/<pid>/status``, Linux), read when its configuration is done; it includes the pages of
the shared-memory table the worker touched (counted once per worker although they are
shared) and what the worker inherited from this process at fork.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Sequence
from typing import Any

from secemb.bench.machine import machine_info
from secemb.bench.progress import Steps, reported
from secemb.bench.server import TimedBackend, measure
from secemb.errors import InvalidParameters, ProtocolError
from secemb.protocols.backends import Backend, ProcessBackend, SerialBackend, ThreadBackend

__all__ = ["BACKENDS", "SIZES", "above_ideal", "amdahl_bound", "default_workers", "machine_ceiling", "plot", "run",
           "table_rows"]

#: the pooled backends the benchmark compares with the serial one
BACKENDS = {"process": ProcessBackend, "thread": ThreadBackend}

#: name: (m, m', users per round); d = 64 (the table has d + 1 columns)
SIZES = {
    "ml-1m": (3883, 300, 100),
    "yelp": (93386, 500, 100),
    "tiny": (1682, 40, 8),  # a smoke test
}
_D = 64


def default_workers(cores: int | None = None) -> list[int]:
    """1, 2, 4, ... up to the core count, and the core count itself."""
    cores = cores or os.cpu_count() or 1
    counts = [1]
    while counts[-1] * 2 <= cores:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == cores else [*counts, cores]


def _peak_rss(pid: int) -> int | None:
    """Peak resident set of process ``pid`` in bytes (``None`` where /proc does not say)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _own_peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB elsewhere


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 where /proc does not say)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _round(backend: TimedBackend, params: dict[str, Any]) -> dict[str, Any]:
    inner = backend.inner
    pids = inner.worker_pids() if isinstance(inner, ProcessBackend) else []
    before, cpu_before = backend.map_s, sum(map(_cpu_s, pids))
    rec = measure(**params, backend=backend)
    rec["evaluation_s"] = backend.map_s - before
    rec["workers_cpu_s"] = sum(map(_cpu_s, pids)) - cpu_before
    return rec


def machine_ceiling(counts: Sequence[int], reps: int = 40, trials: int = 3) -> dict[int, float]:
    """The speed-up this machine gives ``n`` concurrent streams of the servers' hot loop, for
    each ``n`` of ``counts``: ``n`` threads each run the AES conversion over 1 MiB of leaf words
    ``reps`` times at once, each into its own buffer allocated once (the compiled kernel
    :func:`~secemb.fss._numba_kernels.convert_blocks`, which runs without the GIL; without the
    kernels, :func:`~secemb.fss.convert.convert`), against one thread doing it alone;
    ``n t_1 / t_n`` with the fastest of ``trials`` for each time.  No backend can beat it; it
    falls short of ``n`` where vCPUs share a physical core, the hypervisor steals time or other
    jobs run.  (Until session 20 each call allocated its 2 MiB of output afresh, and on the 16-core
    device machine the probe read 1.9x at 16 threads where the Yelp round itself reached 7.5x;
    the allocations are the likely cause -- page faults serialise threads on one address space --
    not a measured one.)"""
    import threading

    import numpy as np

    from secemb.fss import kernels
    from secemb.fss.convert import convert

    words = np.arange(2 * 65536, dtype=np.uint64).reshape(-1, 2)

    def stream() -> None:
        if not kernels.compiled():
            for _ in range(reps):
                convert(words, 4, 32, "bench/ceiling")
            return
        from secemb.fss._aesni import round_keys
        from secemb.fss._numba_kernels import convert_blocks

        rk, out = round_keys("convert/bench/ceiling")[0], np.empty((words.shape[0], 1, 2), np.uint64)
        for _ in range(reps):
            convert_blocks(words, 1, rk, out)

    def wall(n: int) -> float:
        best = float("inf")
        for _ in range(trials):
            threads = [threading.Thread(target=stream) for _ in range(n)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            best = min(best, time.perf_counter() - start)
        return best

    stream()  # compile / warm up
    one = wall(1)
    return {n: 1.0 if n == 1 else n * one / wall(n) for n in counts}


def _bound(t1: float, s: float, counts: Sequence[int]) -> dict[str, float]:
    """``t_1 / (s + (t_1 - s) / n)`` for each ``n`` of ``counts``, by ``str(n)``."""
    return {str(n): t1 / (s + (t1 - s) / n) for n in counts}


def amdahl_bound(records: Sequence[dict[str, Any]], counts: Sequence[int]) -> dict[str, Any] | None:
    """Amdahl's law from one run's times (a bound, not a measurement): with ``t_1`` the serial
    record's round and ``s`` the time the thread backend's record with the most workers (at
    least 2) spent outside the backend's tasks -- work no worker count takes over, since with
    threads every table-sized step is a task -- the round at ``n`` workers takes at least
    ``s + (t_1 - s) / n``, a speed-up of at most ``t_1 / (s + (t_1 - s) / n)`` for each ``n``
    of ``counts``.  ``cpu`` holds the same from CPU times where the records have them (the
    serial round's CPU seconds and the server thread's CPU outside the tasks: on a machine
    other jobs load, wall time outside the tasks includes waiting for a core, CPU time does
    not), else ``None``.  ``None`` without such a thread record."""
    serial = next(r for r in records if r["backend"] == "serial")
    threads = [r for r in records if r["backend"] == "thread" and r["workers"] >= 2]
    if not threads:
        return None
    top = max(threads, key=lambda r: r["workers"])
    t1, s = serial["server_s_per_round"], min(top["outside_tasks_s"], serial["server_s_per_round"])
    cpu = None
    if top.get("outside_tasks_cpu_s") is not None and serial.get("server_cpu_s"):
        c1 = serial["server_cpu_s"]
        c = min(top["outside_tasks_cpu_s"], c1)
        cpu = {"outside_tasks_cpu_s": c, "serial_round_cpu_s": c1, "share": c / c1,
               "speedup_at_most": _bound(c1, c, counts)}
    return {
        "workers": top["workers"],
        "outside_tasks_s": s,
        "serial_round_s": t1,
        "share": s / t1,
        "speedup_at_most": _bound(t1, s, counts),
        "cpu": cpu,
    }


def _configuration(name: str, inner: Backend, workers: int | None, params: dict[str, Any],
                   repeat: int) -> dict[str, Any]:
    """Warm-up round, then ``repeat`` timed rounds through ``inner`` (closed after)."""
    backend = TimedBackend(inner)
    try:
        _round(backend, params)
        rounds = [_round(backend, params) for _ in range(repeat)]
        shared = inner.peak_shared_bytes if isinstance(inner, ProcessBackend) else 0
        peaks = [_peak_rss(pid) for pid in inner.worker_pids()] if isinstance(inner, ProcessBackend) else []
    finally:
        backend.close()
    times = [r["server_s_per_round"] for r in rounds]
    evaluations = [r["evaluation_s"] for r in rounds]
    fastest = rounds[times.index(min(times))]
    return {
        "backend": name,
        "workers": workers,
        "server_s_per_round": min(times),
        "rounds_s": times,
        "evaluation_s_per_round": min(evaluations),
        "evaluations_s": evaluations,
        # CPU seconds of the fastest round: the busier server's in this process, and all the
        # pool's workers' (both servers' evaluations)
        "server_cpu_s": fastest["server_cpu_s_per_round"],
        # the busier server's wall time in the backend's maps, and outside them (in its own
        # thread, whatever the number of workers)
        "server_tasks_s": fastest["server_tasks_s_per_round"],
        "outside_tasks_s": fastest["server_s_per_round"] - fastest["server_tasks_s_per_round"],
        # the server thread's CPU seconds outside the maps (the same part, on the CPU clock)
        "outside_tasks_cpu_s": fastest["server_outside_cpu_s_per_round"],
        "workers_cpu_s": fastest["workers_cpu_s"],
        "result_sha256": sorted({r["result_sha256"] for r in rounds}),
        "worker_peak_rss_bytes": peaks,
        "peak_shared_bytes": shared,
    }


def run(workers: list[int] | None = None, size: str = "ml-1m", layout: str = "cuckoo", relay: bool = True,
        repeat: int = 3, progress: Steps | None = None,
        backends: Sequence[str] = ("process",)) -> dict[str, Any]:
    """Serial, then each of ``backends`` (keys of :data:`BACKENDS`) at each count of
    ``workers`` (default :func:`default_workers`), at ``size`` (a key of :data:`SIZES`);
    ``progress`` hears of every configuration.

    Raises
    ------
    InvalidParameters
        An unknown size, layout or backend, a worker count < 1, or ``repeat`` < 1.
    ProtocolError
        A backend's results differ from the serial backend's.
    """
    if size not in SIZES:
        raise InvalidParameters(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    if layout not in ("full", "cuckoo"):
        raise InvalidParameters(f"layout must be 'full' or 'cuckoo', got {layout!r}")
    if not backends or any(b not in BACKENDS for b in backends):
        raise InvalidParameters(f"backends must be some of {', '.join(BACKENDS)}, got {list(backends)}")
    counts = workers or default_workers()
    if min(counts) < 1 or repeat < 1:
        raise InvalidParameters(f"worker counts and repeat must be >= 1, got {counts} and {repeat}")
    m, m_prime, users = SIZES[size]
    params = {"layout": layout, "relay": relay, "m": m, "m_prime": m_prime, "d": _D, "users": users}
    plan: list[tuple[str, int | None]] = [("serial", None)] + [(name, n) for name in backends for n in counts]
    plan.append(("ceiling", None))
    records: list[dict[str, Any]] = []
    ceiling: dict[int, float] = {}

    def step_name(step: tuple[str, int | None]) -> str:
        name, n = step
        if name == "ceiling":
            return "machine ceiling: concurrent AES streams"
        return f"{size}: {name} backend" + ("" if n is None else f", {n} worker{'s' if n > 1 else ''}")

    for name, n in reported(plan, progress, step_name):
        if name == "serial":
            records.append(_configuration("serial", SerialBackend(), None, params, repeat))
        elif n is not None:
            serial = records[0]
            rec = _configuration(name, BACKENDS[name](n), n, params, repeat)
            if rec["result_sha256"] != serial["result_sha256"]:
                raise ProtocolError(f"the {name} backend with {n} workers gave other results than the serial one")
            rec["speedup"] = serial["server_s_per_round"] / rec["server_s_per_round"]
            rec["evaluation_speedup"] = serial["evaluation_s_per_round"] / rec["evaluation_s_per_round"]
            records.append(rec)
        else:
            ceiling = machine_ceiling(counts)
    records[0]["speedup"] = records[0]["evaluation_speedup"] = 1.0
    return {
        "size": size,
        "m": m,
        "m_prime": m_prime,
        "users": users,
        "d": _D,
        "layout": layout,
        "relay": relay,
        "repeat": repeat,
        "records": records,
        "machine_ceiling": {str(n): v for n, v in ceiling.items()},
        "amdahl": amdahl_bound(records, sorted({*counts, 16})),
        "parent_peak_rss_bytes": _own_peak_rss(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "machine": machine_info(),
    }


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.1f}"


def table_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """(backend, workers, s/round, speed-up, evaluation s, its speed-up, s outside the tasks,
    server CPU s, workers' CPU s, largest worker peak RSS MiB)."""
    rows: list[tuple[str, ...]] = []
    for r in result["records"]:
        peaks = [p for p in r["worker_peak_rss_bytes"] if p is not None]
        rows.append((
            r["backend"],
            "-" if r["workers"] is None else str(r["workers"]),
            f"{r['server_s_per_round']:.3f}",
            f"{r['speedup']:.2f}x",
            f"{r['evaluation_s_per_round']:.3f}",
            f"{r['evaluation_speedup']:.2f}x",
            f"{r['outside_tasks_s']:.3f}",
            f"{r['server_cpu_s']:.3f}",
            f"{r['workers_cpu_s']:.3f}" if r["backend"] == "process" and r["workers"] > 1 else "-",
            "-" if not r["worker_peak_rss_bytes"] else f"{_mib(max(peaks) if peaks else None)}",
        ))
    return rows


def above_ideal(result: dict[str, Any], tolerance: float = 0.02) -> list[tuple[str, int, float]]:
    """``(backend, workers, speed-up)`` of every pooled record whose measured round speed-up
    beats the ideal (its worker count) by more than ``tolerance`` (relative): no backend can,
    so such a figure says the serial round was slowed (load, a cold cache) -- a warning, not a
    result."""
    return [(r["backend"], r["workers"], r["speedup"]) for r in result["records"]
            if r["workers"] is not None and r["speedup"] > r["workers"] * (1 + tolerance)]


def plot(result: dict[str, Any], path: str) -> None:
    """Speed-up over the serial backend against workers, with the ideal line, to ``path``;
    a speed-up above the ideal is marked as a warning (:func:`above_ideal`)."""
    from secemb.bench.plots import line_panels

    names = [n for n in BACKENDS if any(r["backend"] == n for r in result["records"])]
    xs = sorted({r["workers"] for r in result["records"] if r["backend"] in names})
    title = (f"{result['size']}: m = {result['m']:,}, m' = {result['m_prime']}, {result['users']} users, "
             f"{result['layout']}{' + relay' if result['relay'] else ''}")
    load = f", load average {result['load_average'][0]:.1f}" if result["load_average"] else ""
    series: dict[str, list[float]] = {}
    for name in names:
        by_n = {r["workers"]: r for r in result["records"] if r["backend"] == name}
        series[f"{name}: server's round"] = [by_n[n]["speedup"] if n in by_n else float("nan") for n in xs]
        series[f"{name}: evaluation (both servers)"] = [
            by_n[n]["evaluation_speedup"] if n in by_n else float("nan") for n in xs]
    series["ideal"] = [float(n) for n in xs]
    if "machine_ceiling" in result:  # results written before the ceiling was measured lack it
        series["machine: n concurrent AES streams"] = [result["machine_ceiling"].get(str(n), float("nan")) for n in xs]
    flags = [(n, x, f"{name}: {x:.2f}x > ideal {n}x,\nthe serial round was slowed?")
             for name, n, x in above_ideal(result)]
    line_panels(path, {title: series}, xlabel="workers", ylabel="speed-up over serial", x=xs, flags={title: flags},
                dashed=("ideal",), title=f"secemb bench scale ({result['machine']['cores']} cores{load})")
