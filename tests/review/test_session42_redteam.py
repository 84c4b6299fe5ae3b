"""Session 42 red team (helper S): server 0's quorum check at server 1 (S42-Q2's fix, helper Q2), the
projections' AVX-512 VNNI kernel (lead) and a server's per-batch cost cuts (helper P).  Each test asserts the safe
behaviour; a strict xfail is a finding.

Findings
--------
* **S42-S1 (low: wrong words from a hazmat kernel given scratches of another dtype; no caller passes them).**
  ``dot_products`` checks its scratches' and output's shapes and strides but not their dtypes: a ``sums`` of another
  4-byte dtype (uint32, float32) is read as its own type (uint32 zero-extends the negative plane sums on a uint64
  ring), and an ``out`` of another dtype than ``x`` gets the sum of the sign-extended plane sums unreduced (``x``
  uint32, ``out`` uint64: 18,446,744,035,054,845,961 where the ring's word is 9; the row kernel ``sign_products``
  does no better there, 18,446,743,996,400,140,297).  :class:`Products` always passes int32 sums and ``out`` of
  ``x``'s dtype, so no projection is wrong today; ``tile_products`` (AMX, not run here) has the same checks.
  ``test_dot_products_refuse_scratches_and_outputs_of_another_dtype``.
* **S42-S2 (low: a refusal after a partial write; memory-safe).**  ``dot_products`` checks every ``to`` against
  ``out`` before its first pass, but ``at`` against ``x`` only in ``word_planes``, pass by pass: an index outside
  ``x`` in a later pass (the fifth of five uint32 devices, the third of uint64 ones) is refused after the earlier
  passes' rows of ``out`` were written; likewise ``affine_dot_products`` with more real devices than its parts.
  Nothing outside an array is read or written, and :meth:`Products.project`'s row path refuses before it writes.
  ``test_dot_products_refuse_a_device_outside_x_in_a_later_pass_before_writing``.

Session 44: without relay server 0 now takes no upload without server 1's receipt (docs/security.md), so the
devices "at server 0 only" below are refused there (400, nothing counted); the tests check that too, and keep
their scenarios where a receipt makes no difference.

Held (plain tests)
------------------
1. The quorum check (``secemb/server/leader.py`` ``_closer``, ``_quorum_check``, ``_close_on_quorum``; server 1's
   ``peer_uploaded`` and its route ``GET /v1/peer/rounds/{r}/uploaded``), in process on
   :class:`~secemb.sim.local.InProcessServers` with server 0's closing thread running (the harness of
   ``tests/server/test_s42_quorum_agreed.py``), bounded payloads on and off:

   * devices at one server each -- some at server 0 only, some at server 1 only -- make no quorum: server 0
     closes on the intersection, not on either count (``test_devices_at_one_server_each_make_no_quorum``);
   * re-uploads (each refused, each waking the closing thread) and proofs of devices that uploaded to
     server 1 only (refused: no upload at server 0) neither count nor make server 0 ask server 1 more than
     once per count and per 0.5 s (``test_re_uploads_and_proofs_without_uploads_neither_count_nor_flood_server_1``);
   * a server 1 that never answers the check holds one check (one thread) at a time, the round closes at its
     deadline, and the check's thread ends when the call does, with no exception
     (``test_a_server_1_that_never_answers_holds_one_check_and_the_deadline_closes``);
   * a check in flight when the operator closes the round (committed or aborted) and the next round opens:
     its late answer -- even "every user" -- changes neither round (``test_a_check_in_flight_across_a_close_
     and_the_next_round_changes_neither``);
   * a deviating server 1 answering with users server 0 does not count (outsiders, negative ids,
     participants that sent nothing), duplicates of one user, or a million entries makes no quorum
     (``test_a_deviating_server_1_naming_users_server_0_does_not_count_makes_no_quorum``); answers of other
     shapes or statuses are the PeerLink's errors, which the closing thread catches, and nothing else
     (``test_an_uploaded_answer_of_another_shape_or_status_is_a_peer_error``);
   * the route, in process through the real app: no credentials, a device, either operator, the peer
     secret under another name, a signature for another path or method, and server 0's own app are
     refused; another round and a closed one are 409 (``test_the_uploaded_route_refuses_strangers_in_process``).

2. The VNNI kernel (``secemb/fss/_projection_kernels.py`` ``dot_products``, ``_dot_sums``,
   ``affine_dot_products``, ``plane_sums``, :class:`Products`), on this machine's AVX-512 VNNI, against Python
   integers on rows the test writes (or the specification's rows, ``tests/fss/projection_spec.py``):

   * lengths and row counts 1, 9, 10, 11, 19, 21, 40, 41, 100 on both rings, 5 devices (partial passes),
     every word's plane bytes 255 and rows of every entry +1 or -1 (``test_dot_products_at_odd_shapes_and_
     extreme_words``);
   * at ``TILE_LENGTH`` (2^23 words: each plane's int32 sum at its largest, -255 * 2^23) on both rings,
     against closed forms and numpy's wrapping products; one word more is refused
     (``test_dot_products_are_exact_at_tile_length_and_refuse_one_word_more``);
   * rows and devices read through negative strides give the same words; a scratch or input of the wrong
     strides or shape is refused (``test_dot_products_strides``);
   * a device index outside ``x`` or ``out`` (negative, one past, 2^40), directly or through
     ``affine_dot_products``, is refused before anything is written (``test_dot_products_refuse_devices_
     out_of_range_before_writing``);
   * two threads on one expanded ``t``, each with its own scratches (``test_dot_products_on_two_threads``);
   * ``project_each`` / ``project_affine`` / ``project_own_affine`` with ``DOTS`` on and off, non-contiguous
     inputs, rows 1, 21, 100, 1 to 5 devices: the specification's words (``test_projections_on_both_paths_
     at_odd_shapes``).

3. A server's batches (helper P's per-batch cuts: ``ring_matmul``'s few rows, a later cuckoo batch folded
   unsigned in the walk's row layout by ``fused.fold_buckets``, ``Buckets``' ranges kept, ``FOLD_USERS``): ten
   devices in one batch and in batches of 1, 2, 3 and 8, two dropping out after their retrieval, both layouts,
   relay on and off, serial and two threads: the one batch's replies and aggregate shares byte for byte, and
   shares that reconstruct to the plain sums of the uploads (``np.add.at``)
   (``test_devices_in_batches_of_any_size_give_the_one_batchs_bytes_and_the_plain_sums``; run on S and on S with
   branch P's diff at 61e6c09 and at 977d194 applied).

Mutation checks (a scratch copy of the worktree, each mutation alone, the named test failing; M1-M3 on main at
a27dbab, the lead's change of ``_close_on_quorum`` included):
* M1 ``leader._quorum_check``: no wait between checks of one count (``now - rnd.quorum_asked[1] < 0``):
  ``test_re_uploads_and_proofs_without_uploads_neither_count_nor_flood_server_1`` fails.
* M2 ``leader._close_on_quorum``: ``held = len(set(self.peer.uploaded(...)))`` (server 1's count, not the users
  both hold):
  ``test_devices_at_one_server_each_make_no_quorum`` and ``test_a_deviating_server_1_naming_users_server_0_does_not_
  count_makes_no_quorum`` fail (both parameters each).
* M3 ``leader._quorum_check``: no guard on a check in flight (``or rnd.quorum_asking`` dropped):
  ``test_a_server_1_that_never_answers_holds_one_check_and_the_deadline_closes`` fails.
* M4 ``plane_sums``: the int32 plane sums zero-extended (``np.uint32(sums[...])``): the uint64 cases of
  ``test_dot_products_at_odd_shapes_and_extreme_words`` (but one row, all of it +1: no negative sum) and of
  ``test_dot_products_are_exact_at_tile_length_and_refuse_one_word_more`` fail (9).
* M5 ``dot_products``: the last pass of rows dropped (``range(0, rows - 1, DOT_ROWS)``):
  ``test_dot_products_at_odd_shapes_and_extreme_words`` fails at rows 1, 11, 21, 41 (both rings).
* M6 ``dot_products``: no ``x.shape[1] > TILE_LENGTH`` refusal: ``test_dot_products_are_exact_at_tile_length_and_
  refuse_one_word_more`` fails.
* M7 (on S with branch P's diff) ``SecEmbServer._commit_evaluated``: a later batch's unsigned fold added with
  ``negate=False`` at both servers: the cuckoo cases of ``test_devices_in_batches_of_any_size_give_the_one_batchs_
  bytes_and_the_plain_sums`` fail (4 of 8).
* M8 (likewise) ``_numba_kernels.fold_buckets``: each bucket's last row not added (``range(cols[g] - 1)``): the
  same 4 cases fail.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / d) for d in ("server", "fss")]
from projection_spec import random_ring, spec_rows  # type: ignore[import-not-found]  # noqa: E402
from sdk_round import trained  # type: ignore[import-not-found]  # noqa: E402
from test_s42_quorum_agreed import (  # type: ignore[import-not-found]  # noqa: E402
    _HOLD_S,
    _RATINGS,
    _USERS,
    _cluster,
    _Cluster,
    _deviate,
    _refused_without_receipt,
    _take_part,
    make,  # noqa: F401 - the fixture, used by name
)

from secemb.errors import SecembError  # noqa: E402
from secemb.fss import kernels  # noqa: E402
from secemb.server.peer import PEER_ERRORS, HttpPeer, PeerRefused, PeerUnreachable  # noqa: E402
from secemb.sim.local import LocalPeer  # noqa: E402

# --- 1. the quorum check --------------------------------------------------------------------------------------

class _Server1:
    """Server 1's answers to server 0's quorum checks (:meth:`LocalPeer.uploaded`) replaced by ``answer(peer, r)``
    for the peers of the clusters handed to :meth:`watch` only (a cluster of an earlier test, whose closing
    thread may still be ending, keeps the true answers): each call recorded (``calls``: round, time, thread) and
    the most in flight at once (``most``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, answer: Callable[[LocalPeer, int], list[int]]) -> None:
        self.answer, self.true = answer, LocalPeer.uploaded
        self.peers: list[LocalPeer] = []
        self.calls: list[tuple[int, float, threading.Thread]] = []
        self.lock, self.in_flight, self.most = threading.Lock(), 0, 0
        server1 = self

        def uploaded(peer: LocalPeer, r: int) -> list[int]:
            return server1.answered(peer, r)

        monkeypatch.setattr(LocalPeer, "uploaded", uploaded)

    def watch(self, c: _Cluster) -> _Cluster:
        peer = c.leader.peer
        assert isinstance(peer, LocalPeer)
        self.peers.append(peer)
        return c

    def answered(self, peer: LocalPeer, r: int) -> list[int]:
        if all(peer is not p for p in self.peers):
            return self.true(peer, r)
        with self.lock:
            self.calls.append((r, time.monotonic(), threading.current_thread()))
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            return self.answer(peer, r)
        finally:
            with self.lock:
                self.in_flight -= 1

    def rounds(self) -> list[int]:
        return [r for r, _, _ in self.calls]

    def ended(self, timeout: float = 5.0) -> bool:
        """Whether every thread that called has ended (each joined for at most ``timeout`` seconds)."""
        for _, _, thread in self.calls:
            thread.join(timeout)
        return not any(t.is_alive() for _, _, t in self.calls)


