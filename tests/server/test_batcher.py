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
