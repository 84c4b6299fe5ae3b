"""A round's state at one server, the outcome records kept of past rounds, and the batcher
that groups concurrent requests into one protocol call."""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from secemb.protocols.base import RoundConfig

__all__ = ["ABORTED", "CLOSING", "COMMITTED", "FINAL", "OPEN", "Batcher", "Outcomes", "Round"]

OPEN, CLOSING, COMMITTED, ABORTED = "open", "closing", "committed", "aborted"
FINAL = (COMMITTED, ABORTED)
_KEEP_OUTCOMES = 10_000


@dataclass
class Round:
    """A round's state at one server (changed under the node's lock).

    ``server_s`` / ``optimizer_s``: seconds this server spent in the protocol role's calls and
    in the optimizer step for this round (:meth:`busy`).
    """

    round_id: int
    rc: RoundConfig
    version: int
    participants: frozenset[int] | None
    n_p: int
    deadline: float  # unix time
    quorum: int
    min_users: int
    #: SHA-256 of the model the round trains on (version ``version``), announced to devices
    model_sha: str | None = None
    state: str = OPEN
    retrieved: set[int] = field(default_factory=set)
    admitting: set[int] = field(default_factory=set)  # retrievals being evaluated
    relayed: set[int] = field(default_factory=set)  # server 1, relay: keys forwarded by server 0
    uploaded: set[int] = field(default_factory=set)  # absorbed by the role (the agreed set is a subset)
    finished: set[int] = field(default_factory=set)  # upload handling done (counts for the quorum)
    #: server 0 with bounded payloads: the users whose bound proof it kept (``None``: no proof step)
    proved: set[int] | None = None
    #: server 0: its last check of the quorum at server 1 (``(len(counted()), time.monotonic())``)
    #: and whether one is in flight (:meth:`~secemb.server.leader.LeaderNode._closer`)
    quorum_asked: tuple[int, float] | None = None
    quorum_asking: bool = False
    #: server 0: the users it counted that server 1 named as absorbed in the quorum check that closed the
    #: round (``None``: none did), and the users whose upload server 1 acknowledged -- with relay, took
    #: the forward; without, receipted (the device showed its receipt); an honest server 1 never
    #: un-absorbs an upload within a round, so its close names each of both
    quorum_named: frozenset[int] | None = None
    acknowledged: set[int] = field(default_factory=set)
    dense_msg: bytes = b""
    included: list[int] | None = None
    reason: str = ""
    share_include: list[int] | None = None
    share: bytes | None = None
    #: the DP noise this server added to its share (ring, one vector: sparse then dense), added
    #: again to its own reconstruction so both servers' sums are equal
    share_noise: Any = None
    #: server 1: the users whose forwarded relay bytes failed authentication (issue 33, item 1)
    tampered: set[int] = field(default_factory=set)
    #: server 0: the users left out because their uploads failed the servers' verification (issue 34)
    rejected: set[int] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)
    closing: bool = False
    server_s: float = 0.0
    optimizer_s: float = 0.0
    _busy_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def counted(self) -> set[int]:
        """The users this server counts towards the quorum (a new set): those whose upload handling
        is done and, with bounded payloads (server 0), whose proof is kept.  Server 0 closes on
        quorum only when server 1 holds the uploads of ``quorum`` of them (finding S42-Q2:
        :meth:`~secemb.server.leader.LeaderNode._closer`)."""
        return set(self.finished if self.proved is None else self.finished & self.proved)

    def busy(self, fn: Callable[..., Any], *args: Any, optimizer: bool = False, **kw: Any) -> Any:
        """``fn(*args, **kw)``, its wall time added to ``server_s`` (or ``optimizer_s``)."""
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            dt = time.perf_counter() - t0
            with self._busy_lock:
                if optimizer:
                    self.optimizer_s += dt
                else:
                    self.server_s += dt

    def outcome(self) -> dict[str, Any]:
        """The outcome document of :meth:`~secemb.server.node.Node.round_status`."""
        return {"round_id": self.round_id, "state": self.state, "included": self.included, "reason": self.reason,
                "server_s": self.server_s, "optimizer_s": self.optimizer_s, "tampered": sorted(self.tampered),
                "rejected": sorted(self.rejected)}


