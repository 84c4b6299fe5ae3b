"""Issue 37: a node takes the uploads that arrive together as one batch (``upload_many``: one
role call under the lock; with relay one forward of the batch to server 1).  Per item the
result or the error that refused it: a bad item -- not a participant, malformed, a user listed
twice -- refuses only itself and changes no state (its user may still upload), and a batch that
races the round's close at server 1 is refused there item by item, counts nowhere, and does
not hold up the close.  The servers are the in-process nodes a deployment runs."""

from __future__ import annotations

from typing import Any

import pytest

from secemb.client.device import Device, DeviceClient
from secemb.errors import InvalidMessage, ProtocolError
from secemb.protocols.stages import UPLOAD
from secemb.server.auth import Forbidden
from secemb.server.errors import Conflict
from secemb.sim.local import LocalPeer, LocalServerLink

from deviation_helpers import FLOOR, RATINGS, USERS, WAIT_S, in_one_batch, in_process


class _HeldUpload(LocalServerLink):
    """Server 0's link of a device whose upload is kept (in ``held``) instead of sent."""

    def __init__(self, *args: Any, held: list[tuple[int, bytes]]) -> None:
        super().__init__(*args)
        self.held = held

    def upload(self, round_id: int, body: bytes) -> None:
        self.held.append((self.user, self._up(body, UPLOAD)))


def _held_round(servers: Any, users: list[int]) -> tuple[int, list[tuple[int, bytes]]]:
    """A round server 0 opens for ``users``; each retrieves and trains; their uploads to server
    0 (relay: the only ones) held, in order."""
    leader, follower = servers.nodes
    r = int(leader.open_round(participants=users, deadline_s=WAIT_S)["round_id"])
    held: list[tuple[int, bytes]] = []
    for u in users:
        links = (_HeldUpload(leader, u, servers.tp, held=held), LocalServerLink(follower, u, servers.tp))
        client = DeviceClient.over(u, links, min_users=FLOOR)
        Device(client, *RATINGS.of(u)).participate(client.round_info())
    return r, held


def test_a_batch_of_uploads_counts_at_both_servers() -> None:
    _, servers = in_process()
    leader, follower = servers.nodes
    r, held = _held_round(servers, USERS)
    assert leader.upload_many(r, held) == [None] * len(USERS)
    assert follower.peer_close(r)["uploaded"] == sorted(USERS)
    doc = leader.close_round(r)
    assert doc["state"] == "committed" and doc["included"] == sorted(USERS)


def test_a_batch_whose_forwarding_raises_counts_none_of_its_forwards_for_the_quorum(monkeypatch) -> None:
    """A forward whose fate at server 1 is unknown (the peer link raised) is not counted as a
    finished upload: the quorum could otherwise close a round on uploads server 1 never got."""
    _, servers = in_process()
    leader, _ = servers.nodes
    r, held = _held_round(servers, USERS)

    def broken(round_id: int, items: list) -> list:
        raise RuntimeError("the peer link broke")

    monkeypatch.setattr(leader, "_forward_uploads", broken)
    with pytest.raises(RuntimeError, match="peer link broke"):
        leader.upload_many(r, held)
    assert leader._current(r).finished == set()


def test_a_bad_item_refuses_only_itself() -> None:
    _, servers = in_process()
    leader, follower = servers.nodes
    r, held = _held_round(servers, USERS)
    (a, up_a), (b, up_b), (c, up_c), (d, up_d) = held
    outsider = max(USERS) + 1000
    out = leader.upload_many(r, [(a, up_a), (b, up_b[:-1]), (c, up_c), (c, up_c), (outsider, up_d)])
    assert out[0] is None and out[2] is None
    assert isinstance(out[1], InvalidMessage)  # truncated
    assert isinstance(out[3], ProtocolError) and "already uploaded" in str(out[3])  # user c listed twice
    assert isinstance(out[4], Forbidden)  # not a participant
    status = leader.round_status(r, None)
    assert status["state"] == "open"
    # the refused users changed nothing: they upload now, as one more batch, and everyone counts
    assert leader.upload_many(r, [(b, up_b), (d, up_d)]) == [None, None]
    assert follower.peer_close(r)["uploaded"] == sorted(USERS)
    assert leader.close_round(r)["included"] == sorted(USERS)


def test_a_batch_racing_the_close_at_server_1_is_refused_there_and_counts_nowhere(monkeypatch) -> None:
    _, servers = in_process()
    leader, follower = servers.nodes
    r, held = _held_round(servers, USERS)
    first, rest = held[:FLOOR], held[FLOOR:]
    assert leader.upload_many(r, first) == [None] * FLOOR
    real = LocalPeer.relay_upload_many

    def close_first(self: LocalPeer, round_id: int, items: list[tuple[int, bytes]]) -> list:
        follower.peer_close(round_id)  # server 1 stops taking uploads while the batch is forwarded
        return real(self, round_id, items)

    monkeypatch.setattr(LocalPeer, "relay_upload_many", close_first)
    out = leader.upload_many(r, rest)
    assert all(isinstance(e, Conflict) for e in out), out  # server 1 refused each forward
    monkeypatch.setattr(LocalPeer, "relay_upload_many", real)
    doc = leader.close_round(r)  # not held up by the refused batch: its users finished
    assert doc["state"] == "committed" and doc["included"] == sorted(u for u, _ in first)


