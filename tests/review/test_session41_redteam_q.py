"""Session 41 red team (helper Q): server 0's bounded-payload intake -- ``GET /v1/rounds/{r}/challenge``
and ``POST /v1/rounds/{r}/proof`` (:meth:`~secemb.server.retrieval.Retrieval.challenge`,
:meth:`~secemb.server.retrieval.Retrieval.proof_many`, the role's
:meth:`~secemb.protocols.secemb.SecEmbServer.handle_proof_many`) with uploads, re-uploads, the round's
close, strikes and the status -- and the batch wait (``[server] batch_wait_ms``,
:class:`~secemb.server.rounds.Batcher`, :func:`~secemb.server.rounds.by_round`), against a malicious
device and the network.  Each test asserts the safe behaviour; a strict xfail was a finding (S41-Q1, the one
finding, fixed by the lead in session 41: ``by_round`` hands a round's raised exception to that round's callers
only; its test is a plain test since).

The intake is driven on in-process nodes (:class:`~secemb.sim.local.InProcessServers`: the nodes the
HTTP app calls), the cuckoo layout with and without relay and the full layout without; a refusal is a
:class:`~secemb.errors.SecembError`, which the app maps to a 4xx -- ``PeerUnavailable`` alone is a 503
-- and anything else is a 500.  The HTTP mapping of these routes' refusals is
``tests/server/test_net_bounded_payloads.py``'s.

Findings
--------
* **S41-Q1 (low: a wrong status, no state; any device or the network, only where one round's call
  raises).**  :func:`~secemb.server.rounds.by_round` runs one call of the batch function per round id
  of a batch; when one round's call raises (server 0's ``upload_many``: ``StorageError`` when the
  shares cannot be spilled; a batch function's bug), the exception leaves ``run`` and the
  :class:`~secemb.server.rounds.Batcher` hands it to **every** caller of the batch, those of the other
  rounds too -- whose own call then never runs.  With one open round the other rounds' items would be
  refused anyway (409), so they get the wrong error (the raising round's: ``StorageError``'s 503, "retry
  later", where a 409 was due; a 500 for any other exception) rather than a wrong result; the batch
  wait (session 41) makes such mixed batches likelier (a batch now spans up to ``batch_wait_ms`` of
  arrivals, e.g. round ``r``'s late messages and round ``r + 1``'s first).
  ``test_a_round_whose_batch_call_raises_fails_only_that_rounds_callers``.

Held (plain tests)
------------------
* A proof batch keeps every honest proof whatever rides with it (a short, a long, a re-framed proof,
  one of a device that did not upload, a second proof -- in the same batch or after); each refusal is a
  4xx-class error and keeps nothing; the round's ``proved`` is exactly the kept ones; the close
  includes them.  ``test_a_proof_batch_keeps_the_honest_proofs_whatever_rides_with_them``.
* A device that sends another device's (valid) proof as its own is taken at intake (nothing tells
  them apart there) and rejected alone at the close (one strike, a ``device_rejected`` alarm); the
  honest device is included.  ``test_a_device_replaying_anothers_proof_is_rejected_alone``.
* A device that uploads, fetches its challenge and uploads again is refused (409) and its challenge
  does not change; its proof under the first challenge counts and it is included.
  ``test_a_reupload_after_the_challenge_changes_neither_the_challenge_nor_the_round``.
* An upload server 0 refuses gets no challenge (409 "did not upload") and keeps nothing: the device's
  genuine upload after it is taken, proved and included.
  ``test_a_refused_upload_gets_no_challenge_and_its_device_may_upload_after``.
* A proof or a challenge arriving while the round closes is refused (409) and changes nothing: the
  device is left out like a dropout, with no strike, no rejection and no alarm.
  ``test_a_proof_arriving_while_the_round_closes_is_refused_and_the_device_is_a_dropout``.
* Proofs and challenges for a closed round, for the next round before an upload, and many refused
  proofs in a row: each refused (409/400), no strike, the status (alarms, rejections, halted) as it
  was; the device then takes part in the next round.
  ``test_refused_proofs_and_challenges_leave_no_strike_and_no_state``.
* Batch wait: a device sending a stream of messages (two every 10 ms, more than a batch
  takes in ``wait_s``) delays another device's call by at most ``wait_s`` plus the batch call (the
  window counts from a batch's first item, it does not slide); every caller gets its own result; no
  batcher thread is left once the stream stops.
  ``test_a_stream_of_calls_holds_anothers_call_back_by_at_most_the_wait``.
* A batch mixing rounds calls the function once per round with that round's items only, in arrival
  order, and each caller gets its own result.  ``test_a_batch_mixing_rounds_gives_each_round_its_own_call``.
* Over HTTP (two ``secemb serve`` processes, the default 5 ms batch wait): three honest proofs sent at
  once with six junk ones of a fourth device (a zero header, short, long, another round's, empty, a
  header alone) -- all 204 for the honest, 400/409/413 for the junk, no alarm; the round commits with
  the honest three, the fourth a dropout (no rejection).
  ``test_over_http_junk_proofs_sent_with_the_honest_ones_fail_alone``.
* The batcher's worker is a daemon thread: a call in flight does not hold a server's shutdown.
  ``test_the_batch_worker_never_holds_the_process``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sdk_round import trained  # type: ignore[import-not-found]
from secemb.client.device import DeviceClient, RoundInfo, RoundSession
from secemb.data import by_user, synthetic_like
from secemb.errors import InvalidMessage, ProtocolError, SecembError
from secemb.framing import HEADER_BYTES
from secemb.models import MatrixFactorization
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.secemb.sizes import NAME
from secemb.protocols.wire import frame
from secemb.round import messages
from secemb.server.errors import PeerUnavailable
from secemb.server.node import LeaderNode
from secemb.server.rounds import Batcher, by_round
from secemb.sim.local import InProcessServers, LocalPeer
from secemb.sim.settings import cluster_settings
from secemb.training import TrainConfig
from secemb.transport.errors import RemoteError

# -- the bounded-payload intake at server 0 ----------------------------------------------------------

_DATA = synthetic_like(30, 40, 600, seed=3)
_RATINGS = by_user(_DATA)
#: six devices with ratings (the round's participants)
_USERS = [u for u in range(_DATA.num_users) if _RATINGS.of(u)[0].size][:6]


def _take_part(client: DeviceClient, info: RoundInfo, items: np.ndarray, ratings: np.ndarray,
               send: bool = True) -> RoundSession:
    """Device ``client`` retrieves, trains and (``send``) uploads through the SDK, without proving."""
    session = trained(client, info, items, ratings)
    if send:
        session.upload()
    return session


class _Round:
    """Two in-process nodes with bounded payloads (``layout``, ``relay``) and round ``r`` open to
    :data:`_USERS`; :meth:`upload` takes a device through retrieval, training and upload without
    proving."""

    def __init__(self, layout: str, relay: bool) -> None:
        model = MatrixFactorization(dim=4, reg=0.01)
        proto = SecEmbProtocol(layout=layout, relay=relay, bound=True, users_per_round=8)
        settings = cluster_settings(model, proto, _DATA, TrainConfig(m_prime=4, seed=5), deadline_s=60.0,
                                    min_users=2)
        self.servers = InProcessServers(settings, proto, model)
        leader = self.servers.nodes[0]
        assert isinstance(leader, LeaderNode)
        self.leader = leader
        self.r = self.open()

    def open(self) -> int:
        return int(self.leader.open_round(participants=_USERS, deadline_s=60.0)["round_id"])

    def upload(self, u: int, send: bool = True) -> RoundSession:
        client = self.servers.servers().device(u)
        return _take_part(client, client.round_info(), *_RATINGS.of(u), send=send)

    def receipted(self, u: int, body: bytes) -> bytes:
        """``body``, a device's upload to server 0, as user ``u`` sends it: without relay followed by server 1's
        receipt of ``u``'s upload (session 44), which a device shows server 0 with its upload."""
        key = self.leader.receipts
        return body if key is None else body + messages.encode_receipt(key, self.r, u)

    def proof(self, session: RoundSession, u: int | None = None) -> bytes:
        """The bound proof ``session``'s device makes for the challenge server 0 gives user ``u``
        (default: its own)."""
        assert isinstance(session.role, SecEmbUser)
        return session.role.bound_proof(self.leader.challenge(self.r, session.client.user_id if u is None else u))

    def status(self) -> dict[str, Any]:
        """Server 0's admin status without what changes by itself."""
        return {k: v for k, v in self.leader.status().items() if k not in {"boot_id", "uptime_s", "time_unix"}}


