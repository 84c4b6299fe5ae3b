"""Session 20 (helper F): every party that reads another party's answers reads a bounded amount
(finding C2's class, ``tests/review/test_session20_answer_limit.py``: server 0 reading server 1).

Before, a device (``secemb client``, the SDK's :class:`DeviceClient`, ``secemb infer``) and the
operator (``secemb admin``) read every answer of a server whole, and httpx decoded a gzip one in
64 KiB reads at ~1000x each: a deviating server could exhaust a phone's memory with an endless
answer or a decompression bomb.  Now (``secemb.transport.network``):

* a device reads at most ``ANSWER_FLOOR_BYTES`` (64 MiB) until a round's session raises its limit
  to ``answer_limit`` of the round's announced sizes (both servers must announce the same); round
  documents at most ``ROUND_DOCUMENT_BYTES`` (1 MiB, since session 41: S41-R2);
* the operator reads at most ``ANSWER_FLOOR_BYTES``, and a model download ``answer_limit`` of the
  deployment's sizes;
* a capped read asks for no encoding and decodes a gzip/deflate answer in 1 MiB pieces itself,
  so at most the limit plus 1 MiB is ever decoded; another encoding is refused;
* an over-limit answer is a malformed answer (``InvalidMessage``): the device's round fails
  before training (its state unchanged, nothing uploaded), ``secemb client`` gives up after
  ``--wait`` with exit 1, ``secemb admin`` prints one line and exits 1 -- no traceback.

Server 1 reads no answers: it calls no peer (server 0 drives every exchange; ``make_node``
refuses a peer for it), so C2's fix of server 0's link covers the servers.

The servers here are stubs on 127.0.0.1 (a thread each); the bytes a reader took in are counted
where it decodes them, not by RSS.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.device import Device, DeviceClient, RoundInfo, RoundSession
from secemb.errors import InvalidMessage
from secemb.protocols import get_protocol
from secemb.server.deploy import Deployment
from secemb.transport import network
from secemb.transport.limits import ROUND_DOCUMENT_BYTES
from secemb.transport.network import ANSWER_FLOOR_BYTES, ApiClient, answer_limit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from session21_deviating_server import POLL_S  # noqa: E402
from test_admin_server_answers import init_deployment  # type: ignore[import-not-found]  # noqa: E402

MiB = 1 << 20
#: what an endless answer would send if never refused (the stub stops there)
ENDLESS_CAP = 1 << 30
#: the decoded size of the decompression bomb (its gzip is ~260 KB)
BOMB_SIZE = 256 * MiB
#: what a reader may decode past its limit: one piece (network._PIECE)
PIECE = MiB
#: what a reader may take in past its limit, counting the socket buffers between the stub and it
SOCKET_SLACK = 32 * MiB

Answer = tuple[Any, ...]


@pytest.fixture(scope="module")
def bomb() -> bytes:
    pack = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip
    zeros = bytes(MiB)
    out = b"".join(pack.compress(zeros) for _ in range(BOMB_SIZE // MiB)) + pack.flush()
    assert len(out) < 512 * 1024
    return out


class Stub:
    """A deviating server on 127.0.0.1: ``answers(method, path)`` says what it answers --
    ``("endless",)`` (a chunked body of zeros until the reader hangs up, at most
    :data:`ENDLESS_CAP`), ``("body", bytes, headers)``, ``("json", doc)``.  ``seen``: per request
    ``(method, path, Accept-Encoding)``; ``sent``: body bytes written, all requests."""

    def __init__(self, answers: Callable[[str, str], Answer]) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        self.sent = 0
        self.finished = threading.Semaphore(0)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10  # a reader that stops reading without hanging up

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                path = self.path.split("?")[0]
                stub.seen.append((self.command, path, self.headers.get("accept-encoding")))
                try:
                    self._send(answers(self.command, path))
                except OSError:  # the reader hung up
                    pass
                finally:
                    self.close_connection = True
                    stub.finished.release()

            def _send(self, answer: Answer) -> None:
                if answer[0] == "endless":
                    self.send_response(200)
                    self.send_header("content-type", "application/octet-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.send_header("connection", "close")
                    self.end_headers()
                    frame = b"%x\r\n" % MiB + bytes(MiB) + b"\r\n"
                    for _ in range(ENDLESS_CAP // MiB):
                        self.wfile.write(frame)
                        stub.sent += MiB
                    self.wfile.write(b"0\r\n\r\n")
                    return
                body, headers = (json.dumps(answer[1]).encode(), {"content-type": "application/json"}) \
                    if answer[0] == "json" else (answer[1], answer[2])
                self.send_response(200)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(body)
                stub.sent += len(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(POLL_S,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def settled(self) -> None:
        """Wait (bounded) until every request seen has been answered or given up."""
        for _ in self.seen:
            assert self.finished.acquire(timeout=15), "the stub is still writing"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stubs() -> Iterator[list[Stub]]:
    made: list[Stub] = []
    yield made
    for s in made:
        s.close()


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Per capped answer read, the decoded bytes the reader took in."""
    reads: list[int] = []
    real = network._decoded

    def counting(*args: Any) -> Iterator[bytes]:
        reads.append(0)
        for piece in real(*args):
            reads[-1] += len(piece)
            yield piece

    monkeypatch.setattr(network, "_decoded", counting)
    return reads


