"""What a round's parties need of each other, independent of how bytes travel.

* :class:`ServerLink` -- one device's connection to one server (the device SDK's only way
  to reach a server);
* :class:`AdminLink` -- the operator's connection to one server (rounds, the count phase,
  the public model).

Two implementations of each: in process (:mod:`secemb.sim.local`: the server node objects
behind an :class:`~secemb.transport.inprocess.InProcessTransport` that counts every message)
and over HTTP (:mod:`secemb.transport.http`: the same node objects behind FastAPI, signed
requests).  Bodies are the protocol's exact message bytes either way; control documents are
JSON-able dicts.

Errors: an HTTP link raises :class:`~secemb.transport.network.RemoteError` (the server
refused: its status and detail) or :class:`~secemb.transport.network.Unreachable`; an
in-process link raises the node's own exception (the one the HTTP layer maps to a status).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["AdminLink", "ServerLink"]


class ServerLink(Protocol):
    """Device ``user``'s connection to server ``party``."""

    party: int
    user: int

    def round_info(self) -> dict[str, Any]:
        """The current round's public document (``GET /v1/round``)."""

    def count(self, body: bytes) -> None:
        """Eq. 11: this device's COUNT share."""

    def retrieval(self, round_id: int, body: bytes) -> bytes | None:
        """A retrieval request; the server's reply (``None``: it sends the device nothing)."""

    def dense(self, round_id: int) -> bytes:
        """Server 0: the round's DENSE message."""

    def upload(self, round_id: int, body: bytes) -> None:
        """The device's upload for the round."""

    def round_status(self, round_id: int) -> dict[str, Any]:
        """The round's outcome as this device may see it (state, whether it was included)."""

    def alarm(self, report: dict[str, Any]) -> None:
        """Report a deviation this device caught (``POST /v1/alarm``: ``{"kind", "round_id",
        "detail"}``); the server halts the deployment."""

    def close(self) -> None:
        """Release the connection."""


class AdminLink(Protocol):
    """The operator's connection to server ``party``."""

    party: int

    def status(self) -> dict[str, Any]:
        """The server's state (model version, m', the round, last round's busy seconds)."""

    def model(self) -> bytes:
        """The public model (MODEL message)."""

    def count_open(self, users: list[int]) -> dict[str, Any]:
        """Server 0: start the Eq. 11 count phase for ``users``."""

    def count_close(self) -> dict[str, Any]:
        """Server 0: open the mean count; ``{"m_prime", "mean_count", "users"}``."""

    def open_round(self, participants: list[int], deadline_s: float) -> dict[str, Any]:
        """Server 0: open the next round for ``participants``; its public document."""

    def close_round(self, round_id: int) -> dict[str, Any]:
        """Server 0: close round ``round_id`` now; its outcome."""

    def round_status(self, round_id: int) -> dict[str, Any]:
        """Round ``round_id``'s outcome (state, included users, busy seconds)."""

    def clear_alarms(self) -> dict[str, Any]:
        """Forget the server's alarms and lift its halt; ``{"cleared": how many}``."""

    def close(self) -> None:
        """Release the connection."""
