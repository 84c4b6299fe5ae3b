"""Training protocols: one module per protocol, each a factory of user and server roles.

``get_protocol(name, **opts)`` returns a :class:`~secemb.protocols.base.Protocol`:

* ``"plaintext"`` -- :class:`~secemb.protocols.plaintext.PlaintextProtocol`, the pipeline with
  the cryptography replaced by direct sums (the reference for exactness checks);
* ``"secemb"`` -- ``secemb.protocols.secemb.SecEmbProtocol`` (DPF retrieval and aggregation),
  imported only when asked for.

Registered factories are given as ``"module:attribute"`` strings and imported lazily, so this
package imports even when a protocol module is missing or heavy.  Role interfaces are in
:mod:`secemb.protocols.base`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from secemb.errors import InvalidParameters
from secemb.protocols.base import Protocol, RoundConfig, ServerRole, UserRole

__all__ = [
    "PROTOCOLS",
    "Protocol",
    "RoundConfig",
    "ServerRole",
    "UserRole",
    "available_protocols",
    "get_protocol",
    "register_protocol",
]

#: name -> "module:attribute" of a callable ``factory(**opts) -> Protocol`` (a class works).
PROTOCOLS: dict[str, str | Callable[..., Protocol]] = {
    "secemb": "secemb.protocols.secemb:SecEmbProtocol",
    "plaintext": "secemb.protocols.plaintext:PlaintextProtocol",
    # baselines of the paper's evaluation (docs/baselines.md)
    "secfedrec": "secemb.protocols.secfedrec:SecFedRecProtocol",
    "secemb-init": "secemb.protocols.ablations:SecEmbInitProtocol",
    "secemb-rowenc": "secemb.protocols.ablations:SecEmbRowEncProtocol",
    "grec": "secemb.protocols.grec:GrecProtocol",
    "quant8": "secemb.protocols.lossy:Quant8Protocol",
    "ternary": "secemb.protocols.lossy:TernaryProtocol",
    "svd": "secemb.protocols.lossy:SvdProtocol",
    "colr": "secemb.protocols.lossy:ColrProtocol",
}
# secaggmask, topksecagg and he-ckks are message builders, not round-loop protocols:
# secemb.protocols.sparse_secagg (SecAggMaskRound, TopkSecAggRound, CkksAggregator).


def register_protocol(name: str, factory: str | Callable[..., Protocol]) -> None:
    """Register ``factory`` (a callable, or a lazy ``"module:attribute"`` string) as ``name``."""
    if not isinstance(name, str) or not name:
        raise InvalidParameters(f"protocol name must be a non-empty str, got {name!r}")
    if isinstance(factory, str) and factory.count(":") != 1:
        raise InvalidParameters(f"lazy factory must be 'module:attribute', got {factory!r}")
    PROTOCOLS[name] = factory


def available_protocols() -> list[str]:
    """Registered names (whether or not their module can be imported)."""
    return sorted(PROTOCOLS)


def get_protocol(name: str, **opts: object) -> Protocol:
    """Build protocol ``name`` with ``opts``.

    Raises
    ------
    InvalidParameters
        If ``name`` is unknown, or its module cannot be imported yet (the message says which
        module is missing).
    """
    try:
        factory = PROTOCOLS[name]
    except (KeyError, TypeError):
        raise InvalidParameters(
            f"unknown protocol {name!r}; available: {available_protocols()}"
        ) from None
    if isinstance(factory, str):
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
        try:
            factory = getattr(module, attr)
        except AttributeError:
            raise InvalidParameters(
                f"protocol {name!r} is not available: {module_name} has no {attr}"
            ) from None
    protocol = factory(**opts)
    if not isinstance(protocol, Protocol):
        raise InvalidParameters(
            f"factory of protocol {name!r} returned {type(protocol).__name__}, not a Protocol"
        )
    return protocol
