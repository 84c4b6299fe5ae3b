"""Where a server's per-user evaluation runs: in the calling thread, in threads of this
process, in a process pool on this machine, on a Ray cluster, or on a CUDA device.

A server splits a batch of users' keys into contiguous chunks, one per worker, and maps a
module-level task over them; ring sums are exact, so every backend returns bit-identical
results to the serial one (tests check this).  The task and its arguments are plain numpy
data, so they pickle to worker processes.

What every task of a round reads (the server's table, in the form the evaluation uses) is
*published* once per round (:meth:`Backend.publish`): tasks carry a small :class:`Handle`
and call ``handle.get()`` where they run.  The process backend copies the value once into a
POSIX shared-memory segment that its workers map read-only; the Ray backend puts it once in
the cluster's object store.  So a task pickles to its keys plus a few hundred bytes,
whatever the table's size (``tests/protocols/test_backends.py`` checks this).
"""

from __future__ import annotations

import os
import pickle
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, wait
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import TYPE_CHECKING, Any

import numpy as np

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss.convert import convert, convert_add
from secemb.fss.cuckoo import NUM_HASHES, CuckooLayout
from secemb.fss.hashing import hmac_sha256_many, sha256_many
from secemb.fss.linalg import LimbMatrix
from secemb.fss.sketch import SketchCheck, expand

if TYPE_CHECKING:
    from secemb.fss.gpu import DeviceTable

__all__ = [
    "Backend", "Handle", "SerialBackend", "ThreadBackend", "ProcessBackend", "RayBackend", "GpuBackend", "make_backend",
    "warm_kernels",
]


class Handle:
    """A published value as tasks carry it (small to pickle); :meth:`get` returns the value
    in whichever process the task runs."""

    def get(self) -> Any:
        raise NotImplementedError


class _InProcess(Handle):
    """The value itself, for backends whose tasks run in this process."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


class Backend:
    """Runs ``fn`` over task arguments; ``workers`` is how many chunks are worth making."""

    workers: int = 1
    #: whether tasks run in this process (they read its arrays without copies)
    in_process: bool = True

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    def publish(self, value: Any) -> Handle:
        """Make ``value`` (numpy arrays, or an object holding them) readable by this
        backend's tasks until :meth:`release` (or until the handle is garbage); tasks must
        not write to it."""
        return _InProcess(value)

    def release(self, handle: Handle) -> None:
        """Free what :meth:`publish` took for ``handle`` (idempotent)."""

    def device_table(self, table: np.ndarray, layout: str | CuckooLayout) -> DeviceTable | None:
        """The round's table resident where this backend evaluates (``None``: host memory)."""
        return None

    def close(self) -> None:
        """Release workers (idempotent)."""


class SerialBackend(Backend):
    """Everything in the calling thread."""

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        return [fn(t) for t in tasks]


def _worker_count(workers: int | None) -> int:
    """``workers``, or every core for ``None``."""
    n = (os.cpu_count() or 1) if workers is None else workers
    if n < 1:
        raise InvalidParameters(f"workers must be >= 1, got {n}")
    return n


