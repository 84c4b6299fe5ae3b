"""Session 43: a deviating server 1 that misreports the uploads it holds is caught at the close.

Since S42-Q2 server 0 closes a round on quorum only when server 1 says it holds the uploads of
``quorum`` of the users server 0 counts (``GET /v1/peer/rounds/{r}/uploaded``).  Server 1 could lie:
name devices that uploaded to server 0 alone, so that the round closes before the honest devices'
uploads are in (they are refused, 409; the round commits with fewer devices or aborts below
``min_users``).  That stays possible -- server 0 cannot see server 1's state -- but it is no longer
silent: an honest server 1 never un-absorbs an upload within a round, so at the close its users must
include every user it named for the quorum that server 0 counted.  One missing is server 1's lie: a
halting ``uploads_misreported`` alarm, the round aborted, nothing committed
(:meth:`~secemb.server.close.LeaderClose._misreported`).  A lie about users server 0 does not count
changes nothing and is not an alarm (the S42 red team's padded answers still commit).

With relay (the default) the same holds at any close for every upload server 0 forwarded and server 1
took (red team R, S43-R2: server 1 left an honest device out of a round unseen by omitting it from its
close): server 0 records the forwards server 1 acknowledged, and a close that omits one is
``uploads_misreported`` too.

Session 44: without relay server 1 answers each upload it takes with a receipt (a MAC under a key
derived from the peer secret, :mod:`secemb.round.messages`), which the device appends to its upload to
server 0; server 0 takes no upload without one, and records the receipted users as acknowledged.  So a
device no longer reaches server 0 alone, and a close that omits a receipted user is
``uploads_misreported`` as with relay (S43-R2 without relay, fixed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from test_s42_quorum_agreed import _USERS, _cluster, _Cluster, _deviate, make  # type: ignore[import-not-found]  # noqa: E402, F401

from test_s42_quorum_agreed import _refused_without_receipt  # type: ignore[import-not-found]  # noqa: E402

from secemb.server.errors import Conflict  # noqa: E402
from secemb.server.follower import FollowerNode  # noqa: E402


def _ended(c: _Cluster, timeout: float = 30.0) -> dict:
    out = c.outcome(timeout)
    assert out["state"] == "aborted", out
    return out


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_server_1_naming_devices_at_server_0_only_is_caught_at_the_close(make: list[_Cluster],  # noqa: F811
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          bound: bool) -> None:
    """Quorum 4: two honest devices and two whose uploads server 1 receipts but does not keep (since session
    44 a device reaches server 0 only with server 1's receipt: before, the two uploaded to server 0 alone),
    and which server 1 names as its own.  Server 0 closes on "quorum reached" (the lie works: the honest
    devices still on their way are cut), but the close finds server 1 without those two uploads: a halting
    ``uploads_misreported`` alarm at server 0 naming them, the round aborted, nothing committed, and no next
    round opens until the operator clears the alarm.  The devices are not struck (they were a deviating
    server's accomplices or its victims)."""
    c = _cluster(make, relay=False, bound=bound, quorum=4)
    cheats = _USERS[2:4]
    take = FollowerNode.upload_many
    monkeypatch.setattr(FollowerNode, "upload_many", lambda node, r, items: [
        None if u in cheats else take(node, r, [(u, b)])[0] for u, b in items])  # receipted, not kept
    _deviate(monkeypatch, c, "uploaded", lambda true, peer, r: list(true(peer, r)) + cheats)  # they are its own
    version = c.leader.version
    assert [c.send(u) for u in _USERS[:4]] == [None] * 4
    out = _ended(c)
    assert "uploads_misreported" in out["reason"], out
    alarms = [(a["kind"], a["round"], a["halt"]) for a in c.leader.alarms]
    assert alarms == [("uploads_misreported", c.r, True)], c.leader.alarms
    assert str(cheats) in c.leader.alarms[0]["detail"]
    assert c.leader.version == version and c.leader.rejections == {}
    assert c.leader.halted is not None
    with pytest.raises(Conflict, match="halted"):
        c.leader.open_round(participants=_USERS, deadline_s=60.0, quorum=4)
    c.leader.clear_alarms()
    nxt = int(c.leader.open_round(participants=_USERS, deadline_s=60.0, quorum=8)["round_id"])
    assert nxt == c.r + 1


def test_the_control_an_honest_server_1_closes_on_the_same_quorum(make: list[_Cluster]) -> None:  # noqa: F811
    """The same devices with server 1's true answers: the two at server 0 only make no quorum (since session
    44 server 0 refuses them: no receipt of server 1); four honest devices close the round on quorum and it
    commits, no alarm."""
    c = _cluster(make, relay=False, bound=False, quorum=4)
    assert [c.send(u) for u in _USERS[:2]] == [None] * 2
    assert _refused_without_receipt([c.send(u, only=0) for u in _USERS[2:4]])
    assert c.stays_open()
    assert [c.send(u) for u in _USERS[4:6]] == [None, None]
    out = c.outcome()
    assert (out["state"], out["reason"]) == ("committed", "quorum reached"), out
    assert out["included"] == sorted(_USERS[:2] + _USERS[4:6])
    assert c.quiet()


def test_naming_users_server_0_does_not_count_is_no_alarm(make: list[_Cluster],  # noqa: F811
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Server 1 also names the participants that sent nothing: server 0 counts none of them, the quorum
    rests on the four honest devices it holds, and the round commits quietly (the lie gains nothing)."""
    c = _cluster(make, relay=False, bound=False, quorum=4)
    _deviate(monkeypatch, c, "uploaded", lambda true, peer, r: list(true(peer, r)) + _USERS[4:])
    assert [c.send(u) for u in _USERS[:4]] == [None] * 4
    out = c.outcome()
    assert (out["state"], out["reason"], out["included"]) == ("committed", "quorum reached", sorted(_USERS[:4])), out
    assert c.quiet()


def test_a_close_not_on_quorum_holds_server_1_to_nothing(make: list[_Cluster]) -> None:  # noqa: F811
    """A round closed by the operator (as at its deadline) asked no quorum check that closed it: the devices
    that reached server 1 only are left out like dropouts (and, since session 44, those at server 0 only are
    refused there: no receipt), the honest ones commit, no alarm."""
    c = _cluster(make, relay=False, bound=False, quorum=8)
    assert [c.send(u) for u in _USERS[:3]] + [c.send(u, only=1) for u in _USERS[3:5]] == [None] * 5
    assert _refused_without_receipt([c.send(u, only=0) for u in _USERS[5:7]])
    c.leader.close_round(c.r)
    out = c.outcome()
    assert (out["state"], out["included"]) == ("committed", sorted(_USERS[:3])), out
    assert c.quiet()


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_with_relay_server_1_omitting_a_forward_it_took_is_caught_at_any_close(make: list[_Cluster],  # noqa: F811
                                                                               monkeypatch: pytest.MonkeyPatch,
                                                                               bound: bool) -> None:
    """Relay: five honest devices upload (server 0 forwards each upload, server 1 takes it); server 1's close
    leaves one out -- to drop an honest device from the round unseen, or to make two rounds differ in it.  The
    operator's close (as a deadline's) finds the forward server 1 took missing: ``uploads_misreported``
    naming that device, the round aborted, nothing committed, no strike."""
    c = _cluster(make, relay=True, bound=bound, quorum=8)
    victim = _USERS[2]
    _deviate(monkeypatch, c, "close", lambda true, peer, r: [u for u in true(peer, r) if u != victim])
    version = c.leader.version
    assert [c.send(u) for u in _USERS[:5]] == [None] * 5
    c.leader.close_round(c.r)
    out = _ended(c)
    assert "uploads_misreported" in out["reason"], out
    assert [(a["kind"], a["halt"]) for a in c.leader.alarms] == [("uploads_misreported", True)], c.leader.alarms
    assert f"forwarded upload(s) of user(s) {[victim]}" in c.leader.alarms[0]["detail"]
    assert c.leader.version == version and c.leader.rejections == {}


def test_the_control_with_relay_an_honest_close_commits_every_forward(make: list[_Cluster]) -> None:  # noqa: F811
    c = _cluster(make, relay=True, bound=False, quorum=8)
    assert [c.send(u) for u in _USERS[:5]] == [None] * 5
    c.leader.close_round(c.r)
    out = c.outcome()
    assert (out["state"], out["included"]) == ("committed", sorted(_USERS[:5])), out
    assert c.quiet()


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_without_relay_server_1_omitting_a_receipted_upload_is_caught_at_any_close(
        make: list[_Cluster], monkeypatch: pytest.MonkeyPatch, bound: bool) -> None:  # noqa: F811
    """Without relay (session 44, S43-R2 without relay): five honest devices upload to server 1, get its
    receipts and show them to server 0; server 1's close leaves one out.  The operator's close (as a
    deadline's) finds the receipted upload missing: ``uploads_misreported`` naming that device, the round
    aborted, nothing committed, no strike.  (On session 43's code, with no receipts, the round committed
    without the device, as if it had died between its two uploads.)"""
    c = _cluster(make, relay=False, bound=bound, quorum=8)
    victim = _USERS[2]
    _deviate(monkeypatch, c, "close", lambda true, peer, r: [u for u in true(peer, r) if u != victim])
    version = c.leader.version
    assert [c.send(u) for u in _USERS[:5]] == [None] * 5
    c.leader.close_round(c.r)
    out = _ended(c)
    assert "uploads_misreported" in out["reason"], out
    assert [(a["kind"], a["halt"]) for a in c.leader.alarms] == [("uploads_misreported", True)], c.leader.alarms
    assert f"receipted the upload(s) of user(s) {[victim]}" in c.leader.alarms[0]["detail"]
    assert c.leader.version == version and c.leader.rejections == {}


def test_the_control_without_relay_an_honest_close_commits_every_receipted_upload(
        make: list[_Cluster]) -> None:  # noqa: F811
    """The control: the same five devices and an honest server 1 commit, no alarm; a device that reached
    server 1 only (it died before server 0) is left out quietly."""
    c = _cluster(make, relay=False, bound=False, quorum=8)
    assert [c.send(u) for u in _USERS[:5]] + [c.send(_USERS[5], only=1)] == [None] * 6
    c.leader.close_round(c.r)
    out = c.outcome()
    assert (out["state"], out["included"]) == ("committed", sorted(_USERS[:5])), out
    assert c.quiet()
