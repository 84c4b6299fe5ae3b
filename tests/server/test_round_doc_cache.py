"""Issue 37: a server builds the fixed parts of a round's document once per round
(:meth:`secemb.server.shared.Node._round_doc`), yet every caller gets a document of its own --
what one device's caller changes in it reaches no other -- and a new round or DENSE message
gives a new document.  Both servers in process (:func:`deviation_helpers.in_process`)."""

from __future__ import annotations

import dataclasses
import hashlib

from deviation_helpers import USERS, WAIT_S, in_process


def _opened():  # noqa: ANN202 - test helper
    """Server 0 of an in-process pair with a round open for USERS, and that round."""
    pair, _ = in_process()
    leader = pair.leader
    leader.open_round(participants=USERS, deadline_s=WAIT_S)
    assert leader.round is not None
    return leader, leader.round


def test_each_round_document_is_the_callers_own_and_follows_the_round():
    leader, rnd = _opened()
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


def test_round_document_blocks_are_the_callers_own_and_the_rounds_changes_show():
    """H8: the per-round parts (protocol, model, training blocks as well as the config) are
    built once, but every caller gets its own copy of each; the round's changing fields
    (state, deadline) are read on every call, not cached with them."""
    leader, rnd = _opened()
    first = leader.round_info(USERS[0])
    want_protocol = dict(first["protocol"])
    assert first["model"] == leader.model_doc and first["model"] is not leader.model_doc
    assert first["training"]["lr"] == leader.cfg.lr
    for block in ("protocol", "model", "training"):
        first[block]["name" if block != "training" else "lr"] = "changed by a caller"
    second = leader.round_info(USERS[1])
    assert second["protocol"] == want_protocol
    assert second["model"]["name"] == leader.cfg.model and leader.model_doc["name"] == leader.cfg.model
    assert second["training"]["lr"] == leader.cfg.lr
    with leader.lock:
        rnd.state, rnd.deadline = "closing", rnd.deadline + 5.0  # the fields that change within a round
    third = leader.round_info(None)
    assert third["state"] == "closing" and third["deadline_unix"] == second["deadline_unix"] + 5.0
    assert third["participant"] is None and second["participant"] is True
