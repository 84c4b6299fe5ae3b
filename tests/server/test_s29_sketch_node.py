"""The sketch check in the node layer (issue 34, session 29): server 1's verifier messages travel
with its upload digests (``POST /v1/peer/rounds/{r}/verify``), server 0's role decides them, and a
failing device is rejected like a digest mismatch -- over HTTP, between two ``secemb serve``
processes, a device whose keys are not point functions (``two-points``: its key parts are the same
at both servers, so the digests agree and only the sketch can catch it) is left out of every round
it uploads in and shows in ``secemb admin status``, while every honest device is included.  Both
servers of a deployment hold the same sketch key, derived from the peer secret they share."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from net_helpers import WAIT_S, cluster_for, dump_logs, setup, small_data
from secemb.cli import app
from secemb.client.device import Device
from secemb.data import by_user, synthetic_like
from secemb.errors import InvalidMessage
from secemb.models import MatrixFactorization
from secemb.protocols.adversary import attack_behavior
from secemb.protocols.secemb import SecEmbProtocol
from secemb.server.auth import AuthError, Verifier
from secemb.server.deploy import init_half, pair
from secemb.server.node import LeaderNode, make_node
from secemb.server.store import MemoryStore
from secemb.server.verify import decode_verification, encode_verification
from secemb.sim.coordinator import train_networked
from secemb.sim.local import InProcessServers, LocalPeer
from secemb.sim.settings import cluster_settings
from secemb.training import TrainConfig
from secemb.transport.signing import sign_headers

#: devices 0 .. ATTACKERS - 1 run the attack
ATTACKERS = 3


@pytest.mark.parametrize("relay", [False, True])
def test_two_point_devices_fail_the_sketch_over_http(relay: bool) -> None:
    """Every committed round includes exactly its honest devices and rejects exactly the
    attackers that uploaded in it (a device refused at the door after
    :data:`~secemb.server.verify.MAX_REJECTIONS` rejections is neither); the rejections show in
    the rounds' outcomes and as ``device_rejected`` alarms in ``secemb admin status``."""
    tr, te = small_data()
    model, proto, config = setup("secemb", "cuckoo", relay, m_prime=8, epochs=1, users_per_round=8, verify=True)
    took_part: dict[tuple[int, int], list[int]] = {}
    rounds: list[tuple[list[int], dict[str, Any], dict[int, BaseException]]] = []

    def before(index: int, attempt: int, _round_id: int, users: list[int]) -> None:
        took_part[index, attempt] = list(users)

    def after(index: int, attempt: int, outcome: dict[str, Any], errors: dict[int, BaseException]) -> None:
        rounds.append((took_part[index, attempt], dict(outcome), dict(errors)))

    with cluster_for(model, proto, tr, config, min_users=2) as cluster:
        try:
            got = train_networked(cluster, model, proto, tr, te, config, workers=8, wait_s=WAIT_S,
                                  behavior=attack_behavior("two-points", ATTACKERS), before_round=before,
                                  after_round=after)
        except Exception:
            print(dump_logs(cluster))
            raise
        res = CliRunner().invoke(app, ["admin", "status", "--deployment", str(cluster.workdir)])
    assert got.verified_rounds == got.rounds >= 2
    committed = [(users, out, errors) for users, out, errors in rounds if out["state"] == "committed"]
    assert len(committed) == got.rounds
    rejected: set[int] = set()
    for users, out, errors in committed:
        honest = sorted(u for u in users if u >= ATTACKERS)
        assert not set(errors) & set(honest), errors  # honest devices unaffected ...
        assert sorted(out["included"]) == honest  # ... and every one of them included
        attackers = sorted(u for u in users if u < ATTACKERS and u not in errors)  # those that uploaded
        assert sorted(out["rejected"]) == attackers
        rejected.update(attackers)
    assert rejected  # the attack was tried and caught
    assert res.exit_code == 3 and "ALARM at server0" in res.output, res.output  # 3: an alarm is up
    status = json.loads(res.stdout)["server0"]
    alarms = [a for a in status["alarms"] if a["kind"] == "device_rejected"]
    assert alarms and all("failed the upload verification" in a["detail"] for a in alarms)
    named = {int(u) for a in alarms for u in a["detail"].split("[", 1)[1].split("]", 1)[0].split(",")}
    assert named == rejected
    assert status.get("halted") in (None, "", False)


def test_paired_servers_hold_the_same_sketch_key(tmp_path: Path) -> None:
    """Two halves created apart and paired agree on the peer secret, so their nodes' SecEmb
    roles hold the same key, ``HMAC-SHA256(peer_secret, b"secemb-sketch-key")``; another
    deployment's peer secret gives another key, and its signature is refused by server 1 (a
    server with the wrong secret never reaches a round)."""
    settings: dict[str, Any] = {"num_items": 20, "num_users": 5, "model": "mf"}
    halves = (init_half(tmp_path / "op0", 0, ["127.0.0.1"], port=9100, **settings),
              init_half(tmp_path / "op1", 1, ["127.0.0.1"], port=9101, **settings))
    for p in (0, 1):
        pair(halves[p].root, halves[1 - p].public_path(1 - p))
    cfgs = [h.config(p) for p, h in enumerate(halves)]
    assert cfgs[0].protocol == "secemb" and cfgs[0].peer_secret == cfgs[1].peer_secret
    want = hmac.new(cfgs[0].peer_secret, b"secemb-sketch-key", hashlib.sha256).digest()
    nodes = [make_node(cfg, store=MemoryStore(cfg.party, "f"), start_threads=False) for cfg in cfgs]
    try:
        assert [n.role._sketch_key for n in nodes] == [want, want]  # type: ignore[attr-defined]
    finally:
        for n in nodes:
            n.stop()
    other = bytes(32)
    assert SecEmbProtocol().make_server(0, peer_key=other)._sketch_key != want
    verifier = Verifier(1, cfgs[1].peer_secret, cfgs[1].admin_secret, cfgs[1].user_secret, cfgs[1].num_users)
    with pytest.raises(AuthError):
        verifier.verify(sign_headers("server0", other, "GET", "/v1/peer/status"), "GET", "/v1/peer/status", "", b"")


