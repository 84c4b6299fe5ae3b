"""Session 29, red team R: the sketch check (issue 34 (a)) from the adversary's side.

A malicious device (keys that are not point functions at any slot, empty-bucket slots included;
proofs or bindings replayed, altered, for another round or another device's seed; malformed proof
shares; retrieving twice to change its roots once it knows ``c_u``), a deviating server (a
forged, replayed, mismatched or malformed verifier answer; asking twice) and hostile inputs to the
kernels.  Every expected outcome is stated here, not computed by the code under test: a device
is rejected or not, a message refused with :class:`InvalidMessage` / :class:`ProtocolError`, the
aggregate is the plaintext sum of the honest rows.

How each test was checked to fail without its defence is said in its docstring (hand mutations,
reverted)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from round_setup import deliver_upload

from secemb import fss
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, SecembError
from secemb.fss import field, sketchproof
from secemb.fss.sketch import SketchCheck, expand
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.secemb.checks import binding
from secemb.protocols.secemb.sizes import DIGEST_BYTES, SIGMA_BYTES, sketch_params
from secemb.protocols.wire import HEADER_BYTES as FRAME_BYTES
from secemb.server.verify import decode_verification

LAYOUTS = [("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)]
P = field.P
ITEMS, WIDTH, DENSE = 64, 2, 2


class Round:
    """One verified round at two fresh servers holding a fresh sketch key (from a fresh peer key);
    devices run by hand."""

    def __init__(self, layout: str, relay: bool, *, round_id: int = 7, m_prime: int = 6) -> None:
        self.relay = relay
        self.proto = SecEmbProtocol(layout=layout, relay=relay, verify=True)
        self.cfg = self.proto.round_config(round_id, ITEMS, WIDTH, DENSE, m_prime)
        self.gen = np.random.default_rng(round_id)  # public test data only
        self.table = self.gen.integers(0, 1 << 20, (ITEMS, WIDTH)).astype(self.cfg.dtype)
        key = secrets.token_bytes(32)
        # relay roles have the relay steps (SecEmbServer's subclass): typed loosely
        self.s0: Any = self.proto.make_server(0, peer_key=key)
        self.s1: Any = self.proto.make_server(1, peer_key=key)
        for s in (self.s0, self.s1):
            s.begin_round(self.cfg, self.table)
        self.expected = np.zeros((ITEMS, WIDTH), self.cfg.dtype)

    def request(self, uid: int, *, items: int = 3) -> tuple[SecEmbUser, np.ndarray, bytes, bytes]:
        """A new device's retrieval request (``items`` rated items): the user, its slots, r0, r1."""
        user = SecEmbUser(self.cfg, relay=self.relay, verify=True)
        slots = place(self.cfg, self.gen.choice(ITEMS, items, replace=False), self.gen).indices
        r0, r1 = user.retrieval_request(slots)
        return user, slots, r0, r1

    def retrieve(self, uid: int, user: SecEmbUser, r0: bytes, r1: bytes) -> tuple[bytes, bytes | None]:
        """Send the requests; the replies (relay: server 0's after the relay, and None)."""
        if self.relay:
            assert self.s1.handle_retrieval(uid, r1) is None
            fwd = self.s0.handle_retrieval(uid, r0)
            assert fwd is not None
            return self.s0.complete_retrieval(uid, self.s1.relay_retrieval(uid, fwd)), None
        a0, a1 = self.s0.handle_retrieval(uid, r0), self.s1.handle_retrieval(uid, r1)
        assert a0 is not None and a1 is not None
        return a0, a1

    def rows(self, slots: np.ndarray) -> np.ndarray:
        """The device's payload rows: item id + 1 at real slots."""
        rows = np.zeros((self.cfg.slots, WIDTH), self.cfg.dtype)
        real = slots >= 0
        rows[real] = (slots[real] + 1)[:, None].astype(self.cfg.dtype)
        return rows

    def send_upload(self, uid: int, u0: bytes, u1: bytes | None) -> None:
        deliver_upload(self.s0, self.s1, self.relay, uid, u0, u1)

    def honest(self, uid: int) -> tuple[SecEmbUser, np.ndarray]:
        """An honest device through retrieval and upload; its rows count in :attr:`expected`."""
        user, slots, r0, r1 = self.request(uid)
        user.retrieval_result(*self.retrieve(uid, user, r0, r1))
        self.send_upload(uid, *user.upload(self.rows(slots), np.zeros(DENSE, self.cfg.dtype)))
        real = slots >= 0
        np.add.at(self.expected, slots[real], self.rows(slots)[real])
        return user, slots

    def close(self, uploaded: list[int]) -> tuple[set[int], set[int]]:
        """(users whose digests differ, users failing the sketch check) -- the two verdicts."""
        d0, d1 = self.s0.upload_digests(uploaded), self.s1.upload_digests(uploaded)
        assert d0 is not None and d1 is not None
        failed = self.s0.verify_rejected(uploaded, self.s1.verify_answer(uploaded))
        return {u for u in uploaded if d0[u] != d1[u]}, failed

    def aggregate(self, include: list[int]) -> np.ndarray:
        sparse, _ = self.s0.combine(self.s1.aggregate_share(include), include)
        return sparse


