"""Session 21 review (helper F): one deviating server against honest devices, in process, with a
deployment's defaults (bounded payloads on, cuckoo layout, relay) and, where the attack concerns
the retrieval, the full layout and relay off too.  Each expected outcome is read from
docs/security.md ("What holds", "Verified retrieval", "What a device, the operator and server 0
refuse from a deviating server") and docs/deployment.md ("Alarms"), never from the code.
Regression tests (they pass):

* A round announced by either server to one device only with other parameters (``m'``, the cuckoo buckets, the
  layout, relay, ``bound``, ``users_per_round``, the fixed point) is refused by that device
  before any request ("Every device of a round sees the same round ... detected by the device
  before any request: ... ``ProtocolError`` for different documents"); the others' round commits.
* Server 0 replaying the last round's document, or announcing the current round on the last
  model version, is refused before any request (``ProtocolError``); announcing only the last
  model's digests is a ``ModelDisagreement`` reported to both servers, which halt.
* Server 0 answering the retrieval over the last model version (its tags made honestly for this
  round), or either server answering one device with another device's valid answer (server 1
  with relay: its masked answer that server 0 forwards), is caught by the device:
  ``RetrievalTampered``, no upload, both servers told, both halt ("A server cannot change the
  rows a device retrieves: ... no other table").
* Server 0 padding one device's answer (selective failure through the answer's size): the device
  refuses it as malformed before training whatever it asked for -- the same error for two devices
  of different items -- uploads nothing, and the others' round commits.  The server cannot
  condition the padding on the items: its view is independent of them ("Why a failure does not
  depend on the index"); the size an honest server sends is fixed by the public parameters.
* Server 0 announcing the last (closed) round as open -- the state is the one field the device
  does not compare -- gets the device no further than server 1, which refuses its first request.
* What each server gets from a device through the SDK (calls, order, sizes, the bound's
  challenge request and proof) is the same for devices of 1-4 rated items and different items,
  so a server that watches or delays devices sees only when they send (timing: "not protected").
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402
import test_session21_verify_journal as j21  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.errors import InvalidMessage, ModelDisagreement, ProtocolError, RetrievalTampered  # noqa: E402
from secemb.server.errors import Conflict  # noqa: E402
from secemb.server.node import FollowerNode, LeaderNode  # noqa: E402
from secemb.sim.local import InProcessServers, LocalServerLink  # noqa: E402

USERS = tbn.USERS
VICTIM = USERS[-1]
LAYOUTS = [("cuckoo", True), ("cuckoo", False), ("full", True), ("full", False)]


def _nodes(srv: InProcessServers) -> tuple[LeaderNode, FollowerNode]:
    leader, follower = srv.nodes
    assert isinstance(leader, LeaderNode) and isinstance(follower, FollowerNode)
    return leader, follower


def _open(leader: LeaderNode) -> int:
    return int(leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])


def _take_part(srv: InProcessServers, user: int) -> None:
    client = srv.servers().device(user)
    Device(client, *tbn.RATINGS.of(user)).participate(client.round_info())


def _halted_by(srv: InProcessServers, kind: str) -> None:
    """Both servers show exactly one alarm, of ``kind``, and are halted (docs/deployment.md, "Alarms")."""
    for node in _nodes(srv):
        status = node.status()
        assert [a["kind"] for a in status["alarms"]] == [kind] and status["halted"], status


def _retrieved_nothing(srv: InProcessServers, user: int) -> None:
    for node in _nodes(srv):
        assert node.round is not None and user not in node.round.retrieved and user not in node.round.uploaded


#: (block, field, value) announced to the victim only by server 0
MUTATIONS = [
    ("config", "m_prime", 3),
    ("config", "num_buckets", 7),
    ("protocol", "layout", "full"),
    ("protocol", "relay", False),
    ("options", "bound", False),
    ("options", "users_per_round", 2),  # a larger bound T: the victim would clip less
    ("training", "frac_bits", 12),
]


@pytest.mark.parametrize("party", [0, 1])
@pytest.mark.parametrize(("block", "name", "value"), MUTATIONS)
def test_other_round_parameters_announced_to_one_device_are_refused_before_any_request(
        monkeypatch: pytest.MonkeyPatch, block: str, name: str, value: Any, party: int) -> None:
    srv = j21.servers("cuckoo", True)
    leader, _ = _nodes(srv)
    deviant = srv.nodes[party]
    try:
        honest = deviant.round_info

        def deviating(user: int | None) -> dict[str, Any]:  # the server knows who asks (a signed request)
            doc = honest(user)
            if user == VICTIM:
                doc = copy.deepcopy(doc)
                where = doc["protocol"]["options"] if block == "options" else doc[block]
                assert name in where and where[name] != value  # the field exists: the mutation is real
                where[name] = value
            return doc

        monkeypatch.setattr(deviant, "round_info", deviating)
        r = _open(leader)
        with pytest.raises(ProtocolError, match="the servers announce different rounds"):
            _take_part(srv, VICTIM)
        _retrieved_nothing(srv, VICTIM)
        for u in USERS[:-1]:
            _take_part(srv, u)
        out = leader.close_round(r)
        assert out["state"] == "committed" and out["included"] == sorted(USERS[:-1]) and out["rejected"] == [], out
    finally:
        srv.stop()


def _stale(leader: LeaderNode, kind: str, old: dict[str, Any]) -> Callable[[int | None], dict[str, Any]]:
    """Server 0's ``round_info`` announcing, to every device, ``old`` (the last round's document as
    it announced it while that round was open), or this round on the last model version, or this
    round with only the last model's two digests."""
    honest = leader.round_info

    def deviating(user: int | None) -> dict[str, Any]:
        doc = copy.deepcopy(old) if kind == "last round's document" else honest(user)
        if kind == "last model version":
            doc["model_version"], doc["model_sha256"], doc["dense_sha256"] = (
                old["model_version"], old["model_sha256"], old["dense_sha256"])
        elif kind == "last model's digests":
            doc["model_sha256"], doc["dense_sha256"] = old["model_sha256"], old["dense_sha256"]
        return doc

    return deviating


