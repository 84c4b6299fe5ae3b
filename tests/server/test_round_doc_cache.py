"""Issue 37: a server builds the fixed parts of a round's document once per round
(:meth:`secemb.server.shared.Node._round_doc`), yet every caller gets a document of its own --
what one device's caller changes in it reaches no other -- and a new round or DENSE message
gives a new document.  Both servers in process (:func:`deviation_helpers.in_process`)."""

from __future__ import annotations

import dataclasses
import hashlib

from deviation_helpers import USERS, WAIT_S, in_process


def test_each_round_document_is_the_callers_own_and_follows_the_round():
    pair, servers = in_process()
    leader = pair.leader
    leader.open_round(participants=USERS, deadline_s=WAIT_S)
    rnd = leader.round
    assert rnd is not None
    first = leader.round_info(USERS[0])
    assert first["config"] == dataclasses.asdict(rnd.rc)
    assert first["dense_sha256"] == hashlib.sha256(rnd.dense_msg).hexdigest()
    first["config"]["m_prime"] = -1  # a caller's change to its own copy
    first["participant"] = "changed"
    second = leader.round_info(USERS[1])
    assert second["config"] == dataclasses.asdict(rnd.rc) and second["participant"] is True
    assert second["config"] is not first["config"]
    rnd.dense_msg = rnd.dense_msg + b"another"  # a new DENSE message: a new digest, not the cached one
    assert leader.round_info(None)["dense_sha256"] == hashlib.sha256(rnd.dense_msg).hexdigest()
