"""Session 21, finding G7: an answer's body must keep pace, so that a server dripping it is cut.

httpx's ``timeout`` is per read: a server that writes an answer a byte at a time, each gap
below the timeout, held every :class:`~secemb.transport.network.ApiClient` reader (devices of
every protocol, round polling, the operator) for as long as it liked.  Now a bounded answer's
body, once ``timeout`` seconds have passed since its headers, must have arrived at an average of
at least 32 KiB/s (``MIN_ANSWER_RATE``), else :class:`Unreachable` (what a timeout raises); an
honest answer at a steady rate above that completes however long it takes.  And no encoding
streams forever: at most ``max_answer_bytes`` arrive on the wire (a deflate stream of empty
blocks decodes to nothing), and bytes after the end of a gzip body are refused.

Servers: a stub on 127.0.0.1 that sends one body at a chosen pace; every test is bounded in time.
"""

from __future__ import annotations

import gzip
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secemb.errors import InvalidMessage
from secemb.server.tls import client_cert_cn, client_context, init_pki
from secemb.transport.errors import Unreachable
from secemb.transport.http import HttpAdminLink, HttpServerLink
from secemb.transport.network import MIN_ANSWER_RATE, ApiClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_deviating_server import LoopbackServer, QuietHandler  # noqa: E402

KEY = b"k" * 32


