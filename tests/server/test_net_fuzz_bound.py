"""Hostile input against the bounded-payload routes (issue 34 (b)) of two real ``secemb serve``
processes: ``GET /v1/rounds/{r}/challenge`` and ``POST /v1/rounds/{r}/proof`` at server 0,
``POST /v1/peer/rounds/{r}/bound`` at server 1.  Malformed bodies, integers in every path position
and bad credentials get a 4xx with the JSON error shape, never a 5xx; no refused request changes
either server's status; and the round then commits the model an in-process run of the same
devices without the bad requests commits (``model_sha256`` equal).

The world (one module-scoped cluster): four devices have uploaded and proved, device ``A`` has
uploaded and holds its proof back until the last test, device ``C`` only retrieved, device ``E``
did nothing.  Server 1 is made to close (server 0's peer call, signed by the test) so that the
check route parses what it gets instead of refusing it as early (``409``, round open); server 0's
round stays open for ``A``'s proof.  The fuzz helpers are ``test_net_fuzz``'s."""

from __future__ import annotations

import gzip
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from net_helpers import WAIT_S, cluster_for, setup, small_data
from test_net_fuzz import _BAD_NUMERALS, _NUMERALS, World, _check_rejected, _key, _mutations, _send

from secemb.client.device import DeviceClient, RoundInfo, RoundSession
from secemb.data import by_user
from secemb.fss.field import P
from secemb.framing import HEADER_BYTES
from secemb.models import MatrixFactorization
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.secemb.sizes import NAME
from secemb.protocols.wire import frame
from secemb.server.node import LeaderNode
from secemb.sim.local import InProcessServers
from secemb.sim.settings import cluster_settings
from secemb.training import TrainConfig
from secemb.transport.network import ApiClient
from secemb.transport.signing import sign_headers

#: users a round (the bound's n)
USERS = 8
FLOOR = 3
#: a check request entry: u64 user || c || part_0 || part_1
ENTRY = 8 + 16 + 32 + 32
#: user ids of the sample check request: no single changed byte turns one into a real user's id
NOBODY = (0x0101 << 48, 0x0202 << 48)


def _world_parts() -> tuple[MatrixFactorization, SecEmbProtocol, TrainConfig, Any, list[int]]:
    tr, _ = small_data()
    model, _, config = setup("secemb", "cuckoo", False, m_prime=8, epochs=1, users_per_round=USERS)
    proto = SecEmbProtocol(layout="cuckoo", relay=False, bound=True, users_per_round=USERS)
    per_user = by_user(tr)
    participants = [u for u in range(tr.num_users) if per_user.of(u)[0].size][:USERS]
    return model, proto, config, tr, participants


def _session(client: DeviceClient, info: RoundInfo, items: np.ndarray, ratings: np.ndarray, u: int) -> RoundSession:
    """Device ``u``'s session, its sample and slots drawn from a generator of its own (public test
    data: the same draws in the HTTP world and the in-process reference, in any order)."""
    session = RoundSession(client, info)
    session.prepare(items, ratings, rng=np.random.default_rng(1000 + u))
    return session


def _upload(session: RoundSession, model: MatrixFactorization, store: Any, u: int) -> None:
    session.retrieve()
    session.train(lambda rows, d, batch: model.local_step(rows, d, store.state(u), batch))
    session.upload()


