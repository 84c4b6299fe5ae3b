"""Bounded payloads over HTTP (issue 34 (b)): the device's ``GET /v1/rounds/{r}/challenge`` and
``POST /v1/rounds/{r}/proof`` at server 0, server 0's ``POST /v1/peer/rounds/{r}/bound`` at
server 1 (:mod:`secemb.server.app`), their clients (:class:`~secemb.transport.http.HttpServerLink`,
:class:`~secemb.server.peer.HttpPeer`) and their body limits.

The links are checked against a fake server (an ``httpx.MockTransport``); the routes with two
real ``secemb serve`` processes on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from net_helpers import WAIT_S, cluster_for, dump_logs, setup, small_data

from sdk_round import trained  # type: ignore[import-not-found]
from secemb.client.device import Device, DeviceClient, RoundInfo, RoundSession
from secemb.data import by_user
from secemb.errors import InvalidMessage
from secemb.framing import HEADER_BYTES
from secemb.models import MatrixFactorization
from secemb.protocols.adversary import AdversaryRecord, attack_behavior
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.secemb.bounds import bound_params
from secemb.protocols.secemb.sizes import NAME
from secemb.protocols.wire import frame
from secemb.server.peer import HttpPeer, PeerRefused, PeerUnreachable
from secemb.sim.coordinator import train_networked
from secemb.training import TrainConfig, train
from secemb.transport.errors import RemoteError
from secemb.transport.http import HttpServerLink
from secemb.transport.network import ApiClient

#: users a round, as the bound's t takes them
USERS = 8
M, W, P = 60, 4, 0


class FakeServer:
    """An ``httpx`` transport that records each request and answers ``(status, body)``."""

    def __init__(self, status: int, body: bytes, media: str = "application/octet-stream") -> None:
        self.status, self.body, self.media = status, body, media
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        return httpx.Response(self.status, content=self.body, headers={"content-type": self.media})

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def _device_link(server: FakeServer) -> HttpServerLink:
    return HttpServerLink(0, 3, "http://server0.test", b"k" * 32, http=server.client())


@pytest.mark.parametrize("size", [0, 15, 17, 32])
def test_a_challenge_of_another_length_is_refused(size: int) -> None:
    link = _device_link(FakeServer(200, b"c" * size))
    with pytest.raises(InvalidMessage, match=f"a challenge of {size} bytes, not 16"):
        link.challenge(7)


def test_the_device_link_gets_the_challenge_and_posts_the_proof_signed() -> None:
    server = FakeServer(200, bytes(range(16)))
    link = _device_link(server)
    assert link.challenge(7) == bytes(range(16))
    server.status, server.body = 204, b""
    link.proof(7, b"proof bytes")
    get, post = server.seen
    assert (get.method, get.url.path, get.content) == ("GET", "/v1/rounds/7/challenge", b"")
    assert (post.method, post.url.path, post.content) == ("POST", "/v1/rounds/7/proof", b"proof bytes")
    assert post.headers["content-type"] == "application/octet-stream"
    assert {r.headers["x-secemb-key-id"] for r in server.seen} == {"user:3"}
    server.status, server.body, server.media = 409, b'{"error": "Conflict", "detail": "no upload"}', "application/json"
    with pytest.raises(RemoteError) as caught:
        link.proof(7, b"again")
    assert (caught.value.status, caught.value.error) == (409, "Conflict")


def _peer(server: FakeServer) -> HttpPeer:
    peer = HttpPeer("http://server1.test", b"p" * 32)
    peer.api.close()
    peer.api = ApiClient("http://server1.test", "server0", b"p" * 32, http=server.client())  # over the fake server
    return peer


def test_the_peer_link_posts_the_bound_request_and_maps_failures() -> None:
    server = FakeServer(200, b"answer bytes")
    peer = _peer(server)
    try:
        assert peer.bound(5, b"request bytes") == b"answer bytes"
        (req,) = server.seen
        assert (req.method, req.url.path, req.content) == ("POST", "/v1/peer/rounds/5/bound", b"request bytes")
        assert req.headers["x-secemb-key-id"] == "server0"
        assert req.headers["content-type"] == "application/octet-stream"
        server.status, server.media = 409, "application/json"
        server.body = b'{"error": "ProtocolError", "detail": "user 3 was asked before"}'
        with pytest.raises(PeerRefused, match="asked before"):
            peer.bound(5, b"request bytes")
        server.status = 500
        with pytest.raises(PeerUnreachable, match="500"):
            peer.bound(5, b"request bytes")
    finally:
        peer.shutdown()


def test_body_limits_of_the_bound_messages() -> None:
    """The proof's exact length, and the request's ``16 + 88 n`` body bytes (hand values at the
    default: 40 projections of t = floor(log2((2^31 - 1) / (8 * 3))) = 26 bits, the cuckoo layout's 3
    proven values a row since session 31); 0 (nothing taken)
    where the deployment has no bound or the message goes to the other server."""
    bounded = SecEmbProtocol(layout="cuckoo", bound=True, users_per_round=USERS)
    plain = SecEmbProtocol(layout="cuckoo")
    rc = bounded.round_config(1, M, W, P, 6)
    params = bound_params(rc, USERS)
    assert (params.rows, params.bits) == (40, 26)
    assert bounded.max_message_bytes("bound_proof", rc, party=0, num_users=USERS) == \
        HEADER_BYTES + params.message_bytes(0)
    for n in (0, 1, 8, 100):
        assert bounded.max_message_bytes("bound_request", rc, party=1, num_users=n) == HEADER_BYTES + 16 + 88 * n
    assert bounded.max_message_bytes("bound_proof", rc, party=1, num_users=USERS) == 0
    assert bounded.max_message_bytes("bound_request", rc, party=0, num_users=USERS) == 0
    for kind in ("bound_proof", "bound_request"):
        for party in (0, 1):
            assert plain.max_message_bytes(kind, rc, party=party, num_users=USERS) == 0


# ---------------------------------------------------------------------------------------- two servers


def _bounded(relay: bool) -> tuple[MatrixFactorization, SecEmbProtocol, TrainConfig]:
    model, _, config = setup("secemb", "cuckoo", relay, m_prime=8, epochs=1, users_per_round=USERS)
    return model, SecEmbProtocol(layout="cuckoo", relay=relay, bound=True, users_per_round=USERS), config


@pytest.mark.parametrize(("relay", "attack"), [(False, "oversized-payload"), (True, "wrapped-dense")])
def test_payload_attackers_are_rejected_over_http(relay: bool, attack: str) -> None:
    """A whole run on two ``secemb serve`` processes with bounded payloads: in every committed
    round the attackers that took part (users 0 and 1: their uploads are beyond the bound, so
    they send no proof) and only they are rejected, every other device is included; server 0
    reports them (``device_rejected``, not halting).  With the devices' draws from the seed, the
    run is the in-process engine's run bit for bit: the model, the rejections, the bytes."""
    tr, te = small_data()
    model, proto, config = _bounded(relay)
    record, ref_record = AdversaryRecord(attack, 2), AdversaryRecord(attack, 2)
    ref = train(model, proto, tr, te, config, behavior=attack_behavior(attack, 2), after_round=ref_record.after_round)
    took_part: dict[int, list[int]] = {}
    with cluster_for(model, proto, tr, config, min_users=2) as cluster:
        try:
            got = train_networked(cluster, model, proto, tr, te, config, workers=8, wait_s=WAIT_S,
                                  device_randomness="reproducible",
                                  behavior=attack_behavior(attack, 2), after_round=record.after_round,
                                  before_round=lambda _i, _a, r, users: took_part.__setitem__(r, sorted(users)))
        except Exception:
            print(dump_logs(cluster))
            raise
        status = cluster.admin(0).get_json("/v1/admin/status")
        outcomes = {r: cluster.admin(0).get_json(f"/v1/rounds/{r}/status") for r in took_part}
    assert got.rounds >= 3 and len(record.rounds) == got.rounds
    attacked = 0
    for r, users in took_part.items():
        out = outcomes[r]
        if out["state"] != "committed":
            continue
        bad = [u for u in users if u < 2]
        assert out["rejected"] == bad and out["included"] == [u for u in users if u >= 2], (r, users, out)
        attacked += bool(bad)
    assert attacked >= 1  # the attackers took part in some round
    assert all(r["malicious_included"] == [] and r["refused_devices"] == [] for r in record.rounds)
    assert "device_rejected" in {a["kind"] for a in status["alarms"]} and not status.get("halted")
    assert got.model_sha256 == ref.model_sha256 and record.rounds == ref_record.rounds
    assert got.upload_bytes_per_user_round == ref.upload_bytes_per_user_round
    assert got.download_bytes_per_user_round == ref.download_bytes_per_user_round


