"""A deviating server against SecEmb's protocol roles (issue 33, items 1 and 2): the red team's
attacks -- server 0 altering what it relays to server 1, a server adding an offset to its share
of a retrieval answer -- are detected, for every layout, with and without relay, whatever the
device asked for; an honest round is unchanged (exact rows, exact aggregate).

Expected values come from the plaintext table and from SHA-256 / HMAC computed here, not from
the code under test."""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable

import numpy as np
import pytest

from secemb.errors import InvalidMessage, ProtocolError, RelayTampered, RetrievalTampered
from secemb.protocols.base import RoundConfig
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer, SecEmbUser
from secemb.randomness import CtrDrbg

HDR = 32  # protocol message header (docs/wire-format.md)
LAYOUTS = [("full", False), ("full", True), ("cuckoo", False), ("cuckoo", True)]
Tamper = dict[str, Callable[[bytes], bytes]]


class Setup:
    """One round of a protocol variant: servers, the public table, devices by id."""

    def __init__(self, layout: str, relay: bool, ring_bits: int = 32, round_id: int = 3, seed: int = 0) -> None:
        self.proto = SecEmbProtocol(layout=layout, relay=relay)
        self.relay = relay
        self.cfg: RoundConfig = self.proto.round_config(round_id, num_items=300, width=5, dense_size=3, m_prime=8,
                                                        ring_bits=ring_bits)
        self.gen = np.random.default_rng(seed)  # public test data only (table, item choices)
        info = np.iinfo(self.cfg.dtype)
        self.table = self.gen.integers(0, info.max, (self.cfg.num_items, self.cfg.width), self.cfg.dtype, True)
        self.s0: SecEmbServer = self.proto.make_server(0)
        self.s1: SecEmbServer = self.proto.make_server(1)
        self.s0.begin_round(self.cfg, self.table)
        self.s1.begin_round(self.cfg, self.table)

    def slots(self, items: list[int]) -> np.ndarray:
        """The request slots of a device that rated ``items`` (padding / empty buckets added)."""
        return place(self.cfg, np.array(items, np.int64), self.gen).indices

    def user(self, uid: int) -> SecEmbUser:
        return self.proto.make_user(self.cfg, _rng=CtrDrbg(b"device/%d" % uid))

    def retrieve(self, uid: int, slots: np.ndarray, tamper: Tamper | None = None) -> tuple[SecEmbUser, np.ndarray]:
        """One device's retrieval through every hop; ``tamper[hop]`` rewrites that hop's bytes
        (``reply0``, ``reply1``: a server's reply to the device; ``relay_keys``,
        ``relay_answer``: the relay's forwards)."""
        hooks = tamper or {}

        def hop(name: str, msg: bytes) -> bytes:
            return hooks.get(name, lambda m: m)(msg)

        user = self.user(uid)
        r0, r1 = user.retrieval_request(slots)
        if self.relay:
            assert self.s1.handle_retrieval(uid, r1) is None
            fwd = self.s0.handle_retrieval(uid, r0)
            assert fwd is not None
            masked = self.s1.relay_retrieval(uid, hop("relay_keys", fwd))
            return user, user.retrieval_result(hop("reply0", self.s0.complete_retrieval(uid, hop("relay_answer",
                                                                                                    masked))), None)
        a0, a1 = self.s0.handle_retrieval(uid, r0), self.s1.handle_retrieval(uid, r1)
        assert a0 is not None and a1 is not None
        return user, user.retrieval_result(hop("reply0", a0), hop("reply1", a1))

    def upload(self, uid: int, user: SecEmbUser, rows: np.ndarray, tamper: Tamper | None = None) -> None:
        u0, u1 = user.upload(rows, np.zeros(self.cfg.dense_size, self.cfg.dtype))
        fwd = self.s0.handle_upload(uid, u0)
        if self.relay:
            assert u1 is None and fwd is not None
            self.s1.relay_upload(uid, (tamper or {}).get("relay_upload", lambda m: m)(fwd))
        else:
            assert u1 is not None and fwd is None
            self.s1.handle_upload(uid, u1)

    def expected_rows(self, slots: np.ndarray) -> np.ndarray:
        out = np.zeros((self.cfg.slots, self.cfg.width), self.cfg.dtype)
        out[slots >= 0] = self.table[slots[slots >= 0]]
        return out


