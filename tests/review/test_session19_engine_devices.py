"""Session 19 review (helper J) of bounded payloads (issue 34 (b)): what a device can do to the
check, and whether an honest device at the clip passes.  Regression tests (they pass): each pins
a property the bound's argument relies on.

* A device that replays another device's proof (same batch, so the same challenge) is
  rejected (its projections differ, and the proof's context binds each device's key digest
  ``K``) and the victim is included; a batch of proofs with a malformed one in the middle keeps the others.
* An honest device whose contribution has L2 norm exactly ``C2`` (all in one coordinate, or
  spread evenly over every coordinate with alternating signs) passes: encoding rounds each
  coordinate by at most half a unit, far inside the ``sqrt(40.5)x`` margin between ``C2 2^f`` and ``T`` (``9x`` until
  session 31).

Driven at the protocol roles by hand (``tests/protocols/test_bounded_payloads.py``'s
``Round``); expected aggregates are computed here from the plaintext honest devices upload.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
import test_bounded_payloads as tbp  # type: ignore[import-not-found]  # noqa: E402

from secemb.errors import InvalidMessage  # noqa: E402
from secemb.protocols.secemb.bounds import clip_norm, clip_upload  # noqa: E402
from secemb.ring import FixedPoint  # noqa: E402

FP = FixedPoint(32, 16)


def test_a_replayed_proof_of_another_device_is_rejected_and_the_victim_is_included() -> None:
    rnd = tbp.Round("cuckoo", False)
    rnd.honest(range(3))
    rnd.retrieve_batch([3, 4])
    uploads = {uid: rnd.users[uid].upload(*rnd.honest_upload(uid)) for uid in (3, 4)}
    assert rnd.s0.handle_upload_many([(uid, uploads[uid][0]) for uid in (3, 4)]) == [None, None]  # one batch
    for uid in (3, 4):
        u1 = uploads[uid][1]
        assert u1 is not None
        rnd.s1.handle_upload(uid, u1)
    rows, dense = rnd.honest_upload(3)
    real = rnd.slots[3] >= 0
    np.add.at(rnd.expected, rnd.slots[3][real], rows[real])
    rnd.expected_dense += dense
    assert rnd.s0.challenge(3) == rnd.s0.challenge(4)  # one challenge a batch: the replay's best case
    victim = rnd.users[3].bound_proof(rnd.s0.challenge(3))
    assert rnd.s0.handle_proof_many([(3, victim), (4, victim)]) == [None, None]  # device 4 replays 3's proof
    rnd.close_exact({4})


def test_a_malformed_proof_in_a_batch_keeps_the_others() -> None:
    rnd = tbp.Round("full", True)
    for uid in range(4):
        rnd.retrieve(uid)
        rnd.upload(uid, *rnd.honest_upload(uid), honest=uid != 1)
    proofs = {uid: rnd.users[uid].bound_proof(rnd.s0.challenge(uid)) for uid in range(4)}
    outs = rnd.s0.handle_proof_many([(0, proofs[0]), (1, proofs[1][:-8]), (2, proofs[2]), (3, proofs[3]),
                                     (0, proofs[0])])
    assert outs[0] is None and outs[2] is None and outs[3] is None
    assert isinstance(outs[1], InvalidMessage) and outs[4] is not None  # truncated; a second proof of 0
    rnd.close_exact({1})  # device 1 sent no valid proof


@pytest.mark.parametrize("shape", ["one-coordinate", "spread"])
def test_an_honest_upload_of_norm_exactly_c2_passes(shape: str) -> None:
    rnd = tbp.Round("full", False)
    rnd.honest(range(2))
    rnd.retrieve(2)
    real = rnd.slots[2] >= 0
    rows = np.zeros((rnd.cfg.slots, rnd.cfg.width))
    dense = np.zeros(rnd.cfg.dense_size)
    c2 = clip_norm(FP, tbp.USERS, layout="full")
    assert c2 == pytest.approx(2**25 / (math.sqrt(40.5) * 2**16))  # t = 26 at 20 users, T = 2^25 (hand value)
    if shape == "one-coordinate":
        dense[0] = 3 * c2  # three times over: the clip brings it to C2
    else:
        n = int(real.sum()) * rnd.cfg.width + rnd.cfg.dense_size
        signs = np.where(np.arange(n) % 2, -1.0, 1.0)
        rows[real] = (signs[: int(real.sum()) * rnd.cfg.width] * 2 * c2 / np.sqrt(n)).reshape(-1, rnd.cfg.width)
        dense[:] = signs[-rnd.cfg.dense_size :] * 2 * c2 / np.sqrt(n)
    rows, dense = clip_upload(FP, tbp.USERS, rows, dense, layout="full")
    assert np.sqrt((rows**2).sum() + (dense**2).sum()) == pytest.approx(c2, rel=1e-12)
    rnd.upload(2, FP.encode(rows), FP.encode(dense))
    rnd.prove(2)
    rnd.close_exact(set())
