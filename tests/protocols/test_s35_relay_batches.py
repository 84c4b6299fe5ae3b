"""Issue 37 (session 35, helper G): the relay's per-device HMACs made per batch.  ``relay.upload_macs``
(the devices' upload tags of a round, server 1's check of a range of forwards) gives, key by key, the
GMAC of the documented formula -- ``AES-128-GCM`` under ``HMAC-SHA256(k, b"secemb-relay-subkey-upload-gmac")[:16]``,
nonce ``0^96``, empty plaintext, associated data ``b"secemb-relay-upload-gmac" || u64 round || words`` --
computed here with ``hmac`` and cryptography's ``AESGCM`` directly, never by the code under test; and it
refuses what ``upload_mac`` refuses.  The device's batched check of server 1's seed tags (one
``checks.seed_tags`` call for a round's users) is covered, device by device, by
tests/review/test_session30_seed_tag.py (a batch refuses only the device whose seed or tag was altered)."""

from __future__ import annotations

import hashlib
import hmac
import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from secemb.errors import InvalidParameters
from secemb.protocols.secemb import relay

DOMAIN = b"secemb-relay-upload-gmac"


def _reference(key: bytes, round_id: int, data: bytes) -> bytes:
    sub = hmac.new(key, b"secemb-relay-subkey-upload-gmac", hashlib.sha256).digest()[:16]
    return AESGCM(sub).encrypt(bytes(12), b"", DOMAIN + round_id.to_bytes(8, "little") + data)


@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_upload_macs_are_each_keys_gmac_of_its_words(n: int) -> None:
    keys = [os.urandom(16) for _ in range(n)]  # MAC_KEY_BYTES
    words = [os.urandom(1 + 997 * i) for i in range(n)]  # every length, not whole blocks
    taus = [os.urandom(32) for _ in range(n)]
    want = [_reference(k, 2**40 + 3, w + t) for k, w, t in zip(keys, words, taus, strict=True)]
    assert relay.upload_macs(keys, 2**40 + 3, [(memoryview(w), t) for w, t in zip(words, taus, strict=True)]) == want
    assert relay.upload_macs(keys, 2**40 + 3, [w + t for w, t in zip(words, taus, strict=True)]) == want  # joined
    assert [relay.upload_mac(k, 2**40 + 3, w + t) for k, w, t in zip(keys, words, taus, strict=True)] == want
    # a key's tag depends on its own key and words only: the batch's order moves the tags with them
    joined = [w + t for w, t in zip(words, taus, strict=True)]
    assert relay.upload_macs(keys[::-1], 2**40 + 3, joined[::-1]) == want[::-1]


def test_upload_macs_of_no_upload_is_empty() -> None:
    assert relay.upload_macs([], 1, []) == []


def test_upload_macs_refuse_a_bad_key_or_unmatched_lists() -> None:
    with pytest.raises(InvalidParameters):
        relay.upload_macs([os.urandom(16), os.urandom(15)], 1, [b"a", b"b"])
    with pytest.raises(InvalidParameters):
        relay.upload_macs([os.urandom(16)], 1, [b"a", b"b"])
    with pytest.raises(InvalidParameters):
        relay.upload_mac(os.urandom(15), 1, b"a")  # the single tag refuses the same key
