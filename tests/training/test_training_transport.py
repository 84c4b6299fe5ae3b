"""The in-process transport: bytes only, FIFO mailboxes, counters by round/stage/direction/user."""

from __future__ import annotations

import pytest

from secemb.errors import InvalidParameters, ProtocolError
from secemb.transport import InProcessTransport, parse_endpoint, user_endpoint


def test_counts_bytes_by_direction_stage_round_and_user():
    t = InProcessTransport()
    t.set_round(0)
    t.send("user:1", "server0", b"a" * 10, stage="retrieval")
    t.send("user:1", "server1", b"b" * 7, stage="retrieval")
    t.send("server0", "user:1", b"c" * 100, stage="retrieval")
    t.send("user:2", "server0", b"d" * 5, stage="upload")
    t.set_round(1)
    t.send("server1", "server0", b"e" * 1000, stage="aggregate")
    t.send("user:1", "server0", bytearray(b"f" * 3), stage="upload")
    assert t.total_bytes(direction="upload") == 25
    assert t.total_bytes(direction="download") == 100
    assert t.total_bytes(direction="server") == 1000
    assert t.total_bytes(round_id=0) == 122
    assert t.total_bytes(round_id=1, direction="upload") == 3
    assert t.total_bytes(user=1) == 120
    assert t.total_bytes(user=1, direction="upload", round_id=0) == 17
    assert t.total_bytes(stage="retrieval") == 117
    assert t.total_messages(user=1) == 4
    assert t.total_bytes(round_id=None) == 0
    assert sum(r.nbytes for r in t.records()) == 1125
    t.drop_round(0)
    assert t.total_bytes() == 1003


def test_fifo_and_copies():
    t = InProcessTransport()
    buf = bytearray(b"xyz")
    t.send("server0", "server1", buf, stage="sync")
    t.send("server0", "server1", b"second", stage="sync")
    buf[0] = ord("Q")  # the sender reuses its buffer: the message must not change
    first = t.recv("server1", "server0")
    assert first == b"xyz" and type(first) is bytes
    assert t.recv("server1", "server0") == b"second"
    assert t.pending() == 0
    with pytest.raises(ProtocolError):
        t.recv("server1", "server0")


def test_rejects_non_bytes_and_bad_endpoints():
    t = InProcessTransport()
    with pytest.raises(TypeError):
        t.send("user:1", "server0", "text", stage="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        t.send("user:1", "server0", [1, 2], stage="x")  # type: ignore[arg-type]
    for src, dst in [
        ("user:1", "user:2"),
        ("server2", "server0"),
        ("user:-1", "server0"),
        ("user:01", "server0"),
        ("server0", "server0"),
    ]:
        with pytest.raises(InvalidParameters):
            t.send(src, dst, b"", stage="x")
    with pytest.raises(InvalidParameters):
        t.send("user:1", "server0", b"", stage="")
    assert t.total_messages() == 0


def test_endpoint_names():
    assert user_endpoint(7) == "user:7"
    assert parse_endpoint("user:7") == ("user", 7)
    assert parse_endpoint("server1") == ("server", 1)
    with pytest.raises(InvalidParameters):
        user_endpoint(-1)
    with pytest.raises(InvalidParameters):
        user_endpoint(True)


def test_carry_from_many_threads_delivers_each_its_own_message_and_counts_every_byte():
    # the in-process engine carries messages from several threads (server 0's relay thread,
    # server 1's share thread): with a send and a receive as separate steps, two threads on one
    # mailbox could take each other's message
    import sys
    import threading
    from concurrent.futures import ThreadPoolExecutor

    t = InProcessTransport()
    t.set_round(0)
    threads, per_thread = 8, 1000  # the unlocked send-then-receive failed this in 6 runs of 6
    start = threading.Barrier(threads)

    def worker(k: int) -> int:
        start.wait()
        bad = 0
        for i in range(per_thread):
            body = f"{k}:{i}".encode() * (1 + i % 3)
            bad += t.carry("server0", "server1", body, stage="upload") != body
        return bad

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        with ThreadPoolExecutor(threads) as pool:
            assert sum(pool.map(worker, range(threads))) == 0
    finally:
        sys.setswitchinterval(old)
    want = sum(len(f"{k}:{i}".encode()) * (1 + i % 3) for k in range(threads) for i in range(per_thread))
    assert t.total_bytes(round_id=0) == want
    assert t.total_messages(round_id=0) == threads * per_thread
    assert t.pending() == 0
