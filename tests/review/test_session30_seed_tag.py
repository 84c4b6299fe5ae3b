"""Session 30, helper C (issue 34): a deviating server that alters a device's sketch seed ``c_u``
is caught at the device, before it proves or uploads (docs/security.md, "A wrong ``c_u`` is caught
at the device").

With relay, server 1 tags ``c_u`` under the device's one-time relay MAC key (which server 0 never
sees) in its relay answer, and server 0 passes the tag on after ``c_u``; without relay, each
server's reply carries the tag of the other server's half.  A wrong seed, half or tag raises
:class:`RetrievalTampered` at the device (which then refuses to upload), and through the device
SDK the deployment's ``retrieval_tampered`` alarm -- not a strike (``device_rejected``) for the
honest device, as before this change.

Every expected value is written here from the documented formulas (``hmac``/``hashlib`` on bytes
read off the wire), not computed by the code under test.  Each attack test fails on the code
before this change (checked against /work/main at 71aa237: the device took any seed and raised
nothing)."""

from __future__ import annotations

import hashlib
import hmac
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from round_setup import deliver_upload

from secemb.errors import ProtocolError, RetrievalTampered
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.protocols.wire import HEADER_BYTES as FRAME_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from deviation_helpers import USERS, Pair, in_process, over_http, play_round  # type: ignore[import-not-found]  # noqa: E402

