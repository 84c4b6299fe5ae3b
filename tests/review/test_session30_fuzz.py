"""Session 30 (helper F): hostile requests against real ``secemb serve`` nodes, beside what the
earlier fuzz files send (tests/server/test_net_fuzz.py, test_net_fuzz_bound.py,
test_s26_fuzz_relay_refusal.py: SecEmb's cuckoo relay round; tests/review/test_session25_fuzz_exchange.py:
the one-server app in process, its device messages mutated).

* One server (``secemb serve`` of an SFSL deployment, a real process; SecEA's for the openings,
  the requests before a round and its set-up and round): the operator's JSON
  endpoints get malformed, out-of-range and mistyped documents, bodies that are no JSON, wrong
  content types, a declared length over the limit and concurrent duplicate openings; the devices'
  endpoints requests out of round and stage, at other rounds and stages, replayed.  Every refusal
  is a 4xx with the ``{"error", "detail"}`` document, the server's status is unchanged by it, the
  server's log has no traceback, and -- what no earlier test checked -- the server still
  *restarts* from the journal those refusals left, and three ``secemb client`` devices then play a
  round that commits.
* Two servers (every networked protocol of the registry but SecEmb's cuckoo relay, which
  test_net_fuzz covers): a device's genuine retrieval and upload cut, grown and with a header
  byte flipped, sent at other rounds, under another participant's name, in the wrong order, twice
  and as concurrent duplicates; then malformed bodies (no JSON object, random or cut bytes) at
  every server 1 endpoint server 0 sends to that reads one; the honest devices finish the round,
  and it commits the model of the same round played in process without any bad request.

The fuzzer's choices come from a seeded ``random.Random`` (the test's own; no secret is drawn
from it).  Findings: S30-F1 -- the one-server app journaled an opening before checking its round id against
the nodes' range, so one refused ``{"round_id": -1, ...}`` left a journal ``secemb serve`` refused
to restart from (exit 2, "round_id must be an int >= 0"); fixed in secemb/server/exchange_app.py.
S30-F2 -- server 0 opened ``{"participants": [0, 1, 2], "n_p": 2^70}`` as a round of 3, the
contradicting ``n_p`` silently dropped; fixed in secemb/server/admission.py (round_terms).
"""

from __future__ import annotations

import json
import random
import socket
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from cli_helpers import admin, init_one_server, kill, serve, start_clients, stop  # type: ignore[import-not-found]  # noqa: E402
from net_helpers import WAIT_S, cluster_for, setup, small_data  # type: ignore[import-not-found]  # noqa: E402

from secemb.client.device import DeviceClient, RoundInfo, RoundSession  # noqa: E402
from secemb.data import by_user  # noqa: E402
from secemb.framing import HEADER_BYTES  # noqa: E402
from secemb.models import MatrixFactorization  # noqa: E402
from secemb.protocols import available_protocols, protocol_class  # noqa: E402
from secemb.server.node import LeaderNode  # noqa: E402
from secemb.sim.local import InProcessServers  # noqa: E402
from secemb.sim.settings import cluster_settings  # noqa: E402

from secemb.server.exchange_deploy import ExchangeDeployment  # noqa: E402
from secemb.server.tls import client_context  # noqa: E402
from secemb.transport.signing import sign_headers, user_key  # noqa: E402

#: the fuzzer's own seed (its choices only)
SEED = 30


# --- one server: secemb serve of an SFSL deployment ---------------------------------------------------------


#: ``secemb admin init`` options of each one-server protocol's deployment here
_INIT = {
    "sfsl": ["--dataset", "taobao-mini", "--option", "sfsl_preset=CPP1", "--option", "batch=8",
             "--stage-deadline", "120"],
    "secea": ["--dataset", "synthetic", "--option", "secea_key_bits=1024", "--option", "secea_items=6",
              "--stage-deadline", "150"],
}


