"""Session 42, finding S42-Q2: server 0 counted for the quorum a device whose upload it held, not
whether server 1 held it too.

Without relay a device uploads to server 1 first, then to server 0, so an honest device server 0
counts is already at server 1.  A device with a valid credential can upload to server 0 alone (and,
with bounded payloads, prove there): server 0 counted it, its closing thread closed the round on
"quorum reached", and the close's agreed set (both servers' uploads) left it out.  So ``K`` such
devices closed a round early: the honest devices still on their way were cut (refused, 409 "closed"),
and the round committed with fewer devices than its quorum or aborted below ``min_users``.

Server 0 now counts for the quorum only the devices server 1 also holds: once its own count reaches
the quorum, its closing thread asks server 1 which users it absorbed (``GET
/v1/peer/rounds/{r}/uploaded``, one call per check: :meth:`~secemb.server.leader.LeaderNode._closer`).
Such a device is left out like a dropout, with no strike and no alarm: it is indistinguishable from
an honest device that died between its two uploads.  With relay, server 0 counts an upload only
once its forward reached server 1, so the gap never existed (checked here too).

Session 44: without relay server 0 takes no upload without server 1's receipt of it (docs/security.md,
"Server 1's receipts"), so a device can no longer reach server 0 alone: the devices "at server 0 only"
below are refused (400, nothing kept, nothing counted) and the quorum check is a second line behind the
receipts.  The tests keep their scenario and now also check the refusal.

The in-process tests run the leader's closing thread on :class:`~secemb.sim.local.InProcessServers`
(which starts none of its own); the network test runs two ``secemb serve`` processes on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from sdk_round import trained  # type: ignore[import-not-found]
from secemb.client.device import DeviceClient, RoundInfo, RoundSession
from secemb.data import by_user, synthetic_like
from secemb.errors import InvalidMessage, SecembError
from secemb.models import MatrixFactorization
from secemb.protocols.secemb import SecEmbProtocol
from secemb.server.follower import FollowerNode
from secemb.server.leader import LeaderNode
from secemb.server.peer import HttpPeer, PeerRefused, PeerUnreachable
from secemb.server.rounds import FINAL
from secemb.sim.local import InProcessServers, LocalPeer
from secemb.sim.settings import cluster_settings
from secemb.training import TrainConfig
from secemb.transport.errors import RemoteError

#: per-request timeout and retry budget of the network test (seconds)
WAIT_S = 30.0

_DATA = synthetic_like(30, 40, 600, seed=3)
_RATINGS = by_user(_DATA)
#: the round's eight participants (devices with ratings)
_USERS = [u for u in range(_DATA.num_users) if _RATINGS.of(u)[0].size][:8]
#: how long a round must stay open to show that its closing thread did not close it (the thread wakes on
#: every upload and proof, and every 0.5 s: an early close shows within milliseconds)
_HOLD_S = 1.5


def _take_part(client: DeviceClient, info: RoundInfo, items: np.ndarray, ratings: np.ndarray,
               only: int | None) -> RoundSession:
    """Device ``client`` retrieves, trains, uploads (``only``: to that server alone, as
    :meth:`~secemb.client.device.RoundSession.upload` says) and, where the round has bounded payloads and
    its upload reached server 0, proves."""
    session = trained(client, info, items, ratings)
    session.upload(only=only)
    if session.proves and only in (None, 0):
        assert session.prove()
    return session


class _Cluster:
    """Two in-process nodes (SecEmb cuckoo, ``relay``, ``bound``; ``min_users`` 2) with server 0's
    closing thread running, and round :attr:`r` open to :data:`_USERS` with ``quorum`` and ``deadline_s``."""

    def __init__(self, *, relay: bool, bound: bool, quorum: int, deadline_s: float = 60.0) -> None:
        model = MatrixFactorization(dim=4, reg=0.01)
        proto = SecEmbProtocol(layout="cuckoo", relay=relay, bound=bound, users_per_round=8)
        settings = cluster_settings(model, proto, _DATA, TrainConfig(m_prime=4, seed=5), deadline_s=60.0,
                                    min_users=2)
        self.servers = InProcessServers(settings, proto, model)
        leader = self.servers.nodes[0]
        assert isinstance(leader, LeaderNode)
        self.leader = leader
        self.r = int(leader.open_round(participants=_USERS, deadline_s=deadline_s, quorum=quorum)["round_id"])
        # the closing thread LeaderNode starts in a deployment (InProcessServers starts none); stop() ends it
        threading.Thread(target=leader._closer, daemon=True, name="test-closer").start()  # noqa: SLF001

    def send(self, u: int, only: int | None = None) -> BaseException | None:
        """Device ``u`` takes part (:func:`_take_part`); the error it met, if any (a refusal of a closed round)."""
        client = self.servers.servers().device(u)
        try:
            _take_part(client, client.round_info(), *_RATINGS.of(u), only=only)
        except SecembError as exc:
            return exc
        return None

    def state(self) -> str:
        return str(self.leader.round_status(self.r, None)["state"])

    def stays_open(self, seconds: float = _HOLD_S) -> bool:
        """Whether the round is still open after ``seconds`` (checked every 50 ms)."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            if self.state() != "open":
                return False
            time.sleep(0.05)
        return self.state() == "open"

    def outcome(self, timeout: float = 30.0) -> dict[str, Any]:
        """The round's outcome once it ended (at most ``timeout`` seconds)."""
        until = time.monotonic() + timeout
        while self.state() not in FINAL and time.monotonic() < until:
            time.sleep(0.05)
        out = self.leader.round_status(self.r, None)
        assert out["state"] in FINAL, out
        return out

    def quiet(self) -> bool:
        """No alarm on either server and no strike at server 0."""
        return all(node.alarms == [] for node in self.servers.nodes) and self.leader.rejections == {}