class BoundWorld(World):
    """The cluster and its bounded round (module docstring): ``test_net_fuzz``'s world in what its
    helpers read (the cluster, the admin and peer links, :meth:`snapshot`), set up here."""

    def __init__(self, cluster: Any, model: MatrixFactorization, tr: Any, participants: list[int]) -> None:
        self.cluster, self.model = cluster, model
        per_user = by_user(tr)
        self.admin = [cluster.admin(0, timeout=WAIT_S), cluster.admin(1, timeout=WAIT_S)]
        self.peer_tls = cluster.peer_tls()
        doc = self.admin[0].post_json("/v1/admin/rounds", {"participants": participants, "deadline_s": 3600})
        self.info = RoundInfo.from_doc(doc)
        self.r = self.info.round_id
        self.participants = participants
        self.proved, (self.a, self.c, self.e) = participants[:4], participants[4:7]
        store = model.new_user_store(tr.num_users, np.random.default_rng(0), self.info.adam())
        for u in self.proved + [self.a]:
            s = _session(self.client(u), self.info, *per_user.of(u), u)
            _upload(s, model, store, u)
            if u != self.a:
                assert s.prove()
            else:
                assert isinstance(s.role, SecEmbUser)
                self.proof_a = s.role.bound_proof(s.client.links[0].challenge(self.r))  # held back
        _session(self.client(self.c), self.info, *per_user.of(self.c), self.c).retrieve()
        query = bytes(range(16))
        rows = b"".join(u.to_bytes(8, "little") + bytes(ENTRY - 8) for u in NOBODY)
        self.samples = {"proof": self.proof_a, "request": frame(NAME, "bound_request", 1, self.r, query, rows)}
        # server 1 closes (what server 0's close does first): the check route now parses requests
        peer = ApiClient(cluster.url(1), "server0", cluster.peer_secret, timeout=WAIT_S, tls=self.peer_tls)
        assert peer.post_json(f"/v1/peer/rounds/{self.r}/close")["uploaded"] == sorted(self.proved + [self.a])

    def client(self, u: int) -> DeviceClient:
        k0, k1 = self.cluster.device_keys(u)
        return DeviceClient(u, self.cluster.url(0), self.cluster.url(1), k0, k1, timeout=WAIT_S, tls=self.cluster.tls,
                            min_users=self.cluster.min_users)


@pytest.fixture(scope="module")
def world():
    model, proto, config, tr, participants = _world_parts()
    with cluster_for(model, proto, tr, config, deadline_s=3600, min_users=FLOOR) as cluster:
        yield BoundWorld(cluster, model, tr, participants)
        for p in (0, 1):
            assert cluster.alive(p), f"server {p} died"


def _malformed_proofs(sample: bytes) -> st.SearchStrategy[bytes]:
    """Bodies that are never a well-formed proof (of another length, a changed header, or a field
    element not below ``p``): device ``A`` uploaded, so a well-formed one would be kept."""
    n = len(sample)
    elements = (n - HEADER_BYTES - 48) // 8
    return st.one_of(
        st.binary(max_size=2048).filter(lambda b: len(b) != n),
        st.integers(0, n - 1).map(lambda k: sample[:k]),
        st.binary(min_size=1, max_size=64).map(lambda extra: sample + extra),
        st.tuples(st.integers(0, HEADER_BYTES - 1), st.integers(1, 255)).map(
            lambda t: sample[: t[0]] + bytes([sample[t[0]] ^ t[1]]) + sample[t[0] + 1 :]),
        st.tuples(st.integers(0, elements - 1), st.integers(P, 2**64 - 1)).map(  # non-canonical element
            lambda t: sample[: HEADER_BYTES + 48 + 8 * t[0]] + t[1].to_bytes(8, "little")
            + sample[HEADER_BYTES + 56 + 8 * t[0] :]),
    )


def _routes(w: BoundWorld, x: str | int) -> list[tuple[int, str, str, str, str]]:
    """(party, method, path, signer, sample) of the three routes, and each at the other server,
    with ``x`` as the round id."""
    return [
        (0, "POST", f"/v1/rounds/{x}/proof", f"user:{w.e}", "proof"),  # did not upload
        (0, "POST", f"/v1/rounds/{x}/proof", f"user:{w.proved[0]}", "proof"),  # proved already
        (1, "POST", f"/v1/rounds/{x}/proof", f"user:{w.a}", "proof"),  # server 0's route
        (0, "GET", f"/v1/rounds/{x}/challenge", f"user:{w.e}", ""),
        (1, "GET", f"/v1/rounds/{x}/challenge", f"user:{w.a}", ""),
        (1, "POST", f"/v1/peer/rounds/{x}/bound", "server0", "request"),
        (0, "POST", f"/v1/peer/rounds/{x}/bound", "server0", "request"),  # server 0 serves no peer route
    ]


