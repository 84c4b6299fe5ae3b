"""The one message framing (docs/wire-format.md, "Message framing"): the 32-byte header's byte
layout, and every malformed header refused with InvalidMessage by the framing and by each of
its users (SecEmb's messages, the round's own, secure aggregation, SFSL, SecEA, key batches).

Expected bytes are written from the documented layout, not from the code under test."""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidKey, InvalidMessage, InvalidParameters
from secemb.framing import HEADER_BYTES, KEYS_WIRE_ID, RESERVED_WIRE_IDS, SECAGG_WIRE_ID, frame, open_frame
from secemb.protocols.plaintext import PlaintextProtocol
from secemb.protocols.registry import register_protocol, wire_id
from secemb.protocols import wire as semb
from secemb.protocols.secea import wire as secea
from secemb.protocols.sfsl import wire as sfsl
from secemb.secagg import messages as sagg

# docs/wire-format.md: offset, struct format of each header field
MAGIC, VERSION, PROTOCOL, KIND, FLAGS, PARTY, PEER, ROUND, BODY_LEN = (
    (0, "4s"), (4, "B"), (5, "B"), (6, "B"), (7, "B"), (8, "I"), (12, "I"), (16, "Q"), (24, "Q"))


def _set(field: tuple[int, str], value: object) -> Callable[[bytes], bytes]:
    def mutate(msg: bytes) -> bytes:
        buf = bytearray(msg)
        struct.pack_into("<" + field[1], buf, field[0], value)
        return bytes(buf)

    return mutate


def test_header_bytes_follow_the_documented_layout() -> None:
    msg = frame(200, 7, 0x01020304, 0x0A0B0C0D, 0x1122334455667788, b"ab", memoryview(b"cde"))
    want = (b"SEMB" + bytes([2, 200, 7, 0]) + bytes([4, 3, 2, 1]) + bytes([0x0D, 0x0C, 0x0B, 0x0A])
            + bytes([0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]) + bytes([5, 0, 0, 0, 0, 0, 0, 0]) + b"abcde")
    assert HEADER_BYTES == 32 and msg == want
    party, peer, rnd, body = open_frame(msg, 200, 7, "test")
    assert (party, peer, rnd, bytes(body)) == (0x01020304, 0x0A0B0C0D, 0x1122334455667788, b"abcde")


def test_reserved_ids_are_the_documented_ones_and_no_protocol_takes_them() -> None:
    assert RESERVED_WIRE_IDS == {0, 254, 255} and (SECAGG_WIRE_ID, KEYS_WIRE_ID) == (254, 255)
    for reserved in (254, 255):
        with pytest.raises(InvalidParameters, match="reserved"):
            register_protocol("takes-reserved", PlaintextProtocol, wire_id=reserved)


def test_a_field_out_of_range_is_a_caller_error() -> None:
    for party, rnd in ((-1, 0), (2**32, 0), (0, -1), (0, 2**64)):
        with pytest.raises(InvalidParameters):
            frame(1, 1, party, 0, rnd, b"")


GOOD = frame(9, 3, 1, 0, 5, b"body")
MALFORMED = {
    "not-bytes": lambda m: m.decode("latin-1"),
    "empty": lambda m: b"",
    "short-header": lambda m: m[: HEADER_BYTES - 1],
    "magic-v1-semb": lambda m: m,  # replaced below: a version-1 SEMB header
    "magic": _set(MAGIC, b"SEDK"),
    "version-1": _set(VERSION, 1),
    "version-3": _set(VERSION, 3),
    "protocol": _set(PROTOCOL, 10),
    "kind": _set(KIND, 4),
    "flags": _set(FLAGS, 0x80),
    "party": _set(PARTY, 0),
    "peer": _set(PEER, 1),
    "round": _set(ROUND, 6),
    "body-len-short": _set(BODY_LEN, 3),
    "body-len-long": _set(BODY_LEN, 5),
    "truncated": lambda m: m[:-1],
    "trailing": lambda m: m + b"\0",
}
MALFORMED["magic-v1-semb"] = lambda m: struct.pack("<4sBBBBQQ", b"SEMB", 1, 9, 3, 1, 5, 4) + b"body"


