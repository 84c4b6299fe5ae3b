"""The one protocol factory: a protocol from its description.

A deployment's servers describe their protocol in every round document: ``{"name", "layout",
"relay", "expansion", "layout_seed", "options"}`` (the layout options of
:data:`~secemb.protocols.base.LAYOUT_OPTIONS`, then the protocol's own options).  A server
builds its protocol from that description of its configuration
(:meth:`secemb.server.config.ServerConfig.protocol_description`), a device from the description
the servers announce (:meth:`secemb.client.device.RoundInfo.make_protocol`): both through
:func:`make_protocol`, so the two sides cannot read a description differently.
"""

from __future__ import annotations

from collections.abc import Mapping

from secemb.errors import InvalidParameters
from secemb.protocols.backends import Backend
from secemb.protocols.base import LAYOUT_OPTIONS, Protocol
from secemb.protocols.registry import get_protocol

__all__ = ["DESCRIPTION_FIELDS", "make_protocol"]

#: the fields of a protocol's description (``options`` may be left out: none)
DESCRIPTION_FIELDS = ("name", *LAYOUT_OPTIONS, "options")


def make_protocol(description: Mapping[str, object], *, backend: Backend | None = None) -> Protocol:
    """The protocol ``description`` names, built with its layout options and its own options
    (:func:`~secemb.protocols.registry.get_protocol`), on ``backend`` when one is given (a
    server's choice, never part of the description).

    Raises
    ------
    InvalidParameters
        ``description`` is not a mapping, lacks a field or has one that is not in
        :data:`DESCRIPTION_FIELDS`; ``name`` is not a str; ``options`` is not a mapping of str
        keys or repeats a layout option (or ``backend``); or the protocol refuses the name, an
        option or a value (what :func:`get_protocol` raises).
    """
    if not isinstance(description, Mapping):
        raise InvalidParameters(f"a protocol description must be a mapping, got {type(description).__name__}")
    missing = [key for key in DESCRIPTION_FIELDS[:-1] if key not in description]
    unknown = sorted(str(key) for key in description if key not in DESCRIPTION_FIELDS)
    if missing or unknown:
        raise InvalidParameters(f"a protocol description has the fields {list(DESCRIPTION_FIELDS)}; missing "
                                f"{missing}, unknown {unknown}")
    name, options = description["name"], description.get("options", {})
    if not isinstance(name, str):
        raise InvalidParameters(f"a protocol's name must be a str, got {name!r:.80}")
    if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
        raise InvalidParameters(f"a protocol's options must be a mapping of str keys, got {options!r:.80}")
    clash = sorted(set(options) & {*LAYOUT_OPTIONS, "backend"})
    if clash:
        raise InvalidParameters(f"the protocol options repeat {clash}: the layout options are fields of the "
                                "description, and the backend is the server's own choice")
    opts: dict[str, object] = {key: description[key] for key in LAYOUT_OPTIONS} | dict(options)
    if backend is not None:
        opts["backend"] = backend
    return get_protocol(name, **opts)