class ThreadBackend(Backend):
    """``workers`` threads of this process (all cores by default): the calling thread and a
    pool of ``workers - 1``, which take a map's tasks in order, each the next one left.  The
    compiled kernels (:mod:`secemb.fss.kernels`) release the GIL, so tasks that are mostly
    kernel time run in parallel with nothing copied: a published value is the value itself.
    Without the kernels (the numpy reference) the tasks mostly take turns."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = _worker_count(workers)
        self._pool: ThreadPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        """``fn`` of each task, in order; the first failing task's (by position) exception is
        raised once every task has run.  The calling thread runs tasks too (it would wait
        otherwise): a map wakes ``min(workers, len(tasks)) - 1`` pool threads, not one more.

        A task that raises a ``BaseException`` that is no ``Exception`` (``KeyboardInterrupt``,
        ``SystemExit``) stops the map: no task starts after it, and it is raised once the tasks
        running have returned (none is left running behind the caller).  A task may map on
        the same backend (a nested map): a pool thread that has not started a map's share by
        the time the caller has taken every task is not waited for."""
        if len(tasks) <= 1 or self.workers == 1:
            return [fn(t) for t in tasks]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers - 1, thread_name_prefix="secemb-eval")
        results: list[Any] = [None] * len(tasks)
        failed: list[tuple[int, Exception]] = []
        order = iter(range(len(tasks)))
        stopped = [False]  # a task raised a BaseException: no task starts after it
        lock = threading.Lock()

        def drain() -> None:
            """Run the next task left until none is."""
            while True:
                with lock:
                    i = None if stopped[0] else next(order, None)
                if i is None:
                    return
                try:
                    results[i] = fn(tasks[i])
                except Exception as exc:  # raised in the caller below, in task order
                    with lock:
                        failed.append((i, exc))
                except BaseException:
                    stopped[0] = True
                    raise

        helpers = [self._pool.submit(drain) for _ in range(min(self.workers, len(tasks)) - 1)]
        try:
            drain()
        finally:
            # a helper still queued has nothing left to run (and, in a nested map, may be
            # queued behind the very pool thread that waits for it): cancelled, not waited for
            started = [helper for helper in helpers if not helper.cancel()]
            wait(started)
        for helper in started:
            helper.result()  # a pool thread's BaseException
        if failed:
            raise min(failed, key=lambda f: f[0])[1]
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


#: published values this process maps, by segment name: the publisher's own (until
#: released) and, in a worker, the last few rounds' attachments (least recently used last)
_OWNED: dict[str, Any] = {}
_ATTACHED: OrderedDict[str, tuple[SharedMemory, Any]] = OrderedDict()
#: attachments a worker keeps (two servers sharing a pool publish one table each a round)
_ATTACH_CACHE = 4


def _buf(shm: SharedMemory) -> memoryview:
    """The mapping of an open segment."""
    assert shm.buf is not None  # open: closed segments are never read
    return shm.buf


def _load(shm: SharedMemory, header: bytes, spans: tuple[tuple[int, int], ...]) -> Any:
    """Unpickle a published value whose buffers are read-only views of ``shm``."""
    views = [_buf(shm)[off : off + size].toreadonly() for off, size in spans]
    return pickle.loads(header, buffers=views)


#: segments whose views were still referenced when they were to be unmapped (retried)
_UNMAPPED_LATER: list[SharedMemory] = []


def _close(shm: SharedMemory) -> None:
    """Unmap ``shm`` (with the attempts that failed before, now that views may be gone)."""
    waiting = [*_UNMAPPED_LATER, shm]
    _UNMAPPED_LATER.clear()
    for seg in waiting:
        try:
            seg.close()
        except BufferError:  # a view of it is still referenced
            _UNMAPPED_LATER.append(seg)


class _Shared(Handle):
    """A value in a shared-memory segment: its pickle with the array buffers out of band
    (``header``), and where each buffer lies in the segment (``spans``)."""

    def __init__(self, name: str, header: bytes, spans: tuple[tuple[int, int], ...]) -> None:
        self.name, self.header, self.spans = name, header, spans

    def get(self) -> Any:
        if self.name in _OWNED:
            return _OWNED[self.name]
        hit = _ATTACHED.get(self.name)
        if hit is None:
            shm = SharedMemory(name=self.name)
            hit = _ATTACHED[self.name] = (shm, _load(shm, self.header, self.spans))
            while len(_ATTACHED) > _ATTACH_CACHE:
                old = _ATTACHED.popitem(last=False)[1][0]  # its value dropped first
                _close(old)
        _ATTACHED.move_to_end(self.name)
        return hit[1]


def _unlink(segments: dict[str, SharedMemory], name: str) -> None:
    """Unmap and unlink segment ``name`` of a process backend's ``segments`` if still there."""
    shm = segments.pop(name, None)
    if shm is None:
        return
    _OWNED.pop(name, None)
    _close(shm)
    try:
        shm.unlink()
    except FileNotFoundError:
        pass


