"""Review of session 18's round-document cache (fc9a51a, ``Node._round_doc`` / ``_DocParts``):

* every block of a document is the caller's own at every depth -- the model block's
  ``hparams`` and the protocol block's ``options`` are dicts inside the blocks; the cache
  copied the blocks one level deep, so a caller that wrote into ``doc["model"]["hparams"]``
  wrote into every later device's document and into the server's own configuration
  (``cfg.model_hparams``, the very dict), and one that wrote into ``doc["protocol"]["options"]``
  into every later document (a defect: each block is now copied whole);
* the cache follows the round: the next round, and a new round configuration within a round
  (m' from the count phase), show in the next document -- round id, config, DENSE digest --
  never the cached parts of the one before (regression coverage: passes on the code reviewed).

Both servers in process (:func:`deviation_helpers.in_process`)."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parents[1] / "server")]  # the helpers below
from deviation_helpers import USERS, WAIT_S, in_process  # noqa: E402


def test_nested_blocks_are_the_callers_own() -> None:
    pair, _ = in_process()
    leader = pair.leader
    leader.open_round(participants=USERS, deadline_s=WAIT_S)
    hparams = dict(leader.cfg.model_hparams)
    first = leader.round_info(USERS[0])
    first["model"]["hparams"]["dim"] = 4096  # a caller's change to its own document
    first["protocol"]["options"]["injected"] = True
    second = leader.round_info(USERS[1])
    assert second["model"]["hparams"] == hparams and "injected" not in second["protocol"]["options"]
    assert leader.cfg.model_hparams == hparams and leader.model_doc["hparams"] == hparams  # the server's own


def test_the_next_round_and_a_new_round_config_show_in_the_next_document() -> None:
    pair, _ = in_process()
    leader = pair.leader
    r = int(leader.open_round(participants=USERS, deadline_s=WAIT_S)["round_id"])
    rnd = leader.round
    assert rnd is not None
    before = leader.round_info(USERS[0])
    with leader.lock:  # a new round configuration within the round (what a recount gives)
        rnd.rc = dataclasses.replace(rnd.rc, m_prime=rnd.rc.m_prime + 1)
    doc = leader.round_info(USERS[0])
    assert doc["config"] == dataclasses.asdict(rnd.rc) and doc["config"]["m_prime"] == before["config"]["m_prime"] + 1
    leader.close_round(r, "test: next round")
    nxt = int(leader.open_round(participants=USERS, deadline_s=WAIT_S)["round_id"])
    new = leader.round
    assert nxt != r and new is not None and new is not rnd
    doc = leader.round_info(USERS[0])
    assert doc["round_id"] == nxt and doc["state"] == new.state
    assert doc["config"] == dataclasses.asdict(new.rc) and doc["config"]["round_id"] == nxt
    assert doc["dense_sha256"] == hashlib.sha256(new.dense_msg).hexdigest()