def _stub(stubs: list[Stub], answers: Callable[[str, str], Answer]) -> Stub:
    stubs.append(Stub(answers))
    return stubs[-1]


#: the headers of a gzip-encoded answer
GZIP = {"content-encoding": "gzip", "content-type": "application/octet-stream"}


# -- the reader itself, over a socket ------------------------------------------------------------
LIMIT = 4 * MiB


def test_an_endless_answer_is_read_up_to_the_limit(stubs, decoded) -> None:
    stub = _stub(stubs, lambda m, p: ("endless",))
    api = ApiClient(stub.url, max_answer_bytes=LIMIT)
    with api, pytest.raises(InvalidMessage, match=f"longer than {LIMIT} bytes"):
        api.get_bytes("/v1/x")
    stub.settled()
    assert decoded == [pytest.approx(LIMIT, abs=PIECE)]
    assert stub.sent <= LIMIT + SOCKET_SLACK, f"the stub wrote {stub.sent} bytes before the reader hung up"
    assert stub.seen == [("GET", "/v1/x", "identity")]


def test_a_decompression_bomb_is_decoded_in_pieces_up_to_the_limit(stubs, decoded, bomb) -> None:
    stub = _stub(stubs, lambda m, p: ("body", bomb, GZIP))
    api = ApiClient(stub.url, max_answer_bytes=LIMIT)
    with api, pytest.raises(InvalidMessage, match=f"longer than {LIMIT} bytes"):
        api.post_bytes("/v1/x", b"request")
    assert LIMIT < decoded[0] <= LIMIT + PIECE  # httpx's decoder took ~64 MiB of it in one 64 KiB read


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@pytest.mark.parametrize("size", [0, 1, LIMIT])
def test_honest_answers_up_to_the_limit_arrive_intact(stubs, coding, size) -> None:
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    packed = gzip.compress(body) if coding == "gzip" else zlib.compress(body)
    answers = {"/plain": ("body", body, {}), "/packed": ("body", packed, {"content-encoding": coding})}
    stub = _stub(stubs, lambda m, p: answers[p])
    with ApiClient(stub.url, max_answer_bytes=LIMIT) as api:
        assert api.get_bytes("/plain") == body
        assert api.get_bytes("/packed") == body
        assert api.received_bytes == 2 * size


@pytest.mark.parametrize("coding, body", [("br", b"\x0b\x00\x80x\x03"), ("gzip", b"not gzip"), ("x-bomb", b"")])
def test_an_encoding_not_asked_for_or_broken_is_malformed(stubs, coding, body) -> None:
    stub = _stub(stubs, lambda m, p: ("body", body, {"content-encoding": coding}))
    with ApiClient(stub.url, max_answer_bytes=LIMIT) as api, pytest.raises(InvalidMessage, match="encoding|decode"):
        api.get_bytes("/v1/x")


