"""Session 30, helper R: red team of session 30's changes -- the other server's tag of the sketch
seed ``c_u`` (docs/security.md, "A wrong ``c_u`` is caught at the device"), one ``make_server(party,
*, peer_key=None)`` with the sketch key from :func:`~secemb.protocols.base.purpose_key`, the batched
device proofs (:func:`~secemb.fss.sketchproof.prove_many`) and the batched range-proof parts
(:func:`~secemb.fss.rangeproof.hints_of`, :func:`~secemb.fss.rangeproof.seed_parts`).

Each test takes the adversary's side (a deviating server 0 or server 1, a malicious device, a
careless caller) and asserts what stops it.  Expected values are written from the documented
formulas (``hmac``/``hashlib`` on bytes read off the wire) or from the one-device functions, never
from the batch under test.  Where a docstring says "mutation", the named change to the code was
made by hand (monkeypatched in a scratch run, not committed) and the test failed under it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from round_setup import deliver_upload

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, RetrievalTampered
from secemb.fss import rangeproof as R
from secemb.fss import sketchproof as S
from secemb.fss.sketch import device_inputs_many
from secemb.protocols.base import PEER_KEY_MIN_BYTES, purpose_key
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.secemb import checks as C
from secemb.randomness import CtrDrbg
from secemb.transport.signing import ALGORITHM, canonical_request

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from deviation_helpers import USERS, Pair, in_process, play_round  # type: ignore[import-not-found]  # noqa: E402
from test_session30_seed_tag import (  # noqa: E402
    DENSE,
    ITEMS,
    ROUND,
    SEED_AT,
    TAG_AT,
    WIDTH,
    Round,
    _mac_key,
)

RELAY_LAYOUTS = ["full", "cuckoo"]
SKETCH_TAG = b"secemb-sketch-key"


def _u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def _refused(rnd: Round, user: SecEmbUser, reply0: bytes, reply1: bytes | None) -> None:
    """The device refuses the replies as a tampered seed and then refuses to upload (so it never
    proves under the seed it was given)."""
    with pytest.raises(RetrievalTampered, match="sketch seed"):
        user.retrieval_result(reply0, reply1)
    with pytest.raises(ProtocolError, match="integrity check"):
        user.upload(np.zeros((rnd.cfg.slots, WIDTH), rnd.cfg.dtype), np.zeros(DENSE, rnd.cfg.dtype))


def _next_round(rnd: Round, round_id: int) -> Any:
    """Both of ``rnd``'s servers begin round ``round_id`` over the same table; its config."""
    cfg = rnd.proto.round_config(round_id, ITEMS, WIDTH, DENSE, 6)
    for s in (rnd.s0, rnd.s1):
        s.begin_round(cfg, rnd.table)
    return cfg


def _device(rnd: Round, cfg: Any, rng: Any = None) -> tuple[SecEmbUser, bytes, bytes]:
    """A device of round ``cfg`` (its randomness ``rng``, default the OS's) asking for three items."""
    user = SecEmbUser(cfg, relay=rnd.relay, verify=True, _rng=rng)
    slots = place(cfg, rnd.gen.choice(ITEMS, 3, replace=False), rnd.gen).indices
    r0, r1 = user.retrieval_request(slots)
    return user, r0, r1


# -- 1. the seed's tag: can one deviating server make an honest device accept a c_u it chose? ----


@pytest.mark.parametrize("layout", RELAY_LAYOUTS)
def test_relay_seed_and_tag_replayed_from_another_round_are_refused_even_under_a_repeated_mac_key(
        layout: str) -> None:
    """Server 0 saw a device's ``c_u`` and server 1's tag in round 9 (it passes both on); in round
    10 it gives the device of the same user that old pair in place of the new one.  Even a device
    whose randomness repeated (the same one-time MAC key both rounds: a broken RNG, simulated by one
    deterministic stream restarted) refuses, because the tag hashes the round.  Mutation: with
    ``u64 round`` left out of :func:`checks.seed_tag` (at server 1 and the device) the device
    accepted round 9's seed in round 10 and this test failed (DID NOT RAISE)."""
    rnd = Round(layout, True)
    old_user, o0, o1 = _device(rnd, rnd.cfg, CtrDrbg(b"one device"))
    old_reply, _, _ = rnd.replies(3, o0, o1)
    cfg10 = _next_round(rnd, ROUND + 1)
    user, r0, r1 = _device(rnd, cfg10, CtrDrbg(b"one device"))
    assert _mac_key(cfg10, r1) == _mac_key(rnd.cfg, o1)  # the key repeated: only the round tells them apart
    reply0, _, _ = rnd.replies(3, r0, r1)
    assert reply0[SEED_AT:TAG_AT] != old_reply[SEED_AT:TAG_AT]  # another round, another c_u
    _refused(rnd, user, reply0[:SEED_AT] + old_reply[SEED_AT:], None)
    assert old_user.retrieval_result(old_reply, None).shape == (rnd.cfg.slots, WIDTH)  # it was valid in round 9