# -- a malicious device: keys that are not point functions ------------------------------------------------

def _edit_keys(msg: bytes, tail: int, edit: Callable[[fss.DPFKeys], None]) -> tuple[bytes, bytes]:
    """A request message whose keys (between the frame header and ``tail`` trailing bytes) are
    edited in place by ``edit``; also the SHA-256 of the edited keys' shared part."""
    end = len(msg) - tail
    keys = fss.DPFKeys.from_bytes(msg[FRAME_BYTES:end])
    edit(keys)
    return msg[:FRAME_BYTES] + keys.to_bytes() + msg[end:], hashlib.sha256(keys.shared_bytes()).digest()


def _corrupt(rnd: Round, r0: bytes, r1: bytes, edit: Callable[[fss.DPFKeys], None]) -> tuple[bytes, bytes]:
    """Both requests with the same edit of the shared key part (without relay, at both servers;
    with relay, server 0's keys and the digest server 1 checks the forward against), so that the
    digests agree and only the sketch check can catch it."""
    m0, digest = _edit_keys(r0, 0, edit)
    if rnd.relay:  # r1: roots, seeds, digest of the shared part, sigma
        end = len(r1) - SIGMA_BYTES
        return m0, r1[: end - DIGEST_BYTES] + digest + r1[end:]
    m1, _ = _edit_keys(r1, SIGMA_BYTES, edit)
    return m0, m1


def _seed_cw(key: int, level: int) -> Callable[[fss.DPFKeys], None]:
    def edit(keys: fss.DPFKeys) -> None:
        keys.path.cw_seed[key, level, 0] ^= np.uint64(1 << 9)
    return edit


def _control_cw(key: int, level: int, side: str) -> Callable[[fss.DPFKeys], None]:
    def edit(keys: fss.DPFKeys) -> None:
        cw = keys.path.cw_tl if side == "l" else keys.path.cw_tr
        cw[key, level] ^= 1
    return edit


def _cheat(rnd: Round, uid: int, edit_of: Callable[[np.ndarray, int], Callable[[fss.DPFKeys], None]]) -> None:
    """Device ``uid`` sends keys edited by ``edit_of(slots, depth)`` and then proves as an honest
    device would from its generation state (the single-point claim: the leaves it generated at
    its points satisfy ``A^2 = B C``); its rows are not counted."""
    user, slots, r0, r1 = rnd.request(uid)
    depth = fss.DPFKeys.from_bytes(r0[FRAME_BYTES:]).params.depth
    m0, m1 = _corrupt(rnd, r0, r1, edit_of(slots, depth))
    a0, a1 = rnd.retrieve(uid, user, m0, m1)
    try:
        user.retrieval_result(a0, a1)
    except SecembError:
        user._tampered = False  # the attacker uploads anyway
    rnd.send_upload(uid, *user.upload(rnd.rows(slots), np.zeros(DENSE, rnd.cfg.dtype)))


def _empty_slot(slots: np.ndarray) -> int:
    """An empty-bucket slot (cuckoo: point 0, payload 0); the full layout has none, there the last
    slot, a padding one (the device rates 3 items of 8 slots)."""
    empty = np.flatnonzero(slots < 0)
    return int(empty[0]) if empty.size else len(slots) - 1