def test_the_limits() -> None:
    assert ANSWER_FLOOR_BYTES == 64 * MiB
    # 64 MiB + 4 (1000 rows * (8 * 9 + 32) + 8 * 20)
    assert answer_limit(1000, 9, 20) == 64 * MiB + 4 * (1000 * 104 + 160)


# -- a device ------------------------------------------------------------------------------------
def _info(num_items: int = 40) -> RoundInfo:
    proto = get_protocol("secemb", layout="cuckoo")
    rc = proto.round_config(3, num_items, 5, 1, 6)
    doc = {"round_id": 3, "state": "open", "model_version": 1, "n_p": 4, "min_users": 2, "deadline_unix": 0.0,
           "config": rc.__dict__, "protocol": {"name": "secemb", "layout": "cuckoo", "relay": False,
                                                "expansion": 1.25, "layout_seed": 0},
           "model": {"name": "mf", "hparams": {"dim": 4, "reg": 0.01, "init_std": 0.1}},
           "training": {"lr": 0.025, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "ring_bits": 32, "frac_bits": 16},
           "fingerprint": "f", "participant": True}
    return RoundInfo.from_doc(doc)


def _device(stub0: Stub, stub1: Stub) -> DeviceClient:
    return DeviceClient(1, stub0.url, stub1.url, b"0" * 32, b"1" * 32, min_users=2)


@pytest.mark.parametrize("kind", ["endless", "bomb"])
def test_a_device_reads_a_round_document_up_to_the_floor(stubs, decoded, bomb, kind) -> None:
    answer = ("endless",) if kind == "endless" else ("body", bomb, GZIP)
    stub = _stub(stubs, lambda m, p: answer)
    client = _device(stub, stub)
    try:
        assert [api.max_answer_bytes for api in client.servers] == [ANSWER_FLOOR_BYTES] * 2
        # the round document's own limit, below the floor since session 41 (S41-R2)
        with pytest.raises(InvalidMessage, match=f"longer than {ROUND_DOCUMENT_BYTES} bytes"):
            client.round_info()
    finally:
        client.close()
    stub.settled()
    assert len(decoded) == 1 and decoded[0] <= ROUND_DOCUMENT_BYTES + PIECE
    assert stub.seen == [("GET", "/v1/round", "identity")]


def test_a_round_raises_the_limit_to_its_sizes_never_lowers_it() -> None:
    client = DeviceClient(1, "http://127.0.0.1:9", "http://127.0.0.1:9", b"0" * 32, b"1" * 32)
    big = _info(num_items=200_000)
    RoundSession(client, big)
    # rows: max(200000 items, 8 cuckoo slots); width 5; dense 1
    expected = 64 * MiB + 4 * (200_000 * (8 * 5 + 32) + 8 * 1)
    assert [api.max_answer_bytes for api in client.servers] == [expected] * 2
    RoundSession(client, _info(num_items=40))
    assert [api.max_answer_bytes for api in client.servers] == [expected] * 2
    client.close()


def test_a_device_refuses_an_endless_retrieval_answer_and_keeps_its_state(stubs, decoded) -> None:
    info = _info()
    limit = answer_limit(40, 5, 1)
    stub0 = _stub(stubs, lambda m, p: ("json", {}))
    stub1 = _stub(stubs, lambda m, p: ("endless",))  # server 1 answers the retrieval (asked first)
    client = _device(stub0, stub1)
    device = Device(client, np.array([1, 5, 9]), np.array([4.0, 3.0, 5.0], dtype=np.float32),
                    rng=np.random.default_rng(0))
    try:
        device._state(info, info.make_model())
        assert device.store is not None
        before = device.store.snapshot(0)
        with pytest.raises(InvalidMessage, match=f"longer than {limit} bytes"):
            device.participate(info)
        after = device.store.snapshot(0)
        assert np.array_equal(before.params, after.params) and after.t == before.t
    finally:
        client.close()
    stub1.settled()
    assert decoded == [pytest.approx(limit, abs=PIECE)]
    assert stub1.sent <= limit + SOCKET_SLACK
    assert stub1.seen == [("POST", "/v1/rounds/3/retrieval", "identity")]
    assert stub0.seen == []  # nothing sent to server 0: no upload