def _refused(w: BoundWorld, resp: httpx.Response, before: list[dict]) -> None:
    assert 400 <= resp.status_code < 500, (resp.request.url, resp.status_code, resp.text)
    _check_rejected(w, resp, before)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_bodies_get_4xx_and_change_nothing(world, data):
    w = world
    party, method, path, signer, sample = data.draw(st.sampled_from(_routes(w, w.r)))
    body = data.draw(_mutations(w.samples.get(sample, b"")))
    before = w.snapshot()
    resp = _send(w, party, method, path, body, signer)
    if resp.status_code < 400:  # only a check request for no user: an empty answer, nothing kept
        assert (party, sample, len(body)) == (1, "request", HEADER_BYTES + 16), (path, resp.status_code)
        assert len(resp.content) == HEADER_BYTES and w.snapshot() == before
        return
    _refused(w, resp, before)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_malformed_proofs_of_a_device_that_uploaded_get_4xx_and_change_nothing(world, data):
    w = world
    body = data.draw(_malformed_proofs(w.samples["proof"]))
    before = w.snapshot()
    _refused(w, _send(w, 0, "POST", f"/v1/rounds/{w.r}/proof", body, f"user:{w.a}"), before)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_round_ids_get_4xx_and_change_nothing(world, data):
    w = world
    x = data.draw(_NUMERALS)
    party, method, path, signer, sample = data.draw(st.sampled_from(_routes(w, x)))
    before = w.snapshot()
    _refused(w, _send(w, party, method, path, w.samples.get(sample, b""), signer), before)


@pytest.mark.parametrize("x", _BAD_NUMERALS[:6])
def test_non_canonical_round_ids_are_a_422_on_every_route(world, x):
    w = world
    before = w.snapshot()
    for party, method, path, signer, sample in _routes(w, x):
        resp = _send(w, party, method, path, w.samples.get(sample, b""), signer)
        assert resp.status_code == 422, (path, resp.status_code, resp.text)
        _check_rejected(w, resp, before)


def test_check_requests_that_name_real_devices_wrongly_use_up_no_answer(world):
    """A check request naming a device that proved twice (400), one of another round (400), the
    device that only retrieved (409): refused, and no device's one answer is used up (the close
    below checks every proof)."""
    w = world
    q = bytes(16)
    entry = w.proved[0].to_bytes(8, "little") + bytes(ENTRY - 8)
    before = w.snapshot()
    for body, code in ((frame(NAME, "bound_request", 1, w.r, q, entry + entry), 400),
                       (frame(NAME, "bound_request", 1, w.r + 1, q, entry), 400),
                       (frame(NAME, "bound_request", 1, w.r, q, w.c.to_bytes(8, "little") + bytes(ENTRY - 8)), 409)):
        resp = _send(w, 1, "POST", f"/v1/peer/rounds/{w.r}/bound", body, "server0")
        assert resp.status_code == code, resp.text
        _check_rejected(w, resp, before)


def test_bad_credentials_on_the_bound_routes_are_a_401(world):
    w = world
    before = w.snapshot()
    routes = _routes(w, w.r)
    for party, method, path, signer, sample in (routes[0], routes[3], routes[5]):
        body = w.samples.get(sample, b"")
        good = sign_headers(signer, _key(w, party, signer), method, path, "", body)
        for headers in (None, {**good, "X-Secemb-Signature": "0" * 64},
                        sign_headers(signer, b"x" * 32, method, path, "", body),
                        sign_headers(signer, _key(w, party, signer), method, path, "", body + b"!"),
                        {k: v for k, v in good.items() if k != "X-Secemb-Nonce"}):
            resp = httpx.request(method, w.cluster.url(party) + path, content=body, headers=headers or {},
                                 timeout=WAIT_S, trust_env=False, verify=w.peer_tls if party == 1 else w.cluster.tls)
            assert resp.status_code == 401, (path, headers, resp.text)
            _check_rejected(w, resp, before)


