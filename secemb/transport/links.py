"""What a round's parties need of a server, independent of how bytes travel: one family of links.

Every link is one party's connection to one server, released with ``close()``:

* :class:`DeviceLink` -- a device's (``user``): its members are
  :class:`StageLink`, the family's primitive, and :class:`ServerLink`, a device of the two-server
  round;
* :class:`OperatorLink` -- the operator's (it reads a round's outcome, ``round_status``): its
  members are :class:`StageAdmin`, the primitive's operator, and :class:`AdminLink`, the
  two-server round's.

The primitive is the exchange of one stage (``RoundPlan.servers == 1``,
:mod:`secemb.protocols.stages`): the operator opens a round for some devices
(:meth:`StageAdmin.open_round`); each device still in it sends its message of the stage
(:meth:`StageLink.send`); the operator closes the stage (:meth:`StageAdmin.close_stage`); each
device fetches at most one reply of the closed stage (:meth:`StageLink.fetch`: ``None``, the
server answered it nothing and it is out of the round); once the stages are done the operator
reads the outcome (:meth:`OperatorLink.round_status`).  A server that closes its stages itself
(``secemb serve`` of a one-server protocol) is followed through its round document
(:class:`PolledStageLink`).  The two-server round's links name its stages' exchanges
(``count``, ``retrieval``, ``dense``, ``upload``, ``prove``: :mod:`secemb.protocols.stages`) because its
servers answer them differently -- a retrieval is answered at once, per device, with a share of
a reply that the device adds to the other server's -- and its operator opens rounds by
participants and a deadline, the servers numbering them.

Two implementations of each member: in process (:mod:`secemb.sim.local`: the server node
objects behind an :class:`~secemb.transport.inprocess.InProcessTransport` that counts every
message) and over HTTP (:mod:`secemb.transport.http`: the same node objects behind FastAPI,
signed requests).  Bodies are the protocol's exact message bytes either way; control documents
are JSON-able dicts.

Errors: an HTTP link raises :class:`~secemb.transport.network.RemoteError` (the server
refused: its status and detail) or :class:`~secemb.transport.network.Unreachable`; an
in-process link raises the node's own exception (the one the HTTP layer maps to a status).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["AdminLink", "DeviceLink", "OperatorLink", "PolledStageLink", "ServerLink", "StageAdmin", "StageLink"]


class DeviceLink(Protocol):
    """Device ``user``'s connection to one server."""

    user: int

    def close(self) -> None:
        """Release the connection."""


class OperatorLink(Protocol):
    """The operator's connection to one server."""

    def round_status(self, round_id: int) -> dict[str, Any]:
        """Round ``round_id``'s outcome (its ``state`` -- ``open``, ``committed``, ``aborted`` --
        and the figures the server reports of it)."""

    def close(self) -> None:
        """Release the connection."""


class StageLink(DeviceLink, Protocol):
    """Device ``user``'s connection to a server, one stage at a time (the family's primitive)."""

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        """Deliver the device's message of ``stage`` of round ``round_id``."""

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        """The server's reply to this device in the closed ``stage`` (``None``: none, the device
        is out of the round)."""


class PolledStageLink(StageLink, Protocol):
    """A :class:`StageLink` to a server that closes its stages itself (``secemb serve`` of a
    one-server protocol): the device reads the round document to learn when a stage closed."""

    def round_info(self) -> dict[str, Any]:
        """The current round's public document: what the node's ``open_round`` returned
        (``round_id``, ``users``, ``stages``, ...) with ``stage`` (the open one, ``None`` once the
        last closed) and ``state``."""

    def bound_answers(self, longest: int | None) -> None:
        """From now on read no answer longer than an honest one of ``longest`` bytes allows
        (:func:`~secemb.transport.limits.answer_limit_for`; ``None``: the floor,
        :data:`~secemb.transport.limits.ANSWER_FLOOR_BYTES`); a longer one raises
        :class:`~secemb.errors.InvalidMessage`, read no further."""


class StageAdmin(OperatorLink, Protocol):
    """The operator's connection to a server whose rounds it drives stage by stage."""

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        """Start round ``round_id`` for ``users``; its public document (``stages``: the plan's
        stages this round runs)."""

    def close_stage(self, round_id: int, stage: str) -> None:
        """Close ``stage`` of the round: the server builds its replies (raises the server's
        refusal, e.g. an abort when too few devices are left)."""


class ServerLink(DeviceLink, Protocol):
    """Device ``user``'s connection to server ``party`` of the two-server round."""

    party: int

    def round_info(self) -> dict[str, Any]:
        """The current round's public document (``GET /v1/round``)."""

    def count(self, body: bytes) -> None:
        """Eq. 11: this device's COUNT share."""

    def retrieval(self, round_id: int, body: bytes) -> bytes | None:
        """A retrieval request; the server's reply (``None``: it sends the device nothing)."""

    def dense(self, round_id: int) -> bytes:
        """Server 0: the round's DENSE message."""

    def upload(self, round_id: int, body: bytes) -> bytes | None:
        """The device's upload for the round; the server's answer: server 1's receipt where the
        device uploads to both servers (``upload_receipt``, :mod:`secemb.round.messages`), else
        ``None``."""

    def challenge(self, round_id: int) -> bytes:
        """Server 0, bounded payloads: the 16-byte challenge of this device's upload (``GET
        /v1/rounds/{r}/challenge``)."""

    def proof(self, round_id: int, body: bytes) -> None:
        """Server 0, bounded payloads: the device's bound proof for its challenge (``POST
        /v1/rounds/{r}/proof``)."""

    def round_status(self, round_id: int) -> dict[str, Any]:
        """The round's outcome as this device may see it (state, whether it was included)."""

    def alarm(self, report: dict[str, Any]) -> None:
        """Report a deviation this device caught (``POST /v1/alarm``: ``{"kind", "round_id",
        "detail"}``); the server halts the deployment."""


class AdminLink(OperatorLink, Protocol):
    """The operator's connection to server ``party`` of the two-server round."""

    party: int

    def status(self) -> dict[str, Any]:
        """The server's state (model version, m', the round, last round's busy seconds)."""

    def model(self) -> bytes:
        """The public model (MODEL message)."""

    def count_open(self, users: list[int]) -> dict[str, Any]:
        """Server 0: start the Eq. 11 count phase for ``users``."""

    def count_progress(self) -> dict[str, Any]:
        """Server 0, while the count phase is open: ``{"expected", "server0", "server1",
        "both"}``, how many users sent their count share to each server and to both."""

    def count_close(self) -> dict[str, Any]:
        """Server 0: open the mean count; ``{"m_prime", "mean_count", "users"}``."""

    def open_round(self, participants: list[int], deadline_s: float) -> dict[str, Any]:
        """Server 0: open the next round for ``participants``; its public document."""

    def close_round(self, round_id: int) -> dict[str, Any]:
        """Server 0: close round ``round_id`` now; its outcome."""

    def clear_alarms(self) -> dict[str, Any]:
        """Forget the server's alarms and lift its halt; ``{"cleared": how many}``."""

    def clear_strikes(self, device: int | None) -> dict[str, Any]:
        """Server 0: forget the strikes of ``device`` (``None``: of every device); ``{"cleared":
        {device id: strikes}}``."""
