"""Session 21 review (helper F): one deviating server against honest devices in the bound check's
messages (bounded payloads, issue 34), in process, both layouts, relay or not.  Each expected
outcome is read from docs/security.md ("Bounded payloads: the check"), never from the code.
Regression tests (they pass):

* **Challenges of server 0's choosing.**  "A deviating server 0 could choose ``c``, but only as a
  seed ... Making an honest device fail (and so learning one bit about its upload) needs a seed
  whose rows give ``|<r_i, x>| >= T`` for an ``x`` it does not know ... probability at most
  ``2^-52`` per seed".  Server 0 gives the devices challenges it chose -- all zero bytes, all
  ``0xff``, a different one for each device (to correlate each device's pass or fail with a
  guess), or each device's challenge of the last round again -- and keeps them for its check
  request, consistently: in the cuckoo layout every honest device proves and passes, the round
  commits with all of them, nobody is rejected, no alarm.  In the full layout (session 31, helper
  P) the challenge is derived by both servers ("The challenge is derived, per device"): server 1
  answers nothing for a challenge that is not its own derivation, so every device fails and the
  round aborts with the models unchanged -- a denial of service server 0 could cause anyway, and
  no choice of the challenge.
* **Server 1 answering under a query of its choice.**  "A deviating server 1 can send a wrong
  verifier message: the device is rejected (denial of service) and server 1 learns nothing from
  server 0 ... Each such rejection counts as a strike against the device at server 0".  Server 1
  answers server 0's check request for one victim (or for every device) under a query seed of its
  own instead of server 0's: exactly those devices are rejected with one strike each and the
  ``device_rejected`` alarm; with one victim the others' round commits, with all of them the round
  aborts and both models stay.  Three such rounds get the victim refused at server 0's door until
  the operator clears its strikes (the documented limit; clearing the alarms keeps them).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402
import test_session21_verify_journal as j21  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.framing import HEADER_BYTES  # noqa: E402
from secemb.fss import rangeproof  # noqa: E402
from secemb.protocols.secemb import SecEmbServer  # noqa: E402
from secemb.protocols.secemb.bounds import CHALLENGE_BYTES  # noqa: E402
from secemb.protocols.secemb.sizes import NAME  # noqa: E402
from secemb.protocols.wire import frame  # noqa: E402
from secemb.server.auth import Forbidden  # noqa: E402
from secemb.server.node import FollowerNode, LeaderNode  # noqa: E402
from secemb.server.verify import MAX_REJECTIONS  # noqa: E402
from secemb.sim.local import InProcessServers  # noqa: E402

USERS = tbn.USERS
LAYOUTS = [("cuckoo", True), ("cuckoo", False), ("full", True), ("full", False)]
#: a check request: the query seed, then per device ``u64 user || c || part_0 || part_1``
QUERY = 16
ENTRY = 8 + CHALLENGE_BYTES + 2 * rangeproof.PART_BYTES


def _nodes(srv: InProcessServers) -> tuple[LeaderNode, FollowerNode]:
    leader, follower = srv.nodes
    assert isinstance(leader, LeaderNode) and isinstance(follower, FollowerNode)
    return leader, follower


def _role(node: LeaderNode | FollowerNode) -> SecEmbServer:
    assert isinstance(node.role, SecEmbServer)
    return node.role


def _chosen(kind: str, last: dict[int, bytes]) -> Callable[[int], bytes]:
    """Server 0's choice of device ``user``'s challenge."""
    if kind == "zeros":
        return lambda user: bytes(CHALLENGE_BYTES)
    if kind == "ones":
        return lambda user: b"\xff" * CHALLENGE_BYTES
    if kind == "one per device":
        return lambda user: hashlib.sha256(b"guess %d" % user).digest()[:CHALLENGE_BYTES]
    return lambda user: last[user]  # "last round's"


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
@pytest.mark.parametrize("kind", ["zeros", "ones", "one per device", "last round's"])
def test_challenges_of_server_0s_choosing_fail_no_honest_device(monkeypatch: pytest.MonkeyPatch, layout: str,
                                                                relay: bool, kind: str) -> None:
    srv = j21.servers(layout, relay)
    leader, follower = _nodes(srv)
    try:
        last: dict[int, bytes] = {}
        role = _role(leader)
        if kind == "last round's":
            honest = role.challenge

            def recorded(user: int) -> bytes:
                last[user] = honest(user)
                return last[user]

            with monkeypatch.context() as m:
                m.setattr(role, "challenge", recorded)
                out = leader.close_round(j21.play(srv, USERS, []))
            assert out["state"] == "committed" and sorted(last) == sorted(USERS), out
        choose = _chosen(kind, last)
        given: dict[int, bytes] = {}

        def deviating(user: int) -> bytes:  # kept for the check request too: server 0 stays consistent
            role._challenges[user] = given[user] = choose(user)
            return given[user]

        monkeypatch.setattr(role, "challenge", deviating)
        version = leader.version
        out = leader.close_round(j21.play(srv, USERS, []))
        assert sorted(given) == sorted(USERS)
        if layout == "full":  # derived challenges (session 31): server 1 answers none of server 0's choosing
            assert out["state"] == "aborted" and out["rejected"] == sorted(USERS), out
            assert leader.version == follower.version == version and leader.model_sha() == follower.model_sha()
            return
        assert out["state"] == "committed" and out["included"] == sorted(USERS) and out["rejected"] == [], out
        assert leader.rejections == {} and leader.status()["alarms"] == [] and follower.status()["alarms"] == []
        assert leader.version == follower.version == version + 1 and leader.model_sha() == follower.model_sha()
    finally:
        srv.stop()


def _answer_under_own_query(follower: FollowerNode, victims: set[int] | None) -> Callable[[bytes], bytes]:
    """Server 1's ``bound_answer`` that answers the entries of ``victims`` (``None``: every device)
    under a query seed of its own and the rest under server 0's, in the request's order."""
    honest = _role(follower).bound_answer
    own_query = hashlib.sha256(b"server 1's own query").digest()[:QUERY]

    def answer(request: bytes) -> bytes:
        round_id = follower.round.round_id  # type: ignore[union-attr]
        body = request[HEADER_BYTES:]
        query = body[:QUERY]
        entries = [body[QUERY + ENTRY * j : QUERY + ENTRY * (j + 1)] for j in range((len(body) - QUERY) // ENTRY)]
        users = [int.from_bytes(e[:8], "little") for e in entries]
        parts = []
        for user, entry in zip(users, entries, strict=True):
            seed = own_query if victims is None or user in victims else query
            got = honest(frame(NAME, "bound_request", 1, round_id, seed, entry))
            parts.append(got[HEADER_BYTES:])
        return frame(NAME, "bound_answer", 0, round_id, b"".join(parts))

    return answer


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
@pytest.mark.parametrize("who", ["one victim", "every device"])
def test_server_1_answering_under_its_own_query_rejects_and_strikes_exactly_those_devices(
        monkeypatch: pytest.MonkeyPatch, layout: str, relay: bool, who: str) -> None:
    srv = j21.servers(layout, relay)
    leader, follower = _nodes(srv)
    victims = {USERS[1]} if who == "one victim" else set(USERS)
    try:
        monkeypatch.setattr(_role(follower), "bound_answer",
                            _answer_under_own_query(follower, victims if who == "one victim" else None))
        version, sha = leader.version, leader.model_sha()
        out = leader.close_round(j21.play(srv, USERS, []))
        assert out["rejected"] == sorted(victims), out
        assert leader.rejections == dict.fromkeys(victims, 1)
        alarms = leader.status()["alarms"]
        assert {a["kind"] for a in alarms} == {"device_rejected"} and follower.status()["alarms"] == []
        if who == "one victim":
            assert out["state"] == "committed" and out["included"] == sorted(set(USERS) - victims), out
            assert leader.version == follower.version == version + 1 and leader.model_sha() == follower.model_sha()
        else:
            assert out["state"] == "aborted" and not out["included"], out
            assert (leader.version, leader.model_sha(), follower.version) == (version, sha, version)
    finally:
        srv.stop()


def test_limit_server_1_gets_an_honest_device_refused_at_the_door_in_three_rounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented limit ("so server 1 can get honest devices refused at the door after three
    rounds; the operator sees every ... rejected"): server 1 answers for one honest victim under
    its own query three rounds running; server 0 shows three ``device_rejected`` alarms naming
    it and then refuses it at retrieval (403) until the operator clears its strikes."""
    srv = j21.servers("cuckoo", True)
    leader, follower = _nodes(srv)
    victim = USERS[1]
    try:
        with monkeypatch.context() as m:
            m.setattr(_role(follower), "bound_answer", _answer_under_own_query(follower, {victim}))
            for _ in range(MAX_REJECTIONS):
                out = leader.close_round(j21.play(srv, USERS, []))
                assert out["state"] == "committed" and out["rejected"] == [victim], out
        alarms = leader.status()["alarms"]
        assert [a["kind"] for a in alarms] == ["device_rejected"] * MAX_REJECTIONS
        assert all(str(victim) in a["detail"] for a in alarms), alarms
        r = int(leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
        client = srv.servers().device(victim)
        with pytest.raises(Forbidden, match="failed the servers' verification"):
            Device(client, *tbn.RATINGS.of(victim)).participate(client.round_info())
        leader.close_round(r)
        assert leader.clear_alarms()["cleared"] == MAX_REJECTIONS
        assert leader.clear_strikes(victim) == {"cleared": {str(victim): MAX_REJECTIONS}}
        out = leader.close_round(j21.play(srv, USERS, []))  # server 1 honest again: the victim is back
        assert out["state"] == "committed" and out["included"] == sorted(USERS), out
    finally:
        srv.stop()
