"""Session 31 (helper P, issue 34): the full layout's bound check without a second walk.

Since session 31 (helper A) the full layout proves each device's contribution per table row, and
the servers walked every device's keys again at the check to project it.  Now each device's
challenge ``c_u`` is derived by both servers at retrieval from the round's sketch secret and the
device's key digest (``HMAC-SHA256(s_round, b"secemb-bound-challenge" || u64 round || u64 user ||
D)[:16]``), so each server projects the folded part ``(-1)^b C_b`` during the retrieval's walk and
the correction words' part and dense share at intake, and keeps ROWS words a device
(docs/security.md, "The challenge is derived, per device").  What the device must not know before
its upload is fixed is ``c_u``; server 0 gives it only after the upload is absorbed.

The tests (each with the mutation it was checked against, in its docstring): the derivation,
written out here, at both servers; no challenge before the upload; a device that learns ``c_u``
early (a leak simulated by reading it from server 0's state) can stack a row past ``2^31`` and
pass, while without the leak the same attack is rejected -- the timing is what the soundness
rests on; a server 0 that names another challenge gets zero answers from server 1, and so does a
device that sent the two servers different key material (two challenges); the bounded
round's aggregate equals the unbounded round's bit for bit (with a dropout and a device left out
after its upload, serial, thread and process backends); and no walk at the check.  Expected values are
computed here from what the devices upload.
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

import numpy as np
import pytest

from secemb.errors import ProtocolError, RetrievalTampered
from secemb.fss import fused, rangeproof
from secemb.fss.keys import HEADER_BYTES as KEY_HEADER_BYTES
from secemb.fss.projections import ternary_rows
from secemb.protocols.backends import Backend, ProcessBackend, ThreadBackend
from secemb.protocols.base import RoundConfig
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer, SecEmbUser
from secemb.fss.rangeproof import prove
from secemb.protocols.secemb.bounds import ROWS, bound_params, context, contribution, projected, upload_vector
from secemb.protocols.secemb.sizes import NAME
from secemb.protocols.wire import HEADER_BYTES as FRAME_BYTES
from secemb.protocols.wire import frame
from secemb.randomness import CtrDrbg
from secemb.server.verify import rejected as digest_rejected

M, W, SLOTS, P = 64, 4, 16, 8
RING = 1 << 32


class Run:
    """One round at the roles, driven by hand: both servers of ``proto`` and devices by id."""

    def __init__(self, proto: SecEmbProtocol, round_id: int = 3) -> None:
        self.proto = proto
        self.cfg: RoundConfig = proto.round_config(round_id, num_items=M, width=W, dense_size=P, m_prime=SLOTS,
                                                   ring_bits=32)
        s0, s1 = proto.make_server(0), proto.make_server(1)
        assert isinstance(s0, SecEmbServer) and isinstance(s1, SecEmbServer)
        self.s0, self.s1 = s0, s1
        table = (np.arange(M * W, dtype=np.uint32) * 7).reshape(M, W)
        for s in (s0, s1):
            s.begin_round(self.cfg, table)
        self.devices: dict[int, SecEmbUser] = {}

    def retrieve(self, users: list[int], items: Callable[[int], np.ndarray],
                 device: type[SecEmbUser] = SecEmbUser) -> None:
        """Devices ``users`` of class ``device`` request ``items(u)`` (one item a key), as one batch
        at each server."""
        p = self.proto
        devs = [device(self.cfg, relay=p.relay, verify=True, bound_users=p.bound_users,
                       _rng=CtrDrbg(b"s31-P/%d" % u)) for u in users]
        reqs = [d.retrieval_request(items(u)) for d, u in zip(devs, users, strict=True)]
        s0, s1, none = self.s0, self.s1, [None] * len(users)
        if self.proto.relay:
            assert s1.handle_retrieval_many([(u, r[1]) for u, r in zip(users, reqs, strict=True)]) == none
            fwd = s0.handle_retrieval_many([(u, r[0]) for u, r in zip(users, reqs, strict=True)])
            masked = s1.relay_retrieval_many(list(zip(users, fwd, strict=True)))
            for d, reply in zip(devs, s0.complete_retrieval_many(list(zip(users, masked, strict=True))), strict=True):
                d.retrieval_result(reply, None)
        else:
            a0 = s0.handle_retrieval_many([(u, r[0]) for u, r in zip(users, reqs, strict=True)])
            a1 = s1.handle_retrieval_many([(u, r[1]) for u, r in zip(users, reqs, strict=True)])
            for d, x, y in zip(devs, a0, a1, strict=True):
                d.retrieval_result(x, y)
        self.devices.update(zip(users, devs, strict=True))

    def upload(self, uploads: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        """Each device of ``uploads`` uploads its rows (ring (S, w)) and dense vector (ring (P,)),
        as one batch at each server."""
        users = sorted(uploads)
        ups, none = [self.devices[u].upload(*uploads[u]) for u in users], [None] * len(users)
        if self.proto.relay:
            fwd = self.s0.handle_upload_many([(u, x[0]) for u, x in zip(users, ups, strict=True)])
            assert self.s1.relay_upload_many(list(zip(users, fwd, strict=True))) == none
        else:
            to1 = [(u, cast("bytes", x[1])) for u, x in zip(users, ups, strict=True)]
            assert self.s1.handle_upload_many(to1) == none
            assert self.s0.handle_upload_many([(u, x[0]) for u, x in zip(users, ups, strict=True)]) == none

    def prove(self, users: list[int]) -> None:
        """Devices ``users`` prove under the challenge server 0 gives each."""
        got = self.s0.handle_proof_many([(u, self.devices[u].bound_proof(self.s0.challenge(u))) for u in users])
        assert got == [None] * len(users)

    def check(self, uploaded: list[int]) -> set[int]:
        """Digests, sketch check and (bounded) bound check over ``uploaded``: the rejected ids."""
        s0, s1 = self.s0, self.s1
        d0, d1 = s0.upload_digests(uploaded), s1.upload_digests(uploaded)
        assert d0 is not None and d1 is not None
        out = set(digest_rejected(d0, d1)) | set(s0.verify_rejected(uploaded, s1.verify_answer(uploaded)))
        assert not out
        if self.proto.bound:
            out |= s0.bound_rejected(s1.bound_answer(s0.bound_request(uploaded)))
        return out

    def aggregate(self, include: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The reconstructed aggregate over ``include``."""
        return self.s0.combine(self.s1.aggregate_share(include), include)


