"""The batch wait (session 41): a server's :class:`~secemb.server.rounds.Batcher` takes into a batch
the calls that arrive until its first call has waited ``wait_s`` since it was made, but only while
calls come together (this batch or the last held two or more): concurrent devices share one
evaluation, a lone device is never held back, a busy worker's queued calls go at once.
``[server] batch_wait_ms`` (default 5) sets it for the device-facing and relay batchers."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from secemb.errors import InvalidParameters
from secemb.server.config import ServerConfig, load_config
from secemb.server.rounds import Batcher


class _Recorder:
    """A batch function that records its batches and can hold the first one until released."""

    def __init__(self, hold_first: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.release = threading.Event()
        self.holding = threading.Event()
        self._hold = hold_first

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        if self._hold and len(self.batches) == 1:
            self.holding.set()
            assert self.release.wait(10), "never released"
        return [i * 10 for i in items]


def _start(b: Batcher, item: int, out: dict[int, Any]) -> threading.Thread:
    def run() -> None:
        out[item] = b(item)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _queued(b: Batcher, n: int) -> None:
    """Wait (at most 5 s) until ``n`` calls wait in the batcher's queue."""
    deadline = time.monotonic() + 5
    while b._q.qsize() < n:  # noqa: SLF001 - the test waits for the callers to have queued
        assert time.monotonic() < deadline, "callers did not queue"
        time.sleep(0.005)


def _two_behind_a_held_batch(b: Batcher, rec: _Recorder, out: dict[int, Any],
                             pause: float = 0.0) -> list[threading.Thread]:
    """Call 1 (its batch held in ``rec``), then 2 and 3, queued behind it; wait ``pause`` seconds and
    release: the worker then takes 2 and 3 together.  The callers' threads."""
    threads = [_start(b, 1, out)]
    assert rec.holding.wait(5)  # the worker is in the first batch's call: the next callers queue
    threads += [_start(b, 2, out), _start(b, 3, out)]
    _queued(b, 2)
    time.sleep(pause)
    rec.release.set()
    return threads


def test_a_lone_caller_is_never_held_back() -> None:
    rec = _Recorder()
    b = Batcher(rec, wait_s=60.0)  # a wait that a lone call would never survive in this test's bounds
    out: dict[int, Any] = {}
    for i in (1, 2, 3):
        t = _start(b, i, out)
        t.join(5)
        assert not t.is_alive(), f"call {i} was held back by the batch wait"
    assert out == {1: 10, 2: 20, 3: 30} and rec.batches == [[1], [2], [3]]


@pytest.mark.parametrize(("wait_s", "expected"), [(0.0, [[1], [2, 3], [4]]), (3.0, [[1], [2, 3, 4]])])
def test_calls_that_come_together_share_a_batch_with_the_later_ones_of_the_wait(
        wait_s: float, expected: list[list[int]]) -> None:
    rec = _Recorder(hold_first=True)
    b = Batcher(rec, wait_s=wait_s)
    out: dict[int, Any] = {}
    threads = _two_behind_a_held_batch(b, rec, out)  # 2 and 3 taken together, then (wait_s) more awaited
    time.sleep(0.3)
    threads.append(_start(b, 4, out))
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert out == {1: 10, 2: 20, 3: 30, 4: 40}
    assert rec.batches == expected


def test_a_busy_worker_whose_calls_have_waited_already_does_not_wait_again() -> None:
    # the wait counts from when the batch's first call was made: calls queued behind a long evaluation go at
    # once (at 32 devices in flight, waiting after taking them all only idled the server: bench network)
    rec = _Recorder(hold_first=True)
    b = Batcher(rec, wait_s=0.3)
    out: dict[int, Any] = {}
    threads = _two_behind_a_held_batch(b, rec, out, pause=0.6)  # 2 and 3 wait twice the wait behind batch 1
    time.sleep(0.1)
    threads.append(_start(b, 4, out))
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert rec.batches == [[1], [2, 3], [4]]


def test_after_a_batch_of_several_a_lone_call_waits_at_most_the_wait() -> None:
    rec = _Recorder(hold_first=True)
    b = Batcher(rec, wait_s=0.2)
    out: dict[int, Any] = {}
    threads = _two_behind_a_held_batch(b, rec, out)
    for t in threads:
        t.join(10)
    late = _start(b, 4, out)  # the last batch held two: this one waits up to 0.2 s for company, then goes
    late.join(10)
    assert not late.is_alive() and out[4] == 40
    assert rec.batches == [[1], [2, 3], [4]]


_BASE = dict(party=0, peer_url="http://127.0.0.1:1", peer_secret=b"a" * 32, admin_secret=b"b" * 32,
             user_secret=b"c" * 32, num_items=10, num_users=10, insecure_http=True)


def test_batch_wait_ms_default_range_and_file_key(tmp_path: Path) -> None:
    assert ServerConfig(**_BASE, state_dir=tmp_path).batch_wait_ms == 5.0
    assert ServerConfig(**_BASE, state_dir=tmp_path, batch_wait_ms=0).batch_wait_ms == 0
    for bad in (-1, 1001, float("nan"), "5", True):
        with pytest.raises(InvalidParameters, match="batch_wait_ms must be a number in"):
            ServerConfig(**_BASE, state_dir=tmp_path, batch_wait_ms=bad)
    path = tmp_path / "s.toml"
    path.write_text(f'[server]\nparty = 0\npeer_url = "http://127.0.0.1:1"\nstate_dir = "{tmp_path}"\n'
                    'insecure_http = true\nbatch_wait_ms = 0\n[model]\nnum_items = 10\nnum_users = 10\n'
                    f'[secrets]\npeer = "{"aa" * 32}"\nadmin = "{"bb" * 32}"\nusers = "{"cc" * 32}"\n')
    assert load_config(path).batch_wait_ms == 0


def test_batch_wait_is_not_in_the_fingerprint(tmp_path: Path) -> None:
    # a server-local scheduling choice: the two servers need not agree on it
    a = ServerConfig(**_BASE, state_dir=tmp_path, batch_wait_ms=0)
    b = ServerConfig(**_BASE, state_dir=tmp_path, batch_wait_ms=20)
    assert a.fingerprint() == b.fingerprint()
