"""Training protocols: one module per protocol, each a factory of user and server roles.

``get_protocol(name, **opts)`` builds any registered protocol, reading its shape from the
registration: a two-server :class:`~secemb.protocols.base.Protocol` --

* ``"plaintext"`` -- :class:`~secemb.protocols.plaintext.PlaintextProtocol`, the pipeline with
  the cryptography replaced by direct sums (the reference for exactness checks);
* ``"secemb"`` -- ``secemb.protocols.secemb.SecEmbProtocol`` (DPF retrieval and aggregation);
* the baselines of the paper's evaluation (``docs/baselines.md``) --

or, given ``run=`` (an :class:`~secemb.protocols.exchange.ExchangeRun`), a one-server
:class:`~secemb.protocols.exchange.ExchangeProtocol` (``"sfsl"``, ``"secea"``).

Each is registered below with its wire id (:mod:`secemb.protocols.registry`); its module is
imported only when it is asked for.  Installed plug-ins add theirs: every module named by an
entry point of the group ``secemb.protocols`` is imported here and registers its protocols
(``docs/protocol.md``, "Adding a protocol").  What a protocol accepts is declared on its class
(:class:`~secemb.protocols.base.Capabilities`).  Role interfaces are in
:mod:`secemb.protocols.base`.
"""

from __future__ import annotations

import sys
import warnings
from importlib.metadata import entry_points

from secemb.protocols.base import Capabilities, Protocol, RelayRole, RoundConfig, ServerRole, UserRole
from secemb.protocols.registry import (
    PROTOCOLS,
    available_protocols,
    exchange_class,
    get_protocol,
    protocol_class,
    protocol_servers,
    register_protocol,
    unregister_protocol,
)

#: entry point group of protocol plug-ins
PLUGIN_GROUP = "secemb.protocols"

__all__ = [
    "PLUGIN_GROUP",
    "load_plugins",
    "PROTOCOLS",
    "Capabilities",
    "Protocol",
    "RelayRole",
    "RoundConfig",
    "ServerRole",
    "UserRole",
    "available_protocols",
    "exchange_class",
    "get_protocol",
    "protocol_class",
    "protocol_servers",
    "register_protocol",
    "unregister_protocol",
]

register_protocol("plaintext", "secemb.protocols.plaintext:PlaintextProtocol", wire_id=1)
register_protocol("secemb", "secemb.protocols.secemb:SecEmbProtocol", wire_id=2)
# baselines of the paper's evaluation (docs/baselines.md)
register_protocol("secfedrec", "secemb.protocols.secfedrec:SecFedRecProtocol", wire_id=16)
register_protocol("secemb-init", "secemb.protocols.ablations:SecEmbInitProtocol", wire_id=17)
register_protocol("secemb-rowenc", "secemb.protocols.ablations:SecEmbRowEncProtocol", wire_id=18)
register_protocol("grec", "secemb.protocols.grec:GrecProtocol", wire_id=19)
register_protocol("quant8", "secemb.protocols.lossy:Quant8Protocol", wire_id=20)
register_protocol("ternary", "secemb.protocols.lossy:TernaryProtocol", wire_id=21)
register_protocol("svd", "secemb.protocols.lossy:SvdProtocol", wire_id=22)
register_protocol("colr", "secemb.protocols.lossy:ColrProtocol", wire_id=23)
register_protocol("dp-fedrec", "secemb.protocols.dp_fedrec:DPFedRecProtocol", wire_id=24)
register_protocol("kvsagg", "secemb.protocols.kvsagg:KvsaggProtocol", wire_id=25)
register_protocol("fedmf-topk", "secemb.protocols.topk:TopKProtocol", wire_id=28)  # GREC Table 9
# one server (secemb.protocols.exchange; docs/sfsl.md)
register_protocol("sfsl", "secemb.protocols.sfsl.protocol:SFSLProtocol", wire_id=26, servers=1)
register_protocol("secea", "secemb.protocols.secea.protocol:SecEAProtocol", wire_id=27, servers=1)  # docs/secea.md
# secaggmask, topksecagg and he-ckks are message builders measured by `secemb bench comm`, not
# round protocols (secemb.protocols.sparse_secagg); their messages are not framed


def load_plugins() -> None:
    """Import every installed protocol plug-in (entry point group ``secemb.protocols``) not
    imported yet; one that fails is reported with a warning and leaves the others working.
    Runs when this package is imported (call it again after installing one at run time)."""
    loaded = set(sys.modules)
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.module in loaded:
            continue
        try:
            ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plug-in must not break secemb
            warnings.warn(f"secemb protocol plug-in {ep.name!r} ({ep.value}) failed to load: {exc!r}", stacklevel=2)


load_plugins()
