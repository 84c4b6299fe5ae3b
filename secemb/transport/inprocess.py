"""In-process transport: moves ``bytes`` between named endpoints and counts them.

Endpoints are ``"server0"``, ``"server1"`` and ``"user:<id>"`` (``<id>`` a non-negative
decimal integer).  :meth:`InProcessTransport.send` copies the payload into an immutable
``bytes`` object and appends it to the mailbox of the pair ``(src, dst)``;
:meth:`InProcessTransport.recv` pops the oldest message of that mailbox.  Nothing but bytes
crosses: a protocol object on one side can never reach the state of the other.

Every message is counted with ``len()`` of its bytes, keyed by round, stage, source and
destination.  The transport is thread-safe: the in-process engine carries messages from more
than one thread (server 0's relay thread, server 1's share thread besides the driver's), and
moves each with :meth:`InProcessTransport.carry`, a send and its receipt as one step, so
that two threads using the same mailbox never take each other's message.  Communication
figures reported by :mod:`secemb.training` come from these counters only, never from a formula.

Directions
----------
``"upload"``   user -> server
``"download"`` server -> user
``"server"``   server -> server
User-to-user messages are rejected.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import EllipsisType

from secemb.errors import InvalidParameters, ProtocolError, check_int

__all__ = [
    "DOWNLOAD",
    "SERVER",
    "SERVERS",
    "UPLOAD",
    "InProcessTransport",
    "TrafficRecord",
    "parse_endpoint",
    "user_endpoint",
]

SERVERS = ("server0", "server1")
_USER_RE = re.compile(r"user:(0|[1-9][0-9]*)\Z")

UPLOAD = "upload"
DOWNLOAD = "download"
SERVER = "server"


def user_endpoint(user_id: int) -> str:
    """Endpoint name of user ``user_id`` (``"user:<id>"``).

    Raises
    ------
    InvalidParameters
        If ``user_id`` is not a non-negative integer.
    """
    return f"user:{check_int('user id', user_id, low=0)}"


def parse_endpoint(name: str) -> tuple[str, int | None]:
    """Split an endpoint name into ``("server", party)`` or ``("user", user_id)``.

    Raises
    ------
    InvalidParameters
        If ``name`` is not ``"server0"``, ``"server1"`` or ``"user:<non-negative int>"``.
    """
    if not isinstance(name, str):
        raise InvalidParameters(f"endpoint must be a str, got {type(name).__name__}")
    if name in SERVERS:
        return "server", SERVERS.index(name)
    m = _USER_RE.match(name)
    if m is None:
        raise InvalidParameters(
            f"endpoint must be 'server0', 'server1' or 'user:<id>', got {name!r}"
        )
    return "user", int(m.group(1))


@lru_cache(maxsize=1 << 16)
def _direction_of(src: str, dst: str) -> str:
    """The direction of a message from ``src`` to ``dst`` (``InvalidParameters`` on a malformed
    name, the same endpoint twice or user to user); memoized for ``str`` names."""
    ks, _ = parse_endpoint(src)
    kd, _ = parse_endpoint(dst)
    if src == dst:
        raise InvalidParameters(f"source and destination are the same endpoint {src!r}")
    if ks == "user" and kd == "user":
        raise InvalidParameters(f"users cannot message each other ({src!r} -> {dst!r})")
    if ks == "user":
        return UPLOAD
    if kd == "user":
        return DOWNLOAD
    return SERVER


@dataclass(frozen=True)
class TrafficRecord:
    """Totals for one key ``(round_id, stage, src, dst)``."""

    round_id: int | None
    stage: str
    src: str
    dst: str
    direction: str
    messages: int
    nbytes: int


def _payload(payload: bytes, src: str, dst: str, stage: str) -> bytes:
    """``payload`` as an immutable ``bytes`` (handing over a ``bytes`` object is as good as a copy),
    refused (TypeError) unless bytes-like."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"transport carries bytes only, got {type(payload).__name__} ({src!r} -> {dst!r}, stage {stage!r})"
        )
    return payload if type(payload) is bytes else bytes(payload)


