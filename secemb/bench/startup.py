"""``secemb bench startup`` (issue 37, goal 2): what a process pays before its first round.

Every figure comes from a fresh interpreter (a child process of this one), since a process that
has imported the modules or loaded the kernels once no longer pays for them:

Set-up
    ``secemb train --dataset D --epochs 1 --quiet`` up to the start of its first round -- the
    imports, the command line, loading and splitting the data, building the experiment, the
    Eq. 11 count -- and then the compiled kernels' warm-up
    (:func:`secemb.protocols.backends.warm_kernels`: what the first round's first kernel call
    would pay).  The child stops at the first round by replacing
    ``secemb.sim.driver.TrainingRun._round`` with a function that raises; nothing is trained
    or written.  Wall time from before the child starts (interpreter start-up included) to its
    exit, its CPU time (user + system, ``getrusage`` of the children) and the CPU time of its
    phases (``time.process_time`` at their ends).  Goal: wall at most :data:`GOAL_SETUP_S`.
First kernel call
    A child that imports :mod:`secemb.protocols.backends` and times one
    :func:`~secemb.protocols.backends.warm_kernels` (wall and CPU), then counts, over every
    numba dispatcher of the process, the signatures loaded from numba's on-disk cache and those
    compiled: after the first run on a machine the count of compiled ones is 0 (the
    first-call cost is paid once per machine; the process backend's forked workers inherit the
    loaded kernels and pay nothing, ``tests/protocols/test_backends.py``).

Each child runs ``repeats`` times; the table shows the lowest wall time's run (and every run is
in the JSON).  Wall times depend on the machine's load (the load average is recorded); the CPU
times less so.  Where Python writes no bytecode cache (``PYTHONDONTWRITEBYTECODE``), every
child compiles the imported modules that have no cached ``.pyc`` from source: the result records it
(``bytecode_cache``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from secemb.bench.child import run_child
from secemb.bench.machine import machine_info
from secemb.errors import InvalidParameters, SecembError, check_int

__all__ = ["GOAL_SETUP_S", "run", "table_rows"]

#: issue 37's goal: the set-up of ``secemb train`` (import, data, kernel warm-up), wall seconds
GOAL_SETUP_S = 1.5

#: child: ``secemb train`` up to its first round, then the kernels' warm-up; prints a JSON line
_SETUP = """
import json, sys, time
clock = time.process_time
marks = {}
import secemb.cli
marks["import_cli"] = clock()
from secemb.sim import driver

class _FirstRound(BaseException):
    pass

def _stop(self, epoch, users):
    marks["first_round"] = clock()
    raise _FirstRound

driver.TrainingRun._round = _stop
sys.argv = ["secemb", "train", "--quiet", "--epochs", "1"] + json.loads(sys.argv[1])
try:
    secemb.cli.main()
except _FirstRound:
    pass
except SystemExit as exc:
    sys.exit(f"secemb train stopped before its first round (exit {exc.code})")
from secemb.protocols.backends import warm_kernels
warm_kernels()
marks["warm"] = clock()
print(json.dumps(marks))
"""

#: child: one warm-up of the kernels in a fresh process, and numba's cache hits / compilations
_FIRST_CALL = """
import gc, json, sys, time
from secemb.fss import kernels
from secemb.protocols.backends import warm_kernels
wall, cpu = time.perf_counter(), time.process_time()
warm_kernels()
out = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "kernels": kernels.BACKEND}
if kernels.compiled():
    from numba.core.registry import CPUDispatcher
    ds = [d for d in gc.get_objects() if isinstance(d, CPUDispatcher)]
    out["cache_hits"] = sum(sum(d.stats.cache_hits.values()) for d in ds)
    out["compiled"] = sum(sum(d.stats.cache_misses.values()) for d in ds)
