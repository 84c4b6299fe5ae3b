"""One round of a one-server node (SFSL, SecEA) driven in process, for the tests of tests/server
and tests/protocols: :func:`drive` (session 24: the two drivers of test_s23_secagg_complaints and
test_sfsl_attacks, one with a spoiling function, one with a callback before each message).  A
module of its own in tests/, imported by name, as round_setup is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from secemb.protocols.stages import RoundPlan

Edit = Callable[[str, int, bytes], bytes]
"""``edit(stage, u, body)``: what party ``u`` sends in ``stage`` instead of its message ``body``
(an attack, or a spy that keeps the body and returns it)."""


def drive(node: Any, plan: RoundPlan, round_id: int, parties: Mapping[int, Any], edit: Edit | None = None) -> None:
    """Every stage of ``plan`` for round ``round_id``: each party's message (``edit``'s instead,
    when given) to ``node``, the operator's close, then, where the stage replies, every party's
    answer, which must be there."""
    for stage in plan.stages:
        for u, party in parties.items():
            body = party.message(stage)
            node.receive(round_id, stage, u, body if edit is None else edit(stage, u, body))
        node.close(round_id, stage)
        if plan.replies(stage):
            for u, party in parties.items():
                answer = node.reply(round_id, stage, u)
                assert answer is not None
                party.accept(stage, answer)