class OneServer:
    """A ``secemb serve`` process of an SFSL deployment at ``root`` (devices 0-2), and signed raw
    requests to it."""

    def __init__(self, root: Path, protocol: str = "sfsl") -> None:
        self.root = root
        init_one_server(root, "--protocol", protocol, "--users-per-round", "3", *_INIT[protocol])
        self.dep = ExchangeDeployment.load(root)
        self.tls = client_context(self.dep.tls.ca)
        self.proc = serve(root)
        self.logs: list[str] = []

    def key(self, signer: str) -> bytes:
        return self.dep.admin_secret if signer == "admin" else user_key(self.dep.user_secret, int(signer[5:]))

    def send(self, method: str, path: str, body: bytes, signer: str, headers: dict[str, Any] | None = None
             ) -> httpx.Response:
        """``body`` signed by ``signer`` (``admin`` or ``user:U``) to ``path``, ``headers`` on top."""
        h: dict[str, Any] = sign_headers(signer, self.key(signer), method, path, "", body)
        h.update(headers or {})
        return httpx.request(method, self.dep.url + path, content=body, headers=h, timeout=30.0, trust_env=False,
                             verify=self.tls)

    def raw_status(self, path: str, body: bytes, signer: str, declared: int) -> int:
        """The status line's code of a signed POST of ``body`` that declares ``declared`` bytes
        (sent on a socket of its own: an HTTP client will not send a false length)."""
        url = httpx.URL(self.dep.url)
        head = [f"POST {path} HTTP/1.1", f"Host: {url.host}:{url.port}", f"Content-Length: {declared}",
                "Content-Type: application/octet-stream", "Connection: close"]
        head += [f"{k}: {v}" for k, v in sign_headers(signer, self.key(signer), "POST", path, "", body).items()]
        with socket.create_connection((url.host, url.port), timeout=30.0) as raw, \
                self.tls.wrap_socket(raw, server_hostname=url.host) as conn:
            conn.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + body)
            return int(conn.recv(64).split(b" ")[1])

    def status(self) -> dict[str, Any]:
        return admin("status", "--deployment", str(self.root))

    def restart(self) -> None:
        self.stop()
        self.proc = serve(self.root)

    def stop(self) -> None:
        stop(self.proc)
        assert self.proc.stdout is not None
        self.logs.append(self.proc.stdout.read().decode(errors="replace"))


def _refused(resp: httpx.Response, status: int | None = None) -> str:
    """``resp`` is a 4xx (``status`` if given) with the app's error document; its detail."""
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text)
    assert status is None or resp.status_code == status, (resp.status_code, resp.text)
    doc = resp.json()
    assert set(doc) == {"error", "detail"} and doc["detail"], doc
    return str(doc["detail"])


#: documents for ``POST /v1/admin/exchange/rounds`` that must all be refused: round ids off the
#: node's range [0, 2^62) or mistyped, user lists malformed
_BAD_OPENINGS: list[Any] = [
    {"round_id": -1, "users": [0, 1, 2]},
    {"round_id": 2**62, "users": [0, 1, 2]},
    {"round_id": 2**63, "users": [0, 1, 2]},
    {"round_id": 2**70, "users": [0, 1, 2]},
    {"round_id": -(2**70), "users": [0, 1, 2]},
    {"round_id": True, "users": [0, 1, 2]},
    {"round_id": 1.0, "users": [0, 1, 2]},
    {"round_id": "1", "users": [0, 1, 2]},
    {"round_id": None, "users": [0, 1, 2]},
    {"users": [0, 1, 2]},
    {"round_id": 1},
    {"round_id": 1, "users": "0-2"},
    {"round_id": 1, "users": [0, 1, "2"]},
    {"round_id": 1, "users": [0, 1, True]},
    {"round_id": 1, "users": [0, 1, 2.0]},
    {"round_id": 1, "users": [[0], 1, 2]},
    [], "round", 1, None,
]
#: bodies of the operator's endpoints that are no JSON object
_BAD_JSON_BODIES: list[bytes] = [
    b"", b"{", b"}", b"{'round_id': 1}", b"\xff\xfe{}", b'{"round_id": NaN, "users": [0, 1]}',
    b'{"round_id": Infinity, "users": [0, 1]}', b'{"round_id": 1e400, "users": [0, 1]}',
    b"[" * 5000 + b"]" * 5000, b'{"users": ' + b"[" * 3000 + b"]" * 3000 + b"}", b"\x00" * 32, b"null",
]


def _hostile_openings(node: OneServer, rng: random.Random) -> None:
    """Every bad opening and body of the lists above, in a seeded order, with a seeded content type."""
    types = ["application/json", "text/plain", "application/octet-stream", "multipart/form-data; boundary=x", ""]
    cases = [json.dumps(d).encode() for d in _BAD_OPENINGS] + _BAD_JSON_BODIES
    rng.shuffle(cases)
    for body in cases:
        _refused(node.send("POST", "/v1/admin/exchange/rounds", body, "admin", {"Content-Type": rng.choice(types)}))


