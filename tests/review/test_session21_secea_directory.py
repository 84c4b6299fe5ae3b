"""Session 21 (helper G, red team): a deviating server against SecEA silos over HTTP -- the key
directory of the set-up.

SecEA's paper assumes an honest-but-curious server (docs/security.md, "One-server protocols"),
so a server that substitutes a key was out of its model and not caught (since session 22 the
silos sign their keys and verify the directory: ``test_session22_secea_signed.py``).  What
the deployment enforces anyway: a peer's input cannot crash a silo or make it work without
bound, and a key the deployment never admits is refused where it is read.  The server refuses a
HELLO with a low-order X25519 key or a Paillier modulus of another size than the deployment's
(docs/security.md: "an oversized one made every other silo's work grow with it"); the silo now
refuses the same keys in the DIRECTORY it is handed:

* **G1, a peer's Paillier modulus larger than the deployment's.**  A silo encrypts its answers to
  each requester under the requester's key from the directory, so a directory that gives a peer a
  larger modulus multiplies the silo's answer work: encrypting 4 answers took ~5 s of CPU under a
  16,384-bit modulus against ~5 ms under a 1,024-bit key (CPU clock, one run on the loaded
  development machine), and the directory's length field allows a 524,280-bit modulus (64 KiB),
  i.e. a silo that never answers.  Before, the silo took any odd
  modulus of at least 1,024 bits.
* **G2, a peer's low-order X25519 key.**  Before, the silo took it, its set-up committed and its
  state (the directory) was written; its first upload then failed on the pad agreement, and so
  did every later one, until a new deployment.  Now the set-up fails and nothing is written.

Each case: the silo's round fails with :class:`InvalidMessage` as soon as it reads the
directory, it sends nothing after its HELLO, it stores no directory; ``secemb client`` exits 1
with one line and writes no state file.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from phe import paillier
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.stages import device_state_file, take_part
from secemb.errors import InvalidMessage
from secemb.protocols.secea import wire
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.protocol import SecEASilo
from secemb.protocols.secea.staged import SECEA_PLAN, SecEANode, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import CtrDrbg
from secemb.secagg import messages
from secemb.secagg.identity import Roster
from secemb.secagg.keys import KeyPair
from secemb.server.exchange_deploy import ExchangeCredentials
from secemb.transport.http import HttpStageLink
from secemb.transport.network import ApiClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import init_one_server  # type: ignore[import-not-found]  # noqa: E402
from session21_deviating_server import DeviatingNode, honest  # noqa: E402


KEY_BITS = 1536
SETS = [[1, 3, 5], [3, 4], [5, 6, 7, 8]]
#: a low-order X25519 point (the all-zero u-coordinate: every agreement with it is all zeros)
LOW_ORDER = bytes(32)


#: a signed entry's certificate (120 bytes) and signature (64), between the X25519 key and len(n)
PROOF = 184
Entry = tuple[bytes, bytes, bytes]


def _directory(entries: list[Entry], receiver: int) -> bytes:
    """A DIRECTORY message (docs/secea.md, "Messages": u16 count, then per client u16 id, its
    X25519 key, its certificate and signature, u16 len(n), n big-endian) of ``entries`` (X25519
    key, certificate and signature, modulus bytes) for ``receiver``."""
    body = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<H", i) + x + proof + struct.pack("<H", len(n)) + n for i, (x, proof, n) in enumerate(entries))
    return wire.pack(wire.Header(wire.DIRECTORY, 0, wire.SERVER, receiver), body)


def _entries(directory: bytes) -> list[Entry]:
    """The (X25519 key, certificate and signature, modulus bytes) of each client of a DIRECTORY
    message, by the layout above."""
    body, pos, out = directory[32:], 2, []
    for _ in range(struct.unpack_from("<H", body)[0]):
        x, proof = body[pos + 2:pos + 34], body[pos + 34:pos + 34 + PROOF]
        size = struct.unpack_from("<H", body, pos + 34 + PROOF)[0]
        out.append((x, proof, body[pos + 36 + PROOF:pos + 36 + PROOF + size]))
        pos += 36 + PROOF + size
    assert pos == len(body)
    return out


def _odd_modulus(bits: int) -> bytes:
    """An odd ``bits``-bit number, as a modulus travels (what the silo's own checks let through
    before: odd, at least 1,024 bits)."""
    n = paillier.generate_paillier_keypair(n_length=bits)[0].n
    assert n.bit_length() == bits and n % 2
    return n.to_bytes(bits // 8, "big")


def _resized_moduli(entries: list[Entry]) -> list[Entry]:
    """Client 1's modulus 512 bits shorter, client 2's 512 bits longer: the directory as long as
    the honest one, so only the size of each key tells."""
    return [entries[0], (*entries[1][:2], _odd_modulus(KEY_BITS - 512)),
            (*entries[2][:2], _odd_modulus(KEY_BITS + 512))]


def _longer_directory(entries: list[Entry]) -> list[Entry]:
    return entries[:2] + [(*entries[2][:2], _odd_modulus(2 * KEY_BITS))]


def _low_order_key(entries: list[Entry]) -> list[Entry]:
    return entries[:2] + [(LOW_ORDER, *entries[2][1:])]


ATTACKS: dict[str, tuple[Callable[[list[Entry]], list[Entry]], str]] = {
    "smaller-and-larger-modulus": (_resized_moduli, "gives client 1 a 1024-bit Paillier modulus, not the "
                                                    "deployment's 1536 bits"),
    "longer-directory": (_longer_directory, r"the answer of secea-keys: 1462 bytes, longer than any honest answer "
                                            r"\(1270 bytes\)"),
    "low-order-key": (_low_order_key, "peer public key refused"),
}


def _tamper(attack: Callable[[list[Entry]], list[Entry]]) -> Callable[[str, bytes], bytes | None]:
    def tamper(stage: str, answer: bytes) -> bytes | None:
        return _directory(attack(_entries(answer)), 0) if stage == "secea-keys" else answer
    return tamper


def _set_up(nodes: list[DeviatingNode], tamper: Callable[[str, bytes], bytes | None]
            ) -> tuple[DeviatingNode, SecEASetupParty]:
    """A set-up of three silos (N = 3, T = 1, 1,024-bit keys) on a deviating node; silo 0's party."""
    params = SecEAParams(3, 1, dim=2)
    rng = CtrDrbg(21)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    roster = Roster.generate()
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=roster.enroll(i), _rng=rng)
               for i, s in enumerate(SETS)]
    node = SecEANode(params, bloom, key_bits=KEY_BITS, _rng=CtrDrbg(22))
    doc = node.open_round(1, [0, 1, 2])
    parties = {u: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(30 + u)) for u, c in enumerate(clients)}
    nodes.append(DeviatingNode(node, doc, {1: parties[1], 2: parties[2]}, tamper=tamper))
    return nodes[-1], parties[0]