@pytest.mark.parametrize("layout", RELAY_LAYOUTS)
def test_relay_server_0_gets_one_relay_answer_a_device_a_round(layout: str) -> None:
    """Server 0 cannot collect a second tagged ``c_u`` under a device's key in one round: server 1
    answers one relay per device and round (the request it holds is used up), so the only tag
    under that key is of the true ``c_u``; server 0 cannot start the device's retrieval again
    either."""
    rnd = Round(layout, True)
    _, r0, r1 = _device(rnd, rnd.cfg)
    assert rnd.s1.handle_retrieval(5, r1) is None
    forward = rnd.s0.handle_retrieval(5, r0)
    rnd.s1.relay_retrieval(5, forward)
    with pytest.raises(ProtocolError, match="no retrieval request of user 5"):
        rnd.s1.relay_retrieval(5, forward)
    with pytest.raises(ProtocolError, match="already retrieved"):
        rnd.s0.handle_retrieval(5, r0)


@pytest.mark.parametrize("layout", RELAY_LAYOUTS)
def test_relay_answer_cut_or_grown_by_server_1_is_refused_by_server_0(layout: str) -> None:
    """Server 1's relay answer without its 16-byte tag, or with 16 bytes more: server 0 refuses it
    as a malformed message (a clean :class:`InvalidMessage`), and completes no reply from it."""
    rnd = Round(layout, True)
    for uid, cut in ((6, lambda a: a[:-16]), (7, lambda a: a + bytes(16))):
        _, r0, r1 = _device(rnd, rnd.cfg)
        assert rnd.s1.handle_retrieval(uid, r1) is None
        answer = rnd.s1.relay_retrieval(uid, rnd.s0.handle_retrieval(uid, r0))
        with pytest.raises(InvalidMessage, match="relay_answer"):
            rnd.s0.complete_retrieval(uid, cut(answer))


@pytest.mark.parametrize(("layout", "relay"), [("full", True), ("cuckoo", True), ("full", False), ("cuckoo", False)])
@pytest.mark.parametrize("change", ["without the tag", "16 bytes more"])
def test_a_reply_without_its_tag_or_grown_is_refused_and_the_device_does_not_upload(
        layout: str, relay: bool, change: str) -> None:
    """A server sends its verified reply cut to the unverified size (no tag: what a reply was
    before this session) or 16 bytes longer: the device refuses it as malformed before it reads a
    seed, and then refuses to upload -- it never proves under a seed it did not check."""
    rnd = Round(layout, relay)
    user, r0, r1 = _device(rnd, rnd.cfg)
    reply0, reply1, _ = rnd.replies(3, r0, r1)
    alter = (lambda m: m[:-16]) if change == "without the tag" else (lambda m: m + bytes(16))
    with pytest.raises(InvalidMessage, match="retrieval_reply"):
        user.retrieval_result(alter(reply0), reply1)
    with pytest.raises(ProtocolError, match="upload before the retrieval's reply"):
        user.upload(np.zeros((rnd.cfg.slots, WIDTH), rnd.cfg.dtype), np.zeros(DENSE, rnd.cfg.dtype))


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
@pytest.mark.parametrize("source", ["another device", "another round"])
@pytest.mark.parametrize("party", [0, 1])
def test_without_relay_a_valid_half_of_another_device_or_round_is_refused(layout: str, source: str,
                                                                          party: int) -> None:
    """Without relay, server ``party`` gives a device a half (with its own, honest, tag of the
    other half) that is valid elsewhere -- another device's this round, or this device's user's
    last round: the other server's tag covers the true half's value, so the device refuses.  Each
    server derives both halves, so it could choose any half; the unkeyed tag still binds the one it
    may send, because it travels on the other server's channel.  Mutation: with the device's check
    of server 1's tag skipped (``half_tags``' first entry compared with itself) the party-0 cases
    failed (DID NOT RAISE)."""
    rnd = Round(layout, False)
    if source == "another device":
        _, d0, d1 = _device(rnd, rnd.cfg)
        donor = rnd.replies(8, d0, d1)[party]
        cfg = rnd.cfg
    else:
        _, d0, d1 = _device(rnd, rnd.cfg)
        donor = rnd.replies(3, d0, d1)[party]
        cfg = _next_round(rnd, ROUND + 1)
    assert donor is not None
    user, r0, r1 = _device(rnd, cfg)
    reply0, reply1, _ = rnd.replies(3, r0, r1)
    replies = [reply0, reply1]
    own = replies[party]
    assert own is not None and own[SEED_AT:TAG_AT] != donor[SEED_AT:TAG_AT]
    replies[party] = own[:SEED_AT] + donor[SEED_AT:TAG_AT] + own[TAG_AT:]
    assert replies[0] is not None
    _refused(rnd, user, replies[0], replies[1])


