"""Network transport, client side: signed HTTP requests to a secemb server.

Every request except ``GET /v1/health`` carries an HMAC-SHA256 signature (spec:
``docs/deployment.md``, "Authentication").  The signer is identified by a *key id*:

* ``"server0"`` / ``"server1"`` -- a server calling its peer, keyed by the peer secret the two
  operators share;
* ``"admin"`` -- the operator (or the demo's coordinator), keyed by the server's admin secret;
* ``"user:<id>"`` -- a device, keyed by its per-user key ``HMAC(user_secret, "secemb-user-key"
  || u64(id))`` (:func:`user_key`), which the server derives from its own user secret and so
  never stores.

The signed string is::

    SECEMB-HMAC-SHA256 \\n key_id \\n METHOD \\n path \\n query \\n timestamp_ms \\n nonce \\n
    hex(SHA-256(body))

(one field per line, no trailing newline).  The server rejects a timestamp outside its window,
a nonce it has seen inside the window, an unknown key id, and a wrong signature, all alike
with 401.  Bodies of protocol messages are the exact message bytes
(``application/octet-stream``); control messages are JSON.

:class:`ApiClient` signs, sends and raises :class:`RemoteError` (the server answered with an
error status: ``status``, ``error``, ``detail``) or :class:`Unreachable` (no answer).  It counts
the bytes of request and response bodies -- the protocol messages, as the in-process transport
counts them; HTTP headers are not part of the protocol's communication figures.
"""

from __future__ import annotations

import json
import ssl
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import httpx

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.transport.answers import answer_document
from secemb.transport.errors import RemoteError, Unreachable
from secemb.transport.limits import ANSWER_FLOOR_BYTES, answer_limit, answer_limit_for
from secemb.transport.paced import MIN_ANSWER_RATE, AnswerPace, PacedTransport
from secemb.transport.signing import sign_headers

__all__ = ["ANSWER_FLOOR_BYTES", "MIN_ANSWER_RATE", "ApiClient", "answer_fields", "answer_limit", "answer_limit_for"]

OCTET = "application/octet-stream"

#: the most bytes one step of a capped read decodes (deflate expands up to ~1000x)
_PIECE = 1 << 20

def _arriving(chunks: Iterable[bytes], limit: int, timeout: float, where: str) -> Iterator[bytes]:
    """``chunks``, an answer's body as it arrives (its headers are in), while it keeps within
    ``limit`` bytes and keeps pace (:class:`~secemb.transport.paced.AnswerPace`: at every chunk,
    the bytes in are at least :data:`MIN_ANSWER_RATE` x (the seconds since the headers -
    ``timeout``)).  :class:`ApiClient`'s own transport enforces that pace at the socket too, for
    the reads between chunks; this check holds it over any transport (a shared ``httpx.Client``).

    Raises
    ------
    Unreachable: the answer falls behind that pace (what a timed-out answer raises).
    InvalidMessage: more than ``limit`` bytes arrive (the bytes on the wire: an encoded answer's
    too, which an honest one never exceeds at any limit, so that no encoding -- e.g. a deflate
    stream of empty blocks, which decodes to nothing -- streams forever).
    """
    pace = AnswerPace(timeout)
    pace.headers_in()
    for chunk in chunks:
        pace.got(len(chunk))
        if pace.received > limit:
            raise InvalidMessage(f"{where}: the answer is longer than {limit} bytes")
        if pace.left() <= 0:
            raise Unreachable(f"{where}: {pace.lateness()}")
        yield chunk


