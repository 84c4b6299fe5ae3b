"""Errors of a remote call, importable without the HTTP client library (the in-process
engine and the device SDK handle them without needing ``httpx``)."""

from __future__ import annotations

from secemb.errors import SecembError

__all__ = ["RemoteError", "Unreachable"]


class RemoteError(SecembError):
    """The server answered with an error status.

    Attributes
    ----------
    status: HTTP status code.
    error: the server's short error name (``"invalid_message"``, ``"conflict"``, ...).
    detail: the server's explanation.
    """

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(f"HTTP {status} {error}: {detail}")
        self.status, self.error, self.detail = status, error, detail


class Unreachable(SecembError):
    """No answer from the server (connection refused or reset, timeout)."""
