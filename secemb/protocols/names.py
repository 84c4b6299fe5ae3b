"""The registered protocols' names: name -> registration (factory, wire id, shape), and the
look-ups that need no protocol class.

This is the table :mod:`secemb.protocols.registry` fills (``register_protocol``) and builds
from (``get_protocol``).  It sits below every protocol module: the framing of a protocol's
messages reads its wire id here (:mod:`secemb.protocols.wire`), and the registry, which checks
a factory against the protocol base classes, sits above them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from secemb.errors import InvalidParameters

if TYPE_CHECKING:
    from secemb.protocols.base import Protocol
    from secemb.protocols.exchange import ExchangeProtocol

__all__ = ["PROTOCOLS", "ProtocolEntry", "add_entry", "available_protocols", "entry", "protocol_servers",
           "remove_entry", "wire_id"]


@dataclass(frozen=True)
class ProtocolEntry:
    """One registration.

    Attributes
    ----------
    name: registry name (:func:`~secemb.protocols.registry.get_protocol`), also the name
        messages are framed under.
    factory: the :class:`~secemb.protocols.base.Protocol` subclass (``servers=2``) or
        :class:`~secemb.protocols.exchange.ExchangeProtocol` subclass (``servers=1``), or
        ``"module:Class"``.
    wire_id: the protocol byte of its messages' header, in ``[1, 255]``, unique.
    servers: its shape: 2 (two non-colluding servers) or 1 (one server, exchanges).
    """

    name: str
    factory: str | type[Protocol] | type[ExchangeProtocol]
    wire_id: int
    servers: int = 2


_ENTRIES: dict[str, ProtocolEntry] = {}
_BY_WIRE_ID: dict[int, str] = {}
#: read-only view: registered name -> :class:`ProtocolEntry`
PROTOCOLS = MappingProxyType(_ENTRIES)


def add_entry(new: ProtocolEntry) -> None:
    """Add ``new`` (its fields already checked by the registry).

    Raises
    ------
    InvalidParameters
        Its name or wire id is already registered (the message names both registrations).
    """
    if new.name in _ENTRIES:
        old = _ENTRIES[new.name]
        raise InvalidParameters(
            f"protocol name {new.name!r} is already registered (wire id {old.wire_id}); "
            f"cannot register it again with wire id {new.wire_id}"
        )
    if new.wire_id in _BY_WIRE_ID:
        raise InvalidParameters(
            f"wire id {new.wire_id} of protocol {new.name!r} is already registered to protocol "
            f"{_BY_WIRE_ID[new.wire_id]!r}"
        )
    _ENTRIES[new.name] = new
    _BY_WIRE_ID[new.wire_id] = new.name


def remove_entry(name: str) -> None:
    """Remove ``name`` and free its wire id.

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered.
    """
    old = entry(name)
    del _ENTRIES[name]
    del _BY_WIRE_ID[old.wire_id]


def entry(name: str) -> ProtocolEntry:
    """The registration of ``name``.

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered (the message lists the names that are).
    """
    try:
        return _ENTRIES[name]
    except (KeyError, TypeError):
        raise InvalidParameters(f"unknown protocol {name!r}; available: {available_protocols()}") from None


def available_protocols(servers: int | None = None) -> list[str]:
    """Registered names (whether or not their module can be imported); only those of
    ``servers`` servers if given."""
    return sorted(n for n, e in _ENTRIES.items() if servers is None or e.servers == servers)


def protocol_servers(name: str) -> int:
    """How many servers protocol ``name`` has (1 or 2), as registered (its module not imported).

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered.
    """
    return entry(name).servers


def wire_id(name: str) -> int:
    """The wire id registered for ``name``.

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered.
    """
    return entry(name).wire_id
