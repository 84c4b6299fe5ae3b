"""X25519 key pairs, HKDF-derived pairwise secrets and the AES-GCM channel for relayed shares
(hazmat layer, on ``cryptography``).

Two parties holding key pairs ``(a, A)`` and ``(b, B)`` agree on ``X25519(a, B) = X25519(b, A)``;
:func:`agree` turns it into a key of a given length with HKDF-SHA256, whose ``info`` binds the
purpose label, the round id and the two party ids (in increasing order, so both ends derive the
same key).  Fresh key pairs are drawn per round; a low-order peer key (all-zero agreement) is
refused.

The channel key (purpose :data:`CHANNEL`) encrypts the Shamir shares a client relays through the
server with AES-128-GCM; one key serves both directions of a pair, so the 12-byte nonce is
``sender id || recipient id || 0`` (each key encrypts at most one message per direction) and the
associated data is the round id, sender and recipient.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.randomness import RandomBytes, system_rng

__all__ = [
    "KEY_BYTES",
    "TAG_BYTES",
    "CHANNEL",
    "MASK",
    "KeyPair",
    "public_bytes",
    "check_public",
    "agree",
    "seal",
    "open_sealed",
]

#: Bytes of an X25519 public or private key.
KEY_BYTES = 32
#: Bytes of an AES-GCM tag.
TAG_BYTES = 16
#: HKDF purpose of the relayed-share channel key.
CHANNEL = b"secemb/secagg/v1/channel"
#: HKDF purpose of the pairwise mask seed.
MASK = b"secemb/secagg/v1/mask"

_PAIR = struct.Struct("<QII")
#: a fixed private key that :func:`check_public` agrees with (nothing secret rests on it)
_PROBE = bytes(range(1, KEY_BYTES + 1))


@dataclass(frozen=True)
class KeyPair:
    """An X25519 key pair; ``private`` is the 32 raw private bytes (what Shamir shares)."""

    private: bytes
    public: bytes

    @classmethod
    def generate(cls, *, _rng: RandomBytes | None = None) -> KeyPair:
        """A fresh key pair from ``_rng`` (default ``os.urandom``)."""
        return cls.from_private((system_rng if _rng is None else _rng)(KEY_BYTES))

    @classmethod
    def from_private(cls, private: bytes) -> KeyPair:
        """The key pair of 32 raw private bytes (X25519 clamps them when used)."""
        if len(private) != KEY_BYTES:
            raise InvalidParameters(f"an X25519 private key is {KEY_BYTES} bytes, got {len(private)}")
        return cls(bytes(private), public_bytes(private))


def public_bytes(private: bytes) -> bytes:
    """The 32-byte X25519 public key of 32 raw private bytes."""
    key = X25519PrivateKey.from_private_bytes(bytes(private)).public_key()
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def check_public(public: bytes | memoryview) -> bytes:
    """``public`` if an agreement can use it: 32 bytes and not a low-order point (whose
    agreement with any private key is all zeros; every honest key passes).  What a server
    checks before it hands a party's key to the others, so one bad key cannot fail them all.

    Raises
    ------
    InvalidMessage: otherwise.
    """
    key = bytes(public)
    agree(_PROBE, key, b"secemb/key-check", 0, (0, 0))
    return key


def agree(private: bytes, peer_public: bytes, purpose: bytes, round_id: int, ids: tuple[int, int],
          length: int = 16) -> bytes:
    """``length`` bytes that the owner of ``private`` and the owner of ``peer_public`` both
    derive: HKDF-SHA256 of the X25519 agreement, ``info = purpose || round_id || min(ids) ||
    max(ids)``.

    Raises
    ------
    InvalidMessage: ``peer_public`` is not 32 bytes or is a low-order point.
    """
    if len(peer_public) != KEY_BYTES:
        raise InvalidMessage(f"an X25519 public key is {KEY_BYTES} bytes, got {len(peer_public)}")
    try:
        shared = X25519PrivateKey.from_private_bytes(bytes(private)).exchange(
            X25519PublicKey.from_public_bytes(bytes(peer_public)))
    except ValueError as exc:  # all-zero agreement: a low-order public key
        raise InvalidMessage(f"peer public key refused: {exc}") from None
    lo, hi = sorted(ids)
    info = purpose + _PAIR.pack(round_id, lo, hi)
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(shared)


def _nonce_aad(round_id: int, sender: int, recipient: int) -> tuple[bytes, bytes]:
    return struct.pack("<IIxxxx", sender, recipient), _PAIR.pack(round_id, sender, recipient)


def seal(key: bytes, round_id: int, sender: int, recipient: int, plaintext: bytes) -> bytes:
    """AES-GCM encryption of ``plaintext`` from ``sender`` to ``recipient``; returns
    ``ciphertext || tag`` (``len(plaintext) + 16`` bytes)."""
    nonce, aad = _nonce_aad(round_id, sender, recipient)
    return AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, round_id: int, sender: int, recipient: int, ciphertext: bytes) -> bytes:
    """Decrypt and authenticate what :func:`seal` produced for this sender and recipient.

    Raises
    ------
    InvalidMessage: the tag does not verify (wrong key, sender, recipient, round, or bytes).
    """
    nonce, aad = _nonce_aad(round_id, sender, recipient)
    try:
        return AESGCM(key).decrypt(nonce, bytes(ciphertext), aad)
    except InvalidTag:
        raise InvalidMessage(f"encrypted shares from client {sender} do not authenticate") from None
