"""Session 20 review (helper C) of bounded payloads (issue 34 (b)): how much of server 1's answer
server 0 reads.

Finding C2 (fixed): server 0 bounded server 1's check answer only by its exact length in the
role, after reading it whole, and so every answer from server 1 (the share, the digests, ...):
``ApiClient`` buffered any body, and decoded a ``Content-Encoding: gzip`` one (httpx asks for it by
default), so a deviating server 1 could make server 0 hold gigabytes with an endless answer or a
kilobyte-sized decompression bomb (8 KB of gzip decode to 8 MiB here; ~1000x).  The fix: server 0's
peer link reads at most its own body limit (``max_body_bytes``) of decoded answer, asks for no
encoding, and stops reading at the first chunk over it; the answer is then server 1 failing
(``PeerUnreachable``: the close aborts, as for any malformed answer).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import httpx
import pytest

from secemb.data import synthetic_like
from secemb.models import MatrixFactorization
from secemb.protocols.secemb import SecEmbProtocol
from secemb.server.node import LeaderNode, make_node
from secemb.server.peer import HttpPeer, PeerUnreachable
from secemb.server.store import MemoryStore
from secemb.sim.local import server_configs
from secemb.sim.settings import cluster_settings
from secemb.training import TrainConfig
from secemb.transport.network import ApiClient

LIMIT = 1 << 20
CHUNK = 1 << 16


def _peer(answer: httpx.Response, seen: list[httpx.Request]) -> HttpPeer:
    """Server 0's link to a fake server 1 that gives ``answer`` to every request (recorded in ``seen``)."""
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer

    peer = HttpPeer("http://server1.test", b"p" * 32, max_answer_bytes=LIMIT)
    peer.api.close()
    peer.api = ApiClient("http://server1.test", "server0", b"p" * 32, max_answer_bytes=LIMIT,
                         http=httpx.Client(transport=httpx.MockTransport(handler)))
    return peer


def test_a_decompression_bomb_answer_is_refused() -> None:
    bomb = gzip.compress(bytes(8 * LIMIT))
    assert len(bomb) < 16 * 1024
    seen: list[httpx.Request] = []
    peer = _peer(httpx.Response(200, content=bomb, headers={"content-encoding": "gzip"}), seen)
    try:
        with pytest.raises(PeerUnreachable, match=f"longer than {LIMIT} bytes"):
            peer.bound(3, b"request")
        assert seen[0].headers["accept-encoding"] == "identity"
    finally:
        peer.shutdown()


def test_an_endless_answer_is_read_only_up_to_the_limit() -> None:
    sent = []

    def endless() -> Iterator[bytes]:
        for _ in range(1024):  # 64 MiB if read whole
            sent.append(CHUNK)
            yield bytes(CHUNK)

    peer = _peer(httpx.Response(200, content=endless()), [])
    try:
        with pytest.raises(PeerUnreachable, match="longer than"):
            peer.bound(3, b"request")
        assert len(sent) <= LIMIT // CHUNK + 2, f"read {len(sent) * CHUNK} bytes of an answer over {LIMIT}"
    finally:
        peer.shutdown()


@pytest.mark.parametrize("size", [0, 1, LIMIT])
def test_answers_up_to_the_limit_arrive_intact(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    peer = _peer(httpx.Response(200, content=body), [])
    try:
        assert peer.bound(3, b"request") == body
        plain = gzip.compress(body)
        peer.api._http = httpx.Client(transport=httpx.MockTransport(
            lambda _: httpx.Response(200, content=plain, headers={"content-encoding": "gzip"})))
        assert peer.bound(3, b"request") == body  # an encoded one too, decoded
    finally:
        peer.shutdown()


def test_server_0_reads_server_1_with_its_own_body_limit() -> None:
    model, proto = MatrixFactorization(dim=4, reg=0.01), SecEmbProtocol(layout="cuckoo")
    settings = cluster_settings(model, proto, synthetic_like(10, 20, 100, seed=1), TrainConfig(m_prime=4, seed=5))
    cfg0, _ = server_configs(settings | {"max_body_bytes": 5 * LIMIT})
    node = make_node(cfg0, store=MemoryStore(0, cfg0.fingerprint()), protocol=proto, model=model, start_threads=False)
    assert isinstance(node, LeaderNode) and isinstance(node.peer, HttpPeer)
    try:
        assert node.peer.api.max_answer_bytes == 5 * LIMIT
    finally:
        node.peer.shutdown()
