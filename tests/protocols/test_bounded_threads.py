"""The bound check on a thread backend (issue 34 (b)): each server computes its projections and
verifier messages in ranges of users on the backend's threads; the messages are those of one
serial call, and a lying device is rejected whichever range it falls in."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_bounded_payloads import LAYOUTS, USERS, Round

from secemb.fss import rangeproof
from secemb.protocols.backends import SerialBackend, ThreadBackend
from secemb.protocols.secemb.bounds import bound_params


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_threaded_check_rejects_exactly_the_liars_in_every_range(layout: str, relay: bool) -> None:
    """Three threads, 14 devices (ranges 0-3, 4-8, 9-13): devices 2 and 11 upload a row
    coordinate of 2^(t+1) and prove their honest rows; both are left out, the rest exact."""
    rnd = Round(layout, relay, ThreadBackend(3))
    t = bound_params(rnd.cfg, USERS).bits
    liars = {2, 11}
    for uid in range(14):
        user = rnd.retrieve(uid)
        rows, dense = rnd.honest_upload(uid)
        if uid in liars:
            big = rows.copy()
            big[int(np.flatnonzero(rnd.slots[uid] >= 0)[0]), 0] += np.uint32(1 << (t + 1))
            rnd.upload(uid, big, dense, honest=False)
            assert user._kept is not None
            user._kept = dataclasses.replace(user._kept, rows=rows)  # proves the honest rows
        else:
            rnd.upload(uid, rows, dense)
        rnd.prove(uid)
    assert [len(rnd.s0._spans(14)), len(rnd.s1._spans(14))] == [3, 3]
    rnd.close_exact(liars)


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_threaded_verifier_messages_equal_one_serial_call(layout: str, relay: bool) -> None:
    rnd = Round(layout, relay, ThreadBackend(3))
    users = list(range(8))
    rnd.honest(users)
    challenges = [rnd.s0.challenge(u) for u in users]
    params = bound_params(rnd.cfg, USERS)
    shares = rangeproof.parse(params, 0, [rnd.s0._proofs[u] for u in users])
    contexts = rnd.s0._bound_contexts(users, challenges)
    query = b"q" * 16
    threaded = rnd.s0._verifier_messages(params, shares, users, challenges, contexts, query)
    serial = rangeproof.verifier_messages(params, 0, shares, rnd.s0._bound_projections(users, challenges), contexts,
                                          query)
    np.testing.assert_array_equal(threaded, serial)
    rnd.s0.backend = SerialBackend()
    assert len(rnd.s0._spans(8)) == 1
    np.testing.assert_array_equal(rnd.s0._verifier_messages(params, shares, users, challenges, contexts, query), serial)
