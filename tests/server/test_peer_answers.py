"""Server 0's link to server 1 (:class:`HttpPeer`): a 2xx answer whose body is not JSON is
server 1's failure (:class:`PeerUnreachable`, which server 0 reports as its peer's fault), not
a ``JSONDecodeError`` escaping into server 0's request handler, nor a refusal of the caller's
input."""

from __future__ import annotations

import httpx
import pytest

from secemb.server.peer import HttpPeer, PeerUnreachable
from secemb.transport.network import ApiClient


def test_a_peer_answer_that_is_not_json_is_the_peer_failing() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"<html>upstream</html>", headers={"content-type": "text/html"})

    peer = HttpPeer("https://127.0.0.1:9", b"k" * 32)
    peer.api = ApiClient("https://127.0.0.1:9", "server0", b"k" * 32,
                         http=httpx.Client(transport=httpx.MockTransport(answer)))
    try:
        with pytest.raises(PeerUnreachable, match="not JSON"):
            peer.status()
        with pytest.raises(PeerUnreachable, match="not JSON"):
            peer.count_close()
    finally:
        peer.shutdown()
