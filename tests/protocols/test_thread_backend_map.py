"""Issue 37 goal 3: the thread backend's map runs tasks on the calling thread and a pool of
``workers - 1`` threads, each taking the next task left: results in task order, every task run
once, at most ``workers`` threads at a time (the caller one of them), and the exception of the
first failing task by position raised after all have run."""

from __future__ import annotations

import threading
import time

import pytest

from secemb.protocols.backends import ThreadBackend


def test_results_come_back_in_task_order_from_at_most_workers_threads() -> None:
    pool = ThreadBackend(3)
    seen: list[tuple[int, int]] = []
    running, peak = [0], [0]
    lock = threading.Lock()

    def task(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            seen.append((i, threading.get_ident()))
        time.sleep(0.002 * (i % 3))  # uneven tasks: a free thread takes the next
        with lock:
            running[0] -= 1
        return i * i

    try:
        assert pool.map(task, list(range(12))) == [i * i for i in range(12)]
    finally:
        pool.close()
    assert sorted(i for i, _ in seen) == list(range(12))  # each task once
    threads = {t for _, t in seen}
    assert threading.get_ident() in threads and len(threads) <= 3 and peak[0] <= 3


def test_the_first_failing_task_s_error_is_raised_after_every_task_ran() -> None:
    pool = ThreadBackend(2)
    ran: list[int] = []

    def task(i: int) -> int:
        ran.append(i)
        if i in (2, 5):
            raise ValueError(f"task {i}")
        return i

    try:
        with pytest.raises(ValueError, match="task 2"):
            pool.map(task, list(range(8)))
        assert sorted(ran) == list(range(8))
        assert pool.map(lambda x: x + 1, [1, 2, 3]) == [2, 3, 4]  # the pool still works
    finally:
        pool.close()


def test_one_task_or_one_worker_runs_in_the_calling_thread() -> None:
    me = threading.get_ident()
    for pool, tasks in ((ThreadBackend(4), [0]), (ThreadBackend(1), [0, 1, 2])):
        assert pool.map(lambda _: threading.get_ident(), tasks) == [me] * len(tasks)
        pool.close()