@pytest.fixture(params=[("cuckoo", False), ("cuckoo", True), ("full", False)], ids=lambda p: f"{p[0]}-relay{p[1]}")
def rnd(request: pytest.FixtureRequest) -> Iterator[_Round]:
    got = _Round(*request.param)
    yield got
    got.servers.stop()


def _refusal(exc: BaseException | None) -> bool:
    """Whether ``exc`` is what the app answers with a 4xx (a SecembError other than PeerUnavailable)."""
    return isinstance(exc, SecembError) and not isinstance(exc, PeerUnavailable)


def _kept(rnd: _Round) -> set[int]:
    return set(rnd.leader.role._proofs)  # type: ignore[attr-defined]  # noqa: SLF001 - the role's kept proofs


def test_a_proof_batch_keeps_the_honest_proofs_whatever_rides_with_them(rnd: _Round) -> None:
    a, b, c, d, e, _ = _USERS
    sessions = {u: rnd.upload(u) for u in (a, b, c, d)}
    proofs = {u: rnd.proof(sessions[u]) for u in (a, b, c, d)}
    n = len(proofs[a])
    batch = [
        (b, proofs[b][:-1]),                                    # short
        (a, proofs[a]),                                         # honest
        (c, proofs[c] + b"\0"),                                 # long
        (c, frame(NAME, "bound_proof", 0, rnd.r + 1, proofs[c][HEADER_BYTES:])),  # another round's header
        (e, proofs[a]),                                         # e did not upload
        (a, proofs[a]),                                         # a second proof in the batch
        (b, proofs[b]),                                         # honest after its own refused one
        (d, bytes(n)),                                          # the right length, a zero header
    ]
    out = rnd.leader.proof_many(rnd.r, batch)
    assert [x is None for x in out] == [False, True, False, False, False, False, True, False], out
    assert all(_refusal(x) for x in out if x is not None), out
    assert _kept(rnd) == {a, b} and rnd.leader.round is not None and rnd.leader.round.proved == {a, b}
    with pytest.raises(ProtocolError, match="already sent"):
        rnd.leader.proof(rnd.r, a, proofs[a])  # through the batcher, after the batch
    rnd.leader.proof(rnd.r, c, proofs[c])  # the refused ones kept nothing
    rnd.leader.proof(rnd.r, d, proofs[d])
    out_doc = rnd.leader.close_round(rnd.r)
    assert (out_doc["state"], out_doc["included"], out_doc["rejected"]) == ("committed", sorted((a, b, c, d)), [])
    assert rnd.leader.rejections == {}


