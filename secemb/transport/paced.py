"""Answers that keep pace, at the socket: the ``httpx`` transport of :class:`~secemb.transport.network.ApiClient`.

httpx's ``timeout`` is per read: a server that writes an answer a byte at a time, each gap below
the timeout, holds its reader as long as it likes -- in the status line and headers, in a
chunked body's chunk-size lines, or in the body.  :class:`PacedTransport` bounds the whole
answer instead (:class:`AnswerPace`): its headers must be in ``timeout`` seconds (the request's
read timeout) after the request is sent, and from then its bytes must keep arriving at
:data:`MIN_ANSWER_RATE` on average after a grace of ``timeout``.

Public APIs only: an ``httpx.BaseTransport`` over ``httpcore.ConnectionPool`` (TLS, HTTP/1.1
keep-alive, the pool's limits as ``httpx.HTTPTransport`` sets them) whose network backend wraps
``httpcore.SyncBackend``'s streams; each read is given at most the seconds the answer has left.
The request's pace is carried to its reads in a :class:`contextvars.ContextVar`, set while httpcore
works for that request (sending it and reading its headers, then each step of its body), so a
pooled connection serves one request after another, each with its own.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

__all__ = ["MIN_ANSWER_RATE", "AnswerPace", "PacedTransport"]

#: the least average rate, in bytes per second, at which an answer arrives once its request's
#: ``timeout`` has passed since its headers (:class:`AnswerPace`): 32 KiB/s = 256 kbit/s, so an
#: honest answer of any size completes on a link as slow as EDGE-class mobile data, while a server
#: that drips one holds a reader at most 2 x ``timeout`` + the answer limit / 32 KiB/s (~34 min at
#: the 64 MiB floor; before, httpx's per-read timeout alone held it for as long as the server liked)
MIN_ANSWER_RATE = 32 << 10


class AnswerPace:
    """The time one answer has to arrive, for a request whose timeout is ``timeout`` seconds.

    Before its headers: ``timeout`` seconds from the request's last write (from this object's
    creation, before any), however the server splits them -- a wall-clock bound, as an honest
    server that answers within ``timeout`` meets today.  After :meth:`headers_in`: at every moment
    the bytes counted by :meth:`got` are at least :data:`MIN_ANSWER_RATE` x (the seconds since the
    headers - ``timeout``), i.e. ``n`` bytes have ``timeout`` + ``n`` / :data:`MIN_ANSWER_RATE`
    seconds to arrive.  Not thread-safe: one request's reads run one at a time.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.received = 0
        self._since = time.monotonic()
        self._headers = False

    def wrote(self) -> None:
        """The request's bytes went out: the wait for the headers starts (again) now."""
        if not self._headers:
            self._since = time.monotonic()

    def headers_in(self) -> None:
        """The answer's headers are in: from now its bytes must keep pace."""
        self._headers, self._since = True, time.monotonic()

    def got(self, n: int) -> None:
        """``n`` more bytes of the answer arrived."""
        self.received += n

    def left(self) -> float:
        """Seconds before the answer is late (0 or less: it is)."""
        allowed = self.timeout + (self.received / MIN_ANSWER_RATE if self._headers else 0.0)
        return allowed - (time.monotonic() - self._since)

    def lateness(self) -> str:
        """Why the answer is late, in words (for the error of a request that :meth:`left` cut)."""
        spent = time.monotonic() - self._since
        if not self._headers:
            return f"no answer's headers {self.timeout:g} s after the request ({spent:.1f} s)"
        return (f"the answer arrives slower than {MIN_ANSWER_RATE} B/s after its first {self.timeout:g} s "
                f"({self.received} B in {spent:.1f} s)")


_PACE: ContextVar[AnswerPace | None] = ContextVar("secemb_answer_pace", default=None)

#: httpcore's errors and httpx's for them, the more specific first (as ``httpx.HTTPTransport`` maps them)
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout), (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout), (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError), (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError), (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError), (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol), (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.NetworkError, httpx.NetworkError), (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _paced(pace: AnswerPace | None) -> Iterator[None]:
    """httpcore works for the request of ``pace`` inside (its reads keep it); its errors leave as httpx's."""
    token = _PACE.set(pace)
    try:
        yield
    except Exception as exc:
        for core, ours in _ERRORS:
            if isinstance(exc, core):
                raise ours(str(exc)) from exc
        raise
    finally:
        _PACE.reset(token)


class _PacedStream(httpcore.NetworkStream):
    """``inner`` (a connection's socket, plain or TLS), each read given at most the seconds the
    current request's answer has left (httpcore.ReadTimeout, saying why, once it has none)."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        pace = _PACE.get()
        if pace is None:
            return self._inner.read(max_bytes, timeout)
        left = pace.left()
        if left <= 0:
            raise httpcore.ReadTimeout(pace.lateness())
        try:
            data = self._inner.read(max_bytes, left if timeout is None else min(timeout, left))
        except httpcore.ReadTimeout:
            if pace.left() <= 0:
                raise httpcore.ReadTimeout(pace.lateness()) from None
            raise
        pace.got(len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)
        pace = _PACE.get()
        if pace is not None:
            pace.wrote()

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _PacedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _PacedBackend(httpcore.NetworkBackend):
    """httpcore's synchronous sockets, as :class:`_PacedStream`."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _PacedStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _PacedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _PacedBody(httpx.SyncByteStream):
    """httpcore's body ``stream`` of one answer, each step of it under the answer's ``pace``."""

    def __init__(self, stream: Iterable[bytes], pace: AnswerPace | None) -> None:
        self._stream, self._pace = stream, pace

    def __iter__(self) -> Iterator[bytes]:
        parts = iter(self._stream)
        while True:
            with _paced(self._pace):
                part = next(parts, None)
            if part is None:
                return
            yield part

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            with _paced(self._pace):
                close()


class PacedTransport(httpx.BaseTransport):
    """An ``httpx.HTTPTransport`` without proxies whose answers keep pace (:class:`AnswerPace`,
    the request's read timeout its ``timeout``; a request without one is not paced).

    Parameters
    ----------
    verify: the TLS context that verifies servers (e.g. pinning the deployment's CA and holding a
        client certificate), or ``True``: httpx's default context (``httpx.create_ssl_context``,
        not trusting the environment) -- what an ``httpx.Client(verify=..., trust_env=False)`` uses.

    limits: the pool's limits, as an ``httpx.Client``'s (which ignores its own ``limits=`` once
        given a ``transport=``); httpx's default: 100 connections, 20 kept alive for 5 s.

    A late answer raises ``httpx.ReadTimeout`` (its message says why), closing its connection.
    """

    def __init__(self, *, verify: ssl.SSLContext | bool = True, limits: httpx.Limits | None = None) -> None:
        if limits is None:
            limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            max_connections=limits.max_connections, max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry, network_backend=_PacedBackend())

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``; the answer once its headers are in, its body to be read under its pace."""
        if not isinstance(request.stream, httpx.SyncByteStream):
            raise TypeError("PacedTransport sends synchronous requests only")
        read = request.extensions.get("timeout", {}).get("read")
        pace = AnswerPace(read) if read is not None else None
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                             target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions)
        with _paced(pace):
            resp = self._pool.handle_request(core)
        if pace is not None:
            pace.headers_in()
        if not isinstance(resp.stream, Iterable):
            raise TypeError("httpcore's synchronous pool answered with an asynchronous body")
        return httpx.Response(status_code=resp.status, headers=resp.headers, stream=_PacedBody(resp.stream, pace),
                              extensions=resp.extensions)

    def close(self) -> None:
        self._pool.close()