def _tag_words(cfg: RoundConfig) -> int:
    return 16 // cfg.dtype.itemsize  # 128-bit row tags


def _offset(cfg: RoundConfig, delta: np.ndarray) -> Callable[[bytes], bytes]:
    """A deviating server's rewrite of an answer message: ``delta`` (S, w + T) added to its answer
    (what follows it -- a reply's 16 bytes of the sketch seed -- kept)."""
    shape = (cfg.slots, cfg.width + _tag_words(cfg))
    le = cfg.dtype.newbyteorder("<")
    end = HDR + shape[0] * shape[1] * cfg.dtype.itemsize

    def rewrite(msg: bytes) -> bytes:
        body = np.frombuffer(msg, le, shape[0] * shape[1], offset=HDR).reshape(shape).astype(cfg.dtype)
        return msg[:HDR] + (body + delta).astype(le).tobytes() + msg[end:]

    return rewrite


def _delta(cfg: RoundConfig, slot: int, cols: slice, value: int) -> np.ndarray:
    d = np.zeros((cfg.slots, cfg.width + _tag_words(cfg)), cfg.dtype)
    d[slot, cols] = value
    return d


def _flip(pos: int) -> Callable[[bytes], bytes]:
    def rewrite(msg: bytes) -> bytes:
        return msg[:pos] + bytes([msg[pos] ^ 1]) + msg[pos + 1 :]

    return rewrite


