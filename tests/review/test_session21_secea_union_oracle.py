"""Session 21 (helper G, red team): selective failure of a SecEA silo's set-up on the union a
deviating server announces (finding G6: documented, not fixed -- a design choice for the lead).

The entity union is the set-up's answer of ``psu-unmask``.  A silo whose entities are not all in
the union it is handed cannot take part (it has no position for them), so its set-up fails --
after its last set-up message, but visibly to the server: a silo without a union uploads nothing
in the next round.  The server therefore learns one bit per set-up, "is the silo's set inside
the union I sent", of the silo's private entity set, which the PSU is there to hide.  A silo
whose set-up failed wrote no state, so the same silo (its process restarted, e.g. by a
supervisor) takes a new set-up, and a server that leaves one entity out of each union learns
the whole set, one entity per set-up (fewer by group testing).

Out of the paper's honest-but-curious model (the server computes the union honestly).  Options
for the lead, none implemented: a silo keeps its entities outside the announced union out of the
aggregation instead of failing (the message sizes still show ``|E_n ∩ U|`` unless
``query_bound`` is set: docs/security.md, "The sizes of SecEA's messages"); or a silo records
that it took a set-up, failed or not, and takes no second one without its operator.

Here, over HTTP: two set-ups of silo 0 (entities {1, 3, 5}) on a deviating node, one on the
union less 4 (an entity of silo 1 only), one on the union less 3 (an entity of silo 0): the
first commits and the silo uploads in the next round, the second fails and the silo cannot.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secemb.client.stages import take_part
from secemb.errors import InvalidMessage, ProtocolError
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import SECEA_PLAN, SecEANode, SecEAParty, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import CtrDrbg
from secemb.secagg import messages
from secemb.transport.http import HttpStageLink
from secemb.transport.network import ApiClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_deviating_server import DeviatingNode  # noqa: E402

KEY_BITS = 1024
SETS = [[1, 3, 5], [3, 4], [5, 6, 7, 8]]
UNION = [1, 3, 4, 5, 6, 7, 8]


@pytest.fixture
def nodes() -> Iterator[list[DeviatingNode]]:
    made: list[DeviatingNode] = []
    yield made
    for node in made:
        node.close()


def _set_up_without(nodes: list[DeviatingNode], entity: int, seed: int) -> tuple[SecEASetupParty, str]:
    """Silo 0's set-up (a fresh silo with its entities, as after a restart) on a node that hands it
    the union less ``entity``; its party and how the set-up ended for it."""
    params = SecEAParams(3, 1, dim=2)
    rng = CtrDrbg(seed)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, _rng=rng) for i, s in enumerate(SETS)]
    node = SecEANode(params, bloom, key_bits=KEY_BITS, _rng=CtrDrbg(seed + 1))
    doc = node.open_round(1, [0, 1, 2])
    parties = {u: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(seed + 2 + u)) for u, c in enumerate(clients)}

    def union_less(stage: str, answer: bytes) -> bytes | None:
        if stage != "psu-unmask":
            return answer
        assert messages.open_frame(answer, "union", 1)[1].tobytes()[4:] == np.array(UNION, "<u4").tobytes()
        less = np.array([e for e in UNION if e != entity])
        return messages.frame("union", 1, messages.SERVER, messages.rows_bytes(less))

    nodes.append(DeviatingNode(node, doc, {1: parties[1], 2: parties[2]}, tamper=union_less))

    class Silo:
        def party(self, doc: Any) -> Any:
            return parties[0]

    with ApiClient(nodes[-1].url, "user:0", b"k" * 32) as api:
        try:
            outcome = take_part(HttpStageLink(0, api), Silo(), SECEA_PLAN, doc, wait_s=5.0, poll_s=0.01)["outcome"]
        except InvalidMessage:
            outcome = "failed"
    return parties[0], outcome


def test_limit_a_silos_set_up_fails_exactly_when_the_union_leaves_out_one_of_its_entities(nodes) -> None:
    kept, outcome = _set_up_without(nodes, 4, seed=60)  # 4: silo 1's, not silo 0's
    assert outcome == "committed" and kept.union is not None
    assert SecEAParty(kept.client, 2, np.full((3, 2), 0.5)).message("secea-share")  # it uploads next round
    failed, outcome = _set_up_without(nodes, 3, seed=70)  # 3: silo 0's (and silo 1's)
    assert outcome == "failed" and failed.union is None
    with pytest.raises(ProtocolError, match="upload before the directory and the union are set"):
        SecEAParty(failed.client, 2, np.full((3, 2), 0.5)).message("secea-share")  # it cannot: the server sees