@pytest.mark.parametrize(("layout", "relay"), [("full", True), ("cuckoo", True), ("full", False), ("cuckoo", False)])
def test_a_refused_request_amid_a_batch_leaves_the_others_seeds_and_tags_their_own(layout: str, relay: bool) -> None:
    """Three devices' retrievals handled as one batch at each server, the middle one refused -- its
    forward altered on the way to server 1 (relay: ``RelayTampered``), or its request to server 0
    malformed (a malicious device, without relay: ``InvalidMessage``).  The two others' seeds (or
    halves) and tags are still their own: each reads its rows, no false ``RetrievalTampered``
    (which would let one bad request halt an honest deployment).  Mutation: the servers' seeds and
    reply parts rotated by one place in the batch (``_sketch_seeds`` returning each list shifted)
    failed it."""
    rnd = Round(layout, relay)
    devices = [_device(rnd, rnd.cfg) for _ in range(3)]
    if relay:
        assert rnd.s1.handle_retrieval_many([(u, d[2]) for u, d in enumerate(devices)]) == [None] * 3
        forwards = rnd.s0.handle_retrieval_many([(u, d[1]) for u, d in enumerate(devices)])
        fwd = [f for f in forwards if isinstance(f, bytes)]
        assert len(fwd) == 3
        fwd[1] = fwd[1][:-1] + bytes([fwd[1][-1] ^ 1])
        answers = rnd.s1.relay_retrieval_many(list(enumerate(fwd)))
        assert isinstance(answers[1], ProtocolError) and "differs" in str(answers[1])
        got = rnd.s0.complete_retrieval_many([(0, answers[0]), (2, answers[2])])
        replies: dict[int, tuple[bytes, bytes | None]] = {0: (got[0], None), 2: (got[1], None)}
    else:
        out0 = rnd.s0.handle_retrieval_many([(u, d[1][:-1] if u == 1 else d[1]) for u, d in enumerate(devices)])
        out1 = rnd.s1.handle_retrieval_many([(u, d[2]) for u, d in enumerate(devices)])
        assert isinstance(out0[1], InvalidMessage)
        replies = {u: (out0[u], out1[u]) for u in (0, 2)}
    for u, (a, b) in replies.items():
        assert isinstance(a, bytes)
        rows = devices[u][0].retrieval_result(a, b)
        assert rows.shape == (rnd.cfg.slots, WIDTH)


