"""Session 22 (helper B): SecEA against an active server -- the signed key directory.

Each silo signs its HELLO keys (X25519, Paillier modulus) with its certified identity
(:mod:`secemb.secagg.identity`: the deployment's roster, the operator's key, certifies each silo's
Ed25519 key); the DIRECTORY carries every silo's certificate and signature, and a silo verifies
every entry before it uses any key.  Before, a server that put its own key in place of a peer's
removed the pads from the silo's shares (``test_limit_unsigned_...`` in
``tests/protocols/test_secea_attacks.py`` keeps that attack, unsigned).  Here: every way a
deviating server can change an entry -- a byte of a certificate, a signature, a key; a certificate
of another silo, of another deployment, or from a roster key the server made itself; a HELLO
signed for another set-up; an entry without a signature -- is refused with an
:class:`InvalidMessage` naming the silo and the server's deviation, and the silo keeps nothing of
that directory; in process, over HTTP, and as ``secemb client`` runs a silo.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from secemb.client.stages import take_part
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.framing import HEADER_BYTES
from secemb.protocols.secea import wire
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import HELLO_DOMAIN, SecEAClient, hello_statement
from secemb.protocols.secea.staged import SECEA_PLAN, SecEANode, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import CtrDrbg
from secemb.secagg.identity import Roster, signed_bytes
from secemb.secagg.keys import KeyPair
from secemb.transport.http import HttpStageLink
from secemb.transport.network import ApiClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_deviating_server import DeviatingNode  # noqa: E402
from session21_secea_setup import Deployment  # noqa: E402

KEY_BITS = 1024
SETS = [[1, 3, 5], [3, 4], [5, 6, 7, 8]]
ROSTER = Roster.generate()
IDENTITIES = [ROSTER.enroll(i) for i in range(3)]
#: a DIRECTORY entry: X25519 key (32), certificate (120), signature (64), Paillier n
Entry = tuple[bytes, bytes, bytes, bytes]
CERT, SIG = 120, 64


def _entries(directory: bytes) -> list[Entry]:
    """The entries of a signed DIRECTORY (docs/secea.md, "Messages": u16 count, then per silo u16
    id, X25519 key, certificate, signature, u16 len(n), n), read by that layout."""
    body, pos, out = directory[HEADER_BYTES:], 2, []
    for _ in range(struct.unpack_from("<H", body)[0]):
        x, cert, sig = body[pos + 2:pos + 34], body[pos + 34:pos + 154], body[pos + 154:pos + 218]
        size = struct.unpack_from("<H", body, pos + 218)[0]
        out.append((x, cert, sig, body[pos + 220:pos + 220 + size]))
        pos += 220 + size
    assert pos == len(body)
    return out


def _directory(entries: list[Entry], receiver: int = 0, *, signed: bool = True) -> bytes:
    """A DIRECTORY message of ``entries`` (``signed=False``: without certificates and signatures)."""
    body = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<H", i) + x + (cert + sig if signed else b"") + struct.pack("<H", len(n)) + n
        for i, (x, cert, sig, n) in enumerate(entries))
    return wire.pack(wire.Header(wire.DIRECTORY, 0, wire.SERVER, receiver), body)


def _flip(data: bytes, pos: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ 0x10]) + data[pos + 1:]


def _world(setup_round: int = 1) -> tuple[list[SecEAClient], SecEANode, dict[int, bytes]]:
    params = SecEAParams(3, 1, dim=2)
    rng = CtrDrbg(7)
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=IDENTITIES[i], _rng=rng)
               for i, s in enumerate(SETS)]
    node = SecEANode(params, union_bloom(16, 9), key_bits=KEY_BITS, _rng=CtrDrbg(8))
    return clients, node, {i: c.hello(setup_round) for i, c in enumerate(clients)}


def _own_signed_entry(roster: Roster, user: int, x25519: bytes, modulus: bytes, setup_round: int = 1) -> Entry:
    """An entry the server signs itself: ``user`` enrolled under ``roster`` (the server's own)."""
    ident = roster.enroll(user)
    statement = hello_statement(roster.deployment, setup_round, 3, user, x25519, modulus)
    return x25519, ident.certificate.to_bytes(), ident.sign(HELLO_DOMAIN, statement), modulus


def _server_key() -> bytes:
    return KeyPair.generate().public


SILO_2S = r"silo 1 .*the certificate of device 1 is for device 2 of this deployment"
NOT_ROSTERS = r"silo 1 .*the certificate of device 1 is not the roster's: the signature does not verify"
#: how the server changes silo 0's directory (the honest entries in), and the refusal
TAMPERS: dict[str, tuple[Callable[[list[Entry]], list[Entry]], str]] = {
    "certificate-device-key-byte": (lambda e: [e[0], (e[1][0], _flip(e[1][1], 30), *e[1][2:]), e[2]],
                                    NOT_ROSTERS),
    "certificate-roster-signature-byte": (lambda e: [e[0], (e[1][0], _flip(e[1][1], 100), *e[1][2:]), e[2]],
                                          NOT_ROSTERS),
    "certificate-deployment-byte": (lambda e: [e[0], e[1], (e[2][0], _flip(e[2][1], 3), *e[2][2:])],
                                    r"silo 2 .*the certificate of device 2 is for device 2 of another deployment"),
    "signature-byte": (lambda e: [e[0], (*e[1][:2], _flip(e[1][2], 40), e[1][3]), e[2]],
                       r"silo 1 .*silo 1's signature: the signature does not verify"),
    "x25519-key-byte": (lambda e: [e[0], e[1], (_flip(e[2][0], 9), *e[2][1:])],
                        r"silo 2 .*silo 2's signature: the signature does not verify"),
    "modulus-byte": (lambda e: [e[0], (*e[1][:3], _flip(e[1][3], 64)), e[2]],
                     r"silo 1 .*silo 1's signature: the signature does not verify"),
    "the-servers-key-for-silo-1": (lambda e: [e[0], (_server_key(), *e[1][1:]), e[2]],
                                   r"silo 1 .*silo 1's signature: the signature does not verify"),
    "silo-2s-entry-in-silo-1s-seat": (lambda e: [e[0], e[2], e[2]], SILO_2S),
    "silo-2s-certificate-and-signature-for-silo-1": (lambda e: [e[0], (e[1][0], *e[2][1:3], e[1][3]), e[2]], SILO_2S),
    "another-deployments-certificate": (
        lambda e: [e[0], _own_signed_entry(Roster.generate(), 1, _server_key(), e[1][3]), e[2]],
        r"silo 1 .*the certificate of device 1 is for device 1 of another deployment"),
    "the-servers-roster-key-for-this-deployment": (
        lambda e: [e[0], _own_signed_entry(Roster(ROSTER.deployment, Roster.generate().private), 1, _server_key(),
                                           e[1][3]), e[2]],
        NOT_ROSTERS),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_silo_refuses_a_directory_entry_its_silo_did_not_sign_and_keeps_nothing(tamper: str) -> None:
    change, why = TAMPERS[tamper]
    clients, node, hellos = _world()
    honest = node.server.directory(hellos)[0]
    forged = _directory(change(_entries(honest)))
    assert forged != honest and len(forged) == len(honest)
    with pytest.raises(InvalidMessage, match=why + r"\): the server deviated from the protocol$"):
        clients[0].receive_directory(forged)
    assert clients[0]._directory is None and clients[0]._peers == {} and not clients[0].set_up
    clients[0].receive_directory(honest)  # the control: nothing of the refusal stayed
    assert clients[0]._directory == honest


def test_a_hello_signed_for_another_set_up_is_refused() -> None:
    """Silo 1's keys from set-up 0 replayed into set-up 1 (its signature names set-up 0)."""
    clients, node, hellos = _world(setup_round=1)
    old_clients, _, old_hellos = _world(setup_round=0)
    replayed = dict(hellos) | {1: old_hellos[1]}
    with pytest.raises(InvalidMessage, match=r"^the directory gives silo 1 keys not signed by silo 1 \(silo 1's "
                                             r"signature: the signature does not verify\): the server deviated"):
        clients[0].receive_directory(node.server.directory(replayed)[0])
    assert clients[0]._directory is None
    # the replayed entry is genuine: silo 1's signature over its keys for set-up 0
    x, cert, sig, n = _entries(node.server.directory(replayed)[0])[1]
    Ed25519PublicKey.from_public_bytes(cert[24:56]).verify(
        sig, signed_bytes(b"secemb/secea/v1/hello", ROSTER.deployment + struct.pack("<QHH", 0, 3, 1) + x + n))


def test_a_directory_without_signatures_is_refused() -> None:
    """The unsigned layout (no certificate and signature in any entry), and one entry without
    its own: malformed for a signed silo, refused before any key is taken."""
    clients, node, hellos = _world()
    entries = _entries(node.server.directory(hellos)[0])
    with pytest.raises(InvalidMessage):
        clients[0].receive_directory(_directory(entries, signed=False))
    one_short = wire.pack(wire.Header(wire.DIRECTORY, 0, wire.SERVER, 0), b"".join(
        [struct.pack("<H", 3)] + [struct.pack("<H", i) + x + (cert + sig if i != 1 else b"") + struct.pack("<H", len(n))
                                  + n for i, (x, cert, sig, n) in enumerate(entries)]))
    with pytest.raises(InvalidMessage):
        clients[0].receive_directory(one_short)
    assert clients[0]._directory is None and clients[0]._peers == {}


def test_the_signed_statement_is_the_documented_layout() -> None:
    """docs/secea.md: silo i signs ``len(domain) || "secemb/secea/v1/hello" || deployment id (16)
    || set-up round (u64) || N (u16) || i (u16) || X25519 key || n`` with its certified key; the
    HELLO is ``X25519 || certificate || signature || n``.  Checked with ``cryptography`` directly."""
    clients, _, hellos = _world(setup_round=5)
    body = hellos[2][HEADER_BYTES:]
    x, cert, sig, n = body[:32], body[32:152], body[152:216], body[216:]
    assert cert == IDENTITIES[2].certificate.to_bytes() and n == clients[2].paillier_key.to_bytes()
    assert cert[:16] == ROSTER.deployment and cert[16:24] == (2).to_bytes(8, "little")
    message = bytes([21]) + b"secemb/secea/v1/hello" + ROSTER.deployment + (5).to_bytes(8, "little") \
        + (3).to_bytes(2, "little") + (2).to_bytes(2, "little") + x + n
    Ed25519PublicKey.from_public_bytes(cert[24:56]).verify(sig, message)  # raises if not


def test_a_signed_silo_needs_its_own_identity_and_an_unsigned_one_takes_none() -> None:
    params = SecEAParams(3, 1, dim=2)
    silo = SecEAClient(0, params, np.array([1]), key_bits=KEY_BITS, _rng=CtrDrbg(1))
    with pytest.raises(ProtocolError, match="no identity to sign its keys with"):
        silo.hello()
    with pytest.raises(InvalidParameters, match="identity of device 1"):
        silo.sign_with(IDENTITIES[1])
    unsigned = SecEAClient(0, params, np.array([1]), key_bits=KEY_BITS, signed=False, _rng=CtrDrbg(1))
    with pytest.raises(InvalidParameters, match="unsigned"):
        unsigned.sign_with(IDENTITIES[0])
    assert SecEANode(params, union_bloom(16, 9)).server.signed  # the node's default, as the silos'



def _substitute_silo_1(stage: str, answer: bytes) -> bytes | None:
    if stage != "secea-keys":
        return answer
    entries = _entries(answer)
    return _directory([entries[0], (_server_key(), *entries[1][1:]), entries[2]], 0)


def _substitute_silo_1s_psu_key(stage: str, answer: bytes) -> bytes | None:
    """The PSU's key list (docs/secagg.md, signed: u32 count, then per client u32 id, two X25519
    keys, seed commitment (32 bytes, since session 23), certificate, signature) with the server's
    key as silo 1's second (its masking key)."""
    if stage != "psu-advertise":
        return answer
    entry = 4 + 64 + 32 + CERT + SIG
    at = HEADER_BYTES + 4 + entry  # silo 1's entry
    assert struct.unpack_from("<I", answer, at)[0] == 1 and len(answer) == HEADER_BYTES + 4 + 3 * entry
    return answer[:at + 36] + _server_key() + answer[at + 68:]


def _served(nodes: list[DeviatingNode], tamper: Callable[[str, bytes], bytes | None]) -> SecEASetupParty:
    """Set-up 1 served by a deviating node over HTTP (silos 1, 2 in process): silo 0's party."""
    clients, node, _ = _world()
    doc = node.open_round(1, [0, 1, 2])
    parties = {u: SecEASetupParty(c, node.bloom, 1, _rng=CtrDrbg(30 + u)) for u, c in enumerate(clients)}
    nodes.append(DeviatingNode(node, doc, {1: parties[1], 2: parties[2]}, tamper=tamper))
    return parties[0]


def _take_part(server: DeviatingNode, party: SecEASetupParty) -> None:
    class Silo:
        def party(self, doc: Any) -> Any:
            return party

    with ApiClient(server.url, "user:0", b"k" * 32) as api:
        take_part(HttpStageLink(0, api), Silo(), SECEA_PLAN, server.doc, wait_s=5.0, poll_s=0.01)


def test_over_http_the_substituted_key_fails_the_set_up_and_nothing_more_is_sent(nodes: list[DeviatingNode]) -> None:
    party = _served(nodes, _substitute_silo_1)
    with pytest.raises(InvalidMessage, match="silo 1 keys not signed by silo 1 .*the server deviated"):
        _take_part(nodes[-1], party)
    assert nodes[-1].posted == ["secea-keys"]  # nothing sent after the HELLO
    assert party.client._directory is None and party.client._peers == {} and party.union is None


def test_over_http_a_substituted_psu_key_fails_the_set_up_before_the_silos_entities_leave(
        nodes: list[DeviatingNode]) -> None:
    """The set-up's PSU is a signed secure aggregation: the server's key in place of silo 1's in
    the key list would let it open silo 0's masked Bloom filter (its entities; the unsigned
    attack: ``tests/secagg/test_secagg_active.py``).  Silo 0 refuses the key list at
    ``psu-advertise``: it never sends its shares nor its masked filter."""
    party = _served(nodes, _substitute_silo_1s_psu_key)
    with pytest.raises(InvalidMessage, match=r"keys for device 1 that device 1 did not sign \(the server deviated\)"):
        _take_part(nodes[-1], party)
    assert nodes[-1].posted == ["secea-keys", "psu-advertise"] and party.union is None


def test_over_http_an_honest_signed_set_up_commits(nodes: list[DeviatingNode]) -> None:
    """The harness's control: the same set-up untampered commits with the union."""
    party = _served(nodes, lambda stage, answer: answer)
    _take_part(nodes[-1], party)
    assert nodes[-1].posted == ["secea-keys", "psu-advertise", "psu-shares", "psu-masked", "psu-consistency",
                                "psu-unmask"]
    assert party.client.set_up and party.union is not None and party.union.tolist() == [1, 3, 4, 5, 6, 7, 8]


def test_secemb_client_refuses_a_substituted_key_and_stores_no_keys(secea_deployment: Deployment) -> None:
    """The deployed silo (``secemb client``, its identity from its credentials): exit 1, one line
    naming silo 1 and the deviation; its state file records the set-up it took part in and no keys."""
    served = secea_deployment.set_up(1, _substitute_silo_1)
    code, line = secea_deployment.client()
    assert code == 1 and line["user"] == 0
    assert line["error"].startswith("round 1: the directory gives silo 1 keys not signed by silo 1 (")
    assert line["error"].endswith("): the server deviated from the protocol")
    assert served.posted == ["secea-keys"]
    meta, arrays = secea_deployment.state()
    assert meta["setup_round"] == 1 and "client" not in meta and "directory" not in arrays
    # the same deployment, honest: silo 0's set-up commits (its operator approves the second set-up)
    secea_deployment.set_up(2)
    code, line = secea_deployment.client("--new-set-up")
    assert code == 0 and line["outcome"] == "committed", line