def _protocol(relay: bool, *, bound: bool = True, users: int = 20, backend: Backend | None = None) -> SecEmbProtocol:
    return SecEmbProtocol(layout="full", relay=relay, verify=True, bound=bound, users_per_round=users,
                          backend=backend)


def _items(u: int) -> np.ndarray:
    """Device ``u``'s items: ``SLOTS`` distinct ones."""
    return (np.arange(SLOTS, dtype=np.int64) * 3 + u) % M


def _honest(u: int) -> tuple[np.ndarray, np.ndarray]:
    rows = (np.arange(SLOTS * W, dtype=np.int64).reshape(SLOTS, W) - 20 * u) * (1 if u % 2 else -1)
    return rows.astype(np.uint32), (np.arange(P, dtype=np.int64) - 3 * u).astype(np.uint32)


def _expected(uploads: dict[int, tuple[np.ndarray, np.ndarray]], users: list[int]) -> tuple[np.ndarray, np.ndarray]:
    sparse, dense = np.zeros((M, W), np.uint32), np.zeros(P, np.uint32)
    for u in users:
        np.add.at(sparse, _items(u), uploads[u][0])
        dense += uploads[u][1]
    return sparse, dense


@pytest.mark.parametrize("relay", [False, True])
def test_the_challenge_is_the_hmac_of_the_round_secret_at_both_servers_and_given_only_after_the_upload(
        relay: bool) -> None:
    """Both servers hold ``c_u = HMAC-SHA256(s_round, b"secemb-bound-challenge" || u64 round || u64
    user || D)[:16]`` from the retrieval on, ``s_round = HMAC-SHA256(sketch_key, b"secemb-sketch-round"
    || u64 round)`` and ``D`` the device's own key digest (written out here with :mod:`hmac`); server 0
    refuses to give it before the device's upload is absorbed, then gives exactly it, one a device.
    Mutations checked: another domain string in ``bound_challenges`` (fails the equality); server 0
    filling ``_challenges`` at the retrieval's commit (fails the refusal)."""
    proto = _protocol(relay)
    run = Run(proto)
    users = [0, 1, 5]
    run.retrieve(users, _items)
    s_round = hmac.digest(proto._sketch_key, b"secemb-sketch-round" + struct.pack("<Q", run.cfg.round_id), "sha256")
    want = {u: hmac.digest(s_round, b"secemb-bound-challenge" + struct.pack("<QQ", run.cfg.round_id, u)
                           + cast("bytes", run.devices[u]._digest), "sha256")[:16] for u in users}
    for s in (run.s0, run.s1):
        assert {u: s._pending[u].challenge for u in users} == want
    for u in users:
        with pytest.raises(ProtocolError, match="did not upload"):
            run.s0.challenge(u)
    run.upload({u: _honest(u) for u in users})
    assert {u: run.s0.challenge(u) for u in users} == want and len(set(want.values())) == len(users)
    run.prove(users)
    assert not run.check(users)
    sparse, dense = run.aggregate(users)
    exp_sparse, exp_dense = _expected({u: _honest(u) for u in users}, users)
    np.testing.assert_array_equal(sparse, exp_sparse)
    np.testing.assert_array_equal(dense, exp_dense)


