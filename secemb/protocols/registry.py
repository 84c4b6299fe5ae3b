"""The protocol registry: name -> factory, wire id; options checked against capabilities.

A protocol is registered once, under a unique name and a unique wire id (the ``protocol`` byte
of every message it frames, :mod:`secemb.protocols.wire`).  Its factory is a
:class:`~secemb.protocols.base.Protocol` subclass, given directly or as a lazy
``"module:Class"`` string imported on first use, so that this registry imports even when a
protocol module is heavy or missing.  What the protocol accepts is declared on the class
(:class:`~secemb.protocols.base.Capabilities`); :func:`get_protocol` checks options against
it before the factory runs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from secemb.errors import InvalidParameters

if TYPE_CHECKING:
    from secemb.protocols.base import Protocol

__all__ = [
    "ENGINE_WIRE_ID",
    "PROTOCOLS",
    "ProtocolEntry",
    "available_protocols",
    "get_protocol",
    "protocol_class",
    "register_protocol",
    "unregister_protocol",
    "wire_id",
]

#: wire id of the round's own messages (model sync, dense vector, count shares), which belong
#: to no protocol; no protocol may register it
ENGINE_WIRE_ID = 0


@dataclass(frozen=True)
class ProtocolEntry:
    """One registration.

    Attributes
    ----------
    name: registry name (``get_protocol(name)``), also the name messages are framed under.
    factory: the :class:`~secemb.protocols.base.Protocol` subclass, or ``"module:Class"``.
    wire_id: the protocol byte of its messages' header, in ``[1, 255]``, unique.
    """

    name: str
    factory: str | type[Protocol]
    wire_id: int


_ENTRIES: dict[str, ProtocolEntry] = {}
_BY_WIRE_ID: dict[int, str] = {}
#: read-only view: registered name -> :class:`ProtocolEntry`
PROTOCOLS = MappingProxyType(_ENTRIES)


def register_protocol(name: str, factory: str | type[Protocol], *, wire_id: int) -> None:
    """Register ``factory`` (a Protocol subclass or a lazy ``"module:Class"``) as ``name``.

    Raises
    ------
    InvalidParameters
        ``name`` is not a non-empty str; ``factory`` is neither a Protocol subclass nor a
        ``"module:Class"`` string; ``wire_id`` is not an int in ``[1, 255]``; or ``name`` or
        ``wire_id`` is already registered (the message names both registrations).
    """
    from secemb.protocols.base import Protocol

    if not isinstance(name, str) or not name:
        raise InvalidParameters(f"protocol name must be a non-empty str, got {name!r}")
    if isinstance(factory, str):
        if factory.count(":") != 1:
            raise InvalidParameters(f"lazy factory must be 'module:Class', got {factory!r}")
    elif not (isinstance(factory, type) and issubclass(factory, Protocol)):
        raise InvalidParameters(f"factory of {name!r} must be a Protocol subclass or 'module:Class', got {factory!r}")
    if isinstance(wire_id, bool) or not isinstance(wire_id, int) or not 1 <= wire_id <= 255:
        raise InvalidParameters(f"wire_id of {name!r} must be an int in [1, 255], got {wire_id!r}")
    if name in _ENTRIES:
        old = _ENTRIES[name]
        raise InvalidParameters(
            f"protocol name {name!r} is already registered (wire id {old.wire_id}); "
            f"cannot register it again with wire id {wire_id}"
        )
    if wire_id in _BY_WIRE_ID:
        raise InvalidParameters(
            f"wire id {wire_id} of protocol {name!r} is already registered to protocol {_BY_WIRE_ID[wire_id]!r}"
        )
    _ENTRIES[name] = ProtocolEntry(name, factory, wire_id)
    _BY_WIRE_ID[wire_id] = name


def unregister_protocol(name: str) -> None:
    """Remove ``name`` and free its wire id (for tests and plug-ins that registered one).

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered.
    """
    entry = _entry(name)
    del _ENTRIES[name]
    del _BY_WIRE_ID[entry.wire_id]


def available_protocols() -> list[str]:
    """Registered names (whether or not their module can be imported)."""
    return sorted(_ENTRIES)


def wire_id(name: str) -> int:
    """The wire id registered for ``name``.

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered.
    """
    return _entry(name).wire_id


def _entry(name: str) -> ProtocolEntry:
    try:
        return _ENTRIES[name]
    except (KeyError, TypeError):
        raise InvalidParameters(f"unknown protocol {name!r}; available: {available_protocols()}") from None


def protocol_class(name: str) -> type[Protocol]:
    """The Protocol subclass registered as ``name`` (its module imported if lazy).

    Raises
    ------
    InvalidParameters
        If ``name`` is unknown, or its module cannot be imported yet (the message says which
        module is missing), or it does not define the registered class.
    """
    from secemb.protocols.base import Protocol

    factory = _entry(name).factory
    if not isinstance(factory, str):
        return factory
    module_name, attr = factory.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise InvalidParameters(
                f"protocol {name!r} is not available: module {module_name} is not installed "
                f"or not written yet ({exc})"
            ) from exc
        raise
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise InvalidParameters(f"protocol {name!r} is not available: {module_name} has no Protocol class {attr}")
    return cls


def get_protocol(name: str, **opts: Any) -> Protocol:
    """Build protocol ``name`` with ``opts``.

    Every protocol takes the layout options ``layout``, ``relay``, ``expansion`` and
    ``layout_seed`` (:data:`~secemb.protocols.base.LAYOUT_OPTIONS`), with values its
    :class:`~secemb.protocols.base.Capabilities` allow, plus the options it declares.

    Raises
    ------
    InvalidParameters
        If ``name`` is unknown or not available (see :func:`protocol_class`); an option is
        not one the protocol accepts (the message names it and lists the allowed ones); or
        a value is not supported (a layout or relay the protocol does not declare, a bad
        parameter).
    """
    cls = protocol_class(name)
    cls.capabilities.check_options(name, opts)
    return cls(**opts)