def _unlink_all(segments: dict[str, SharedMemory]) -> None:
    for name in list(segments):
        _unlink(segments, name)


#: a result array at least this large returns through shared memory
SHARED_RESULT_BYTES = 1 << 16


class _SharedArray:
    """A worker's result array left in a shared-memory segment for the parent to collect."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype


def _to_shared(value: Any) -> Any:
    if not isinstance(value, np.ndarray) or value.nbytes < SHARED_RESULT_BYTES:
        return value
    shm = SharedMemory(create=True, size=value.nbytes)
    np.ndarray(value.shape, value.dtype, buffer=_buf(shm))[...] = value
    out = _SharedArray(shm.name, value.shape, value.dtype)
    shm.close()
    return out


def _from_shared(value: Any) -> Any:
    """A result array read in place: the segment's name is unlinked at once, its mapping
    goes when the array (and every view of it) does."""
    if not isinstance(value, _SharedArray):
        return value
    shm = SharedMemory(name=value.name)
    shm.unlink()
    out = np.ndarray(value.shape, value.dtype, buffer=_buf(shm))
    weakref.finalize(out, _close, shm)  # retried by later closes while a view remains
    return out


class _ReturnShared:
    """``fn`` wrapped to run in a worker: large arrays of its result (the result itself or
    the items of a tuple) are written to new shared-memory segments, one copy, instead of
    being pickled through the pool's pipe; :func:`_collect` maps them in place."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, task: Any) -> Any:
        out = self.fn(task)
        return tuple(map(_to_shared, out)) if isinstance(out, tuple) else _to_shared(out)


def _collect(result: Any) -> Any:
    return tuple(map(_from_shared, result)) if isinstance(result, tuple) else _from_shared(result)