def _refused_without_receipt(errors: list[BaseException | None]) -> bool:
    """Whether each device's upload to server 0 alone was refused for want of server 1's receipt (session 44)."""
    return all(isinstance(e, InvalidMessage) and "server 1's receipt" in str(e) for e in errors)


@pytest.fixture
def make() -> Iterator[list[_Cluster]]:
    made: list[_Cluster] = []
    yield made
    for c in made:
        c.servers.stop()


def _cluster(made: list[_Cluster], **kw: Any) -> _Cluster:
    c = _Cluster(**kw)
    made.append(c)
    return c


def _deviate(monkeypatch: pytest.MonkeyPatch, c: _Cluster, name: str,
             fn: Callable[..., Any]) -> Callable[..., Any]:
    """Server 1 of cluster ``c`` answers server 0's ``name`` call (a :class:`LocalPeer` method) with
    ``fn(true_method, peer, *args)``; other clusters' peers keep the true answer.  The true method."""
    true = getattr(LocalPeer, name)
    peer = c.leader.peer

    def call(link: LocalPeer, *args: Any) -> Any:
        return fn(true, link, *args) if link is peer else true(link, *args)

    monkeypatch.setattr(LocalPeer, name, call)
    return true


def _record_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The round ids of server 0's queries of server 1's uploads (:meth:`LocalPeer.uploaded`), as they come."""
    asked: list[int] = []
    uploaded = LocalPeer.uploaded

    def recording(peer: LocalPeer, r: int) -> list[int]:
        asked.append(r)
        return uploaded(peer, r)

    monkeypatch.setattr(LocalPeer, "uploaded", recording)
    return asked


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_devices_uploading_to_server_0_only_do_not_close_the_round(make: list[_Cluster], bound: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two honest devices, then four at server 0 only (quorum 4): the round stays open; the two honest
    devices after them are included, and the round closes on quorum with the four honest ones.  (Before
    S42-Q2's fix it closed on the six at once, with the first two honest devices; the last two were
    refused, 409.  Since session 44 the four are refused at server 0 for want of server 1's receipt, so
    server 0's count never reaches the quorum before the honest ones: server 1 is asked only then.)"""
    asked = _record_checks(monkeypatch)
    c = _cluster(make, relay=False, bound=bound, quorum=4)
    honest, cheats = _USERS[:4], _USERS[4:]
    assert [c.send(u) for u in honest[:2]] == [None, None]
    assert _refused_without_receipt([c.send(u, only=0) for u in cheats])
    assert c.stays_open(), c.leader.round_status(c.r, None)
    assert asked == [], asked  # server 0 counts two: below the quorum, server 1 is not asked
    assert [c.send(u) for u in honest[2:]] == [None, None]
    out = c.outcome()
    assert (out["state"], out["included"], out["rejected"], out["reason"]) == (
        "committed", sorted(honest), [], "quorum reached"), out
    assert c.quiet()


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_devices_at_server_0_only_no_longer_abort_the_round_below_min_users(make: list[_Cluster],
                                                                           bound: bool) -> None:
    """Four devices at server 0 only (quorum 4), then two honest ones before the deadline: the round
    closes at the deadline and commits with the two.  (Before the fix it closed on the four at once and
    aborted, 0 users at both servers, below min_users=2; the honest ones were refused.  Since session 44
    the four are refused at server 0: no receipt.)"""
    c = _cluster(make, relay=False, bound=bound, quorum=4, deadline_s=6.0)
    honest, cheats = _USERS[:2], _USERS[2:6]
    assert _refused_without_receipt([c.send(u, only=0) for u in cheats])
    assert c.stays_open(1.0), c.leader.round_status(c.r, None)
    assert [c.send(u) for u in honest] == [None, None]
    out = c.outcome()
    assert (out["state"], out["included"], out["rejected"], out["reason"]) == (
        "committed", sorted(honest), [], "deadline passed"), out
    assert c.quiet()


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_an_honest_round_still_closes_on_quorum_asking_server_1_once(make: list[_Cluster], bound: bool,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: four honest devices of eight participants (quorum 4) close the round on quorum at
    once, all four included.  Server 0 asks server 1 for its uploads only once its own count reaches the
    quorum: one call here (a check that closes leaves no room for another before the close begins)."""
    asked = _record_checks(monkeypatch)
    c = _cluster(make, relay=False, bound=bound, quorum=4)
    start = time.monotonic()
    assert [c.send(u) for u in _USERS[:4]] == [None] * 4
    out = c.outcome(timeout=10.0)
    assert (out["state"], out["included"], out["rejected"], out["reason"]) == (
        "committed", sorted(_USERS[:4]), [], "quorum reached"), out
    assert time.monotonic() - start < 10.0
    assert asked == [c.r], asked
    assert c.quiet()


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_with_relay_a_device_server_0_counts_is_at_server_1(make: list[_Cluster], bound: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """With relay a device uploads to server 0 alone and server 0 forwards: a forward server 1 refuses
    is not counted (two devices here: the round stays open), one it took is at server 1, so the four
    devices server 0 counts close the round on quorum and are all included."""
    c = _cluster(make, relay=True, bound=bound, quorum=4)
    refused = set(_USERS[4:6])
    forward = LocalPeer.relay_upload_many

    def refusing(peer: LocalPeer, r: int, items: list[tuple[int, bytes]]) -> list[SecembError | None]:
        outs = forward(peer, r, [it for it in items if it[0] not in refused])
        back = iter(outs)
        return [PeerRefused("held back by the test") if u in refused else next(back) for u, _ in items]

    monkeypatch.setattr(LocalPeer, "relay_upload_many", refusing)
    errs = [c.send(u) for u in sorted(refused)]
    assert all(isinstance(e, SecembError) and "will not count" in str(e) for e in errs), errs
    assert c.stays_open(1.0)
    assert [c.send(u, only=0) for u in _USERS[:4]] == [None] * 4  # with relay, server 0 is the only destination
    out = c.outcome(timeout=10.0)
    assert (out["state"], out["included"], out["reason"]) == ("committed", sorted(_USERS[:4]), "quorum reached"), out


def test_server_1_not_answering_the_quorum_check_leaves_the_deadline_close(make: list[_Cluster],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """When server 1 does not answer server 0's check of its uploads, the round does not close on
    quorum; it closes at the deadline as before (server 1 answering again by then: committed)."""
    down = threading.Event()
    down.set()
    uploaded = LocalPeer.uploaded

    def flaky(peer: LocalPeer, r: int) -> list[int]:
        if down.is_set():
            raise PeerUnreachable("server 1 did not answer")
        return list(uploaded(peer, r))

    monkeypatch.setattr(LocalPeer, "uploaded", flaky)
    c = _cluster(make, relay=False, bound=False, quorum=4, deadline_s=4.0)
    assert [c.send(u) for u in _USERS[:4]] == [None] * 4
    assert c.stays_open(1.0)
    down.clear()
    out = c.outcome()
    assert (out["state"], out["included"]) == ("committed", sorted(_USERS[:4])), out
    assert out["reason"] in ("quorum reached", "deadline passed"), out  # the next check may come first


def test_the_peer_query_answers_server_1s_uploads_of_the_open_round_only(make: list[_Cluster]) -> None:
    """Server 1's :meth:`~secemb.server.follower.FollowerNode.peer_uploaded`: the sorted users whose
    upload it absorbed in the open round; another round, or a round that is closing, is a refusal
    (409: server 0 then does not close on quorum)."""
    c = _cluster(make, relay=False, bound=False, quorum=8)
    follower = c.servers.nodes[1]
    assert isinstance(follower, FollowerNode)
    assert follower.peer_uploaded(c.r) == []
    for u, only in ((_USERS[3], None), (_USERS[1], 1), (_USERS[2], 0)):
        c.send(u, only=only)
    assert follower.peer_uploaded(c.r) == sorted((_USERS[1], _USERS[3]))
    for r in (c.r + 1, c.r - 1):
        with pytest.raises(SecembError, match="not the current round"):
            follower.peer_uploaded(r)
    c.leader.close_round(c.r)
    with pytest.raises(SecembError, match="closed"):
        follower.peer_uploaded(c.r)


@pytest.mark.parametrize("answer", [b'{"uploaded": [1, "2"]}', b'{"uploaded": [1, 2.0]}', b'{"uploaded": [true]}',
                                    b'{"uploaded": 3}', b'{"users": [1]}', b"[" * 100_000 + b"]" * 100_000],
                         ids=["string", "float", "bool", "not-a-list", "no-field", "deep"])
def test_a_malformed_uploaded_answer_is_server_1_failing(answer: bytes) -> None:
    """Server 0 reads server 1's ``{"uploaded": [...]}`` as a list of integers or not at all
    (:class:`~secemb.server.peer.PeerUnreachable`: the round then waits for the next check or its
    deadline); a well-formed answer reads."""
    httpx = pytest.importorskip("httpx")
    from secemb.transport.network import ApiClient

    def peer_answering(body: bytes) -> HttpPeer:
        peer = HttpPeer("https://127.0.0.1:9", b"k" * 32)
        peer.api = ApiClient("https://127.0.0.1:9", "server0", b"k" * 32, http=httpx.Client(
            transport=httpx.MockTransport(lambda _: httpx.Response(200, content=body,
                                                                   headers={"content-type": "application/json"}))))
        return peer

    bad, good = peer_answering(answer), peer_answering(b'{"uploaded": [2, 5]}')
    try:
        with pytest.raises(PeerUnreachable):
            bad.uploaded(3)
        assert good.uploaded(3) == [2, 5]
    finally:
        bad.shutdown()
        good.shutdown()


# -- over HTTP: two `secemb serve` processes on 127.0.0.1 ----------------------------------------------


def test_over_http_devices_at_server_0_only_do_not_close_the_round() -> None:
    """Bounded payloads (a deployment's default), no relay: three devices try to upload to server 0 only
    (quorum 3 of 6): refused (400: no receipt of server 1, session 44; before it they were taken and
    proved there); the round stays open; three honest devices then close it on quorum, all three
    included, none named.  (Before S42-Q2's fix the round closed on the three and aborted; the honest
    devices were refused, 409.)"""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    httpx = pytest.importorskip("httpx")
    from net_helpers import cluster_for, setup, small_data

    from secemb.transport.signing import sign_headers, user_key

    tr, _ = small_data()
    ratings = by_user(tr)
    model, _, config = setup("secemb", "cuckoo", False, m_prime=8, epochs=1, users_per_round=8)
    proto = SecEmbProtocol(layout="cuckoo", relay=False, bound=True, users_per_round=8)
    users = [u for u in range(tr.num_users) if ratings.of(u)[0].size][:6]
    cheats, honest = users[:3], users[3:]
    with cluster_for(model, proto, tr, config, min_users=2) as cluster:
        admin = cluster.admin(0, timeout=WAIT_S)

        def take_part(u: int, only: int | None) -> int | None:
            client = DeviceClient(u, cluster.url(0), cluster.url(1), *cluster.device_keys(u), timeout=WAIT_S,
                                  tls=cluster.tls, min_users=cluster.min_users)
            try:
                _take_part(client, info, *ratings.of(u), only=only)
            except RemoteError as exc:
                return exc.status
            return None

        info = RoundInfo.from_doc(admin.post_json("/v1/admin/rounds", {"participants": users, "deadline_s": 120,
                                                                       "quorum": 3}))
        r = info.round_id
        status = f"/v1/rounds/{r}/status"

        def peer_get(party: int, path: str, key_id: str = "server0", key: bytes = cluster.peer_secret) -> Any:
            """A signed ``GET path`` to server ``party`` as ``key_id`` (over server 0's certificate to server 1)."""
            return httpx.get(cluster.url(party) + path, headers=sign_headers(key_id, key, "GET", path, "", b""),
                             timeout=WAIT_S, trust_env=False,
                             verify=cluster.peer_tls() if key_id == "server0" and party == 1 else cluster.tls)

        uploaded = f"/v1/peer/rounds/{r}/uploaded"
        assert [take_part(u, 0) for u in cheats] == [400] * 3
        until = time.monotonic() + _HOLD_S
        while time.monotonic() < until:
            assert admin.get_json(status)["state"] == "open"
            time.sleep(0.1)
        # server 1 holds none of them; the route refuses strangers, server 0 and another round (4xx)
        resp = peer_get(1, uploaded)
        assert (resp.status_code, resp.json()) == (200, {"uploaded": []}), resp.text
        for party, path, key_id, key, code in [
                (1, uploaded, "server0", b"w" * 32, 401),
                (1, uploaded, "admin", cluster.admin_secrets[1], 403),
                (1, uploaded, "user:1", user_key(cluster.user_secrets[1], 1), 403),
                (0, uploaded, "admin", cluster.admin_secrets[0], 403),
                (1, f"/v1/peer/rounds/{r + 1}/uploaded", "server0", cluster.peer_secret, 409),
                (1, "/v1/peer/rounds/-1/uploaded", "server0", cluster.peer_secret, 409),
                (1, "/v1/peer/rounds/1_0/uploaded", "server0", cluster.peer_secret, 422),
                (1, f"/v1/peer/rounds/{2**63}/uploaded", "server0", cluster.peer_secret, 422)]:
            resp = peer_get(party, path, key_id, key)
            assert resp.status_code == code, (party, path, key_id, resp.status_code, resp.text)
        assert [take_part(u, None) for u in honest] == [None] * 3
        until = time.monotonic() + WAIT_S
        while (out := admin.get_json(status))["state"] not in FINAL and time.monotonic() < until:
            time.sleep(0.1)
        assert (out["state"], out["included"], out["rejected"], out["reason"]) == (
            "committed", sorted(honest), [], "quorum reached"), out
        st = admin.get_json("/v1/admin/status")
        assert st["alarms"] == [] and not st.get("rejections"), st
        assert peer_get(1, uploaded).status_code == 409  # the round is over