@pytest.mark.parametrize("kind", ["last round's document", "last model version", "last model's digests"])
def test_server_0_replaying_the_last_round_or_model_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch,
                                                                                   kind: str) -> None:
    srv = j21.servers("cuckoo", True)
    leader, follower = _nodes(srv)
    try:
        r0 = _open(leader)
        old = leader.round_info(VICTIM)
        for u in USERS:
            _take_part(srv, u)
        assert leader.close_round(r0)["state"] == "committed" and leader.version == follower.version == 1
        r1 = _open(leader)
        assert leader.round_info(VICTIM)["model_sha256"] != old["model_sha256"]  # the model did change
        monkeypatch.setattr(leader, "round_info", _stale(leader, kind, old))
        client = srv.servers().device(VICTIM)
        if kind == "last model's digests":
            with pytest.raises(ModelDisagreement, match="announces model"):
                client.round_info()
            _retrieved_nothing(srv, VICTIM)
            _halted_by(srv, "model_disagreement")
            return
        with pytest.raises(ProtocolError, match="the servers announce different rounds"):
            client.round_info()
        _retrieved_nothing(srv, VICTIM)
        for node in (leader, follower):
            assert node.status()["alarms"] == [] and node.round_status(r1, None)["state"] == "open"
    finally:
        srv.stop()


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_a_retrieval_over_the_last_model_version_is_caught_by_the_device(monkeypatch: pytest.MonkeyPatch,
                                                                         layout: str, relay: bool) -> None:
    """Server 0 evaluates the round's retrieval over the table of the last model version, its row
    tags made honestly for this round's id (the "old model" replay); it announces the current
    model, as server 1 does, so the device's comparison of the documents passes."""
    srv = j21.servers(layout, relay)
    leader, follower = _nodes(srv)
    try:
        old_table = leader.fp.encode(leader.table)
        assert leader.close_round(j21.play(srv, USERS, []))["state"] == "committed"
        assert not np.array_equal(leader.fp.encode(leader.table), old_table)  # the rows did change
        real = leader.role.begin_round
        monkeypatch.setattr(leader.role, "begin_round", lambda config, table: real(config, old_table))
        r = _open(leader)
        with pytest.raises(RetrievalTampered):
            _take_part(srv, VICTIM)
        _halted_by(srv, "retrieval_tampered")
        assert leader.round is not None and VICTIM not in leader.round.uploaded
        assert leader.round_status(r, None)["state"] == "aborted" and leader.version == follower.version == 1
    finally:
        srv.stop()