@pytest.mark.parametrize("relay", [True, False])
def test_server_1_can_still_fail_an_honest_device_at_close_with_its_refused_marker(relay: bool) -> None:
    """What the seed's tag does not cover: at close, server 1 answers the refused marker
    (``0xff`` bytes, "``tau`` does not match") for an honest device whose seed, tag and binding
    were all right.  Server 0 cannot tell this from a device given a wrong seed: it rejects the
    device (a ``device_rejected`` strike at the node, no alarm).  The same denial of service as a
    wrong range-proof verifier message (docs/security.md, "A deviating server 1 can send a wrong
    verifier message": three such rounds get an honest device refused at the door), so
    security.md's "none makes an honest device ... fail the check at close" holds for a wrong
    ``c_u`` only, not for server 1's answer.  Pinned so that a change that closes it (server 1
    proving its marker) shows here."""
    rnd = Round("cuckoo", relay)
    users = []
    for uid in (0, 1):
        user, r0, r1 = _device(rnd, rnd.cfg)
        reply0, reply1, _ = rnd.replies(uid, r0, r1)
        rows = user.retrieval_result(reply0, reply1)
        deliver_upload(rnd.s0, rnd.s1, relay, uid, *user.upload(rows, np.zeros(DENSE, rnd.cfg.dtype)))
        users.append(uid)
    assert rnd.s0.upload_digests(users) == rnd.s1.upload_digests(users)
    honest = rnd.s1.verify_answer(users)
    assert rnd.s0.verify_rejected(users, honest) == set()
    each = len(honest) // 2
    assert rnd.s0.verify_rejected(users, b"\xff" * each + honest[each:]) == {0}


def test_the_half_tag_hashes_only_the_public_round_and_party_and_the_half() -> None:
    """What the unkeyed half tag can tell: it is ``SHA-256(domain || u8 party || u64 round ||
    half)[:16]`` and nothing else -- no user id, no key part, no sketch key, no round secret.  So
    anyone who can check it holds the half already (the device gets it in the clear from the other
    server; each server derives both halves); without the half it is a 128-bit hash of a 128-bit
    PRF output that the observer cannot see (the replies travel under TLS).  Two servers of
    different sketch keys tag one half alike; one half under another round or party tags
    differently (no replay of a tag across rounds or halves)."""
    half = os.urandom(16)
    want = hashlib.sha256(b"secemb-sketch-half-tag" + b"\x01" + _u64(ROUND) + half).digest()[:16]
    assert C.half_tags(ROUND, 1, [half]) == [want]
    assert C.half_tags(ROUND, 0, [half]) != [want]
    assert C.half_tags(ROUND + 1, 1, [half]) != [want]
    for bad in ([half[:15]], [half + b"\0"]):
        with pytest.raises(InvalidParameters, match="16-byte halves"):
            C.half_tags(ROUND, 1, bad)
    with pytest.raises(InvalidParameters, match="party 0 or 1"):
        C.half_tags(ROUND, 2, [half])


def test_seed_tag_refuses_a_key_or_seed_of_another_length() -> None:
    """:func:`checks.seed_tag` takes the 16-byte MAC key and the 16-byte seed only: a server cannot
    make the device tag a longer or shorter string that would shift ``c_u`` across the round.  (The
    tag's HMAC key is the key's seed-tag sub-key, ``HMAC-SHA256(key, b"secemb-relay-subkey-seed-tag")``,
    since session 31.)"""
    key, seed = os.urandom(16), os.urandom(16)
    k_tag = hmac.new(key, b"secemb-relay-subkey-seed-tag", hashlib.sha256).digest()
    want = hmac.new(k_tag, b"secemb-sketch-seed-tag" + _u64(ROUND) + seed, hashlib.sha256).digest()[:16]
    assert C.seed_tag(key, ROUND, seed) == want
    for k, s in ((key[:15], seed), (key + b"\0", seed), (key, seed[:15]), (key, seed + b"\0")):
        with pytest.raises(InvalidParameters, match="seed tag takes"):
            C.seed_tag(k, ROUND, s)


def _cut_reply(pair: Pair, monkeypatch: Any, victim: int) -> None:
    """Server 0's retrieval reply to ``victim`` loses its last 16 bytes (the seed's tag) on its way."""
    honest = pair.links

    def links(u: int) -> Any:
        both = honest(u)
        if u == victim:
            answer = both[0].retrieval
            monkeypatch.setattr(both[0], "retrieval", lambda r, body: answer(r, body)[:-16])
        return both

    monkeypatch.setattr(pair, "links", links)


