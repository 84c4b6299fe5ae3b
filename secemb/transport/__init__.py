"""Transports move protocol messages (``bytes``) between users and the two servers.

:class:`~secemb.transport.inprocess.InProcessTransport` is the simulation transport: named
endpoints, FIFO mailboxes and per-round/stage/direction/user byte counters.  A network
transport will expose the same ``send``/``recv`` surface.
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