def _uploaded(client: DeviceClient, info: RoundInfo, items: np.ndarray, ratings: np.ndarray) -> RoundSession:
    """Device ``client`` retrieves, trains and uploads through the SDK, without proving."""
    session = trained(client, info, items, ratings)
    session.upload()
    return session


def test_bad_requests_on_the_bound_routes_get_4xx_and_change_nothing() -> None:
    """Two ``secemb serve`` processes, one round of five devices with bounded payloads.  A
    challenge or proof of a device that did not upload, a truncated, oversized or re-framed
    proof, one for another round, a second proof, the device routes at server 1, the peer route
    signed by a device or asked while the round is open, an over-long check request: each gets
    its 4xx with the JSON error shape and leaves both servers' status as it was.  Then the device
    whose proofs were refused proves, and the close includes every device that proved and leaves
    out the one that uploaded without a proof, as a dropout (no rejection, no alarm)."""
    tr, _ = small_data()
    model, proto, config = _bounded(relay=False)
    ratings = by_user(tr)
    a, b, c, d, e = [u for u in range(tr.num_users) if ratings.of(u)[0].size][:5]
    with cluster_for(model, proto, tr, config, min_users=2) as cluster:
        admins = [cluster.admin(p, timeout=WAIT_S) for p in (0, 1)]
        admin = admins[0]

        def status() -> list[dict[str, Any]]:
            return [{k: v for k, v in x.get_json("/v1/admin/status").items() if k != "boot_id"} for x in admins]

        def refused(code: int, send: Callable[[], object]) -> None:
            before = status()
            with pytest.raises(RemoteError) as caught:
                send()
            err = caught.value
            assert (err.status, bool(err.detail)) == (code, True), (err.status, err.error, err.detail)
            assert err.error in {"forbidden", "not_found", "payload_too_large", "invalid_message", "conflict"}
            assert status() == before

        def client(u: int) -> DeviceClient:
            return DeviceClient(u, cluster.url(0), cluster.url(1), *cluster.device_keys(u), timeout=WAIT_S,
                                tls=cluster.tls, min_users=cluster.min_users)

        info = RoundInfo.from_doc(admin.post_json("/v1/admin/rounds", {"participants": [a, b, c, d, e],
                                                                       "deadline_s": 120}))
        r = info.round_id
        devices = {u: client(u) for u in (a, b, c, d, e)}
        proof_bytes = proto.max_message_bytes("bound_proof", info.config, party=0, num_users=5)
        refused(409, lambda: devices[a].links[0].challenge(r))  # nothing uploaded yet
        refused(409, lambda: devices[a].links[0].proof(r, bytes(proof_bytes)))
        for u in (a, b, c):
            Device(devices[u], *ratings.of(u)).participate(devices[u].round_info())
        late = _uploaded(devices[d], info, *ratings.of(d))
        challenge = devices[d].links[0].challenge(r)
        assert len(challenge) == 16 and devices[d].links[0].challenge(r) == challenge
        assert isinstance(late.role, SecEmbUser)
        proof = late.role.bound_proof(challenge)
        assert len(proof) == proof_bytes
        d0, d1 = devices[d].links
        refused(404, lambda: d1.challenge(r))  # server 0's routes
        refused(413, lambda: d1.proof(r, proof))  # server 1 takes no proof: a body limit of 0
        refused(409, lambda: d0.challenge(r + 1))
        refused(409, lambda: d0.proof(r + 1, proof))
        refused(400, lambda: d0.proof(r, proof[:-1]))
        refused(413, lambda: d0.proof(r, proof + b"\0"))
        refused(400, lambda: d0.proof(r, frame(NAME, "bound_proof", 0, r + 1, proof[HEADER_BYTES:])))
        refused(409, lambda: devices[a].links[0].proof(r, proof))  # a proved already
        refused(409, lambda: devices[e].links[0].proof(r, proof))  # e did not upload
        peer = ApiClient(cluster.url(1), "server0", cluster.peer_secret, timeout=WAIT_S, tls=cluster.peer_tls())
        request = HEADER_BYTES + 16 + 88 * 5  # the check request's limit at n_p = 5 users
        refused(403, lambda: devices[d].servers[1].post_bytes(f"/v1/peer/rounds/{r}/bound", bytes(request)))
        refused(409, lambda: peer.post_bytes(f"/v1/peer/rounds/{r}/bound", bytes(request)))  # the round is open
        refused(413, lambda: peer.post_bytes(f"/v1/peer/rounds/{r}/bound", bytes(request + 1)))
        d0.proof(r, proof)  # the refused ones kept nothing
        _uploaded(devices[e], info, *ratings.of(e))  # uploads, never proves: a dropout (its proof may be late)
        out = admin.post_json(f"/v1/admin/rounds/{r}/close")
        final = status()[0]
    assert out["state"] == "committed", out
    assert out["included"] == sorted((a, b, c, d)) and out["rejected"] == []
    assert "device_rejected" not in {x["kind"] for x in final["alarms"]} and not final.get("halted")
