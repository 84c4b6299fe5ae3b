"""Exceptions raised by secemb.

Untrusted bytes that are malformed or do not match the expected parameters always raise
:class:`InvalidMessage` (or its subclass :class:`InvalidKey`), whichever check failed, so a
caller can treat every rejection alike.  Caller mistakes (wrong dtype, wrong shape of an
argument) raise :class:`InvalidParameters`, a :class:`ValueError`, or a plain ``TypeError``;
:func:`check_int` is the one check of an integer parameter, :func:`check_float` of a real one;
both raise another class where the caller names one (``error=``).
"""

from __future__ import annotations

import math
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
    "check_float",
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


#: from this magnitude on, a bound next to a power of two is written as one (:func:`_number`)
_POWER_FROM = 1 << 20


def _number(bound: object) -> str:
    """A bound as an error message writes it: an int (or a whole float) within one of a power
    of two from 2^20 on as ``2^k``, ``2^k - 1`` or ``2^k + 1`` (``-2^k``, ``-(2^k - 1)`` below
    zero), so ``2**62 - 1`` reads ``2^62 - 1`` and ``2.0**50`` ``2^50``; any other number as
    ``str`` does."""
    whole = int(bound) if type(bound) is float and bound.is_integer() else bound
    if type(whole) is int and abs(whole) >= _POWER_FROM:
        size = abs(whole)
        for offset, tail in ((0, ""), (1, " - 1"), (-1, " + 1")):
            power = size + offset
            if power & (power - 1) == 0:
                text = f"2^{power.bit_length() - 1}{tail}"
                return text if whole > 0 else (f"-{text}" if not tail else f"-({text})")
    return str(bound)


#: the most characters of a refused value's ``repr`` an error message repeats (:func:`_shown`)
_SHOWN = 80


def _shown(value: object) -> str:
    """``repr(value)`` for an error message: cut after :data:`_SHOWN` characters (a field of
    another party's message may be any size), and a size in place of an int too long for
    ``str`` (Python's digit limit raises ``ValueError`` there, not the caller's class)."""
    try:
        text = repr(value)
    except ValueError:
        return f"an int of {value.bit_length()} bits" if isinstance(value, int) else type(value).__name__
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


def _bounds(*, low: float | None = None, above: float | None = None, high: float | None = None,
            below: float | None = None) -> str:
    """The bounds part of a refusal: `` in [low, high]`` (``(`` / ``)`` for ``above`` /
    ``below``) when both sides are bounded, else `` >= low`` (``>``, ``<=``, ``<``) or nothing;
    each bound as :func:`_number` writes it."""
    if (low is not None or above is not None) and (high is not None or below is not None):
        return " in " + (f"[{_number(low)}" if low is not None else f"({_number(above)}") + ", " \
            + (f"{_number(high)}]" if high is not None else f"{_number(below)})")
    return next((f" {op} {_number(b)}" for op, b in ((">=", low), (">", above), ("<=", high), ("<", below))
                 if b is not None), "")


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None,
              error: type[Exception] = InvalidParameters) -> int:
    """``value`` as an ``int``, if it is an integer (a Python or numpy integer; never a bool)
    with ``low <= value <= high`` (each bound inclusive, ``None``: unbounded on that side).

    Raises
    ------
    error
        Otherwise (:class:`InvalidParameters` unless the caller names another class, e.g.
        :class:`InvalidMessage` for a field of bytes another party sent): "``name`` must be an
        int in [low, high] (or >= low, <= high), got ``value!r``" -- the bounds as
        :func:`_number` writes them (``2^62 - 1``), the value as :func:`_shown` does.
    """
    if type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
        v = int(value)
        if (low is None or v >= low) and (high is None or v <= high):
            return v
    raise error(f"{name} must be an int{_bounds(low=low, high=high)}, got {_shown(value)}")


def check_float(name: str, value: object, *, low: float | None = None, above: float | None = None,
                high: float | None = None, below: float | None = None,
                error: type[Exception] = InvalidParameters) -> float:
    """``value`` as a ``float``, if it is a finite real number (a Python or numpy integer or
    float, a ``Fraction``; never a bool) within the bounds given: ``low <= value``,
    ``above < value``, ``value <= high``, ``value < below`` (``None``: no such bound; give at
    most one of ``low``/``above`` and one of ``high``/``below``).

    Raises
    ------
    error
        Otherwise (:class:`InvalidParameters` unless the caller names another class):
        "``name`` must be a finite number in [low, high) (or > above, <= high, ...), got ``value!r``"
        (bounds and value written as :func:`check_int`'s are).
    """
    if (low is not None and above is not None) or (high is not None and below is not None):
        raise TypeError("check_float: give at most one of low/above and one of high/below")
    if type(value) is float or type(value) is int or (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        try:
            v = float(value)
        except OverflowError:  # a Fraction or int beyond the float range
            v = math.inf
        if math.isfinite(v) and (low is None or v >= low) and (above is None or v > above) \
                and (high is None or v <= high) and (below is None or v < below):
            return v
    raise error(f"{name} must be a finite number{_bounds(low=low, above=above, high=high, below=below)}, "
                f"got {_shown(value)}")
