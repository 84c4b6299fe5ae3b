"""Session 21 (helper G, red team): every answer of an SFSL round, cut, extended or with its
first count field at its maximum by a deviating server, fails the device's round over HTTP with
an :class:`InvalidMessage` -- never another exception or a hang -- and the device sends nothing
after it (docs/security.md: "A server's malformed answers are refused cleanly by devices ...
no traceback, no state change"; the layouts are docs/secagg.md's and sfsl/wire.py's, whose parsers
check every length).  Before its download request the device's private state is as it was; after
it, the perturbation of Algorithm 2 over the announced union is the device's own (the round's
request is the protocol's leakage) and its local training the round's.

The in-process search behind these cases (every answer, 30 mutations each: cuts, extensions, count
fields 0, 1, max, byte flips at 18 offsets) found no other exception; the mutations that are
taken are the documented limits (a key's bytes substituted, a model value changed).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from secemb.client.stages import take_part
from secemb.errors import InvalidMessage
from secemb.protocols.sfsl.staged import SFSL_PLAN
from secemb.transport.http import HttpStageLink
from secemb.transport.network import ApiClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_deviating_server import DeviatingNode  # noqa: E402

STAGES = [s for s in SFSL_PLAN.stages if SFSL_PLAN.replies(s)]
MUTATIONS: dict[str, Callable[[bytes], bytes]] = {
    "cut": lambda a: a[:-1],
    "extended": lambda a: a + b"\0",
    "count-max": lambda a: a[:32] + struct.pack("<I", 0xFFFFFFFF) + a[36:],  # the first field after the header
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("stage", STAGES)
def test_a_malformed_answer_fails_the_devices_round_cleanly(sfsl, nodes, stage: str, mutation: str) -> None:
    node = sfsl.make_server().node
    doc = node.open_round(1, [0, 1, 2])
    change = MUTATIONS[mutation]
    server = DeviatingNode(node, doc, {u: sfsl.make_device(u).party(doc) for u in (1, 2)},
                           tamper=lambda got, answer: change(answer) if got == stage else answer)
    nodes.append(server)
    device = sfsl.make_device(0)
    before = device.device.user_embedding.copy()
    with ApiClient(server.url, "user:0", b"k" * 32) as api, pytest.raises(InvalidMessage):
        take_part(HttpStageLink(0, api), device, SFSL_PLAN, doc, wait_s=5.0, poll_s=0.01)
    stages = list(SFSL_PLAN.stages)
    assert server.posted == stages[:stages.index(stage) + 1]  # nothing sent after the answer
    if stages.index(stage) < stages.index("download"):
        assert np.array_equal(device.device.user_embedding, before)
        assert device.device.perturber.yes.size == device.device.perturber.no.size == 0
