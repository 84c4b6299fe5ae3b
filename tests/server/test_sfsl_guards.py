"""Issue 33, "SFSL's one-server app has none of the guards" (100/100 slow-header connections
held, a stalled body held > 40 s, ``[`` x 5000 answered 500): SFSL's server
(:class:`secemb.sim.exchange.NodeServer`, TLS on 127.0.0.1) now has the SecEmb server's guards.
Every test is bounded in count and time."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from test_net_flood import _closed_by_server, _connect, _silent_closed_within

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.models.din import DIN
from secemb.protocols.sfsl import SFSLServer, TrainingSettings
from secemb.protocols.sfsl.staged import SFSLNode
from secemb.protocols.exchange import ExchangeServer
from secemb.protocols.sfsl.protocol import model_bytes
from secemb.sim.exchange import NodeServer
from secemb.transport.errors import RemoteError
from secemb.transport.network import ApiClient
from secemb.transport.signing import sign_headers

torch.set_num_threads(1)

READ_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 16


@pytest.fixture(scope="module")
def host():
    train, _ = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    model = DIN(num_categories=train.num_categories, dim=4)
    table, dense = model.init_public(train.num_goods, np.random.default_rng(0))
    node = SFSLNode(SFSLServer(model, table, dense, train.goods_category), TrainingSettings())
    with NodeServer(ExchangeServer(node, 1 << 16, lambda: model_bytes(node.server), train.num_users),
                    read_timeout_s=READ_TIMEOUT_S,
                    max_connections=MAX_CONNECTIONS, max_body_reads=4) as served:
        yield served


def _outcome_ok(host: NodeServer) -> None:
    """The operator is answered (no round 1 yet: 409 or a document, never a timeout)."""
    with ApiClient(host.url, "admin", host.admin_secret, tls=host.tls, timeout=30) as admin:
        try:
            admin.get_json("/v1/admin/exchange/rounds/1")
        except RemoteError as exc:
            assert 400 <= exc.status < 500, exc


def test_finding_sfsl_slow_header_connections_closed_after_read_timeout(host):
    """Connections stalled mid-header (more than the connection limit) and connections that never
    start TLS are all closed within a few read timeouts; the operator is answered afterwards."""
    t0 = time.monotonic()
    stalled = [_connect(host.port, host.tls) for _ in range(2 * MAX_CONNECTIONS)]
    silent = [socket.create_connection(("127.0.0.1", host.port), timeout=10) for _ in range(2 * MAX_CONNECTIONS)]
    for s in stalled:
        s.sendall(b"POST /v1/admin/exchange/rounds HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Secemb-Key-Id: ad")
    bound = 4 * READ_TIMEOUT_S + 5
    with ThreadPoolExecutor(16) as pool:
        closed = list(pool.map(lambda s: _closed_by_server(s, bound), stalled))
        quiet = list(pool.map(lambda s: _silent_closed_within(s, bound), silent))
    for s in stalled + silent:
        s.close()
    assert all(c is not None for c in closed), f"{sum(c is None for c in closed)} slow-header connections held"
    assert all(quiet), f"{quiet.count(False)} connections without a TLS handshake held"
    assert time.monotonic() - t0 < 2 * bound
    time.sleep(0.5)
    _outcome_ok(host)


def test_finding_sfsl_stalled_body_answered_408(host):
    """A device's body that stops half-way is answered 408 after the read timeout (was held > 40 s)."""
    path = "/v1/exchange/rounds/1/psu-advertise"
    headers = sign_headers("user:0", b"not this device's key, 32 bytes!", "POST", path, "", b"x" * 1000)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock = _connect(host.port, host.tls)
    t0 = time.monotonic()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Content-Length: 1000\r\n\r\n".encode() + b"x" * 10)
    answer = _closed_by_server(sock, 3 * READ_TIMEOUT_S + 5)
    took = time.monotonic() - t0
    sock.close()
    assert answer is not None and answer.startswith(b"HTTP/1.1 408 "), answer
    assert READ_TIMEOUT_S * 0.9 <= took < 3 * READ_TIMEOUT_S + 5, took


def test_finding_sfsl_deep_json_answered_400_not_500(host):
    """The operator's JSON body ``[`` x 5000 (signed) is a 400, not a 500 (a RecursionError), and
    a well-formed JSON array or a bool round id is refused as a 4xx too; nothing is opened."""
    with ApiClient(host.url, "admin", host.admin_secret, tls=host.tls, timeout=30) as admin:
        statuses = []
        for body in (b"[" * 5000, b"[1, 2]", b'{"round_id": true, "users": [0, 1]}'):
            with pytest.raises(RemoteError) as info:
                admin.post_bytes("/v1/admin/exchange/rounds", body)
            statuses.append(info.value.status)
        assert statuses == [400, 400, 422], statuses
        with pytest.raises(RemoteError) as info:
            admin.get_json("/v1/admin/exchange/rounds/1")
        assert 400 <= info.value.status < 500  # no round was opened
