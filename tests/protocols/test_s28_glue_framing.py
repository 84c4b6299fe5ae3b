"""Issue 37 goal 1 (session 28, helper D): the secure epoch's framing glue -- :class:`wire.Framer`
(a batch's messages of one kind with their header packed once) gives :func:`wire.frame`'s bytes and
refuses a body of another length; server 0 with relay parses nothing again when every request of
the evaluation was parsed for its forward (before, an empty batch was parsed each round)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.framing import HEADER_BYTES
from secemb.protocols.base import RoundConfig
from secemb.protocols.secemb import SecEmbProtocol
from secemb.protocols.secemb.server import SecEmbServer
from secemb.protocols.wire import Framer, frame


@pytest.mark.parametrize("protocol, kind, party, round_id", [("secemb", "retrieval_reply", 0, 0),
                                                             ("secemb", "relay_upload", 1, 2**64 - 1),
                                                             (None, "dense", 0, 7), ("plaintext", "upload", 1, 3)])
def test_framer_gives_frames_bytes(protocol: str | None, kind: str, party: int, round_id: int) -> None:
    words = np.arange(12, dtype=np.uint32)
    parts = (words.data, b"", bytes(range(5)), memoryview(b"tag-0123456789ab"))
    size = sum(memoryview(p).nbytes for p in parts)
    framer = Framer(protocol, kind, party, round_id, size)
    message = framer(*parts)
    assert type(message) is bytes and message == frame(protocol, kind, party, round_id, *parts)
    assert len(message) == HEADER_BYTES + size == 32 + 48 + 5 + 16
    assert framer(bytes(size)) == frame(protocol, kind, party, round_id, bytes(size))  # any split of the body


def test_framer_refuses_a_body_of_another_length_and_a_field_too_wide() -> None:
    framer = Framer("secemb", "relay_answer", 1, 4, 8)
    for parts in ((bytes(7),), (bytes(9),), (bytes(4), bytes(5)), ()):
        with pytest.raises(InvalidParameters, match="framed for a 8-byte body"):
            framer(*parts)
    assert framer(bytes(3), bytes(5))[HEADER_BYTES:] == bytes(8)
    for bad in ({"party": -1}, {"party": 2**32}, {"round_id": 2**64}, {"size": -1}):
        args = {"party": 1, "round_id": 4, "size": 8} | bad
        with pytest.raises(InvalidParameters):
            Framer("secemb", "relay_answer", args["party"], args["round_id"], args["size"])


def test_server0_parses_no_empty_batch_when_every_request_was_forwarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Server 0 (relay) evaluates the requests ``relay_forwards`` parsed without calling the
    parser again (each round before: once with no messages); a request not forwarded is parsed,
    and the replies are those of a server 0 given the requests alone."""
    proto = SecEmbProtocol(layout="cuckoo", relay=True)
    cfg: RoundConfig = proto.round_config(3, 300, 4, 5, 12, 32)
    gen = np.random.default_rng(28)
    table = gen.integers(0, 2**32, (cfg.num_items, cfg.width), dtype=np.uint32)

    def request() -> bytes:
        return proto.make_user(cfg).retrieval_request(cfg.cuckoo().assign(gen.choice(300, 12, replace=False),
                                                                          gen)[0])[0]

    requests = [(1, request()), (2, request()), (3, request())]
    s0, fresh = proto.make_server(0), proto.make_server(0)
    s0.begin_round(cfg, table)
    fresh.begin_round(cfg, table)
    parsed: list[int] = []
    original = SecEmbServer._parse_requests

    def counting(self: SecEmbServer, messages: list[bytes]) -> list:  # type: ignore[type-arg]
        if self is s0:
            parsed.append(len(messages))
        return original(self, messages)

    monkeypatch.setattr(SecEmbServer, "_parse_requests", counting)
    forwards = s0.relay_forwards(requests[:2])
    assert parsed == [2] and forwards is not None
    out = s0.handle_retrieval_many(requests[:2])
    assert parsed == [2] and out == forwards  # nothing parsed again: every request was forwarded
    assert out == [fresh.handle_retrieval(u, m) for u, m in requests[:2]]
    s1 = proto.make_server(0)
    s1.begin_round(cfg, table)
    assert s0.relay_forwards([requests[0]]) is not None and parsed == [2, 1]
    assert s0.handle_retrieval_many([requests[2]]) == [s1.handle_retrieval(3, requests[2][1])]
    assert parsed == [2, 1, 1]  # the one not forwarded: parsed