# ------------------------------------------------------------------- honest rounds


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_honest_round_passes_and_rows_exact(layout: str, relay: bool, ring_bits: int) -> None:
    st = Setup(layout, relay, ring_bits)
    cfg = st.cfg
    truth = np.zeros_like(st.table)
    for uid, items in enumerate([[5, 17, 299], [0, 1, 2, 3, 4, 5, 6, 7], [], [150]]):
        slots = st.slots(items)
        user, rows = st.retrieve(uid, slots)
        assert np.array_equal(rows, st.expected_rows(slots))
        grads = st.gen.integers(0, 1000, (cfg.slots, cfg.width), cfg.dtype)
        grads[slots < 0] = 0
        st.upload(uid, user, grads)
        np.add.at(truth, slots[slots >= 0], grads[slots >= 0])
    sparse, _ = st.s0.combine(st.s1.aggregate_share())
    assert np.array_equal(sparse, truth)


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_message_sizes_with_tags_and_relay_authentication(layout: str, relay: bool) -> None:
    """Exact bytes: each answer row carries a 16-byte tag; with relay the direct message to
    server 1 carries a 16-byte MAC key and a 32-byte digest, the upload a 16-byte MAC tag.  Verified
    uploads (the sketch check, issue 34): server 1's request ends with the 16-byte sigma, each reply
    with 16 bytes of the sketch seed and the other server's 16-byte tag of it (session 30; with relay
    server 1's, which its relay answer ends with), the upload to server 0 with the sketch proof share (``6c + 2M
    + 3`` elements for ``K = S`` keys, docs/security.md) and the 32-byte binding tau goes to server 1
    (with relay inside the forward, under the tag)."""
    st = Setup(layout, relay)
    cfg, size = st.cfg, st.cfg.dtype.itemsize
    user = st.user(0)
    r0, r1 = user.retrieval_request(st.slots([1, 2, 3]))
    answer = HDR + cfg.slots * (cfg.width * size + 16)
    rows, dense = cfg.slots * cfg.width * size, cfg.dense_size * size
    proof = 8 * min(6 * c + 2 * -(-cfg.slots // c) + 3 for c in range(1, cfg.slots + 1))
    if relay:
        assert len(r1) == HDR + 16 * cfg.slots + 16 + 16 + 16 + 32 + 16  # roots, two seeds, MAC key, digest, sigma
        st.s1.handle_retrieval(0, r1)
        fwd = st.s0.handle_retrieval(0, r0)
        assert fwd is not None
        masked = st.s1.relay_retrieval(0, fwd)
        reply = st.s0.complete_retrieval(0, masked)
        assert len(masked) == answer + 16 and len(reply) == answer + 32
        assert hashlib.sha256(fwd[HDR:]).digest() == r1[-48:-16]  # the digest of the exact forwarded bytes
        user.retrieval_result(reply, None)
        u0, _ = user.upload(np.zeros((cfg.slots, cfg.width), cfg.dtype), np.zeros(cfg.dense_size, cfg.dtype))
        assert len(u0) == HDR + rows + dense + 32 + 16 + proof
        fwd_up = st.s0.handle_upload(0, u0)
        assert fwd_up is not None and len(fwd_up) == HDR + rows + 32 + 16
        assert st.proto.max_message_bytes("relay_upload", cfg, party=1, num_users=1) == len(fwd_up)
        assert st.proto.max_message_bytes("relay_answer", cfg, party=1, num_users=1) == answer + 16
        assert st.proto.max_message_bytes("retrieval_request", cfg, party=1, num_users=1) == len(r1)
    else:
        a0, a1 = st.s0.handle_retrieval(0, r0), st.s1.handle_retrieval(0, r1)
        assert a0 is not None and a1 is not None and len(a0) == len(a1) == answer + 32
        user.retrieval_result(a0, a1)
        u0, u1 = user.upload(np.zeros((cfg.slots, cfg.width), cfg.dtype), np.zeros(cfg.dense_size, cfg.dtype))
        assert u1 is not None and (len(u0), len(u1)) == (HDR + rows + dense + proof, HDR + rows + dense + 32)
        assert st.proto.max_message_bytes("upload", cfg, party=1, num_users=1) == len(u1)
    assert st.proto.max_message_bytes("upload", cfg, party=0, num_users=1) == len(u0)


# ------------------------------------------------------------------- authenticated relay


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_relay_tampering_keys_detected(layout: str) -> None:
    """Server 0 alters (or swaps) a victim's forwarded key part: server 1 refuses it with
    RelayTampered before evaluating, the victim drops out, the others' round is exact."""
    st = Setup(layout, True)
    cfg = st.cfg
    users = {uid: st.user(uid) for uid in range(4)}
    slots = {uid: st.slots([10 * uid + 1, 10 * uid + 2]) for uid in users}
    fwds = {}
    for uid, user in users.items():
        r0, r1 = user.retrieval_request(slots[uid])
        assert st.s1.handle_retrieval(uid, r1) is None
        fwd = st.s0.handle_retrieval(uid, r0)
        assert fwd is not None
        fwds[uid] = fwd
    last = len(fwds[0]) - 1
    forged = {
        0: _flip(last)(fwds[0]),  # a retrieval output correction word (the payload)
        1: _flip(HDR + 49 + 3)(fwds[1]),  # a seed correction word of the first key (after the 49-byte key prefix)
        2: fwds[3],  # another device's (valid) key part
    }
    out = st.s1.relay_retrieval_many([(uid, forged.get(uid, fwds[uid])) for uid in users])
    for uid in (0, 1, 2):
        assert isinstance(out[uid], RelayTampered), out[uid]
        assert "server 0 altered" in str(out[uid])
    assert isinstance(out[3], bytes)
    for uid in (0, 1, 2):  # refused without state change: nothing evaluated for them
        with pytest.raises(ProtocolError):
            st.s1.relay_upload(uid, b"")
    # the honest device completes; the victims are silent and left out, exactly
    user3 = users[3]
    reply = st.s0.complete_retrieval(3, out[3])
    assert np.array_equal(user3.retrieval_result(reply, None), st.expected_rows(slots[3]))
    grads = np.ones((cfg.slots, cfg.width), cfg.dtype)
    grads[slots[3] < 0] = 0
    st.upload(3, user3, grads)
    truth = np.zeros_like(st.table)
    np.add.at(truth, slots[3][slots[3] >= 0], grads[slots[3] >= 0])
    sparse, _ = st.s0.combine(st.s1.aggregate_share())
    assert np.array_equal(sparse, truth)


def _upload_tamper(fwd: bytes, cfg: RoundConfig, which: str) -> bytes:
    rows = cfg.slots * cfg.width * cfg.dtype.itemsize
    if which == "correction word":
        return _flip(HDR + rows // 2)(fwd)
    if which == "tag":
        return _flip(len(fwd) - 1)(fwd)
    raise AssertionError(which)


@pytest.mark.parametrize("which", ["correction word", "tag", "swapped", "spliced tag"])
@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_relay_tampering_upload_detected(layout: str, which: str) -> None:
    """Server 0 alters the victim's forwarded correction words (or their tag, or forwards
    another device's upload as the victim's): RelayTampered, nothing absorbed; the honest
    forward is then still accepted and the aggregate is exact."""
    st = Setup(layout, True)
    cfg = st.cfg
    victim, other = 0, 1
    users, slots = {}, {}
    for uid in (victim, other):
        slots[uid] = st.slots([3 + uid, 100 + uid, 200 + uid])
        users[uid], rows = st.retrieve(uid, slots[uid])
        assert np.array_equal(rows, st.expected_rows(slots[uid]))
    grads = {}
    for uid in users:
        grads[uid] = np.full((cfg.slots, cfg.width), 7 + uid, cfg.dtype)
        grads[uid][slots[uid] < 0] = 0
    fwd = {}
    for uid in (victim, other):
        u0, _ = users[uid].upload(grads[uid], np.zeros(cfg.dense_size, cfg.dtype))
        got = st.s0.handle_upload(uid, u0)
        assert got is not None
        fwd[uid] = got
    if which == "swapped":
        bad = fwd[other]
    elif which == "spliced tag":  # the victim's valid tag over another device's words
        size = cfg.slots * cfg.width * cfg.dtype.itemsize
        bad = fwd[victim][:HDR] + fwd[other][HDR : HDR + size] + fwd[victim][HDR + size :]
    else:
        bad = _upload_tamper(fwd[victim], cfg, which)
    with pytest.raises(RelayTampered, match="server 0 altered"):
        st.s1.relay_upload(victim, bad)
    assert victim not in st.s1.included_users()  # nothing absorbed
    st.s1.relay_upload(other, fwd[other])
    st.s1.relay_upload(victim, fwd[victim])  # the unaltered forward still verifies
    truth = np.zeros_like(st.table)
    for uid in users:
        np.add.at(truth, slots[uid][slots[uid] >= 0], grads[uid][slots[uid] >= 0])
    sparse, _ = st.s0.combine(st.s1.aggregate_share())
    assert np.array_equal(sparse, truth)


def test_relay_upload_tag_is_the_documented_gmac() -> None:
    """tag = AES-128-GCM(k_mac, nonce 0^96, plaintext b"", associated data b"secemb-relay-upload-gmac"
    || u64 round || correction words || tau)'s 16-byte tag, with ``k_mac = HMAC-SHA256(k,
    b"secemb-relay-subkey-upload-gmac")[:16]`` (session 31), k the 16 bytes after the two seeds
    in the device's direct message to server 1 and ``tau = SHA-256(b"secemb-sketch-bind" || u64 round
    || c_u || sigma)`` (verified uploads: ``c_u`` the 16 bytes before the reply's last 16, server
    1's tag of it, ``sigma`` the direct message's); the upload to server 0 is the words, the dense share, tau, the tag and the sketch
    proof share."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    st = Setup("full", True)
    cfg = st.cfg
    user = st.user(0)
    r0, r1 = user.retrieval_request(st.slots([1, 2]))
    key = r1[HDR + 16 * cfg.slots + 32 : HDR + 16 * cfg.slots + 48]
    st.s1.handle_retrieval(0, r1)
    fwd = st.s0.handle_retrieval(0, r0)
    assert fwd is not None
    reply = st.s0.complete_retrieval(0, st.s1.relay_retrieval(0, fwd))
    user.retrieval_result(reply, None)
    u0, _ = user.upload(np.zeros((cfg.slots, cfg.width), cfg.dtype), np.zeros(cfg.dense_size, cfg.dtype))
    rows = cfg.slots * cfg.width * cfg.dtype.itemsize
    words = u0[HDR : HDR + rows]
    at = HDR + rows + cfg.dense_size * cfg.dtype.itemsize
    tau, tag = u0[at : at + 32], u0[at + 32 : at + 48]
    round_u64 = struct.pack("<Q", cfg.round_id)
    assert tau == hashlib.sha256(b"secemb-sketch-bind" + round_u64 + reply[-32:-16] + r1[-16:]).digest()
    k_mac = hmac.new(key, b"secemb-relay-subkey-upload-gmac", hashlib.sha256).digest()[:16]
    want = AESGCM(k_mac).encrypt(bytes(12), b"", b"secemb-relay-upload-gmac" + round_u64 + words + tau)
    assert tag == want


# ------------------------------------------------------------------- verified retrieval


def _hops(relay: bool) -> list[str]:
    """Where a deviating server offsets an answer: its own share (server 0's reply, or server
    1's reply / masked answer)."""
    return ["reply0", "relay_answer"] if relay else ["reply0", "reply1"]


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_corrupted_retrieval_answer_detected(layout: str, relay: bool, ring_bits: int) -> None:
    """An offset on one slot's answer share -- on the row, on the tag, or a top-bit offset that
    the odd multiplier leaves unchanged -- raises RetrievalTampered for every slot, for two
    different item sets and a padding-only request: the failure does not depend on the items."""
    st = Setup(layout, relay, ring_bits)
    cfg = st.cfg
    w, top = cfg.width, 1 << (cfg.ring_bits - 1)
    offsets = {
        "row": (slice(0, w), 1 << 20),
        "one word": (slice(2, 3), 1),
        "tag only": (slice(w, None), 1),
        "top bit": (slice(0, 1), top),
    }
    uid = 0
    for items in ([3, 17, 250], [100, 101, 102, 103, 104, 105, 106, 107], []):
        slots = st.slots(items)
        for hop in _hops(relay):
            for slot in range(cfg.slots):
                for cols, value in offsets.values():
                    if slots[slot] < 0 and value == top:
                        continue  # the empty-bucket test covers those
                    with pytest.raises(RetrievalTampered, match="integrity check"):
                        st.retrieve(uid, slots, {hop: _offset(cfg, _delta(cfg, slot, cols, value))})
                    uid += 1
        user, rows = st.retrieve(uid, slots)  # the same request, honest, passes
        assert np.array_equal(rows, st.expected_rows(slots))
        uid += 1


@pytest.mark.parametrize("relay", [False, True])
def test_offset_on_empty_bucket_detected(relay: bool) -> None:
    """Cuckoo: an empty bucket's answer must be zero; any offset there fails (its payload is
    0, so nothing scales it), and a device that failed does not upload."""
    st = Setup("cuckoo", relay)
    cfg = st.cfg
    slots = st.slots([4, 44, 144])
    empty = np.flatnonzero(slots < 0)
    assert empty.size >= cfg.slots - 3
    uid = 0
    for slot in empty:
        for hop in _hops(relay):
            for cols in (slice(0, 1), slice(cfg.width, None)):  # a row word, a tag word
                with pytest.raises(RetrievalTampered):
                    st.retrieve(uid, slots, {hop: _offset(cfg, _delta(cfg, int(slot), cols, 1))})
                uid += 1
    user = st.user(999)
    r0, r1 = user.retrieval_request(slots)
    if relay:
        st.s1.handle_retrieval(999, r1)
        fwd = st.s0.handle_retrieval(999, r0)
        assert fwd is not None
        reply = _offset(cfg, _delta(cfg, int(empty[0]), slice(0, 1), 5))(
            st.s0.complete_retrieval(999, st.s1.relay_retrieval(999, fwd)))
        with pytest.raises(RetrievalTampered):
            user.retrieval_result(reply, None)
    else:
        a0, a1 = st.s0.handle_retrieval(999, r0), st.s1.handle_retrieval(999, r1)
        assert a0 is not None and a1 is not None
        with pytest.raises(RetrievalTampered):
            user.retrieval_result(_offset(cfg, _delta(cfg, int(empty[0]), slice(0, 1), 5))(a0), a1)
    with pytest.raises(ProtocolError, match="integrity check"):
        user.upload(np.zeros((cfg.slots, cfg.width), cfg.dtype), np.zeros(cfg.dense_size, cfg.dtype))


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_tag_forged_for_the_guessed_item_fails_under_the_secret_multiplier(layout: str, relay: bool) -> None:
    """The selective-failure attack on a plain tag: server 0 guesses the item in a slot, alters
    its row and adds the matching change of the tag (it knows the table).  With payload 1 the
    forgery would pass exactly when the guess is right; with the secret odd payload it fails
    whether or not the guess is right."""
    st = Setup(layout, relay)
    cfg = st.cfg
    w, le = cfg.width, cfg.dtype.newbyteorder("<")
    slots = st.slots([7, 77, 177])
    slot = int(np.flatnonzero(slots >= 0)[0])
    guess = int(slots[slot])  # the right guess
    delta_row = np.zeros(w, cfg.dtype)
    delta_row[0] = 12345
    forged = st.table[guess] + delta_row

    def tag(item: int, row: np.ndarray) -> np.ndarray:
        digest = hashlib.sha256(b"secemb-row-tag" + struct.pack("<QQ", cfg.round_id, item)
                                + row.astype(le).tobytes()).digest()[:16]
        return np.frombuffer(digest, le).astype(cfg.dtype)

    delta = np.zeros((cfg.slots, w + _tag_words(cfg)), cfg.dtype)
    delta[slot, :w] = delta_row
    delta[slot, w:] = tag(guess, forged) - tag(guess, st.table[guess])
    for uid in range(8):  # 8 devices, 8 secret multipliers: each passes with probability 2^-31
        with pytest.raises(RetrievalTampered):
            st.retrieve(uid, slots, {"reply0": _offset(cfg, delta)})


def test_row_tags_are_the_documented_hash() -> None:
    """tag_j = SHA-256(b"secemb-row-tag" || u64 round || u64 j || row_j little-endian)[:16], as
    ring words; a device's reconstructed rows are checked against exactly that."""
    from secemb.protocols.secemb import row_tags

    rows = np.array([[1, 2, 3], [2**32 - 1, 0, 5]], np.uint32)
    got = row_tags(9, np.array([4, 250]), rows)
    for i, j in enumerate((4, 250)):
        d = hashlib.sha256(b"secemb-row-tag" + struct.pack("<QQ", 9, j) + struct.pack("<3I", *rows[i])).digest()
        assert got[i].tolist() == list(struct.unpack("<4I", d[:16]))
    got64 = row_tags(9, np.array([4]), rows[:1].astype(np.uint64))
    d = hashlib.sha256(b"secemb-row-tag" + struct.pack("<QQ", 9, 4) + struct.pack("<3Q", 1, 2, 3)).digest()
    assert got64[0].tolist() == list(struct.unpack("<2Q", d[:16]))


def test_truncated_tagged_reply_is_malformed_not_tampered() -> None:
    """A reply of the old (untagged) length is a malformed message, not a detected deviation."""
    st = Setup("full", False)
    cfg = st.cfg
    user, slots = st.user(0), st.slots([1])
    r0, r1 = user.retrieval_request(slots)
    a0, a1 = st.s0.handle_retrieval(0, r0), st.s1.handle_retrieval(0, r1)
    assert a0 is not None and a1 is not None
    short = a0[: HDR + cfg.slots * cfg.width * cfg.dtype.itemsize]
    with pytest.raises(InvalidMessage):
        user.retrieval_result(short, a1)
    assert np.array_equal(user.retrieval_result(a0, a1), st.expected_rows(slots))
