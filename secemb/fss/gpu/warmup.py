"""Compile every GPU kernel once and say what it cost: ``python -m secemb.fss.gpu.warmup``.

Hazmat layer (measurement).  Triton compiles a kernel at its first launch with a new
specialisation key and keeps the result in its disk cache (``~/.triton/cache``, or
``TRITON_CACHE_DIR``); later launches and later processes load it from there.  :func:`warm_up`
launches each of the nine kernel variants of :mod:`secemb.fss.gpu._triton` (six kernels,
three of them in both rings) once on tiny inputs, then once more, and reports per variant what
Triton compiled or loaded from its cache and the seconds it took (:func:`compile_log`).  Every
integer argument of the kernels is unspecialised, so these are all the variants any workload
compiles (``docs/gpu.md``, "First run on a GPU").  Run it before timing anything on a fresh
machine; under Triton's CPU interpreter (``TRITON_INTERPRET=1``) nothing is compiled and only
the launches are timed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from secemb import fss
from secemb.errors import InvalidParameters

if TYPE_CHECKING:
    import torch

__all__ = ["Compile", "WarmupRow", "compile_log", "warm_up", "main"]


@dataclass(frozen=True)
class Compile:
    """One request to Triton's compiler: the kernel, whether its disk cache had it, and the
    seconds Triton spent (compiling, or loading from the cache)."""

    kernel: str
    cache_hit: bool
    seconds: float


@dataclass(frozen=True)
class WarmupRow:
    """One kernel variant of :func:`warm_up`: ``compiled`` / ``cached`` variants of it the first
    launch compiled / loaded from Triton's disk cache, ``compile_s`` the seconds Triton's compiler
    spent on them, ``first_s`` / ``second_s`` the wall seconds of the first launch (compilation
    included) and of the next one, each ended by a device synchronisation."""

    variant: str
    compiled: int
    cached: int
    compile_s: float
    first_s: float
    second_s: float


@contextmanager
def compile_log() -> Iterator[list[Compile]]:
    """Record every compilation request Triton serves inside the block (through its
    ``knobs.compilation.listener``, restored on exit); the yielded list fills as they happen.
    Nothing is recorded under the interpreter, which does not compile."""
    from triton import knobs

    log: list[Compile] = []

    def listener(*, src: Any, times: Any, cache_hit: bool, **_: Any) -> None:  # noqa: ANN401 - Triton's types
        fn = getattr(src, "fn", None)
        log.append(Compile(getattr(fn, "__name__", str(src)), bool(cache_hit), times.total / 1e6))

    previous = knobs.compilation.listener
    knobs.compilation.listener = listener
    try:
        yield log
    finally:
        knobs.compilation.listener = previous


def _steps(dev: torch.device) -> list[tuple[str, Callable[[], object]]]:
    """One launch (the walk: one per level) of each kernel variant on tiny inputs; the values do
    not matter (zero leaves), only the arguments' types."""
    import torch

    from secemb.fss.gpu import evaluate as ev

    m, d, width = 5, 3, 4
    path = fss.gen_path(np.array([1]), m)[0]
    words = torch.zeros((256, 2), dtype=torch.int64, device=dev)
    leaves = torch.zeros((1, m, 2), dtype=torch.int64, device=dev)
    rk = torch.zeros((1, 44), dtype=torch.int32, device=dev)
    r = torch.zeros((1, m), dtype=torch.int64, device=dev)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("mmo_kernel", lambda: ev.mmo(words, "warmup/aes")),
        ("level_kernel", lambda: ev.expand(path, dev)),
        ("sketch_kernel", partial(ev.leaf_sketches, leaves, rk, r, r, 1)),
    ]
    for dtype, ring in ((torch.int32, "Z_2^32"), (torch.int64, "Z_2^64")):
        cw = torch.zeros(1, dtype=dtype, device=dev)
        e = torch.zeros((1, 1, m), dtype=dtype, device=dev)
        table = torch.zeros((1, m, d), dtype=dtype, device=dev)
        acc = torch.zeros((1, m, width), dtype=dtype, device=dev)
        steps += [
            (f"retrieval_kernel {ring}", partial(ev.retrieval_shares, leaves, cw, 0, dtype == torch.int64)),
            (f"ring_matmul_kernel {ring}", partial(ev.ring_matmul, e, table)),
            (f"convert_sum_kernel {ring}", partial(ev.convert_sum, leaves, acc)),
        ]
    return steps


def _timed(fn: Callable[[], object], dev: torch.device) -> float:
    import torch

    t0 = time.perf_counter()
    fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return time.perf_counter() - t0


def warm_up(dev: torch.device) -> Iterator[WarmupRow]:
    """Launch every kernel variant on ``dev`` twice (:func:`secemb.fss.gpu.device`: the CUDA
    device, or the CPU under the interpreter), yielding each one's compilation and launches as
    it is done; afterwards no workload of the GPU backend compiles again in this process (nor,
    through Triton's disk cache, in later ones on this machine)."""
    for variant, fn in _steps(dev):
        with compile_log() as log:
            first = _timed(fn, dev)
        second = _timed(fn, dev)
        yield WarmupRow(variant, sum(not c.cache_hit for c in log), sum(c.cache_hit for c in log),
                        sum(c.seconds for c in log if not c.cache_hit), first, second)


def main() -> int:
    """``python -m secemb.fss.gpu.warmup``: print :func:`warm_up` 's rows; exit 2 with one line
    where there is no CUDA device (nor the interpreter) or no Triton."""
    from secemb.fss import gpu

    try:
        dev = gpu.device()
    except InvalidParameters as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch
    import triton

    where = "Triton's CPU interpreter" if gpu.interpreting() else torch.cuda.get_device_name(dev)
    print(f"Triton {triton.__version__} on {where}; disk cache {triton.knobs.cache.dir}")
    print(f"{'kernel variant':28s} {'compiled':>8s} {'cached':>6s} {'compile s':>9s} {'1st launch s':>12s} "
          f"{'2nd launch s':>12s}")
    t0 = time.perf_counter()
    rows = []
    for r in warm_up(dev):
        print(f"{r.variant:28s} {r.compiled:8d} {r.cached:6d} {r.compile_s:9.2f} {r.first_s:12.3f} {r.second_s:12.4f}",
              flush=True)
        rows.append(r)
    print(f"total: {sum(r.compiled for r in rows)} compiled, {sum(r.cached for r in rows)} from the cache, "
          f"{sum(r.compile_s for r in rows):.2f} s compiling, {time.perf_counter() - t0:.2f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