def test_the_peer_verification_answer_is_checked() -> None:
    """Server 1's answer is input: its digests exactly the agreed users' 32-byte lowercase hex
    (or none: a server without verification), its sketch answer lowercase hex of whole bytes
    (empty without the sketch); what the answer's bytes say is the role's to check."""
    good = encode_verification({5: b"\x00" * 32, 3: b"\xab" * 32}, b"\x01\xfe")
    assert good == {"digests": {"3": "ab" * 32, "5": "00" * 32}, "sketch": "01fe"}
    assert decode_verification(good, [3, 5]) == ({3: b"\xab" * 32, 5: b"\x00" * 32}, b"\x01\xfe")
    assert decode_verification({"digests": {}, "sketch": ""}, [3, 5]) == ({}, b"")
    digests = good["digests"]
    for bad in (None, [], {"digests": digests}, {"digests": digests, "sketch": None},
                {"digests": digests, "sketch": "0"}, {"digests": digests, "sketch": "AB"},
                {"digests": digests, "sketch": "zz"}, {"digests": {"3": "ab" * 32}, "sketch": ""},
                {"digests": digests | {"5": "AB" * 32}, "sketch": ""}, {"digests": digests | {"5": 7}, "sketch": ""},
                {"digests": digests | {"6": "00" * 32}, "sketch": ""}):
        with pytest.raises(InvalidMessage):
            decode_verification(bad, [3, 5])


def _in_process_round(relay: bool, answer: Callable[[bytes, int], bytes] | None,
                      monkeypatch: pytest.MonkeyPatch) -> tuple[LeaderNode, dict[str, Any], list[int]]:
    """Four honest devices through a verified round of in-process nodes (the engine's
    :class:`~secemb.sim.local.LocalPeer` between them), server 1's sketch answer passed through
    ``answer(bytes, bytes a user)`` on its way to server 0; server 0, the round's outcome and the
    devices."""
    data = synthetic_like(30, 40, 600, seed=3)
    ratings = by_user(data)
    users = [u for u in range(data.num_users) if ratings.of(u)[0].size][:4]
    model, proto = MatrixFactorization(dim=4, reg=0.01), SecEmbProtocol(layout="cuckoo", relay=relay)
    settings = cluster_settings(model, proto, data, TrainConfig(m_prime=4, seed=5), deadline_s=30.0, min_users=2)
    servers = InProcessServers(settings, proto, model)
    leader = servers.nodes[0]
    assert isinstance(leader, LeaderNode)
    if answer is not None:
        verify = LocalPeer.verify

        def altered(self: LocalPeer, round_id: int, include: list[int]) -> tuple[dict[int, bytes], bytes]:
            digests, got = verify(self, round_id, include)
            assert got and len(got) % len(include) == 0  # one verifier message a device
            return digests, answer(got, len(got) // len(include))

        monkeypatch.setattr(LocalPeer, "verify", altered)
    r = int(leader.open_round(participants=users, deadline_s=30.0)["round_id"])
    for u in users:
        client = servers.servers().device(u)
        Device(client, *ratings.of(u)).participate(client.round_info())
    out = leader.close_round(r)
    servers.stop()
    return leader, out, users


@pytest.mark.parametrize("relay", [False, True])
def test_in_process_nodes_decide_server_1s_sketch_answer(monkeypatch: pytest.MonkeyPatch, relay: bool) -> None:
    """Through the in-process peer link: honest devices pass server 1's real answer; the device
    whose verifier message is altered on the way (one bit of its first element) fails the check
    and is rejected like a digest mismatch -- counted, in the outcome, a ``device_rejected``
    alarm -- while the others are included; an answer cut short aborts the close."""
    leader, out, users = _in_process_round(relay, None, monkeypatch)
    assert (out["state"], out["included"], out["rejected"]) == ("committed", sorted(users), []), out

    def flip_second(got: bytes, size: int) -> bytes:
        return got[:size] + bytes([got[size] ^ 1]) + got[size + 1 :]

    leader, out, users = _in_process_round(relay, flip_second, monkeypatch)
    victim = sorted(users)[1]
    assert (out["state"], out["rejected"]) == ("committed", [victim]), out
    assert out["included"] == [u for u in sorted(users) if u != victim]
    assert leader.rejections == {victim: 1}
    assert [a["kind"] for a in leader.alarms] == ["device_rejected"] and f"[{victim}]" in leader.alarms[0]["detail"]
    monkeypatch.undo()
    leader, out, _ = _in_process_round(relay, lambda got, _size: got[:-1], monkeypatch)
    assert out["state"] == "aborted" and "the sketch check of the uploads failed" in out["reason"], out
    assert leader.rejections == {}