print(json.dumps(out))
"""


def _child(script: str, *args: str, timeout_s: float) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter; its last stdout line (JSON) with ``wall_total_s``
    (from before the start to the exit) and ``cpu_total_s`` (the child's user + system)."""
    proc = run_child([sys.executable, "-c", script, *args], timeout_s=timeout_s)
    if proc.returncode != 0:
        last = " / ".join(proc.stderr.strip().splitlines()[-2:]) or "no message"
        raise SecembError(f"the measured child process failed (exit {proc.returncode}): {last}")
    got: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    got["wall_total_s"] = proc.wall_s
    got["cpu_total_s"] = proc.cpu_s
    return got


def _phases(marks: dict[str, float]) -> dict[str, float]:
    """CPU seconds of each phase from the child's cumulative process-clock marks."""
    return {"import_cli_s": marks["import_cli"], "to_first_round_s": marks["first_round"] - marks["import_cli"],
            "kernel_warm_up_s": marks["warm"] - marks["first_round"]}


def run(dataset: str = "ml-100k", *, data_dir: str | None = None, repeats: int = 3, timeout_s: float = 300.0,
        progress: Callable[[str], None] = lambda step: None) -> dict[str, Any]:
    """Measure the set-up and a fresh process's first kernel call ``repeats`` times each (see
    the module docstring); raises :class:`~secemb.errors.SecembError` if a child fails (an
    unknown dataset, say) and :class:`~secemb.errors.InvalidParameters` for ``repeats < 1``."""
    check_int("repeats", repeats, low=1)
    if not dataset or dataset.startswith("-"):
        raise InvalidParameters(f"dataset must be a dataset name or path, got {dataset!r}")
    args = ["--dataset", dataset] + (["--data-dir", data_dir] if data_dir else [])
    load_before = os.getloadavg()
    setup, first = [], []
    for i in range(repeats):
        progress(f"set-up {i + 1}/{repeats}")
        marks = _child(_SETUP, json.dumps(args), timeout_s=timeout_s)
        setup.append({"wall_s": marks["wall_total_s"], "cpu_s": marks["cpu_total_s"], **_phases(marks)})
        progress(f"first kernel call {i + 1}/{repeats}")
        got = _child(_FIRST_CALL, timeout_s=timeout_s)
        first.append({k: v for k, v in got.items() if k not in ("wall_total_s", "cpu_total_s")})
    return {
        "dataset": dataset, "repeats": repeats, "goal_setup_s": GOAL_SETUP_S,
        "setup": setup, "setup_best": min(setup, key=lambda r: r["wall_s"]),
        "first_call": first, "first_call_best": min(first, key=lambda r: r["wall_s"]),
        "kernels": first[0]["kernels"], "bytecode_cache": not sys.dont_write_bytecode,
        "loadavg": {"before": list(load_before), "after": list(os.getloadavg())}, "machine": machine_info(),
    }


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows ``(measure, value, goal)`` of :func:`run`'s result."""
    s, f = result["setup_best"], result["first_call_best"]
    rows = [
        ("set-up of secemb train, wall (fresh process)", f"{s['wall_s']:.3f} s", f"<= {result['goal_setup_s']} s"),
        ("  its CPU (user + system)", f"{s['cpu_s']:.3f} s", ""),
        ("  import secemb.cli (CPU)", f"{s['import_cli_s']:.3f} s", ""),
        ("  to the first round: command, data, build, count (CPU)", f"{s['to_first_round_s']:.3f} s", ""),
        ("  kernel warm-up (CPU)", f"{s['kernel_warm_up_s']:.3f} s", ""),
        ("first kernel call of a fresh process, wall", f"{f['wall_s']:.3f} s", ""),
        ("  its CPU", f"{f['cpu_s']:.3f} s", ""),
    ]
    if "compiled" in f:
        worst = max(r["compiled"] for r in result["first_call"][1:]) if result["repeats"] > 1 else f["compiled"]
        rows.append(("  signatures loaded from numba's cache / compiled (later runs)",
                     f"{f['cache_hits']} / {worst}", "compiled 0"))
    return rows
