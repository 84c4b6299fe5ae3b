"""Malicious devices against SecEmb's protocol roles (issue 34): the servers compare per-device
digests (:meth:`SecEmbServer.upload_digests`) and check each device's sketch proof
(:meth:`SecEmbServer.verify_answer`, :meth:`SecEmbServer.verify_rejected`) before a device enters
the aggregate; a device whose keys are not point functions, or whose two servers got different
keys, is rejected and the aggregate over the others is exact.

Expected aggregates are computed here from the plaintext rows the honest devices upload, not
by the code under test."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from secemb.data import synthetic_like, train_test_split
from secemb.errors import InvalidMessage, RelayTampered
from secemb.fss import kernels
from secemb.fss.sketch import SketchCheck, expand
from secemb.protocols.adversary import ATTACKS, AdversaryRecord, MaliciousUser, attack_behavior
from secemb.protocols.base import RoundConfig
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer, SecEmbUser
from secemb.randomness import CtrDrbg
from secemb.models import MatrixFactorization
from secemb.training import Experiment, TrainConfig
from secemb.training.loop import train

LAYOUTS = [("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)]
#: attacks the verification (or the parsers) must catch; the payload-bound attacks are not caught
CAUGHT = ("two-points", "inconsistent-keys", "random-bytes")


class Round:
    """One round: both servers, honest devices and malicious ones (by id)."""

    def __init__(self, layout: str, relay: bool, *, verify: bool = True, ring_bits: int = 32) -> None:
        self.proto = SecEmbProtocol(layout=layout, relay=relay, verify=verify)
        self.relay, self.verify = relay, verify
        self.cfg: RoundConfig = self.proto.round_config(5, num_items=200, width=4, dense_size=3, m_prime=6,
                                                        ring_bits=ring_bits)
        self.gen = np.random.default_rng(1)  # public test data only
        self.table = self.gen.integers(0, 1 << 20, (200, 4)).astype(self.cfg.dtype)
        self.servers: tuple[SecEmbServer, SecEmbServer] = (self.proto.make_server(0), self.proto.make_server(1))
        for s in self.servers:
            s.begin_round(self.cfg, self.table)
        self.expected = np.zeros((200, 4), self.cfg.dtype)
        self.expected_dense = np.zeros(3, self.cfg.dtype)
        self.refused: set[int] = set()  # devices a server refused outright (a parse error, a relay check)

    def device(self, uid: int, attack: str | None = None, *, wrong_seed: bool = False) -> None:
        """Run device ``uid`` through retrieval and upload (honest rows: item id + 1 in every
        column at real slots; dense: uid); ``wrong_seed``: the device proves under another sketch
        seed than the one its reply(ies) gave (one bit of ``c_u`` flipped after the reply's check;
        a server that alters the seed is caught at the device before, tests/review/test_session30_seed_tag.py)."""
        rng = CtrDrbg(b"device/%d" % uid)
        user = SecEmbUser(self.cfg, relay=self.relay, verify=self.verify, _rng=rng) if attack is None else \
            MaliciousUser(self.cfg, attack, relay=self.relay, verify=self.verify, _rng=rng)
        items = self.gen.choice(200, 4, replace=False)
        slots = place(self.cfg, items, self.gen).indices
        s0, s1 = self.servers
        r0, r1 = user.retrieval_request(slots)
        try:
            if self.relay:
                assert s1.handle_retrieval(uid, r1) is None
                fwd = s0.handle_retrieval(uid, r0)
                assert fwd is not None
                a0 = s0.complete_retrieval(uid, s1.relay_retrieval(uid, fwd))
                reply = user.retrieval_result(a0, None)
            else:
                a0, a1 = s0.handle_retrieval(uid, r0), s1.handle_retrieval(uid, r1)
                assert a0 is not None and a1 is not None
                reply = user.retrieval_result(a0, a1)
        except (InvalidMessage, RelayTampered):
            assert attack is not None, "an honest device was refused"
            self.refused.add(uid)
            return
        if wrong_seed:
            seed = user._sketch_seed
            assert seed is not None
            user._sketch_seed = bytes([seed[0] ^ 1]) + seed[1:]
        real = slots >= 0
        rows = np.zeros((self.cfg.slots, 4), self.cfg.dtype)
        rows[real] = (slots[real] + 1)[:, None].astype(self.cfg.dtype)
        assert reply.shape == rows.shape
        dense = np.full(3, uid, self.cfg.dtype)
        u0, u1 = user.upload(rows, dense)
        try:
            fwd = s0.handle_upload(uid, u0)
            if self.relay:
                assert fwd is not None
                s1.relay_upload(uid, fwd)
            else:
                assert u1 is not None
                s1.handle_upload(uid, u1)
        except (InvalidMessage, RelayTampered):
            assert attack is not None
            self.refused.add(uid)
            return
        if attack is None and not wrong_seed:
            np.add.at(self.expected, slots[real], rows[real])
            self.expected_dense += dense

    def close(self, uploaded: list[int]) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Compare the servers' digests and decide the sketch proofs, leave the failures out; the
        rejected ids and the reconstructed aggregate over the rest."""
        s0, s1 = self.servers
        d0, d1 = s0.upload_digests(uploaded), s1.upload_digests(uploaded)
        assert d0 is not None and d1 is not None
        failed = s0.verify_rejected(uploaded, s1.verify_answer(uploaded))
        rejected = sorted(u for u in uploaded if d0[u] != d1[u] or u in failed)
        include = [u for u in uploaded if u not in rejected]
        sparse, dense = s0.combine(s1.aggregate_share(include), include)
        return rejected, sparse, dense


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_a_device_proving_under_another_sketch_seed_fails_only_itself(layout: str, relay: bool) -> None:
    """A device that sketches and proves under another ``c_u`` than the servers' (one it chose)
    binds that seed in ``tau``, which does not match server 1's, which refuses to answer its proof,
    so it fails whatever its data, while the others pass and the aggregate is theirs.  (A server
    that alters the seed in a reply is caught earlier, at the device, by the other server's tag:
    tests/review/test_session30_seed_tag.py.)"""
    rnd = Round(layout, relay)
    for u in (0, 1, 2):
        rnd.device(u)
    rnd.device(5, wrong_seed=True)
    assert not rnd.refused
    s0, s1 = rnd.servers
    uploaded = [0, 1, 2, 5]
    answer = s1.verify_answer(uploaded)
    n = len(answer) // 4
    assert answer[3 * n :] == b"\xff" * n and b"\xff" * 8 not in answer[: 3 * n]  # refused: device 5 only
    assert s0.verify_rejected(uploaded, answer) == {5}
    rejected, sparse, dense = rnd.close(uploaded)
    assert rejected == [5]
    np.testing.assert_array_equal(sparse, rnd.expected)
    np.testing.assert_array_equal(dense, rnd.expected_dense)