def _stacking(cfg: RoundConfig, challenge: bytes, big: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and dense vector of a device that adds ``big`` to row 0, column 0, and cancels it in
    every projection under ``challenge``: 40 other coordinates of its contribution (items 1..10
    at its keys 1..10, all columns) get ``y = round(-big B^-1 s)`` with ``B`` the rows' entries at
    those coordinates and ``s`` at the target, so each projection is ``big s_i + (B y)_i``, at most
    20 in absolute value.  Its keys 11.. point at item 11 with zero rows; the dense vector is zero."""
    length = cfg.num_items * cfg.width + cfg.dense_size
    r = ternary_rows(challenge, ROWS, length).astype(np.float64)
    coords = np.arange(W, W + ROWS)  # items 1..10, every column
    b, s = r[:, coords], r[:, 0]
    assert np.linalg.matrix_rank(b) == ROWS  # a random ternary 40 x 40 is invertible (else pick others)
    y = np.rint(-big * np.linalg.solve(b, s)).astype(np.int64)
    assert np.abs(big * s + b @ y).max() <= 20
    rows = np.zeros((SLOTS, W), np.int64)
    rows[0, 0] = big
    rows[1:11] = y.reshape(10, W)
    return (rows % RING).astype(np.uint32), np.zeros(cfg.dense_size, np.uint32)


class GuessProver(SecEmbUser):
    """A device that proves the projections of its contribution under the challenge it guessed
    (:attr:`guess`, set before its upload) in the context of the one server 0 gives it: where the
    guess is that challenge, the honest proof (:meth:`SecEmbUser.bound_proof`'s statement)."""

    guess = bytes(16)

    def bound_proof(self, challenge: bytes) -> bytes:
        kept, self._kept = self._kept, None
        assert kept is not None and self._bound is not None and self._sigma is not None and self._digest
        s0 = contribution(self.config, 0, kept.path0, kept.cw)
        whole = np.zeros_like(s0)
        np.add.at(whole, kept.items, kept.rows)
        a, b = projected([self.guess] * 2, upload_vector(np.stack([s0, whole - s0]),
                                                         np.stack([kept.dense0, kept.dense1])))
        msg0, _ = prove(self._bound, a, b, context(self.config.round_id, challenge, self._digest),
                        seed_1=self._sigma, _rng=self._rng)
        return frame(NAME, "bound_proof", 0, self.config.round_id, msg0)


def _attack_items(u: int) -> np.ndarray:
    items = np.full(SLOTS, 11, np.int64)
    items[:11] = np.arange(11)
    return items


@pytest.mark.parametrize("leak", [True, False])
def test_a_device_that_knew_its_challenge_before_uploading_could_stack_a_row_without_it_it_cannot(
        leak: bool) -> None:
    """Three devices (a round of 3: ``t = 29``, ``T = 2^28``) each add ``2^30`` to row 0 and
    cancel it in the projections under the challenge they guessed (:func:`_stacking`,
    :class:`GuessProver`).  With ``c_u`` leaked before the upload (read from server 0's state after
    the retrieval: what a device must never learn then) every one passes and the row wraps --
    ``3 2^30`` read as a signed word is ``-2^30``: the bound's soundness rests on ``c_u`` being
    unknown until the upload is fixed.  Without the leak (a guess) every one is rejected.
    Mutation checked: a predictable challenge (``bound_challenges`` returning zero bytes, the
    no-leak devices' guess) lets the no-leak devices pass and wrap the row."""
    proto = _protocol(False, users=3)
    run = Run(proto)
    users = [0, 1, 2]
    assert bound_params(run.cfg, 3).bits == 29
    run.retrieve(users, _attack_items, GuessProver)
    big = 1 << 30
    for u in users:
        device = run.devices[u]
        assert isinstance(device, GuessProver)
        if leak:
            device.guess = cast("bytes", run.s0._pending[u].challenge)
    uploads = {u: _stacking(run.cfg, cast("GuessProver", run.devices[u]).guess, big) for u in users}
    run.upload(uploads)
    run.prove(users)
    out = run.check(users)
    sparse, _ = run.aggregate([u for u in users if u not in out])
    if leak:
        assert not out  # every stacking device passed, and the row wrapped: 3 2^30 reads as -2^30
        assert int(sparse[0, 0]) == (3 * big) % RING and int(sparse[0, 0].astype(np.int32)) == -(1 << 30)
    else:
        assert out == set(users)
        assert not sparse.any()


def test_server_1_answers_nothing_for_a_challenge_server_0_chose() -> None:
    """Server 0 gives device 1 a challenge of its own choosing and names it in its check request;
    the device proves under it (so the proof's ``part_1`` binds it: finding C1's check passes).
    Server 1 derives ``c_u`` itself and answers zero field elements for the device: it fails, the
    others pass.  Mutation checked: dropping the derived-challenge comparison in ``bound_answer``
    (server 1's answer for the device is then non-zero)."""
    run = Run(_protocol(False))
    users = [0, 1, 2]
    run.retrieve(users, _items)
    uploads = {u: _honest(u) for u in users}
    run.upload(uploads)
    run.s0._challenges[1] = bytes(range(16))
    run.prove(users)
    request = run.s0.bound_request(users)
    answer = run.s1.bound_answer(request)
    params = run.s0._bounded(0)
    body = answer[len(answer) - len(users) * params.verifier_bytes :]
    v1 = rangeproof.parse_verifier_messages(params, body, len(users))
    assert not v1[1, : params.opened_length].any() and v1[0, : params.opened_length].any()
    assert run.s0.bound_rejected(answer) == {1}


@contextmanager
def _no_walk(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Count the key walks (:func:`secemb.fss.fused._walk`) and refuse :func:`~secemb.fss.fused.aggregation_of`
    while the context is open."""
    walks: list[int] = []
    walk = fused._walk

    def counted(*args: object, **kwargs: object) -> np.ndarray:
        walks.append(1)
        return walk(*args, **kwargs)  # type: ignore[arg-type]

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a walk of a device's keys at the check")

    with monkeypatch.context() as m:
        m.setattr(fused, "_walk", counted)
        m.setattr(fused, "aggregation_of", refused)
        yield walks


@pytest.mark.parametrize("relay", [False, True])
@pytest.mark.parametrize("backend", ["serial", "threads", "processes"])
def test_the_bounded_round_is_the_unbounded_round_bit_for_bit_and_its_check_walks_nothing(
        monkeypatch: pytest.MonkeyPatch, relay: bool, backend: str) -> None:
    """Five devices retrieve as one batch (a thread or process backend of 2 evaluates them in two
    ranges, the process backend's tasks in its workers);
    device 4 drops out after its retrieval, device 3 uploads but is left out of the aggregate
    (bounded: it sends no proof; unbounded: not included).  The bounded round's reconstructed
    aggregate equals the unbounded round's, and both the sum of the others' uploads, bit for bit
    -- the correction words' part folded at intake is taken out again for device 3.  The bound
    check (request, answer, decision) walks no key.  Mutations checked: not taking the folded part
    out for a device left out (the aggregate differs at its rows); the check's projections from a
    walk of the keys (A's, the walk count is not zero)."""
    users, kept = [0, 1, 2, 3, 4], [0, 1, 2]
    uploads = {u: _honest(u) for u in users[:4]}
    got = []
    for bound in (True, False):
        made = {"serial": None, "threads": ThreadBackend(2), "processes": ProcessBackend(2)}[backend]
        try:
            run = Run(_protocol(relay, bound=bound, backend=made))
            run.retrieve(users, _items)
            run.upload(uploads)
            if bound:
                run.prove(kept)
            with _no_walk(monkeypatch) as walks:
                rejected = run.check(users[:4])
            assert rejected == ({3} if bound else set()) and walks == []
            got.append(run.aggregate(kept))
        finally:
            if made is not None:
                made.close()
    exp_sparse, exp_dense = _expected(uploads, kept)
    for sparse, dense in got:
        np.testing.assert_array_equal(sparse, exp_sparse)
        np.testing.assert_array_equal(dense, exp_dense)


class SplitKeys(SecEmbUser):
    """Without relay: sends server 1 its key material with one byte of key 0's first correction
    word changed (server 0 gets the real one); it uploads although its retrieval fails its tags."""

    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> None:
        try:
            super().retrieval_result(reply0, reply1)
        except RetrievalTampered:
            self._tampered = False

    def _sending(self, messages: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        m0, m1 = messages
        at = FRAME_BYTES + KEY_HEADER_BYTES + 16 * self.config.slots  # after the roots: key 0's first CW seed
        return m0, m1[:at] + bytes([m1[at] ^ 4]) + m1[at + 1 :]


def test_a_device_that_sends_the_servers_different_key_material_gets_two_challenges_and_fails() -> None:
    """Without relay each server derives ``c_u`` from its own copy's digest: device 0 sends server 1
    other key material, so the servers hold different challenges for it (device 1, honest, one);
    server 0 gives device 0 its own, device 0 proves under it, and server 1 answers it zero field
    elements -- it fails the bound check, and the digests reject it anyway.  Mutation checked:
    deriving ``c_u`` without the digest (``_user_tails(users)``): the two servers' challenges for
    device 0 agree and the test fails."""
    run = Run(_protocol(False))
    run.retrieve([0], _items, SplitKeys)
    run.retrieve([1], _items)
    assert run.s0._pending[0].challenge != run.s1._pending[0].challenge
    assert run.s0._pending[1].challenge == run.s1._pending[1].challenge
    run.upload({0: _honest(0), 1: _honest(1)})
    run.prove([0, 1])
    d0, d1 = run.s0.upload_digests([0, 1]), run.s1.upload_digests([0, 1])
    assert d0 is not None and d1 is not None and set(digest_rejected(d0, d1)) == {0}
    answer = run.s1.bound_answer(run.s0.bound_request([0, 1]))
    params = run.s0._bounded(0)
    v1 = rangeproof.parse_verifier_messages(params, answer[len(answer) - 2 * params.verifier_bytes :], 2)
    assert not v1[0, : params.opened_length].any() and v1[1, : params.opened_length].any()
    assert run.s0.bound_rejected(answer) == {0}
