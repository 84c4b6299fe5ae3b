"""Device identities rooted in the operator: a deployment's roster key certifies each device's
signing key (Ed25519, on ``cryptography``; hazmat layer, bytes in, bytes out, no transport).

The operator makes a :class:`Roster` (``secemb admin init``) and keeps its private key; the server
never holds it.  Enrolling device ``user`` (:meth:`Roster.enroll`, ``secemb admin add-devices``)
gives it an :class:`Identity`: a fresh Ed25519 key and a :class:`Certificate`, the roster's
signature over ``(deployment id, user, device public key)``.  A device pins the roster's public
key; it accepts a peer's signed message only if the peer's certificate verifies under that key
for the expected deployment and user (:meth:`Certificate.parse`) and the message's signature
verifies under the certified key (:func:`verify`).  A server that relays messages can drop them
but cannot make a device accept a key or a statement that the named device did not sign.

Every signature is over ``len(domain) || domain || message`` (:func:`signed_bytes`), so a
signature made for one purpose never verifies for another.  Byte layout of a certificate
(:data:`CERTIFICATE_BYTES` = 120)::

    deployment id (16) || user (uint64, little-endian) || device public key (32) || roster signature (64)

A failed check raises :class:`~secemb.errors.InvalidMessage`; it never returns ``False``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from secemb.errors import InvalidMessage, InvalidParameters, check_int
from secemb.randomness import system_rng

__all__ = [
    "CERTIFICATE_BYTES",
    "DEPLOYMENT_BYTES",
    "PUBLIC_BYTES",
    "PRIVATE_BYTES",
    "ROSTER_DOMAIN",
    "SIGNATURE_BYTES",
    "Certificate",
    "Identity",
    "Roster",
    "RosterPin",
    "signed_bytes",
    "verify",
]

#: Bytes of an Ed25519 public key, private key (raw seed) and signature.
PUBLIC_BYTES = 32
PRIVATE_BYTES = 32
SIGNATURE_BYTES = 64
#: Bytes of a deployment id (random, made with the roster).
DEPLOYMENT_BYTES = 16
#: The domain of the roster's signature in a certificate.
ROSTER_DOMAIN = b"secemb/roster/v1"

_BODY = struct.Struct(f"<{DEPLOYMENT_BYTES}sQ{PUBLIC_BYTES}s")
#: Bytes of a certificate: deployment id, user, device public key, roster signature.
CERTIFICATE_BYTES = _BODY.size + SIGNATURE_BYTES


def signed_bytes(domain: bytes, message: bytes) -> bytes:
    """What a signature covers: ``len(domain)`` (one byte) ``|| domain || message``.

    Raises
    ------
    InvalidParameters: ``domain`` empty or longer than 255 bytes.
    """
    if not 1 <= len(domain) <= 255:
        raise InvalidParameters(f"a signature domain is 1 to 255 bytes, got {len(domain)}")
    return bytes([len(domain)]) + domain + message


def _private(raw: bytes) -> Ed25519PrivateKey:
    if len(raw) != PRIVATE_BYTES:
        raise InvalidParameters(f"an Ed25519 private key is {PRIVATE_BYTES} bytes, got {len(raw)}")
    return Ed25519PrivateKey.from_private_bytes(bytes(raw))


def _public_of(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _sign(raw: bytes, domain: bytes, message: bytes) -> bytes:
    return _private(raw).sign(signed_bytes(domain, message))


def verify(public: bytes, domain: bytes, message: bytes, signature: bytes, what: str) -> None:
    """Check ``signature`` over ``(domain, message)`` under the Ed25519 key ``public``.

    Raises
    ------
    InvalidMessage: the key or the signature is malformed, or the signature does not verify;
        the error starts with ``what`` (who was meant to have signed what).
    """
    if len(public) != PUBLIC_BYTES or len(signature) != SIGNATURE_BYTES:
        raise InvalidMessage(f"{what}: a key of {len(public)} bytes or a signature of {len(signature)} bytes "
                             f"(expected {PUBLIC_BYTES} and {SIGNATURE_BYTES})")
    try:
        Ed25519PublicKey.from_public_bytes(bytes(public)).verify(bytes(signature), signed_bytes(domain, message))
    except (InvalidSignature, ValueError):
        raise InvalidMessage(f"{what}: the signature does not verify") from None


@dataclass(frozen=True)
class Certificate:
    """The roster's statement that device ``user`` of deployment ``deployment`` signs with
    ``public``.  Build it with :meth:`Roster.certify`; read untrusted bytes with :meth:`parse`."""

    deployment: bytes
    user: int
    public: bytes
    signature: bytes

    def to_bytes(self) -> bytes:
        """The :data:`CERTIFICATE_BYTES`-byte layout (module docstring)."""
        return _BODY.pack(self.deployment, self.user, self.public) + self.signature

    @staticmethod
    def named_key(data: bytes | memoryview) -> bytes:
        """The device key that the certificate bytes ``data`` name, NOT checked (a relay's
        sanity checks only; a party that relies on the key uses :meth:`parse`).

        Raises
        ------
        InvalidMessage: ``data`` is not :data:`CERTIFICATE_BYTES` long.
        """
        if len(data) != CERTIFICATE_BYTES:
            raise InvalidMessage(f"a certificate is {CERTIFICATE_BYTES} bytes, got {len(data)}")
        return bytes(data[DEPLOYMENT_BYTES + 8 : DEPLOYMENT_BYTES + 8 + PUBLIC_BYTES])

    @classmethod
    def parse(cls, data: bytes | memoryview, roster_public: bytes, deployment: bytes, user: int) -> Certificate:
        """The certificate in ``data`` if it is the roster's, for ``deployment`` and ``user``.

        Raises
        ------
        InvalidMessage: another length, another deployment or user, or a roster signature
            that does not verify under ``roster_public``.
        """
        raw = bytes(data)
        if len(raw) != CERTIFICATE_BYTES:
            raise InvalidMessage(f"a certificate is {CERTIFICATE_BYTES} bytes, got {len(raw)}")
        dep, got_user, public = _BODY.unpack(raw[: _BODY.size])
        if dep != deployment or got_user != user:
            raise InvalidMessage(f"the certificate of device {user} is for device {got_user} of "
                                 f"{'this' if dep == deployment else 'another'} deployment")
        verify(roster_public, ROSTER_DOMAIN, raw[: _BODY.size], raw[_BODY.size :],
               f"the certificate of device {user} is not the roster's")
        return cls(dep, got_user, public, raw[_BODY.size :])


@dataclass(frozen=True)
class RosterPin:
    """What a party trusts: the deployment id and the roster's public key (public values; a
    device's credentials pin them, a server may hold them to check certificates early)."""

    deployment: bytes
    public: bytes

    def __post_init__(self) -> None:
        if len(self.deployment) != DEPLOYMENT_BYTES or len(self.public) != PUBLIC_BYTES:
            raise InvalidParameters(f"a roster pin is a {DEPLOYMENT_BYTES}-byte deployment id and a "
                                    f"{PUBLIC_BYTES}-byte key, got {len(self.deployment)} and {len(self.public)}")

    def certificate(self, data: bytes | memoryview, user: int) -> Certificate:
        """:meth:`Certificate.parse` of ``data`` for device ``user`` under this pin."""
        return Certificate.parse(data, self.public, self.deployment, user)


