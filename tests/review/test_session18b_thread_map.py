"""Review (session 18b) of the thread backend's map, where the calling thread now runs tasks too
(protocols/backends.py) and of ``fss.tasks.tapered``'s ranges.

* A nested map (a task that maps on the same backend) from a pool thread deadlocked: the inner
  map's caller -- a pool thread -- drained the inner tasks itself, then waited for the helper
  it had submitted, queued behind itself in a pool of ``workers - 1`` threads (two workers: the
  only pool thread).  Now a helper that has not started by then is cancelled, not waited for.
* A ``BaseException`` (here ``KeyboardInterrupt``) raised by a task on the calling thread left
  the map while a pool thread was still running the other tasks (writing into the caller's
  arrays after the caller had moved on), against the contract "raised once every task has
  run".  Now it stops the map: no task starts after it, the running ones finish, then it is
  raised.
* ``tapered`` covers ``[0, n)`` exactly with ranges of at most ``largest`` for any ``n`` /
  ``largest`` / ``workers`` (n = 0: none), and a map over them is bit-identical to serial.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from secemb.fss.tasks import tapered
from secemb.protocols.backends import SerialBackend, ThreadBackend


def _in_thread(fn, seconds: float):  # noqa: ANN001, ANN202 - a test helper
    """``fn()`` on a daemon thread; its result, or ``"hung"`` after ``seconds``."""
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    return "hung" if t.is_alive() else got[0]


@pytest.mark.parametrize("workers", [2, 3])
def test_a_task_may_map_on_the_same_backend(workers: int) -> None:
    pool = ThreadBackend(workers)
    try:
        def outer(x: int) -> int:
            return sum(pool.map(lambda y: y * y, [x, x + 1, x + 2]))

        got = _in_thread(lambda: pool.map(outer, list(range(6))), 20.0)
        assert got == [x * x + (x + 1) ** 2 + (x + 2) ** 2 for x in range(6)]
    finally:
        if pool._pool is not None:  # a hung map's queued helpers cancelled, so its waits end
            pool._pool.shutdown(wait=False, cancel_futures=True)
        pool.close()


def test_a_base_exception_on_the_calling_thread_leaves_no_task_running_behind_it() -> None:
    pool = ThreadBackend(2)
    caller = threading.get_ident()
    running = [0]
    lock = threading.Lock()
    started = threading.Event()

    def task(i: int) -> int:
        if threading.get_ident() == caller:
            started.wait(5.0)  # a pool thread is in a task
            raise KeyboardInterrupt
        with lock:
            running[0] += 1
        started.set()
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return i

    try:
        with pytest.raises(KeyboardInterrupt):
            pool.map(task, list(range(8)))
        with lock:
            assert running[0] == 0  # the pool thread's task had returned when the map raised
        assert pool.map(lambda x: x + 1, [1, 2, 3]) == [2, 3, 4]  # the pool still works
    finally:
        pool.close()


def test_no_task_starts_after_a_base_exception() -> None:
    pool = ThreadBackend(2)
    ran: list[int] = []

    def task(i: int) -> int:
        ran.append(i)
        if i == 0:
            raise SystemExit("stop")
        time.sleep(0.05)
        return i

    try:
        with pytest.raises(SystemExit):
            pool.map(task, list(range(10)))
        assert len(ran) <= 3  # task 0 and at most what the other thread had taken before it was raised
    finally:
        pool.close()


@pytest.mark.parametrize(("n", "largest", "workers"), [(0, 8, 2), (1, 8, 2), (7, 1, 2), (100, 8, 1), (1000, 63, 2),
                                                       (5, 100, 16), (999, 7, 3)])
def test_tapered_ranges_cover_exactly_and_a_map_over_them_matches_serial(n: int, largest: int, workers: int) -> None:
    spans = tapered(n, largest, workers)
    assert [lo for lo, _ in spans] == [0, *(hi for _, hi in spans[:-1])][: len(spans)]
    assert (spans[-1][1] if spans else 0) == n and all(0 < hi - lo <= largest for lo, hi in spans)
    data = np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)

    def task(span: tuple[int, int]) -> np.ndarray:
        return np.cumsum(data[span[0] : span[1]] ^ np.uint64(span[0]))

    pool = ThreadBackend(max(workers, 2))
    try:
        threaded = pool.map(task, spans)
    finally:
        pool.close()
    serial = SerialBackend().map(task, spans)
    assert len(threaded) == len(serial) and all(np.array_equal(a, b) for a, b in zip(threaded, serial, strict=True))