@pytest.mark.parametrize("relay", [False, True])
def test_a_malformed_or_truncated_sketch_answer_is_refused(relay: bool) -> None:
    """Server 0 refuses server 1's sketch answer that is not one verifier message a user, or holds
    an element not below p that is not the refused marker (InvalidMessage, not a crash)."""
    rnd = Round("cuckoo", relay)
    for u in (0, 1):
        rnd.device(u)
    s0, s1 = rnd.servers
    answer = s1.verify_answer([0, 1])
    assert s0.verify_rejected([0, 1], answer) == set()
    bad = bytearray(answer)
    bad[:8] = (2**61 - 1).to_bytes(8, "little")  # p itself: not a field element
    for wrong in (answer[:-1], answer + b"\0" * 8, bytes(bad), b""):
        with pytest.raises(InvalidMessage, match="sketch verifier"):
            s0.verify_rejected([0, 1], wrong)


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
@pytest.mark.parametrize("attack", CAUGHT)
def test_attack_is_rejected_and_the_aggregate_is_the_honest_one(layout: str, relay: bool, attack: str) -> None:
    rnd = Round(layout, relay)
    honest, bad = [0, 1, 2], [7, 8]
    for u in honest:
        rnd.device(u)
    for u in bad:
        rnd.device(u, attack)
    uploaded = honest + [u for u in bad if u not in rnd.refused]
    rejected, sparse, dense = rnd.close(uploaded)
    assert set(rejected) | rnd.refused == set(bad)
    np.testing.assert_array_equal(sparse, rnd.expected)
    np.testing.assert_array_equal(dense, rnd.expected_dense)


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_honest_devices_pass_both_rings(layout: str, relay: bool) -> None:
    for ring_bits in (32, 64):
        rnd = Round(layout, relay, ring_bits=ring_bits)
        for u in range(4):
            rnd.device(u)
        rejected, sparse, dense = rnd.close(list(range(4)))
        assert rejected == [] and not rnd.refused
        np.testing.assert_array_equal(sparse, rnd.expected)
        np.testing.assert_array_equal(dense, rnd.expected_dense)


