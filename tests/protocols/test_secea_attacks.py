"""An adversarial review of SecEA's one-server node and silos (secemb.protocols.secea): what a
deviating silo or server gains by changing a message.  Refusals change nothing; what SecEA's
honest-but-curious threat model leaves open is shown by a ``test_limit_*`` test and stated in
docs/security.md ("One-server protocols")."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from secemb.sim.local import LocalStageServer
from secemb.sim.player import play
from secemb.framing import HEADER_BYTES
from secemb.errors import InvalidMessage, ProtocolError
from secemb.protocols.secea import coding, field, wire
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SIGNED_BYTES, SecEAClient, _pad_seed, _unpadded
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN, SecEANode, SecEAParty
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import CtrDrbg
from secemb.secagg.keys import KeyPair

from secea_helpers import KEY_BITS, ROSTER, set_up_secea

SETS = [[1, 4, 9], [4, 7], [1, 7, 9, 12]]


def set_up(seed: int, sets: list[list[int]] = SETS, t: int = 1) -> tuple[SecEAParams, SecEANode, LocalStageServer,
                                                                           list[SecEAClient]]:
    return set_up_secea(sets, seed=seed, t=t)


def test_finding_a_hello_of_another_round_is_refused():
    """docs/wire-format.md: HELLO carries round 0; one with another round id was kept."""
    params = SecEAParams(3, 1, dim=2)
    node = SecEANode(params, union_bloom(16, 9))
    node.open_round(1, [0, 1, 2])
    client = SecEAClient(0, params, np.array([1]), key_bits=KEY_BITS, identity=ROSTER.enroll(0), _rng=CtrDrbg(1))
    hello = client.hello()
    other = hello[:16] + (1).to_bytes(8, "little") + hello[24:]
    with pytest.raises(InvalidMessage, match="round"):
        node.receive(1, "secea-keys", 0, other)
    node.receive(1, "secea-keys", 0, hello)  # nothing was kept


def test_upload_fields_off_the_rounds_parameters_are_refused_without_change():
    """Silo 0's UPLOAD with its M (union size), w, E (queries) or recipient count changed, a
    recipient that is itself or out of range, or made for another union: refused, and the
    genuine upload is accepted afterwards."""
    params, node, ex, clients = set_up(2)
    node.open_round(1, [0, 1, 2])
    rows = np.ones((3, 2))
    up = clients[0].upload(1, rows)
    h = HEADER_BYTES
    m, w, e, count = struct.unpack_from("<IHIH", up, h)
    assert (m, w, e, count) == (5, params.width, 3, 2)
    variants = {
        "M + 1": struct.pack("<IHIH", m + 1, w, e, count), "w + 1": struct.pack("<IHIH", m, w + 1, e, count),
        "E - 1": struct.pack("<IHIH", m, w, e - 1, count), "E > M": struct.pack("<IHIH", m, w, m + 1, count),
        "one recipient": struct.pack("<IHIH", m, w, e, 1),
    }
    for name, head in variants.items():
        with pytest.raises(InvalidMessage):
            node.receive(1, "secea-share", 0, up[:h] + head + up[h + 12:])
        assert node._round is not None and 0 not in node._round.received.get("secea-share", {}), name
    first = h + 12
    for v in (0, 3, 0xFFFF):  # itself, no such silo
        bad = up[:first] + struct.pack("<H", v) + up[first + 2:]
        with pytest.raises(InvalidMessage, match="addresses"):
            node.receive(1, "secea-share", 0, bad)
    # a well-formed UPLOAD over another union (a silo of another set-up): M is not this union's
    with pytest.raises(InvalidMessage, match="not the union's"):
        node.receive(1, "secea-share", 0, _reframed(up, m - 1))
    node.receive(1, "secea-share", 0, up)


def _reframed(upload: bytes, m: int) -> bytes:
    """``upload`` with M = ``m`` and its blocks cut to fit (a well-formed UPLOAD over ``m`` entities)."""
    h = HEADER_BYTES
    _, w, e, count = struct.unpack_from("<IHIH", upload, h)
    body, pos = [struct.pack("<IHIH", m, w, e if e <= m else m, count)], h + 12
    old = (len(upload) - pos) // count - 2
    for _ in range(count):
        body.append(upload[pos:pos + 2] + upload[pos + 2:pos + 2 + 4 * (m * w + min(e, m) * m)])
        pos += 2 + old
    return wire.pack(wire.Header(wire.UPLOAD, 1, 0, wire.SERVER), b"".join(body))


def test_a_silo_that_stops_before_sharing_aborts_the_round_when_all_are_needed_and_the_next_runs():
    """N = 3 needs every silo's shares (D = 3): a silo silent from secea-share aborts the round
    at that stage's close, no silo gets a result, the server kept nobody's relay; the next round
    (a later id) runs with the exact averages."""
    params, node, ex, clients = set_up(3)
    ex.admin.open_round(1, [0, 1, 2])
    rows = [np.full((len(s), 2), float(v)) for v, s in enumerate(SETS)]
    parties = {i: SecEAParty(c, 1, rows[i]) for i, c in enumerate(clients)}
    with pytest.raises(ProtocolError, match="2 silos shared"):
        play(SECEA_ROUND_PLAN, ex.admin, {i: ex.link(i) for i in parties}, parties, 1, silent_from={2: "secea-share"})
    assert ex.admin.round_status(1)["state"] == "aborted"
    assert all(p.average is None for p in parties.values())
    with pytest.raises(ProtocolError):
        node.reply(1, "secea-share", 0)
    ex.admin.open_round(2, [0, 1, 2])
    parties = {i: SecEAParty(c, 2, rows[i]) for i, c in enumerate(clients)}
    assert play(SECEA_ROUND_PLAN, ex.admin, {i: ex.link(i) for i in parties}, parties, 2).finished == [0, 1, 2]
    assert parties[0].average is not None and parties[0].average[1].tolist() == [0.5, 0.5]  # entity 4: silos 0, 1


def test_finding_a_silo_pads_a_round_id_once():
    """The pads are bound to (keys, round, direction): a second UPLOAD of one round id (a server
    that opens it again) would reuse them -- the silo refuses, before it makes anything."""
    params, node, ex, clients = set_up(4)
    rows = np.ones((3, 2))
    clients[0].upload(3, rows)
    for again in (3, 2):
        with pytest.raises(ProtocolError, match="not after round 3"):
            clients[0].upload(again, rows)
    clients[0].upload(4, rows)


def _substituted(signed: bool) -> tuple[SecEAParams, list[SecEAClient], SecEANode, dict[int, bytes], KeyPair, bytes]:
    """Three silos and a deviating server that hands silo 0 a directory in which silo 1's X25519
    key is its own (silo 1's certificate, signature and Paillier key kept), the others the
    honest one: the silos, the node, the HELLOs, the server's key pair and silo 0's directory."""
    params = SecEAParams(3, 1, dim=2)
    rng = CtrDrbg(5)
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, signed=signed,
                           identity=ROSTER.enroll(i) if signed else None, _rng=rng) for i, s in enumerate(SETS)]
    node = SecEANode(params, union_bloom(16, 9), signed=signed, _rng=rng)
    hellos = {i: c.hello() for i, c in enumerate(clients)}
    mine = KeyPair.generate(_rng=rng)
    forged = dict(hellos)
    forged[1] = wire.pack(wire.Header(wire.HELLO, 0, 1, wire.SERVER), mine.public + hellos[1][HEADER_BYTES + 32:])
    for i in (1, 2):
        clients[i].receive_directory(node.server.directory(hellos)[i])
    return params, clients, node, hellos, mine, node.server.directory(forged)[0]


def test_a_server_that_substitutes_a_directory_key_is_caught_before_the_key_is_used():
    """Session 22 (was ``test_limit_...``, below): silo 1 signed its keys, so the directory's
    entry with the server's key in place of silo 1's does not verify -- silo 0 refuses the
    directory naming silo 1 and the server's deviation, keeps nothing of it and pads nothing."""
    _, clients, _, _, _, directory = _substituted(signed=True)
    with pytest.raises(InvalidMessage, match="the directory gives silo 1 keys not signed by silo 1 .*silo 1's "
                                             "signature: the signature does not verify.*: the server deviated"):
        clients[0].receive_directory(directory)
    assert clients[0]._directory is None and clients[0]._peers == {}
    clients[0].set_union(np.array([1, 4, 7, 9, 12]))
    with pytest.raises(ProtocolError, match="before the directory"):
        clients[0].upload(1, np.ones((3, 2)))


def test_limit_unsigned_a_server_that_substitutes_a_directory_key_reads_a_silos_padded_shares():
    """What signing prevents, with the paper's unsigned protocol (``signed=False``, explicitly):
    SecEA's keys travel through the server, which the paper trusts to relay them (honest-but-
    curious).  A deviating server hands silo 0 a directory in which silo 1's X25519 key is its
    own: silo 0 accepts it (unsigned, it checks only its own entry), and the server removes the
    pad of silo 0's block for silo 1 -- every word a field element, the Lagrange share and queries
    in the clear."""
    params, clients, node, hellos, mine, directory = _substituted(signed=False)
    clients[0].receive_directory(directory)  # accepted
    for c in clients:
        c.set_union(np.array([1, 4, 7, 9, 12]))
    up = clients[0].upload(1, np.ones((3, 2)))
    m, e, blocks = node.server.read_upload(1, 0, up)
    block = dict(blocks)[1]
    silo0 = hellos[0][HEADER_BYTES:HEADER_BYTES + 32]
    words = _unpadded(_pad_seed(mine.private, silo0, 1, 0, 1), block)  # InvalidMessage unless all field elements
    assert words.size == m * params.width + e * m and words.max() < field.P
    # without the substitution the pad does not come off: random words are >= P about half the time
    with pytest.raises(InvalidMessage, match="field element"):
        _unpadded(_pad_seed(mine.private, silo0, 1, 0, 2), dict(blocks)[2])


def test_limit_a_silo_that_answers_wrongly_corrupts_anothers_averages_undetected():
    """A deviating silo (the model assumes honest-but-curious silos too) adds 1 to its answers
    for silo 0: silo 0's decoded averages change, and nothing in the protocol tells it."""
    params, node, ex, clients = set_up(6)
    node.open_round(1, [0, 1, 2])
    rows = [np.full((len(s), 2), 1.0) for s in SETS]
    for i, c in enumerate(clients):
        node.receive(1, "secea-share", i, c.upload(1, rows[i]))
    node.close(1, "secea-share")
    honest = coding.answer

    def wrong(query: np.ndarray, stored: np.ndarray) -> np.ndarray:
        return (honest(query, stored) + np.uint64(1)) % np.uint64(field.P)

    for i, c in enumerate(clients):
        relay = node.reply(1, "secea-share", i)
        assert relay is not None
        if i == 1:
            coding.answer = wrong
        try:
            node.receive(1, "secea-answer", i, c.answer(relay))
        finally:
            coding.answer = honest
    node.close(1, "secea-answer")
    result = node.reply(1, "secea-answer", 0)
    assert result is not None
    assert clients[0].finish(result).tolist() != [[1.0, 1.0]] * 3  # every average is 1.0; no error raised


def test_finding_a_hello_with_a_low_order_key_is_refused():
    """A silo's HELLO with a low-order X25519 key went into the directory, and every other
    silo's UPLOAD then failed (no pad can be derived from it): one silo stopped the deployment.
    Now the HELLO is refused (the node keeps nothing of it)."""
    params = SecEAParams(3, 1, dim=2)
    node = SecEANode(params, union_bloom(16, 9))
    node.open_round(1, [0, 1, 2])
    hello = SecEAClient(0, params, np.array([1]), key_bits=KEY_BITS, identity=ROSTER.enroll(0), _rng=CtrDrbg(7)).hello()
    for point in (bytes(32), (1).to_bytes(32, "little")):
        with pytest.raises(InvalidMessage, match="public key refused"):
            node.receive(1, "secea-keys", 0, hello[:HEADER_BYTES] + point + hello[HEADER_BYTES + 32:])
    node.receive(1, "secea-keys", 0, hello)


def test_finding_a_hello_with_another_paillier_modulus_size_is_refused():
    """A silo's HELLO with a Paillier modulus larger than the deployment's was taken: every
    other silo then encrypts its answers to it, and the server masks them, at that size's cost
    (the body limit allows moduli of hundreds of kilobits).  A node that knows the deployment's
    size (``secemb serve`` of ``--protocol secea``) refuses it; the genuine HELLO is then kept."""
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.secea.protocol import SecEAProtocol

    params = SecEAParams(3, 1, dim=2)
    node = SecEANode(params, union_bloom(16, 9), key_bits=KEY_BITS)
    node.open_round(1, [0, 1, 2])
    hello = SecEAClient(0, params, np.array([1]), key_bits=KEY_BITS, identity=ROSTER.enroll(0), _rng=CtrDrbg(8)).hello()
    keys = HEADER_BYTES + 32 + SIGNED_BYTES  # the X25519 key, the certificate and the signature
    for bits in (KEY_BITS + 8, 8 * KEY_BITS):
        big = ((1 << (bits - 1)) | 1).to_bytes(bits // 8, "big")  # odd, ``bits`` bits: parses as a modulus
        forged = wire.pack(wire.Header(wire.HELLO, 0, 0, wire.SERVER), hello[HEADER_BYTES:keys] + big)
        # refused by its length before the key is built since session 41 (S41-R1), by its bits before
        with pytest.raises(InvalidMessage, match=f"Paillier modulus refused \\({bits // 8} bytes"):
            node.receive(1, "secea-keys", 0, forged)
    node.receive(1, "secea-keys", 0, hello)
    # the protocol's server knows its deployment's size
    served = SecEAProtocol(ExchangeRun("ml-100k"), secea_key_bits=1536)._server(50).node
    assert isinstance(served, SecEANode) and served.key_bits == 1536
