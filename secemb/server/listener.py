"""The server's listening socket: uvicorn over TLS (or, on loopback only, plain HTTP), with a
connection limit, a deadline for every request's headers, and the verified client
certificate of each connection handed to the app (:data:`~secemb.server.tls.PEER_CN_SCOPE_KEY`).

uvicorn itself closes an idle keep-alive connection, but not one that stalls before or in the
middle of its request headers: :class:`GuardedH11Protocol` closes a connection that has no
request in progress and has started none for ``header_timeout_s`` seconds.  A stalled body
is the app's to time out (it reads bodies under a deadline).

Nor does uvicorn bound the TLS handshake: asyncio waits 60 s for a ClientHello, and uvicorn's
connection limit counts a connection only once its handshake is done, so connections that never
start TLS held a descriptor each for a minute, unbounded in number (issue 33: 1,100 of them
exhausted the descriptors).  :class:`TlsFirstProtocol` runs the handshake itself
(``loop.start_tls``) under ``header_timeout_s`` and with at most ``max_pending`` (twice the
connection limit: with the established connections, three times the limit in descriptors) handshakes in
flight (a connection beyond that is closed at once), then hands the connection to
:class:`GuardedH11Protocol`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import ssl
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

from secemb.errors import InvalidParameters
from secemb.server.tls import PEER_CN_SCOPE_KEY, client_cert_cn, server_context_kwargs

__all__ = ["GuardedH11Protocol", "guarded_config", "run", "serve_until_stopped"]


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


#: how long closing a TLS connection waits for the client's close_notify (asyncio's default, 30 s, kept
#: a ``secemb serve`` given SIGTERM alive that long for every idle keep-alive connection of a client that
#: does not answer it -- an httpx pool's idle connection does not: the process was killed instead)
TLS_CLOSE_TIMEOUT_S = 1.0


class TlsFirstProtocol(asyncio.Protocol):
    """A plain TCP connection that becomes :attr:`http` (a :class:`GuardedH11Protocol`) once
    its TLS handshake with :attr:`context` completes within :attr:`handshake_timeout_s`.
    Subclasses set the class attributes; uvicorn's keyword arguments are passed through."""

    context: ClassVar[ssl.SSLContext]
    handshake_timeout_s: ClassVar[float]
    max_pending: ClassVar[int]
    http: ClassVar[type[GuardedH11Protocol]]
    #: handshakes in flight in this process (one event loop: no lock needed)
    pending: ClassVar[int] = 0

    def __init__(self, **uvicorn_kwargs: Any) -> None:
        self._kwargs = uvicorn_kwargs
        self._task: asyncio.Task[None] | None = None
        self._early: list[bytes] = []  # decrypted bytes that came with the handshake's last flight
        self._eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if type(self).pending >= self.max_pending:
            transport.abort()
            return
        transport.pause_reading()  # the ClientHello is start_tls's to read
        type(self).pending += 1
        self._task = asyncio.get_running_loop().create_task(self._handshake(transport))

    async def _handshake(self, raw: asyncio.Transport) -> None:
        try:
            tls = await asyncio.get_running_loop().start_tls(
                raw, self, self.context, server_side=True, ssl_handshake_timeout=self.handshake_timeout_s,
                ssl_shutdown_timeout=TLS_CLOSE_TIMEOUT_S)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            raw.abort()
            return
        finally:
            type(self).pending -= 1
        if tls is None:  # the connection closed during the handshake
            return
        http = self.http(**self._kwargs)
        tls.set_protocol(http)
        http.connection_made(tls)
        for data in self._early:
            http.data_received(data)
        if self._eof:
            http.eof_received()

    def data_received(self, data: bytes) -> None:
        """Application data the TLS layer decrypted before :meth:`_handshake` resumed (reading is
        paused before TLS, so never plain bytes): kept for the HTTP protocol."""
        self._early.append(data)

    def eof_received(self) -> bool | None:
        self._eof = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


