"""Transports move protocol messages (``bytes``) between users and the two servers.

:class:`~secemb.transport.inprocess.InProcessTransport` is the simulation transport: named
endpoints, FIFO mailboxes and per-round/stage/direction/user byte counters.  The network
deployment's HTTP client side (signed requests, ``ApiClient``) is
:mod:`secemb.transport.network`; the devices' credentials files, which the servers' operators issue
and the devices read, are :mod:`secemb.transport.credentials`; what a device and an operator need of
a server, however the bytes travel, is :mod:`secemb.transport.links` (one family: the stage
links of a one-server round, :class:`StageLink` and :class:`StageAdmin`, and the two-server
round's :class:`ServerLink` and :class:`AdminLink`), implemented over HTTP by
:mod:`secemb.transport.http` and in process by :mod:`secemb.sim.local`.
"""

from __future__ import annotations

from secemb.transport.inprocess import (
    DOWNLOAD,
    SERVER,
    SERVERS,
    UPLOAD,
    InProcessTransport,
    TrafficRecord,
    parse_endpoint,
    user_endpoint,
)

__all__ = [
    "DOWNLOAD",
    "SERVER",
    "SERVERS",
    "UPLOAD",
    "InProcessTransport",
    "TrafficRecord",
    "parse_endpoint",
    "user_endpoint",
]
