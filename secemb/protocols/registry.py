"""The protocol registry: name -> factory, wire id, shape; options checked against capabilities.

A protocol is registered once, under a unique name and a unique wire id (the ``protocol`` byte
of every message it frames, :mod:`secemb.protocols.wire`), with its shape: ``servers=2`` (the
default: a :class:`~secemb.protocols.base.Protocol` subclass) or ``servers=1`` (a one-server
protocol: an :class:`~secemb.protocols.exchange.ExchangeProtocol` subclass, given its run).
Every one is built by :func:`get_protocol`, which reads the shape from the registration; the
command line dispatches on it too (:func:`protocol_servers`) without importing the module.
The factory is given directly or as a lazy ``"module:Class"`` string imported on first use, so
that this registry imports even when a protocol module is heavy or missing.  What a two-server
protocol accepts is declared on the class (:class:`~secemb.protocols.base.Capabilities`), what a
one-server one accepts in its ``options``; both are checked before the factory runs.  The
table itself (and the look-ups that need no protocol class: :func:`wire_id`,
:func:`protocol_servers`, :func:`available_protocols`) is :mod:`secemb.protocols.names`, below
the protocol modules, so that their framing reads a wire id without importing this module.
"""

from __future__ import annotations

import importlib
from typing import Any, overload

from secemb.errors import InvalidParameters, check_int
from secemb.framing import ENGINE_WIRE_ID, RESERVED_WIRE_IDS
from secemb.protocols.base import Protocol
from secemb.protocols.exchange import ExchangeProtocol, ExchangeRun
from secemb.protocols.names import (
    PROTOCOLS,
    ProtocolEntry,
    add_entry,
    available_protocols,
    entry,
    protocol_servers,
    remove_entry,
    wire_id,
)

__all__ = [
    "ENGINE_WIRE_ID",
    "PROTOCOLS",
    "ProtocolEntry",
    "available_protocols",
    "exchange_class",
    "get_protocol",
    "protocol_class",
    "protocol_servers",
    "register_protocol",
    "unregister_protocol",
    "wire_id",
]


def register_protocol(name: str, factory: str | type[Protocol] | type[ExchangeProtocol], *, wire_id: int,
                      servers: int = 2) -> None:
    """Register ``factory`` as ``name``: with ``servers=2`` (the default) a Protocol subclass,
    with ``servers=1`` an ExchangeProtocol subclass, or either as a lazy ``"module:Class"``.

    Raises
    ------
    InvalidParameters
        ``name`` is not a non-empty str; ``servers`` is not 1 or 2; ``factory`` is neither a
        class of the shape ``servers`` says nor a ``"module:Class"`` string; ``wire_id`` is not
        an int in ``[1, 255]``; or ``name`` or ``wire_id`` is already registered (the message
        names both registrations).
    """
    if not isinstance(name, str) or not name:
        raise InvalidParameters(f"protocol name must be a non-empty str, got {name!r}")
    check_int(f"servers of {name!r}", servers, low=1, high=2)
    base = _base(servers)
    if isinstance(factory, str):
        if factory.count(":") != 1:
            raise InvalidParameters(f"lazy factory must be 'module:Class', got {factory!r}")
    elif not (isinstance(factory, type) and issubclass(factory, base)):
        raise InvalidParameters(f"factory of {name!r} must be a {base.__name__} subclass (servers={servers}) or "
                                f"'module:Class', got {factory!r}")
    check_int(f"wire_id of {name!r}", wire_id, low=1, high=255)
    if wire_id in RESERVED_WIRE_IDS:
        raise InvalidParameters(f"wire_id {wire_id} of {name!r} is reserved (secemb.framing: secure aggregation, keys)")
    add_entry(ProtocolEntry(name, factory, wire_id, servers))


def _base(servers: int) -> type:
    """The class a factory of ``servers`` servers subclasses."""
    return ExchangeProtocol if servers == 1 else Protocol


