"""Issue 37: a SecEmb server (and device) opens a batch's messages through ``Opener``, which takes a message
whose header is byte for byte the expected one without unpacking it.  It must accept exactly
what ``open_message`` accepts, with the same body, and refuse everything else with the same
error: every header field changed, a wrong length, a buffer that is not bytes."""

from __future__ import annotations

import struct

import pytest

from secemb.errors import InvalidMessage
from secemb.protocols.wire import Opener, frame, open_message

BODY = bytes(range(40))
ARGS = ("secemb", "upload", 0, 7, len(BODY))


def _changed(offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(frame("secemb", "upload", 0, 7, BODY))
    struct.pack_into("<" + fmt, data, offset, value)
    return bytes(data)


def test_the_opener_accepts_and_refuses_what_open_message_does() -> None:
    opener = Opener(*ARGS)
    good = frame("secemb", "upload", 0, 7, BODY)
    assert bytes(opener(good)) == bytes(open_message(good, *ARGS)) == BODY
    assert opener._head == good[:32]  # the header it compares with is the real one: the fast path is taken
    assert bytes(opener(bytearray(good))) == BODY  # not bytes: checked field by field, accepted
    bad = [b"XEMB" + good[4:], _changed(4, "B", 1), _changed(5, "B", 250), _changed(6, "B", 99),
           _changed(7, "B", 1), _changed(8, "I", 1), _changed(12, "I", 1), _changed(16, "Q", 8),
           _changed(24, "Q", len(BODY) + 1), good[:-1], good + b"\0", good[:10], "text"]
    for data in bad:
        with pytest.raises(InvalidMessage) as want:
            open_message(data, *ARGS)  # type: ignore[arg-type]
        with pytest.raises(InvalidMessage) as got:
            opener(data)  # type: ignore[arg-type]
        assert str(got.value) == str(want.value)
