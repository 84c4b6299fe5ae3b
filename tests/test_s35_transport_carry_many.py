"""Issue 37 (session 35, helper G): ``InProcessTransport.carry_many`` -- a batch of one sender's
messages to one receiver (server 0's forwards of a round's requests and uploads, server 1's relay
answers) -- receives and counts exactly what that many ``carry`` calls do, in order, a message already
waiting in the mailbox included; a refused batch sends and counts nothing."""

from __future__ import annotations

import pytest

from secemb.errors import InvalidParameters
from secemb.transport.inprocess import InProcessTransport

PAYLOADS = [b"abc", bytearray(b"de"), memoryview(b"fghij"), b"", b"k" * 1000]


def _both() -> tuple[InProcessTransport, InProcessTransport]:
    one, many = InProcessTransport(), InProcessTransport()
    for tp in (one, many):
        tp.set_round(3)
    return one, many


def test_carry_many_receives_and_counts_what_carry_does() -> None:
    one, many = _both()
    got_one = [one.carry("server0", "server1", p, stage="retrieval") for p in PAYLOADS]
    got_many = many.carry_many("server0", "server1", PAYLOADS, stage="retrieval")
    assert got_many == got_one == [bytes(p) for p in PAYLOADS]
    assert all(type(g) is bytes for g in got_many)
    assert many.records() == one.records()
    assert [(r.messages, r.nbytes) for r in many.records()] == [(len(PAYLOADS), sum(len(p) for p in PAYLOADS))]
    assert many.pending() == one.pending() == 0


def test_carry_many_after_a_waiting_message_keeps_the_mailbox_order() -> None:
    one, many = _both()
    for tp in (one, many):
        tp.send("server0", "server1", b"waiting", stage="retrieval")
    got_one = [one.carry("server0", "server1", p, stage="retrieval") for p in PAYLOADS[:2]]
    got_many = many.carry_many("server0", "server1", PAYLOADS[:2], stage="retrieval")
    assert got_many == got_one == [b"waiting", b"abc"]
    assert many.recv("server1", "server0") == one.recv("server1", "server0") == b"de"
    assert many.records() == one.records()


def test_an_empty_batch_counts_nothing() -> None:
    _, many = _both()
    assert many.carry_many("server1", "server0", [], stage="retrieval") == []
    assert many.records() == []


@pytest.mark.parametrize(("payloads", "stage", "error"), [
    ([b"a", "str"], "x", TypeError),
    ([b"a", None], "x", TypeError),
    ([b"a"], "", InvalidParameters),
])
def test_a_refused_batch_sends_and_counts_nothing(payloads: list, stage: str, error: type) -> None:
    _, many = _both()
    with pytest.raises(error):
        many.carry_many("server0", "server1", payloads, stage=stage)
    assert many.records() == [] and many.pending() == 0


def test_carry_many_refuses_the_names_send_refuses() -> None:
    with pytest.raises(InvalidParameters, match="users cannot message each other"):
        InProcessTransport().carry_many("user:1", "user:2", [b"a"], stage="x")


class _Observing(InProcessTransport):
    """A transport that observes each message it sends (as the engine-plan tests' recorders do)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bytes] = []

    def send(self, src: str, dst: str, payload: bytes, *, stage: str) -> int:
        self.seen.append(bytes(payload))
        return super().send(src, dst, payload, stage=stage)


def test_a_transport_that_observes_send_sees_each_message_of_a_batch() -> None:
    tp, plain = _Observing(), InProcessTransport()
    assert tp.carry_many("server0", "server1", PAYLOADS, stage="x") == [bytes(p) for p in PAYLOADS]
    plain.carry_many("server0", "server1", PAYLOADS, stage="x")
    assert tp.seen == [bytes(p) for p in PAYLOADS] and tp.records() == plain.records()
    with pytest.raises(TypeError):
        tp.carry_many("server0", "server1", [b"a", 5], stage="x")  # type: ignore[list-item]
    assert len(tp.seen) == len(PAYLOADS)  # refused before anything was sent