def bind(host: str, port: int) -> socket.socket:
    """The server's listening address bound (as uvicorn binds it: ``SO_REUSEADDR``, IPv6 for a
    host with a colon), before anything else starts, so that a busy port fails at once.

    Raises
    ------
    InvalidParameters
        The address cannot be bound: the port is in use, or the host is not an address of
        this machine; the message says which.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "port in use (another process listens there)" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise InvalidParameters(f"cannot listen on {host}:{port}: {why}") from None
    sock.set_inheritable(True)
    return sock


def run(app: Any, cfg: Any, *, log_level: str, sock: socket.socket | None = None) -> None:
    """Serve ``app`` as ``cfg`` (a :class:`~secemb.server.config.ServerConfig`) says, until
    interrupted: TLS with the configured certificate (client certificates optional, checked
    against the CA), or plain HTTP where ``cfg.insecure_http`` allows it (loopback only).
    ``sock``: the address already bound by :func:`bind`, released just before uvicorn binds it
    again (uvicorn serving a socket it was handed answered a flood of junk bodies with twice as
    many 503s as one it bound itself -- ``tests/server/test_net_flood.py``, finding 4 -- so the early
    bind only proves the port free; a process that takes the port in the instant between is
    uvicorn's startup failure, exit 3)."""
    tls = {} if cfg.insecure_http else server_context_kwargs(cfg.tls_ca, cfg.tls_cert, cfg.tls_key)
    if tls:  # the process's one server speaks TLS: uvicorn's start-up line says so (_TlsScheme)
        logging.getLogger("uvicorn.error").addFilter(_TLS_SCHEME)
    config = guarded_config(app, cfg.host, cfg.port, read_timeout_s=cfg.read_timeout_s,
                            max_connections=cfg.max_connections, tls=tls, log_level=log_level)
    if sock is not None:
        sock.close()
    serve_until_stopped(config)


class _TlsScheme(logging.Filter):
    """uvicorn names the scheme of its start-up line ("Uvicorn running on http://...") from its
    ``config.ssl``, which :func:`guarded_config` hands to :class:`TlsFirstProtocol` instead: the
    line would say ``http`` for a server that speaks only TLS.  This filter of the
    ``uvicorn.error`` logger, installed by :func:`run` for a TLS server (the process's one
    server), makes that line say ``https``; every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (isinstance(record.msg, str) and record.msg.startswith("Uvicorn running on ")
                and isinstance(record.args, tuple) and record.args[:1] == ("http",)):
            record.args = ("https", *record.args[1:])
        return True


_TLS_SCHEME = _TlsScheme()


def serve_until_stopped(config: Any) -> None:
    """Run uvicorn's server of ``config`` (a loaded ``uvicorn.Config``) until SIGINT or SIGTERM,
    then return once it has shut down gracefully (``secemb serve`` exits 0).  uvicorn raises the
    signal again under the handler it found: with Python's (``KeyboardInterrupt``, or death by
    SIGTERM) a clean shutdown would not exit 0, so :func:`_shut_down` stands in meanwhile."""
    import uvicorn

    stopping = {sig: signal.signal(sig, _shut_down) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config).run()
    finally:
        for sig, handler in stopping.items():
            signal.signal(sig, handler)


def _shut_down(signum: int, frame: Any) -> None:
    """The handler uvicorn's server finds and calls again once it has shut down on ``signum``:
    nothing left to do (:func:`run` returns, ``secemb serve`` exits 0)."""


def guarded_config(app: Any, host: str, port: int, *, read_timeout_s: float, max_connections: int,
                   tls: dict[str, Any], log_level: str, own_process: bool = True) -> Any:
    """uvicorn's configuration (loaded) serving ``app`` on ``host:port`` with this module's
    guards: at most ``max_connections`` connections, request headers within ``read_timeout_s``
    (:class:`GuardedH11Protocol`), and with ``tls`` (:func:`~secemb.server.tls.server_context_kwargs`;
    ``{}``: plain HTTP) each TLS handshake within ``read_timeout_s``, at most twice
    ``max_connections`` of them in flight (:class:`TlsFirstProtocol`).  Every app the project
    serves is served under it (:func:`run`; :class:`secemb.sim.exchange.NodeServer`).
    ``own_process``: the server is the process's only job (``secemb serve``), so uvicorn
    installs its logging configuration; ``False`` for a server in a thread of a process that is
    someone else's (a simulation, a test, a user's Python session): uvicorn then only sets its
    loggers' level -- its ``dictConfig`` would close every logging handler the process already
    has (a library's root handler included, which closes the stream it holds)."""
    import uvicorn

    from uvicorn.config import LOGGING_CONFIG

    guarded = type("Guarded", (GuardedH11Protocol,), {"header_timeout_s": read_timeout_s})
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_keep_alive=30, limit_concurrency=max_connections, http=guarded,
                            log_config=LOGGING_CONFIG if own_process else None, **tls)
    config.load()
    if config.ssl is not None:  # the handshake is TlsFirstProtocol's, under a deadline and a bound
        config.http_protocol_class = type("TlsFirst", (TlsFirstProtocol,), {
            "context": config.ssl, "handshake_timeout_s": read_timeout_s,
            "max_pending": 2 * max_connections, "http": guarded})
        config.ssl = None
    return config