def test_through_the_sdk_a_reply_cut_before_its_tag_drops_the_device_without_alarm_or_strike(
        monkeypatch: Any) -> None:
    """Server 0 strips the seed's tag from one device's reply (a reply of the size before this
    session): the device's SDK refuses it as malformed (:class:`InvalidMessage`), does not upload,
    and reports nothing -- a malformed reply is a drop, which a server can always cause, not
    evidence of tampering; server 0 records no ``device_rejected`` strike for it and the round goes
    on for the others (nothing halts)."""
    pair, _ = in_process()
    victim = USERS[1]
    _cut_reply(pair, monkeypatch, victim)
    _, outcome, errors = play_round(pair)
    assert set(errors) == {victim} and isinstance(errors[victim], InvalidMessage)
    assert "retrieval_reply" in str(errors[victim])
    assert outcome["state"] == "committed" and outcome["rejected"] == [] and outcome["tampered"] == []
    assert outcome["included"] == [u for u in USERS if u != victim]
    for st in (pair.leader.status(), pair.status1()):
        assert st["halted"] is False and st["alarms"] == []


def test_through_the_sdk_a_relay_answer_cut_by_server_1_drops_the_device_cleanly(monkeypatch: Any) -> None:
    """Server 1 sends server 0 one device's relay answer without its seed tag: server 0 refuses it
    as malformed and tells that device server 1's answer was (``PeerUnavailable``, no traceback);
    the device does not upload, nothing is reported or struck, and the round commits for the
    others."""
    from secemb.server.errors import PeerUnavailable

    pair, _ = in_process()
    victim = USERS[1]
    honest = pair.leader.peer.relay_retrieval_many

    def relayed(r: int, items: list[tuple[int, bytes]]) -> list[Any]:
        out = honest(r, items)
        return [a[:-16] if u == victim and isinstance(a, bytes) else a for (u, _), a in zip(items, out, strict=True)]

    monkeypatch.setattr(pair.leader.peer, "relay_retrieval_many", relayed)
    _, outcome, errors = play_round(pair)
    assert set(errors) == {victim} and isinstance(errors[victim], PeerUnavailable)
    assert "relay_answer" in str(errors[victim])
    assert outcome["state"] == "committed" and outcome["rejected"] == [] and outcome["tampered"] == []
    assert outcome["included"] == [u for u in USERS if u != victim]
    for st in (pair.leader.status(), pair.status1()):
        assert st["halted"] is False and st["alarms"] == []


# -- 2. a malicious device and the alarm --------------------------------------------------------


def test_a_participant_can_halt_a_server_with_a_false_report_as_before_this_session() -> None:
    """A participant device that retrieved nothing (or honestly) reports ``retrieval_tampered`` to
    server 1 alone: server 1 records the alarm, halts and aborts its open round, with no evidence
    asked -- the device's claim cannot be checked by a server (docs/security.md's Availability row:
    "A participating device can halt the deployment with a false retrieval_tampered report until
    the operator clears it").  Server 0, which heard nothing, is not halted.  Not new with session
    30: ``secemb/server/alarms.py`` and ``app.py`` are unchanged since 71aa237, and this test passes
    there too (run in a git worktree of 71aa237); what session 30 added is more honest reports
    (a wrong ``c_u``), not a new way to report."""
    _, servers = in_process()
    leader, follower = servers.nodes
    r = int(leader.open_round(participants=USERS)["round_id"])
    assert follower.device_alarm(USERS[2], {"kind": "retrieval_tampered", "round_id": r,
                                            "detail": "sketch seed"}) == {"halted": True}
    st1, st0 = follower.status(), leader.status()
    assert st1["halted"] is True and [a["kind"] for a in st1["alarms"]] == ["retrieval_tampered"]
    assert f"device {USERS[2]}" in st1["alarms"][0]["detail"]
    assert st1["round"]["state"] == "aborted"
    assert st0["halted"] is False and st0["alarms"] == []


# -- 3. the sketch key from the peer secret ------------------------------------------------------


def test_the_sketch_key_is_apart_from_every_other_use_of_the_peer_secret() -> None:
    """The peer secret keys two HMACs: the signed peer requests (``HMAC(peer, canonical
    request)``) and the sketch key (``HMAC(peer, b"secemb-sketch-key")``); TLS has its own CA keys
    and the journal no key.  A canonical request always starts with ``ALGORITHM`` and a newline and
    holds seven newlines, so no request's MAC is the sketch key, and a peer request signature
    (which server 1 sends and logs may show) tells nothing of it.  Even a peer secret configured
    equal to the user secret keeps them apart: a device key hashes ``b"secemb-user-key" || u64
    id``, 23 bytes against the tag's 17."""
    peer = os.urandom(32)
    key = purpose_key(peer, SKETCH_TAG)
    assert key == hmac.new(peer, SKETCH_TAG, hashlib.sha256).digest()
    assert not SKETCH_TAG.startswith(ALGORITHM.encode())
    for fields in (("server0", "POST", "/v1/peer/rounds/1/verify", "", 0, "", b""),
                   ("", "", "", "", 0, "", b"secemb-sketch-key")):
        request = canonical_request(*fields)
        assert request.startswith(ALGORITHM.encode() + b"\n") and request.count(b"\n") == 7
        assert hmac.new(peer, request, hashlib.sha256).digest() != key
    assert len(b"secemb-user-key" + _u64(0)) != len(SKETCH_TAG)


