"""Session 21 (issue 34): the servers drop a device's payload sums once its proof is checked
(their memory goes back before the aggregate shares), and nothing else changes: the verdicts,
the aggregate, and the projections a server would compute again (from a walk of the keys).

Driven at the protocol roles (``tests/protocols/test_bounded_payloads.py``'s ``Round``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_bounded_payloads as tbp  # type: ignore[import-not-found]  # noqa: E402

from secemb.errors import InvalidMessage  # noqa: E402


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("cuckoo", False), ("full", True), ("full", False)])
def test_checked_users_sums_are_dropped_and_nothing_else_changes(layout: str, relay: bool) -> None:
    rnd = tbp.Round(layout, relay)
    rnd.honest(range(3))
    rnd.retrieve(3)
    rnd.upload(3, *rnd.honest_upload(3), honest=False)
    other = bytes(16) if rnd.s0.challenge(3) != bytes(16) else b"\x01" * 16
    rnd.s0.handle_proof(3, rnd.users[3].bound_proof(other))  # a proof for another challenge: rejected
    users, challenges = [0, 1, 2, 3], [rnd.s0.challenge(u) for u in range(4)]
    before = [s._bound_projections(users, challenges) for s in (rnd.s0, rnd.s1)]
    kept = layout == "cuckoo"  # the full layout keeps none: it walks the keys at the check (session 31)
    assert all((s._absorbed[u].sums is not None) == kept for s in (rnd.s0, rnd.s1) for u in users)
    rnd.close_exact({3})
    assert all(s._absorbed[u].sums is None for s in (rnd.s0, rnd.s1) for u in users)
    after = [s._bound_projections(users, challenges) for s in (rnd.s0, rnd.s1)]  # walked again: the same
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_a_failed_answer_keeps_server_0s_sums() -> None:
    """A malformed answer leaves the request pending and server 0's sums in place; the real
    answer then decides and drops them."""
    rnd = tbp.Round("cuckoo", True)
    rnd.honest(range(2))
    answer = rnd.s1.bound_answer(rnd.s0.bound_request([0, 1]))
    with pytest.raises(InvalidMessage):  # one byte short
        rnd.s0.bound_rejected(answer[:-1])
    assert all(rnd.s0._absorbed[u].sums is not None for u in (0, 1))
    assert rnd.s0.bound_rejected(answer) == set()
    assert all(rnd.s0._absorbed[u].sums is None for u in (0, 1))