def warm_kernels() -> None:
    """Load the compiled kernels of a server's round into this process (numba's registries and
    on-disk cache, 0.3-0.5 s in a fresh process; nothing once loaded), each with the argument
    types a round passes it: per ring, one tiny retrieval per layout from a read-only table (as
    published), one from a bucket form read through the layout's gather index as a cuckoo round's
    task reads it (writeable rows; both reach ``ring_matmul`` in one signature, read-only C rows,
    but take different paths to it), with the keys' sketch check of verified uploads, one
    control-bit product and one scatter onto items of the close, one device's reading of its
    answers (simulated devices share the process) and one conversion added into arrays (the relay
    masks); one payload conversion
    (dense masks) and one batch of SHA-256 rows (row tags, key
    digests: the kernel reads rows of any layout by address, one signature), HMACs of rows (keys and rows
    read-only or not: sketch seeds, seed tags, relay sub-keys); requests' keys parsed
    from the rows of one array (several rows and one: the seed words' two layouts).  With the numpy
    reference it only runs that reference."""
    from secemb.fss.fused import (RETRIEVAL_TAG, bits_product, retrieve_and_prepare, retrieve_and_prepare_buckets,
                                  unmask_slots)

    # two users' keys of two buckets: the bucket form's answers are a strided view, as a round's
    alphas = np.array([1, 2, 3, 4])
    p0, _, state = fss.gen_path(alphas, 16)
    for dtype in (np.uint32, np.uint64):
        bits = 8 * np.dtype(dtype).itemsize
        cw = fss.convert_gen(state, np.ones((4, 1), dtype), ring_bits=bits, tag=RETRIEVAL_TAG)
        for shape, evaluate in (((16, 2), retrieve_and_prepare), ((2, 16, 2), retrieve_and_prepare_buckets)):
            table = np.zeros(shape, dtype)
            table.flags.writeable = False  # as published tables are
            evaluate(p0, 0, cw, LimbMatrix(table, bits), 1)
        # the published rows read through a slice of the layout's gather index (a writeable table in this process)
        gathered = LimbMatrix(np.zeros((16, 2), dtype), bits).gather(np.arange(32).reshape(2, 16) % 16)
        check = SketchCheck(expand([bytes(16)] * 2, 16), 2)
        _, t, _ = retrieve_and_prepare_buckets(p0, 0, cw, gathered, 1, sizes=np.array([16, 16]), check=check)
        bits_product(t.reshape(2, 2, 16), np.ones((2, 2, 1), dtype))
        tiny = CuckooLayout(4, NUM_HASHES)  # the close's scatter onto items
        tiny.scatter(np.zeros((tiny.num_buckets, tiny.bucket_size, 1), dtype))
        # two real slots: the suffix's item and row views strided, as a round's are
        unmask_slots(np.zeros((1, 2, 2), dtype), np.ones((1, 2), dtype), np.zeros((1, 2), np.int64),
                     [np.empty((2, 1), dtype)], np.empty((2, 8 + dtype().itemsize), np.uint8), np.empty((2, 1), dtype))
        convert_add(np.zeros((1, 2), np.uint64), RETRIEVAL_TAG, [np.zeros(3, dtype)])  # the relay masks' additions
    convert(np.zeros((1, 2), np.uint64), 4, 64, RETRIEVAL_TAG)
    sha256_many(b"", np.zeros((1, 32), np.uint8))
    # HMACs of rows (the sketch seeds and tags, relay sub-keys): keys and rows read-only (from bytes) or not
    for keys_ro in (False, True):
        for rows_ro in (False, True):
            mac_keys, tails = np.zeros((1, 16), np.uint8), np.zeros((1, 8), np.uint8)
            mac_keys.flags.writeable, tails.flags.writeable = not keys_ro, not rows_ro
            hmac_sha256_many(mac_keys, b"", tails)
    # requests parsed as a server parses them: the rows of one array of request bodies, two and one
    keys = fss.gen(alphas, np.ones((4, 1), np.uint32), 16)[0]
    rows = np.zeros((2, fss.keys.HEADER_BYTES + 2 * keys.params.key_bytes), np.uint8)
    keys.to_rows(2, rows)
    for u in (2, 1):
        fss.DPFKeys.from_rows(rows[:u], domain_size=16, party=0, count=2, payload_width=1, ring_bits=32)


def _warm_worker() -> None:
    """Pool initializer: forget the values the parent published before forking (a worker
    attaches what its tasks read), and make sure the compiled kernels are loaded: a forked
    worker inherits them from the parent (:meth:`ProcessBackend.pool` loads them before the
    fork), a spawned one loads them here, once."""
    _OWNED.clear()
    warm_kernels()