@pytest.fixture(scope="module")
def one_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneServer]:
    node = OneServer(tmp_path_factory.mktemp("s30f") / "dep")
    try:
        yield node
    finally:
        node.stop()
        for log in node.logs:
            assert "Traceback" not in log, log[-4000:]


@pytest.mark.parametrize("protocol", sorted(_INIT))
def test_s30_f1_refused_openings_leave_a_journal_the_server_restarts_from(tmp_path: Path, protocol: str) -> None:
    """S30-F1: the operator's bad openings are 422/400 and open nothing; the server then restarts
    (the journal those refusals left is one it reads) with the same status.  Before the fix an
    opening of round -1 (or 2^63) was journaled before the node refused it, and ``secemb serve``
    then exited 2 at every start: "journal ...: round_id must be an int >= 0, got -1"."""
    node = OneServer(tmp_path / "dep", protocol)
    try:
        before = node.status()
        _hostile_openings(node, random.Random(SEED))
        assert node.status() == before
        node.restart()
        assert node.status() == before
    finally:
        node.stop()
    assert not any("Traceback" in log for log in node.logs), node.logs


def test_one_server_hostile_requests_change_nothing_and_the_round_then_commits(one_server: OneServer) -> None:
    """Before and during a round: the devices' requests out of round, stage and order, at bad round
    ids and stages, over the limit (declared), replayed, and the operator's bad documents and
    concurrent duplicate openings -- each a 4xx, the status unchanged; then three ``secemb client``
    devices play the round and it commits."""
    node, rng = one_server, random.Random(SEED + 1)
    before = node.status()
    assert set(_INIT) == set(available_protocols(1))  # every one-server protocol has a deployment here
    # no round yet: every device request is refused
    for path in ("/v1/exchange/rounds/1/psu-advertise", "/v1/exchange/rounds/0/psu-advertise",
                 "/v1/exchange/rounds/1/nonsense", "/v1/exchange/rounds/01/psu-advertise",
                 f"/v1/exchange/rounds/{2**62}/psu-advertise", "/v1/exchange/rounds/-1/psu-advertise"):
        _refused(node.send("POST", path, rng.randbytes(rng.randrange(1, 300)), "user:0"))
        _refused(node.send("GET", path, b"", "user:1"))
    _refused(node.send("GET", "/v1/exchange/round", b"", "user:2"), 409)
    for path in ("/v1/admin/exchange/rounds/1/psu-advertise/close", "/v1/admin/exchange/rounds/1",
                 "/v1/admin/exchange/rounds/x/psu-advertise/close"):
        _refused(node.send("POST" if path.endswith("close") else "GET", path, b"{}" if path.endswith("close") else b"",
                           "admin"))
    # a declared length over the limit, a body over the admin endpoints' limit
    assert node.raw_status("/v1/exchange/rounds/1/psu-advertise", b"x", "user:0", 2**40) == 413
    _refused(node.send("POST", "/v1/admin/exchange/strikes/clear", b"{" + b" " * 100_000 + b"}", "admin"), 413)
    _hostile_openings(node, rng)
    assert node.status() == before
    # concurrent duplicate openings of round 1: one opens it, the rest are refused
    body = json.dumps({"round_id": 1, "users": [0, 1, 2]}).encode()
    clients = start_clients(node.root, "--wait", "240")
    try:
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: node.send("POST", "/v1/admin/exchange/rounds", body, "admin"), range(6)))
        assert sorted(r.status_code for r in answers) == [200] + [409] * 5, [r.text for r in answers]
        # a replay of the accepted opening's signed request: 401 (its nonce is spent)
        ok = next(r for r in answers if r.status_code == 200)
        replay = httpx.request("POST", node.dep.url + "/v1/admin/exchange/rounds", content=body,
                               headers=dict(ok.request.headers), timeout=30.0, trust_env=False, verify=node.tls)
        _refused(replay, 401)
        # the round's later stages, other rounds, a stage's close by a device: refused
        for path in ("/v1/exchange/rounds/1/sum-unmask", "/v1/exchange/rounds/2/psu-advertise",
                     "/v1/exchange/rounds/0/psu-advertise"):
            _refused(node.send("POST", path, rng.randbytes(64), "user:0"))
        _refused(node.send("POST", "/v1/admin/exchange/rounds/1/psu-advertise/close", b"{}", "user:0"), 403)
        _refused(node.send("POST", "/v1/admin/exchange/rounds/1/download/close", b"{}", "admin"))
        for proc in clients:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, (out, err)
            line = json.loads(out.decode().strip().splitlines()[-1])
            assert (line["round_id"], line["outcome"]) == (1, "committed"), line
    finally:
        kill(clients)
    server = node.status()["server"]
    assert (server["round_id"], server["state"], server["users"]) == (1, "committed", [0, 1, 2])
    # after the round: a late message and a second opening of round 1 are refused
    _refused(node.send("POST", "/v1/exchange/rounds/1/psu-advertise", b"x" * 40, "user:1"))
    _refused(node.send("POST", "/v1/admin/exchange/rounds", body, "admin"), 409)