def _thread_errors(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The exceptions that end threads from now on (``threading.excepthook``), as ``"thread: error"``."""
    seen: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(
        f"{args.thread.name if args.thread else '?'}: {args.exc_type.__name__}: {args.exc_value}"))
    return seen


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_devices_at_one_server_each_make_no_quorum(make: list[_Cluster], bound: bool) -> None:  # noqa: F811
    """Quorum 3: two devices at server 0 only (refused there since session 44: no receipt), two at server 1
    only and one honest one -- server 1 holds 3, both hold 1: the round stays open; two more honest devices
    close it on quorum with the three honest ones."""
    c = _cluster(make, relay=False, bound=bound, quorum=3)
    at0, at1, honest = _USERS[:2], _USERS[2:4], _USERS[4:7]
    assert _refused_without_receipt([c.send(u, only=0) for u in at0])
    assert [c.send(u, only=1) for u in at1] + [c.send(honest[0])] == [None] * 3
    assert c.stays_open(), c.leader.round_status(c.r, None)
    assert [c.send(u) for u in honest[1:]] == [None, None]
    out = c.outcome()
    assert (out["state"], out["included"], out["reason"]) == ("committed", sorted(honest), "quorum reached"), out
    assert c.quiet()


def test_re_uploads_and_proofs_without_uploads_neither_count_nor_flood_server_1(
        make: list[_Cluster], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Bounded payloads, quorum 4: four devices upload to server 0 only (refused since session 44: no receipt
    of server 1; before, they were taken and proved there: server 0 counted 4, server 1 held none); two more
    upload to server 1 only and then try to prove at server 0 (refused: no upload there).  Then the four send
    their upload to server 0 again, 100 times or more in 1.5 s or more, each refused and each waking server 0's
    closing thread: the round stays open, and server 0 never asks server 1 (it counts none).  (Before session 44:
    at most once for the count of 4 and once per 0.5 s since -- not once per wake.)"""
    server1 = _Server1(monkeypatch, LocalPeer.uploaded)
    c = server1.watch(_cluster(make, relay=False, bound=True, quorum=4))
    cheats, provers = _USERS[:4], _USERS[4:6]
    sessions = []
    for u in cheats:
        client = c.servers.servers().device(u)
        session = trained(client, client.round_info(), *_RATINGS.of(u))
        with pytest.raises(SecembError, match="server 1's receipt"):
            session.upload(only=0)
        sessions.append(session)
    for u in provers:
        client = c.servers.servers().device(u)
        session = _take_part(client, client.round_info(), *_RATINGS.of(u), only=1)
        with pytest.raises(SecembError):
            session.prove()  # server 0 holds no upload of it: no challenge, no proof
    start, refused = time.monotonic(), 0
    while (time.monotonic() - start < _HOLD_S or refused < 100) and time.monotonic() - start < 20.0:
        for s in sessions:
            with pytest.raises(SecembError):
                s.client.links[0].upload(c.r, s._uploads[0])  # noqa: SLF001 - the same upload again
            refused += 1
        time.sleep(0.05)
    assert refused >= 100 and c.state() == "open", (refused, c.leader.round_status(c.r, None))
    assert server1.calls == [], server1.calls  # server 0 counts none of them: nothing to check at server 1
    assert c.quiet()


def test_a_server_1_that_never_answers_holds_one_check_and_the_deadline_closes(
        make: list[_Cluster], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Server 1 takes the check and does not answer (until the test lets it, after the round): four honest
    devices (quorum 4), deadline 3 s.  One check is in flight the whole time, on one thread; the round closes
    at its deadline, committed with the four; once the call returns, its thread ends, and no thread raised."""
    errors = _thread_errors(monkeypatch)
    answer = threading.Event()
    true = LocalPeer.uploaded

    def silent(peer: LocalPeer, r: int) -> list[int]:
        answer.wait(20.0)
        return true(peer, r)

    server1 = _Server1(monkeypatch, silent)
    c = server1.watch(_cluster(make, relay=False, bound=False, quorum=4, deadline_s=3.0))
    assert [c.send(u) for u in _USERS[:4]] == [None] * 4
    out = c.outcome(timeout=15.0)
    assert (out["state"], out["included"], out["reason"]) == ("committed", sorted(_USERS[:4]), "deadline passed"), out
    assert server1.most == 1 and server1.rounds() == [c.r], (server1.most, server1.rounds())
    assert server1.calls[0][2].name == "secemb-quorum" and server1.calls[0][2].is_alive()
    answer.set()
    assert server1.ended() and errors == [], errors
    assert c.leader.round_status(c.r, None)["reason"] == "deadline passed"


@pytest.mark.parametrize("outcome", ["committed", "aborted"])
def test_a_check_in_flight_across_a_close_and_the_next_round_changes_neither(
        make: list[_Cluster], monkeypatch: pytest.MonkeyPatch, outcome: str) -> None:  # noqa: F811
    """Server 0's check of round ``r`` is held at server 1 while the operator closes ``r`` (four honest
    devices: committed; four whose receipted uploads server 1 omits at its close: aborted, ``uploads_misreported``,
    cleared by the operator -- before session 44 four at server 0 only, none at both servers) and opens ``r + 1``;
    then the held check answers "every participant".  Round ``r``'s outcome stays as it was, ``r + 1`` stays open,
    no thread raised; ``r + 1``'s devices at server 0 only are refused (no receipt) and close nothing."""
    errors = _thread_errors(monkeypatch)
    held, release = threading.Event(), threading.Event()
    true = LocalPeer.uploaded

    def late(peer: LocalPeer, r: int) -> list[int]:
        if not held.is_set():
            held.set()
            release.wait(20.0)
            return list(_USERS)
        return true(peer, r)

    server1 = _Server1(monkeypatch, late)
    c = server1.watch(_cluster(make, relay=False, bound=False, quorum=4))
    if outcome == "aborted":
        _deviate(monkeypatch, c, "close", lambda true, peer, r: [])
    assert [c.send(u) for u in _USERS[:4]] == [None] * 4
    assert held.wait(10.0)
    first = c.leader.close_round(c.r)
    assert first["state"] == outcome, first
    if outcome == "aborted":
        assert [a["kind"] for a in c.leader.alarms] == ["uploads_misreported"], c.leader.alarms
        c.leader.clear_alarms()
    nxt = int(c.leader.open_round(participants=_USERS, deadline_s=60.0, quorum=4)["round_id"])
    assert nxt == c.r + 1
    release.set()
    assert server1.ended()
    assert c.leader.round_status(c.r, None) == first
    assert _refused_without_receipt([c.send(u, only=0) for u in _USERS[4:8]])
    time.sleep(_HOLD_S)
    assert c.leader.round_status(nxt, None)["state"] == "open"
    assert errors == [], errors


@pytest.mark.parametrize("bound", [False, True], ids=["unbounded", "bounded"])
def test_a_deviating_server_1_naming_users_server_0_does_not_count_makes_no_quorum(
        make: list[_Cluster], monkeypatch: pytest.MonkeyPatch, bound: bool) -> None:  # noqa: F811
    """Quorum 4: two honest devices and three at server 0 only (refused since session 44: no receipt; before,
    server 0 counted 5).  Server 1 answers its
    true uploads plus the participants that sent nothing, 1,000 copies of an honest user, negative ids and a
    million users outside the deployment: server 0 counts only the users it counts itself, two, and the round
    stays open; two more honest devices close it on quorum with the four honest ones."""
    honest, cheats, silent = _USERS[:2] + _USERS[5:7], _USERS[2:5], _USERS[7:]
    true = LocalPeer.uploaded

    def padded(peer: LocalPeer, r: int) -> list[int]:
        return (list(true(peer, r)) + list(silent) + [honest[0]] * 1000 + [-1, -2**62]
                + list(range(10**6, 2 * 10**6)))

    c = _Server1(monkeypatch, padded).watch(_cluster(make, relay=False, bound=bound, quorum=4))
    assert [c.send(u) for u in honest[:2]] == [None] * 2
    assert _refused_without_receipt([c.send(u, only=0) for u in cheats])
    assert c.stays_open(), c.leader.round_status(c.r, None)
    assert [c.send(u) for u in honest[2:]] == [None, None]
    out = c.outcome()
    assert (out["state"], out["included"], out["reason"]) == ("committed", sorted(honest), "quorum reached"), out
    assert c.quiet()


#: answers of a deviating server 1 to ``GET /v1/peer/rounds/3/uploaded``: (status, body, content type)
ODD_ANSWERS = {
    "a top-level list": (200, b"[1, 2, 3]", "application/json"),
    "null": (200, b"null", "application/json"),
    "uploaded null": (200, b'{"uploaded": null}', "application/json"),
    "nested lists": (200, b'{"uploaded": [[1], [2]]}', "application/json"),
    "an exponent": (200, b'{"uploaded": [1e3]}', "application/json"),
    "NaN": (200, b'{"uploaded": [NaN]}', "application/json"),
    "Infinity": (200, b'{"uploaded": [Infinity]}', "application/json"),
    "an integer of 5,000 digits": (200, b'{"uploaded": [' + b"1" * 5000 + b"]}", "application/json"),
    "the field twice": (200, b'{"uploaded": [1], "uploaded": "x"}', "application/json"),
    "not JSON": (200, b"\xff\xfe<html>", "application/json"),
    "empty": (200, b"", "application/json"),
    "HTML": (200, b"<html>uploaded</html>", "text/html"),
    "302": (302, b"", "application/json"),
    "404": (404, b'{"detail": "no such round"}', "application/json"),
    "409": (409, b'{"detail": "closed"}', "application/json"),
    "429": (429, b'{"detail": "slow down"}', "application/json"),
    "500": (500, b"Internal Server Error", "text/plain"),
    "503 no body": (503, b"", "application/json"),
}


@pytest.mark.parametrize("what", list(ODD_ANSWERS))
def test_an_uploaded_answer_of_another_shape_or_status_is_a_peer_error(what: str) -> None:
    """Whatever server 1 answers, :meth:`HttpPeer.uploaded` returns a list of ints or raises one of the
    PeerLink's errors (:data:`~secemb.server.peer.PEER_ERRORS`), the only ones ``_close_on_quorum``
    catches -- anything else would end its thread with a traceback and leave no check."""
    httpx = pytest.importorskip("httpx")
    from secemb.transport.network import ApiClient

    status, body, kind = ODD_ANSWERS[what]
    peer = HttpPeer("https://127.0.0.1:9", b"k" * 32)
    peer.api = ApiClient("https://127.0.0.1:9", "server0", b"k" * 32, http=httpx.Client(transport=httpx.MockTransport(
        lambda _: httpx.Response(status, content=body, headers={"content-type": kind}))))
    try:
        with pytest.raises(PEER_ERRORS) as caught:
            peer.uploaded(3)
        assert isinstance(caught.value, PeerRefused if 300 <= status < 500 else PeerUnreachable), caught.value
    finally:
        peer.shutdown()


def test_the_uploaded_route_refuses_strangers_in_process(make: list[_Cluster],  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``GET /v1/peer/rounds/{r}/uploaded`` through the real apps (in process, plain HTTP as a loopback
    deployment's): server 0's peer signature reads server 1's uploads of the open round; no credentials,
    the peer secret as another party, either operator, a device, a signature for another path or method,
    and server 0's own app are refused (401/403/404/405), and nothing changes; another round and a closed
    one are 409."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from secemb.server.app import create_app
    from secemb.transport.signing import sign_headers, user_key

    c = _cluster(make, relay=False, bound=False, quorum=8)
    leader, follower = c.servers.nodes
    apps = []
    for node in (leader, follower):  # the in-process nodes' configurations are TLS ones: their apps over plain HTTP
        monkeypatch.setattr(node, "cfg", node.cfg.model_copy(update={"insecure_http": True,
                                                                      "peer_url": "http://127.0.0.1:9"}))
        apps.append(TestClient(create_app(node), raise_server_exceptions=False))
    cfg = follower.cfg
    assert [c.send(u, only=p) for u, p in ((_USERS[0], None), (_USERS[1], 1))] == [None] * 2
    assert _refused_without_receipt([c.send(_USERS[2], only=0)])
    path = f"/v1/peer/rounds/{c.r}/uploaded"

    def get(app: int, key_id: str, key: bytes, *, signed_path: str = path, method: str = "GET",
            sent_path: str = path) -> Any:
        return apps[app].request(method, sent_path, headers=sign_headers(key_id, key, method if signed_path == path
                                                                          else "GET", signed_path, "", b""))

    ok = get(1, "server0", cfg.peer_secret)
    assert (ok.status_code, ok.json()) == (200, {"uploaded": sorted(_USERS[:2])}), ok.text
    before = sorted(follower.peer_uploaded(c.r))
    unsigned = apps[1].get(path)
    refusals: list[tuple[str, Any, tuple[int, ...]]] = [
        ("no credentials", unsigned, (401,)),
        ("the peer secret as server 1", get(1, "server1", cfg.peer_secret), (401, 403)),
        ("server 1's operator", get(1, "admin", cfg.admin_secret), (403,)),
        ("server 0's operator", get(1, "admin", leader.cfg.admin_secret), (401, 403)),
        ("a device", get(1, f"user:{_USERS[0]}", user_key(cfg.user_secret, _USERS[0])), (403,)),
        ("a wrong peer key", get(1, "server0", b"w" * 32), (401,)),
        ("signed for another round", get(1, "server0", cfg.peer_secret, signed_path=f"/v1/peer/rounds/{c.r + 1}/"
                                         "uploaded"), (401,)),
        ("POST", get(1, "server0", cfg.peer_secret, method="POST"), (401, 405)),
        ("server 0's app", get(0, "server0", cfg.peer_secret), (401, 403, 404)),
    ]
    for what, resp, codes in refusals:
        assert resp.status_code in codes, (what, resp.status_code, resp.text)
        assert "Traceback" not in resp.text and "uploaded" not in resp.json(), (what, resp.text)
    assert sorted(follower.peer_uploaded(c.r)) == before and c.state() == "open"
    other = apps[1].get(f"/v1/peer/rounds/{c.r + 1}/uploaded", headers=sign_headers(
        "server0", cfg.peer_secret, "GET", f"/v1/peer/rounds/{c.r + 1}/uploaded", "", b""))
    assert other.status_code == 409, other.text
    c.leader.close_round(c.r)
    assert get(1, "server0", cfg.peer_secret).status_code == 409


# --- 2. the VNNI kernel ---------------------------------------------------------------------------------------

def _dots_here() -> bool:
    if not kernels.compiled():
        return False
    from secemb.fss._projection_kernels import DOTS, tiles

    return DOTS and not tiles()


needs_dots = pytest.mark.skipif(not _dots_here(), reason="needs AVX-512 VNNI and no AMX (the compiled kernels)")
DTYPES = [np.uint32, np.uint64]
ODD = [1, 9, 10, 11, 19, 21, 40, 41, 100]


def _ternary(rows: int, length: int) -> np.ndarray:
    """int8 (rows, length) entries -1, 0, +1 from ``os.urandom`` (uniform over the four 2-bit values as the
    specification's ``a - b``); row 0 every entry +1, row 1 (where there is one) every entry -1."""
    bits = np.frombuffer(os.urandom(rows * length), np.uint8).reshape(rows, length)
    t = ((bits & 1).astype(np.int8) - ((bits >> 1) & 1).astype(np.int8))
    t[0] = 1
    if rows > 1:
        t[1] = -1
    return t


def _ints(t: np.ndarray, x: np.ndarray, at: list[int], rows: int, k: int) -> list[list[int]]:
    """``t[i] . x[d] mod 2^k`` in Python integers, for each ``d`` of ``at`` and ``i < rows``."""
    tl = t[:rows].tolist()
    return [[sum(e * v for e, v in zip(row, x[d].tolist(), strict=True)) % (1 << k) for row in tl] for d in at]


def _scratch(height: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """``dot_products``' planes and sums for ``height`` rows of ``length`` words, full of random bytes."""
    planes = np.frombuffer(os.urandom(64 * -(-length // 4)), np.uint32).reshape(-1, 16).copy()
    sums = np.frombuffer(os.urandom(64 * height), np.int32).reshape(height, 16).copy()
    return planes, sums


def _rows_of(t: np.ndarray, height: int) -> np.ndarray:
    """``t`` (rows, L) in ``dot_products``' layout: ``height`` rows of ``4 ceil(L / 4)`` entries, the padding
    and the rows past ``t``'s random bytes (read, never used)."""
    rows, length = t.shape
    full = np.frombuffer(os.urandom(height * 4 * -(-length // 4)), np.int8).reshape(height, -1).copy()
    full[:rows, :length] = t
    return full


@needs_dots
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ODD)
def test_dot_products_at_odd_shapes_and_extreme_words(dtype: type, rows: int) -> None:
    """Every length of :data:`ODD` with ``rows`` rows (a table three rows taller, or ten where fewer), five
    devices in a shuffled order into shuffled rows of ``out``: device 0 every word ``2^k - 1`` (every plane
    byte 255), device 1 every word 1, the rest random; rows 0 and 1 every entry +1 and -1."""
    from secemb.fss._projection_kernels import DOT_ROWS, dot_products

    k = 8 * np.dtype(dtype).itemsize
    for length in ODD:
        t = _ternary(rows, length)
        table = _rows_of(t, max(rows + 3, DOT_ROWS))
        x = random_ring((5, length), dtype)
        x[0], x[1] = np.iinfo(dtype).max, 1
        at = np.array([3, 0, 4, 1, 2])
        to = np.array([6, 2, 0, 5, 3])
        out = np.full((7, rows), 7, dtype)
        dot_products(table, rows, x, at, out, to, *_scratch(table.shape[0], length))
        assert out[to].tolist() == _ints(t, x, at.tolist(), rows, k), (length, rows)
        assert (out[[1, 4]] == 7).all()
        if rows > 1:  # closed forms: all +1 and all -1 on the largest word
            assert (int(out[2, 0]), int(out[2, 1])) == ((-length) % (1 << k), length % (1 << k))


def _chunked(x: np.ndarray, t: np.ndarray) -> int:
    """``t . x mod 2^k`` by numpy's wrapping unsigned products and sums, a megaword at a time."""
    chunks = [(x[lo : lo + (1 << 20)] * t[lo : lo + (1 << 20)].astype(x.dtype)).sum(dtype=x.dtype)
              for lo in range(0, x.size, 1 << 20)]
    return sum(map(int, chunks)) % (1 << 8 * x.itemsize)


@needs_dots
@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_products_are_exact_at_tile_length_and_refuse_one_word_more(dtype: type) -> None:
    """``L = TILE_LENGTH`` (2^23): device 0 every word ``2^k - 1`` (every plane byte 255), so with rows of
    every entry +1 and -1 each plane's int32 sum is +-255 * 2^23 (-2,139,095,040: exact only just); device 1
    random, against numpy's wrapping products; row 2 alternating +1/-1 (zero on device 0), row 3 random.  A
    vector of ``TILE_LENGTH + 1`` words (the rows long enough) is refused."""
    from secemb.fss._projection_kernels import DOT_ROWS, TILE_LENGTH, dot_products

    k, rows, length = 8 * np.dtype(dtype).itemsize, 4, TILE_LENGTH
    table = np.zeros((DOT_ROWS, length + 4), np.int8)
    table[0, :length], table[1, :length], table[2, :length:2], table[2, 1:length:2] = 1, -1, 1, -1
    table[3, :length] = _ternary(3, length)[2]
    x = np.empty((2, length + 1), dtype)
    x[0] = np.iinfo(dtype).max
    x[1] = random_ring((length + 1,), dtype)
    out = np.zeros((2, rows), dtype)
    planes, sums = _scratch(DOT_ROWS, length + 1)
    dot_products(table[:, :length], rows, x[:, :length], np.arange(2), out, np.arange(2), planes, sums)
    mod = 1 << k
    assert out[0].tolist() == [(-length) % mod, length, 0, (-int(table[3].sum(dtype=np.int64))) % mod]
    assert out[1].tolist() == [_chunked(x[1, :length], table[i, :length]) for i in range(rows)]
    with pytest.raises(ValueError, match="wrong shape"):
        dot_products(table, rows, x, np.arange(2), out, np.arange(2), planes, sums)


@needs_dots
@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_products_strides(dtype: type) -> None:
    """Rows of ``t`` and of ``x`` and ``out`` read through negative row strides give the reference words (or
    a refusal: never other words); columns not contiguous, rows of ``t`` not a multiple of 4 bytes apart,
    scratches of other strides, an ``out`` narrower than the rows are refused."""
    from secemb.fss._projection_kernels import dot_products

    k, rows, length = 8 * np.dtype(dtype).itemsize, 21, 41
    t = _ternary(rows, length)
    table = _rows_of(t, rows)
    x = random_ring((5, length), dtype)
    at = np.arange(5)
    want = _ints(t, x, list(range(5)), rows, k)
    planes, sums = _scratch(rows, length)
    for name, tt, xx, order in [("t reversed", np.ascontiguousarray(table[::-1])[::-1], x, at),
                                ("x reversed", table, np.ascontiguousarray(x[::-1])[::-1], at)]:
        out = np.zeros((5, rows), dtype)
        try:
            dot_products(tt, rows, xx, order, out, at, planes, sums)
        except ValueError:
            continue
        assert out.tolist() == want, name
    out = np.ascontiguousarray(np.zeros((5, rows), dtype)[::-1])[::-1]
    dot_products(table, rows, x, at, out, at, planes, sums)
    assert out.tolist() == want
    wide = np.zeros((5, 2 * length), dtype)
    wide[:, ::2] = x
    odd_rows = np.zeros((rows, table.shape[1] + 1), np.int8)
    odd_rows[:, : table.shape[1]] = table
    bad = {
        "x's columns not contiguous": (table, wide[:, ::2], planes, sums, rows),
        "t's rows not 4-byte apart": (odd_rows[:, : table.shape[1]], x, planes, sums, rows),
        "planes' rows 128 bytes apart": (table, x, np.zeros((2 * planes.shape[0], 16), np.uint32)[::2], sums, rows),
        "sums in Fortran order": (table, x, planes, np.asfortranarray(sums), rows),
        "planes of 32 columns": (table, x, np.zeros((planes.shape[0], 32), np.uint32), sums, rows),
        "out narrower than the rows": (table, x, planes, sums, rows + 1),
    }
    for name, (tt, xx, pp, ss, rr) in bad.items():
        out = np.full((5, rows), 7, dtype)
        with pytest.raises(ValueError):
            dot_products(tt, rr, xx, at, out, at, pp, ss)
        assert (out == 7).all(), name


def _out_of_range(dtype: type, at: np.ndarray, to: np.ndarray) -> np.ndarray:
    """``dot_products`` of five devices with ``at`` and ``to``: ``pytest.raises(ValueError)``, and ``out`` (all 7
    before) as the refusal left it."""
    from secemb.fss._projection_kernels import dot_products

    rows, length = 11, 9
    table = _rows_of(_ternary(rows, length), rows)
    out = np.full((5, rows), 7, dtype)
    with pytest.raises(ValueError):
        dot_products(table, rows, random_ring((5, length), dtype), at, out, to, *_scratch(rows, length))
    return out


#: device indices outside ``x`` or ``out`` (five rows each)
OUTSIDE = (-1, 5, 2**40)


@needs_dots
@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_products_refuse_devices_out_of_range_before_writing(dtype: type) -> None:
    """A device index outside ``out`` (``to``: negative, one past, 2^40) anywhere in the call, or outside ``x``
    (``at``) in the call's first pass, is refused (numba checks no index; the planes are read and the sums
    written at raw addresses) and nothing of ``out`` is written; through ``affine_dot_products`` too (``to``
    outside ``out``, more real devices than its parts)."""
    from secemb.fss._projection_kernels import affine_dot_products

    good = np.arange(5)
    for bad in OUTSIDE:
        for at, to in ((np.array([bad, 1, 2, 3, 4]), good), (good, np.array([0, 1, 2, 3, bad]))):
            assert (_out_of_range(dtype, at, to) == 7).all(), (at, to)
    rows, length = 11, 9
    table = _rows_of(_ternary(rows, length), rows)
    planes, sums = _scratch(rows, length)
    group = 16 // np.dtype(dtype).itemsize
    parts = tuple((random_ring((3, 3), dtype), np.arange(3, dtype=np.int64), random_ring((3, 3), dtype),
                   np.zeros(0, dtype)) for _ in range(group))
    xs = np.zeros((group, length), dtype)
    for real, to in ((1, np.array([5])), (1, np.array([-1])), (group, np.arange(group) - 1)):
        out = np.full((5, rows), 7, dtype)
        with pytest.raises(ValueError):
            affine_dot_products(parts, real, False, xs, table, rows, out, to, planes, sums)
        assert (out == 7).all(), (real, to)


@needs_dots
@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_products_refuse_a_device_outside_x_in_a_later_pass_before_writing(dtype: type) -> None:
    """Five devices (two passes on a uint32 ring, three on a uint64 one), the last index outside ``x``: refused,
    and -- as the row kernels' :meth:`Products.project` and ``dot_products``' own check of ``to`` do -- before
    any row of ``out`` is written.  Through ``affine_dot_products``, more real devices than its scratch ``xs``
    holds likewise."""
    from secemb.fss._projection_kernels import affine_dot_products

    for bad in OUTSIDE:
        assert (_out_of_range(dtype, np.array([0, 1, 2, 3, bad]), np.arange(5)) == 7).all(), bad
    rows, length = 11, 9
    table = _rows_of(_ternary(rows, length), rows)
    group = 16 // np.dtype(dtype).itemsize
    parts = tuple((random_ring((3, 3), dtype), np.arange(3, dtype=np.int64), random_ring((3, 3), dtype),
                   np.zeros(0, dtype)) for _ in range(group))
    out = np.full((5, rows), 7, dtype)
    with pytest.raises(ValueError):
        affine_dot_products(parts, group + 1, False, np.zeros((group, length), dtype), table, rows, out,
                            np.arange(group + 1), *_scratch(rows, length))
    assert (out == 7).all()


@needs_dots
def test_dot_products_on_two_threads() -> None:
    """Two threads project the same expanded rows (each its own scratches and output) 30 times at once: each
    result the Python integers' (the kernel holds no state of its own; it releases the GIL)."""
    from secemb.fss._projection_kernels import dot_products

    rows, length = 41, 1001
    t = _ternary(rows, length)
    table = _rows_of(t, rows)
    xs = [random_ring((5, length), np.uint32) for _ in range(2)]
    wants = [_ints(t, x, list(range(5)), rows, 32) for x in xs]

    def run(which: int) -> bool:
        planes, sums = _scratch(rows, length)
        out = np.zeros((5, rows), np.uint32)
        ok = True
        for _ in range(30):
            out[:] = 0
            dot_products(table, rows, xs[which], np.arange(5), out, np.arange(5), planes, sums)
            ok &= out.tolist() == wants[which]
        return ok

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(run, [0, 1])) == [True, True]


def _affine(dtype: type, devices: int, slots: int, width: int, dense: int, strided: bool) -> list[tuple]:
    """``devices`` affine parts (base, count, words, tail) of random words; ``strided``: every array a view with
    a step of 2 (or reversed), as a caller's slices may be."""
    def ring(*shape: int) -> np.ndarray:
        if not strided:
            return random_ring(shape, dtype)
        big = random_ring(tuple(2 * s for s in shape), dtype)
        return big[tuple(slice(None, None, 2) for _ in shape)]

    return [(ring(slots, width), np.frombuffer(os.urandom(slots), np.uint8).astype(np.int64)[::-1] if strided
             else np.frombuffer(os.urandom(slots), np.uint8).astype(np.int64), ring(slots, width), ring(dense))
            for _ in range(devices)]


def _vector(part: tuple, negate: bool, k: int) -> list[int]:
    base, count, words, tail = part
    sign = -1 if negate else 1
    return [(sign * (int(b) + int(c) * int(w))) % (1 << k) for brow, c, wrow in zip(base, count, words, strict=True)
            for b, w in zip(brow.tolist(), wrow.tolist(), strict=True)] + [int(v) for v in tail.tolist()]


@needs_dots
@pytest.mark.parametrize("dots", [True, False], ids=["vnni", "rows"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 21, 100])
def test_projections_on_both_paths_at_odd_shapes(dots: bool, dtype: type, rows: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``project_each`` (a Fortran-order and a column-strided ``x``), ``project_affine`` and
    ``project_own_affine`` (parts contiguous and strided) of 1, 2, 3 and 5 devices on two seeds, ``negate``
    both ways, with ``DOTS`` on and off: the specification's rows times the vectors, in Python integers."""
    from secemb.fss import _projection_kernels as pk
    from secemb.fss.projections import project_affine, project_each, project_own_affine

    monkeypatch.setattr(pk, "DOTS", dots)
    k, slots, width, dense = 8 * np.dtype(dtype).itemsize, 3, 7, 2
    length = slots * width + dense
    seeds = [os.urandom(16) for _ in range(2)]
    spec = [spec_rows(s, rows, length) for s in seeds]
    for devices in (1, 2, 3, 5):
        which = [d % 2 for d in range(devices)]
        chosen = [seeds[w] for w in which]
        for strided in (False, True):
            for negate in (False, True):
                parts = _affine(dtype, devices, slots, width, dense, strided)
                vectors = [_vector(p, negate, k) for p in parts]
                want = [[sum(e * v for e, v in zip(row, vectors[d], strict=True)) % (1 << k) for row in spec[w]]
                        for d, w in enumerate(which)]
                assert project_affine(chosen, negate, parts, rows).tolist() == want, (devices, strided, negate)
                assert project_own_affine(chosen, negate, parts, rows).tolist() == want, (devices, strided, negate)
                x = np.array(vectors, dtype)
                wide = np.zeros((devices, 2 * length), dtype)
                wide[:, ::2] = x
                for xx in (np.asfortranarray(x), wide[:, ::2]):
                    assert project_each(chosen, xx, rows).tolist() == want, (devices, strided, negate)



@needs_dots
@pytest.mark.parametrize("what", ["sums uint32", "sums float32", "x uint32, out uint64"])
def test_dot_products_refuse_scratches_and_outputs_of_another_dtype(what: str) -> None:
    """Every word ``2^k - 1`` on rows of every entry -1 (each plane's sum negative): a ``sums`` scratch of
    another 4-byte dtype than int32, or an ``out`` of another dtype than ``x``, is refused -- or the words are
    the ring's, ``L mod 2^k``; never other words."""
    from numba.core.errors import TypingError

    from secemb.fss._projection_kernels import DOT_ROWS, dot_products

    length = 9
    table = np.full((DOT_ROWS, 12), -1, np.int8)
    ring = np.uint32 if what.startswith("x uint32") else np.uint64
    x = np.full((1, length), np.iinfo(ring).max, ring)
    out = np.full((1, DOT_ROWS), 7, np.uint64)
    sums = np.zeros((DOT_ROWS, 16), {"sums uint32": np.uint32, "sums float32": np.float32}.get(what, np.int32))
    try:
        dot_products(table, DOT_ROWS, x, np.arange(1), out, np.arange(1), np.zeros((3, 16), np.uint32), sums)
    except (ValueError, TypeError, TypingError):
        assert (out == 7).all()
        return
    assert out.tolist() == [[length] * DOT_ROWS], out


# --- 3. a server's per-batch costs (helper P): batches give the one batch's bytes, and the plain sums ---------

#: ten devices' retrievals (and, after each batch, the uploads of those that do not drop out) in batches of these
#: sizes: one batch, and devices one, two, three and eight at a time
BATCHINGS = {"one batch": [10], "ones": [1] * 10, "twos": [2] * 5, "threes": [3, 3, 3, 1], "eights": [8, 2]}
#: devices that retrieve in their batch and never upload: silent, taken out at the close
DROPOUTS = (3, 7)


def _batched_round(layout: str, relay: bool, sizes: list[int], workers: int | None) -> tuple[list[tuple], bytes,
                                                                                            bytes, tuple]:
    """One round of ten devices in batches of ``sizes`` (``round_setup.begin``: new servers, the fixed sketch
    key, a seeded table; the devices' keys from seeded randomness, so every batching sends the same
    messages): per device its replies, both servers' aggregate shares of the devices that uploaded, and the
    plain sums those shares must reconstruct to (``np.add.at`` of the gradients on the items: no secemb
    code) next to what ``combine`` gives.  ``workers``: the servers' thread backend (``None``: serial)."""
    from round_setup import begin  # type: ignore[import-not-found]

    from secemb.protocols.backends import ThreadBackend
    from secemb.randomness import CtrDrbg

    backend = None if workers is None else ThreadBackend(workers)
    try:
        return _play_batches(begin(layout=layout, relay=relay, round_id=1, num_items=300, width=5, dense_size=2,
                                   m_prime=12, seed=7, backend=backend), layout, relay, sizes, CtrDrbg)
    finally:
        if backend is not None:
            backend.close()


def _play_batches(rnd: Any, layout: str, relay: bool, sizes: list[int],
                  drbg: Any) -> tuple[list[tuple], bytes, bytes, tuple]:
    """:func:`_batched_round` on the begun round ``rnd`` (``drbg``: the devices' seeded randomness)."""
    cfg, s0, s1 = rnd.cfg, rnd.s0, rnd.s1
    users = list(range(10))
    kept = [u for u in users if u not in DROPOUTS]
    want_sparse, want_dense = np.zeros((300, 5), np.uint32), np.zeros(2, np.uint32)
    devices = []
    for u in users:
        user = rnd.proto.make_user(cfg, _rng=drbg(bytes([42, u]) * 8))
        items = rnd.rng.choice(300, 12, replace=False)
        slots = cfg.cuckoo().assign(items, rnd.rng)[0] if layout == "cuckoo" else items
        real = slots >= 0
        grads = np.zeros((cfg.slots, 5), np.uint32)
        grads[real] = rnd.rng.integers(0, 2**32, (int(real.sum()), 5), dtype=np.uint64).astype(np.uint32)
        dense = rnd.rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
        if u in kept:
            np.add.at(want_sparse, slots[real], grads[real])
            want_dense += dense
        devices.append((user, user.retrieval_request(slots), grads, dense))
    replies: list[tuple] = [()] * len(users)
    lo = 0
    for n in sizes:
        batch, lo = users[lo : lo + n], lo + n
        if relay:
            assert s1.handle_retrieval_many([(u, devices[u][1][1]) for u in batch]) == [None] * n
            fwds = s0.handle_retrieval_many([(u, devices[u][1][0]) for u in batch])
            for u, masked in zip(batch, s1.relay_retrieval_many(list(zip(batch, fwds, strict=True))), strict=True):
                replies[u] = (s0.complete_retrieval(u, masked), None)
        else:
            got0 = s0.handle_retrieval_many([(u, devices[u][1][0]) for u in batch])
            got1 = s1.handle_retrieval_many([(u, devices[u][1][1]) for u in batch])
            for u, a0, a1 in zip(batch, got0, got1, strict=True):
                replies[u] = (a0, a1)
        up = [u for u in batch if u in kept]
        msgs = {}
        for u in up:
            devices[u][0].retrieval_result(*replies[u])
            msgs[u] = devices[u][0].upload(*devices[u][2:])
        if relay:
            fwds = s0.handle_upload_many([(u, msgs[u][0]) for u in up])
            assert s1.relay_upload_many(list(zip(up, fwds, strict=True))) == [None] * len(up)
        else:
            assert s1.handle_upload_many([(u, msgs[u][1]) for u in up]) == [None] * len(up)
            assert s0.handle_upload_many([(u, msgs[u][0]) for u in up]) == [None] * len(up)
    share0, share1 = s0.aggregate_share(kept), s1.aggregate_share(kept)
    sparse, dense = s0.combine(share1, kept)
    return replies, share0, share1, (sparse.tolist(), dense.tolist(), want_sparse.tolist(), want_dense.tolist())


@pytest.mark.parametrize("workers", [None, 2], ids=["serial", "threads"])
@pytest.mark.parametrize("relay", [False, True], ids=["no-relay", "relay"])
@pytest.mark.parametrize("layout", ["cuckoo", "full"])
def test_devices_in_batches_of_any_size_give_the_one_batchs_bytes_and_the_plain_sums(layout: str, relay: bool,
                                                                                     workers: int | None) -> None:
    """Ten devices in one batch, and one, two, three and eight at a time, two of them dropping out after their
    retrieval (between batches), on a serial and a two-thread backend: every reply and both aggregate shares are
    the one batch's bytes, and the shares reconstruct to the plain sums of the eight uploads."""
    got = {name: _batched_round(layout, relay, sizes, workers) for name, sizes in BATCHINGS.items()}
    one = got["one batch"]
    sparse, dense, want_sparse, want_dense = one[3]
    assert (sparse, dense) == (want_sparse, want_dense)
    assert any(map(any, want_sparse))
    for name, (replies, share0, share1, sums) in got.items():
        assert replies == one[0], name
        assert (share0, share1) == (one[1], one[2]), name
        assert sums == one[3], name