def test_a_device_replaying_anothers_proof_is_rejected_alone(rnd: _Round) -> None:
    a, b, c, *_ = _USERS
    sessions = {u: rnd.upload(u) for u in (a, b, c)}
    honest = rnd.proof(sessions[a])
    rnd.leader.proof(rnd.r, b, honest)  # b sends a's proof first: nothing at intake tells them apart
    rnd.leader.proof(rnd.r, a, honest)
    rnd.leader.proof(rnd.r, c, rnd.proof(sessions[c]))
    out = rnd.leader.close_round(rnd.r)
    assert (out["state"], out["included"], out["rejected"]) == ("committed", sorted((a, c)), [b]), out
    assert rnd.leader.rejections == {b: 1}
    assert [x["kind"] for x in rnd.leader.alarms] == ["device_rejected"]


def test_a_reupload_after_the_challenge_changes_neither_the_challenge_nor_the_round(rnd: _Round) -> None:
    a, b, *_ = _USERS
    sa, sb = rnd.upload(a), rnd.upload(b)
    challenge = rnd.leader.challenge(rnd.r, a)
    body = sa._uploads[0]  # noqa: SLF001 - the device's own upload to server 0, sent again
    for again in (body, sb._uploads[0]):  # noqa: SLF001 - and another device's
        with pytest.raises(ProtocolError, match="already uploaded"):
            rnd.leader.upload(rnd.r, a, rnd.receipted(a, again))
    assert rnd.leader.challenge(rnd.r, a) == challenge
    assert rnd.leader.challenge(rnd.r, b) != challenge  # each upload batch draws its own
    assert isinstance(sa.role, SecEmbUser)
    rnd.leader.proof(rnd.r, a, sa.role.bound_proof(challenge))
    rnd.leader.proof(rnd.r, b, rnd.proof(sb))
    out = rnd.leader.close_round(rnd.r)
    assert (out["state"], out["included"], out["rejected"]) == ("committed", sorted((a, b)), []), out