class ProcessBackend(Backend):
    """A persistent pool of worker processes on this machine (all cores by default),
    started on the first map of more than one task, forked after this process loaded the
    compiled kernels (the workers inherit them: no worker loads them again).  Published
    values live in shared memory (``/dev/shm`` on Linux), unlinked by :meth:`release`,
    :meth:`close`, or when the backend is collected or the interpreter exits."""

    in_process = False

    def __init__(self, workers: int | None = None) -> None:
        self.workers = _worker_count(workers)
        self._pool: ProcessPoolExecutor | None = None
        self._segments: dict[str, SharedMemory] = {}
        #: the most bytes of published segments held at once
        self.peak_shared_bytes = 0
        weakref.finalize(self, _unlink_all, self._segments)

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        """``fn`` over ``tasks`` in the workers (one task: here).  A task's result that is a
        large array, or a tuple holding some, comes back through shared memory rather than
        the pool's pipe (:class:`_ReturnShared`)."""
        if len(tasks) <= 1:
            return [fn(t) for t in tasks]
        futures = [self.pool().submit(_ReturnShared(fn), t) for t in tasks]
        results, error = [], None
        for future in futures:  # every result collected (its segments unlinked) before raising
            try:
                results.append(_collect(future.result()))
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                error = error or exc
        if error is not None:
            raise error
        return results

    def pool(self) -> ProcessPoolExecutor:
        """The worker pool, its workers started (and warmed) on first use."""
        if self._pool is None:
            # workers share this process's resource tracker (a forked worker that started its
            # own would unlink the segments it attached to when it exits)
            resource_tracker.ensure_running()
            warm_kernels()  # before the fork: the workers inherit the loaded kernels instead of each loading them
            self._pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_warm_worker)
            self._pool.submit(os.getpid).result()  # start the workers now, not at the first map
        return self._pool

    def worker_pids(self) -> list[int]:
        """Process ids of the pool's workers (none before the pool starts)."""
        return sorted(self._pool._processes) if self._pool is not None else []

    def publish(self, value: Any) -> Handle:
        """Copy ``value``'s array buffers once into a new shared-memory segment; the handle
        pickles to the segment's name, the value's small pickle header and the buffers'
        offsets.  This process reads the value from the segment too."""
        if self.workers > 1:
            self.pool()  # workers forked before the segment exists do not map it for life
        buffers: list[pickle.PickleBuffer] = []
        header = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
        raws = [b.raw() for b in buffers]
        spans, size = [], 0
        for raw in raws:
            size = -(-size // 64) * 64  # cache-line aligned
            spans.append((size, raw.nbytes))
            size += raw.nbytes
        shm = SharedMemory(create=True, size=max(size, 1))
        self._segments[shm.name] = shm
        for (off, n), raw in zip(spans, raws, strict=True):
            _buf(shm)[off : off + n] = raw
        handle = _Shared(shm.name, header, tuple(spans))
        _OWNED[shm.name] = _load(shm, header, handle.spans)
        weakref.finalize(handle, _unlink, self._segments, shm.name)  # a handle dropped unreleased
        self.peak_shared_bytes = max(self.peak_shared_bytes, self.shared_bytes())
        return handle

    def release(self, handle: Handle) -> None:
        if isinstance(handle, _Shared):
            _unlink(self._segments, handle.name)

    def shared_bytes(self) -> int:
        """Bytes of the shared-memory segments published and not yet released."""
        return sum(seg.size for seg in self._segments.values())

    def close(self) -> None:
        """Stop the workers and unlink every segment still published."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        _unlink_all(self._segments)


class _InObjectStore(Handle):
    """A value in a Ray cluster's object store (read zero-copy by tasks on its nodes)."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def get(self) -> Any:
        import ray

        return ray.get(self.ref)


class RayBackend(Backend):
    """Tasks on a Ray cluster (``pip install secemb[ray]``); ``address=None`` starts or joins
    a local instance, ``"host:port"`` joins that cluster's head.  Published values are put
    once in the object store; Ray frees them when the last handle is gone."""

    in_process = False

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise InvalidParameters("the Ray backend needs Ray: pip install 'secemb[ray]'") from exc
        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote: dict[Callable[[Any], Any], Any] = {}

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(fn)
        return self._ray.get([remote.remote(t) for t in tasks])

    def publish(self, value: Any) -> Handle:
        return _InObjectStore(self._ray.put(value))

    def close(self) -> None:
        """Disconnect from the cluster if this backend connected (idempotent)."""
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns = False


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
    """``serial``, ``thread``, ``process``, ``ray`` or ``gpu`` (``workers`` and ``address``
    unused by ``serial`` and ``gpu``)."""
    if name == "serial":
        return SerialBackend()
    if name == "thread":
        return ThreadBackend(workers)
    if name == "process":
        return ProcessBackend(workers)
    if name == "ray":
        return RayBackend(address, workers)
    if name == "gpu":
        return GpuBackend()
    raise InvalidParameters(f"backend must be 'serial', 'thread', 'process', 'ray' or 'gpu', got {name!r}")