@dataclass(frozen=True)
class Identity:
    """A device's signing key, its certificate and the roster it trusts (what its credentials
    file carries)."""

    private: bytes
    certificate: Certificate
    pin: RosterPin

    def __post_init__(self) -> None:
        if _public_of(_private(self.private)) != self.certificate.public:
            raise InvalidParameters(f"the identity key of device {self.certificate.user} is not the one "
                                    "its certificate names")
        if self.pin.deployment != self.certificate.deployment:
            raise InvalidParameters(f"the certificate of device {self.certificate.user} is for another deployment")

    @property
    def user(self) -> int:
        """The device's user id (as certified)."""
        return self.certificate.user

    def sign(self, domain: bytes, message: bytes) -> bytes:
        """The device's 64-byte signature over ``(domain, message)`` (:func:`signed_bytes`)."""
        return _sign(self.private, domain, message)


@dataclass(frozen=True)
class Roster:
    """A deployment's roster: its id (:data:`DEPLOYMENT_BYTES` bytes) and the operator's
    Ed25519 key that certifies devices.  ``private`` stays with the operator."""

    deployment: bytes
    private: bytes

    def __post_init__(self) -> None:
        if len(self.deployment) != DEPLOYMENT_BYTES:
            raise InvalidParameters(f"a deployment id is {DEPLOYMENT_BYTES} bytes, got {len(self.deployment)}")
        _private(self.private)

    @classmethod
    def generate(cls) -> Roster:
        """A fresh roster: a random deployment id and key (``os.urandom``)."""
        return cls(system_rng(DEPLOYMENT_BYTES), system_rng(PRIVATE_BYTES))

    @property
    def public(self) -> bytes:
        """The roster's 32-byte public key (what each device pins)."""
        return _public_of(_private(self.private))

    @property
    def pin(self) -> RosterPin:
        """The deployment id and public key, what devices (and the server) trust."""
        return RosterPin(self.deployment, self.public)

    def certify(self, user: int, device_public: bytes) -> Certificate:
        """The certificate of ``device_public`` (32 bytes) as device ``user`` (``[0, 2^64)``)."""
        user = check_int("user", user, low=0, high=2**64 - 1)
        if len(device_public) != PUBLIC_BYTES:
            raise InvalidParameters(f"a device key is {PUBLIC_BYTES} bytes, got {len(device_public)}")
        body = _BODY.pack(self.deployment, user, bytes(device_public))
        return Certificate(self.deployment, user, bytes(device_public), _sign(self.private, ROSTER_DOMAIN, body))

    def enroll(self, user: int) -> Identity:
        """A fresh identity (Ed25519 key from the OS) for device ``user``, certified."""
        raw = system_rng(PRIVATE_BYTES)
        return Identity(raw, self.certify(user, _public_of(_private(raw))), self.pin)