def test_a_refused_upload_gets_no_challenge_and_its_device_may_upload_after(rnd: _Round) -> None:
    a, c, *_ = _USERS
    rnd.leader.proof(rnd.r, a, rnd.proof(rnd.upload(a)))
    sc = rnd.upload(c, send=False)
    body = sc._uploads[0]  # noqa: SLF001 - the device's upload to server 0
    for bad in (body[:-1], body + b"\0", frame(NAME, "upload", 0, rnd.r + 1, body[HEADER_BYTES:])):
        with pytest.raises(SecembError) as caught:
            rnd.leader.upload(rnd.r, c, bad)
        assert _refusal(caught.value)
        with pytest.raises(ProtocolError, match="did not upload"):
            rnd.leader.challenge(rnd.r, c)
    sc.upload()
    rnd.leader.proof(rnd.r, c, rnd.proof(sc))
    out = rnd.leader.close_round(rnd.r)
    assert (out["state"], out["included"], out["rejected"]) == ("committed", sorted((a, c)), []), out


def test_a_proof_arriving_while_the_round_closes_is_refused_and_the_device_is_a_dropout(
        rnd: _Round, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c, *_ = _USERS
    sessions = {u: rnd.upload(u) for u in (a, b, c)}
    for u in (a, b):
        rnd.leader.proof(rnd.r, u, rnd.proof(sessions[u]))
    late = rnd.proof(sessions[c])  # made before the close, sent during it
    during: list[BaseException | None] = []
    close = LocalPeer.close

    def closing(peer: LocalPeer, round_id: int) -> list[int]:
        for send in (lambda: rnd.leader.proof(rnd.r, c, late), lambda: rnd.leader.challenge(rnd.r, c)):
            try:
                send()
                during.append(None)
            except BaseException as exc:  # noqa: BLE001 - recorded and checked below
                during.append(exc)
        return close(peer, round_id)

    monkeypatch.setattr(LocalPeer, "close", closing)
    out = rnd.leader.close_round(rnd.r)
    assert len(during) == 2 and all(_refusal(x) and "closed" in str(x) for x in during), during
    assert (out["state"], out["included"], out["rejected"]) == ("committed", sorted((a, b)), []), out
    assert rnd.leader.rejections == {} and rnd.leader.alarms == []


def test_refused_proofs_and_challenges_leave_no_strike_and_no_state(rnd: _Round) -> None:
    a, b, c, *_ = _USERS
    sessions = {u: rnd.upload(u) for u in (a, b)}
    proof_a = rnd.proof(sessions[a])
    rnd.leader.proof(rnd.r, a, proof_a)
    rnd.leader.proof(rnd.r, b, rnd.proof(sessions[b]))
    assert rnd.leader.close_round(rnd.r)["state"] == "committed"
    old, before = rnd.r, rnd.status()
    refused: list[BaseException] = []
    for send in (lambda: rnd.leader.proof(old, a, proof_a), lambda: rnd.leader.challenge(old, a)):
        with pytest.raises(SecembError) as caught:
            send()
        refused.append(caught.value)
    assert rnd.status() == before  # nothing of the closed round changed
    rnd.r = rnd.open()
    before = rnd.status()
    for _ in range(2 * 3 + 1):  # more refusals than MAX_REJECTIONS strikes (3): none of them is one
        for send in (lambda: rnd.leader.proof(rnd.r, c, proof_a), lambda: rnd.leader.challenge(rnd.r, c),
                     lambda: rnd.leader.proof(rnd.r, c, b"\0" * 40)):
            with pytest.raises(SecembError) as caught:
                send()
            refused.append(caught.value)
    assert all(_refusal(x) for x in refused), refused
    assert all(isinstance(x, InvalidMessage | ProtocolError) for x in refused), refused  # 400 / 409
    assert rnd.status() == before and rnd.leader.rejections == {}
    assert rnd.leader.round is not None and rnd.leader.round.proved == set() and _kept(rnd) == set()
    sc = rnd.upload(c)  # c takes part after all of it
    rnd.leader.proof(rnd.r, c, rnd.proof(sc))
    rnd.leader.proof(rnd.r, a, rnd.proof(rnd.upload(a)))
    out = rnd.leader.close_round(rnd.r)
    assert (out["state"], out["included"], out["rejected"]) == ("committed", sorted((a, c)), []), out


# -- the batch wait ----------------------------------------------------------------------------------


def _workers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "secemb-batcher" and t.is_alive()}