# --- two servers: every networked protocol's device messages -------------------------------------------------

#: every networked two-server protocol, each as its servers run it here (SecEmb's variants in the
#: full layout without the relay: test_net_fuzz fuzzes the cuckoo relay round)
NETWORKED = [name for name in available_protocols(2) if protocol_class(name).capabilities.networked]
#: the round's participants (devices with ratings in the small data set), the floor
PARTICIPANTS, FLOOR = [0, 1, 2, 3], 3
#: a device outside the round
STRANGER = 20


def _parts(name: str) -> tuple[MatrixFactorization, Any, Any, Any]:
    tr, _ = small_data()
    layout = "full" if name.startswith("secemb") else "cuckoo"
    # dim 16: CoLR's rank (12) below the trainable columns
    model, proto, config = setup(name, layout, False, dim=16, m_prime=8, epochs=1, users_per_round=len(PARTICIPANTS))
    return model, proto, config, tr


def _session(client: DeviceClient, info: RoundInfo, tr: Any, u: int) -> RoundSession:
    """Device ``u``'s session, its sample and slots from a generator of its own (public test data:
    the same draws over HTTP and in process)."""
    session = RoundSession(client, info)
    session.prepare(*by_user(tr).of(u), rng=np.random.default_rng(1000 + u))
    return session


def _play(session: RoundSession, model: MatrixFactorization, store: Any, u: int) -> None:
    session.train(lambda rows, d, batch: model.local_step(rows, d, store.state(u), batch))
    session.upload()


def _reference_sha(name: str) -> str:
    """The model after the round of :data:`PARTICIPANTS` in process, without any bad request."""
    model, proto, config, tr = _parts(name)
    servers = InProcessServers(cluster_settings(model, proto, tr, config, deadline_s=3600) | {"min_users": FLOOR},
                               proto, model)
    leader = servers.nodes[0]
    assert isinstance(leader, LeaderNode)
    r = int(leader.open_round(participants=PARTICIPANTS, deadline_s=3600)["round_id"])
    try:
        device = servers.servers().device
        info = device(PARTICIPANTS[0]).round_info()
        store = model.new_user_store(tr.num_users, np.random.default_rng(0), info.adam())
        for u in PARTICIPANTS:
            s = _session(device(u), info, tr, u)
            s.retrieve()
            _play(s, model, store, u)
        out = leader.close_round(r)
        assert out["state"] == "committed" and out["included"] == PARTICIPANTS, out
        return str(leader.sha)
    finally:
        servers.stop()


