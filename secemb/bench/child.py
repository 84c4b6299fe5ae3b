"""A benchmark's measured child process: :func:`run_child` runs one and returns its wall time
and its CPU time (user + system, ``getrusage(RUSAGE_CHILDREN)`` around it), the figures
``secemb bench overhead`` and ``secemb bench startup`` compare.

``RUSAGE_CHILDREN`` counts every child this process has waited for: run one measured child at a
time (the benchmarks do), else a child that ends meanwhile is counted too.
"""

from __future__ import annotations

import resource
import subprocess
import time
from dataclasses import dataclass

__all__ = ["ChildRun", "run_child"]


@dataclass(frozen=True)
class ChildRun:
    """One finished child: its exit status, its output (``stdout`` empty unless kept), its wall
    seconds from before its start to its exit and its CPU seconds (user + system)."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float


def run_child(args: list[str], *, keep_stdout: bool = True, timeout_s: float | None = None) -> ChildRun:
    """Run ``args`` (a command line, no shell) to its end and measure it (module docstring);
    its output is read as text, its standard output thrown away unless ``keep_stdout``.

    Raises
    ------
    subprocess.TimeoutExpired: it ran past ``timeout_s`` (it is killed).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(args, stdout=subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=timeout_s, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return ChildRun(proc.returncode, proc.stdout or "", proc.stderr, wall, cpu)
