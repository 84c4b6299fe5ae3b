"""Server 0's link to server 1 (:class:`HttpPeer`): a 2xx answer that is not JSON, or JSON not
of the API's shape (a field missing, of another type), is server 1 failing
(:class:`PeerUnreachable`, which server 0 reports as its peer's fault) -- not a
``JSONDecodeError`` or ``KeyError`` escaping into server 0's request handler (a 500), nor a
refusal of the caller's input; well-formed answers still read."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from test_security_findings import _count_phase

from secemb.server.errors import PeerUnavailable
from secemb.server.peer import HttpPeer, PeerUnreachable
from secemb.transport.network import ApiClient


def _peer(body: Callable[[str], bytes]) -> HttpPeer:
    """An HttpPeer whose server 1 answers 200 with ``body(path)``."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body(request.url.path), headers={"content-type": "application/json"})

    peer = HttpPeer("https://127.0.0.1:9", b"k" * 32)
    peer.api = ApiClient("https://127.0.0.1:9", "server0", b"k" * 32,
                         http=httpx.Client(transport=httpx.MockTransport(answer)))
    return peer


@pytest.fixture
def peers() -> Iterator[list[HttpPeer]]:
    made: list[HttpPeer] = []
    yield made
    for p in made:
        p.shutdown()


#: the calls of server 0 that read a JSON answer (count_close: its "users", close: "uploaded",
#: ready_many: "ready", status: "model_version" and "max_round", which server 0 reads to reconcile)
CALLS: dict[str, Callable[[HttpPeer], Any]] = {
    "count_close": lambda p: p.count_close(),
    "close": lambda p: p.close(3),
    "ready_many": lambda p: p.ready_many(3, [1, 2]),
    "status": lambda p: p.status(),
}
#: answers no call accepts, and per call the ones its field makes malformed
ANY_BAD = [b"<html>upstream</html>", b"[1, 2]", b'"ok"']
CASES = [(name, bad) for name in CALLS for bad in ANY_BAD] + [
    (name, json.dumps(doc).encode()) for name, doc in [
        ("count_close", {}), ("count_close", {"users": ["7"]}), ("count_close", {"users": [True]}),
        ("count_close", {"users": 7}), ("close", {}), ("close", {"uploaded": [1.5]}), ("ready_many", {}),
        ("ready_many", {"ready": "yes"}), ("status", {"party": 1}), ("status", {"model_version": 0}),
        ("status", {"model_version": "0", "max_round": 2}), ("status", {"model_version": 0, "max_round": None}),
    ]]


@pytest.mark.parametrize("name, answer", CASES)
def test_a_malformed_peer_answer_is_the_peer_failing(peers, name, answer) -> None:
    peers.append(peer := _peer(lambda path: answer))
    with pytest.raises(PeerUnreachable, match="not JSON|malformed"):
        CALLS[name](peer)


#: a status of server 1 as server 0 reads it
STATUS = {"party": 1, "model_version": 2, "max_round": 3, "fingerprint": "f" * 64}


def test_well_formed_peer_answers_read(peers) -> None:
    docs = {"/v1/peer/count/close": {"users": [4, 9]}, "/v1/peer/rounds/3/close": {"uploaded": [1]},
            "/v1/peer/rounds/3/ready": {"ready": True}, "/v1/peer/status": STATUS}
    peers.append(peer := _peer(lambda path: json.dumps(docs[path]).encode()))
    assert peer.count_close() == [4, 9] and peer.close(3) == [1]
    assert peer.ready_many(3, [1, 2]) == [True, True] and peer.status() == STATUS


def test_a_peer_answer_that_does_not_decode_is_the_peer_failing() -> None:
    """A body that does not decode by its ``Content-Encoding`` (``httpx.DecodingError``, which
    escaped into server 0's handler): server 1 failing."""
    peer = HttpPeer("https://127.0.0.1:9", b"k" * 32)
    peer.api = ApiClient("https://127.0.0.1:9", "server0", b"k" * 32, http=httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=b"{}", headers={"content-encoding": "gzip"}))))
    try:
        with pytest.raises(PeerUnreachable):
            peer.status()
        with pytest.raises(PeerUnreachable):
            peer.count_share([1, 2])
    finally:
        peer.shutdown()


@pytest.mark.parametrize("answer", [b"", b"\x00" * 7, b"not a count share at all"])
def test_a_malformed_count_share_of_server_1_fails_the_phase_and_sets_nothing(monkeypatch, answer) -> None:
    """Server 0 closing the count phase with server 1's count share malformed: server 1 failing
    (PeerUnavailable, a 503), the phase reopened and m' unset -- it was an InvalidMessage (a 400,
    the operator's fault) that left the phase closed."""
    servers, leader = _count_phase({u: 3 for u in range(5)})
    monkeypatch.setattr(leader.peer, "count_share", lambda include: answer)
    with pytest.raises(PeerUnavailable, match="server 1 did not close the count phase"):
        leader.count_close()
    assert leader.m_prime is None and leader.count.status()["state"] == "open"
