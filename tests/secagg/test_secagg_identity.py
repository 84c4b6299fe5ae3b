"""secemb.secagg.identity: the roster certifies device keys; signatures are domain-separated."""

from __future__ import annotations

import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.secagg.identity import (
    CERTIFICATE_BYTES,
    ROSTER_DOMAIN,
    Certificate,
    Identity,
    Roster,
    signed_bytes,
    verify,
)

DOMAIN = b"secemb/test/v1"


@pytest.fixture(scope="module")
def roster() -> Roster:
    return Roster.generate()


def test_rfc8032_test_vector_1_through_the_roster() -> None:
    # RFC 8032 section 7.1, TEST 1: secret key, public key; a roster built on it has that public key
    sk = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    pk = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    assert Roster(bytes(16), sk).public == pk


def test_signed_bytes_layout() -> None:
    assert signed_bytes(b"ab", b"xyz") == b"\x02abxyz"
    for bad in (b"", b"x" * 256):
        with pytest.raises(InvalidParameters):
            signed_bytes(bad, b"")


def test_certificate_round_trip_and_layout(roster: Roster) -> None:
    ident = roster.enroll(7)
    raw = ident.certificate.to_bytes()
    assert len(raw) == CERTIFICATE_BYTES == 120
    assert raw[:16] == roster.deployment and raw[16:24] == (7).to_bytes(8, "little")
    assert raw[24:56] == ident.certificate.public
    assert Certificate.parse(raw, roster.public, roster.deployment, 7) == ident.certificate
    # the roster's signature is over the first 56 bytes under the roster domain
    verify(roster.public, ROSTER_DOMAIN, raw[:56], raw[56:], "cert")


def test_certificate_refused_for_another_user_deployment_roster_or_bytes(roster: Roster) -> None:
    raw = roster.enroll(7).certificate.to_bytes()
    with pytest.raises(InvalidMessage, match="for device 7"):
        Certificate.parse(raw, roster.public, roster.deployment, 8)
    with pytest.raises(InvalidMessage, match="another deployment"):
        Certificate.parse(raw, roster.public, bytes(16), 7)
    with pytest.raises(InvalidMessage, match="not the roster's"):
        Certificate.parse(raw, Roster(roster.deployment, bytes(32)).public, roster.deployment, 7)
    for i in (30, 60, 119):  # the device key, the signature
        bad = bytearray(raw)
        bad[i] ^= 1
        with pytest.raises(InvalidMessage):
            Certificate.parse(bytes(bad), roster.public, roster.deployment, 7)
    for cut in (raw[:-1], raw + b"\0", b""):
        with pytest.raises(InvalidMessage, match="120 bytes"):
            Certificate.parse(cut, roster.public, roster.deployment, 7)


def test_a_certificate_from_another_roster_is_refused(roster: Roster) -> None:
    # an attacker with its own roster (e.g. the server) certifies its own key for device 7
    other = Roster(roster.deployment, Roster.generate().private)
    forged = other.enroll(7).certificate.to_bytes()
    with pytest.raises(InvalidMessage, match="not the roster's"):
        Certificate.parse(forged, roster.public, roster.deployment, 7)


def test_signatures_are_bound_to_key_domain_and_message(roster: Roster) -> None:
    ident = roster.enroll(3)
    sig = ident.sign(DOMAIN, b"hello")
    assert len(sig) == 64
    verify(ident.certificate.public, DOMAIN, b"hello", sig, "device 3")
    with pytest.raises(InvalidMessage, match="device 3: the signature does not verify"):
        verify(ident.certificate.public, DOMAIN, b"hellO", sig, "device 3")
    with pytest.raises(InvalidMessage):
        verify(ident.certificate.public, b"secemb/other/v1", b"hello", sig, "device 3")
    with pytest.raises(InvalidMessage):
        verify(roster.enroll(3).certificate.public, DOMAIN, b"hello", sig, "device 3")
    with pytest.raises(InvalidMessage, match="64"):
        verify(ident.certificate.public, DOMAIN, b"hello", sig[:-1], "device 3")
    # a signature of the roster domain made by a device is no certificate
    assert ident.sign(ROSTER_DOMAIN, b"x") != ident.sign(DOMAIN, b"x")


def test_identity_must_match_its_certificate(roster: Roster) -> None:
    a, b = roster.enroll(1), roster.enroll(2)
    with pytest.raises(InvalidParameters, match="device 2"):
        Identity(a.private, b.certificate, roster.pin)
    with pytest.raises(InvalidParameters, match="another deployment"):
        Identity(a.private, a.certificate, Roster.generate().pin)
    assert a.user == 1 and a.pin == roster.pin
    assert a.pin.certificate(b.certificate.to_bytes(), 2) == b.certificate


def test_roster_parameters_checked(roster: Roster) -> None:
    with pytest.raises(InvalidParameters):
        Roster(bytes(15), bytes(32))
    with pytest.raises(InvalidParameters):
        Roster(bytes(16), bytes(31))
    with pytest.raises(InvalidParameters):
        roster.certify(-1, bytes(32))
    with pytest.raises(InvalidParameters):
        roster.certify(1, bytes(31))
    assert Roster.generate().deployment != Roster.generate().deployment
