"""Session 31, helper D (issue 34, S31-R2): the operator's clear of the devices' strikes, apart from
the clear of the alarms.

docs/deployment.md ("Alarms"): a device rejected in 3 rounds is refused at server 0's door until the
operator clears its strikes (``secemb admin clear-strikes``, ``POST /v1/admin/strikes/clear``); a
clear of the alarms keeps them (a participant can force one by a false ``retrieval_tampered``
report: tests/review/test_session31_redteam.py, S31-R2).  Here, at server 0's node and its HTTP
app, in process: a clear of one device's strikes forgets that device's only, a clear of all every
device's, each journaled so that a restart counts what the running server did; a bad device id or
body is refused with nothing changed (422 / 400, no journal record); a device's credential is
refused (403) and server 1 serves no such clear (404).  The CLI: tests/cli/test_s31_clear_strikes_cli.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_session21_verify_journal as j21  # type: ignore[import-not-found]  # noqa: E402

from secemb.errors import InvalidParameters  # noqa: E402
from secemb.server.app import create_app  # noqa: E402
from secemb.server.node import LeaderNode  # noqa: E402
from secemb.sim.local import InProcessServers  # noqa: E402
from secemb.transport.signing import sign_headers, user_key  # noqa: E402

USERS = j21.USERS
HONEST, A, B = USERS[:3], USERS[3], USERS[4]
PATH = "/v1/admin/strikes/clear"
#: the deployment's devices: ids 0 to NUM_USERS - 1 (j21's synthetic data)
NUM_USERS = 30


def _rejected_rounds(srv: InProcessServers, rounds: list[list[int]]) -> None:
    """One round per entry of ``rounds``: the devices listed send an oversized payload (rejected:
    one strike each), the others of ``USERS`` honest uploads; each round commits."""
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    for bad in rounds:
        out = leader.close_round(j21.play(srv, [u for u in USERS if u not in bad], bad))
        assert (out["state"], out["rejected"]) == ("committed", sorted(bad)), out


@pytest.fixture
def srv() -> Any:
    """Both servers in process, server 0 holding strikes ``{A: 2, B: 1}``."""
    servers = j21.servers("cuckoo", False)
    assert servers.nodes[0].cfg.num_users == NUM_USERS
    _rejected_rounds(servers, [[A, B], [A]])
    assert servers.nodes[0].rejections == {A: 2, B: 1}
    yield servers
    servers.stop()


def test_one_devices_clear_forgets_its_strikes_only_and_a_restart_counts_the_same(srv: InProcessServers) -> None:
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    assert leader.status()["strikes"] == {str(A): 2, str(B): 1}
    assert leader.clear_alarms() == {"cleared": 2}  # the two rounds' device_rejected alarms; the strikes stay
    assert leader.rejections == {A: 2, B: 1} and j21.restarted(leader).rejections == {A: 2, B: 1}
    assert leader.clear_strikes(A) == {"cleared": {str(A): 2}}
    assert leader.rejections == {B: 1} and leader.status()["strikes"] == {str(B): 1}
    fresh = j21.restarted(leader)
    assert fresh.rejections == {B: 1} and fresh.status()["strikes"] == {str(B): 1}
    assert fresh.clear_strikes(A) == {"cleared": {}}  # nothing left to forgive: journaled, harmless
    srv.nodes = (fresh, srv.nodes[1])
    _rejected_rounds(srv, [[A]])  # a forgiven device strikes again from zero; the forgiven rounds stay forgiven
    assert fresh.rejections == {A: 1, B: 1} and j21.restarted(fresh).rejections == {A: 1, B: 1}
    assert fresh.clear_strikes() == {"cleared": {str(A): 1, str(B): 1}} and fresh.rejections == {}
    again = j21.restarted(fresh)
    assert again.rejections == {} and again.status()["strikes"] == {}
    records = [r for r in again.store.records() if r.get("ev") == "strikes_cleared"]
    assert [(r["device"], r["strikes"]) for r in records] == [(A, {str(A): 2}), (A, {}),
                                                               (None, {str(A): 1, str(B): 1})]


@pytest.mark.parametrize("device", [-1, NUM_USERS, True, "3", 3.0, [3]])
def test_a_bad_device_id_is_refused_and_changes_nothing(srv: InProcessServers, device: object) -> None:
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    before = len(list(leader.store.records()))
    with pytest.raises(InvalidParameters, match="device must be an int"):
        leader.clear_strikes(device)
    assert leader.rejections == {A: 2, B: 1} and len(list(leader.store.records())) == before


def _post(client: TestClient, key_id: str, secret: bytes, body: bytes) -> Any:
    headers = sign_headers(key_id, secret, "POST", PATH, "", body) | {"Content-Type": "application/json"}
    return client.post(PATH, content=body, headers=headers)


def test_the_route_takes_the_operators_credential_only_and_refuses_bad_bodies(srv: InProcessServers) -> None:
    leader, follower = srv.nodes
    assert isinstance(leader, LeaderNode)
    client = TestClient(create_app(leader), raise_server_exceptions=False)
    admin = ("admin", leader.cfg.admin_secret)
    before = len(list(leader.store.records()))
    # a device's credential -- A's own, or another's -- is no operator's: 403
    for who in (A, HONEST[0]):
        resp = _post(client, f"user:{who}", user_key(leader.cfg.user_secret, who), json.dumps({"device": A}).encode())
        assert resp.status_code == 403, resp.text
    for body, status in ((b'{"device": ' + str(leader.cfg.num_users).encode() + b"}", 422),
                         (b'{"device": -1}', 422), (b'{"device": "3"}', 422), (b'{"device": null}', 422),
                         (b'{"device": true}', 422), (b'{"devices": [3]}', 422), (b"[3]", 400), (b"{", 400)):
        resp = _post(client, *admin, body)
        assert resp.status_code == status and "Traceback" not in resp.text, (body, resp.status_code, resp.text)
        assert resp.json()["error"] and resp.json()["detail"], resp.text
    assert leader.rejections == {A: 2, B: 1} and len(list(leader.store.records())) == before
    resp = _post(client, *admin, json.dumps({"device": B}).encode())
    assert (resp.status_code, resp.json()) == (200, {"cleared": {str(B): 1}})
    resp = _post(client, *admin, b"")
    assert (resp.status_code, resp.json()) == (200, {"cleared": {str(A): 2}})
    assert leader.rejections == {} and j21.restarted(leader).rejections == {}
    # server 1 counts no strikes and serves no such clear
    resp = _post(TestClient(create_app(follower), raise_server_exceptions=False), "admin",
                 follower.cfg.admin_secret, b"")
    assert resp.status_code == 404 and "served by server 0" in resp.json()["detail"], resp.text


def test_the_local_admin_link_clears_at_server_0_only(srv: InProcessServers) -> None:
    from secemb.server.peer import PeerRefused

    admin0, admin1 = srv.servers().admin
    assert admin0.clear_strikes(A) == {"cleared": {str(A): 2}}
    with pytest.raises(PeerRefused, match="served by server 0"):
        admin1.clear_strikes(None)
    assert admin0.status()["strikes"] == {str(B): 1}


def test_the_operators_http_link_and_the_route_agree(srv: InProcessServers) -> None:
    """What ``secemb admin clear-strikes`` sends (:meth:`HttpAdminLink.clear_strikes`), through
    server 0's app: one device, then all; ``status`` shows what is left."""
    from secemb.transport.http import HttpAdminLink
    from secemb.transport.network import ApiClient

    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    client = TestClient(create_app(leader), raise_server_exceptions=False)
    link = HttpAdminLink(0, ApiClient("http://testserver", "admin", leader.cfg.admin_secret, http=client))
    assert link.status()["strikes"] == {str(A): 2, str(B): 1}
    assert link.clear_strikes(B) == {"cleared": {str(B): 1}} and link.status()["strikes"] == {str(A): 2}
    assert link.clear_strikes(None) == {"cleared": {str(A): 2}} and link.status()["strikes"] == {}


def test_a_clear_of_the_alarms_journaled_before_session_31_still_forgives_on_replay(srv: InProcessServers) -> None:
    """Upgrade: a journal written before session 31 holds ``alarms_cleared`` records without
    ``"strikes": "kept"``, and such a clear forgave every strike when it was made; a restart on the
    new code must count the same (else an upgrade would refuse devices the operator had let in).  A
    clear made now records ``"strikes": "kept"`` and forgives nothing on replay.  Mutation checked:
    the replay ignoring the field (every clear keeping the strikes) fails the second assertion."""
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    leader.clear_alarms()
    (rec,) = [r for r in leader.store.records() if r.get("ev") == "alarms_cleared"]
    assert rec["strikes"] == "kept" and j21.restarted(leader).rejections == {A: 2, B: 1}
    leader.store.append({"ev": "alarms_cleared", "round": leader.max_round, "alarms": 0})  # the old record's form
    fresh = j21.restarted(leader)
    assert fresh.rejections == {} and fresh.status()["strikes"] == {}