@pytest.mark.parametrize(("layout", "relay", "party"), [(*lr, p) for lr in LAYOUTS for p in (0, 1)])
def test_another_devices_valid_answer_is_caught_by_the_device(monkeypatch: pytest.MonkeyPatch, layout: str,
                                                              relay: bool, party: int) -> None:
    """Server ``party`` answers the victim's retrieval with the answer it made for another device of
    the same round (a valid answer, for that device's keys): its reply to the device, or with relay
    server 1's masked answer that server 0 forwards."""
    srv = j21.servers(layout, relay)
    leader, follower = _nodes(srv)
    donor = USERS[0]
    try:
        replies: dict[int, Any] = {}  # a reply, or with relay server 1's masked answer
        if relay and party == 1:  # server 1 sends devices nothing: it swaps its masked answer to server 0
            masked = follower.peer_relay_retrieval_many

            def relayed(r: int, items: list[tuple[int, bytes]]) -> list[Any]:
                outs = masked(r, items)
                for (user, _), out in zip(items, outs, strict=True):
                    if user == donor:
                        replies[donor] = out
                return [replies[donor] if user == VICTIM else out for (user, _), out in zip(items, outs, strict=True)]

            monkeypatch.setattr(follower, "peer_relay_retrieval_many", relayed)
        else:
            honest = LocalServerLink.retrieval

            def retrieval(link: LocalServerLink, round_id: int, body: bytes) -> bytes | None:
                reply = honest(link, round_id, body)
                if link.party != party:
                    return reply
                if link.user == donor:
                    replies[donor] = reply
                return replies[donor] if link.user == VICTIM else reply

            monkeypatch.setattr(LocalServerLink, "retrieval", retrieval)
        r = _open(leader)
        _take_part(srv, donor)  # honest answers for the donor
        assert replies[donor] is not None
        with pytest.raises(RetrievalTampered):
            _take_part(srv, VICTIM)
        _halted_by(srv, "retrieval_tampered")
        assert leader.round is not None and VICTIM not in leader.round.uploaded
        assert leader.round_status(r, None)["state"] == "aborted" and leader.version == follower.version == 0
    finally:
        srv.stop()