def test_a_batch_for_a_round_that_is_not_open_is_refused_whole() -> None:
    _, servers = in_process()
    leader, _ = servers.nodes
    r, held = _held_round(servers, USERS)
    out = leader.upload_many(r + 1, held)
    assert len(out) == len(held) and all(isinstance(e, Conflict) for e in out)
    assert leader.upload_many(r, held) == [None] * len(held)  # nothing changed by the refusal


def test_concurrent_uploads_are_batched_and_each_caller_gets_its_own_answer(monkeypatch) -> None:
    """What the HTTP app does: each request thread calls ``upload``; the node's batcher hands
    the uploads queued meanwhile to the role as one batch, and raises a refusal in its own
    caller only."""
    _, servers = in_process()
    leader, follower = servers.nodes
    r, held = _held_round(servers, USERS)
    (a, up_a), *rest = held
    results: dict[int, BaseException | None] = {}

    def send(user: int, body: bytes) -> None:
        try:
            leader.upload(r, user, body)
            results[user] = None
        except Exception as exc:  # noqa: BLE001 - the caller's own refusal is what is checked
            results[user] = exc

    bad_user = rest[0][0]
    items = [(bad_user, rest[0][1][:-1])] + rest[1:]
    sizes = in_one_batch(monkeypatch, leader, lambda: send(a, up_a),
                         [lambda item=item: send(*item) for item in items])
    assert sizes == [1, len(items)]  # the uploads that queued meanwhile went to the role as one batch
    assert isinstance(results.pop(bad_user), InvalidMessage)
    assert results == {u: None for u, _ in [(a, up_a)] + rest[1:]}
    leader.upload(r, bad_user, rest[0][1])  # its refusal changed nothing
    assert follower.peer_close(r)["uploaded"] == sorted(USERS)


def _participate(servers: Any, user: int) -> None:
    client = servers.servers().device(user)
    Device(client, *RATINGS.of(user)).participate(client.round_info())


@pytest.mark.parametrize("relay", [True, False])
def test_the_in_process_phase_delivers_a_round_s_uploads_as_one_batch_per_server(monkeypatch, relay: bool) -> None:
    """``_BatchedPhase.send_uploads``: the devices' uploads held while each device runs, then one
    ``upload_many`` per server (server 1's first); a device whose send fails, or whose upload
    server 1 refuses, is reported and sends nothing to server 0."""
    _, servers = in_process(relay=relay)
    leader, follower = servers.nodes
    calls: list[tuple[int, list[int]]] = []
    refuse = USERS[1]

    def spy(node: Any, party: int) -> None:
        real = node.upload_many

        def upload_many(r: int, items: list[tuple[int, bytes]]) -> list:
            calls.append((party, [u for u, _ in items]))
            if party == 1:  # server 1 refuses one device's upload
                outs = real(r, [it for it in items if it[0] != refuse])
                return [Conflict("refused") if u == refuse else outs.pop(0) for u, _ in items]
            return real(r, items)

        monkeypatch.setattr(node, "upload_many", upload_many)

    spy(leader, 0)
    spy(follower, 1)
    r = int(leader.open_round(participants=USERS, deadline_s=WAIT_S)["round_id"])
    broken = USERS[2]
    failed: dict[int, BaseException] = {}

    def send(user: int) -> None:
        if user == broken:
            raise RuntimeError("this device broke before its upload")
        _participate(servers, user)

    servers.servers().phase.send_uploads(USERS, send, failed.__setitem__)
    assert isinstance(failed.pop(broken), RuntimeError)
    ok = [u for u in USERS if u != broken]
    if relay:  # devices upload to server 0 only; it forwards the batch to server 1
        assert calls == [(0, ok)] and not failed
        assert leader.close_round(r)["included"] == sorted(ok)
    else:
        assert calls == [(1, ok), (0, [u for u in ok if u != refuse])]  # server 1 first, the refused one skipped
        assert isinstance(failed.pop(refuse), Conflict) and not failed
        doc = leader.close_round(r)  # two users counted at both servers: under the floor of three
        assert doc["state"] == "aborted" and "2 user(s) uploaded to both servers" in doc["reason"]


@pytest.mark.parametrize("relay", [True, False])
def test_secemb_train_in_process_sends_each_server_a_round_s_uploads_as_batches(monkeypatch, tmp_path,
                                                                                relay: bool) -> None:
    """The driver's devices upload through ``DevicePhase.send_uploads``: in process each
    server a device uploads to (with relay server 0 only: it forwards to server 1) gets a
    round's uploads in one ``upload_many`` call (fails if the driver sends them one by one)."""
    from typer.testing import CliRunner

    from secemb.cli import app
    from secemb.server.retrieval import Retrieval

    sizes: list[tuple[int, int]] = []
    original = Retrieval.upload_many

    def recording(self: Retrieval, r: int, items: list[tuple[int, bytes]]) -> list[Any]:
        sizes.append((self.party, len(items)))
        return original(self, r, items)

    monkeypatch.setattr(Retrieval, "upload_many", recording)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["train", "--dataset", "synthetic-mini", "--dim", "8", "--users-per-round", "40",
                                   "--epochs", "1", "--seed", "1", "--quiet", "--relay" if relay else "--no-relay",
                                   "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    for party in (0,) if relay else (0, 1):
        got = [n for p, n in sizes if p == party]
        assert got and set(got) == {40}, (party, got)
    if relay:
        assert not [n for p, n in sizes if p == 1]