class TwoServers:
    """A cluster of two ``secemb serve`` processes and signed raw requests to them, over connections kept alive (a
    client for the devices' requests, one for server 0's, the operators'; a TLS handshake a request, at both ends,
    was most of the test process's work in :meth:`send`: py-spy, session 38).  A context manager: it closes its
    clients."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.http = httpx.Client(timeout=WAIT_S, trust_env=False, verify=cluster.tls)
        self.peer = httpx.Client(timeout=WAIT_S, trust_env=False, verify=cluster.peer_tls())
        self.admins = [cluster.admin(p, timeout=WAIT_S) for p in (0, 1)]

    def __enter__(self) -> TwoServers:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in (self.http, self.peer, *self.admins):
            client.close()

    def client(self, u: int) -> DeviceClient:
        k0, k1 = self.cluster.device_keys(u)
        return DeviceClient(u, self.cluster.url(0), self.cluster.url(1), k0, k1, timeout=WAIT_S, tls=self.cluster.tls,
                            min_users=self.cluster.min_users)

    def send(self, party: int, path: str, body: bytes, user: int, headers: dict[str, Any] | None = None
             ) -> httpx.Response:
        h: dict[str, Any] = sign_headers(f"user:{user}", self.cluster.device_keys(user)[party], "POST", path, "", body)
        h.update(headers or {})
        return self.http.post(self.cluster.url(party) + path, content=body, headers=h)

    def send_peer(self, path: str, body: bytes) -> httpx.Response:
        """``body`` to server 1 at ``path`` as server 0 sends (signed with the peer secret, over
        the peer's mutual TLS)."""
        p, _, q = path.partition("?")
        h = sign_headers("server0", self.cluster.peer_secret, "POST", p, q, body)
        return self.peer.post(self.cluster.url(1) + path, content=body, headers=h)

    def snapshot(self) -> list[dict[str, Any]]:
        out = []
        for p in (0, 1):
            doc = self.admins[p].get_json("/v1/admin/status")
            doc.pop("boot_id")
            out.append(doc)
        return out


def _variants(msg: bytes, rng: random.Random) -> list[bytes]:
    """Copies of the genuine ``msg`` no server may take: cut (the header alone, a seeded point, one
    byte short), grown (a byte, a seeded run), each header byte flipped (one seeded bit); the
    empty body."""
    cuts = [HEADER_BYTES, rng.randrange(1, len(msg)), len(msg) - 1]
    out = [b"", *(msg[:k] for k in cuts), msg + b"\0", msg + rng.randbytes(rng.randrange(2, 200))]
    for i in range(HEADER_BYTES):
        out.append(msg[:i] + bytes([msg[i] ^ (1 << rng.randrange(8))]) + msg[i + 1:])
    return [v for v in out if v != msg]  # a header-only request (a full download) cut at its header


def _hostile(srv: TwoServers, path: str, party: int, msg: bytes, user: int, other: int, rng: random.Random,
             before: list[dict[str, Any]]) -> None:
    """Device ``user``'s genuine ``msg`` to ``party`` at ``path`` (round ``r``) mangled, at other
    rounds, under other names: every answer a 4xx, the servers' status as ``before``."""
    r = int(path.split("/")[3])
    cases: list[tuple[str, bytes, int, dict[str, Any] | None]] = [(path, v, user, None) for v in _variants(msg, rng)]
    cases += [(path.replace(f"/{r}/", f"/{x}/"), msg, user, None) for x in (r + 1, r - 1, 2**62 - 1)]
    cases += [(path, msg, STRANGER, None), (path, msg, other, None)]  # a device outside the round; one done
    cases += [(path, msg[:-1], user, {"Content-Type": ct}) for ct in ("application/json", "text/plain", "")]
    rng.shuffle(cases)
    for p, body, u, headers in cases:
        resp = srv.send(party, p, body, u, headers)
        assert 400 <= resp.status_code < 500, (p, len(body), u, resp.status_code, resp.text)
        assert set(resp.json()) == {"error", "detail"}, resp.text
    assert srv.snapshot() == before


def _hostile_peer(srv: TwoServers, r: int, rng: random.Random) -> None:
    """Malformed bodies at every server 1 endpoint that reads one, in round ``r`` (open): JSON that
    is no object or too deep, random bytes, a bare or cut header: every answer a 4xx, the servers'
    status unchanged by each."""
    before = srv.snapshot()
    binary = [b"", b"SEMB", rng.randbytes(HEADER_BYTES), rng.randbytes(rng.randrange(33, 400)), b"SEMB" + bytes(60)]
    # abort takes any JSON object (its reason, if any; an empty body reads as {}): server 0 may
    # abort a round; NaN and 1e400 parse
    cases = [(f"/v1/peer/rounds/{r}/{end}", b) for end in ("verify", "share") for b in _BAD_JSON_BODIES]
    cases += [(f"/v1/peer/rounds/{r}/abort", b) for b in _BAD_JSON_BODIES if b and b"round_id" not in b]
    cases += [("/v1/peer/rounds", b) for b in _BAD_JSON_BODIES]
    cases += [(path, b) for path in (f"/v1/peer/rounds/{r}/agree", f"/v1/peer/rounds/{r}/bound",
                                     f"/v1/peer/model?round={r}", f"/v1/peer/rounds/{r}/relay-upload?user=1",
                                     f"/v1/peer/rounds/{r}/relay-retrieval?user=1") for b in binary]
    rng.shuffle(cases)
    for path, body in cases:
        resp = srv.send_peer(path, body)
        assert 400 <= resp.status_code < 500, (path, body[:40], resp.status_code, resp.text)
        assert set(resp.json()) == {"error", "detail"}, resp.text
        assert srv.snapshot() == before, (path, body[:60], resp.status_code, resp.text)


def _duplicates(srv: TwoServers, party: int, path: str, msg: bytes, user: int) -> bytes:
    """``msg`` sent four times at once (each signed afresh): exactly one is taken; its answer."""
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: srv.send(party, path, msg, user), range(4)))
    codes = sorted(a.status_code for a in answers)
    assert codes[0] < 300 and all(c == 409 for c in codes[1:]), [(a.status_code, a.text) for a in answers]
    return next(a for a in answers if a.status_code < 300).content