@pytest.mark.parametrize("bad", [b"k" * (PEER_KEY_MIN_BYTES - 1), b"", "k" * 64, bytearray(32), 12345])
def test_make_server_refuses_a_short_or_mistyped_peer_key(bad: Any) -> None:
    """A verified SecEmb server made with a peer key shorter than 32 bytes, or not bytes (a hex
    string by mistake, a bytearray, an int), is refused with :class:`InvalidParameters` naming the
    rule -- no traceback from ``hmac`` and no weak sketch key."""
    for relay in (True, False):
        with pytest.raises(InvalidParameters, match=f"peer key is bytes of at least {PEER_KEY_MIN_BYTES}"):
            SecEmbProtocol(relay=relay).make_server(0, peer_key=bad)


@pytest.mark.parametrize(("secret", "message"), [("ab" * 31, ">= 32 bytes"), (12345, "must be a hex string"),
                                                  ("zz" * 32, "peer_secret")])
def test_the_servers_configuration_refuses_a_short_or_mistyped_peer_secret_at_startup(
        tmp_path: Path, secret: Any, message: str) -> None:
    """The node reads its peer secret from its configuration (``secemb serve``: ``load_config``),
    which refuses one under 32 bytes (hex of 31), one that is not a hex string, or bad hex with
    :class:`InvalidParameters` naming the field -- the error ``secemb serve`` prints and exits on,
    before any role is made (so ``make_server`` never sees such a key from a node)."""
    from secemb.server.config import load_config

    with pytest.raises(InvalidParameters, match=message):
        load_config(None, party=0, peer_url="http://127.0.0.1:9", state_dir=str(tmp_path), peer_secret=secret,
                    admin_secret="cd" * 32, user_secret="ef" * 32, num_items=10, num_users=10)


# -- 4. prove_many: one device's randomness and inputs stay its own ---------------------------


def _inputs(n: int, keys: int, mp: int) -> tuple[list[bytes], np.ndarray]:
    """``n`` honest devices' seeds and sketch inputs (leaf words that differ at each key's point)."""
    gen = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))  # public test data only
    alphas = gen.integers(0, mp, (n, keys))
    leaf0 = gen.integers(0, 1 << 64, (n, keys, 2), dtype=np.uint64)
    leaf1 = leaf0 ^ gen.integers(1, 1 << 64, (n, keys, 2), dtype=np.uint64)
    seeds = [os.urandom(16) for _ in range(n)]
    return seeds, device_inputs_many(seeds, mp, alphas, leaf0, leaf1)


def test_a_devices_batched_proof_does_not_depend_on_the_other_devices_in_its_batch() -> None:
    """Device 0's proof share is the same bytes alone and in two batches whose other devices have
    other inputs, seeds, secrets and sources: nothing of the batch (a shared draw, a neighbour's
    stream, an offset in the batch's buffers) enters it.  Mutation: the sources handed to the
    batch in reverse order (each device's wire seeds from another's source) failed it."""
    params, mp = S.SketchParams(250), 1 << 12
    seeds, xs = _inputs(4, 250, mp)
    sigmas = [os.urandom(16) for _ in range(4)]
    alone = S.prove_many(params, xs[:1], seeds[:1], sigmas[:1], [CtrDrbg(b"device 0")])
    others_seeds, others = _inputs(3, 250, mp)
    for batch_seeds, batch_xs in ((seeds, xs), ([seeds[0], *others_seeds], np.concatenate([xs[:1], others]))):
        sources = [CtrDrbg(b"device 0")] + [CtrDrbg(os.urandom(16)) for _ in range(3)]
        got = S.prove_many(params, batch_xs, batch_seeds, [sigmas[0]] + [os.urandom(16) for _ in range(3)], sources)
        assert got[0] == alone[0]
        assert len(set(got)) == 4


