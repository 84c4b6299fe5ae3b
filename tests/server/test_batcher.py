"""The server's call batcher (secemb.server.rounds.Batcher): every caller gets its own result,
and a batch function that miscounts fails its callers instead of leaving them waiting."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from secemb.server.rounds import Batcher


def _call(batcher: Batcher, item: Any, timeout: float = 5.0) -> tuple[str, Any]:
    """``batcher(item)`` in a thread: ('ok', result), ('raised', exception) or ('hung', None)."""
    out: list[tuple[str, Any]] = []

    def run() -> None:
        try:
            out.append(("ok", batcher(item)))
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            out.append(("raised", exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else ("hung", None)


def test_each_caller_gets_its_own_result_or_exception() -> None:
    def fn(items: list[int]) -> list[Any]:
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]

    b = Batcher(fn)
    assert _call(b, 3) == ("ok", 30)
    kind, exc = _call(b, -1)
    assert kind == "raised" and isinstance(exc, ValueError) and str(exc) == "bad -1"


def test_a_batch_function_that_returns_too_few_results_fails_its_callers_and_the_batcher_goes_on() -> None:
    calls = {"n": 0}

    def fn(items: list[int]) -> list[int]:
        calls["n"] += 1
        return [] if calls["n"] == 1 else [i + 1 for i in items]  # the first batch miscounts

    b = Batcher(fn)
    kind, exc = _call(b, 1)
    assert kind == "raised", "the caller must not be left waiting"
    assert isinstance(exc, RuntimeError) and "0 results for 1 items" in str(exc)
    assert _call(b, 2) == ("ok", 3)  # the worker thread survived


@pytest.mark.parametrize("extra", [1, 3])
def test_too_many_results_fail_the_callers_too(extra: int) -> None:
    b = Batcher(lambda items: [0] * (len(items) + extra))
    kind, exc = _call(b, 7)
    assert kind == "raised" and isinstance(exc, RuntimeError)


def _workers() -> int:
    return sum(t.name == "secemb-batcher" and t.is_alive() for t in threading.enumerate())


def _until(cond: Any, limit: float = 5.0) -> bool:
    import time

    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_an_idle_batcher_holds_no_thread_and_lets_its_owner_go() -> None:
    """Session 33 (helper T's finding): every batcher kept a worker thread forever, and the
    thread kept its server node alive -- a test worker ended the suite with ~2,000 idle threads.
    Now the worker ends after ``idle_s`` without a call and a later call starts another."""
    import gc
    import weakref

    class Owner:
        def fn(self, items: list[int]) -> list[int]:
            return [i + 1 for i in items]

    before = _workers()
    owner = Owner()
    b = Batcher(owner.fn, idle_s=0.05)
    assert _workers() == before, "no thread before the first call"
    assert _call(b, 1) == ("ok", 2)
    assert _until(lambda: _workers() == before), "the worker must end when idle"
    assert _call(b, 5) == ("ok", 6)  # a later call starts a worker again
    ref = weakref.ref(owner)
    del owner, b
    assert _until(lambda: _workers() == before)
    gc.collect()
    assert ref() is None, "nothing may keep the batcher's owner alive once it is idle"


def test_calls_racing_the_worker_s_end_are_all_answered() -> None:
    """With an idle time of 1 ms a worker ends between most calls: 8 threads x 50 calls each must
    all get their own result (a call put while the worker decides to end is not lost)."""
    b = Batcher(lambda items: [i * 3 for i in items], idle_s=0.001)
    results: dict[int, list[Any]] = {}

    def run(k: int) -> None:
        results[k] = [b(k * 1000 + j) for j in range(50)]

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert all(not t.is_alive() for t in threads), "a caller was left waiting"
    assert results == {k: [(k * 1000 + j) * 3 for j in range(50)] for k in range(8)}