@pytest.mark.parametrize("name", list(MALFORMED))
def test_every_malformed_header_is_an_invalid_message(name: str) -> None:
    bad = MALFORMED[name](GOOD)
    with pytest.raises(InvalidMessage):
        open_frame(bad, 9, 3, "test", round_id=5, party=1, peer=0, body_len=4)
    if name not in ("party", "peer", "round"):  # the rest fail whatever the caller leaves unchecked
        with pytest.raises(InvalidMessage):
            open_frame(bad, 9, 3, "test")


def test_the_caller_names_the_error_class() -> None:
    with pytest.raises(InvalidKey, match="not a secemb key batch"):
        open_frame(b"SEDK" + GOOD[4:], 9, 3, "key batch", error=InvalidKey)


# --------------------------------------------------------------- each user of the framing


def _users() -> dict[str, tuple[bytes, Callable[[bytes], object], int, int]]:
    """name -> (a good message, its parser, protocol id, kind), per the documented table."""
    keys, _ = fss.gen(np.array([3]), np.ones((1, 1), np.uint32), 10)
    return {
        "semb": (semb.frame("secemb", "upload", 1, 7, b"\1" * 8),
                 lambda m: semb.open_message(m, "secemb", "upload", 1, 7, 8), wire_id("secemb"), 3),
        "engine": (semb.frame(None, "dense", 0, 7, b"\1" * 4),
                   lambda m: semb.open_message(m, None, "dense", 0, 7, 4), 0, 10),
        "secagg": (sagg.frame("masked", 7, 12, b"\1" * 8), lambda m: sagg.open_frame(m, "masked", 7, 12), 254, 5),
        "sfsl": (sfsl.request(7, np.array([1, 4])), lambda m: sfsl.open_request(m, 7, 10), 26, 1),
        "secea": (secea.pack(secea.Header(secea.UPLOAD, 7, 2, secea.SERVER), b"\1" * 8),
                  lambda m: secea.unpack(m, secea.UPLOAD, 7, secea.SERVER), 27, 3),
        "keys": (keys.to_bytes(), lambda m: fss.DPFKeys.from_bytes(m, party=0), 255, 1),
    }


USERS = ["semb", "engine", "secagg", "sfsl", "secea", "keys"]
HEADER_FAULTS = {
    "magic": _set(MAGIC, b"SEMC"),
    "version": _set(VERSION, 1),
    "protocol": lambda m: _set(PROTOCOL, (m[5] + 1) % 256)(m),
    "kind": lambda m: _set(KIND, m[6] + 1)(m),
    "flags": _set(FLAGS, 1),
    "round": lambda m: _set(ROUND, 8 if m[16] != 8 else 9)(m),
    "body-len": lambda m: _set(BODY_LEN, len(m) - HEADER_BYTES + 1)(m),
    "truncated": lambda m: m[:-1],
    "short": lambda m: m[:HEADER_BYTES - 1],
}


@pytest.mark.parametrize("fault", list(HEADER_FAULTS))
@pytest.mark.parametrize("user", USERS)
def test_each_user_frames_with_the_one_header_and_refuses_a_malformed_one(user: str, fault: str) -> None:
    msg, parse, protocol, kind = _users()[user]
    assert msg[:4] == b"SEMB" and msg[4] == 2 and msg[5] == protocol and msg[6] == kind
    assert struct.unpack_from("<Q", msg, 24)[0] == len(msg) - HEADER_BYTES
    parse(msg)
    if user == "keys" and fault == "round":
        bad = _set(ROUND, 1)(msg)  # a key batch belongs to no round: round 0
    else:
        bad = HEADER_FAULTS[fault](msg)
    with pytest.raises(InvalidMessage):
        parse(bad)


def test_secea_carries_sender_and_receiver_in_party_and_peer() -> None:
    msg = secea.pack(secea.Header(secea.RELAY, 3, secea.SERVER, 4), b"x")
    assert struct.unpack_from("<IIQ", msg, 8) == (0xFFFF, 4, 3)
    header, body = secea.unpack(msg, secea.RELAY, 3, 4)
    assert (header.sender, header.receiver, body) == (secea.SERVER, 4, b"x")
    with pytest.raises(InvalidMessage):
        secea.unpack(msg, secea.RELAY, 3, 5)  # addressed to another silo


def test_secagg_sender_is_the_party_field() -> None:
    msg = sagg.frame("survivors", 2, sagg.SERVER, b"")
    assert struct.unpack_from("<II", msg, 8) == (0xFFFFFFFF, 0)
    with pytest.raises(InvalidMessage, match="claims sender"):
        sagg.open_frame(msg, "survivors", 2, sender=3)
