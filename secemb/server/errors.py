"""The server's errors and their HTTP statuses (mapped in :mod:`secemb.server.app`).

:class:`Conflict` (409, a ``ProtocolError``), :class:`NotFound` (404), :class:`PeerUnavailable`
(503), :class:`~secemb.server.auth.Forbidden` (403); the protocol's ``InvalidMessage`` (400),
``ProtocolError`` (409) and ``InvalidParameters`` (422) pass through unchanged.
"""

from __future__ import annotations

from secemb.errors import ProtocolError, SecembError
from secemb.server.peer import PeerRefused

__all__ = ["Conflict", "NotFound", "PeerUnavailable", "peer_failure"]


class Conflict(ProtocolError):
    """The request does not fit the current state (wrong round, round closed, ...): 409."""


class NotFound(SecembError):
    """No such round or resource, or an endpoint the other party serves: 404."""


class PeerUnavailable(SecembError):
    """The other server did not answer or failed: 503."""


def peer_failure(what: str, exc: SecembError) -> SecembError:
    """The error server 0 answers with when server 1 failed a call for ``what``: a
    :class:`Conflict` (409) if server 1 refused (:class:`~secemb.server.peer.PeerRefused`),
    else :class:`PeerUnavailable` (503)."""
    if isinstance(exc, PeerRefused):
        return Conflict(f"{what}: the other server refused: {exc.detail}")
    return PeerUnavailable(f"{what}: {exc}")