#: key edits: (name, edit of (slots, depth)) -- a seed correction word at the last level (two
#: leaves differ) or the first (half the domain differs), a control-bit word at the last level (the
#: leaves differ in their control bit only), each on a real slot and on an empty (point 0, payload
#: 0) slot; the same at every key (many keys, many positions)
EDITS: list[tuple[str, Callable[[np.ndarray, int], Callable[[fss.DPFKeys], None]]]] = [
    ("seed-last-real", lambda s, d: _seed_cw(int(np.flatnonzero(s >= 0)[0]), d - 1)),
    ("seed-first-real", lambda s, d: _seed_cw(int(np.flatnonzero(s >= 0)[0]), 0)),
    ("control-last-real", lambda s, d: _control_cw(int(np.flatnonzero(s >= 0)[0]), d - 1, "l")),
    ("control-last-real-r", lambda s, d: _control_cw(int(np.flatnonzero(s >= 0)[0]), d - 1, "r")),
    ("seed-last-empty", lambda s, d: _seed_cw(_empty_slot(s), d - 1)),
    ("control-last-empty", lambda s, d: _control_cw(_empty_slot(s), d - 1, "r")),
    ("seed-first-empty", lambda s, d: _seed_cw(_empty_slot(s), 0)),
]


def _every_key(slots: np.ndarray, depth: int) -> Callable[[fss.DPFKeys], None]:
    def edit(keys: fss.DPFKeys) -> None:
        keys.path.cw_seed[:, depth - 1, 0] ^= np.uint64(1 << 9)
        keys.path.cw_tr[:, 0] ^= 1
    return edit


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
@pytest.mark.parametrize(("name", "edit_of"), EDITS + [("every-key", _every_key)],
                         ids=[n for n, _ in EDITS] + ["every-key"])
def test_keys_that_are_not_point_functions_fail_the_sketch_alone(layout: str, relay: bool, name: str,
                                                                 edit_of: Callable[..., Callable[[fss.DPFKeys],
                                                                                                 None]]) -> None:
    """A device whose keys differ at two or more positions -- at a real slot, at an empty-bucket
    slot (point 0, payload 0: a second point hidden there), in a control bit only, or at every
    key -- and that proves the single-point claim its generation state satisfies: the digests agree
    (the edit is the same at both servers), the sketch check alone rejects it, the honest devices
    pass and the aggregate is theirs.  Checked to fail (every case) with ``verify_rejected``
    returning the empty set, and with the decision accepting every proof."""
    rnd = Round(layout, relay, m_prime=8)
    rnd.honest(0)
    _cheat(rnd, 1, edit_of)
    rnd.honest(2)
    differ, failed = rnd.close([0, 1, 2])
    assert differ == set()
    assert failed == {1}
    np.testing.assert_array_equal(rnd.aggregate([0, 2]), rnd.expected)


# -- a malicious device: proofs and bindings -------------------------------------------------------------

class Forger(SecEmbUser):
    """A device whose ``(pi0, tau)`` are replaced by :attr:`forge` of the honest ones."""

    forge: Callable[[SecEmbUser, bytes, bytes], tuple[bytes, bytes]] = staticmethod(lambda u, p, t: (p, t))

    def _sketch_proof(self, state: fss.GenState) -> tuple[bytes, bytes]:
        pi0, tau = super()._sketch_proof(state)
        return type(self).forge(self, pi0, tau)


def _forged_round(layout: str, relay: bool, forge: Callable[[SecEmbUser, bytes, bytes], tuple[bytes, bytes]],
                  *, seed: Callable[[Round], bytes] | None = None) -> tuple[Round, set[int], set[int]]:
    """Honest devices 0 and 2, and device 1 a :class:`Forger` (``seed``: the sketch seed it uses
    instead of its reply's); the verdicts."""
    rnd = Round(layout, relay)
    rnd.honest(0)
    cls = type("F", (Forger,), {"forge": staticmethod(forge)})
    user = cls(rnd.cfg, relay=relay, verify=True)
    slots = place(rnd.cfg, rnd.gen.choice(ITEMS, 3, replace=False), rnd.gen).indices
    r0, r1 = user.retrieval_request(slots)
    user.retrieval_result(*rnd.retrieve(1, user, r0, r1))
    if seed is not None:
        user._sketch_seed = seed(rnd)
    rnd.send_upload(1, *user.upload(rnd.rows(slots), np.zeros(DENSE, rnd.cfg.dtype)))
    rnd.honest(2)
    differ, failed = rnd.close([0, 1, 2])
    return rnd, differ, failed


