"""Issue 33, items 1-2 as the system reacts to them: a deviation a server or a device detects
raises an alarm the operator sees (status, a WARNING log line, the round's outcome, ``secemb
admin status``'s exit code).  Relay tampering leaves the victim out of the round like a
dropout; a device's report of a tampered retrieval halts the deployment until the operator
clears the alarm.  In process and over HTTP (server 1 a ``secemb serve`` process); every wait
is bounded (the network calls by ``WAIT_S``, the rounds by their deadline)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from deviation_helpers import USERS, Pair, in_process, over_http, play_round
from secemb.cli import app
from secemb.sim.local import LocalServerLink
from secemb.errors import InvalidParameters, RetrievalTampered
from secemb.fss.sketch import SKETCH_SEED_BYTES
from secemb.protocols.secemb.sizes import SEED_TAG_BYTES
from secemb.server.auth import Forbidden
from secemb.server.errors import Conflict
from secemb.server.node import make_node
from secemb.transport.network import ApiClient

VICTIM = USERS[1]


def _flip_last_byte(body: bytes) -> bytes:
    return body[:-1] + bytes([body[-1] ^ 1])


def _flip_answer_byte(reply: bytes) -> bytes:
    """``reply`` with the last byte of its answer rows flipped: a verified round's retrieval reply
    ends with the device's 16-byte sketch seed and server 1's 16-byte tag of it after the rows
    (docs/wire-format.md), which the row tags do not cover (an altered seed fails the seed's tag
    instead: tests/review/test_session30_seed_tag.py)."""
    at = len(reply) - SKETCH_SEED_BYTES - SEED_TAG_BYTES - 1
    return reply[:at] + bytes([reply[at] ^ 1]) + reply[at + 1 :]


def _tamper_relay(pair: Pair, monkeypatch) -> None:
    """Server 0 alters the key part it forwards for VICTIM (the attack of issue 33's first finding)."""
    honest = pair.leader.peer.relay_retrieval_many

    def forward(r: int, items: list[tuple[int, bytes]]) -> list[Any]:
        return honest(r, [(u, _flip_last_byte(b) if u == VICTIM else b) for u, b in items])

    monkeypatch.setattr(pair.leader.peer, "relay_retrieval_many", forward)


def _check_relay_tampering(pair: Pair, monkeypatch) -> None:
    _tamper_relay(pair, monkeypatch)
    r, outcome, errors = play_round(pair)
    assert list(errors) == [VICTIM]  # the victim's retrieval fails; nobody trains on altered keys
    assert outcome["state"] == "committed"  # the others' round goes on, the victim left out as a dropout
    assert outcome["included"] == sorted(set(USERS) - {VICTIM})
    st = pair.status1()
    assert st["halted"] is False
    assert [a["kind"] for a in st["alarms"]] == ["relay_tampered"]
    assert f"user {VICTIM}" in st["alarms"][0]["detail"]
    assert pair.round_status1(r)["tampered"] == [VICTIM]


def test_relay_tampering_alarm_visible_in_status(monkeypatch, caplog):
    pair, _ = in_process()
    with caplog.at_level(logging.WARNING, logger="secemb.server"):
        _check_relay_tampering(pair, monkeypatch)
    assert any(rec.levelno == logging.WARNING and "ALARM relay_tampered" in rec.getMessage()
               for rec in caplog.records)


def test_relay_tampering_alarm_visible_in_status_over_http(monkeypatch):
    with over_http() as (pair, cluster):
        _check_relay_tampering(pair, monkeypatch)
        assert "ALARM relay_tampered" in cluster.log(1).read_text()


def _tamper_answer(pair: Pair, monkeypatch) -> None:
    """Server 0 alters its answer share to VICTIM's retrieval (issue 33's second finding)."""
    honest = pair.links

    def links(u: int):
        link0, link1 = honest(u)
        if u == VICTIM:
            answer = link0.retrieval
            monkeypatch.setattr(link0, "retrieval", lambda r, body: _flip_answer_byte(answer(r, body)))
        return link0, link1

    monkeypatch.setattr(pair, "links", links)


def _check_tamper_report(pair: Pair, monkeypatch) -> None:
    _tamper_answer(pair, monkeypatch)
    r, outcome, errors = play_round(pair)
    assert isinstance(errors.get(VICTIM), RetrievalTampered)  # the device did not train or upload
    assert outcome["state"] == "aborted" and "halted" in outcome["reason"]
    assert pair.leader.model_sha() == pair.status1()["model_sha256"]  # nothing committed
    for st in (pair.leader.status(), pair.status1()):  # the device told both servers; each halts
        assert st["halted"] is True
        assert [a["kind"] for a in st["alarms"]] == ["retrieval_tampered"]
        assert f"device {VICTIM}" in st["alarms"][0]["detail"]
    assert pair.round_status1(r)["state"] == "aborted"
    with pytest.raises(Conflict, match="halted"):
        pair.leader.open_round(participants=USERS)
    # after the investigation the operator clears both servers' alarms: rounds run again
    monkeypatch.undo()
    pair.leader.clear_alarms()
    pair.clear1()
    assert not pair.status1()["halted"]
    _, outcome, errors = play_round(pair)
    assert outcome["state"] == "committed" and not errors


def test_device_tamper_report_halts_deployment(monkeypatch):
    pair, _ = in_process()
    _check_tamper_report(pair, monkeypatch)


def test_device_tamper_report_halts_deployment_over_http(monkeypatch):
    with over_http() as (pair, _):
        _check_tamper_report(pair, monkeypatch)


def test_alarms_survive_a_restart_until_cleared():
    pair, servers = in_process()
    leader, follower = servers.nodes
    r = int(leader.open_round(participants=USERS)["round_id"])
    follower.device_alarm(USERS[0], {"kind": "retrieval_tampered", "round_id": r, "detail": "tags"})
    again = make_node(follower.cfg, store=follower.store, protocol=follower.protocol, model=follower.model)
    st = again.status()
    assert st["halted"] is True and [a["kind"] for a in st["alarms"]] == ["retrieval_tampered"]
    assert again.clear_alarms() == {"cleared": 1}
    st = make_node(follower.cfg, store=follower.store, protocol=follower.protocol, model=follower.model).status()
    assert st["halted"] is False and st["alarms"] == []


@pytest.mark.parametrize("report,error", [
    ({"kind": "bored", "round_id": 0}, InvalidParameters),
    ({"kind": "retrieval_tampered", "round_id": "0"}, InvalidParameters),
    ({"kind": "retrieval_tampered", "round_id": True}, InvalidParameters),
    ({"kind": "retrieval_tampered", "round_id": 0, "detail": 5}, InvalidParameters),
    ({"kind": "retrieval_tampered", "round_id": 0, "extra": 1}, InvalidParameters),
    ({"kind": "retrieval_tampered", "round_id": 7}, Conflict),  # not the current round
])
def test_malformed_or_stale_device_reports_change_nothing(report, error):
    pair, servers = in_process()
    leader = servers.nodes[0]
    leader.open_round(participants=USERS)
    with pytest.raises(error):
        leader.device_alarm(USERS[0], report)
    with pytest.raises(Forbidden):  # only a participant of the round may report
        leader.device_alarm(max(USERS) + 1, {"kind": "retrieval_tampered", "round_id": 0})
    st = leader.status()
    assert st["halted"] is False and st["alarms"] == [] and st["round"]["state"] == "open"


def test_device_report_goes_through_the_signed_endpoint_to_both_links(monkeypatch):
    # the device's report reaches each server's node through its link, whatever the other does
    pair, servers = in_process()
    r = int(servers.nodes[0].open_round(participants=USERS)["round_id"])
    sent: list[tuple[int, dict[str, Any]]] = []
    monkeypatch.setattr(LocalServerLink, "alarm", lambda self, doc: sent.append((self.party, doc)))
    from deviation_helpers import client

    errors = client(pair, USERS[0]).report(r, RetrievalTampered("tags do not verify"))
    assert errors == [None, None]
    assert [p for p, _ in sent] == [0, 1]
    assert sent[0][1] == {"kind": "retrieval_tampered", "round_id": r, "detail": "tags do not verify"}


class _FakeDeployment:
    """What ``secemb admin`` reads of a deployment directory: a signed operator client per server
    (its answers faked below, so the test needs no deployment on disk and no server)."""

    parties = (0, 1)  # the test setup: both halves

    def __init__(self, root: Any) -> None:
        self.root = root

    def admin(self, party: int) -> ApiClient:
        return ApiClient(f"https://server{party}.invalid", "admin", b"a" * 32)


@pytest.mark.parametrize("alarms,code", [([], 0), ([{"kind": "relay_tampered", "round": 2}], 3)])
def test_admin_status_exits_3_while_a_server_shows_an_alarm(monkeypatch, tmp_path, alarms, code):
    def answer(self: ApiClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        party = int(str(self.base_url).split("server")[1][0])
        doc = {"party": party, "model_version": 2, "halted": False, "alarms": alarms if party == 1 else []}
        return httpx.Response(200, content=json.dumps(doc).encode(), headers={"content-type": "application/json"})

    monkeypatch.setattr("secemb.server.deploy.Deployment", _FakeDeployment)
    monkeypatch.setattr(ApiClient, "request", answer)
    res = CliRunner().invoke(app, ["admin", "status", "--deployment", str(tmp_path)])
    assert res.exit_code == code, res.output
    assert json.loads(res.stdout)["server1"]["alarms"] == alarms
    if code:
        assert "ALARM at server1" in res.output