def _check_stage(stage: str) -> None:
    """Refuse (InvalidParameters) a stage name that is not a non-empty str."""
    if not isinstance(stage, str) or not stage:
        raise InvalidParameters(f"stage must be a non-empty str, got {stage!r}")


class InProcessTransport:
    """Mailboxes between endpoints, with byte counters.

    The current round (set with :meth:`set_round`, ``None`` outside rounds) tags every message
    sent; counts can then be queried per round, stage, direction and user.
    """

    def __init__(self) -> None:
        self._boxes: dict[tuple[str, str], deque[bytes]] = defaultdict(deque)
        # round -> (stage, src, dst) -> [messages, bytes]
        self._counts: dict[int | None, dict[tuple[str, str, str], list[int]]] = defaultdict(
            lambda: defaultdict(lambda: [0, 0])
        )
        self._round: int | None = None
        self._lock = threading.RLock()  # mailboxes and counters

    # ----------------------------------------------------------------- rounds

    @property
    def round_id(self) -> int | None:
        """Round that tags messages sent now (``None`` outside rounds)."""
        return self._round

    def set_round(self, round_id: int | None) -> None:
        """Tag subsequent messages with ``round_id`` (``None``: outside any round).

        Raises
        ------
        InvalidParameters
            If ``round_id`` is neither ``None`` nor an int >= 0.
        """
        self._round = None if round_id is None else check_int("round_id", round_id, low=0)

    # ----------------------------------------------------------------- messages

    @staticmethod
    def _direction(src: str, dst: str) -> str:
        if type(src) is str and type(dst) is str:  # a simulation's few names: each pair checked once
            return _direction_of(src, dst)
        return _direction_of.__wrapped__(src, dst)

    def send(self, src: str, dst: str, payload: bytes, *, stage: str) -> int:
        """Queue ``payload`` from ``src`` to ``dst``; return its length in bytes.

        ``payload`` must be bytes-like (``bytes``, ``bytearray``, ``memoryview``); it is
        copied into a fresh immutable ``bytes`` object, so the sender can reuse its buffer and
        the receiver gets nothing but bytes.

        Raises
        ------
        TypeError
            If ``payload`` is not bytes-like.
        InvalidParameters
            On a malformed endpoint name, a user-to-user message or an empty stage name.
        """
        data = _payload(payload, src, dst, stage)
        _check_stage(stage)
        self._direction(src, dst)
        with self._lock:
            self._boxes[(src, dst)].append(data)
            c = self._counts[self._round][(stage, src, dst)]
            c[0] += 1
            c[1] += len(data)
        return len(data)

    def carry(self, src: str, dst: str, payload: bytes, *, stage: str) -> bytes:
        """:meth:`send` ``payload`` and :meth:`recv` it at ``dst`` as one step (what ``dst``
        receives); counted as :meth:`send` counts it.  Raises as :meth:`send` does."""
        with self._lock:
            self.send(src, dst, payload, stage=stage)
            return self.recv(dst, src)

    def carry_many(self, src: str, dst: str, payloads: Sequence[bytes], *, stage: str) -> list[bytes]:
        """:meth:`carry` of each of ``payloads`` in order, as one step (a batch of one sender's
        messages to one receiver, e.g. server 0's forwards of a round's requests): the same
        messages received, in order, and the same counts as that many :meth:`carry` calls, the
        names and the counters handled once (a subclass that overrides :meth:`send`, to observe
        each message, gets one :meth:`carry` a message).  Raises as :meth:`send` does, before
        anything of the batch is sent or counted."""
        _check_stage(stage)
        data = [_payload(p, src, dst, stage) for p in payloads]
        self._direction(src, dst)
        if not payloads:
            return []
        if type(self).send is not InProcessTransport.send:
            with self._lock:
                return [self.carry(src, dst, p, stage=stage) for p in payloads]
        with self._lock:
            box = self._boxes[(src, dst)]
            box.extend(data)  # after any message already waiting, as carry's sends would be
            c = self._counts[self._round][(stage, src, dst)]
            c[0] += len(data)
            c[1] += sum(map(len, data))
            return [box.popleft() for _ in data]

    def recv(self, dst: str, src: str) -> bytes:
        """Pop the oldest message from ``src`` waiting for ``dst``.

        Raises
        ------
        ProtocolError
            If no message from ``src`` is waiting for ``dst``.
        """
        with self._lock:
            box = self._boxes.get((src, dst))
            if not box:
                raise ProtocolError(f"no message from {src!r} waiting for {dst!r}")
            return box.popleft()

    def pending(self) -> int:
        """Number of messages sent but not yet received."""
        with self._lock:
            return sum(len(b) for b in self._boxes.values())

    # ----------------------------------------------------------------- counters

    def records(self) -> list[TrafficRecord]:
        """Every counter, one record per ``(round, stage, src, dst)``."""
        with self._lock:
            return [
                TrafficRecord(r, st, s, d, self._direction(s, d), c[0], c[1])
                for r, per_round in self._counts.items()
                for (st, s, d), c in per_round.items()
            ]

    def total_bytes(
        self,
        *,
        direction: str | None = None,
        stage: str | None = None,
        round_id: int | None | EllipsisType = ...,
        user: int | None = None,
        src: str | None = None,
        dst: str | None = None,
    ) -> int:
        """Sum of ``len()`` of the messages matching every filter given.

        Parameters
        ----------
        direction:
            ``"upload"``, ``"download"`` or ``"server"``.
        stage:
            Stage name given to :meth:`send`.
        round_id:
            Round tag; ``None`` selects messages sent outside rounds; omitted: any.
        user:
            Only messages from or to ``"user:<user>"``.
        src, dst:
            Exact endpoint names.
        """
        return self._total(1, direction, stage, round_id, user, src, dst)

    def total_messages(
        self,
        *,
        direction: str | None = None,
        stage: str | None = None,
        round_id: int | None | EllipsisType = ...,
        user: int | None = None,
        src: str | None = None,
        dst: str | None = None,
    ) -> int:
        """Number of messages matching every filter given (see :meth:`total_bytes`)."""
        return self._total(0, direction, stage, round_id, user, src, dst)

    def _total(self, which, direction, stage, round_id, user, src, dst) -> int:
        if direction is not None and direction not in (UPLOAD, DOWNLOAD, SERVER):
            raise InvalidParameters(
                f"direction must be 'upload', 'download' or 'server', got {direction!r}"
            )
        uname = None if user is None else user_endpoint(user)
        with self._lock:
            if round_id is ...:
                selected = [list(per_round.items()) for per_round in self._counts.values()]
            else:
                selected = [list(self._counts[round_id].items())] if round_id in self._counts else []
        total = 0
        for (st, s, d), c in (item for per_round in selected for item in per_round):
            if stage is not None and st != stage:
                continue
            if src is not None and s != src:
                continue
            if dst is not None and d != dst:
                continue
            if uname is not None and uname not in (s, d):
                continue
            if direction is not None and self._direction(s, d) != direction:
                continue
            total += c[which]
        return total

    def rounds(self) -> list[int | None]:
        """Round tags that have counters."""
        with self._lock:
            return list(self._counts)

    def drop_round(self, round_id: int | None) -> None:
        """Forget the counters of one round (long runs keep memory bounded this way)."""
        with self._lock:
            self._counts.pop(round_id, None)

    def reset_counters(self) -> None:
        """Forget every counter (mailboxes are kept)."""
        with self._lock:
            self._counts.clear()
