"""Issue 34 (session 25, helper G): the bound check's per-device hashing and expansion at the
servers, once a device and batched.

* Server 0 hashes each device's witness share into ``part_0`` once: :meth:`bound_request` sends it
  as the hint and keeps it, and :meth:`bound_rejected` verifies with it (before, the verifier
  hashed the 4.5 KB share again).  Server 1 makes each ``seed_part`` once, for the binding check of
  the forwarded ``part_1`` and its verifier alike.
* A relay server 1 expands the dense shares of the devices it checks as one batch (one
  conversion call, :func:`~secemb.protocols.secemb.relay.relay_prgs`), not one call a device.

The decisions are those of the round's devices: the liars (a row coordinate of ``2^(t+1)``, the
honest rows proven) are rejected and the aggregate over the others is exact (expected values from
the plaintext uploads, :class:`test_bounded_payloads.Round`)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from test_bounded_payloads import Round

from secemb.fss import rangeproof
from secemb.protocols.secemb import relay
from secemb.protocols.secemb.bounds import bound_bits


def _liar(rnd: Round, uid: int) -> None:
    """Device ``uid`` uploads a row coordinate of ``2^(t+1)`` and proves its honest rows."""
    user = rnd.retrieve(uid)
    rows, dense = rnd.honest_upload(uid)
    big = rows.copy()
    big[int(np.flatnonzero(rnd.slots[uid] >= 0)[0]), 0] += np.uint32(1 << (bound_bits(32, 20) + 1))
    rnd.upload(uid, big, dense, honest=False)
    assert user._kept is not None
    user._kept = dataclasses.replace(user._kept, rows=rows)
    rnd.prove(uid)


@pytest.mark.parametrize(("layout", "relay_on"), [("cuckoo", True), ("full", False)])
def test_each_server_hashes_its_own_part_of_a_device_once(layout: str, relay_on: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = Round(layout, relay_on)
    rnd.honest([0, 1, 3, 4, 6])
    for uid in (2, 5):
        _liar(rnd, uid)
    hashed: Counter[int] = Counter()
    parts = rangeproof._parts  # the servers' parts, a batch a call (session 30)

    def counted(party: int, contexts: list[bytes], keys: np.ndarray, inputs: np.ndarray) -> list[bytes]:
        hashed[party] += len(contexts)
        return parts(party, contexts, keys, inputs)

    monkeypatch.setattr(rangeproof, "_parts", counted)
    rnd.close_exact({2, 5})
    assert hashed == {0: 7, 1: 7}  # one part_0 and one part_1 a device (before: 14 and 14)


def test_a_relay_server_1_expands_the_checked_devices_dense_shares_in_one_conversion(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = Round("cuckoo", True)
    users = [0, 1, 2, 3, 4]
    rnd.honest(users)
    challenges = [rnd.s0.challenge(u) for u in users]
    conversions: list[int] = []
    convert = relay.convert

    def counted(leaves: np.ndarray, *args: object) -> np.ndarray:
        conversions.append(len(leaves))
        return convert(leaves, *args)

    monkeypatch.setattr(relay, "convert", counted)
    rnd.s1._bound_projections(users, challenges)
    assert conversions == [len(users)]  # one call for the five (before: five calls of one)
    shares = rnd.s1._dense_shares(users)
    for u, share in zip(users, shares, strict=True):
        np.testing.assert_array_equal(share, rnd.s1._dense_share(u))  # the per-device expansion
        # with server 0's explicit share: the device's dense vector
        np.testing.assert_array_equal(share + rnd.s0._dense_share(u), rnd.honest_upload(u)[1])
    assert rnd.s1._dense_shares([]) == []
    rnd.close_exact(set())