def _bump(pi0: bytes, at: int) -> bytes:
    """``pi0`` with element ``at`` plus one mod p (still canonical)."""
    e = int.from_bytes(pi0[8 * at : 8 * at + 8], "little")
    return pi0[: 8 * at] + ((e + 1) % P).to_bytes(8, "little") + pi0[8 * at + 8 :]


FORGERIES: list[tuple[str, Callable[[SecEmbUser, bytes, bytes], tuple[bytes, bytes]]]] = [
    ("pi0-first-element", lambda u, p, t: (_bump(p, 0), t)),
    ("pi0-last-element", lambda u, p, t: (_bump(p, len(p) // 8 - 1), t)),
    ("pi0-zero", lambda u, p, t: (bytes(len(p)), t)),
    ("tau-other-round", lambda u, p, t: (p, binding(u.config.round_id + 1, u._sketch_seed or b"", u._sigma or b""))),
    ("tau-other-sigma", lambda u, p, t: (p, binding(u.config.round_id, u._sketch_seed or b"", bytes(SIGMA_BYTES)))),
    ("tau-zero", lambda u, p, t: (p, bytes(32))),
]


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", False), ("cuckoo", True), ("full", False)])
@pytest.mark.parametrize(("name", "forge"), FORGERIES, ids=[n for n, _ in FORGERIES])
def test_an_altered_proof_share_or_binding_fails_that_device_only(layout: str, relay: bool, name: str,
                                                                  forge: Callable[..., tuple[bytes, bytes]]) -> None:
    """A canonical but altered ``pi0`` (tau matching: the decision rejects it) or a binding for
    another round / another sigma / zeros (server 1 refuses to answer): the device fails, the
    others pass.  Checked to fail with ``verify_rejected`` ignoring the refused flags (the tau cases)
    and with ``decide`` returning all True (the pi0 cases)."""
    _, differ, failed = _forged_round(layout, relay, forge)
    assert differ == set()
    assert failed == {1}


@pytest.mark.parametrize("relay", [False, True])
def test_a_proof_under_another_devices_seed_fails(relay: bool) -> None:
    """A device that proves (and binds) under another device's ``c_u`` -- colluding devices
    sharing their seeds, or a device uploading without having read its own reply (a seed it made
    up) -- fails: server 1 binds the device's own seed.  Checked to fail with server 1 binding the
    device's tau unchecked (``bound`` all True)."""
    _, differ, failed = _forged_round("cuckoo", relay, lambda u, p, t: (p, t), seed=lambda rnd: secrets.token_bytes(16))
    assert failed == {1}
    assert differ == set()


def test_a_device_cannot_upload_before_reading_its_reply() -> None:
    """The device's own role refuses to upload without ``c_u`` (it cannot prove without it)."""
    rnd = Round("cuckoo", False)
    user, slots, r0, r1 = rnd.request(0)
    rnd.retrieve(0, user, r0, r1)
    with pytest.raises(ProtocolError, match="before the retrieval's reply"):
        user.upload(rnd.rows(slots), np.zeros(DENSE, rnd.cfg.dtype))


@pytest.mark.parametrize("relay", [False, True])
def test_replaying_another_devices_proof_share_or_binding_fails(relay: bool) -> None:
    """Device 1 uploads device 0's ``pi0`` (or, without relay, its ``tau``): it fails; device 0,
    whose messages were only copied, still passes.  Checked to fail with ``decide`` returning all
    True (the pi0 case) and with the binding check skipped (the tau case)."""
    rnd = Round("cuckoo", relay)
    honest, slots0, r0, r1 = rnd.request(0)
    honest.retrieval_result(*rnd.retrieve(0, honest, r0, r1))
    m0, m1 = honest.upload(rnd.rows(slots0), np.zeros(DENSE, rnd.cfg.dtype))
    rnd.send_upload(0, m0, m1)
    np.add.at(rnd.expected, slots0[slots0 >= 0], rnd.rows(slots0)[slots0 >= 0])
    proof_bytes = sketch_params(rnd.cfg).proof_bytes
    theirs_pi0 = m0[len(m0) - proof_bytes :]
    theirs_tau = m1[len(m1) - 32 :] if m1 is not None else None
    attacks = [lambda u, p, t: (theirs_pi0, t)]
    if theirs_tau is not None:
        attacks.append(lambda u, p, t: (p, theirs_tau))
    for i, forge in enumerate(attacks):
        cls = type("F", (Forger,), {"forge": staticmethod(forge)})
        uid = 10 + i
        user = cls(rnd.cfg, relay=relay, verify=True)
        slots = place(rnd.cfg, rnd.gen.choice(ITEMS, 3, replace=False), rnd.gen).indices
        q0, q1 = user.retrieval_request(slots)
        user.retrieval_result(*rnd.retrieve(uid, user, q0, q1))
        rnd.send_upload(uid, *user.upload(rnd.rows(slots), np.zeros(DENSE, rnd.cfg.dtype)))
    uploaded = [0] + [10 + i for i in range(len(attacks))]
    differ, failed = rnd.close(uploaded)
    assert differ == set()
    assert failed == set(uploaded[1:])
    np.testing.assert_array_equal(rnd.aggregate([0]), rnd.expected)


# -- malformed proof shares: refused at intake, no state changed ----------------------------------------

@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_malformed_proof_shares_are_refused_and_change_nothing(layout: str, relay: bool) -> None:
    """``pi0`` with an element equal to ``p``, ``2^64 - 1`` (all 0xff, the refused marker's bytes),
    ``p + 1``; an upload a byte short or long: server 0 refuses each with InvalidMessage; the same
    device then uploads its honest message, which is absorbed and passes.  Checked to fail with
    the intake's ``check_message`` removed (the non-canonical cases are then absorbed)."""
    rnd = Round(layout, relay)
    user, slots, r0, r1 = rnd.request(0)
    user.retrieval_result(*rnd.retrieve(0, user, r0, r1))
    m0, m1 = user.upload(rnd.rows(slots), np.zeros(DENSE, rnd.cfg.dtype))
    proof_bytes = sketch_params(rnd.cfg).proof_bytes
    at = len(m0) - proof_bytes
    bad = [m0[:at] + b"\xff" * proof_bytes, m0[:-1], m0 + b"\0"]
    for element in (P, P + 1, 2**64 - 1):
        for k in (0, proof_bytes // 8 - 1):
            bad.append(m0[: at + 8 * k] + element.to_bytes(8, "little") + m0[at + 8 * k + 8 :])
    for msg in bad:
        with pytest.raises(InvalidMessage):
            rnd.s0.handle_upload(0, msg)
    rnd.send_upload(0, m0, m1)
    np.add.at(rnd.expected, slots[slots >= 0], rnd.rows(slots)[slots >= 0])
    assert rnd.close([0]) == (set(), set())
    np.testing.assert_array_equal(rnd.aggregate([0]), rnd.expected)


# -- retrieving twice: changing the roots once c_u is known ---------------------------------------------

@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_a_second_retrieval_to_change_the_keys_after_learning_c_u_is_refused(layout: str, relay: bool) -> None:
    """A device that learned ``c_u`` (its reply) retrieves again with new keys -- with relay,
    new roots to server 1 or a new request to server 0; without relay, to either server: each is
    refused (ProtocolError) and changes nothing -- the first request's upload passes.  Checked to
    fail with the servers' ``already retrieved`` check removed."""
    rnd = Round(layout, relay)
    user, slots, r0, r1 = rnd.request(0)
    user.retrieval_result(*rnd.retrieve(0, user, r0, r1))
    _, _, n0, n1 = rnd.request(0)
    with pytest.raises(ProtocolError):
        rnd.s1.handle_retrieval(0, n1)
    with pytest.raises(ProtocolError):
        rnd.s0.handle_retrieval(0, n0)
    rnd.send_upload(0, *user.upload(rnd.rows(slots), np.zeros(DENSE, rnd.cfg.dtype)))
    assert rnd.close([0]) == (set(), set())


def test_relay_c_u_is_not_released_before_server_1_holds_the_roots() -> None:
    """Relay: a device that sends server 0 its request first and server 1 its roots only after
    seeing ``c_u`` -- server 1 does not answer a forward for a device whose roots it does not hold,
    so server 0 cannot complete the retrieval and ``c_u`` is not released; the refusal changes
    nothing (the device's retrieval then completes in order and passes)."""
    rnd = Round("cuckoo", True)
    user, slots, r0, r1 = rnd.request(0)
    fwd = rnd.s0.handle_retrieval(0, r0)
    assert fwd is not None
    with pytest.raises(SecembError):
        rnd.s1.relay_retrieval(0, fwd)
    # the device learned nothing; once server 1 holds its roots the retrieval completes and passes
    assert rnd.s1.handle_retrieval(0, r1) is None
    user.retrieval_result(rnd.s0.complete_retrieval(0, rnd.s1.relay_retrieval(0, fwd)), None)
    rnd.send_upload(0, *user.upload(rnd.rows(slots), np.zeros(DENSE, rnd.cfg.dtype)))
    assert rnd.close([0]) == (set(), set())


# -- a deviating server -----------------------------------------------------------------------------------

@pytest.mark.parametrize("relay", [False, True])
def test_server_1_cannot_make_a_cheating_device_pass_with_an_honest_devices_message(relay: bool) -> None:
    """Server 1 answers for a cheating device (device 1: a two-point key) with the verifier message
    of an honest device (device 0), or the one it gave for it in another answer: the cheater still
    fails (server 1 cannot compute the message that cancels server 0's).  Checked to fail with
    ``decide`` returning all True."""
    rnd = Round("cuckoo", relay)
    rnd.honest(0)
    _cheat(rnd, 1, lambda s, d: _seed_cw(int(np.flatnonzero(s >= 0)[0]), d - 1))
    answer = rnd.s1.verify_answer([0, 1])
    n = len(answer) // 2
    assert rnd.s0.verify_rejected([0, 1], answer) == {1}
    assert rnd.s0.verify_rejected([0, 1], answer[:n] + answer[:n]) == {1}
    # both roles read the answer in ascending order of user id, whatever the caller's order (lead,
    # after R's observation: an unsorted list had failed every device); swapped messages fail both
    assert rnd.s0.verify_rejected([1, 0], answer) == {1}
    assert rnd.s0.verify_rejected([0, 1], answer[n:] + answer[:n]) == {0, 1}


def test_asking_again_or_for_another_user_set_gives_the_same_messages() -> None:
    """Server 1's verifier message for a device is a function of the round secret and the device
    (the query seed is derived, not drawn): asked for other user sets or again, the same bytes --
    server 0 gets no second query on any proof.  Checked to fail with the query seed drawn with
    ``secrets`` at each answer."""
    rnd = Round("cuckoo", False)
    for u in (0, 1, 2):
        rnd.honest(u)
    full = rnd.s1.verify_answer([0, 1, 2])
    n = len(full) // 3
    assert rnd.s1.verify_answer([2]) == full[2 * n :]
    assert rnd.s1.verify_answer([2, 0]) == full[:n] + full[2 * n :]  # ascending order of user id
    assert rnd.s1.verify_answer([2, 2, 0]) == full[:n] + full[2 * n :]
    assert rnd.s1.verify_answer([0, 1, 2]) == full


def test_a_mixed_refused_marker_is_not_a_refusal_nor_a_pass() -> None:
    """A verifier message whose first element is ``2^64 - 1`` and the rest field elements is
    neither the refused marker nor a message: InvalidMessage (not a device silently failed or
    passed).  Same for the marker on one element short."""
    rnd = Round("cuckoo", False)
    for u in (0, 1):
        rnd.honest(u)
    answer = rnd.s1.verify_answer([0, 1])
    n = len(answer) // 2
    for bad in (b"\xff" * 8 + answer[8:], answer[:n] + b"\xff" * (n - 8) + answer[-8:]):
        with pytest.raises(InvalidMessage):
            rnd.s0.verify_rejected([0, 1], bad)
    assert rnd.s0.verify_rejected([0, 1], answer) == set()


@pytest.mark.parametrize("doc", [
    {"digests": {"0": "ab" * 32}, "sketch": "AB"},
    {"digests": {"0": "ab" * 32}, "sketch": "zz"},
    {"digests": {"0": "ab" * 32}, "sketch": "abc"},
    {"digests": {"0": "ab" * 32}, "sketch": 12},
    {"digests": {"0": "ab" * 32}, "sketch": None},
    {"digests": {"0": "ab" * 32}},
    {"digests": {"0": "ab" * 32}, "sketch": ["ab"]},
    {"digests": {"0": "ab" * 32}, "sketch": "ab\n"},
    {"digests": {"0": "ab" * 32}, "sketch": " ab"},
    {"digests": {"0": "AB" * 32}, "sketch": "ab"},
    {"digests": {"1": "ab" * 32}, "sketch": "ab"},
    [],
])
def test_server_1s_verification_json_is_checked(doc: object) -> None:
    """Uppercase, non-hex, odd-length, non-string or missing sketch answers (and the digests' own
    checks) are InvalidMessage at server 0 -- the round aborts cleanly, no traceback."""
    with pytest.raises(InvalidMessage):
        decode_verification(doc, [0])


# -- robustness: hostile inputs to the kernels ----------------------------------------------------------

@pytest.mark.parametrize("seeds", [[b""], [b"\0" * 15], [b"\0" * 17], [b"\0" * 16, b"\0" * 32]])
def test_expand_refuses_seeds_of_another_length(seeds: list[bytes]) -> None:
    with pytest.raises(InvalidParameters):
        expand(seeds, 8)


def test_expand_takes_any_16_byte_seed() -> None:
    """All-0xff and zero seeds expand to coefficients below p (what the kernels read unchecked)."""
    ex = expand([b"\xff" * 16, bytes(16)], 64)
    assert ex.r.shape == (2, 64) and int(ex.r.max()) < P and int(ex.r2.max()) < P


@pytest.mark.parametrize("leaves", [
    np.full((1, 4, 2), 2**64 - 1, np.uint64),  # every bit set
    np.zeros((1, 4, 2), np.uint64),
])
def test_sketch_add_on_edge_leaves_stays_in_the_field(leaves: np.ndarray) -> None:
    """Hostile leaf words (all ones, zeros) give values below p, equal to the Python-int sum."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    ex = expand([b"\x01" * 16], 4)
    check = SketchCheck(ex, 1)
    check.add(0, 1, leaves)
    key = bytes(ex.keys[0])
    values = check.values[0]
    assert int(values.max()) < P
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    zs = []
    for x in range(4):
        w = int(leaves[0, x, 0]).to_bytes(8, "little") + int(leaves[0, x, 1]).to_bytes(8, "little")
        h = bytes(a ^ b for a, b in zip(enc.update(w), w, strict=True))
        zs.append(int.from_bytes(h, "little") % P)
    r = [int(v) for v in ex.r[0]]
    pairs = list(zip(r, zs, strict=True))
    want = (sum(a * z for a, z in pairs) % P, sum(a * a * z for a, z in pairs) % P, sum(zs) % P)
    assert tuple(int(v) for v in values) == want


@pytest.mark.parametrize("bad", [
    np.zeros((1, 4, 2), np.uint32),
    np.zeros((1, 4, 2), np.dtype(">u8")),
    np.zeros((1, 8, 2), np.uint64),  # wider than the domain
    np.zeros((2, 4, 2), np.uint64),  # rows beyond the keys' walk
    np.zeros((1, 4, 3), np.uint64),
    np.zeros((4, 2), np.uint64),
])
def test_sketch_add_refuses_hostile_leaf_arrays(bad: np.ndarray) -> None:
    check = SketchCheck(expand([b"\x02" * 16], 4), 1)
    with pytest.raises(InvalidParameters):
        check.add(0, bad.shape[0] if bad.ndim == 3 else 1, bad)
    assert not check.values.any()  # nothing folded in


def test_verifier_kernels_refuse_hostile_shares() -> None:
    """Proof shares or inputs not below p, or of the wrong shape, are refused before any kernel
    reads them (InvalidParameters), and server 1's shares of any 16-byte sigma are field elements."""
    params = sketchproof.SketchParams(7)
    n = 2
    x = np.zeros((n, 7, 3), np.uint64)
    good = np.zeros((n, params.proof_length), np.uint64)
    seeds, queries = [b"\x03" * 16] * n, [b"\x04" * 16] * n
    sketchproof.verifier_messages(params, x, good, seeds, queries)
    for proofs in (good + np.uint64(P), good[:, :-1], good.astype(np.uint32)):
        with pytest.raises(InvalidParameters):
            sketchproof.verifier_messages(params, x, proofs, seeds, queries)
    with pytest.raises(InvalidParameters):
        sketchproof.verifier_messages(params, x + np.uint64(P), good, seeds, queries)
    shares = sketchproof.server1_shares(params, [b"\xff" * 16, bytes(16)])
    assert shares.shape == (2, params.proof_length) and int(shares.max()) < P


def test_expand_refuses_seeds_that_are_not_bytes() -> None:
    """The contract says a seed that is not 16 bytes is InvalidParameters; a str of 16
    characters is not bytes.  S29-R1, fixed (helper A): ``_check_seeds`` checks the type."""
    with pytest.raises(InvalidParameters):
        expand(["a" * 16], 8)  # type: ignore[list-item]
