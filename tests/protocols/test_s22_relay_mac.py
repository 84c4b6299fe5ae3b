"""Issue 37 (session 22): the relay's upload MAC is GMAC, a one-time MAC under the device's
fresh per-round key (``relay.upload_mac``; docs/wire-format.md, docs/security.md
"Authenticated relay").  The tag is checked against the spec's definition computed here twice:
with cryptography's AESGCM called directly, and from AES-ECB and a GHASH written out in Python
(NIST SP 800-38D), each under the GMAC's sub-key of the device's key (session 31: ``HMAC-SHA256(k,
b"secemb-relay-subkey-upload-gmac")[:16]``, :func:`_gmac_key`); a changed bit of the words, round or key changes it; server 1 refuses a
forward under an HMAC-era tag, another round's tag or a flipped word; the device tags once."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from secemb.errors import InvalidParameters, ProtocolError, RelayTampered
from secemb.protocols.base import RoundConfig
from secemb.protocols.secemb import SecEmbProtocol, SecEmbRelayServer, SecEmbUser, relay, user
from secemb.randomness import CtrDrbg

HDR = 32  # a framed message's header (docs/wire-format.md)
DOMAIN = b"secemb-relay-upload-gmac"


def _gmac_key(key: bytes) -> bytes:
    """The upload GMAC's AES-128 key: the first 16 bytes of ``HMAC-SHA256(key,
    b"secemb-relay-subkey-upload-gmac")`` (docs/wire-format.md; since session 31)."""
    return hmac.new(key, b"secemb-relay-subkey-upload-gmac", hashlib.sha256).digest()[:16]


def _gf_mult(x: int, y: int) -> int:
    """GCM's product in GF(2^128) (SP 800-38D, Algorithm 1: bit 0 is the block's leftmost)."""
    z, v = 0, y
    for i in range(128):
        if (x >> (127 - i)) & 1:
            z ^= v
        v = (v >> 1) ^ (0xE1 << 120) if v & 1 else v >> 1
    return z


def _gmac_by_hand(key: bytes, aad: bytes, ciphertext: bytes = b"") -> bytes:
    """GCM's tag under the zero 96-bit nonce (of an empty plaintext unless ``ciphertext`` is
    given): ``AES_k(0^96 || 1) xor GHASH_H(aad padded || ciphertext padded || u64 8 len(aad) ||
    u64 8 len(ciphertext))`` with ``H = AES_k(0^128)``."""
    ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    h = int.from_bytes(ecb.update(bytes(16)), "big")
    pad = ecb.update(bytes(12) + (1).to_bytes(4, "big"))
    padded = aad + bytes(-len(aad) % 16) + ciphertext + bytes(-len(ciphertext) % 16)
    blocks = [padded[i : i + 16] for i in range(0, len(padded), 16)]
    blocks.append((8 * len(aad)).to_bytes(8, "big") + (8 * len(ciphertext)).to_bytes(8, "big"))
    y = 0
    for block in blocks:
        y = _gf_mult(y ^ int.from_bytes(block, "big"), h)
    return (y ^ int.from_bytes(pad, "big")).to_bytes(16, "big")


def test_the_tag_is_gmac_of_domain_round_and_words() -> None:
    key, words = bytes(range(16)), bytes(range(256)) * 3 + b"\x01\x02\x03"  # not a whole number of blocks
    aad = DOMAIN + (5).to_bytes(8, "little") + words
    got = relay.upload_mac(key, 5, words)
    assert len(got) == 16
    assert got == AESGCM(_gmac_key(key)).encrypt(bytes(12), b"", aad) == _gmac_by_hand(_gmac_key(key), aad)
    assert relay.upload_mac(key, 5, memoryview(words)) == got  # the words read in place


def test_gmac_by_hand_matches_published_vectors() -> None:
    """The hand-written GCM above on the published test cases 1 and 2 (McGrew-Viega, "The
    Galois/Counter Mode of Operation"): AES-128 under the zero key and nonce, nothing to encrypt,
    then one zero block (its ciphertext given)."""
    assert _gmac_by_hand(bytes(16), b"").hex() == "58e2fccefa7e3061367f1d57a4e7455a"
    c = bytes.fromhex("0388dace60b6a392f328c2b971b2fe78")
    assert _gmac_by_hand(bytes(16), b"", c).hex() == "ab6e47d42cec13bdf53a67b21257bddf"


def test_a_flipped_bit_of_words_round_or_key_changes_the_tag() -> None:
    key, words = b"\x11" * 16, b"\x22" * 1000
    tag = relay.upload_mac(key, 9, words)
    flipped = bytearray(words)
    flipped[517] ^= 0x10
    assert relay.upload_mac(key, 9, bytes(flipped)) != tag
    assert relay.upload_mac(key, 9 ^ (1 << 40), words) != tag
    assert relay.upload_mac(b"\x11" * 15 + b"\x10", 9, words) != tag
    assert relay.upload_mac(key, 9, words + b"\x00") != tag  # a zero byte more: the length block differs


@pytest.mark.parametrize("size", [0, 15, 32])
def test_a_key_of_another_length_is_refused(size: int) -> None:
    with pytest.raises(InvalidParameters, match="16 bytes"):
        relay.upload_mac(b"k" * size, 1, b"words")


@dataclass
class _Round:
    """One relay round's parties and messages, up to server 0's forward of the upload."""

    cfg: RoundConfig
    s1: SecEmbRelayServer
    device: SecEmbUser
    r1: bytes  # the device's direct request to server 1
    forward: bytes  # server 0's forward of the device's upload


def _relay_round() -> _Round:
    """Two relay servers and one device (user 7) through retrieval and upload."""
    proto = SecEmbProtocol(layout="cuckoo", relay=True)
    cfg = proto.round_config(4, num_items=300, width=5, dense_size=3, m_prime=8, ring_bits=32)
    table = np.arange(cfg.num_items * cfg.width, dtype=cfg.dtype).reshape(cfg.num_items, cfg.width)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    assert isinstance(s0, SecEmbRelayServer) and isinstance(s1, SecEmbRelayServer)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    device = proto.make_user(cfg, _rng=CtrDrbg(b"s22 relay mac"))
    slots = np.full(cfg.slots, -1, np.int64)  # every bucket empty: the MAC does not care
    r0, r1 = device.retrieval_request(slots)
    assert s1.handle_retrieval(7, r1) is None
    fwd = s0.handle_retrieval(7, r0)
    assert fwd is not None
    device.retrieval_result(s0.complete_retrieval(7, s1.relay_retrieval(7, fwd)), None)
    u0, _ = device.upload(np.zeros((cfg.slots, cfg.width), cfg.dtype), np.zeros(cfg.dense_size, cfg.dtype))
    forward = s0.handle_upload(7, u0)
    assert forward is not None
    return _Round(cfg, s1, device, r1, forward)


def test_server_1_accepts_only_the_devices_gmac() -> None:
    """The forward is the words, the device's 32-byte binding tau (verified uploads, issue 34) and
    the tag over both."""
    rnd = _relay_round()
    key = rnd.r1[-64:-48]  # the direct request's body ends with the MAC key, the 32-byte digest and sigma
    words, tag = rnd.forward[HDR:-16], rnd.forward[-16:]  # the words, then tau
    assert len(words) == rnd.cfg.slots * rnd.cfg.width * 4 + 32
    assert tag == _gmac_by_hand(_gmac_key(key), DOMAIN + (4).to_bytes(8, "little") + words)
    hmac_era = hmac.new(key, b"secemb-relay-upload" + (4).to_bytes(8, "little") + words, hashlib.sha256).digest()[:16]
    other_round = AESGCM(_gmac_key(key)).encrypt(bytes(12), b"", DOMAIN + (5).to_bytes(8, "little") + words)
    raw_key = AESGCM(key).encrypt(bytes(12), b"", DOMAIN + (4).to_bytes(8, "little") + words)  # before session 31
    flipped = bytearray(rnd.forward)
    flipped[HDR + 3] ^= 1
    bound = bytearray(rnd.forward)
    bound[-16 - 32] ^= 1  # a bit of tau: under the tag too
    for bad in (rnd.forward[:-16] + hmac_era, rnd.forward[:-16] + other_round, rnd.forward[:-16] + raw_key,
                bytes(flipped), bytes(bound)):
        with pytest.raises(RelayTampered, match="server 0 altered"):
            rnd.s1.relay_upload(7, bad)
        assert 7 not in rnd.s1.included_users()
    rnd.s1.relay_upload(7, rnd.forward)  # a refused forward changed nothing: the device's own still verifies
    assert 7 in rnd.s1.included_users()


def test_the_device_tags_once_with_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is the device's for one tag: dropped at the upload, and a second upload of the
    round is refused before anything is tagged."""
    calls: list[bytes] = []
    real = relay.upload_macs  # the device tags its upload in its batch's one call (session 35)

    def counted(keys: list[bytes], round_id: int, cws: list[tuple[memoryview, bytes]]) -> list[bytes]:
        calls.extend(keys)
        return real(keys, round_id, cws)

    monkeypatch.setattr(user, "upload_macs", counted)
    rnd = _relay_round()
    cfg = rnd.cfg
    assert len(calls) == 1 and rnd.device._mac_key is None
    with pytest.raises(ProtocolError):
        rnd.device.upload(np.zeros((cfg.slots, cfg.width), cfg.dtype), np.zeros(cfg.dense_size, cfg.dtype))
    assert len(calls) == 1