def unregister_protocol(name: str) -> None:
    """Remove ``name`` and free its wire id (for tests and plug-ins that registered one).

    Raises
    ------
    InvalidParameters
        If ``name`` is not registered.
    """
    remove_entry(name)


def protocol_class(name: str) -> type[Protocol]:
    """The Protocol subclass registered as ``name`` (its module imported if lazy).

    Raises
    ------
    InvalidParameters
        If ``name`` is unknown, has one server (:func:`exchange_class`), or its module cannot be
        imported yet (the message says which module is missing), or it does not define the
        registered class.
    """
    if entry(name).servers != 2:
        raise InvalidParameters(f"protocol {name!r} has one server (an exchange protocol, "
                                "secemb.protocols.exchange): its class is exchange_class(name)")
    cls = _load(name)
    assert issubclass(cls, Protocol)  # register_protocol or _load checked the shape
    return cls


def exchange_class(name: str) -> type[ExchangeProtocol]:
    """The ExchangeProtocol subclass registered as ``name`` (``servers=1``; imported if lazy).

    Raises
    ------
    InvalidParameters
        As :func:`protocol_class`; or ``name`` has two servers.
    """
    if entry(name).servers != 1:
        raise InvalidParameters(f"protocol {name!r} has two servers, not one: its class is protocol_class(name)")
    cls = _load(name)
    assert issubclass(cls, ExchangeProtocol)  # register_protocol or _load checked the shape
    return cls


def _load(name: str) -> type:
    """The class registered as ``name``, imported if lazy and checked against its shape."""
    reg = entry(name)
    factory, base = reg.factory, _base(reg.servers)
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
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise InvalidParameters(f"protocol {name!r} is not available: {module_name} has no {base.__name__} class "
                                f"{attr}")
    return cls


@overload
def get_protocol(name: str, *, run: ExchangeRun, **opts: Any) -> ExchangeProtocol: ...


@overload
def get_protocol(name: str, **opts: Any) -> Protocol: ...


def get_protocol(name: str, *, run: ExchangeRun | None = None, **opts: Any) -> Protocol | ExchangeProtocol:
    """Build protocol ``name`` with ``opts``, whatever its shape (read from its registration).

    Two servers (``run`` not given): every protocol takes the layout options ``layout``,
    ``relay``, ``expansion`` and ``layout_seed`` (:data:`~secemb.protocols.base.LAYOUT_OPTIONS`),
    with values its :class:`~secemb.protocols.base.Capabilities` allow, plus the options it
    declares; the run's settings are the round loop's, not the protocol's.

    One server: ``run`` (an :class:`~secemb.protocols.exchange.ExchangeRun`: the dataset, the
    schedule and the seed every run of that shape is given) and the options its class declares
    (``ExchangeProtocol.options``).

    Raises
    ------
    InvalidParameters
        If ``name`` is unknown or not available (see :func:`protocol_class`); ``run`` is missing
        (or no :class:`~secemb.protocols.exchange.ExchangeRun`) for a one-server protocol or
        given to a two-server one (the message names the shape); an
        option is not one the protocol accepts (the message names it and lists the allowed
        ones); or a value is not supported (a layout or relay the protocol does not declare, a
        bad parameter).
    """
    if entry(name).servers == 1:
        if not isinstance(run, ExchangeRun):
            raise InvalidParameters(f"protocol {name!r} has one server: build it with its run, "
                                    f"get_protocol({name!r}, run=ExchangeRun(dataset, ...))"
                                    + ("" if run is None else f", got run={type(run).__name__}"))
        exchange = exchange_class(name)
        for key in opts:
            if key not in exchange.options:
                raise InvalidParameters(f"protocol {name!r} has no option {key!r}; allowed: {list(exchange.options)}")
        return exchange(run, **opts)
    if run is not None:
        raise InvalidParameters(f"protocol {name!r} has two servers: it takes no run (its rounds are the round "
                                "loop's, secemb.round.results.TrainConfig)")
    cls = protocol_class(name)
    cls.capabilities.check_options(name, opts)
    return cls(**opts)
