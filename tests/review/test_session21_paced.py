"""Session 21 (helper M): review of :class:`~secemb.transport.paced.PacedTransport` against httpx's own transport.

Each test states a concern and fails if it is real: a connection cut mid-answer is closed, never
reused half-read; each request keeps its own pace across threads sharing one client and when
its body is read after (or away from) the call that sent it; the header clock starts after the
request's last write (a slowly produced upload is not cut); every cut is ``Unreachable``; TLS
verifies the host name, the deployment's CA and presents the client certificate; proxies from
the environment are not used; the pool's connection limit holds.

Servers: stubs on 127.0.0.1; every test is bounded in time (a few seconds).
"""

from __future__ import annotations

import ssl
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from secemb.server.tls import TlsFiles, client_context, init_pki
from secemb.transport.errors import Unreachable
from secemb.transport.network import ApiClient
from secemb.transport.paced import PacedTransport

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_deviating_server import LoopbackServer, QuietHandler  # noqa: E402


class _Stub(QuietHandler):
    """Keep-alive answers by path: ``/ok`` (``ok`` at once), ``/late`` (``ok`` after 1.2 s),
    ``/drip`` (headers of a 100 KiB body at once, then one byte every 50 ms for at most 4 s),
    ``/short`` (10 bytes of a 100-byte body, then the connection closed), ``/hold`` (``ok``
    after 0.3 s, counting the answers in progress); a POST's body is read whole first.
    ``accepted``: the connections accepted; ``busy``/``most``: answers in progress / at most."""

    accepted: list[object]
    lock = threading.Lock()
    busy = 0
    most = 0

    def setup(self) -> None:
        type(self).accepted.append(self)
        super().setup()

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/late":
            time.sleep(1.2)
        if self.path == "/hold":
            cls = type(self)
            with cls.lock:
                cls.busy += 1
                cls.most = max(cls.most, cls.busy)
            time.sleep(0.3)
            with cls.lock:
                cls.busy -= 1
        if self.path in ("/drip", "/short"):
            self.send_response(200)
            self.send_header("content-length", str(100 << 10 if self.path == "/drip" else 100))
            self.end_headers()
            self.close_connection = True
            try:
                if self.path == "/short":
                    self.wfile.write(b"0123456789")
                    return
                for _ in range(80):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:  # the reader hung up
                pass
            return
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = _answer


@pytest.fixture
def stub() -> Iterator[tuple[LoopbackServer, type[_Stub]]]:
    handler = type("Stub", (_Stub,), {"accepted": [], "busy": 0, "most": 0})
    server = LoopbackServer(handler)
    yield server, handler
    server.close()


@pytest.mark.parametrize("max_answer_bytes", [1 << 20, None])
def test_a_connection_cut_mid_body_is_closed_and_never_reused(stub, max_answer_bytes: int | None) -> None:
    """A keep-alive connection cut for pace mid-body (Unreachable) is not handed back to the pool
    half-read: the next request on the same client gets a fresh connection and a clean answer."""
    server, handler = stub
    with ApiClient(server.url, timeout=0.5, max_answer_bytes=max_answer_bytes) as api:
        assert api.get_bytes("/ok") == b"ok"
        t0 = time.monotonic()
        with pytest.raises(Unreachable, match="slower than 32768 B/s"):
            api.get_bytes("/drip")
        assert time.monotonic() - t0 < 2.5
        assert api.get_bytes("/ok") == b"ok"
    # /ok and /drip shared the first connection; the one after the cut is new
    assert len(handler.accepted) == 2


@pytest.mark.parametrize("max_answer_bytes", [1 << 20, None])
def test_every_cut_is_unreachable(stub, max_answer_bytes: int | None) -> None:
    """A body cut short by the server, a refused connection: Unreachable, never httpx's or httpcore's errors."""
    server, _ = stub
    with ApiClient(server.url, timeout=1.0, max_answer_bytes=max_answer_bytes) as api:
        with pytest.raises(Unreachable):
            api.get_bytes("/short")
    closed = LoopbackServer(QuietHandler)
    url = closed.url
    closed.close()
    with ApiClient(url, timeout=1.0, max_answer_bytes=max_answer_bytes) as api:
        with pytest.raises(Unreachable):
            api.get_bytes("/ok")