def _two_server_round(name: str) -> None:
    """The round of :data:`PARTICIPANTS` over HTTP: device 0 plays it honestly first; devices 1-3
    each first send their own genuine request and upload mangled (:func:`_hostile`), uploads
    before their retrieval, then the genuine ones as concurrent duplicates; the round commits the
    in-process round's model."""
    model, proto, config, tr = _parts(name)
    rng = random.Random(f"{SEED}-{name}")
    with cluster_for(model, proto, tr, config, deadline_s=3600, min_users=FLOOR) as cluster, TwoServers(cluster) as srv:
        admin0 = srv.admins[0]
        info = RoundInfo.from_doc(admin0.post_json("/v1/admin/rounds", {"participants": PARTICIPANTS,
                                                                        "deadline_s": 3600}))
        r = info.round_id
        store = model.new_user_store(tr.num_users, np.random.default_rng(0), info.adam())
        first = _session(srv.client(0), info, tr, 0)
        first.retrieve()
        _play(first, model, store, 0)
        _hostile_peer(srv, r, rng)  # before the quorum (n_p uploads), which closes the round by itself
        up_path, q_path = f"/v1/rounds/{r}/upload", f"/v1/rounds/{r}/retrieval"
        for u in PARTICIPANTS[1:]:
            s = _session(srv.client(u), info, tr, u)
            before = srv.snapshot()
            for p in first._uploads:  # device 0's upload under u's name before u retrieved: 409 (session 44: server 0,
                resp = srv.send(p, up_path, first._uploads[p], u)  # without relay, 400 first: no receipt of server 1)
                code = 400 if p == 0 and 1 in first._uploads else 409
                assert resp.status_code == code and set(resp.json()) == {"error", "detail"}, resp.text
            assert srv.snapshot() == before
            for party in s._requests:
                msg = s.request_for(party)
                _hostile(srv, q_path, party, msg, u, 0, rng, srv.snapshot())
                s.accept_reply(party, _duplicates(srv, party, q_path, msg, u))
            s.fetch_dense()
            s.reconstruct()
            s.train(lambda rows, d, batch, u=u: model.local_step(rows, d, store.state(u), batch))
            receipt = b""  # without relay, server 1's answer to the upload: appended to the upload to server 0
            for party, msg in s._uploads.items():
                if msg:
                    body = msg + receipt if party == 0 else msg
                    _hostile(srv, up_path, party, body, u, 0, rng, srv.snapshot())
                    got = _duplicates(srv, party, up_path, body, u)
                    receipt = got if party == 1 else receipt
        out = admin0.post_json(f"/v1/admin/rounds/{r}/close")
        assert out["state"] == "committed" and out["included"] == PARTICIPANTS, out
        status = srv.snapshot()
        assert status[0]["model_sha256"] == status[1]["model_sha256"] == _reference_sha(name)
        for p in (0, 1):
            assert cluster.alive(p), f"server {p} died"
            assert "Traceback" not in cluster.log(p).read_text(), cluster.log(p).read_text()[-4000:]


@pytest.mark.parametrize("name", ["secemb", "grec", "plaintext"])
def test_two_server_hostile_device_messages_change_nothing(name: str) -> None:
    _two_server_round(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(NETWORKED) - {"secemb", "grec", "plaintext"}))
def test_two_server_hostile_device_messages_change_nothing_sweep(name: str) -> None:
    _two_server_round(name)


