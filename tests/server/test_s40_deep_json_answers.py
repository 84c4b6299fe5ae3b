"""S40-R1 (session 40's red team, fixed by the lead): an answer nested deeper than ``json``
recurses (a deviating server 1, or anything on the way, sending ``[[[...]]]`` ~100,000 deep)
raised ``RecursionError`` out of :class:`ApiClient`, which no caller expects: server 0's
``GET /v1/admin/count`` and its count close answered 500 and ``secemb admin count`` printed a
traceback.  Now every network answer is decoded by :func:`answer_document`, which reads such
nesting as "not JSON", so each caller takes it as the malformed answer it is; a reasonably
nested answer still reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from secemb.errors import InvalidMessage
from secemb.server.peer import HttpPeer, PeerUnreachable
from secemb.transport.answers import answer_document
from secemb.transport.errors import RemoteError
from secemb.transport.network import ApiClient

DEEP = b"[" * 100_000 + b"]" * 100_000


def _client(status: int, body: bytes) -> ApiClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": "application/json"})

    return ApiClient("https://127.0.0.1:9", "server0", b"k" * 32,
                     http=httpx.Client(transport=httpx.MockTransport(answer)))


def test_answer_document_reads_deep_nesting_as_not_json() -> None:
    with pytest.raises(ValueError, match="nests deeper"):
        answer_document(DEEP)
    assert answer_document(b"[" * 50 + b"1" + b"]" * 50) is not None  # what any API answer nests: read


@pytest.mark.parametrize("call", [lambda c: c.get_json("/v1/peer/count/users"),
                                  lambda c: c.post_json("/v1/peer/count/close")], ids=["get", "post"])
def test_a_2xx_answer_nested_too_deep_is_not_json(call: Callable[[ApiClient], Any]) -> None:
    with pytest.raises(InvalidMessage, match="not JSON"):
        call(_client(200, DEEP))


def test_an_error_answer_nested_too_deep_is_a_remote_error_with_its_text() -> None:
    with pytest.raises(RemoteError) as info:
        _client(503, DEEP).get_json("/v1/peer/count/users")
    assert info.value.status == 503


@pytest.fixture
def peer() -> Iterator[HttpPeer]:
    p = HttpPeer("https://127.0.0.1:9", b"k" * 32)
    p.api = _client(200, DEEP)
    yield p
    p.shutdown()


@pytest.mark.parametrize("name", ["count_users", "count_close", "status", "agree"])
def test_server_1_answering_deep_json_is_server_1_failing(peer: HttpPeer, name: str) -> None:
    calls: dict[str, Callable[[HttpPeer], Any]] = {
        "count_users": lambda p: p.count_users(), "count_close": lambda p: p.count_close(),
        "status": lambda p: p.status(), "agree": lambda p: p.agree(3, b"share")}
    with pytest.raises(PeerUnreachable, match="not JSON"):
        calls[name](peer)