def test_digests_are_bound_to_the_key_and_the_upload() -> None:
    """Each of the digest's inputs matters: two honest devices' digests differ, and altering a
    correction word of the upload at one server only (an inconsistent upload) is caught."""
    rnd = Round("cuckoo", False)
    for u in range(2):
        rnd.device(u)
    d0 = rnd.servers[0].upload_digests([0, 1])
    assert d0 is not None and d0[0] != d0[1] and all(len(d) == 32 for d in d0.values())
    rnd.servers[1]._absorbed[1].cw[0, 0] += np.uint32(1)  # server 1 holds another correction word
    assert rnd.close([0, 1])[0] == [1]


def test_without_the_check_two_points_corrupts_the_aggregate() -> None:
    """The attack is real: with the check off (``verify=False``), the two-points device's
    upload lands on a second row of the aggregate."""
    rnd = Round("full", False, verify=False)
    rnd.device(0)
    rnd.device(9, "two-points")
    sparse, _ = rnd.servers[0].combine(rnd.servers[1].aggregate_share([0, 9]), [0, 9])
    honest_and_own = rnd.expected.copy()
    assert rnd.servers[0].upload_digests([0, 9]) is None
    assert np.count_nonzero(np.any(sparse != honest_and_own, axis=1)) > 6  # more rows than its 6 slots


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_check_values_equal_across_kernels(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sketch values come from the same leaves through the numpy reference and the compiled
    kernels alike: an honest device passes and a two-points device fails under both."""
    if backend == "numba" and not kernels.available():
        pytest.skip("no compiled kernels here")
    monkeypatch.setattr(kernels, "BACKEND", backend)
    rnd = Round("full", False)
    rnd.device(0)
    rnd.device(1, "two-points")
    assert rnd.close([0, 1])[0] == [1]


def test_attack_names() -> None:
    assert set(CAUGHT) < set(ATTACKS)


# ------------------------------------------------------------------- whole runs (in process)


def _run(layout: str, relay: bool, behavior: Callable[[int, int], str | None] | None,
         record: AdversaryRecord | None = None) -> str:
    """The model digest of a small synthetic run (one epoch of 6 rounds of 20 users: users 0-3
    take part in some of them under seed 3, which the test checks)."""
    exp = Experiment(dataset="synthetic", protocol="secemb", layout=layout, relay=relay, epochs=1,
                     users_per_round=20, rounds_per_epoch=6, m_prime=8, seed=3, dim=4)
    exp_run = exp.run(behavior=behavior, after_round=None if record is None else record.after_round)
    return exp_run.train_result.model_sha256


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_run_with_adversaries_equals_the_run_with_them_dropped(layout: str, relay: bool) -> None:
    """Every caught attack is left out in every round it is tried, and the model is bit for bit
    the model of the same run whose 4 devices drop out (retrieve, never upload)."""
    absent = _run(layout, relay, lambda _r, u: "drop" if u < 4 else None)
    for attack in CAUGHT:
        record = AdversaryRecord(attack, 4)
        assert _run(layout, relay, attack_behavior(attack, 4), record) == absent, attack
        tried = [r for r in record.rounds if r["rejected_devices"] or r["refused_devices"]]
        assert tried, attack  # the adversaries took part
        for r in record.rounds:
            assert r["malicious_included"] == [], (attack, r)
    honest = _run(layout, relay, None)
    assert honest != absent  # the 4 devices matter when they are honest


def test_payload_attacks_are_not_caught_without_bound() -> None:
    """Issue 34, item (b), the default configuration (``bound=False``): a device whose payload
    or dense share exceeds the clipping bound is NOT rejected (no bound check).  With the
    protocol option ``bound`` it is: tests/engine/test_bounded_engine.py."""
    record = AdversaryRecord("oversized-payload", 4)
    _run("cuckoo", True, attack_behavior("oversized-payload", 4), record)
    assert any(r["malicious_included"] for r in record.rounds)


@pytest.mark.parametrize("width", [1, 2, 8, 32])
def test_sketch_accumulation_kernel_equals_the_reference(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """:class:`SketchCheck` folds the same values through the compiled loop (its own AES, per
    device round keys) and the numpy reference, on arbitrary leaf words, several users, groups of
    rows that cut keys in the middle, and subtrees of 1 to 32 leaves."""
    if not kernels.available():
        pytest.skip("no compiled kernels here")
    gen = np.random.default_rng(7)
    keys, per_user, frontier = 6, 3, 4
    expanded = expand([bytes([u]) * 16 for u in range(keys // per_user)], frontier * width)
    leaves = gen.integers(0, 2**64 - 1, (keys * frontier, width, 2), np.uint64, True)
    got = {}
    for backend in ("numba", "numpy"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        check = SketchCheck(expanded, per_user)
        for r0 in range(0, keys * frontier, 5):  # groups that cut keys in the middle
            r1 = min(r0 + 5, keys * frontier)
            check.add(r0, r1, leaves[r0:r1])
        got[backend] = check.values
    np.testing.assert_array_equal(got["numba"], got["numpy"])
    assert np.all(got["numpy"] != 0)


def test_a_device_rejected_in_three_rounds_is_refused_at_the_door() -> None:
    """Server 0 counts each device's failed verifications; from the third on it refuses the
    device's retrieval (403) until the operator clears the alarms: device 0 attacks in each of
    4 epochs (every user takes part once per epoch) and is rejected 3 times, then refused."""
    data, _ = train_test_split(synthetic_like(30, 60, 600, seed=3), 0.2, seed=0)
    config = TrainConfig(epochs=4, users_per_round=15, seed=5, m_prime=8)  # 14 honest >= the floor of 10
    record = AdversaryRecord("two-points", 1)
    train(MatrixFactorization(dim=4, reg=0.01), SecEmbProtocol(layout="cuckoo", relay=True), data, None, config,
          behavior=attack_behavior("two-points", 1), after_round=record.after_round)
    seen = [r for r in record.rounds if r["rejected_devices"] or r["refused_devices"]]
    assert [r["rejected_devices"] for r in seen] == [[0], [0], [0], []]
    assert [r["refused_devices"] for r in seen] == [[], [], [], [0]]


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_server_1_refuses_exactly_the_devices_whose_tau_or_sigma_is_off(layout: str, relay: bool) -> None:
    """Session 34 (helper P2; server 1 compares the batch's bindings as arrays): a device whose tau
    differs from server 1's binding in its first or its last byte, whose tau is missing, or whose
    sigma server 1 lacks is refused (its message the refused marker), each alone; every other
    device's message is the one it had before (byte for byte), and server 0 rejects exactly them."""
    rnd = Round(layout, relay)
    users = [0, 1, 2, 3, 4, 5]
    for u in users:
        rnd.device(u)
    s0, s1 = rnd.servers
    before = s1.verify_answer(users)
    size = len(before) // len(users)
    assert s0.verify_rejected(users, before) == set()
    tau = s1._absorbed[1].sketch
    assert tau is not None and len(tau) == 32
    s1._absorbed[1].sketch = bytes([tau[0] ^ 1]) + tau[1:]
    tau = s1._absorbed[2].sketch
    assert tau is not None
    s1._absorbed[2].sketch = tau[:-1] + bytes([tau[-1] ^ 0x80])
    s1._absorbed[3].sketch = None
    del s1._sigmas[4]
    after = s1.verify_answer(users)
    for i, u in enumerate(users):
        row = after[i * size : (i + 1) * size]
        assert row == (b"\xff" * size if u in (1, 2, 3, 4) else before[i * size : (i + 1) * size]), u
    assert s0.verify_rejected(users, after) == {1, 2, 3, 4}
