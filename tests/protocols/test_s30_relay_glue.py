"""Issue 37 (session 30, helper H): the relay's per-device glue cut without changing a verdict or
a byte.  ``relay.upload_mac`` over a tuple of parts (the device's words and its ``tau``, copied
once into the associated data) is the tag of the parts joined, checked against cryptography's
AESGCM called directly on the documented associated data; ``wire.check_user``'s fast path for a
plain ``int`` gives what :func:`~secemb.errors.check_int` gives, and every other value still goes
through it (the same refusals, word for word)."""

from __future__ import annotations

import enum

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from secemb.errors import InvalidParameters, check_int
from secemb.protocols.secemb import relay
from secemb.protocols.wire import check_user

DOMAIN = b"secemb-relay-upload-gmac"  # docs/wire-format.md


def _reference(key: bytes, round_id: int, data: bytes) -> bytes:
    return AESGCM(key).encrypt(bytes(12), b"", DOMAIN + round_id.to_bytes(8, "little") + data)


@pytest.mark.parametrize("tau_len", [0, 32])
def test_upload_mac_of_parts_is_the_tag_of_them_joined(tau_len: int) -> None:
    key = bytes(range(16))
    words = bytes(range(256)) * 250 + b"\x07\x08\x09"  # 64 KB and not a whole number of blocks
    tau = bytes(range(100, 100 + tau_len))
    want = _reference(key, 11, words + tau)
    assert relay.upload_mac(key, 11, (words, tau)) == want
    assert relay.upload_mac(key, 11, (memoryview(words), tau)) == want  # the words read in place
    assert relay.upload_mac(key, 11, words + tau) == want  # the joined bytes, as server 1 holds them
    assert relay.upload_mac(key, 11, (words[:1000], words[1000:] + tau)) == want  # any split
    assert relay.upload_mac(key, 12, (words, tau)) != want


def test_upload_mac_of_parts_still_refuses_a_bad_key() -> None:
    with pytest.raises(InvalidParameters):
        relay.upload_mac(b"k" * 15, 1, (b"words", b"tau"))


class _Small(enum.IntEnum):
    SEVEN = 7


@pytest.mark.parametrize("value", [0, 1, 12345, 2**63, 2**64 - 1, np.uint64(2**64 - 1), np.int32(5), _Small.SEVEN])
def test_check_user_accepts_what_check_int_accepts(value: object) -> None:
    got = check_user(value)
    assert got == check_int("user id", value, low=0, high=2**64 - 1)
    assert type(got) is int


@pytest.mark.parametrize("value", [-1, 2**64, 2**70, True, False, 1.0, "3", None, np.int64(-2), b"\x01"])
def test_check_user_refuses_what_check_int_refuses_with_its_message(value: object) -> None:
    with pytest.raises(InvalidParameters) as want:
        check_int("user id", value, low=0, high=2**64 - 1)
    with pytest.raises(InvalidParameters) as got:
        check_user(value)
    assert str(got.value) == str(want.value)