def _start(b: Batcher, item: Any, out: dict[Any, Any]) -> threading.Thread:
    def run() -> None:
        try:
            out[item] = b(item)
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            out[item] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_stream_of_calls_holds_anothers_call_back_by_at_most_the_wait() -> None:
    wait_s, every_s, stream_s = 0.1, 0.01, 1.5
    batches: list[list[tuple[str, int]]] = []

    def fn(items: list[tuple[str, int]]) -> list[tuple[str, int, str]]:
        batches.append(list(items))
        # a batch call takes a moment, as a server's does: calls made meanwhile queue behind it (an instant
        # call let every caller of a loaded machine go alone, and the stream never came together: CI, session 43)
        time.sleep(0.003)
        return [(who, k, "done") for who, k in items]

    before = _workers()
    b = Batcher(fn, wait_s=wait_s, idle_s=0.2)
    out: dict[Any, Any] = {}
    stream: list[threading.Thread] = []
    stop = threading.Event()

    def attacker() -> None:  # two new calls every 10 ms, none waiting for the last (concurrent requests)
        k = 0
        while not stop.is_set() and k < 2 * stream_s / every_s:
            stream.extend((_start(b, ("attacker", k), out), _start(b, ("attacker", k + 1), out)))
            k += 2
            time.sleep(every_s)

    flood = threading.Thread(target=attacker, daemon=True)
    flood.start()
    time.sleep(0.3)  # the stream runs: batches come together
    took: list[float] = []
    for k in range(4):
        t0 = time.monotonic()
        got = b(("victim", k))
        took.append(time.monotonic() - t0)
        assert got == ("victim", k, "done")
    stop.set()
    flood.join(5)
    for t in stream:
        t.join(5)
    assert not flood.is_alive() and not any(t.is_alive() for t in stream), "a caller was left waiting"
    assert all(v == (*key, "done") for key, v in out.items()), "a result went to another caller"
    # wait_s from the batch's first item, plus one batch call in progress and the machine's slack (a
    # window that slid with each arrival would hold the victim until the stream stopped: > 1 s)
    assert max(took) < wait_s + 0.4, took
    assert any(len(x) > 1 for x in batches)  # the stream did come together
    deadline = time.monotonic() + 5
    while _workers() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _workers() - before, "the batcher's thread outlived the stream by more than its idle time"


def test_a_batch_mixing_rounds_gives_each_round_its_own_call() -> None:
    calls: list[tuple[int, list[tuple[int, bytes]]]] = []
    release, holding = threading.Event(), threading.Event()

    def fn(r: int, items: list[tuple[int, bytes]]) -> list[tuple[int, int, bytes]]:
        calls.append((r, list(items)))
        if len(calls) == 1:
            holding.set()
            assert release.wait(10)
        return [(r, u, body) for u, body in items]

    b = Batcher(by_round(fn), wait_s=0.05)
    out: dict[Any, Any] = {}
    threads = [_start(b, (0, 99, b"first"), out)]
    assert holding.wait(5)
    items = [(1 + k % 3, k, bytes([k])) for k in range(12)]  # three rounds interleaved
    for it in items:
        threads.append(_start(b, it, out))
    deadline = time.monotonic() + 5
    while b._q.qsize() < len(items):  # noqa: SLF001 - wait for the callers to have queued
        assert time.monotonic() < deadline
        time.sleep(0.005)
    release.set()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert out == {it: it for it in [(0, 99, b"first"), *items]}  # each caller its own result
    assert calls[1:] == [(r, [(u, body) for rr, u, body in items if rr == r]) for r in (1, 2, 3)]


