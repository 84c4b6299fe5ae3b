"""The Eq. 11 count phase at one server: devices send additive shares of their rating counts;
the servers agree on the users both hold, server 1 sends the sum of its shares over them, and
server 0 opens the mean (``m' = ceil(alpha * mean)``; :meth:`~secemb.server.node.LeaderNode.
count_close`).

States: ``idle`` -> ``open`` (shares accepted) -> ``closed`` (frozen: the agreed users' sum can
be asked for); server 0 goes back to ``open`` when the agreement fails.  Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from secemb.server.auth import Forbidden
from secemb.server.errors import Conflict

__all__ = ["CountPhase"]


class CountPhase:
    """Count shares of one server, in ring dtype ``dtype``.

    ``on_first_release(users)``: called once, before the first sum with ``once=True`` leaves
    (the server journals the set there, so that the recount rule of :meth:`total` survives a
    restart: :meth:`restore_first`); if it raises, the sum is refused and nothing changes.
    """

    def __init__(self, dtype: np.dtype, *, on_first_release: Callable[[list[int]], None] | None = None) -> None:
        self._dtype = np.dtype(dtype)
        self._on_first_release = on_first_release
        self._lock = threading.Lock()
        self.state = "idle"  # idle | open | closed
        self._users: frozenset[int] | None = None
        self._shares: dict[int, np.ndarray] = {}
        self._released: list[int] | None = None  # the one set total(once=True) answered
        #: the set of the first sum released with once=True; later phases (recounts of m',
        #: Appendix L.2) release sums over this set only: kept across open()
        self._first_released: list[int] | None = None

    def restore_first(self, users: list[int]) -> None:
        """The set of the first sum released before a restart (from the server's journal)."""
        with self._lock:
            self._first_released = sorted(set(users))

    def status(self) -> dict[str, object]:
        """``{"state", "users"}`` (how many shares are held)."""
        with self._lock:
            return {"state": self.state, "users": len(self._shares)}

    def holders(self) -> tuple[list[int], frozenset[int] | None]:
        """While the phase is open: the sorted users holding a share here, and the users the
        phase expects (``None``: any) -- its progress, which the phase's close gives anyway.

        Raises
        ------
        Conflict: the phase is not open.
        """
        with self._lock:
            if self.state != "open":
                raise Conflict("the count phase is not open")
            return sorted(self._shares), self._users

    def open(self, users: frozenset[int] | None) -> None:
        """Start (or restart, forgetting every share) the phase for ``users`` (``None``: any)."""
        with self._lock:
            self.state, self._users, self._shares, self._released = "open", users, {}, None

    def submit(self, user: int, share: np.ndarray) -> None:
        """Keep ``user``'s share (ring, (1,)).

        Raises
        ------
        Conflict: the phase is not open, or ``user`` already sent a share.
        Forbidden: ``user`` is not among the expected users.
        """
        with self._lock:
            if self.state != "open":
                raise Conflict("the count phase is not open")
            if self._users is not None and user not in self._users:
                raise Forbidden(f"user {user} is not expected in the count phase")
            if user in self._shares:
                raise Conflict(f"user {user} already sent its count share")
            self._shares[user] = share

    def freeze(self, *, from_states: tuple[str, ...] = ("open",)) -> list[int]:
        """Close the phase (from one of ``from_states``); the sorted users holding a share.

        Raises
        ------
        Conflict: the phase is in none of ``from_states``.
        """
        with self._lock:
            if self.state not in from_states:
                raise Conflict("the count phase is not open")
            self.state = "closed"
            return sorted(self._shares)

    def reopen(self) -> None:
        """Back to ``open`` with the shares kept (server 0, when the agreement failed)."""
        with self._lock:
            self.state = "open"

    def total(self, include: list[int], *, once: bool = False) -> np.ndarray:
        """The sum (ring, (1,)) of the shares of ``include`` in a closed phase.  With ``once``,
        a phase answers for one user set only (asked again, the same set), so that sums over
        two sets never give away the shares of their difference -- and every later phase (a
        recount) answers for the set of the first phase's sum only, for the same reason.

        Raises
        ------
        Conflict: the phase is not closed, a user of ``include`` sent no share, or (``once``)
            a sum over another set was already given, in this phase or the first.
        """
        with self._lock:
            if self.state != "closed":
                raise Conflict("the count phase is not closed")
            users = sorted(set(include))
            if once and self._released is not None and self._released != users:
                raise Conflict("a count sum over another user set was already given in this phase")
            if once and self._first_released is not None and self._first_released != users:
                raise Conflict("a recount must cover the users of the first count: a sum over another set "
                               "would give away the counts of the users in the difference")
            missing = set(users) - set(self._shares)
            if missing:
                raise Conflict(f"no count share of user(s) {sorted(missing)[:5]}")
            if once:
                if self._first_released is None:
                    if self._on_first_release is not None:
                        self._on_first_release(users)
                    self._first_released = users
                self._released = users
            acc = np.zeros(1, self._dtype)
            for u in users:
                acc += self._shares[u]
            return acc