def _take_part(server: DeviatingNode, party: Any) -> dict[str, Any]:
    class Silo:
        def party(self, doc: Any) -> Any:
            return party

    with ApiClient(server.url, "user:0", b"k" * 32) as api:
        return take_part(HttpStageLink(0, api), Silo(), SECEA_PLAN, server.doc, wait_s=5.0, poll_s=0.01)


def test_an_honest_set_up_through_the_deviating_node_commits(nodes) -> None:
    """The harness: without a deviation silo 0's set-up over HTTP commits with the union."""
    server, party = _set_up(nodes, honest)
    assert _take_part(server, party)["outcome"] == "committed"
    assert server.posted == ["secea-keys", "psu-advertise", "psu-shares", "psu-masked", "psu-consistency",
                             "psu-unmask"]
    assert party.union is not None and party.union.tolist() == [1, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_silo_refuses_a_directory_key_the_deployment_never_admits(nodes, attack: str) -> None:
    change, why = ATTACKS[attack]
    server, party = _set_up(nodes, _tamper(change))
    with pytest.raises(InvalidMessage, match=why):
        _take_part(server, party)
    assert server.posted == ["secea-keys"]  # nothing sent after the HELLO
    assert party.client._directory is None and party.client._peers == {} and party.union is None


def test_secemb_client_of_a_secea_silo_fails_its_set_up_on_an_oversized_directory_key(nodes, tmp_path: Path) -> None:
    """``secemb client`` as deployed: one JSON line, exit 1; its state file records only that it
    took part in set-up 1 (no keys, no directory: session 21, helper K, finding G6)."""
    root = tmp_path / "dep"
    init_one_server(root, "--protocol", "secea", "--dataset", "synthetic", "--users-per-round", "3",
                    "--option", f"secea_key_bits={KEY_BITS}", "--option", "secea_items=6")
    protocol = ExchangeCredentials.load(root / "devices" / "device-0.json").protocol(None)
    node = protocol.make_server().node
    doc = node.open_round(1, [0, 1, 2])
    others = {}
    for u in (1, 2):
        silo = protocol.make_device(u)
        assert isinstance(silo, SecEASilo)
        identity = ExchangeCredentials.load(root / "devices" / f"device-{u}.json").identity
        assert identity is not None
        silo.identity = identity
        others[u] = silo.party(doc)
    nodes.append(DeviatingNode(node, doc, others, tamper=_tamper(_resized_moduli)))
    creds = json.loads((root / "devices" / "device-0.json").read_text())
    creds |= {"url": nodes[-1].url, "ca": str((root / "devices" / creds["ca"]).resolve())}
    path = root / "devices" / "device-0.json"
    path.write_text(json.dumps(creds))
    res = CliRunner().invoke(app, ["client", "--user", "0", "--credentials", str(path), "--wait", "10"])
    assert res.exit_code == 1 and (res.exception is None or isinstance(res.exception, SystemExit)), res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert json.loads(lines[0]) == {"user": 0, "error": "round 1: the directory gives client 1 a 1024-bit Paillier "
                                                        "modulus, not the deployment's 1536 bits"}
    assert nodes[-1].posted == ["secea-keys"]
    kept = ExchangeCredentials.load(path)
    meta, arrays = device_state_file(kept.path, 0, kept.doc, kept.key, kept.ca.read_bytes()).load()
    assert meta["setup_round"] == 1 and "client" not in meta and "directory" not in arrays


def test_a_silo_refuses_a_psu_key_list_of_more_silos_than_the_deployment(nodes) -> None:
    """The set-up's private union runs over secure aggregation: a key list of 3 + 1000 silos
    (invented ones after the real, each with a valid key and a certificate and signature's room;
    docs/secagg.md's signed layout) is longer than the longest honest one of 3 silos
    (32 + 4 + 3 x (68 + 216) = 888 bytes) and refused before the silo computes a share for any of
    them (finding G3, ``test_session21_sfsl_deviating.py``)."""
    def inflate(stage: str, answer: bytes) -> bytes | None:
        if stage != "psu-advertise":
            return answer
        count = struct.unpack_from("<I", answer, 32)[0]
        key = KeyPair.generate().public
        fake = b"".join(struct.pack("<I", 100 + i) + key + key + bytes(216) for i in range(1000))
        return messages.frame("keys", 1, messages.SERVER, struct.pack("<I", count + 1000), answer[36:], fake)

    server, party = _set_up(nodes, inflate)
    with pytest.raises(InvalidMessage, match=r"the answer of psu-advertise: 284888 bytes, longer than any honest "
                                             r"answer \(888 bytes\)"):
        _take_part(server, party)
    assert server.posted == ["secea-keys", "psu-advertise"] and party.union is None


@pytest.mark.parametrize("round_id", [-1, 2**62, 2**64, True])
def test_a_silo_refuses_a_round_id_off_the_nodes_range_as_an_invalid_message(tmp_path: Path, round_id: Any) -> None:
    """A SecEA node numbers its rounds in ``[0, 2^62)`` (``SecEANode.open_round``); another id in a
    round document is an ``InvalidMessage`` of the silo's document check (it was an
    ``InvalidParameters`` of the secure aggregation's round id, or taken: ``2^62``)."""
    root = tmp_path / "dep"
    init_one_server(root, "--protocol", "secea", "--dataset", "synthetic", "--users-per-round", "3",
                    "--option", f"secea_key_bits={KEY_BITS}", "--option", "secea_items=6")
    protocol = ExchangeCredentials.load(root / "devices" / "device-0.json").protocol(None)
    doc = protocol.make_server().node.open_round(1, [0, 1, 2])
    silo, identity = protocol.make_device(0), ExchangeCredentials.load(root / "devices" / "device-0.json").identity
    assert isinstance(silo, SecEASilo) and identity is not None
    silo.identity = identity
    assert isinstance(silo.party(doc), SecEASetupParty)  # the honest document is taken
    with pytest.raises(InvalidMessage, match="not a SecEA round document for silo 0"):
        silo.party(doc | {"round_id": round_id})


def test_a_silo_refuses_a_union_without_one_of_its_entities_as_an_invalid_message(nodes) -> None:
    """The union is the server's answer: one that leaves out an entity silo 0 holds (3 of
    {1, 3, 5}) is an ``InvalidMessage`` (docs/security.md: a server's malformed answer; it was an
    ``InvalidParameters``, the class of a caller's mistake), and the set-up is not done: no union,
    nothing written (``on_done`` not called)."""
    def without_3(stage: str, answer: bytes) -> bytes | None:
        if stage != "psu-unmask":
            return answer
        return messages.frame("union", 1, messages.SERVER, messages.rows_bytes(np.array([1, 4, 5, 6, 7, 8])))

    server, party = _set_up(nodes, without_3)
    done: list[bool] = []
    party.on_done = lambda: done.append(True)
    with pytest.raises(InvalidMessage, match="union leaves out 1 of silo 0's 3 entities: the server deviated"):
        _take_part(server, party)
    assert server.posted == ["secea-keys", "psu-advertise", "psu-shares", "psu-masked", "psu-consistency",
                             "psu-unmask"]
    assert party.union is None and party.client._union is None and done == []