def test_secemb_client_gives_up_on_an_endless_server_with_exit_1(stubs, decoded, monkeypatch) -> None:
    stub = _stub(stubs, lambda m, p: ("endless",))
    monkeypatch.setenv("SECEMB_DEVICE_KEY0", "00" * 32)
    monkeypatch.setenv("SECEMB_DEVICE_KEY1", "11" * 32)
    res = CliRunner().invoke(app, ["client", "--user", "1", "--server0", stub.url, "--server1", stub.url,
                                   "--min-users", "2", "--wait", "1", "--dataset", "synthetic-mini"])
    assert res.exit_code == 1, (res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output
    doc = json.loads(lines[0])
    assert "no open round" in doc["error"] and f"longer than {ROUND_DOCUMENT_BYTES} bytes" in doc["error"], doc
    stub.settled()
    assert decoded and max(decoded) <= ROUND_DOCUMENT_BYTES + PIECE
    assert {s[1] for s in stub.seen} == {"/v1/round"}


# -- the operator --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> str:
    return init_deployment(tmp_path_factory)


def _admin_at(monkeypatch: pytest.MonkeyPatch, stub: Stub) -> None:
    """``Deployment.admin`` as it is (its limit), over plain HTTP to ``stub``."""
    real = Deployment.admin

    def admin(self: Deployment, party: int, **kw: Any) -> ApiClient:
        api = real(self, party, **kw)
        api.close()
        api.base_url, api._http = stub.url, httpx.Client(trust_env=False)
        return api

    monkeypatch.setattr(Deployment, "admin", admin)


@pytest.mark.parametrize("kind", ["endless", "bomb"])
def test_secemb_admin_status_refuses_an_endless_answer_in_one_line(stubs, decoded, deployment, monkeypatch, bomb,
                                                                   kind) -> None:
    answer = ("endless",) if kind == "endless" else ("body", bomb, GZIP)
    stub = _stub(stubs, lambda m, p: answer)
    _admin_at(monkeypatch, stub)
    res = CliRunner().invoke(app, ["admin", "status", "--deployment", deployment])
    assert res.exit_code == 1, (res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert len(res.output.strip().splitlines()) == 1 and f"longer than {ANSWER_FLOOR_BYTES}" in res.output
    stub.settled()
    assert decoded and max(decoded) <= ANSWER_FLOOR_BYTES + PIECE


def test_secemb_admin_export_model_reads_the_model_up_to_its_size(stubs, decoded, deployment, monkeypatch,
                                                                  tmp_path) -> None:
    status = {"party": 0, "model_version": 3, "model_sha256": "0" * 64, "round": None}
    stub = _stub(stubs, lambda m, p: ("json", status) if p == "/v1/admin/status" else ("endless",))
    _admin_at(monkeypatch, stub)
    model = Deployment(Path(deployment)).config(0).make_model()
    limit = 64 * MiB + 4 * (40 * (8 * model.sparse_width + 32) + 8 * model.dense_size)
    res = CliRunner().invoke(app, ["admin", "export-model", str(tmp_path / "out"), "--deployment", deployment])
    assert res.exit_code == 1, (res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert len(res.output.strip().splitlines()) == 1 and f"longer than {limit} bytes" in res.output, res.output
    assert not (tmp_path / "out").exists()
    stub.settled()
    models = [n for (_, p, _), n in zip(stub.seen, decoded, strict=True) if p == "/v1/admin/model"]
    assert models and max(models) <= limit + PIECE