def test_threads_sharing_one_client_keep_their_own_pace(stub) -> None:
    """One ApiClient (as server 0's peer link) used from two threads at once: a 0.5 s request cut
    for a dripped body does not lend its pace to a 3 s request whose headers come after 1.2 s
    (read whole), nor the other way round (the drip is still cut in time)."""
    server, _ = stub
    barrier = threading.Barrier(2)
    out: dict[str, object] = {}

    def call(name: str, path: str, seconds: float) -> None:
        barrier.wait()
        t0 = time.monotonic()
        try:
            out[name] = api.request("GET", path, timeout=seconds).content
        except Unreachable as exc:
            out[name] = exc
        out[name + "_s"] = time.monotonic() - t0

    with ApiClient(server.url, timeout=1.0) as api:
        threads = [threading.Thread(target=call, args=("drip", "/drip", 0.5)),
                   threading.Thread(target=call, args=("late", "/late", 3.0))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert out["late"] == b"ok"
    assert isinstance(out["drip"], Unreachable)
    assert isinstance(out["drip_s"], float) and out["drip_s"] < 2.5


def test_a_body_read_in_another_thread_after_the_call_keeps_its_pace(stub) -> None:
    """A streamed answer whose body is read after ``send`` returned, in a thread that never set a
    pace (a fresh context), is still read under its own: the dripped body is cut ~0.5 s in, not
    read for the drip's 4 s at httpx's per-read timeout."""
    server, _ = stub
    out: list[object] = []
    with httpx.Client(transport=PacedTransport(), timeout=0.5, trust_env=False) as http:
        resp = http.send(http.build_request("GET", server.url + "/drip"), stream=True)

        def read() -> None:
            t0 = time.monotonic()
            try:
                resp.read()
                out.append("read whole")
            except httpx.ReadTimeout as exc:
                out.append(exc)
            out.append(time.monotonic() - t0)

        worker = threading.Thread(target=read)
        worker.start()
        worker.join(10)
        resp.close()
    assert isinstance(out[0], httpx.ReadTimeout) and "slower than" in str(out[0])
    assert isinstance(out[1], float) and out[1] < 2.5


def test_the_header_clock_starts_after_the_last_write(stub) -> None:
    """An upload produced slowly (5 pieces 0.3 s apart: 1.5 s, past the 1 s timeout), answered at
    once when whole, is read: the wait for the headers starts after the request's last write."""
    server, _ = stub

    def pieces() -> Iterator[bytes]:
        for _ in range(5):
            time.sleep(0.3)
            yield b"y" * 1000

    with httpx.Client(transport=PacedTransport(), timeout=1.0, trust_env=False) as http:
        resp = http.post(server.url + "/ok", content=pieces(), headers={"content-length": "5000"})
    assert resp.content == b"ok"


def test_proxies_from_the_environment_are_not_used(stub, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP(S)_PROXY / ALL_PROXY pointing at a closed port change nothing: ApiClient goes direct."""
    server, _ = stub
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with ApiClient(server.url, timeout=1.0) as api:
        assert api.get_bytes("/ok") == b"ok"


def test_the_connection_limit_holds(stub) -> None:
    """``limits`` as an httpx.Client's: with one connection, three concurrent requests are answered one at a time."""
    server, handler = stub
    with httpx.Client(transport=PacedTransport(limits=httpx.Limits(max_connections=1)), timeout=5.0,
                      trust_env=False) as http:
        threads = [threading.Thread(target=http.get, args=(server.url + "/hold",)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert handler.most == 1
    assert len(handler.accepted) == 1


@pytest.fixture
def tls_stub(tmp_path: Path) -> Iterator[tuple[str, TlsFiles]]:
    """``_Stub`` over TLS requiring a client certificate of its CA; its URL and PKI files."""
    files = init_pki(tmp_path / "pki", 0, ["127.0.0.1"])
    server = LoopbackServer(type("Stub", (_Stub,), {"accepted": []}))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(files.cert(0), files.key(0))
    tls.load_verify_locations(files.ca)
    tls.verify_mode = ssl.CERT_REQUIRED
    server.server.socket = tls.wrap_socket(server.server.socket, server_side=True)
    yield server.url.replace("http://", "https://"), files
    server.close()


def test_tls_checks_the_host_name_and_the_ca_and_presents_the_certificate(tls_stub, tmp_path: Path) -> None:
    """The deployment's CA and client certificate: read.  The same server under a name its
    certificate does not carry (``localhost``), or checked against another CA, or without the
    client certificate: Unreachable, as httpx's own transport refuses them."""
    url, files = tls_stub
    good = client_context(files.ca, files.cert(0), files.key(0))
    with ApiClient(url, timeout=2.0, tls=good) as api:
        assert api.get_bytes("/ok") == b"ok"
    with ApiClient(url.replace("127.0.0.1", "localhost"), timeout=2.0, tls=good) as api:
        with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED|match|ConnectError"):
            api.get_bytes("/ok")
    other = init_pki(tmp_path / "other", 0, ["127.0.0.1"])
    with ApiClient(url, timeout=2.0, tls=client_context(other.ca, files.cert(0), files.key(0))) as api:
        with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            api.get_bytes("/ok")
    with ApiClient(url, timeout=2.0, tls=client_context(files.ca)) as api:
        with pytest.raises(Unreachable):
            api.get_bytes("/ok")
