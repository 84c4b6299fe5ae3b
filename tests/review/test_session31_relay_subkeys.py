"""Session 31, helper M (issue 34): the device's one-time relay key ``k`` keys no primitive itself.
Its two uses each take their own sub-key, derived by the device and by server 1 alike
(:func:`checks.relay_subkey`; docs/security.md, "Authenticated relay" and "The other server vouches
for ``c_u``"): the upload's GMAC the AES-128 key ``HMAC-SHA256(k,
b"secemb-relay-subkey-upload-gmac")[:16]``, the sketch seed's tag the HMAC-SHA256 key
``HMAC-SHA256(k, b"secemb-relay-subkey-seed-tag")``.  And without relay the device hashes the tags
of its two halves of ``c_u`` as one batch of two (one :func:`checks.half_tags` call).

Expected values are written here from the documented formulas (``hmac``/``hashlib``/AESGCM on
bytes read off the wire), never computed by the code under test.  Mutations checked by hand (in a
scratch run, not committed): ``upload_mac`` keying AES-GCM with the raw ``k`` fails
:func:`test_a_relay_round_keys_each_use_with_its_own_subkey` (and the relay byte pins of
tests/protocols/test_secemb_device_bytes.py); ``seed_tag`` keying its HMAC with the raw ``k`` fails
it too; the device's half tags hashed as two one-row calls again fails
:func:`test_without_relay_the_device_hashes_both_half_tags_in_one_batch`."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from round_setup import deliver_upload

from secemb.errors import InvalidParameters
from secemb.protocols.secemb import checks as C
from secemb.protocols.secemb import user as user_module
from secemb.protocols.wire import HEADER_BYTES as FRAME_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_session30_seed_tag import DENSE, ROUND, SEED_AT, TAG_AT, WIDTH, Round, _mac_key  # noqa: E402

GMAC_LABEL = b"secemb-relay-subkey-upload-gmac"
SEED_TAG_LABEL = b"secemb-relay-subkey-seed-tag"


def _u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def _gmac(key: bytes, aad: bytes) -> bytes:
    """GCM's 16-byte tag under ``key``, the zero 96-bit nonce and an empty plaintext."""
    return AESGCM(key).encrypt(bytes(12), b"", aad)


def test_relay_subkeys_are_the_hmac_of_the_key_under_their_labels() -> None:
    """``relay_subkey(k, "upload-gmac")`` is the first 16 bytes of ``HMAC-SHA256(k, label)`` (an
    AES-128 key), ``relay_subkey(k, "seed-tag")`` all 32 of it under its own label: two keys
    unlike each other and unlike ``k``."""
    key = os.urandom(16)
    gmac_key, tag_key = C.relay_subkey(key, "upload-gmac"), C.relay_subkey(key, "seed-tag")
    assert gmac_key == _hmac(key, GMAC_LABEL)[:16]
    assert tag_key == _hmac(key, SEED_TAG_LABEL)
    assert len({key, gmac_key, tag_key[:16]}) == 3
    assert C.relay_subkey(os.urandom(16), "upload-gmac") != gmac_key  # another device's key, another sub-key


@pytest.mark.parametrize("size", [0, 15, 17, 32])
def test_relay_subkey_refuses_a_key_of_another_length(size: int) -> None:
    with pytest.raises(InvalidParameters, match="one-time relay key is 16 bytes"):
        C.relay_subkey(b"k" * size, "seed-tag")


def test_relay_subkey_refuses_another_use() -> None:
    with pytest.raises(InvalidParameters, match="sub-key's use"):
        C.relay_subkey(b"k" * 16, "upload")  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