def test_two_devices_sharing_the_os_source_never_get_one_draw() -> None:
    """Two devices with the same inputs, seed and secret, both on the OS source (as every real
    device in one process is): their proof shares differ, each made from its own draw of wire
    seeds; the same deterministic source for both gives equal shares (the share is a function of
    the device's own source, no batch randomness).  Mutation: the first device's draw reused for
    every device made the first pair equal and failed."""
    params, mp = S.SketchParams(200), 1000
    seeds, xs = _inputs(1, 200, mp)
    sigma = os.urandom(16)
    twins = np.concatenate([xs, xs])
    a, b = S.prove_many(params, twins, seeds * 2, [sigma] * 2, [os.urandom, os.urandom])
    assert a != b
    c, d = S.prove_many(params, twins, seeds * 2, [sigma] * 2, [CtrDrbg(b"same"), CtrDrbg(b"same")])
    assert c == d


def test_a_cheating_device_refuses_the_batch_by_name_and_leaves_no_partial_output() -> None:
    """A batch holding one device whose key is not one point (``A^2 != B C``) raises
    :class:`InvalidParameters` naming that device and key (a clean refusal, not a kernel crash);
    an honest device of :class:`SecEmbUser` cannot reach it (its keys are one point by
    construction), only a caller of ``prove_many`` with forged inputs, and the honest devices'
    proofs made again without it are the ones they get alone."""
    params, mp = S.SketchParams(20), 64
    seeds, xs = _inputs(3, 20, mp)
    bad = xs.copy()
    bad[1, 4, 1] = (bad[1, 4, 1] + np.uint64(1)) % np.uint64(S.F.P)
    with pytest.raises(InvalidParameters, match="device 1's key 4"):
        S.prove_many(params, bad, seeds, [bytes(16)] * 3, [CtrDrbg(b"%d" % i) for i in range(3)])
    kept = S.prove_many(params, xs[[0, 2]], [seeds[0], seeds[2]], [bytes(16)] * 2, [CtrDrbg(b"0"), CtrDrbg(b"2")])
    assert kept == [S.prove(params, xs[i], seeds[i], bytes(16), _rng=CtrDrbg(b"%d" % i)) for i in (0, 2)]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("point", [-1, 8, 2**62, 2**63])
def test_one_devices_hostile_points_are_refused_before_the_batch_kernel(monkeypatch: pytest.MonkeyPatch, backend: str,
                                                                        point: int) -> None:
    """One device of a batch with a point outside ``[0, mp)`` (negative, the domain's end, huge, the
    top bit of a uint64), or the batch's points as floats or bools: :func:`device_inputs_many`
    refuses with :class:`InvalidParameters` before the compiled kernel could read a leaf out of its
    row (on both backends)."""
    from secemb.fss import kernels

    if backend == "numba" and not kernels.available():
        pytest.skip("numba or AES-NI missing")
    monkeypatch.setattr(kernels, "BACKEND", backend)
    leaf0 = np.frombuffer(os.urandom(2 * 4 * 2 * 8), np.uint64).reshape(2, 4, 2)
    leaf1 = leaf0 ^ np.uint64(5)
    seeds = [os.urandom(16), os.urandom(16)]
    points = np.array([[1, 2, 3, 4], [0, 1, 2, 3]], np.uint64 if point >= 2**63 else np.int64)
    points[1, 1] = point
    with pytest.raises(InvalidParameters, match=r"points must be in \[0, 8\)"):
        device_inputs_many(seeds, 8, points, leaf0, leaf1)
    for cast in (float, bool):
        with pytest.raises(InvalidParameters, match="points must be integers"):
            device_inputs_many(seeds, 8, points.astype(cast), leaf0, leaf1)


# -- 5. hints_of / seed_parts: what a batch of contexts can be ------------------------------------


def _part(party: int, context: bytes, key: bytes, inputs: bytes) -> bytes:
    """A part from its documented formula: ``SHA-256(domain || b"part" || framed(u8 party, context,
    key, inputs))``, each item framed by its u64 little-endian length."""
    framed = b"".join(len(x).to_bytes(8, "little") + x for x in (bytes([party]), context, key, inputs))
    return hashlib.sha256(b"secemb/fss/rangeproof/v1/part" + framed).digest()


