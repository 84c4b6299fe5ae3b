"""Session 31, helper R: red team of the claims of docs/security.md about verified uploads and bounded
payloads ("Bounded payloads: the check", "The check: a sketch of the leaves already walked, and the
digests", the threat table), each read against what the code enforces.

A claim that holds is a plain test that fails without the defence (the mutation it was checked
against, made by hand in a scratch run and reverted, is named in its docstring).  A claim the code
does not keep is ``xfail(strict=True)`` naming its finding (S31-Rn), or, where no code can keep it, a
plain test that pins the limit (its docstring says what the docs overstate).  Expected outcomes are
stated here (a device rejected or not, a message refused, the aggregate equal to the plaintext sum
of the honest uploads); where a test computes what a malicious device would, it uses only what that
device holds.

Not here: one device stacking several keys on one row (the bound holds per key, not per row): helper
A's, session 31.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from round_setup import deliver_upload

from secemb import fss
from secemb.errors import ProtocolError
from secemb.fss import field
from secemb.fss.sketch import device_inputs
from secemb.fss.keys import HEADER_BYTES as KEY_HEADER_BYTES
from secemb.fss.tree import leaf_groups, padded_leaves
from secemb.protocols.adversary import MaliciousUser
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.secemb.bounds import layout_bits
from secemb.protocols.secemb.sizes import DIGEST_BYTES, SIGMA_BYTES, rows_bytes
from secemb.protocols.wire import HEADER_BYTES as FRAME_BYTES
from secemb.server.verify import MAX_REJECTIONS
from secemb.sim.local import LocalPeer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
from deviation_helpers import USERS, in_process, play_round  # type: ignore[import-not-found]  # noqa: E402
from test_bounded_payloads import USERS as BOUND_USERS  # noqa: E402
from test_bounded_payloads import Round as BoundedRound  # noqa: E402

LAYOUTS = [("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)]
P = field.P
ITEMS, WIDTH, DENSE = 64, 2, 2


# -- S31-R1: the sketch's verdict is the device's to read before it uploads -----------------------------------

def _all_leaves(path: fss.PathKeys) -> np.ndarray:
    """Every key's leaf words over its whole padded domain (what the servers' walk sketches), uint64
    (K, mp, 2): the walk's groups copied out in order (row ``key * F + f`` holds leaves ``f 2^s ..``)."""
    groups = [leaves.copy() for _, _, leaves in leaf_groups(path)]
    return np.concatenate(groups).reshape(len(path), padded_leaves(path.params), 2)


def _paths(cfg: Any, relay: bool, m0: bytes, m1: bytes) -> tuple[fss.PathKeys, fss.PathKeys]:
    """Both parties' path keys as a device sent them: party 0's from its request to server 0, party
    1's -- the same shared part with its own roots -- from its request to server 1 (without relay its
    keys; with relay the roots that open the message)."""
    p0 = fss.DPFKeys.from_bytes(m0[FRAME_BYTES:]).path
    if relay:
        roots = np.frombuffer(m1[FRAME_BYTES : FRAME_BYTES + 16 * cfg.slots], "<u8").reshape(cfg.slots, 2)
    else:
        roots = fss.DPFKeys.from_bytes(m1[FRAME_BYTES : len(m1) - SIGMA_BYTES]).path.roots
    return p0, fss.PathKeys(p0.params, 1, roots.astype(np.uint64), p0.cw_seed, p0.cw_tl, p0.cw_tr)


def _sketch_passes(seed: bytes, p0: fss.PathKeys, p1: fss.PathKeys) -> bool:
    """What a device predicts from its own keys and its sketch seed ``c_u`` alone: whether every key's
    sketch ``x = sum over the positions where the two parties' leaf words differ of (r z, r^2 z, z)``
    (docs/security.md's formula; each position's term from the device's own
    :func:`~secemb.fss.sketch.device_inputs`) satisfies ``A^2 = B C`` mod p."""
    mp = padded_leaves(p0.params)
    l0, l1 = _all_leaves(p0), _all_leaves(p1)
    for k in range(len(p0)):
        at = np.flatnonzero(np.any(l0[k] != l1[k], axis=1))
        terms = device_inputs(seed, mp, at, np.ascontiguousarray(l0[k, at]), np.ascontiguousarray(l1[k, at]))
        a, b, c = (sum(int(v) for v in terms[:, j]) % P for j in range(3))
        if (a * a - b * c) % P:
            return False
    return True