def test_a_round_whose_batch_call_raises_fails_only_that_rounds_callers() -> None:
    release, holding = threading.Event(), threading.Event()
    ran: list[int] = []

    def fn(r: int, items: list[tuple[int, bytes]]) -> list[Any]:
        ran.append(r)
        if r == 0:
            holding.set()
            assert release.wait(10)
            return [None] * len(items)
        if r == 1:
            raise OSError("no space left on device")  # e.g. the spill of round 1's uploads
        return [f"round {r}, user {u}" for u, _ in items]

    b = Batcher(by_round(fn), wait_s=0.0)
    out: dict[Any, Any] = {}
    threads = [_start(b, (0, 0, b""), out)]
    assert holding.wait(5)
    threads += [_start(b, (1, 1, b""), out)]
    deadline = time.monotonic() + 5
    while b._q.qsize() < 1:  # noqa: SLF001 - round 1's item first in the next batch
        assert time.monotonic() < deadline
        time.sleep(0.005)
    threads += [_start(b, (2, 2, b""), out)]
    while b._q.qsize() < 2:  # noqa: SLF001
        assert time.monotonic() < deadline
        time.sleep(0.005)
    release.set()
    for t in threads:
        t.join(10)
    assert isinstance(out[(1, 1, b"")], OSError)
    assert ran == [0, 1, 2] and out[(2, 2, b"")] == "round 2, user 2", (ran, out)


def test_the_batch_worker_never_holds_the_process() -> None:
    seen: list[threading.Thread] = []

    def fn(items: list[int]) -> list[int]:
        seen.append(threading.current_thread())
        return items

    assert Batcher(fn, idle_s=0.05)(7) == 7
    assert seen and seen[0].name == "secemb-batcher" and seen[0].daemon


# -- over HTTP: two `secemb serve` processes on 127.0.0.1 -----------------------------------------------


def test_over_http_junk_proofs_sent_with_the_honest_ones_fail_alone() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
    from net_helpers import WAIT_S, cluster_for, setup, small_data  # type: ignore[import-not-found]


    tr, _ = small_data()
    ratings = by_user(tr)
    model, _, config = setup("secemb", "cuckoo", False, m_prime=8, epochs=1, users_per_round=8)
    proto = SecEmbProtocol(layout="cuckoo", relay=False, bound=True, users_per_round=8)
    *honest_users, attacker = [u for u in range(tr.num_users) if ratings.of(u)[0].size][:4]
    with cluster_for(model, proto, tr, config, min_users=2) as cluster:
        admin = cluster.admin(0, timeout=WAIT_S)

        def client(u: int) -> DeviceClient:
            return DeviceClient(u, cluster.url(0), cluster.url(1), *cluster.device_keys(u), timeout=WAIT_S,
                                tls=cluster.tls, min_users=cluster.min_users)

        info = RoundInfo.from_doc(admin.post_json("/v1/admin/rounds", {"participants": [*honest_users, attacker],
                                                                       "deadline_s": 120}))
        r = info.round_id
        sessions: dict[int, RoundSession] = {}
        for u in [*honest_users, attacker]:
            sessions[u] = _take_part(client(u), info, *ratings.of(u))
        proofs: dict[int, bytes] = {}
        for u in honest_users:
            role = sessions[u].role
            assert isinstance(role, SecEmbUser)
            proofs[u] = role.bound_proof(sessions[u].client.links[0].challenge(r))
        n = len(proofs[honest_users[0]])
        junk = [bytes(n), bytes(n)[:-1], bytes(n + 1), frame(NAME, "bound_proof", 0, r + 1, bytes(n - HEADER_BYTES)),
                b"", bytes(HEADER_BYTES)]
        before = {k: v for k, v in admin.get_json("/v1/admin/status").items() if k != "boot_id"}
        sends = [(u, proofs[u]) for u in honest_users] + [(attacker, j) for j in junk]
        go = threading.Barrier(len(sends))
        got: dict[int, Any] = {}

        def send(i: int, u: int, body: bytes) -> None:
            go.wait(10)
            try:
                sessions[u].client.links[0].proof(r, body)
                got[i] = None
            except RemoteError as exc:
                got[i] = exc.status
            except BaseException as exc:  # noqa: BLE001 - checked below
                got[i] = exc

        threads = [threading.Thread(target=send, args=(i, u, b), daemon=True) for i, (u, b) in enumerate(sends)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
        assert not any(t.is_alive() for t in threads)
        assert [got[i] for i in range(len(honest_users))] == [None] * len(honest_users), got
        assert all(got[i] in (400, 409, 413) for i in range(len(honest_users), len(sends))), got
        after = {k: v for k, v in admin.get_json("/v1/admin/status").items() if k != "boot_id"}
        assert after["alarms"] == before["alarms"] and not after.get("halted")
        out = admin.post_json(f"/v1/admin/rounds/{r}/close")
    assert (out["state"], out["included"], out["rejected"]) == ("committed", sorted(honest_users), []), out