def _decoded(raw: Iterable[bytes], coding: str, where: str) -> Iterator[bytes]:
    """The body ``raw`` of an answer, decoded by its ``Content-Encoding`` ``coding`` (``identity``,
    ``gzip`` or ``deflate``) in pieces of at most :data:`_PIECE` bytes -- not httpx's decoders,
    which expand a whole read at once (a 64 KiB read of a decompression bomb is ~64 MiB).

    Raises
    ------
    InvalidMessage: another encoding (a capped request asks for none), bytes that do not
    decode, or bytes after the end of a compressed body (all naming ``where``).
    """
    if coding == "identity":
        yield from raw
        return
    if coding not in ("gzip", "deflate"):
        raise InvalidMessage(f"{where}: the answer has an encoding it was not asked for ({coding!r:.40})")
    inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or a zlib header (HTTP's deflate)
    try:
        for chunk in raw:
            while chunk and not inflate.eof:
                yield inflate.decompress(chunk, _PIECE)
                chunk = inflate.unconsumed_tail
            if inflate.eof and (chunk or inflate.unused_data):
                raise InvalidMessage(f"{where}: the answer has bytes after the end of its {coding} body")
        yield inflate.flush()  # at most zlib's window
    except zlib.error as exc:
        raise InvalidMessage(f"{where}: the answer does not decode ({exc})") from None


def answer_fields(doc: Any, where: str, **kinds: type) -> dict[str, Any]:
    """Another party's JSON answer ``doc``, once it is an object holding each field ``name``
    with a value of type ``kinds[name]`` (a bool is not an ``int``; ``list``: a list of ints).

    Raises
    ------
    InvalidMessage: naming ``where`` (the party and the request), otherwise.
    """
    if not isinstance(doc, dict):
        raise InvalidMessage(f"{where}: a JSON object expected, got {type(doc).__name__}")
    for name, kind in kinds.items():
        value: Any = doc.get(name)
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if ok and isinstance(value, list):
            ok = all(isinstance(u, int) and not isinstance(u, bool) for u in value)
        if not ok:
            raise InvalidMessage(f"{where}: field {name!r}: {kind.__name__} expected, got {value!r:.80}")
    return doc


class ApiClient:
    """Signed requests to one server.

    Parameters
    ----------
    base_url: ``https://host:port`` of the server (``http://`` only for a loopback server
        started with ``--insecure-http``).
    key_id, key: the signer's identity and HMAC key (``None``: unsigned requests, for
        ``/v1/health`` and for tests of the refusal path).
    timeout: seconds to connect and per write of a request (httpx's), and the time its answer
        has (:class:`~secemb.transport.paced.AnswerPace`, at the socket): its status line and
        headers must be in ``timeout`` seconds after the request is sent, however the server
        splits them, and from then the answer must keep arriving at :data:`MIN_ANSWER_RATE` on
        average after a grace of ``timeout`` -- an answer of ``n`` bytes has ``timeout`` + ``n`` /
        that rate after its headers (a chunked body's chunk-size lines count as the bytes they
        are) -- so a server dripping any part of it a byte at a time is cut (``Unreachable``) and
        an honest large answer on a slow link is not, which a wall-clock ``timeout`` per request
        would do.  A client on a shared ``http`` pool is paced at the socket if that pool's
        transport is a :class:`~secemb.transport.paced.PacedTransport` (the simulations' and
        ``bench network``'s are); on any other, it has the body's pace only, checked as each piece
        of it arrives (:func:`_arriving`), and httpx's per-read timeout otherwise.
    http: an ``httpx.Client`` to share (its connection pool) between many signers, e.g. the
        simulated devices of a benchmark; it is not closed by :meth:`close`.
    tls: the TLS context that verifies the server (e.g. pinning the deployment's private CA,
        :func:`secemb.server.tls.client_context`); default: the system's trusted CAs.
    max_answer_bytes: the most bytes of an answer's body that are read (after a gzip or
        deflate ``Content-Encoding`` is decoded, 1 MiB at a time; the request asks for none, and
        another encoding is refused): a longer answer is refused with ``InvalidMessage`` once
        that many are in, not buffered whole.  Default :data:`ANSWER_FLOOR_BYTES` (64 MiB): no
        client reads unbounded unless its caller says so.  ``None`` is that opt-out -- no limit,
        httpx decodes -- for a server the calling process started itself on 127.0.0.1 (the
        simulations' :class:`~secemb.sim.cluster.LocalCluster` and one-server ``NodeServer``),
        never for a server across a trust boundary.  Server 0 reads server 1 with its own body
        limit; devices and the operator with the floor, raised to :func:`answer_limit` /
        :func:`answer_limit_for` once they know a round's or the model's sizes (the attribute is
        read at each request, so it may be changed between them).
    """

    def __init__(self, base_url: str, key_id: str | None = None, key: bytes | None = None, *, timeout: float = 30.0,
                 http: httpx.Client | None = None, tls: ssl.SSLContext | None = None,
                 max_answer_bytes: int | None = ANSWER_FLOOR_BYTES) -> None:
        if (key_id is None) != (key is None):
            raise InvalidParameters("give both key_id and key, or neither")
        self.max_answer_bytes = max_answer_bytes
        self.base_url = base_url.rstrip("/")
        self.key_id, self.key = key_id, key
        self._lock = threading.Lock()
        self._own = http is None
        self._http = http if http is not None else httpx.Client(
            timeout=timeout, trust_env=False, transport=PacedTransport(verify=tls if tls is not None else True))
        self._timeout = timeout
        self.sent_bytes = 0
        self.received_bytes = 0

    def close(self) -> None:
        if self._own:
            self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        most_bytes: int | None = None,
    ) -> httpx.Response:
        """Send a signed request; return the 2xx response.  ``most_bytes``: this answer's limit
        where it is below ``max_answer_bytes`` (or there is none).

        Raises
        ------
        RemoteError
            Non-2xx answer.
        Unreachable
            No answer: no headers ``timeout`` seconds after the request, or the answer behind
            :data:`MIN_ANSWER_RATE` after ``timeout`` seconds more.
        InvalidMessage
            An answer whose body does not decode by its ``Content-Encoding``, or longer than
            ``max_answer_bytes`` (or ``most_bytes``).
        """
        headers: dict[str, str] = {}
        if json_body is not None:
            body = json.dumps(json_body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        elif body:
            headers["Content-Type"] = OCTET
        query = str(httpx.QueryParams(params or {}))
        if self.key_id is not None and self.key is not None:  # both or neither (__init__)
            headers.update(sign_headers(self.key_id, self.key, method, path, query, body))
        url = self.base_url + path + (f"?{query}" if query else "")
        limit = self.max_answer_bytes if most_bytes is None else min(most_bytes, self.max_answer_bytes or most_bytes)
        if limit is not None:
            headers["Accept-Encoding"] = "identity"
        seconds = timeout if timeout is not None else self._timeout
        try:
            req = self._http.build_request(method, url, content=body if body else None, headers=headers,
                                           timeout=seconds)
            resp = self._http.send(req, stream=limit is not None)
            if limit is not None:
                resp = self._capped(resp, limit, seconds, f"{method} {self.base_url}{path}")
        except httpx.TransportError as exc:
            refused = isinstance(exc, httpx.ConnectError) and "refused" in str(exc).lower()
            hint = f" (nothing listens at {self.base_url}: is that server running?)" if refused else ""
            raise Unreachable(f"{method} {self.base_url}{path}: {type(exc).__name__}: {exc}{hint}") from None
        except httpx.DecodingError as exc:  # not a TransportError: the server answered, with a body that is not
            raise InvalidMessage(f"{method} {self.base_url}{path}: the answer does not decode ({exc})") from None
        with self._lock:
            self.sent_bytes += len(body)
            self.received_bytes += len(resp.content)
        if resp.status_code >= 300:
            try:
                doc = answer_document(resp.content)
                error, detail = str(doc.get("error", "error")), str(doc.get("detail", ""))
            except (ValueError, AttributeError):
                error, detail = "error", resp.text[:500]
            raise RemoteError(resp.status_code, error, detail)
        return resp

    @staticmethod
    def _capped(resp: httpx.Response, limit: int, timeout: float, where: str) -> httpx.Response:
        """The streamed ``resp`` read whole, if its body arrives in time and its decoded body has
        at most ``limit`` bytes (a response holding the body, without ``Content-Encoding``);
        closed either way.

        Raises
        ------
        Unreachable: the body falls behind :data:`MIN_ANSWER_RATE` after ``timeout`` seconds
        (:func:`_arriving`).
        InvalidMessage: the body is longer (reading stops at the first piece over the limit:
        at most ``limit`` + 1 MiB are decoded, at most ``limit`` arrive), does not decode, or has
        an encoding other than gzip or deflate (:func:`_decoded`).
        """
        try:
            if resp.is_stream_consumed:  # a transport that answered with the body read (httpx.MockTransport): decoded
                raw, coding = resp.iter_bytes(_PIECE), "identity"
            else:
                raw, coding = resp.iter_raw(), resp.headers.get("content-encoding", "identity").strip().lower()
            chunks, size = [], 0
            for chunk in _decoded(_arriving(raw, limit, timeout, where), coding, where):
                size += len(chunk)
                if size > limit:
                    raise InvalidMessage(f"{where}: the answer is longer than {limit} bytes")
                chunks.append(chunk)
        finally:
            resp.close()
        dropped = ("content-encoding", "content-length")  # the body below is the decoded one
        plain = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in dropped]
        return httpx.Response(resp.status_code, headers=plain, content=b"".join(chunks), request=resp.request)

    # convenience -------------------------------------------------------------------------
    def get_json(self, path: str, *, most_bytes: int | None = None, **params: Any) -> Any:
        """The JSON document of a signed GET (:meth:`request`'s errors; InvalidMessage: a 2xx
        answer that is not JSON); ``most_bytes``: read at most that many bytes of it (below
        ``max_answer_bytes``: a document whose honest size is known)."""
        return self._json("GET", path, self.request("GET", path, params=params or None, most_bytes=most_bytes))

    def post_json(self, path: str, doc: Any = None, **params: Any) -> Any:
        """POST ``doc`` as JSON; the answer's JSON document, ``None`` for an empty answer
        (:meth:`get_json`'s errors)."""
        resp = self.request("POST", path, json_body={} if doc is None else doc, params=params or None)
        return self._json("POST", path, resp) if resp.content else None

    def _json(self, method: str, path: str, resp: httpx.Response) -> Any:
        try:
            return answer_document(resp.content)
        except ValueError:  # json's decode error, text that is not UTF-8, or nesting too deep
            raise InvalidMessage(f"{method} {self.base_url}{path}: the answer is not JSON "
                                 f"({resp.headers.get('content-type', 'no content type')}, {len(resp.content)} B)"
                                 ) from None

    def get_bytes(self, path: str, **params: Any) -> bytes:
        return self.request("GET", path, params=params or None).content

    def post_bytes(self, path: str, body: bytes, *, timeout: float | None = None, **params: Any) -> bytes | None:
        """POST a protocol message; the response body (``None`` for 204)."""
        resp = self.request("POST", path, body=body, params=params or None, timeout=timeout)
        return None if resp.status_code == 204 else resp.content