class Outcomes:
    """Outcomes of the last rounds (at most 10,000), by round id."""

    def __init__(self) -> None:
        self._docs: OrderedDict[int, dict[str, Any]] = OrderedDict()

    def __contains__(self, r: int) -> bool:
        return r in self._docs

    def get(self, r: int) -> dict[str, Any] | None:
        doc = self._docs.get(r)
        return None if doc is None else dict(doc)

    def remember(self, r: int, state: str, included: list[int] | None, reason: str,
                 server_s: float | None = None, optimizer_s: float | None = None,
                 tampered: list[int] | None = None, rejected: list[int] | None = None) -> None:
        """Record round ``r``'s outcome (busy times ``None``: not measured, e.g. recovered;
        ``tampered``: the users server 1 left out because their relayed bytes were altered;
        ``rejected``: the users server 0 left out because their uploads failed verification)."""
        self._docs[r] = {"round_id": r, "state": state, "included": included, "reason": reason,
                         "server_s": server_s, "optimizer_s": optimizer_s, "tampered": tampered or [],
                         "rejected": rejected or []}
        self._docs.move_to_end(r)
        while len(self._docs) > _KEEP_OUTCOMES:
            self._docs.popitem(last=False)


class Batcher:
    """Groups concurrent calls into one call of ``fn(items) -> results`` (a result may be an
    exception, raised in its caller's thread; ``fn`` returns one result per item, else every
    caller of the batch gets a ``RuntimeError``).  One worker thread, started by a call when none
    runs and ended after ``idle_s`` seconds without one: an idle batcher holds no thread, and no
    thread keeps ``fn``'s owner (a server node) alive after its last use.

    A batch is the first waiting call and every call queued behind it, at most ``max_batch``.
    With ``wait_s > 0`` a batch also takes the calls that arrive until its first call has waited
    ``wait_s`` since it was made, but only while calls come together -- this batch already holds two
    or the last one did: a lone caller (one device, a test's sequential calls) is never held back;
    concurrent callers share fewer, larger calls of ``fn`` (a server pays passes over its table
    and aggregate per call: docs/deployment.md, "Batching"); and a busy worker, whose queued calls
    have waited that long already, does not wait at all."""

    def __init__(self, fn: Callable[[list[Any]], list[Any]], max_batch: int = 256, idle_s: float = 2.0,
                 wait_s: float = 0.0) -> None:
        self._fn, self._max, self._idle, self._wait = fn, max_batch, idle_s, wait_s
        self._q: queue.Queue[tuple[Any, Future, float]] = queue.Queue()  # (item, its result, when it was made)
        self._lock = threading.Lock()
        self._running = False  # a worker runs or is starting; changed under _lock
        self._last = 0  # the last batch's size (the worker's own)

    def __call__(self, item: Any) -> Any:
        fut: Future = Future()
        self._q.put((item, fut, time.monotonic()))  # before the check below: a worker that is ending sees it
        with self._lock:
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, daemon=True, name="secemb-batcher").start()
        out = fut.result()
        if isinstance(out, BaseException):
            raise out
        return out

    def _fill(self, batch: list[tuple[Any, Future, float]]) -> None:
        """Add to ``batch`` the calls queued behind its first one and, while calls come together
        (``wait_s``: class docstring), those that arrive until the first has waited ``wait_s``, up
        to ``max_batch``."""
        until = batch[0][2] + self._wait
        while len(batch) < self._max:
            left = until - time.monotonic() if self._wait > 0 and max(len(batch), self._last) > 1 else 0.0
            try:
                batch.append(self._q.get(timeout=left) if left > 0 else self._q.get_nowait())
            except queue.Empty:
                return

    def _run(self) -> None:
        while True:
            try:
                batch = [self._q.get(timeout=self._idle)]
            except queue.Empty:
                with self._lock:  # a caller puts its item before it takes the lock: none is missed
                    if self._q.empty():
                        self._running = False
                        return
                continue
            self._fill(batch)
            self._last = len(batch)
            try:
                results = self._fn([item for item, _, _ in batch])
                if len(results) != len(batch):  # a caller left without its result would wait forever
                    raise RuntimeError(f"the batch function returned {len(results)} results for {len(batch)} items")
            except BaseException as exc:  # noqa: BLE001 - handed to every caller
                results = [exc] * len(batch)
            for (_, fut, _), res in zip(batch, results, strict=True):
                fut.set_result(res)


def by_round(
    fn: Callable[[int, list[tuple[int, bytes]]], list[Any]],
) -> Callable[[list[tuple[int, int, bytes]]], list[Any]]:
    """Adapt ``fn(round_id, [(user, body)]) -> results`` to a :class:`Batcher` of
    ``(round_id, user, body)`` items (one call per round id present; a call that raises fails its
    round's callers only, finding S41-Q1)."""

    def run(items: list[tuple[int, int, bytes]]) -> list[Any]:
        out: list[Any] = [None] * len(items)
        rounds: dict[int, list[int]] = {}
        for i, (r, _, _) in enumerate(items):
            rounds.setdefault(r, []).append(i)
        for r, where in rounds.items():
            try:
                got = fn(r, [(items[i][1], items[i][2]) for i in where])
            except Exception as exc:  # noqa: BLE001 - this round's callers get it, not the others' (S41-Q1)
                got = [exc] * len(where)
            for i, res in zip(where, got, strict=True):
                out[i] = res
        return out

    return run
