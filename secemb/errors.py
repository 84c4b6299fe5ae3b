"""Exceptions raised by secemb.

Untrusted bytes that are malformed or do not match the expected parameters always raise
:class:`InvalidMessage` (or its subclass :class:`InvalidKey`), whichever check failed, so a
caller can treat every rejection alike.  Caller mistakes (wrong dtype, wrong shape of an
argument) raise :class:`InvalidParameters`, a :class:`ValueError`, or a plain ``TypeError``.
"""

from __future__ import annotations

__all__ = [
    "SecembError",
    "InvalidParameters",
    "InvalidMessage",
    "InvalidKey",
    "ProtocolError",
]


class SecembError(Exception):
    """Base class of every secemb exception."""


class InvalidParameters(SecembError, ValueError):
    """A parameter given by the caller is out of range or inconsistent."""


class InvalidMessage(SecembError, ValueError):
    """Bytes received from another party are malformed or do not match the parameters."""


class InvalidKey(InvalidMessage):
    """Serialized DPF key material is malformed or does not match the parameters."""


class ProtocolError(SecembError, RuntimeError):
    """A protocol stage arrived out of order, for the wrong round, or twice."""
