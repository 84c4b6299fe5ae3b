"""Where a server's per-user evaluation runs: in the calling thread, in a process pool on
this machine, on a Ray cluster, or on a CUDA device.

A server splits a batch of users' keys into contiguous chunks, one per worker, and maps a
module-level task over them; ring sums are exact, so every backend returns bit-identical
results to the serial one (tests check this).  The task and its arguments are plain numpy
data, so they pickle to worker processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from secemb.errors import InvalidParameters

if TYPE_CHECKING:
    from secemb.fss.cuckoo import CuckooLayout
    from secemb.fss.gpu import DeviceTable

__all__ = ["Backend", "SerialBackend", "ProcessBackend", "RayBackend", "GpuBackend", "make_backend"]


class Backend:
    """Runs ``fn`` over task arguments; ``workers`` is how many chunks are worth making."""

    workers: int = 1
    #: whether tasks run in this process (so large per-round objects need not be shipped)
    local: bool = True

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    def device_table(self, table: np.ndarray, layout: str | CuckooLayout) -> DeviceTable | None:
        """The round's table resident where this backend evaluates (``None``: host memory)."""
        return None

    def close(self) -> None:
        """Release workers (idempotent)."""


class SerialBackend(Backend):
    """Everything in the calling thread."""

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        return [fn(t) for t in tasks]


class ProcessBackend(Backend):
    """A pool of worker processes on this machine (all cores by default)."""

    local = False

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        if self.workers < 1:
            raise InvalidParameters(f"workers must be >= 1, got {self.workers}")
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        if len(tasks) <= 1:
            return [fn(t) for t in tasks]
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        return list(self._pool.map(fn, tasks))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class RayBackend(Backend):
    """Tasks on a Ray cluster (``pip install secemb[ray]``); ``address=None`` starts or joins
    a local instance."""

    local = False

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise InvalidParameters("the Ray backend needs Ray: pip install 'secemb[ray]'") from exc
        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote: dict[Callable[[Any], Any], Any] = {}

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(fn)
        return self._ray.get([remote.remote(t) for t in tasks])


class GpuBackend(SerialBackend):
    """Evaluation on a CUDA device through Triton kernels (``pip install 'secemb[gpu]'``,
    :mod:`secemb.fss.gpu`): tasks run one after another in this process, each batch of keys
    as a few kernel launches; the round's table is uploaded to the device once, in its
    layout's form (:meth:`device_table`).  Bit-identical to :class:`SerialBackend`.

    Raises
    ------
    InvalidParameters
        Triton is missing, or there is no CUDA device (nor Triton's CPU interpreter,
        ``TRITON_INTERPRET=1``, which runs the same kernels slowly for tests).
    """

    def __init__(self) -> None:
        from secemb.fss import gpu

        self.device = gpu.device()

    def device_table(self, table: np.ndarray, layout: str | CuckooLayout) -> DeviceTable:
        from secemb.fss.gpu import DeviceTable

        return DeviceTable(table, layout, self.device)


def make_backend(name: str, workers: int | None = None, address: str | None = None) -> Backend:
    """``serial``, ``process``, ``ray`` or ``gpu`` (``workers`` and ``address`` unused by
    ``serial`` and ``gpu``)."""
    if name == "serial":
        return SerialBackend()
    if name == "process":
        return ProcessBackend(workers)
    if name == "ray":
        return RayBackend(address, workers)
    if name == "gpu":
        return GpuBackend()
    raise InvalidParameters(f"backend must be 'serial', 'process', 'ray' or 'gpu', got {name!r}")
