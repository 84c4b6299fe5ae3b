"""Issue 34 (session 28, helper B): the ``part_0`` server 0 puts in its ``bound_request`` for each
device (:func:`secemb.fss.rangeproof.hint_of` of the kept proof, which server 1 joins to the
device's seed) is the one the device computed, whatever else its batch of proofs held.

The expected ``part_0`` is the device's own (the head of the message to server 1 that
:func:`~secemb.fss.rangeproof.prove` returns and the device does not send), not server 0's
``hint_of``; a proof refused in a batch (a second one of a user, a malformed one) must leave
nothing behind, and the round still accepts every honest device with the exact aggregate.  (Written
for hashing ``part_0`` at intake, ``handle_proof_many``, which was measured and dropped: see
docs/results.md, "Session 28 (helper B)"; a wrong context there failed this test.)"""

from __future__ import annotations

import pytest

from secemb.errors import InvalidMessage, ProtocolError
from secemb.fss import field, rangeproof
from secemb.framing import HEADER_BYTES
from secemb.protocols.secemb import user as user_module
from secemb.randomness import SEED_BYTES
from test_bounded_payloads import Round

ENTRY = 8 + 16 + 2 * rangeproof.PART_BYTES  # u64 user || challenge || part_0 || part_1


def _parts_of_request(request: bytes) -> dict[int, bytes]:
    """Each listed user's ``part_0`` in a ``bound_request`` message."""
    body = request[HEADER_BYTES + 16 :]
    assert len(body) % ENTRY == 0
    rows = [body[j : j + ENTRY] for j in range(0, len(body), ENTRY)]
    return {int.from_bytes(r[:8], "little"): r[24 : 24 + rangeproof.PART_BYTES] for r in rows}


@pytest.mark.parametrize(("layout", "relay"), [("full", False), ("cuckoo", True)])
def test_the_request_carries_each_devices_own_part_0_and_refused_proofs_leave_none(
        layout: str, relay: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six devices prove in one batch at server 0, with a second proof of device 1 (another
    witness: its own ``part_0`` differs), a truncated proof of device 4 (its honest one comes in a
    later batch) and a proof with an element ``p`` of device 5 (it sends nothing more): the
    request lists devices 0-4 with the ``part_0`` each device computed, device 5 is rejected as
    unproved, and the others pass with the aggregate exact."""
    own: dict[bytes, bytes] = {}  # msg0 -> the device's part_0 (msg1's head)
    prove = user_module.prove

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - rangeproof.prove's signature
        msg0, msg1 = prove(*args, **kwargs)
        own[msg0] = msg1[SEED_BYTES : SEED_BYTES + rangeproof.PART_BYTES]
        return msg0, msg1

    monkeypatch.setattr(user_module, "prove", spy)
    rnd = Round(layout, relay)
    users = list(range(6))
    for uid in users:
        rnd.retrieve(uid)
        rnd.upload(uid, *rnd.honest_upload(uid), honest=uid != 5)
    proofs = {uid: rnd.users[uid].bound_proof(rnd.s0.challenge(uid)) for uid in users}
    head = HEADER_BYTES + SEED_BYTES + rangeproof.PART_BYTES  # the witness's first element
    other = proofs[1][:head] + (int.from_bytes(proofs[1][head : head + 8], "little") ^ 1).to_bytes(8, "little") \
        + proofs[1][head + 8 :]
    bad_p = proofs[5][:head] + field.P.to_bytes(8, "little") + proofs[5][head + 8 :]
    got = rnd.s0.handle_proof_many([(0, proofs[0]), (1, proofs[1]), (1, other), (4, proofs[4][:-8]), (2, proofs[2]),
                                    (5, bad_p), (3, proofs[3])])
    assert [type(e) for e in got] == [type(None), type(None), ProtocolError, InvalidMessage, type(None),
                                      InvalidMessage, type(None)]
    assert rnd.s0.handle_proof_many([(4, proofs[4])]) == [None]
    request = rnd.s0.bound_request(users)
    assert len(own) == len(users)
    assert _parts_of_request(request) == {uid: own[proofs[uid][HEADER_BYTES:]] for uid in range(5)}
    rejected = rnd.s0.bound_rejected(rnd.s1.bound_answer(request))
    assert rejected == {5}
    include = [u for u in users if u not in rejected]
    sparse, dense = rnd.s0.combine(rnd.s1.aggregate_share(include), include)
    assert (sparse == rnd.expected).all() and (dense == rnd.expected_dense).all()