@pytest.mark.parametrize("extra", [1, 4096])
def test_a_padded_answer_fails_every_device_alike_whatever_it_asked(monkeypatch: pytest.MonkeyPatch,
                                                                    extra: int) -> None:
    """Server 0 pads its retrieval reply by ``extra`` bytes for two victims that rated different
    items: each refuses it as malformed (the same error), trains and uploads nothing, and raises
    no alarm; the other devices' round commits without them."""
    srv = j21.servers("cuckoo", True)
    leader, follower = _nodes(srv)
    victims = USERS[-2:]
    assert set(tbn.RATINGS.of(victims[0])[0].tolist()) != set(tbn.RATINGS.of(victims[1])[0].tolist())
    try:
        honest = LocalServerLink.retrieval

        def retrieval(link: LocalServerLink, round_id: int, body: bytes) -> bytes | None:
            reply = honest(link, round_id, body)
            return reply + bytes(extra) if link.party == 0 and link.user in victims and reply else reply

        monkeypatch.setattr(LocalServerLink, "retrieval", retrieval)
        r = _open(leader)
        errors = []
        for u in victims:
            with pytest.raises(InvalidMessage) as info:
                _take_part(srv, u)
            errors.append(str(info.value))
        assert errors[0] == errors[1], errors
        for u in USERS[:-2]:
            _take_part(srv, u)
        for node in (leader, follower):
            assert node.status()["alarms"] == [] and not node.round.uploaded & set(victims)  # type: ignore[union-attr]
        out = leader.close_round(r)
        assert out["state"] == "committed" and out["included"] == sorted(USERS[:-2]) and out["rejected"] == [], out
    finally:
        srv.stop()


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_what_each_server_gets_from_a_device_is_the_same_whatever_and_however_many_items_it_rated(
        monkeypatch: pytest.MonkeyPatch, layout: str, relay: bool) -> None:
    """What a server that watches (or delays) devices can see of each: the calls it gets, in their
    order, and their sizes -- with bounded payloads including the challenge request and the proof
    -- are the same for devices of 1, 2, 3 and 4 rated items (``m' = 4``) and different items
    (docs/deployment.md, "Security notes": "every device message has a size fixed by public round
    parameters"; only request timing is not hidden, "Participation and timing")."""
    srv = j21.servers(layout, relay)
    leader, _ = _nodes(srv)
    seen: dict[int, list[tuple[str, int, int]]] = {}

    def watched(name: str) -> Callable[..., Any]:
        honest = getattr(LocalServerLink, name)

        def call(link: LocalServerLink, *args: Any) -> Any:
            body = next((a for a in args if isinstance(a, bytes)), b"")
            seen.setdefault(link.user, []).append((name, link.party, len(body)))
            return honest(link, *args)

        return call

    for name in ("round_info", "retrieval", "dense", "upload", "challenge", "proof"):
        monkeypatch.setattr(LocalServerLink, name, watched(name))
    try:
        r = _open(leader)
        for k, u in enumerate(USERS[:4], start=1):
            items, ratings = tbn.RATINGS.of(u)
            client = srv.servers().device(u)
            Device(client, items[:k], ratings[:k]).participate(client.round_info())
        out = leader.close_round(r)
        assert out["state"] == "committed" and out["included"] == sorted(USERS[:4]), out
        first = seen[USERS[0]]
        assert [c[0] for c in first].count("proof") == 1 and any(c[0] == "challenge" for c in first)
        assert all(seen[u] == first for u in USERS[1:4]), seen
    finally:
        srv.stop()


def test_server_0_showing_a_closed_round_as_open_gets_the_device_no_further_than_server_1(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between rounds server 0 announces the last round again with ``state: open`` (the state is the
    one field of a round document the device does not compare: server 1 announces the same round,
    closed).  The device's first request goes to server 1, which takes no message of a round that
    is not open (docs/security.md, "What the honest server refuses"); nothing reaches either
    server's round, and nothing changes."""
    srv = j21.servers("cuckoo", True)
    leader, follower = _nodes(srv)
    try:
        r = int(leader.open_round(participants=USERS[:-1], deadline_s=30.0)["round_id"])
        old = leader.round_info(VICTIM)
        for u in USERS[:-1]:
            _take_part(srv, u)
        assert leader.close_round(r)["state"] == "committed"
        assert follower.round_info(VICTIM)["state"] == "committed" and old["state"] == "open"
        monkeypatch.setattr(leader, "round_info", lambda user: copy.deepcopy(old))
        client = srv.servers().device(VICTIM)
        info = client.round_info()  # the documents agree but for the state
        with pytest.raises(Conflict, match=f"round {r} is closed"):
            Device(client, *tbn.RATINGS.of(VICTIM)).participate(info)
        for node in (leader, follower):
            assert node.round is not None and node.round.round_id == r and node.round.state == "committed"
            assert VICTIM not in node.round.retrieved and node.status()["alarms"] == []
        assert leader.version == follower.version == 1
    finally:
        srv.stop()