class PacedServer(LoopbackServer):
    """Answers every request with ``body`` (headers at once, then ``step`` bytes every ``every``
    seconds), ``headers`` added; on 127.0.0.1."""

    def __init__(self, body: bytes, *, step: int, every: float, headers: dict[str, str] | None = None) -> None:
        owner = self
        self.body, self.step, self.every, self.headers = body, step, every, dict(headers or {})
        self.hung_up = threading.Event()

        class Handler(QuietHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.start(200, {"content-type": "application/octet-stream", **owner.headers}, len(owner.body))
                try:
                    for i in range(0, len(owner.body), owner.step):
                        if owner.every:
                            time.sleep(owner.every)
                        self.wfile.write(owner.body[i:i + owner.step])
                        self.wfile.flush()
                except OSError:  # the reader hung up
                    owner.hung_up.set()

            do_GET = do_POST = _answer

        super().__init__(Handler)


@pytest.fixture
def serve() -> Iterator[Any]:
    made: list[PacedServer] = []

    def start(body: bytes, **kwargs: Any) -> PacedServer:
        made.append(PacedServer(body, **kwargs))
        return made[-1]

    yield start
    for s in made:
        s.close()


def test_the_minimum_rate_is_32_kib_per_second() -> None:
    """The figure docs/security.md and the tests below state."""
    assert MIN_ANSWER_RATE == 32 * 1024


def test_a_secemb_device_is_cut_from_a_dripped_dense_vector_within_its_timeout(serve) -> None:
    """A SecEmb device's dense vector (its ``HttpServerLink``, timeout 1 s) dripped one byte every
    20 ms (4 KiB: ~80 s in all, every read well within 1 s): Unreachable after about a second."""
    server = serve(bytes(4096), step=1, every=0.02)
    link = HttpServerLink(0, 3, server.url, KEY, timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(Unreachable, match="slower than 32768 B/s"):
        link.dense(4)
    assert time.monotonic() - t0 < 4.0
    link.api.close()


def test_the_operator_is_cut_from_a_dripped_status_within_its_timeout(serve) -> None:
    """``secemb admin``'s link (``HttpAdminLink`` over an admin ``ApiClient``, timeout 1 s) and a
    status document dripped one byte every 20 ms: Unreachable after about a second."""
    doc = b'{"party": 0, "model_version": 3, "round": null, "pad": "' + b"x" * 2000 + b'"}'
    server = serve(doc, step=1, every=0.02)
    with ApiClient(server.url, "admin", KEY, timeout=1.0) as api:
        t0 = time.monotonic()
        with pytest.raises(Unreachable, match="slower than"):
            HttpAdminLink(0, api).status()
        assert time.monotonic() - t0 < 4.0
    assert server.hung_up.wait(5.0)  # the reader closed the connection: the server's writes fail


def test_an_honest_slow_but_steady_answer_completes_past_its_timeout(serve) -> None:
    """96 KiB at 40 KiB/s (4 KiB every 0.1 s; above the 32 KiB/s minimum) to a reader whose
    timeout is 1 s: it takes ~2.4 s -- more than twice the timeout, so a wall-clock timeout per
    request would cut it -- and arrives whole."""
    body = bytes(range(256)) * 384
    server = serve(body, step=4096, every=0.1)
    with ApiClient(server.url, "user:1", KEY, timeout=1.0) as api:
        t0 = time.monotonic()
        assert api.get_bytes("/v1/rounds/1/dense") == body
        assert time.monotonic() - t0 > 2.0


def test_an_answer_below_the_minimum_rate_is_cut_before_it_ends(serve) -> None:
    """The same 96 KiB at 16 KiB/s (2 KiB every 0.125 s: ~6 s in all, every read within the 1 s
    timeout) falls behind 32 KiB/s x (t - 1 s) at t ~ 2 s: Unreachable well before its end."""
    server = serve(bytes(96 * 1024), step=2048, every=0.125)
    with ApiClient(server.url, "user:1", KEY, timeout=1.0) as api:
        t0 = time.monotonic()
        with pytest.raises(Unreachable, match="slower than"):
            api.get_bytes("/v1/rounds/1/dense")
        assert time.monotonic() - t0 < 5.0


def test_a_deflate_stream_of_empty_blocks_stops_at_the_limit(serve) -> None:
    """2 MiB of empty stored deflate blocks (each 5 bytes, decoding to nothing) to a reader of at
    most 1 MiB: refused as longer than the limit once 1 MiB is on the wire (before, the decoded
    size never grew and such a stream was read to its end, however long)."""
    stream = b"\x78\x9c" + b"\x00\x00\x00\xff\xff" * (2 * 1024 * 1024 // 5)
    server = serve(stream, step=64 * 1024, every=0.0, headers={"content-encoding": "deflate"})
    with ApiClient(server.url, "user:1", KEY, timeout=5.0, max_answer_bytes=1 << 20) as api, \
            pytest.raises(InvalidMessage, match="longer than 1048576 bytes"):
        api.get_bytes("/v1/rounds/1/dense")


def test_bytes_after_the_end_of_a_gzip_body_are_refused(serve) -> None:
    """A complete gzip body followed by more bytes: refused (before, the rest was read and
    dropped, to the end of the stream)."""
    server = serve(gzip.compress(b'{"state": "open"}') + b"\x00" * 100, step=1 << 16, every=0.0,
                   headers={"content-encoding": "gzip"})
    with ApiClient(server.url, "user:1", KEY, timeout=5.0) as api, \
            pytest.raises(InvalidMessage, match="after the end of its gzip body"):
        api.get_json("/v1/round")


def test_a_well_formed_gzip_answer_still_decodes(serve) -> None:
    """The control of the two above: a gzip and a deflate answer, nothing after them, decode."""
    for coding, packed in (("gzip", gzip.compress(b'{"state": "open"}')), ("deflate", zlib.compress(b'{"a": 1}'))):
        server = serve(packed, step=3, every=0.0, headers={"content-encoding": coding})
        with ApiClient(server.url, "user:1", KEY, timeout=5.0) as api:
            assert api.get_json("/v1/round") in ({"state": "open"}, {"a": 1})


def test_dripped_headers_are_cut_within_the_timeout() -> None:
    """An answer's status line and headers (~200 bytes) written one byte every 20 ms (~4 s), the
    body never reached: every read within the 1 s timeout, so httpx alone waited for them whole --
    and at h11's 100 KiB of headers and a 30 s timeout, for a month.  ApiClient's transport cuts
    them a second after the request (Unreachable, saying so)."""
    head = b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * 150 + b"\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
    server = LoopbackServer(_dripping(b"", head))
    try:
        with ApiClient(server.url, timeout=1.0) as api:
            t0 = time.monotonic()
            with pytest.raises(Unreachable, match="no answer's headers 1 s after the request"):
                api.get_bytes("/v1/round")
            assert time.monotonic() - t0 < 3.0
    finally:
        server.close()


def _dripping(prefix: bytes, drip: bytes) -> type[QuietHandler]:
    """A handler answering ``prefix`` at once, then ``drip`` one byte every 20 ms (closing after)."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.close_connection = True
            try:
                self.wfile.write(prefix)
                self.wfile.flush()
                for i in range(len(drip)):
                    time.sleep(0.02)
                    self.wfile.write(drip[i:i + 1])
                    self.wfile.flush()
            except OSError:  # the reader hung up
                pass

    return Handler


@pytest.mark.parametrize("max_answer_bytes", [1 << 20, None])
def test_a_dripped_chunk_size_line_is_cut_within_the_timeout(max_answer_bytes: int | None) -> None:
    """A chunked answer whose first chunk-size line (a size and ~180 bytes of chunk extension)
    arrives one byte every 20 ms (~4 s): no piece of the body ever arrives, so only a pace at the
    socket sees it.  Cut about a second after the headers, for a bounded reader and an unbounded
    one alike (``max_answer_bytes=None``: httpx decodes, still over ApiClient's transport)."""
    server = LoopbackServer(_dripping(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
                                      b"2;x=" + b"a" * 180 + b"\r\nok\r\n0\r\n\r\n"))
    try:
        with ApiClient(server.url, timeout=1.0, max_answer_bytes=max_answer_bytes) as api:
            t0 = time.monotonic()
            with pytest.raises(Unreachable, match="slower than 32768 B/s"):
                api.get_bytes("/v1/round")
            assert time.monotonic() - t0 < 3.0
    finally:
        server.close()


def test_a_slow_but_timely_answer_is_read_whole_on_a_kept_alive_connection() -> None:
    """The control: an answer whose headers come 0.5 s after the request (an honest server at
    work, within the 1 s timeout) and whose 48 KiB body follows at 40 KiB/s (4 KiB every 0.1 s:
    ~1.7 s in all, past the timeout), twice on one client -- both read whole, the second on the
    first's kept-alive connection (the stub accepts one)."""
    body = bytes(range(256)) * 192
    accepted: list[object] = []

    class Handler(QuietHandler):
        def setup(self) -> None:
            accepted.append(self)
            super().setup()

        def do_GET(self) -> None:
            time.sleep(0.5)
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            for i in range(0, len(body), 4096):
                time.sleep(0.1)
                self.wfile.write(body[i:i + 4096])
                self.wfile.flush()

    server = LoopbackServer(Handler)
    try:
        with ApiClient(server.url, "user:1", KEY, timeout=1.0) as api:
            assert api.get_bytes("/v1/rounds/1/dense") == body
            assert api.get_bytes("/v1/rounds/1/dense") == body
        assert len(accepted) == 1
    finally:
        server.close()


def test_over_mutual_tls_an_honest_answer_reads_and_dripped_headers_are_cut(tmp_path: Path) -> None:
    """The pace holds under TLS with the deployment's CA and a client certificate, as ApiClient
    is given them (server 0 calling server 1): the stub requires and checks the certificate; its
    first answer is honest (read whole, the client's certificate seen), its second drips its
    headers one byte every 20 ms (~4 s): cut a second after the request."""
    files = init_pki(tmp_path / "pki", 0, ["127.0.0.1"])
    head = b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * 150 + b"\r\ncontent-length: 2\r\n\r\nok"
    seen: list[str | None] = []

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            seen.append(client_cert_cn(self.connection.getpeercert()))
            try:
                for i in range(len(head)):
                    if self.path == "/drip":
                        time.sleep(0.02)
                    self.wfile.write(head[i:i + 1])
                    self.wfile.flush()
            except OSError:  # the reader hung up
                self.close_connection = True

    server = LoopbackServer(Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(files.cert(0), files.key(0))
    tls.load_verify_locations(files.ca)
    tls.verify_mode = ssl.CERT_REQUIRED
    server.server.socket = tls.wrap_socket(server.server.socket, server_side=True)
    url = server.url.replace("http://", "https://")
    try:
        with ApiClient(url, timeout=1.0, tls=client_context(files.ca, files.cert(0), files.key(0))) as api:
            assert api.get_bytes("/honest") == b"ok"
            t0 = time.monotonic()
            with pytest.raises(Unreachable, match="no answer's headers 1 s after the request"):
                api.get_bytes("/drip")
            assert time.monotonic() - t0 < 3.0
        assert seen == ["server0", "server0"]
    finally:
        server.close()
