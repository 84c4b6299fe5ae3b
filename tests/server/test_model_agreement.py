"""Issue 33, item 3 -- one model, agreed: both servers reconstruct the round's update and
commit only when their model digests agree; devices check that both servers announce the same
model.  A server that commits another model is caught by the other server and by the devices,
in process and over HTTP (server 1 a ``secemb serve`` process).  Every wait is bounded: the
network calls by ``WAIT_S``, the rounds by their deadline."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from deviation_helpers import USERS, Pair, client, in_process, over_http, play_round

from secemb.digest import model_sha256
from secemb.sim.local import LocalServerLink
from secemb.errors import ModelDisagreement
from secemb.server.errors import Conflict, PeerUnavailable
from secemb.server.node import make_node
from secemb.server.peer import PeerUnreachable
from secemb.server.persist import StorageError
from secemb.server.store import DiskStore


def test_both_servers_reconstruct_the_same_model():
    pair, servers = in_process()
    leader, follower = servers.nodes
    assert follower.model_sha() == leader.model_sha()  # version 0: each initialized it from init_seed
    for _ in range(2):
        _, outcome, errors = play_round(pair)
        assert outcome["state"] == "committed" and not errors
    assert (leader.version, follower.version) == (2, 2)
    assert follower.model_sha() == leader.model_sha() == model_sha256(follower.table, follower.dense)
    # server 1 keeps its own optimizer state, equal to server 0's
    theirs = follower.opt.state_dict()
    for k, v in leader.opt.state_dict().items():
        assert np.array_equal(v, theirs[k]), k
    assert not leader.status()["alarms"] and not follower.status()["alarms"]


def _craft(pair: Pair, monkeypatch) -> dict[str, str]:
    """Make server 0 deviate: it commits a model of its choosing (its honest update plus a
    crafted row) and ignores server 1's digest (it tells itself server 1 agreed)."""
    leader = pair.leader
    got: dict[str, str] = {}
    crafted = threading.Event()
    honest_reconstruct, honest_agree = leader._reconstruct, leader.peer.agree

    def reconstruct(*args, **kw):
        table, dense, sha, opt = honest_reconstruct(*args, **kw)
        got["honest"] = sha
        table[3] += 0.25  # a crafted row (a route to isolating one device's gradient next round)
        got["crafted"] = model_sha256(table, dense)
        crafted.set()
        return table, dense, got["crafted"], opt

    def agree(r, share):
        got["server1"] = honest_agree(r, share)  # server 1 computes and stages its own model
        assert crafted.wait(30)
        return got["crafted"]  # ... and server 0 pretends the digests agree

    monkeypatch.setattr(leader, "_reconstruct", reconstruct)
    monkeypatch.setattr(leader.peer, "agree", agree)
    return got


def _check_crafted_model_caught(pair: Pair, monkeypatch) -> None:
    version1 = pair.status1()["model_version"]
    got = _craft(pair, monkeypatch)
    r, outcome, errors = play_round(pair)
    assert not errors
    assert outcome["state"] == "committed"  # server 0 committed its crafted model ...
    assert pair.leader.model_sha() == got["crafted"] != got["honest"] == got["server1"]
    st = pair.status1()  # ... server 1 refused it: nothing committed there, an alarm, halted
    assert st["model_version"] == version1
    assert st["halted"] is True
    assert [a["kind"] for a in st["alarms"]] == ["model_disagreement"]
    assert got["crafted"] in st["alarms"][0]["detail"]
    assert pair.round_status1(r)["state"] == "aborted"
    # the next round: server 1 refuses it, so no device trains on the crafted model
    with pytest.raises((Conflict, PeerUnavailable)):
        pair.leader.open_round(participants=USERS)


def test_crafted_model_by_server0_is_caught(monkeypatch):
    pair, _ = in_process()
    _check_crafted_model_caught(pair, monkeypatch)


def test_crafted_model_by_server0_is_caught_over_http(monkeypatch):
    with over_http() as (pair, _):
        _check_crafted_model_caught(pair, monkeypatch)