LAYOUTS = [("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)]
RELAY_LAYOUTS = [layout for layout, relay in LAYOUTS if relay]
ITEMS, WIDTH, DENSE = 64, 2, 2
ROUND = 9
#: the verified reply's tail: the 16-byte seed (or half), then the 16-byte tag (docs/wire-format.md)
SEED_AT, TAG_AT = -32, -16
#: bytes an attack alters: the seed's (or half's) first and last, the tag's first and last; the
#: seed's found after the answer rows (:func:`_seed_at`), so that before this change (no tag:
#: the reply ended with the seed) each still altered the seed, not the rows
SEED_FIRST, SEED_LAST = "seed-first", "seed-last"
BYTES = [SEED_FIRST, SEED_LAST, TAG_AT, -1]
Alter = Callable[[bytes], bytes]


def _seed_at(cfg: Any) -> int:
    """Where the sketch seed (or half) starts in a reply: after the frame and the answer's ``S``
    rows of ``w`` 32-bit words and a 16-byte row tag."""
    return FRAME_BYTES + cfg.slots * (cfg.width * 4 + 16)


def _at(cfg: Any, byte: int | str) -> int:
    """The position one of :data:`BYTES` names."""
    if byte == SEED_FIRST:
        return _seed_at(cfg)
    if byte == SEED_LAST:
        return _seed_at(cfg) + 15
    return int(byte)


def _same(message: bytes) -> bytes:
    return message


def _flip(at: int) -> Alter:
    """A message with bit 0 of its byte ``at`` (from the end when negative) flipped."""
    def flip(message: bytes) -> bytes:
        i = at % len(message)
        return message[:i] + bytes([message[i] ^ 1]) + message[i + 1 :]
    return flip


class Round:
    """Round :data:`ROUND` at two fresh in-process servers sharing a fresh sketch key; each device
    run by hand, with any message of a server altered on its way."""

    def __init__(self, layout: str, relay: bool, *, verify: bool = True) -> None:
        self.relay = relay
        self.proto = SecEmbProtocol(layout=layout, relay=relay, verify=verify)
        self.cfg = self.proto.round_config(ROUND, ITEMS, WIDTH, DENSE, 6)
        self.gen = np.random.default_rng(4)  # public test data only
        self.table = self.gen.integers(0, 1 << 20, (ITEMS, WIDTH)).astype(self.cfg.dtype)
        # the protocol object's own sketch key, drawn fresh; relay roles have the relay steps
        self.s0: Any = self.proto.make_server(0)
        self.s1: Any = self.proto.make_server(1)
        for s in (self.s0, self.s1):
            s.begin_round(self.cfg, self.table)

    def request(self) -> tuple[SecEmbUser, np.ndarray, bytes, bytes]:
        """A new device's request for three items: the user, its slots and its two messages."""
        user = SecEmbUser(self.cfg, relay=self.relay, verify=self.proto.verify)
        slots = place(self.cfg, self.gen.choice(ITEMS, 3, replace=False), self.gen).indices
        r0, r1 = user.retrieval_request(slots)
        return user, slots, r0, r1

    def replies(self, uid: int, r0: bytes, r1: bytes, *, to_user0: Alter = _same, to_user1: Alter = _same,
                relay_answer: Alter = _same) -> tuple[bytes, bytes | None, bytes | None]:
        """The servers' replies to device ``uid``'s request, each altered on its way as given
        (``relay_answer``: server 1's answer to server 0, relay); with relay also the relay answer
        server 0 got."""
        if self.relay:
            assert self.s1.handle_retrieval(uid, r1) is None
            answer = relay_answer(self.s1.relay_retrieval(uid, self.s0.handle_retrieval(uid, r0)))
            return to_user0(self.s0.complete_retrieval(uid, answer)), None, answer
        a0, a1 = self.s0.handle_retrieval(uid, r0), self.s1.handle_retrieval(uid, r1)
        return to_user0(a0), to_user1(a1), None


def _u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def _mac_key(cfg: Any, r1: bytes) -> bytes:
    """The device's relay MAC key in its request to server 1: after its roots and two seeds."""
    at = FRAME_BYTES + 16 * cfg.slots + 32
    return r1[at : at + 16]


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
@pytest.mark.parametrize("verify", [True, False])
def test_reply_and_relay_answer_sizes(layout: str, relay: bool, verify: bool) -> None:
    """A verified reply is its answer, the 16-byte seed (or half) and the 16-byte tag; a verified
    relay answer is the masked answer and the 16-byte tag; unverified, neither grows.  The sizes
    the protocol declares are those sent."""
    rnd = Round(layout, relay, verify=verify)
    user, _, r0, r1 = rnd.request()
    reply0, reply1, answer = rnd.replies(3, r0, r1)
    rows = rnd.cfg.slots * (WIDTH * 4 + 16)  # S rows of w words and a 16-byte row tag (32-bit ring)
    assert len(reply0) - FRAME_BYTES == rows + (32 if verify else 0)
    if relay:
        assert answer is not None and len(answer) - FRAME_BYTES == rows + (16 if verify else 0)
        assert rnd.proto.message_body_bytes("relay_answer", rnd.cfg, party=1, num_users=1) == len(answer) - FRAME_BYTES
    else:
        assert reply1 is not None and len(reply1) == len(reply0)
    user.retrieval_result(reply0, reply1)  # an honest round reads


@pytest.mark.parametrize("layout", RELAY_LAYOUTS)
def test_relay_tag_is_servers_1_hmac_under_the_devices_key_passed_on(layout: str) -> None:
    """With relay the reply ends with ``c_u`` and ``HMAC-SHA256(k_tag, b"secemb-sketch-seed-tag"
    || u64 round || c_u)[:16]``, ``k_tag = HMAC-SHA256(mac key, b"secemb-relay-subkey-seed-tag")``
    (session 31: the seed tag's own sub-key of the device's one-time key), the same 16 bytes that
    end server 1's relay answer; the device reads its rows."""
    rnd = Round(layout, True)
    user, slots, r0, r1 = rnd.request()
    reply0, _, answer = rnd.replies(3, r0, r1)
    assert answer is not None
    seed, tag = reply0[SEED_AT:TAG_AT], reply0[TAG_AT:]
    k_tag = hmac.new(_mac_key(rnd.cfg, r1), b"secemb-relay-subkey-seed-tag", hashlib.sha256).digest()
    want = hmac.new(k_tag, b"secemb-sketch-seed-tag" + _u64(ROUND) + seed, hashlib.sha256).digest()
    assert tag == want[:16] == answer[TAG_AT:]
    rows = user.retrieval_result(reply0, None)
    real = slots >= 0
    np.testing.assert_array_equal(rows[real], rnd.table[slots[real]])


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_half_tags_are_the_other_servers_hash_of_each_half(layout: str) -> None:
    """Without relay server ``b``'s reply ends with its half ``c_b`` and ``SHA-256(b"secemb-sketch-
    half-tag" || u8 (1-b) || u64 round || c_(1-b))[:16]``, the tag of the other server's half."""
    rnd = Round(layout, False)
    user, slots, r0, r1 = rnd.request()
    reply0, reply1, _ = rnd.replies(3, r0, r1)
    assert reply1 is not None
    for own, other, b in ((reply0, reply1, 1), (reply1, reply0, 0)):
        want = hashlib.sha256(b"secemb-sketch-half-tag" + bytes([b]) + _u64(ROUND) + other[SEED_AT:TAG_AT]).digest()
        assert own[TAG_AT:] == want[:16]
    rows = user.retrieval_result(reply0, reply1)
    real = slots >= 0
    np.testing.assert_array_equal(rows[real], rnd.table[slots[real]])


def _caught(rnd: Round, user: SecEmbUser, reply0: bytes, reply1: bytes | None) -> None:
    """The device refuses the replies as tampered, before any proof, and then refuses to upload."""
    with pytest.raises(RetrievalTampered, match="sketch seed"):
        user.retrieval_result(reply0, reply1)
    rows = np.zeros((rnd.cfg.slots, WIDTH), rnd.cfg.dtype)
    with pytest.raises(ProtocolError, match="integrity check"):
        user.upload(rows, np.zeros(DENSE, rnd.cfg.dtype))


@pytest.mark.parametrize("layout", RELAY_LAYOUTS)
@pytest.mark.parametrize("byte", BYTES)
def test_relay_server_0_altering_c_u_or_its_tag_is_caught(layout: str, byte: int | str) -> None:
    """Server 0 changes a byte of ``c_u`` (first or last) or of server 1's tag in its reply: the
    device raises :class:`RetrievalTampered` and does not upload (before this change it proved
    under the altered seed, failed at close and was struck)."""
    rnd = Round(layout, True)
    user, _, r0, r1 = rnd.request()
    reply0, _, _ = rnd.replies(3, r0, r1, to_user0=_flip(_at(rnd.cfg, byte)))
    _caught(rnd, user, reply0, None)


@pytest.mark.parametrize("layout", RELAY_LAYOUTS)
def test_relay_server_0_passing_on_another_devices_seed_and_tag_is_caught(layout: str) -> None:
    """Server 0 gives a device another device's ``c_u`` with server 1's valid tag of it (a seed
    and tag it saw honestly): the tag is under the other device's key, so the device refuses."""
    rnd = Round(layout, True)
    user_a, _, a0, a1 = rnd.request()
    user_b, _, b0, b1 = rnd.request()
    reply_a, _, _ = rnd.replies(3, a0, a1)
    reply_b, _, _ = rnd.replies(4, b0, b1)
    assert reply_a[SEED_AT:] != reply_b[SEED_AT:]
    _caught(rnd, user_b, reply_b[:SEED_AT] + reply_a[SEED_AT:], None)
    assert user_a.retrieval_result(reply_a, None).shape == (rnd.cfg.slots, WIDTH)  # the honest one reads


@pytest.mark.parametrize("layout", RELAY_LAYOUTS)
def test_relay_server_1_sending_a_wrong_tag_is_caught(layout: str) -> None:
    """Server 1's relay answer carries a wrong tag (server 0 passes it on as received): the device
    raises :class:`RetrievalTampered` too.  It cannot tell which server lied -- nor need it: a
    deviating server halts the deployment either way, for the operators to find which."""
    rnd = Round(layout, True)
    user, _, r0, r1 = rnd.request()
    reply0, _, _ = rnd.replies(3, r0, r1, relay_answer=_flip(TAG_AT))
    _caught(rnd, user, reply0, None)


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
@pytest.mark.parametrize("party", [0, 1])
@pytest.mark.parametrize("byte", BYTES)
def test_without_relay_either_server_altering_its_half_or_its_tag_is_caught(layout: str, party: int,
                                                                           byte: int | str) -> None:
    """Without relay, server 0 or server 1 changes a byte of its half (first or last) or of its
    tag of the other half: the device raises :class:`RetrievalTampered` and does not upload."""
    rnd = Round(layout, False)
    user, _, r0, r1 = rnd.request()
    alter = {f"to_user{party}": _flip(_at(rnd.cfg, byte))}
    reply0, reply1, _ = rnd.replies(3, r0, r1, **alter)
    _caught(rnd, user, reply0, reply1)


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_a_batch_refuses_only_the_device_whose_seed_was_altered_and_the_aggregate_is_the_others(
        layout: str, relay: bool) -> None:
    """Three devices read their replies as one batch (``retrieval_results``), the second's seed
    altered by server 0: only it raises :class:`RetrievalTampered`; the others upload, pass the
    close's checks, and the aggregate is their plaintext rows."""
    rnd = Round(layout, relay)
    devices = [rnd.request() for _ in range(3)]
    replies = [rnd.replies(uid, r0, r1, to_user0=_flip(_seed_at(rnd.cfg)) if uid == 1 else _same)[:2]
               for uid, (_, _, r0, r1) in enumerate(devices)]
    got = SecEmbUser.retrieval_results([d[0] for d in devices], replies)
    assert isinstance(got[1], RetrievalTampered) and "sketch seed" in str(got[1])
    expected = np.zeros((ITEMS, WIDTH), rnd.cfg.dtype)
    for uid in (0, 2):
        user, slots, _, _ = devices[uid]
        rows = got[uid]
        assert isinstance(rows, np.ndarray)
        real = slots >= 0
        np.testing.assert_array_equal(rows[real], rnd.table[slots[real]])
        grad = (rows + np.uint32(uid + 1)) * real[:, None].astype(rnd.cfg.dtype)
        np.add.at(expected, slots[real], grad[real])
        deliver_upload(rnd.s0, rnd.s1, relay, uid, *user.upload(grad, np.zeros(DENSE, rnd.cfg.dtype)))
    with pytest.raises(ProtocolError, match="integrity check"):
        devices[1][0].upload(np.zeros((rnd.cfg.slots, WIDTH), rnd.cfg.dtype), np.zeros(DENSE, rnd.cfg.dtype))
    uploaded = [0, 2]
    d0, d1 = rnd.s0.upload_digests(uploaded), rnd.s1.upload_digests(uploaded)
    assert d0 == d1
    assert rnd.s0.verify_rejected(uploaded, rnd.s1.verify_answer(uploaded)) == set()
    sparse, _ = rnd.s0.combine(rnd.s1.aggregate_share(uploaded), uploaded)
    np.testing.assert_array_equal(sparse, expected)


# -- through the device SDK and the nodes: the retrieval_tampered alarm, no strike -----------------

VICTIM = USERS[1]


def _alter_seed(pair: Pair, monkeypatch: Any, party: int) -> None:
    """Server ``party``'s retrieval reply to VICTIM with the first byte of its sketch seed (or
    half) altered on its way (as that server would send it)."""
    honest = pair.links

    def links(u: int) -> Any:
        pair_links = honest(u)
        if u == VICTIM:
            link = pair_links[party]
            answer = link.retrieval
            monkeypatch.setattr(link, "retrieval",
                                lambda r, body: _flip(_seed_at(pair.leader.role.config))(answer(r, body)))
        return pair_links

    monkeypatch.setattr(pair, "links", links)


def _alter_relay_answer(pair: Pair, monkeypatch: Any, alter: Alter) -> None:
    """Server 1's relay answer for VICTIM altered before server 0 reads it (server 1 deviating)."""
    honest = pair.leader.peer.relay_retrieval_many

    def relayed(r: int, items: list[tuple[int, bytes]]) -> list[Any]:
        out = honest(r, items)
        return [alter(a) if u == VICTIM and isinstance(a, bytes) else a for (u, _), a in zip(items, out, strict=True)]

    monkeypatch.setattr(pair.leader.peer, "relay_retrieval_many", relayed)


def _check_alarm(pair: Pair) -> None:
    """One round: VICTIM's device reports its tampered retrieval; both servers halt with one
    ``retrieval_tampered`` alarm naming it, and no ``device_rejected`` (no strike)."""
    r, outcome, errors = play_round(pair)
    assert USERS[0] not in errors  # (the devices after VICTIM find the deployment halted)
    assert isinstance(errors[VICTIM], RetrievalTampered) and "sketch seed" in str(errors[VICTIM])
    assert outcome["state"] == "aborted" and "halted" in outcome["reason"]
    for st in (pair.leader.status(), pair.status1()):
        assert st["halted"] is True
        assert [a["kind"] for a in st["alarms"]] == ["retrieval_tampered"]
        assert f"device {VICTIM}" in st["alarms"][0]["detail"]
    assert pair.round_status1(r)["state"] == "aborted"


def test_server_0_altering_c_u_raises_the_alarm_not_a_strike(monkeypatch: Any) -> None:
    pair, _ = in_process()
    _alter_seed(pair, monkeypatch, 0)
    _check_alarm(pair)


def test_server_1_altering_its_seed_tag_raises_the_alarm(monkeypatch: Any) -> None:
    pair, _ = in_process()
    _alter_relay_answer(pair, monkeypatch, _flip(-1))
    _check_alarm(pair)


def test_without_relay_server_1_altering_its_half_raises_the_alarm(monkeypatch: Any) -> None:
    pair, _ = in_process(relay=False)
    _alter_seed(pair, monkeypatch, 1)
    _check_alarm(pair)


def test_server_0_altering_c_u_raises_the_alarm_over_http(monkeypatch: Any) -> None:
    """Server 1 a ``secemb serve`` process: the device's report reaches it over HTTPS and halts it."""
    with over_http() as (pair, cluster):
        _alter_seed(pair, monkeypatch, 0)
        _check_alarm(pair)
        assert "ALARM retrieval_tampered" in cluster.log(1).read_text()