def test_s30_f2_an_opening_whose_n_p_contradicts_its_participants_is_refused() -> None:
    """S30-F2: ``{"participants": [0, 1, 2], "n_p": N}`` with N not 3 (2^70 included) is a 422 that
    opens nothing (server 1 already refuses such a round document from server 0); with N = 3 the
    round opens.  Before the fix server 0 opened it as a round of 3, the n_p given dropped."""
    model, proto, config, tr = _parts("plaintext")
    with cluster_for(model, proto, tr, config, deadline_s=3600, min_users=FLOOR) as cluster, TwoServers(cluster) as srv:
        before = srv.snapshot()
        for n_p in (2**70, 4, 2, -1, "3"):
            body = json.dumps({"participants": [0, 1, 2], "n_p": n_p}).encode()
            resp = httpx.post(cluster.url(0) + "/v1/admin/rounds", content=body, trust_env=False, verify=cluster.tls,
                              headers=sign_headers("admin", cluster.admin_secrets[0], "POST", "/v1/admin/rounds", "",
                                                   body), timeout=WAIT_S)
            assert resp.status_code == 422 and "n_p" in resp.json()["detail"], (n_p, resp.text)
        assert srv.snapshot() == before
        doc = cluster.admin(0, timeout=WAIT_S).post_json("/v1/admin/rounds", {"participants": [0, 1, 2], "n_p": 3})
        assert (doc["round_id"], doc["n_p"], doc["participants"]) == (0, 3, [0, 1, 2])


@pytest.mark.slow
def test_secea_hostile_openings_and_requests_change_nothing_and_its_rounds_then_commit(tmp_path: Path) -> None:
    """SecEA's ``secemb serve``: the bad openings, device requests before any round, then the
    set-up and an aggregation round of three ``secemb client`` silos commit.

    Marked slow when it failed 2 of ~25 runs (beside this file's two-server tests, 2 cores): device
    0's client ended with ``{"user": 0, "error": "round 1: aborted"}`` (session 30, helper F).  The
    cause (session 31, helper E): this test opens round 2 as soon as the status shows round 1
    committed, and a device still taking its last answer then read round 2's document as "round 1
    aborted" (or, a moment earlier, was refused that answer: 409); fixed in secemb/client/stages.py
    and secemb/server/exchange_app.py (the document's ``previous``, the last answers kept), each
    moment made every time in tests/client/test_round_end_race.py.  ~9 s a run."""
    node, rng = OneServer(tmp_path / "dep", "secea"), random.Random(SEED + 2)
    clients = []
    try:
        before = node.status()
        _hostile_openings(node, rng)
        for path in ("/v1/exchange/rounds/1/secea-keys", "/v1/exchange/rounds/1/secea-share",
                     "/v1/exchange/rounds/1/nonsense"):
            _refused(node.send("POST", path, rng.randbytes(rng.randrange(1, 300)), "user:0"))
            _refused(node.send("GET", path, b"", "user:1"))
        assert node.status() == before
        clients = start_clients(node.root, "--rounds", "2", "--wait", "90")
        setup = admin("open-round", "--deployment", str(node.root), "--participants", "0-2")
        # the set-up's later stage, a second opening while it is open: refused
        _refused(node.send("POST", f"/v1/exchange/rounds/{setup['round_id']}/secea-answer", b"x" * 64, "user:0"))
        body = json.dumps({"round_id": setup["round_id"] + 1, "users": [0, 1, 2]}).encode()
        _refused(node.send("POST", "/v1/admin/exchange/rounds", body, "admin"), 409)
        deadline = time.monotonic() + 400
        while (doc := node.status()["server"])["state"] == "open":
            assert time.monotonic() < deadline, doc
            time.sleep(0.5)
        assert doc["state"] == "committed", doc
        rnd = admin("open-round", "--deployment", str(node.root), "--participants", "0-2")
        for proc in clients:
            out, err = proc.communicate(timeout=400)
            assert proc.returncode == 0, (out.decode()[-600:], err.decode()[:300], setup, rnd, node.status())
            assert json.loads(out.decode().strip().splitlines()[-1])["outcome"] == "committed"
        assert (node.status()["server"]["round_id"], node.status()["server"]["state"]) == (rnd["round_id"], "committed")
    finally:
        kill(clients)
        node.stop()
    assert not any("Traceback" in log for log in node.logs), node.logs
