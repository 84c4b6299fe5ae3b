"""Session 21 (helper G, red team): every answer of SecEA's set-up and of an aggregation round, cut,
extended or with its first count field at its maximum by a deviating server, fails the silo's
round over HTTP with an :class:`InvalidMessage` -- never another exception or a hang -- and the
silo sends nothing after it and keeps nothing of it: no union after a set-up answer, no averages
after a round's (docs/security.md: "A server's malformed answers are refused cleanly by devices";
the layouts are docs/secea.md's and docs/secagg.md's, whose parsers check every length).

The in-process search behind these cases (every answer, 60 mutations each: cuts, extensions, u16
and u32 fields set to 0..3 and their maximum, byte flips at 24 offsets) found no other exception;
the mutations that are taken are the documented limits (a ciphertext changed: wrong averages,
undetected; a key substituted was one until session 22 signed the directory).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secemb.client.stages import take_part
from secemb.errors import InvalidMessage
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import SECEA_PLAN, SECEA_ROUND_PLAN, SECEA_SETUP_PLAN, SecEANode, SecEAParty, \
    SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import CtrDrbg
from secemb.secagg.identity import Roster
from secemb.sim.local import LocalStageServer
from secemb.sim.player import play
from secemb.transport.http import HttpStageLink
from secemb.transport.network import ApiClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_deviating_server import DeviatingNode  # noqa: E402

KEY_BITS = 1024
SETS = [[1, 3, 5], [3, 4], [5, 6, 7, 8]]
MUTATIONS: dict[str, Callable[[bytes], bytes]] = {
    "cut": lambda a: a[:-1],
    "extended": lambda a: a + b"\0",
    "count-max": lambda a: a[:32] + struct.pack("<H", 0xFFFF) + a[34:],  # the first field after the header
}


def _world() -> tuple[SecEANode, list[SecEAClient], Any]:
    params = SecEAParams(3, 1, dim=2)
    rng = CtrDrbg(41)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    roster = Roster.generate()
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=roster.enroll(i), _rng=rng)
               for i, s in enumerate(SETS)]
    return SecEANode(params, bloom, key_bits=KEY_BITS, _rng=CtrDrbg(42)), clients, bloom


def _take_part(server: DeviatingNode, party: Any) -> None:
    class Silo:
        def party(self, doc: Any) -> Any:
            return party

    with ApiClient(server.url, "user:0", b"k" * 32) as api:
        take_part(HttpStageLink(0, api), Silo(), SECEA_PLAN, server.doc, wait_s=5.0, poll_s=0.01)


def _tamper(stage: str, mutation: str) -> Callable[[str, bytes], bytes | None]:
    change = MUTATIONS[mutation]
    return lambda got, answer: change(answer) if got == stage else answer


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("stage", SECEA_SETUP_PLAN.stages)
def test_a_malformed_set_up_answer_fails_the_silos_set_up_cleanly(nodes, stage: str, mutation: str) -> None:
    node, clients, bloom = _world()
    doc = node.open_round(1, [0, 1, 2])
    parties = {u: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(50 + u)) for u, c in enumerate(clients)}
    server = DeviatingNode(node, doc, {1: parties[1], 2: parties[2]}, tamper=_tamper(stage, mutation))
    nodes.append(server)
    with pytest.raises(InvalidMessage):
        _take_part(server, parties[0])
    stages = list(SECEA_SETUP_PLAN.stages)
    assert server.posted == stages[:stages.index(stage) + 1]
    assert parties[0].union is None
    if stage == "secea-keys":
        assert clients[0]._directory is None


def _round(nodes: list[DeviatingNode], tamper: Callable[[str, bytes], bytes | None]
           ) -> tuple[DeviatingNode, SecEAParty, list[np.ndarray]]:
    """Round 2 on a deviating node after a set-up in process; silo 0's party and the averages it wrote."""
    node, clients, bloom = _world()
    local = LocalStageServer(node)
    setup = {u: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(50 + u)) for u, c in enumerate(clients)}
    doc = local.admin.open_round(1, [0, 1, 2])
    assert play(SECEA_PLAN.only(doc["stages"]), local.admin, {u: local.link(u) for u in range(3)}, setup,
                1).finished == [0, 1, 2]
    written: list[np.ndarray] = []
    parties = {u: SecEAParty(c, 2, np.full((len(SETS[u]), 2), 0.5), on_average=written.append if u == 0 else None)
               for u, c in enumerate(clients)}
    doc = node.open_round(2, [0, 1, 2])
    nodes.append(DeviatingNode(node, doc, {1: parties[1], 2: parties[2]}, tamper=tamper))
    return nodes[-1], parties[0], written


def test_an_honest_round_through_the_deviating_node_writes_the_averages(nodes) -> None:
    """The harness: every silo's rows are 0.5, so every average is 0.5."""
    server, party, written = _round(nodes, lambda got, answer: answer)
    _take_part(server, party)
    assert server.posted == list(SECEA_ROUND_PLAN.stages) and len(written) == 1
    assert np.array_equal(written[0], np.full((3, 2), 0.5))


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("stage", SECEA_ROUND_PLAN.stages)
def test_a_malformed_round_answer_fails_the_silos_round_cleanly(nodes, stage: str, mutation: str) -> None:
    server, party, written = _round(nodes, _tamper(stage, mutation))
    with pytest.raises(InvalidMessage):
        _take_part(server, party)
    stages = list(SECEA_ROUND_PLAN.stages)
    assert server.posted == stages[:stages.index(stage) + 1]
    assert party.average is None and written == []  # no averages written into silo 0's model