def test_odd_headers_and_encodings_get_4xx_and_change_nothing(world):
    """Device A's proof gzip-compressed with ``Content-Encoding: gzip`` (a server that decoded
    request bodies would take a bomb; it reads the bytes as they are: a malformed proof), and
    streamed in chunks without ``Content-Length`` one byte over its limit (413); a proof of the
    device that did not upload under odd content types (409)."""
    w = world
    path, proof = f"/v1/rounds/{w.r}/proof", w.samples["proof"]
    before = w.snapshot()
    signer = f"user:{w.a}"
    packed = gzip.compress(proof)
    resp = _send(w, 0, "POST", path, packed, signer, {"Content-Encoding": "gzip"})
    assert resp.status_code in (400, 413), resp.text
    _check_rejected(w, resp, before)
    longer = proof + b"\0"
    headers = sign_headers(signer, _key(w, 0, signer), "POST", path, "", longer)
    resp = httpx.post(w.cluster.url(0) + path, content=iter([longer[:1000], longer[1000:]]), headers=headers,
                      timeout=WAIT_S, trust_env=False, verify=w.cluster.tls)
    assert resp.status_code == 413 and "content-length" not in resp.request.headers, resp.text  # chunked
    _check_rejected(w, resp, before)
    for media in ("application/json", "text/plain; charset=utf-8", "multipart/form-data; boundary=x", ""):
        resp = _send(w, 0, "POST", path, proof, f"user:{w.e}", {"Content-Type": media})
        assert resp.status_code == 409, (media, resp.text)
        _check_rejected(w, resp, before)


def _reference_sha(participants: list[int]) -> str:
    """The model after the same round in process, without any bad request."""
    model, proto, config, tr, _ = _world_parts()
    per_user = by_user(tr)
    servers = InProcessServers(cluster_settings(model, proto, tr, config, deadline_s=3600) | {"min_users": FLOOR},
                               proto, model)
    leader = servers.nodes[0]
    assert isinstance(leader, LeaderNode)
    r = int(leader.open_round(participants=participants, deadline_s=3600)["round_id"])
    try:
        device = servers.servers().device
        info = device(participants[0]).round_info()
        store = model.new_user_store(tr.num_users, np.random.default_rng(0), info.adam())
        for u in participants[:5]:
            s = _session(device(u), info, *per_user.of(u), u)
            _upload(s, model, store, u)
            assert s.prove()
        _session(device(participants[5]), info, *per_user.of(participants[5]), participants[5]).retrieve()
        out = leader.close_round(r)
        assert out["state"] == "committed" and out["included"] == sorted(participants[:5]), out
        return str(leader.sha)
    finally:
        servers.stop()


def test_zz_the_round_then_commits_the_model_of_the_run_without_bad_requests(world):
    """Last in the module: device A sends its proof; the close includes the five devices that
    proved, rejects none, and commits the in-process run's model.  Then every route refuses
    (the round is closed) and changes nothing."""
    w = world
    w.client(w.a).links[0].proof(w.r, w.proof_a)
    out = w.admin[0].post_json(f"/v1/admin/rounds/{w.r}/close")
    assert out["state"] == "committed", out
    assert out["included"] == sorted(w.proved + [w.a]) and out["rejected"] == []
    status = [a.get_json("/v1/admin/status") for a in w.admin]
    assert status[0]["model_version"] == status[1]["model_version"] == 1
    assert status[0]["model_sha256"] == status[1]["model_sha256"] == _reference_sha(w.participants)
    # after the close: the routes refuse, the committed round stays as it is
    before = w.snapshot()
    for party, method, path, signer, sample in _routes(w, w.r):
        _refused(w, _send(w, party, method, path, w.samples.get(sample, b""), signer), before)
    _refused(w, _send(w, 0, "POST", f"/v1/rounds/{w.r}/proof", w.proof_a, f"user:{w.a}"), before)
    assert w.admin[0].get_json(f"/v1/rounds/{w.r}/status")["included"] == out["included"]
