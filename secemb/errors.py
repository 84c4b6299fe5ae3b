"""Exceptions raised by secemb.

Untrusted bytes that are malformed or do not match the expected parameters always raise
:class:`InvalidMessage` (or its subclass :class:`InvalidKey`), whichever check failed, so a
caller can treat every rejection alike.  Caller mistakes (wrong dtype, wrong shape of an
argument) raise :class:`InvalidParameters`, a :class:`ValueError`, or a plain ``TypeError``;
:func:`check_int` is the one check of an integer parameter.
"""

from __future__ import annotations

import numbers

__all__ = [
    "SecembError",
    "InvalidParameters",
    "InvalidMessage",
    "InvalidKey",
    "ProtocolError",
    "Deviation",
    "RelayTampered",
    "RetrievalTampered",
    "ModelDisagreement",
    "check_int",
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


class Deviation(ProtocolError):
    """A party provably deviated from the protocol (an active adversary was caught).

    Raised where a check that an honest run always passes fails: a forwarded relay message
    whose authentication fails, a retrieval answer whose row tags do not verify, two servers
    whose model digests differ.  The party that raises it reports to the operator; it never
    carries secret data (which slot, which item) in its message."""


class RelayTampered(Deviation):
    """Server 1 received, through server 0's relay, bytes the device did not send."""


class RetrievalTampered(Deviation):
    """A device's reconstructed retrieval rows fail their integrity check: a server's answer
    share was altered.  The device does not train on them."""


class ModelDisagreement(Deviation):
    """The two servers (or a server and a device) hold models with different digests."""


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int``, if it is an integer (a Python or numpy integer; never a bool)
    with ``low <= value <= high`` (each bound inclusive, ``None``: unbounded on that side).

    Raises
    ------
    InvalidParameters
        Otherwise: "``name`` must be an int in [low, high] (or >= low, <= high), got ``value!r``".
    """
    if type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
        v = int(value)
        if (low is None or v >= low) and (high is None or v <= high):
            return v
    if low is not None and high is not None:
        bound = f" in [{low}, {high}]"
    elif low is not None:
        bound = f" >= {low}"
    else:
        bound = "" if high is None else f" <= {high}"
    raise InvalidParameters(f"{name} must be an int{bound}, got {value!r}")