def test_crafted_model_by_server1_is_caught_by_server0_and_nothing_commits(monkeypatch):
    pair, servers = in_process()
    leader, follower = servers.nodes
    honest = follower._reconstruct

    def crafted(*args, **kw):
        table, dense, _, opt = honest(*args, **kw)
        table[0] -= 0.5
        return table, dense, model_sha256(table, dense), opt

    monkeypatch.setattr(follower, "_reconstruct", crafted)
    before = leader.model_sha()
    _, outcome, errors = play_round(pair)
    assert not errors
    assert outcome["state"] == "aborted" and "model_disagreement" in outcome["reason"]
    assert (leader.version, follower.version) == (0, 0)  # no commit on either side
    assert leader.model_sha() == follower.model_sha() == before
    st = leader.status()
    assert st["halted"] is True and [a["kind"] for a in st["alarms"]] == ["model_disagreement"]
    with pytest.raises(Conflict, match="halted"):
        leader.open_round(participants=USERS)
    # the operator investigates, server 1 is repaired, the alarm cleared: rounds run again
    monkeypatch.setattr(follower, "_reconstruct", honest)
    assert leader.clear_alarms() == {"cleared": 1}
    _, outcome, _ = play_round(pair)
    assert outcome["state"] == "committed" and leader.model_sha() == follower.model_sha()


def test_devices_refuse_a_round_announced_on_two_models_and_report_it():
    pair, servers = in_process()
    leader, follower = servers.nodes
    r = int(leader.open_round(participants=USERS)["round_id"])
    follower.round.model_sha = "0" * 64  # server 1 announces another model for the round
    with pytest.raises(ModelDisagreement):
        client(pair, USERS[0]).round_info()
    for node in (leader, follower):  # the report reached both; each halts
        st = node.status()
        assert st["halted"] is True and st["alarms"][0]["kind"] == "model_disagreement"
        assert f"device {USERS[0]}" in st["alarms"][0]["detail"]
    assert leader.round_status(r, None)["state"] == "aborted"


def test_server1_restarted_between_agreement_and_commit_installs_its_staged_model(monkeypatch):
    # server 1 answered its digest, server 0 committed, and server 1 died before the sync reached
    # it: the model it computed was written (staged) before its digest left, so the restarted
    # server 1 commits it when server 0 re-sends the sync -- it still installs only its own model
    pair, servers = in_process()
    leader, follower = servers.nodes

    def lost(body, r):
        raise PeerUnreachable("server 1 did not answer")

    monkeypatch.setattr(leader.peer, "sync_model", lost)
    r, outcome, _ = play_round(pair)
    assert outcome["state"] == "committed" and (leader.version, follower.version) == (1, 0)
    monkeypatch.undo()
    restarted = make_node(follower.cfg, store=follower.store, protocol=follower.protocol, model=follower.model)
    assert restarted.staged is not None and restarted.staged.model_sha256 == leader.model_sha()
    leader.peer.follower = restarted
    again = Pair(leader, restarted.status, lambda x: restarted.round_status(x, None), restarted.clear_alarms,
                 lambda u: (LocalServerLink(leader, u, servers.tp), LocalServerLink(restarted, u, servers.tp)))
    _, outcome, errors = play_round(again)  # opening it re-sends the sync first
    assert outcome["state"] == "committed" and not errors
    assert restarted.round_status(r, None)["state"] == "committed"
    assert (leader.version, restarted.version) == (2, 2) and leader.model_sha() == restarted.model_sha()
    assert restarted.staged is None and restarted.store.load(staged=True) is None


def test_a_staged_model_server0_did_not_commit_is_dropped(monkeypatch):
    pair, servers = in_process()
    leader, follower = servers.nodes
    real = leader.store.save

    def full(ck, **kw):
        if ck.version >= 1:
            raise StorageError("could not write file checkpoint.npz: ENOSPC")
        real(ck, **kw)

    monkeypatch.setattr(leader.store, "save", full)
    _, outcome, _ = play_round(pair)
    assert outcome["state"] == "aborted" and "checkpoint could not be written" in outcome["reason"]
    assert follower.staged is None and follower.store.load(staged=True) is None
    assert (leader.version, follower.version) == (0, 0) and leader.model_sha() == follower.model_sha()


def test_disk_store_keeps_the_staged_checkpoint_beside_the_checkpoint(tmp_path):
    pair, servers = in_process()
    follower = servers.nodes[1]
    store = DiskStore(tmp_path, 1, follower.fingerprint)
    ck = follower._checkpoint(1, 0, USERS, follower.table + 1.0, follower.dense, "f" * 64, follower.opt)
    store.save(ck, staged=True)
    assert store.load() is None and (tmp_path / "staged.npz").is_file()
    got = store.load(staged=True)
    assert got is not None and got.version == 1 and np.array_equal(got.table, ck.table)
    store.drop_staged()
    assert store.load(staged=True) is None and not (tmp_path / "staged.npz").exists()
    store.drop_staged()  # none: nothing to do