CONTEXTS = [
    [b"a", b"bb", b""],  # unequal: one hash a device
    [b"same-len-1", b"same-len-2", b"same-len-3"],  # equal: one batch
    [b"", b"", b""],  # all empty: a batch of zero-length rows
    [bytearray(b"xy"), b"zw", bytearray(b"uv")],  # bytes-like mixed
]


@pytest.mark.parametrize("contexts", CONTEXTS)
def test_seed_parts_are_the_documented_hash_of_each_context_whatever_their_lengths(contexts: list[bytes]) -> None:
    """Unequal, equal, empty and bytearray contexts: each part is the documented hash of its own
    context and seed; a context that moves a byte into its neighbour's (``b"a" + b"bb"`` vs
    ``b"ab" + b"b"``) gives other parts (the framing is injective)."""
    seeds = [os.urandom(16) for _ in contexts]
    assert R.seed_parts(contexts, seeds) == [_part(1, bytes(c), s, b"") for c, s in zip(contexts, seeds, strict=True)]
    if contexts[0] == b"a":
        shifted = R.seed_parts([b"ab", b"b", b""], seeds)
        assert shifted[0] != R.seed_parts(contexts, seeds)[0]


@pytest.mark.parametrize("contexts", CONTEXTS)
def test_hints_of_are_the_documented_hash_of_each_context_whatever_their_lengths(contexts: list[bytes]) -> None:
    """:func:`hints_of` of messages under unequal, equal, empty and bytearray contexts: each part is
    the documented hash of its context, the message's seed and its witness bytes."""
    params = R.RangeParams(rows=8, bits=12, ring_bits=32)
    size = params.message_bytes(0)
    msgs = [os.urandom(size) for _ in contexts]
    head = 16 + 32
    witness = 8 * params.witness_length
    want = [_part(0, bytes(c), m[:16], m[head : head + witness]) for c, m in zip(contexts, msgs, strict=True)]
    assert R.hints_of(params, contexts, msgs) == want
    assert [R.hint_of(params, c, m) for c, m in zip(contexts, msgs, strict=True)] == want


def test_hints_of_and_seed_parts_refuse_what_is_not_a_batch_of_bytes() -> None:
    """An empty batch gives no parts; a context that is not bytes (a str, an int -- ``bytes(5)``
    would be five zeros --, a memoryview), a seed that is not 16 bytes or not bytes, a message of
    another size or not bytes-like, or unequal counts are refused with :class:`InvalidParameters` or
    :class:`InvalidMessage`, never a numpy error."""
    params = R.RangeParams(rows=8, bits=12, ring_bits=32)
    msg, seed = os.urandom(params.message_bytes(0)), os.urandom(16)
    assert R.hints_of(params, [], []) == [] and R.seed_parts([], []) == []
    for ctx in ("ctx", 5, memoryview(b"ctx")):
        with pytest.raises(InvalidParameters, match="context must be bytes"):
            R.seed_parts([b"ok", ctx], [seed, seed])  # type: ignore[list-item]
        with pytest.raises(InvalidParameters, match="context must be bytes"):
            R.hints_of(params, [b"ok", ctx], [msg, msg])  # type: ignore[list-item]
    for bad_seed in (seed[:15], seed + b"\0", bytearray(seed), memoryview(seed)):
        with pytest.raises(InvalidParameters, match="16-byte seed_1"):
            R.seed_parts([b"c", b"c"], [seed, bad_seed])  # type: ignore[list-item]
    with pytest.raises(InvalidParameters, match="16-byte seed_1"):
        R.seed_parts([b"c", b"c"], [seed])
    with pytest.raises(InvalidParameters, match="one context a message"):
        R.hints_of(params, [b"c"], [msg, msg])
    for bad_msg in (msg[:-1], msg + b"\0", "x" * len(msg), None, 5):
        with pytest.raises(InvalidMessage, match="message 1"):
            R.hints_of(params, [b"c", b"c"], [msg, bad_msg])  # type: ignore[list-item]
    # bytes-like messages are read as their bytes: the same parts as bytes
    as_bytes = R.hints_of(params, [b"c"] * 2, [msg] * 2)
    assert R.hints_of(params, [b"c", b"c"], [memoryview(msg), bytearray(msg)]) == as_bytes  # type: ignore[list-item]