@pytest.mark.parametrize("verify", [True, False])
def test_a_relay_round_keys_each_use_with_its_own_subkey(layout: str, verify: bool) -> None:
    """A relay round, read off the wire: the device's upload tag is GMAC under ``k``'s GMAC sub-key,
    not under ``k``; with verified uploads server 1's tag of ``c_u`` (in its relay answer and, passed
    on, in server 0's reply) is HMAC under ``k``'s seed-tag sub-key, not under ``k``.  Server 1,
    deriving the same sub-keys from the ``k`` it got directly, accepts the forwarded upload."""
    rnd = Round(layout, True, verify=verify)
    user, slots, r0, r1 = rnd.request()
    key = _mac_key(rnd.cfg, r1)
    reply0, _, answer = rnd.replies(3, r0, r1)
    assert answer is not None
    if verify:
        seed, tag = reply0[SEED_AT:TAG_AT], reply0[TAG_AT:]
        message = b"secemb-sketch-seed-tag" + _u64(ROUND) + seed
        assert tag == answer[TAG_AT:] == _hmac(_hmac(key, SEED_TAG_LABEL), message)[:16]
        assert tag != _hmac(key, message)[:16]  # the raw key's tag (before session 31)
    rows = user.retrieval_result(reply0, None)
    u0, u1 = user.upload(rows, np.zeros(DENSE, rnd.cfg.dtype))
    assert u1 is None
    words = rnd.cfg.slots * WIDTH * 4  # 32-bit ring
    at = FRAME_BYTES + words + DENSE * 4 + (32 if verify else 0)  # the tag, after the words, dense share and tau
    tau = u0[at - 32 : at] if verify else b""
    aad = b"secemb-relay-upload-gmac" + _u64(ROUND) + u0[FRAME_BYTES : FRAME_BYTES + words] + tau
    assert u0[at : at + 16] == _gmac(_hmac(key, GMAC_LABEL)[:16], aad)
    assert u0[at : at + 16] != _gmac(key, aad)  # the raw key's tag (before session 31)
    deliver_upload(rnd.s0, rnd.s1, True, 3, u0, None)
    assert 3 in rnd.s1.included_users()


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_without_relay_the_device_hashes_both_half_tags_in_one_batch(layout: str, monkeypatch: Any) -> None:
    """Without relay a device reading its replies computes the tags of its two halves with one
    :func:`checks.half_tags` call of two halves (server 0's, then server 1's), not one call a half;
    the tags are those the servers sent (the honest replies read)."""
    rnd = Round(layout, False)
    user, _, r0, r1 = rnd.request()
    reply0, reply1, _ = rnd.replies(3, r0, r1)
    assert reply1 is not None
    calls: list[tuple[Any, list[bytes]]] = []
    real = C.half_tags

    def counted(round_id: int, party: Any, halves: list[bytes]) -> list[bytes]:
        calls.append((party, list(halves)))
        return real(round_id, party, halves)

    monkeypatch.setattr(user_module, "half_tags", counted)
    user.retrieval_result(reply0, reply1)
    assert len(calls) == 1
    party, halves = calls[0]
    assert list(party) == [0, 1] and halves == [reply0[SEED_AT:TAG_AT], reply1[SEED_AT:TAG_AT]]


def test_half_tags_of_one_party_a_half_are_each_halfs_own_tag() -> None:
    """``half_tags(round, parties, halves)`` tags ``halves[i]`` as server ``parties[i]``'s half:
    ``SHA-256(b"secemb-sketch-half-tag" || u8 parties[i] || u64 round || halves[i])[:16]``; one
    party for all halves tags each under it; parties that are not one a half, or not 0 or 1, are
    refused."""
    halves = [os.urandom(16) for _ in range(3)]

    def want(party: int, half: bytes) -> bytes:
        return hashlib.sha256(b"secemb-sketch-half-tag" + bytes([party]) + _u64(ROUND) + half).digest()[:16]

    assert C.half_tags(ROUND, (0, 1, 1), halves) == [want(0, halves[0]), want(1, halves[1]), want(1, halves[2])]
    assert C.half_tags(ROUND, 1, halves) == [want(1, h) for h in halves]
    assert C.half_tags(ROUND, [], []) == []
    for bad in ((0, 1), (0, 1, 1, 0), (0, 2, 1)):
        with pytest.raises(InvalidParameters, match="party 0 or 1"):
            C.half_tags(ROUND, bad, halves)
