"""The server's listening socket: uvicorn over TLS (or, on loopback only, plain HTTP), with a
connection limit, a deadline for every request's headers, and the verified client
certificate of each connection handed to the app (:data:`~secemb.server.tls.PEER_CN_SCOPE_KEY`).

uvicorn itself closes an idle keep-alive connection, but not one that stalls before or in the
middle of its request headers: :class:`GuardedH11Protocol` closes a connection that has no
request in progress and has started none for ``header_timeout_s`` seconds.  A stalled body
is the app's to time out (it reads bodies under a deadline).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from secemb.server.tls import PEER_CN_SCOPE_KEY, client_cert_cn, server_context_kwargs

__all__ = ["GuardedH11Protocol", "run"]


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and the client certificate in the scope."""

    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cn = client_cert_cn(transport.get_extra_info("peercert"))
        app = self.app
        self._started = self._seen = 0

        async def with_cert(scope: Any, receive: Any, send: Any) -> None:
            self._started += 1
            await app({**scope, PEER_CN_SCOPE_KEY: cn}, receive, send)

        self.app = with_cert
        self._deadline = self.loop.call_later(self.header_timeout_s, self._check_progress)

    def _check_progress(self) -> None:
        idle = self.cycle is None or self.cycle.response_complete
        if idle and self._started == self._seen:
            self.transport.close()
            return
        self._seen = self._started
        self._deadline = self.loop.call_later(self.header_timeout_s, self._check_progress)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline.cancel()
        super().connection_lost(exc)


def run(app: Any, cfg: Any, *, log_level: str) -> None:
    """Serve ``app`` as ``cfg`` (a :class:`~secemb.server.config.ServerConfig`) says, until
    interrupted: TLS with the configured certificate (client certificates optional, checked
    against the CA), or plain HTTP where ``cfg.insecure_http`` allows it (loopback only)."""
    import uvicorn

    protocol = type("Guarded", (GuardedH11Protocol,), {"header_timeout_s": cfg.read_timeout_s})
    tls = {} if cfg.insecure_http else server_context_kwargs(cfg.tls_ca, cfg.tls_cert, cfg.tls_key)
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level=log_level, access_log=False,
                            timeout_keep_alive=30, limit_concurrency=cfg.max_connections, http=protocol, **tls)
    uvicorn.Server(config).run()