class _VerifiedRound:
    """One verified round (sketch check, no bound) at two fresh servers; devices run by hand."""

    def __init__(self, layout: str, relay: bool) -> None:
        self.relay = relay
        self.proto = SecEmbProtocol(layout=layout, relay=relay, verify=True)
        self.cfg = self.proto.round_config(11, ITEMS, WIDTH, DENSE, 6)
        self.gen = np.random.default_rng(31)  # public test data only
        table = self.gen.integers(0, 1 << 20, (ITEMS, WIDTH)).astype(self.cfg.dtype)
        self.s0: Any = self.proto.make_server(0)
        self.s1: Any = self.proto.make_server(1)
        for s in (self.s0, self.s1):
            s.begin_round(self.cfg, table)
        self.expected = np.zeros((ITEMS, WIDTH), self.cfg.dtype)

    def retrieve(self, uid: int, user: SecEmbUser) -> tuple[np.ndarray, bytes, bytes]:
        """``user`` asks for three items and reads its replies: its slots and the requests it sent."""
        slots = place(self.cfg, self.gen.choice(ITEMS, 3, replace=False), self.gen).indices
        m0, m1 = user.retrieval_request(slots)
        if self.relay:
            assert self.s1.handle_retrieval(uid, m1) is None
            fwd = self.s0.handle_retrieval(uid, m0)
            user.retrieval_result(self.s0.complete_retrieval(uid, self.s1.relay_retrieval(uid, fwd)), None)
        else:
            user.retrieval_result(self.s0.handle_retrieval(uid, m0), self.s1.handle_retrieval(uid, m1))
        return slots, m0, m1

    def upload(self, uid: int, user: SecEmbUser, slots: np.ndarray, *, honest: bool) -> None:
        """``user`` uploads ``item + 1`` at each real slot; counted in :attr:`expected` if ``honest``."""
        rows = np.zeros((self.cfg.slots, WIDTH), self.cfg.dtype)
        real = slots >= 0
        rows[real] = (slots[real] + 1)[:, None].astype(self.cfg.dtype)
        deliver_upload(self.s0, self.s1, self.relay, uid, *user.upload(rows, np.zeros(DENSE, self.cfg.dtype)))
        if honest:
            np.add.at(self.expected, slots[real], rows[real])


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_s31_r1_a_two_point_device_reads_its_verdict_from_c_u_and_withholds_a_failing_try_at_no_cost(
        layout: str, relay: bool) -> None:
    """A limit the docs overstate (S31-R1).  docs/security.md ("The check" item 5, "Until session 29",
    "Known limits"): the sketch's 2^-58.4 a try is acceptable because "the device has no offline
    attack at all: each try costs a round, and 3 rejections close the door (MAX_REJECTIONS)".  Each try does cost a
    round (one ``c_u`` a round), but the door never counts a failed one: once its reply gives it
    ``c_u``, a device whose keys are fixed knows both parties' leaf words everywhere, ``k_u`` and
    every ``r_x``, so it computes its own sketch and reads the verdict before it uploads.

    Devices 0 and 1 are honest; devices 2 and 3 send ``two-points`` keys (the same bytes to both
    servers: the digests agree).  Each predicts from ``c_u`` and its own keys only; the honest
    devices predict a pass, the cheats a failure.  Device 2 uploads anyway: the servers reject it,
    as it predicted.  Device 3 withholds its upload, as a careful cheat would: it is a silent
    device, named nowhere (no rejection, so no strike at the node: ``LeaderNode._verified``
    counts only uploads that fail), and the aggregate is the honest devices' exactly.  So the door
    bounds nothing here: per round the chance stays about 2^-58.4, over unlimited rounds.
    Mutation: ``verify_rejected`` returning no user (the check off) -- the verdict no longer
    matches the prediction and the test fails."""
    rnd = _VerifiedRound(layout, relay)
    cheats = {uid: MaliciousUser(rnd.cfg, "two-points", relay=relay) for uid in (2, 3)}
    users: dict[int, SecEmbUser] = {0: SecEmbUser(rnd.cfg, relay=relay), 1: SecEmbUser(rnd.cfg, relay=relay), **cheats}
    slots, predicted = {}, {}
    for uid, user in users.items():
        slots[uid], m0, m1 = rnd.retrieve(uid, user)
        assert user._sketch_seed is not None  # c_u, from the reply: what the device proves under
        predicted[uid] = _sketch_passes(user._sketch_seed, *_paths(rnd.cfg, relay, m0, m1))
    assert predicted == {0: True, 1: True, 2: False, 3: False}
    for uid in (0, 1, 2):  # device 3 withholds: it read its failure
        rnd.upload(uid, users[uid], slots[uid], honest=uid < 2)
    uploaded = [0, 1, 2]
    d0, d1 = rnd.s0.upload_digests(uploaded), rnd.s1.upload_digests(uploaded)
    assert d0 == d1  # the same key bytes at both servers: only the sketch can tell
    failed = rnd.s0.verify_rejected(uploaded, rnd.s1.verify_answer(uploaded))
    assert failed == {u for u in uploaded if not predicted[u]} == {2}
    include = [0, 1]
    sparse, _ = rnd.s0.combine(rnd.s1.aggregate_share(include), include)
    np.testing.assert_array_equal(sparse, rnd.expected)
    with pytest.raises(ProtocolError):  # device 3 is no upload to judge: nothing to reject or count
        rnd.s0.upload_digests([3])


