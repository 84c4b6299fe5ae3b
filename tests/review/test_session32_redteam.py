"""Session 32, helper R: red team of session 31's new code -- the full layout's per-row bound and its
challenge derived per device at retrieval (helpers A and P), the strikes kept apart from the alarms
(helper D, the lead), the round document's ``previous`` (helper E) and the relay sub-keys (helper M).

A claim that holds is a plain test that fails without the defence (the mutation it was checked
against, made by hand in a scratch run and reverted, is named in its docstring).  A claim the code
does not keep is ``xfail(strict=True)`` naming its finding (S32-Rn).  Expected values are stated
here or computed from what the devices send, never by the function under test.  The round driver
(:class:`Run`) and the devices' items and uploads are helper P's
(``tests/review/test_session31_bound_derived.py``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from secemb.errors import ProtocolError
from secemb.fss import rangeproof
from secemb.fss.projections import ternary_rows
from secemb.protocols.secemb import SecEmbUser
from secemb.protocols.secemb.bounds import ROWS, layout_bits
from secemb.protocols.wire import HEADER_BYTES as FRAME_BYTES
from secemb.randomness import CtrDrbg
from secemb.server import faults
from secemb.server.node import LeaderNode
from secemb.server.persist import CorruptState
from secemb.server.verify import rejected as digest_rejected

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
import test_bounded_payloads as tbp  # type: ignore[import-not-found]  # noqa: E402
import test_session21_verify_journal as j21  # type: ignore[import-not-found]  # noqa: E402
from test_session19_engine_prove_order import _kernel_mod2  # type: ignore[import-not-found]  # noqa: E402
from test_session31_bound_derived import M, P, SLOTS, W, Run, _expected, _honest, _items, _protocol  # noqa: E402

RING = 1 << 32
HALF = 1 << 31


# -- 1. the full layout: what server 1 holds of an upload, after the device learned its c_u -------------

def test_after_its_challenge_a_device_moving_server_1s_words_in_the_rows_kernel_passes_the_bound_and_the_digests_reject_it() -> None:  # noqa: E501
    """Without relay a device uploads to each server itself, and server 0 gives it ``c_u`` once its
    upload to server 0 is absorbed -- possibly before it uploads to server 1 (docs/security.md, "The
    challenge is derived, per device": the dense commitment fixes ``d_1`` first).  What fixes server
    1's correction words then?  Device 3 uploads honestly to server 0, reads ``c_u``, and sends server
    1 its words with ``2^31`` added at a set ``Z`` of (key, column) positions chosen so that, under
    ``c_u``'s 40 rows, server 1's projections do not move: adding ``2^31`` to ``CW[i, k]`` changes
    server 1's share ``-(sum_i t_1[i, j] CW[i])`` by ``2^31 t_1[i, j]`` at every row ``j`` -- each
    projection by ``2^31`` times a parity -- and ``Z`` is a kernel vector over GF(2) of those 40
    parities (64 positions, 40 rows).  Its honest proof still passes (its projections are unchanged at
    both servers): the bound does not see the change.  The aggregate would: server 1's share moves by
    ``2^31`` on about half of the table's rows (the device knows ``t_1``, it made the keys).  What
    stops it is the upload digests, which cover each server's copy of the words: device 3 is rejected
    there, and the aggregate of the others is their sum, bit for bit (its intake-folded words taken
    out again).  Mutation checked: ``upload_digests`` without ``CW`` (non-relay) -- device 3 passes every
    check and the aggregate including it differs from the uploads' sum on about half the rows."""
    run = Run(_protocol(False))
    users, honest, attacker = [0, 1, 2, 3], [0, 1, 2], 3
    run.retrieve(users, _items)
    uploads = {u: _honest(u) for u in users}
    run.upload({u: uploads[u] for u in honest})
    m0, m1 = run.devices[attacker].upload(*uploads[attacker])
    assert m1 is not None and run.s0.handle_upload_many([(attacker, m0)]) == [None]
    c_u = run.s0.challenge(attacker)  # the device now knows its challenge; server 1 has no upload from it yet
    # t_b[i, j]: each server's control bits of the device's keys (what the device computed making them);
    # they differ exactly at each key's point (the DPF's defining property), checked here
    t0, t1 = (np.unpackbits(s._pending[attacker].bits if attacker in s._pending else s._absorbed[attacker].bits,
                            axis=1)[:, :M] for s in (run.s0, run.s1))
    assert np.array_equal(t0 ^ t1, np.eye(M, dtype=np.uint8)[_items(attacker)])
    rows = ternary_rows(c_u, ROWS, M * W + P)[:, : M * W].reshape(ROWS, M, W).astype(np.int64) % 2  # |r| mod 2
    # parity of projection rho under 2^31 added to CW[i, k]: sum_j |r[rho, j, k]| t_1[i, j] mod 2
    parity = np.einsum("rjk,ij->rik", rows, t1.astype(np.int64)).reshape(ROWS, SLOTS * W) % 2
    z = _kernel_mod2(parity.astype(np.int64)).reshape(SLOTS, W)  # session 19's GF(2) solver
    assert z.any() and not ((parity @ z.reshape(-1)) % 2).any()
    cw_at = FRAME_BYTES  # the server-1 upload body: the correction words first (ring (S, w), little-endian)
    cw = np.frombuffer(m1, "<u4", SLOTS * W, cw_at).reshape(SLOTS, W)
    moved = ((cw.astype(np.int64) + HALF * z) % RING).astype("<u4")
    assert run.s1.handle_upload_many([(attacker, m1[:cw_at] + moved.tobytes() + m1[cw_at + cw.nbytes :])]) == [None]
    run.prove(users)
    bound_out = run.s0.bound_rejected(run.s1.bound_answer(run.s0.bound_request(users)))
    assert bound_out == set(), "the kernel shift moved a projection (the crafting is wrong, not the defence)"
    d0, d1 = run.s0.upload_digests(users), run.s1.upload_digests(users)
    assert d0 is not None and d1 is not None
    assert set(digest_rejected(d0, d1)) == {attacker}
    assert not run.s0.verify_rejected(users, run.s1.verify_answer(users))  # its keys are point functions
    sparse, dense = run.aggregate(honest)
    exp_sparse, exp_dense = _expected(uploads, honest)
    np.testing.assert_array_equal(sparse, exp_sparse)
    np.testing.assert_array_equal(dense, exp_dense)
    # what the digests stop: with device 3 included, server 1's share is off by 2^31 wherever an odd
    # number of the moved words' keys have t_1 = 1 (computed here from the bits and Z)
    sparse, dense = run.aggregate(users)
    exp_sparse, exp_dense = _expected(uploads, users)
    flipped = (t1.T.astype(np.int64) @ z.astype(np.int64)) % 2  # (M, W)
    assert flipped.sum() > M * W // 8
    np.testing.assert_array_equal(sparse, ((exp_sparse.astype(np.int64) + HALF * flipped) % RING).astype(np.uint32))
    np.testing.assert_array_equal(dense, exp_dense)


def test_cuckoo_a_device_moving_server_1s_words_of_a_key_with_an_even_t_count_passes_the_bound_and_the_digests_reject_it() -> None:  # noqa: E501
    """The cuckoo layout's twin of the test above, without any algebra: its proven ``x`` holds each
    key's payload, server 1's share ``-(key_conv_1 + t_count_1 CW)``, so ``2^31`` added to ``CW[i, 0]``
    moves it by ``2^31 t_count_1[i]`` -- nothing when key ``i``'s count of ``t_1 = 1`` over its bucket's
    real positions is even.  Device 3 (without relay) uploads to server 0, reads its batch's challenge,
    and sends server 1 its words with ``2^31`` added at such a key: its honest proof passes the bound
    (``x`` did not move at either server), while the aggregate would get ``2^31`` at each real position
    of bucket ``i`` where ``t_1 = 1`` (an even number of items' rows, computed here from the bits and
    the layout's public ``gather_index``).  The digests reject it; the others' aggregate is exact.
    Mutation checked: ``upload_digests`` without ``CW`` (device 3 passes and the aggregate is off)."""
    rnd = tbp.Round("cuckoo", False)
    honest, attacker = [0, 1, 2], 3
    rnd.honest(honest)
    device = rnd.retrieve(attacker)
    rows, dense = rnd.honest_upload(attacker)
    m0, m1 = device.upload(rows, dense)
    assert m1 is not None and rnd.s0.handle_upload_many([(attacker, m0)]) == [None]
    rnd.s0.challenge(attacker)  # the device's batch challenge, read before its upload to server 1
    slots, width = rnd.cfg.slots, rnd.cfg.width
    real = rnd.cfg.cuckoo().gather_index >= 0  # (B, M): a bucket's positions holding an item
    t1 = rnd.s1._pending[attacker].bits.astype(bool) & real
    counts = t1.sum(axis=1)
    key = next(b for b in range(slots) if counts[b] and counts[b] % 2 == 0)
    cw = np.frombuffer(m1, "<u4", slots * width, FRAME_BYTES).reshape(slots, width).astype(np.int64)
    cw[key, 0] += HALF
    cw = (cw % RING).astype("<u4")
    assert rnd.s1.handle_upload_many([(attacker, m1[:FRAME_BYTES] + cw.tobytes() + m1[FRAME_BYTES + cw.nbytes :])]) \
        == [None]
    rnd.prove(attacker)
    users = honest + [attacker]
    assert rnd.s0.bound_rejected(rnd.s1.bound_answer(rnd.s0.bound_request(users))) == set()
    d0, d1 = rnd.s0.upload_digests(users), rnd.s1.upload_digests(users)
    assert d0 is not None and d1 is not None and set(digest_rejected(d0, d1)) == {attacker}
    sparse, dense_sum = rnd.s0.combine(rnd.s1.aggregate_share(honest), honest)
    np.testing.assert_array_equal(sparse, rnd.expected)
    np.testing.assert_array_equal(dense_sum, rnd.expected_dense)
    # what the digests stop: with device 3 included, 2^31 on the items at bucket ``key``'s t_1 = 1 positions
    expected = rnd.expected.astype(np.int64)
    placed = rnd.slots[attacker] >= 0
    np.add.at(expected, rnd.slots[attacker][placed], rows[placed].astype(np.int64))
    hit = rnd.cfg.cuckoo().gather_index[key][t1[key]]
    assert hit.size == counts[key] >= 2
    expected[hit, 0] += HALF
    sparse, _ = rnd.s0.combine(rnd.s1.aggregate_share(users), users)
    np.testing.assert_array_equal(sparse, (expected % RING).astype(np.uint32))


# -- 2. the full layout: c_u is fixed by the device's one retrieval and one upload ------------------------

@pytest.mark.parametrize("relay", [False, True])
def test_a_device_that_holds_its_c_u_can_neither_retrieve_nor_upload_again_in_the_round(relay: bool) -> None:
    """docs/security.md ("The challenge is derived, per device", Soundness): "A device cannot grind:
    its ``D`` fixes ``c_u``, and a second request or upload of the round is refused."  Device 0
    uploads and reads ``c_u``; then a second retrieval request of device 0 with other keys (another
    ``D``, so another ``c_u``) is refused at server 0 (and at server 1 without relay), as is a second
    upload (the same message, and a new one from a new retrieval's device); the challenge server 0
    gives is still the first, and the round ends with the first upload's sum.  Mutation checked:
    ``_check_new`` testing only ``_pending`` (not ``_uploaded``) -- the second request is taken."""
    run = Run(_protocol(relay))
    run.retrieve([0, 1], _items)
    uploads = {0: _honest(0), 1: _honest(1)}
    m0, m1 = run.devices[0].upload(*uploads[0])  # sent by hand, to be sent again below
    fwd = run.s0.handle_upload_many([(0, m0)])
    if relay:
        assert run.s1.relay_upload_many([(0, cast("bytes", fwd[0]))]) == [None]
    else:
        assert fwd == [None] and run.s1.handle_upload_many([(0, cast("bytes", m1))]) == [None]
    c_u = run.s0.challenge(0)
    again = SecEmbUser(run.cfg, relay=relay, verify=True, bound_users=20, _rng=CtrDrbg(b"s32-R/again"))
    req = again.retrieval_request((_items(0) + 1) % M)
    for server, message in [(run.s0, req[0])] + ([] if relay else [(run.s1, cast("bytes", req[1]))]):
        got = server.handle_retrieval_many([(0, message)])
        assert isinstance(got[0], ProtocolError) and "already retrieved" in str(got[0]), got
    got = run.s0.handle_upload_many([(0, m0)])
    assert isinstance(got[0], ProtocolError) and "already uploaded" in str(got[0]), got
    assert run.s0.challenge(0) == c_u == run.s0._absorbed[0].challenge == run.s1._absorbed[0].challenge
    run.upload({1: uploads[1]})
    run.prove([0, 1])
    assert not run.check([0, 1])
    sparse, dense = run.aggregate([0, 1])
    exp_sparse, exp_dense = _expected(uploads, [0, 1])
    np.testing.assert_array_equal(sparse, exp_sparse)
    np.testing.assert_array_equal(dense, exp_dense)


def test_a_server_0_that_gives_a_device_another_challenge_and_names_its_c_u_gets_nothing_from_server_1() -> None:
    """Helper P's test has server 0 give device 1 a challenge of its choosing and name that one: server
    1's derived-``c_u`` comparison answers zero.  The other way round -- server 0 gives the device ``c'``
    (its proof's ``part_1`` binds ``c'``) and names the device's true ``c_u`` in its check request -- passes
    that comparison, and only finding C1's check stands: server 1 recomputes ``part_1`` from ``sigma``
    under the named ``c_u``, it differs, and server 1 answers zero field elements (answered, its relation
    share would mix the device's projections under ``c'`` and ``c_u``).  The device fails, the others
    pass.  Mutation checked: ``bound_answer`` without the ``part_1`` comparison (server 1's answer for
    device 1 is then non-zero)."""
    run = Run(_protocol(False))
    users = [0, 1, 2]
    run.retrieve(users, _items)
    run.upload({u: _honest(u) for u in users})
    chosen = bytes(range(16))
    assert chosen != run.s0.challenge(1)
    proofs = [(u, run.devices[u].bound_proof(chosen if u == 1 else run.s0.challenge(u))) for u in users]
    assert run.s0.handle_proof_many(proofs) == [None] * len(users)
    answer = run.s1.bound_answer(run.s0.bound_request(users))  # names each device's own c_u
    params = run.s0._bounded(0)
    v1 = rangeproof.parse_verifier_messages(params, answer[len(answer) - len(users) * params.verifier_bytes :],
                                            len(users))
    assert not v1[1, : params.opened_length].any()
    assert v1[0, : params.opened_length].any() and v1[2, : params.opened_length].any()
    assert run.s0.bound_rejected(answer) == {1}


# -- 3. the full layout: a device absorbed at one server only ---------------------------------------------

def test_a_device_absorbed_at_one_server_only_leaves_neither_its_folded_words_nor_its_walk_in_the_aggregate() -> None:  # noqa: E501
    """Since session 31 (helper P) each server folds a device's correction words' part into its
    running aggregate at intake (``_Absorbed.folded``) and takes it out again for a device left out.
    Without relay the two servers' intakes are apart: device 3 uploads to server 1 only, device 4 to
    server 0 only (each proves nothing it could: server 0 gives device 3 no challenge).  The agreed set
    is the intersection; server 1 must take device 3's folded words and its retrieval walk out (server 0
    only its walk: device 3 is pending there), server 0 device 4's (both).  The aggregate of devices
    0-2 is their uploads' sum, bit for bit.  Mutation checked: ``_summed`` not subtracting the folded
    part of absorbed devices left out (server 1's share keeps device 3's words: the rows differ)."""
    run = Run(_protocol(False))
    users, kept = [0, 1, 2, 3, 4], [0, 1, 2]
    run.retrieve(users, _items)
    uploads = {u: _honest(u) for u in users}
    run.upload({u: uploads[u] for u in kept})
    m3 = run.devices[3].upload(*uploads[3])
    m4 = run.devices[4].upload(*uploads[4])
    assert run.s1.handle_upload_many([(3, cast("bytes", m3[1]))]) == [None]
    assert run.s0.handle_upload_many([(4, m4[0])]) == [None]
    assert run.s1._absorbed[3].folded and run.s0._absorbed[4].folded and 3 in run.s0._pending
    with pytest.raises(ProtocolError, match="did not upload"):
        run.s0.challenge(3)
    run.prove(kept)
    assert not run.check(kept)
    sparse, dense = run.aggregate(kept)
    exp_sparse, exp_dense = _expected(uploads, kept)
    np.testing.assert_array_equal(sparse, exp_sparse)
    np.testing.assert_array_equal(dense, exp_dense)


# -- 4. the strikes: the journal's records that name devices ----------------------------------------------

A = j21.ATTACKER


@pytest.mark.parametrize("record", [
    {"ev": "rejected", "users": ["x"]},
    {"ev": "rejected", "users": 5},
    {"ev": "rejected", "users": [True]},
    {"ev": "rejected", "users": [-3]},
    {"ev": "rejected", "users": [10**30]},
    {"ev": "aborted", "rejected": ["x"]},
    {"ev": "aborted", "rejected": [30]},
    {"ev": "rejected", "round": "x", "users": [1]},
], ids=["str", "not-a-list", "bool", "negative", "huge", "end-str", "end-past-the-last-device", "round-str"])
def test_s32_r1_a_record_naming_no_device_of_the_deployment_is_a_corrupt_journal(record: dict[str, Any]) -> None:
    """Session 31's fix of S31-R2-1 refuses a ``strikes_cleared`` record whose ``device`` is not
    null or an int id in ``[0, num_users)`` (``CorruptState`` naming it).  The two other records that
    name devices toward the door are replayed without that check: a ``rejected`` record's ``users``
    and a round end's ``rejected`` go through ``int(u)`` in ``NodeState._recover``'s ``reject``.  So
    ``"x"`` stops the start with a ``ValueError`` traceback, ``5`` (not a list) with a ``TypeError``,
    and ``True``, ``-3``, ``10**30`` or an id past the deployment's last device (30 devices: ids
    0-29) are counted as strikes -- ``True`` as device 1's, the others against devices that do not
    exist (shown in ``status``'s ``strikes``).  The server writes sorted int ids of its round only;
    anything else is a journal it never wrote, and should be refused as the ``strikes_cleared``
    record is.  (Any record's ``round`` goes through ``int()`` the same way: ``"x"`` is a traceback.)
    Fixed (session 32, lead): the replay refuses each of these as ``CorruptState`` naming the record
    (``devices`` in ``NodeState._recover``; a ``count_first`` record's users and a round end's
    ``included`` too)."""
    srv = j21.servers("cuckoo", False)
    try:
        leader = srv.nodes[0]
        assert isinstance(leader, LeaderNode) and leader.cfg.num_users == 30
        leader.store.append({"round": leader.max_round, **record})
        with pytest.raises(CorruptState):
            j21.restarted(leader)
    finally:
        srv.stop()


def test_a_clear_of_the_strikes_during_a_close_is_what_a_restart_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The close journals a device's rejection at once (``rejected``) and again in the round's end
    record; the operator may clear the device's strikes in between (the close exchanges the
    aggregate shares without the lock).  The running server then holds no strike for it; a restart
    must count the same -- the end record's name is one the clear forgave (``forgotten``), not a new
    rejection -- and so must a second restart (after the first appended nothing new), and a crash
    after the clear, whose recovered end record lists the device again.  A later rejection counts
    one.  Mutation checked: ``forgive`` not adding the pairs to ``forgotten`` (the end record counts
    the device again: 1 strike after the restart)."""
    srv = j21.servers("cuckoo", False)
    first = srv.nodes[0]
    assert isinstance(first, LeaderNode)
    share = first.peer.share  # both nodes below call server 1 through this one peer link
    clears: list[dict[str, Any]] = []

    def clearing_share(*args: Any) -> Any:
        clears.append(srv.nodes[0].clear_strikes(A))
        return share(*args)

    try:
        # installed before the round: server 0's own closer may close it on quorum
        monkeypatch.setattr(first.peer, "share", clearing_share)
        r = j21.play(srv, j21.HONEST, [A])
        out = first.close_round(r)
        monkeypatch.undo()
        assert (out["state"], out["rejected"], first.rejections) == ("committed", [A], {})
        assert clears == [{"cleared": {str(A): 1}}]
        fresh = j21.restarted(first)
        assert fresh.rejections == {} and fresh.round_status(r, None)["rejected"] == [A]
        assert j21.restarted(fresh).rejections == {}
        # the same with a crash after the clear, at the commit: the restart writes the round's end itself
        srv.nodes = (fresh, srv.nodes[1])
        r2 = j21.play(srv, j21.HONEST, [A])
        monkeypatch.setattr(first.peer, "share", clearing_share)
        monkeypatch.setattr(faults, "hit", j21.crash_at("commit"))
        with pytest.raises(j21.Crash):
            fresh.close_round(r2)
        monkeypatch.undo()
        assert clears[1:] == [{"cleared": {str(A): 1}}] and fresh.rejections == {}
        again = j21.restarted(fresh)
        assert again.rejections == {} and again.round_status(r2, None)["rejected"] == [A]
        assert j21.restarted(again).rejections == {}
        srv.nodes = (again, srv.nodes[1])
        r3 = j21.play(srv, j21.HONEST, [A])
        assert again.close_round(r3)["rejected"] == [A] and again.rejections == {A: 1}
        assert j21.restarted(again).rejections == {A: 1}
    finally:
        srv.stop()


# -- 5. the documented figures, by hand --------------------------------------------------------------------

def _honest_failure_log2(t: int, nonzero: int) -> float:
    """``log2`` of ``2 ROWS exp(-T^2 / (T / c + sqrt(N) / 2)^2)``, ``T = 2^(t - 1)``, ``c^2 = 40.5``,
    ``N`` the coordinates the honest device's encoding rounds (``rint``: at most 1/2 each; a zero
    encodes exactly)."""
    big_t = 2.0 ** (t - 1)
    exponent = big_t**2 / (big_t / math.sqrt(40.5) + math.sqrt(nonzero) / 2) ** 2
    return math.log2(2 * ROWS) - exponent / math.log(2)


def test_an_honest_devices_failure_at_10000_users_by_hand_and_what_the_documented_argument_gives() -> None:
    """``SecEmbUser.bound_proof`` and ``DeviceSession.prove`` say an honest, clipped device fails
    "with probability below 2^-50 at up to 10,000 users a round".  By hand: ``t = floor(log2((2^31 -
    1) / (n h)))`` at ``n = 10,000``: cuckoo (``h = 3``) ``(2^31 - 1) / 30,000 = 71,582.8``, ``t = 16``;
    full ``214,748.4``, ``t = 17`` (the code's ``layout_bits`` agrees).  Where the encoding rounds at
    most ``N`` coordinates of ``x`` the failure is ``2 ROWS e^-E``, ``E = T^2 / (T / c + sqrt(N) / 2)^2``.
    It holds at ML-100K (cuckoo ``L = 250 * 65 + 1``; full ``L = 1682 * 65 + 1``) with the documented
    ``N = L`` (bounds.py and security.md: "at most ``sqrt(L) / 2`` ring units"): 2^-50.7 and 2^-50.3.
    At the Yelp stand-in (``m = 93,386``, ``B = 625``, ``w = 65``, ``P = 1``) it holds only when
    ``N`` counts the coordinates an honest device fills (its keys' rows, at most ``S w + P`` with
    ``S`` its slots, here up to the ``B = 625`` buckets of its layout: 2^-50.4 full), not with the
    documented ``N = L``: cuckoo 2^-49.9, full 2^-40.3 -- the docstrings' figure needs the
    documents' rounding term stated per filled coordinate (finding S32-R2, documentation only; the
    claim itself holds at these sizes, and the margin is thin: at ``n = 10,000`` the cuckoo layout
    allows ``N`` up to about 36,400 filled coordinates, full about 145,600)."""
    assert (layout_bits(32, 10_000, layout="cuckoo"), layout_bits(32, 10_000, layout="full")) == (16, 17)
    assert 2**16 <= (2**31 - 1) / 30_000 < 2**17 and 2**17 <= (2**31 - 1) / 10_000 < 2**18
    ml_cuckoo, ml_full = 250 * 65 + 1, 1682 * 65 + 1
    assert _honest_failure_log2(16, ml_cuckoo) < -50.6 and _honest_failure_log2(17, ml_full) < -50.2
    yelp_cuckoo, yelp_full, filled = 625 * 65 + 1, 93_386 * 65 + 1, 625 * 65 + 1
    assert -49.95 < _honest_failure_log2(16, yelp_cuckoo) < -49.85  # above 2^-50 with N = L
    assert -40.4 < _honest_failure_log2(17, yelp_full) < -40.2  # far above with N = L
    assert _honest_failure_log2(17, filled) < -50.3 and _honest_failure_log2(16, 500 * 65 + 1) < -50.0
    assert _honest_failure_log2(16, 36_400) < -50 < _honest_failure_log2(16, 36_500)
    assert _honest_failure_log2(17, 145_600) < -50 < _honest_failure_log2(17, 145_800)
