"""Bounded payloads at SecEmb's protocol roles (issue 34 (b); secemb/protocols/secemb/bounds.py):
after its upload a device proves that the projections of its payloads and dense gradient are
small; server 0 and server 1 check the proofs and leave out every device that fails or sends
none, and the aggregate over the others is exact.

The rounds are driven by hand (no engine).  Expected aggregates are computed here from the
plaintext rows and dense vectors the honest devices upload, not by the code under test."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest
from round_setup import deliver_upload

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.framing import HEADER_BYTES
from secemb.fss import rangeproof
from secemb.protocols.adversary import MaliciousUser
from secemb.protocols.backends import Backend, ThreadBackend
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer, SecEmbUser
from secemb.protocols.secemb.bounds import CLIP_MARGIN, bound_bits, bound_params, clip_norm, clip_upload, layout_bits
from secemb.protocols.secemb.sizes import NAME, rows_bytes
from secemb.protocols.wire import frame
from secemb.randomness import CtrDrbg
from secemb.ring import FixedPoint

LAYOUTS = [("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)]
USERS = 20
M, W, P = 120, 3, 5


class Round:
    """One bounded round of ``USERS`` users: both servers, the devices (by id) and the aggregate
    the honest ones make."""

    def __init__(self, layout: str, relay: bool, backend: Backend | None = None) -> None:
        self.proto = SecEmbProtocol(layout=layout, relay=relay, bound=True, users_per_round=USERS, backend=backend)
        self.relay = relay
        self.cfg = self.proto.round_config(4, num_items=M, width=W, dense_size=P, m_prime=5)
        self.gen = np.random.default_rng(3)  # public test data only
        table = self.gen.integers(0, 1 << 20, (M, W)).astype(np.uint32)
        self.s0, self.s1 = self.proto.make_server(0), self.proto.make_server(1)
        assert isinstance(self.s0, SecEmbServer) and isinstance(self.s1, SecEmbServer)
        for s in (self.s0, self.s1):
            s.begin_round(self.cfg, table)
        self.users: dict[int, SecEmbUser] = {}
        self.slots: dict[int, np.ndarray] = {}
        self.expected = np.zeros((M, W), np.uint32)
        self.expected_dense = np.zeros(P, np.uint32)

    def retrieve(self, uid: int, user: SecEmbUser | None = None) -> SecEmbUser:
        """Device ``uid`` (an honest one unless given) retrieves its rows."""
        user = user or self.proto.make_user(self.cfg, _rng=CtrDrbg(b"bounded/%d" % uid))
        slots = place(self.cfg, self.gen.choice(M, 4, replace=False), self.gen).indices
        r0, r1 = user.retrieval_request(slots)
        if self.relay:
            assert self.s1.handle_retrieval(uid, r1) is None
            fwd = self.s0.handle_retrieval(uid, r0)
            assert fwd is not None
            user.retrieval_result(self.s0.complete_retrieval(uid, self.s1.relay_retrieval(uid, fwd)), None)
        else:
            a0, a1 = self.s0.handle_retrieval(uid, r0), self.s1.handle_retrieval(uid, r1)
            assert a0 is not None and a1 is not None
            user.retrieval_result(a0, a1)
        self.users[uid], self.slots[uid] = user, slots
        return user

    def retrieve_batch(self, uids: list[int]) -> None:
        """Honest devices ``uids`` retrieve as one batch at each server (evaluated together)."""
        users = [self.proto.make_user(self.cfg, _rng=CtrDrbg(b"bounded/%d" % uid)) for uid in uids]
        slots = [place(self.cfg, self.gen.choice(M, 4, replace=False), self.gen).indices for _ in uids]
        reqs = [u.retrieval_request(x) for u, x in zip(users, slots, strict=True)]
        if self.relay:
            direct = self.s1.handle_retrieval_many([(u, r[1]) for u, r in zip(uids, reqs, strict=True)])
            assert direct == [None] * len(uids)
            fwd = self.s0.handle_retrieval_many([(u, r[0]) for u, r in zip(uids, reqs, strict=True)])
            answers = self.s1.relay_retrieval_many(list(zip(uids, fwd, strict=True)))
            replies = self.s0.complete_retrieval_many(list(zip(uids, answers, strict=True)))
            for user, reply in zip(users, replies, strict=True):
                user.retrieval_result(reply, None)
        else:
            a0 = self.s0.handle_retrieval_many([(u, r[0]) for u, r in zip(uids, reqs, strict=True)])
            a1 = self.s1.handle_retrieval_many([(u, r[1]) for u, r in zip(uids, reqs, strict=True)])
            for user, x, y in zip(users, a0, a1, strict=True):
                user.retrieval_result(x, y)
        self.users.update(zip(uids, users, strict=True))
        self.slots.update(zip(uids, slots, strict=True))

    def honest_upload(self, uid: int) -> tuple[np.ndarray, np.ndarray]:
        """Device ``uid``'s honest rows (small signed values at real slots, zero at empty ones)
        and dense vector, as ring words."""
        real = self.slots[uid] >= 0
        rows = np.zeros((self.cfg.slots, W), np.int64)
        rows[real] = np.arange(real.sum() * W).reshape(-1, W) * (1 if uid % 2 else -1) + uid
        dense = np.arange(P, dtype=np.int64) - 2 * uid
        return rows.astype(np.uint32), dense.astype(np.uint32)

    def upload(self, uid: int, rows: np.ndarray, dense: np.ndarray, honest: bool = True,
               tamper0: Callable[[bytes], bytes] | None = None) -> None:
        """Device ``uid`` uploads ``rows`` and ``dense`` (its upload to server 0 replaced by
        ``tamper0`` if given); counted in the expected aggregate if ``honest``."""
        u0, u1 = self.users[uid].upload(rows, dense)
        deliver_upload(self.s0, self.s1, self.relay, uid, u0 if tamper0 is None else tamper0(u0), u1)
        if honest:
            real = self.slots[uid] >= 0
            np.add.at(self.expected, self.slots[uid][real], rows[real])
            self.expected_dense += dense

    def prove(self, uid: int) -> None:
        """Device ``uid`` proves for its challenge and server 0 keeps the proof."""
        self.s0.handle_proof(uid, self.users[uid].bound_proof(self.s0.challenge(uid)))

    def close(self) -> tuple[set[int], np.ndarray, np.ndarray]:
        """The bound check and the digests over every uploaded device: the rejected ids and the
        aggregate over the rest."""
        uploaded = sorted(self.users)
        rejected = self.s0.bound_rejected(self.s1.bound_answer(self.s0.bound_request(uploaded)))
        d0, d1 = self.s0.upload_digests(uploaded), self.s1.upload_digests(uploaded)
        assert d0 is not None and d1 is not None
        assert all(d0[u] == d1[u] for u in uploaded)  # what the bound check alone must catch here
        include = [u for u in uploaded if u not in rejected]
        sparse, dense = self.s0.combine(self.s1.aggregate_share(include), include)
        return rejected, sparse, dense

    def close_exact(self, rejected: set[int]) -> None:
        """:meth:`close` rejects exactly ``rejected`` and aggregates the honest uploads exactly."""
        got, sparse, dense = self.close()
        assert got == rejected
        np.testing.assert_array_equal(sparse, self.expected)
        np.testing.assert_array_equal(dense, self.expected_dense)

    def honest(self, uids: range | list[int]) -> None:
        for uid in uids:
            self.retrieve(uid)
            self.upload(uid, *self.honest_upload(uid))
            self.prove(uid)


def _shift_dense0(cfg_rows: int, shift: int) -> Callable[[bytes], bytes]:
    """A tamper of an upload to server 0: its first dense word plus ``shift`` (mod 2^32)."""
    def tamper(message: bytes) -> bytes:
        at = HEADER_BYTES + cfg_rows
        word = (int.from_bytes(message[at : at + 4], "little") + shift) % (1 << 32)
        return message[:at] + word.to_bytes(4, "little") + message[at + 4 :]
    return tamper


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_honest_devices_pass_and_the_aggregate_is_exact(layout: str, relay: bool) -> None:
    rnd = Round(layout, relay)
    rnd.honest(range(USERS))
    rnd.close_exact(set())


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_what_the_retrieval_walk_keeps_projects_as_a_walk_of_the_keys_does(layout: str, relay: bool) -> None:
    """Each server's projections from what its retrieval's walk kept (one batch, tasks over three
    threads) equal those from a walk of the absorbed keys at verification -- the path of a backend
    whose walk keeps none (gpu), which this CPU test reaches by dropping what was kept -- and that
    path passes too.  Cuckoo layout: the payload sums (ranges of buckets).  Full layout (session 31,
    helper P): the projections under each device's derived challenge, of its folded part from the
    walk device by device and of the correction words' part and dense share from its intake
    (mutation: the intake's dense share left out fails the comparison)."""
    kept_field = "sums" if layout == "cuckoo" else "projected"
    rnd = Round(layout, relay, ThreadBackend(3))
    users = list(range(7))
    rnd.retrieve_batch(users)
    for uid in users:
        rnd.upload(uid, *rnd.honest_upload(uid))
        rnd.prove(uid)
    challenges = [rnd.s0.challenge(u) for u in users]
    for server in (rnd.s0, rnd.s1):
        assert all(getattr(server._absorbed[u], kept_field) is not None for u in users)
        kept = server._bound_projections(users, challenges)
        for u in users:
            server._absorbed[u] = dataclasses.replace(server._absorbed[u], **{kept_field: None})
        np.testing.assert_array_equal(server._bound_projections(users, challenges), kept)
    rnd.close_exact(set())


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_oversized_payload_and_dense_share_are_rejected(layout: str, relay: bool) -> None:
    """Device 17 uploads a row coordinate of 2^(t+1) (its aggregation correction words encode
    it) and device 18 a server-0 dense share 2^31 too large; each proves its honest upload
    (a lie about what the servers hold).  Device 19 uploads 2^(t+1) and proves what it sent:
    the honest prover refuses, so it sends no proof.  All three are left out, the rest exact."""
    rnd = Round(layout, relay)
    t = bound_params(rnd.cfg, USERS).bits
    rnd.honest(range(17))
    for uid in (17, 19):
        user = rnd.retrieve(uid)
        rows, dense = rnd.honest_upload(uid)
        big = rows.copy()
        big[int(np.flatnonzero(rnd.slots[uid] >= 0)[0]), 1] += np.uint32(1 << (t + 1))
        rnd.upload(uid, big, dense, honest=False)
        if uid == 17:
            assert user._kept is not None
            user._kept = dataclasses.replace(user._kept, rows=rows)  # proves the honest rows
            rnd.prove(uid)
        else:
            with pytest.raises(InvalidParameters, match="outside"):
                user.bound_proof(rnd.s0.challenge(uid))
    rnd.retrieve(18)
    rnd.upload(18, *rnd.honest_upload(18), honest=False, tamper0=_shift_dense0(rows_bytes(rnd.cfg), 1 << 31))
    rnd.prove(18)
    rnd.close_exact({17, 18, 19})


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
@pytest.mark.parametrize("attack", ["oversized-payload", "wrapped-dense"])
def test_payload_attacks_are_rejected_with_bound(layout: str, relay: bool, attack: str) -> None:
    """The adversaries that pass without the bound (test_malicious_device) are rejected with it:
    they cannot prove their real upload, so they prove the one they would have sent honestly --
    a proof the servers keep and their check rejects."""
    rnd = Round(layout, relay)
    rnd.honest(range(4))
    for uid in (4, 5):
        bad = MaliciousUser(rnd.cfg, attack, relay=relay, bound_users=USERS, _rng=CtrDrbg(b"bad/%d" % uid))
        rnd.retrieve(uid, bad)
        rnd.upload(uid, *rnd.honest_upload(uid), honest=False)
        rnd.prove(uid)  # kept: its message is well formed
    assert rnd.s0.unproved(sorted(rnd.users)) == set()
    rnd.close_exact({4, 5})


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", False), ("full", True)])
def test_no_proof_another_challenge_and_bad_proof_messages(layout: str, relay: bool) -> None:
    """No proof, a proof for another challenge: rejected.  A truncated proof, one of another
    round, one with a field element not below p, a second proof, a proof of a user that did
    not upload: refused, nothing kept (a refused device then counts as one without a proof)."""
    rnd = Round(layout, relay)
    rnd.honest(range(3))
    for uid in (3, 4, 5, 6):
        rnd.retrieve(uid)
        rnd.upload(uid, *rnd.honest_upload(uid), honest=False)
    # 3: no proof.  4: a proof for another challenge
    other = bytes(16) if rnd.s0.challenge(4) != bytes(16) else b"\x01" * 16
    assert rnd.s0.handle_proof_many([(4, rnd.users[4].bound_proof(other))]) == [None]
    # 5: truncated, then (another round, an element >= p) built from its honest proof
    good = rnd.users[5].bound_proof(rnd.s0.challenge(5))
    elem = HEADER_BYTES + rangeproof.SEED_BYTES + rangeproof.PART_BYTES
    bad_elem = good[:elem] + (2**64 - 1).to_bytes(8, "little") + good[elem + 8 :]
    other_round = frame(NAME, "bound_proof", 0, rnd.cfg.round_id + 1, good[HEADER_BYTES:])
    assert frame(NAME, "bound_proof", 0, rnd.cfg.round_id, good[HEADER_BYTES:]) == good
    for message in (good[:-1], bad_elem, other_round):
        with pytest.raises(InvalidMessage):
            rnd.s0.handle_proof(5, message)
    # 6: a good proof, then a second one (refused), and a proof of a user that never uploaded
    proof6 = rnd.users[6].bound_proof(rnd.s0.challenge(6))
    got = rnd.s0.handle_proof_many([(6, proof6), (6, proof6), (99, proof6)])
    assert got[0] is None and isinstance(got[1], ProtocolError) and isinstance(got[2], ProtocolError)
    with pytest.raises(ProtocolError):
        rnd.s0.handle_proof(6, proof6)
    with pytest.raises(ProtocolError):
        rnd.users[6].bound_proof(rnd.s0.challenge(6))  # once a round
    rejected, sparse, dense = rnd.close()
    assert rejected == {3, 4, 5}
    rnd.expected_dense += rnd.honest_upload(6)[1]
    real = rnd.slots[6] >= 0
    np.add.at(rnd.expected, rnd.slots[6][real], rnd.honest_upload(6)[0][real])
    np.testing.assert_array_equal(sparse, rnd.expected)
    np.testing.assert_array_equal(dense, rnd.expected_dense)


def test_server_steps_are_refused_out_of_order() -> None:
    """Server 1 answers each user once (a second query could open the proof at more points),
    refuses users it did not absorb and malformed requests; the steps are each server's own."""
    rnd = Round("full", False)
    rnd.honest(range(2))
    request = rnd.s0.bound_request([0, 1])
    body = request[HEADER_BYTES:]
    twice = frame(NAME, "bound_request", 1, rnd.cfg.round_id, body[:16 + 88], body[16 : 16 + 88])
    for bad in (request[:-1], request + b"\0", twice):
        with pytest.raises(InvalidMessage):
            rnd.s1.bound_answer(bad)
    with pytest.raises(ProtocolError):
        rnd.s0.bound_request([0, 7])  # 7 never uploaded
    with pytest.raises(ProtocolError):
        rnd.s1.bound_request([0])
    with pytest.raises(ProtocolError):
        rnd.s0.bound_answer(request)
    with pytest.raises(ProtocolError):
        rnd.s1.challenge(0)
    answer = rnd.s1.bound_answer(request)
    with pytest.raises(ProtocolError, match="already"):
        rnd.s1.bound_answer(request)
    with pytest.raises(InvalidMessage):
        rnd.s0.bound_rejected(answer[:-8])
    assert rnd.s0.bound_rejected(answer) == set()
    with pytest.raises(ProtocolError):
        rnd.s0.bound_rejected(answer)  # no request pending


def test_the_bound_adds_nothing_to_the_requests() -> None:
    """With the same randomness the requests are the same with and without the bound: the one to
    server 1 ends with the 16-byte seed sigma either way (verified uploads: the sketch proof's share
    seed, which the range proof's expands from too, in a stream of its own); the protocol's sizes say
    so, and without verified uploads there is no sigma."""
    proto = SecEmbProtocol(layout="cuckoo")
    bounded = SecEmbProtocol(layout="cuckoo", bound=True, users_per_round=USERS)
    unverified = SecEmbProtocol(layout="cuckoo", verify=False)
    cfg = proto.round_config(2, num_items=M, width=W, dense_size=P, m_prime=5)
    slots = place(cfg, np.arange(4), np.random.default_rng(0)).indices
    plain0, plain1 = proto.make_user(cfg, _rng=CtrDrbg(1)).retrieval_request(slots)
    b0, b1 = bounded.make_user(cfg, _rng=CtrDrbg(1)).retrieval_request(slots)
    u0, u1 = unverified.make_user(cfg, _rng=CtrDrbg(1)).retrieval_request(slots)
    assert (b0, b1) == (plain0, plain1)
    assert b0 == u0 and len(b1) == len(u1) + 16 and b1[HEADER_BYTES:-16] == u1[HEADER_BYTES:]
    for party, message in ((0, b0), (1, b1)):
        assert bounded.message_body_bytes("retrieval_request", cfg, party=party, num_users=1) == \
            len(message) - HEADER_BYTES


def test_parameters_and_refusals() -> None:
    """t and C2 against hand values; the option needs verified uploads, users and the 32-bit ring."""
    # (2^31 - 1) / 20 = 107374182.35, log2 = 26.68; n = 1: 2^31 - 1, log2 just below 31
    assert bound_bits(32, 20) == 26 and bound_bits(32, 1) == 30 and bound_bits(32, 100) == 24
    # the layout's values a row (session 31): full 1 (t as above), cuckoo 3: (2^31 - 1) / 60 =
    # 35791394.1, log2 = 25.09; / 300 = 7158278.8, log2 = 22.77
    assert layout_bits(32, 20, layout="full") == 26 and layout_bits(32, 100, layout="full") == 24
    assert layout_bits(32, 20, layout="cuckoo") == 25 and layout_bits(32, 100, layout="cuckoo") == 22
    with pytest.raises(InvalidParameters, match="cuckoo layout"):
        layout_bits(32, 1 << 28, layout="cuckoo")  # (2^31 - 1) // (3 2^28) = 2: t = 1
    with pytest.raises(InvalidParameters):
        bound_bits(32, 1 << 29)  # (2^31 - 1) // 2^29 = 3: t = 1
    with pytest.raises(InvalidParameters):
        bound_bits(32, 0)
    fp = FixedPoint(32, 16)
    assert CLIP_MARGIN == math.sqrt(40.5)
    assert clip_norm(fp, 20, layout="full") == 2.0**25 / (math.sqrt(40.5) * 2.0**16)
    assert clip_norm(fp, 20, layout="cuckoo") == 2.0**24 / (math.sqrt(40.5) * 2.0**16)
    rows, dense = np.full((2, 3), 100.0), np.full(4, 100.0)  # norm 100 sqrt(10) > 512 / sqrt(40.5)
    r, d = clip_upload(fp, 20, rows, dense, layout="full")
    assert math.isclose(math.sqrt(float(np.sum(r**2) + np.sum(d**2))), 512 / math.sqrt(40.5), rel_tol=1e-12)
    small = np.full((2, 3), 0.5)
    np.testing.assert_array_equal(clip_upload(fp, 20, small, dense[:0], layout="cuckoo")[0], small)  # unchanged
    with pytest.raises(InvalidParameters):
        SecEmbProtocol(bound=True, users_per_round=20, verify=False)
    with pytest.raises(InvalidParameters):
        SecEmbProtocol(bound=True)
    proto = SecEmbProtocol(bound=True, users_per_round=20)
    cfg64 = proto.round_config(1, num_items=M, width=W, dense_size=P, m_prime=5, ring_bits=64)
    with pytest.raises(InvalidParameters, match="32-bit"):
        proto.make_user(cfg64)
    with pytest.raises(InvalidParameters, match="32-bit"):
        proto.make_server(0).begin_round(cfg64, np.zeros((M, W), np.uint64))
    cfg = proto.round_config(1, num_items=M, width=W, dense_size=P, m_prime=5)
    plain = SecEmbProtocol().make_user(cfg)
    with pytest.raises(ProtocolError, match="off"):
        plain.bound_proof(bytes(16))
    user = proto.make_user(cfg)
    with pytest.raises(ProtocolError):
        user.bound_proof(bytes(16))  # no upload yet
    with pytest.raises(InvalidParameters):
        user.bound_proof(bytes(15))