class _LastKeyTwoPoints(MaliciousUser):
    """A device whose last key (slot ``S - 1``: in the cuckoo layout the last bucket's, in the full
    layout the last slot's) has a bit of its last-level seed correction word flipped, the same bytes
    to both servers (with relay, server 1 committed to the altered shared part): a key with two
    points where the proof's gadget calls end."""

    def __init__(self, config: Any, *, relay: bool) -> None:
        super().__init__(config, "two-points", relay=relay)

    def _sending(self, messages: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        cfg, (m0, m1) = self.config, messages
        depth = fss.DPFKeys.from_bytes(m0[FRAME_BYTES:]).params.depth
        at = FRAME_BYTES + KEY_HEADER_BYTES + 16 * cfg.slots + 16 * ((cfg.slots - 1) * depth + depth - 1)
        m0 = m0[:at] + bytes([m0[at] ^ 2]) + m0[at + 1 :]
        if not self.relay:
            return m0, m1[:at] + bytes([m1[at] ^ 2]) + m1[at + 1 :]  # the same offset: the same key layout
        digest = hashlib.sha256(fss.DPFKeys.from_bytes(m0[FRAME_BYTES:]).shared_bytes()).digest()
        end = len(m1) - SIGMA_BYTES
        return m0, m1[: end - DIGEST_BYTES] + digest + m1[end:]


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_a_two_point_key_in_the_last_slot_fails_the_sketch(layout: str, relay: bool) -> None:
    """docs/security.md, "The check": every key's sketch enters the one proof (``M = ceil(K / c)``
    gadget calls of ``c`` keys, zero-padded).  The existing attacks alter key 0 or every key; here
    only key ``K - 1``, the last call's last real entry, is a two-point key.  Device 2 is rejected by
    the sketch alone (the digests agree), the honest devices pass and the aggregate is theirs.
    Mutation: the last key's sketch values zeroed at both ends (the servers' input shares,
    ``SecEmbServer._sketch_inputs``, and the device's ``device_inputs_many``, as an off-by-one in the
    gadget layout would drop it) -- the cheat then passes and the test fails."""
    rnd = _VerifiedRound(layout, relay)
    users: dict[int, SecEmbUser] = {0: SecEmbUser(rnd.cfg, relay=relay), 1: SecEmbUser(rnd.cfg, relay=relay),
                                    2: _LastKeyTwoPoints(rnd.cfg, relay=relay)}
    for uid, user in users.items():
        slots, m0, m1 = rnd.retrieve(uid, user)
        if uid == 2:  # the altered key is the last one, and it is not a point function
            p0, p1 = _paths(rnd.cfg, relay, m0, m1)
            l0, l1 = _all_leaves(p0), _all_leaves(p1)
            assert [int(np.any(l0[k] != l1[k], axis=1).sum()) for k in range(rnd.cfg.slots)] == \
                [1] * (rnd.cfg.slots - 1) + [2]
        rnd.upload(uid, user, slots, honest=uid < 2)
    uploaded = [0, 1, 2]
    assert rnd.s0.upload_digests(uploaded) == rnd.s1.upload_digests(uploaded)
    assert rnd.s0.verify_rejected(uploaded, rnd.s1.verify_answer(uploaded)) == {2}
    sparse, _ = rnd.s0.combine(rnd.s1.aggregate_share([0, 1]), [0, 1])
    np.testing.assert_array_equal(sparse, rnd.expected)


# -- S31-R2: the door's strikes go with any clear of the alarms, which a device can force ----------------------

def _alter_sketch_answer_for(monkeypatch: pytest.MonkeyPatch, victim: int) -> None:
    """Server 1's sketch answer reaches server 0 with one bit of ``victim``'s verifier message
    flipped: server 0 rejects ``victim`` as a device whose proof fails (a stand-in, at the node, for
    a device that cheats; the node counts the rejection alike)."""
    verify = LocalPeer.verify

    def altered(self: LocalPeer, round_id: int, include: list[int]) -> tuple[dict[int, bytes], bytes]:
        digests, got = verify(self, round_id, include)
        size = len(got) // len(set(include))
        at = sorted(set(include)).index(victim) * size  # the answer is in ascending order of user id
        return digests, got[:at] + bytes([got[at] ^ 1]) + got[at + 1 :]

    monkeypatch.setattr(LocalPeer, "verify", altered)


def test_s31_r2_a_device_with_strikes_forgives_them_by_a_false_report_that_forces_a_clear(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/security.md: "each try costs a round, and 3 rejections close the door"; docs/deployment.md:
    "A participating device can halt the deployment with a false ``retrieval_tampered`` report
    until the operator clears it".  Device ``a`` is rejected in two rounds (two strikes, one short of
    the door); in the third it reports a tampered retrieval that never happened; both servers halt,
    and the only way on is the operator's clear of the alarms.  Fixed (session 31, helper D): that
    clear -- and the clear of the non-halting ``device_rejected`` alarms with it -- keeps ``a``'s two
    strikes, and its next rejection closes the door; forgiving is the operator's own action
    (``clear_strikes``).  Checked against the code before the fix: the strikes were 2 before the
    clear and 0 after it, and ``a`` retrieved in the next round."""
    pair, servers = in_process()
    leader, follower = servers.nodes
    a = USERS[0]
    _alter_sketch_answer_for(monkeypatch, a)
    for _ in range(MAX_REJECTIONS - 1):
        _, out, _ = play_round(pair)
        assert (out["state"], out["rejected"]) == ("committed", [a]), out
    monkeypatch.undo()
    assert leader.rejections == {a: MAX_REJECTIONS - 1}
    r = int(leader.open_round(participants=USERS)["round_id"])
    for node in (leader, follower):  # the device tells both servers, as the SDK does
        node.device_alarm(a, {"kind": "retrieval_tampered", "round_id": r, "detail": "tags"})
    assert leader.status()["halted"] is True and follower.status()["halted"] is True
    assert leader.clear_alarms() == {"cleared": MAX_REJECTIONS}  # two device_rejected, one retrieval_tampered
    pair.clear1()
    assert not leader.status()["halted"] and leader.status()["alarms"] == []
    assert leader.rejections == {a: MAX_REJECTIONS - 1}
    assert leader.status()["strikes"] == {str(a): MAX_REJECTIONS - 1}
    _alter_sketch_answer_for(monkeypatch, a)  # one more rejection: the door closes
    _, out, _ = play_round(pair)
    monkeypatch.undo()
    assert (out["state"], out["rejected"]) == ("committed", [a]), out
    _, out, errors = play_round(pair)
    assert a not in out["included"] and "failed the servers' verification in 3 rounds" in str(errors[a]), errors
    assert leader.clear_strikes(a) == {"cleared": {str(a): MAX_REJECTIONS}} and leader.rejections == {}
    _, out, errors = play_round(pair)
    assert a in out["included"] and not errors, (out, errors)


# -- bounded payloads: what holds -------------------------------------------------------------------------------

def _upload_batch(rnd: BoundedRound, uids: list[int], *, counted: bool = True) -> None:
    """Devices ``uids`` upload their honest rows as one batch at each server (with relay, server 0's
    forwards as one batch to server 1): one challenge for the batch; counted in the expected aggregate
    if ``counted``."""
    sent = {u: rnd.users[u].upload(*rnd.honest_upload(u)) for u in uids}
    if rnd.relay:
        fwds = rnd.s0.handle_upload_many([(u, sent[u][0]) for u in uids])
        assert rnd.s1.relay_upload_many(list(zip(uids, fwds, strict=True))) == [None] * len(uids)
    else:
        assert rnd.s1.handle_upload_many([(u, sent[u][1]) for u in uids]) == [None] * len(uids)
        assert rnd.s0.handle_upload_many([(u, sent[u][0]) for u in uids]) == [None] * len(uids)
    if not counted:
        return
    for u in uids:
        rows, dense = rnd.honest_upload(u)
        real = rnd.slots[u] >= 0
        np.add.at(rnd.expected, rnd.slots[u][real], rows[real])
        rnd.expected_dense += dense


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_each_batch_gets_a_challenge_drawn_after_it_and_an_earlier_batchs_is_no_use(layout: str, relay: bool) -> None:
    """docs/security.md: server 0 draws a challenge "for each batch of uploads it absorbs (after they
    are absorbed)".  Before its upload a device has no challenge and no proof is kept for it; devices
    0-1 upload as one batch (one challenge), device 2 and device 3 each in a later one (each its own).
    Device 3 colludes with device 0: it proves its upload under the challenge of the earlier batch
    (known to device 0 before device 3 uploaded); rejected at close, the others exact.  Mutation: one
    challenge drawn per round (in ``begin_round``, handed to every batch) -- devices 0 and 2 then share
    a challenge and the test fails.  In the full layout (session 31, helper P) the challenge is each
    device's own, derived by both servers at retrieval and given only after the upload: devices 0
    and 1 get different ones, and device 3's proof under device 0's is rejected the same way."""
    rnd = BoundedRound(layout, relay)
    for u in range(4):
        rnd.retrieve(u)
    with pytest.raises(ProtocolError):  # no upload, no challenge
        rnd.s0.challenge(0)
    _upload_batch(rnd, [0, 1])
    early = rnd.users[0].bound_proof(rnd.s0.challenge(0))
    with pytest.raises(ProtocolError, match="without an upload"):  # a proof of a device that has not uploaded
        rnd.s0.handle_proof(2, early)
    rnd.s0.handle_proof(0, early)
    _upload_batch(rnd, [2])
    _upload_batch(rnd, [3], counted=False)
    c = {u: rnd.s0.challenge(u) for u in range(4)}
    if layout == "full":  # derived per device at retrieval (session 31, helper P): each its own
        assert len(set(c.values())) == 4
    else:
        assert c[0] == c[1] and len({c[0], c[2], c[3]}) == 3
    for u in (1, 2):
        rnd.prove(u)
    rnd.s0.handle_proof(3, rnd.users[3].bound_proof(c[0]))  # kept (well formed); bound to the wrong challenge
    rnd.close_exact({3})


def _shift_last_dense0(rnd: BoundedRound, shift: int) -> Any:
    """A tamper of an upload to server 0: its last dense word plus ``shift`` (mod 2^32)."""
    def tamper(message: bytes) -> bytes:
        at = FRAME_BYTES + rows_bytes(rnd.cfg) + 4 * (rnd.cfg.dense_size - 1)
        word = (int.from_bytes(message[at : at + 4], "little") + shift) % (1 << 32)
        return message[:at] + word.to_bytes(4, "little") + message[at + 4 :]
    return tamper


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_the_bound_covers_the_last_key_s_last_word_and_the_last_dense_word(layout: str, relay: bool) -> None:
    """The threat table: "every coordinate of its payloads and dense gradient is proven below
    ``2^t``" -- at the edges of ``x = S || d``.  Device 4 uploads ``2^(t+1)`` in the last word of its
    last key (in the cuckoo layout an empty bucket's, which a malicious device may fill: its software
    is its own) and device 5 a server-0 share of the last dense word ``2^31`` too large; each proves
    its honest upload.  Both are rejected; the rest is exact.  Mutation: the projection rows' entries
    at those two coordinates (``L - 1`` and ``L - 1 - P``) zeroed in ``secemb.fss.projections``'
    streams, the device's and the servers' alike (honest devices still pass) -- both cheats then
    pass and the test fails.  (Written before session 31's stacking fix; since it, the full
    layout's ``x`` is per table row, so the last key's word is coordinate ``items[-1] w + w - 1``
    there, where that mutation applies; ``t`` is the layout's, :func:`layout_bits`.)"""
    rnd = BoundedRound(layout, relay)
    t = layout_bits(32, BOUND_USERS, layout=layout)
    rnd.honest(range(4))
    user = rnd.retrieve(4)
    rows, dense = rnd.honest_upload(4)
    big = rows.copy()
    big[-1, -1] = (int(big[-1, -1]) + (1 << (t + 1))) % (1 << 32)
    assert user._items is not None
    user._items[-1] = max(int(user._items[-1]), 0)  # an empty slot's row is refused by the honest role only
    rnd.upload(4, big, dense, honest=False)
    assert user._kept is not None
    user._kept = dataclasses.replace(user._kept, rows=rows)  # it proves its honest rows
    rnd.prove(4)
    rnd.retrieve(5)
    rnd.upload(5, *rnd.honest_upload(5), honest=False, tamper0=_shift_last_dense0(rnd, 1 << 31))
    rnd.prove(5)
    rnd.close_exact({4, 5})


class _PaddingPoint(SecEmbUser):
    """A bounded device whose key of one empty bucket (one smaller than the largest) has its one
    point at that bucket's first padding position (``sizes[b]``, inside the key's domain ``[0, M)``)
    in place of point 0: :attr:`padded` names the slot (``None``: no such bucket among its empty
    ones)."""

    padded: int | None = None

    def _alphas(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        alphas, placed = super()._alphas(slots)
        layout = self.config.cuckoo()
        sizes = np.diff(layout.indptr)
        empty = [int(b) for b in np.flatnonzero(slots[0] < 0) if sizes[b] < layout.bucket_size]
        if empty:
            self.padded = empty[0]
            alphas = alphas.copy()
            alphas[0, self.padded] = sizes[self.padded]
        return alphas, placed


@pytest.mark.parametrize("relay", [False, True])
def test_a_point_on_a_buckets_padding_counts_in_neither_the_bound_nor_the_aggregate(relay: bool) -> None:
    """docs/security.md (and ``fused.payload_sums_of``): positions past a bucket's size "count in
    neither" the payload sums nor the aggregate.  Device 4's key of an empty bucket ``b`` puts its one
    point on ``b``'s first padding position and carries ``2^30`` in every word there (a one-point key:
    the sketch passes); it proves its upload with that key's payload 0 -- what the servers' sums hold
    -- and passes the bound.  Included, its ``2^30`` must land nowhere: the aggregate is exactly the
    honest rows (its own real rows among them) and dense vectors.  Mutation: the walk's live mask one
    position wider (``fused._bucket_rows``), so the padding point is converted into the payload sums
    (and folded) -- the device's proof then fails and the test fails."""
    rnd = BoundedRound("cuckoo", relay)
    rnd.honest(range(4))
    user = _PaddingPoint(rnd.cfg, relay=relay, bound_users=BOUND_USERS)
    rnd.retrieve(4, user)
    b = user.padded
    assert b is not None and user._items is not None
    rows, dense = rnd.honest_upload(4)
    big = rows.copy()
    big[b] = 1 << 30
    user._items[b] = 0  # its own role refuses a filled empty slot; its software is its own
    rnd.upload(4, big, dense)  # counted as honest: its real rows and dense (slot b is not real)
    assert user._kept is not None
    user._kept = dataclasses.replace(user._kept, rows=rows)  # the key's payload as the servers' sums hold it: 0
    rnd.prove(4)
    uploaded = sorted(rnd.users)
    assert rnd.s0.verify_rejected(uploaded, rnd.s1.verify_answer(uploaded)) == set()  # one point: the sketch passes
    rnd.close_exact(set())
