"""The SecEmb protocol roles driven directly (no training loop, no transport).

* exactness: retrieved rows are ``table[indices]``; the combined aggregate is
  ``np.add.at`` of the users' rows and the sum of their dense vectors, bit for bit;
* transcript audit: what a server receives has a length fixed by the public round
  parameters, and no index appears in it as a plaintext integer more often than chance;
* bad messages are rejected with ``InvalidMessage`` / ``ProtocolError``, change no server
  state, and the round goes on for everyone else.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from round_setup import deliver_upload

from secemb import fss
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, SecembError
from secemb.protocols import get_protocol
from secemb.protocols.base import RoundConfig
from secemb.protocols.secemb import SecEmbProtocol, SecEmbServer, SecEmbUser
from secemb.randomness import CtrDrbg

PROTO = SecEmbProtocol()
HDR = 32  # protocol message header (docs/wire-format.md)
KEY_HDR = 49  # key batch prefix: framing header and key parameters


def _cfg(ring_bits: int = 32, **kw: int) -> RoundConfig:
    base = {
        "round_id": 7,
        "num_items": 600,
        "width": 5,
        "dense_size": 6,
        "m_prime": 16,
        "ring_bits": ring_bits,
    }
    base.update(kw)
    return RoundConfig(**base)


def _ring(
    gen: np.random.Generator, shape: tuple[int, ...], cfg: RoundConfig
) -> np.ndarray:
    return gen.integers(
        0, np.iinfo(cfg.dtype).max, shape, dtype=cfg.dtype, endpoint=True
    )


def _servers(cfg: RoundConfig, table: np.ndarray) -> tuple[SecEmbServer, SecEmbServer]:
    s0, s1 = PROTO.make_server(0), PROTO.make_server(1)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    return s0, s1


def _user(cfg: RoundConfig, seed: int) -> SecEmbUser:
    return PROTO.make_user(cfg, _rng=CtrDrbg(b"user/%d" % seed))


def _as_if_replied(user: SecEmbUser) -> SecEmbUser:
    """The device given the sketch seed its retrieval reply would carry (verified uploads: no
    upload before it): for the device-side tests whose requests no server evaluates."""
    user._sketch_seed = bytes(range(16))
    return user


@dataclass
class Round:
    """A round in progress with its plaintext truth."""

    cfg: RoundConfig
    table: np.ndarray
    s0: SecEmbServer
    s1: SecEmbServer
    gen: np.random.Generator
    sparse: np.ndarray
    dense: np.ndarray

    @classmethod
    def start(cls, cfg: RoundConfig, seed: int = 0) -> Round:
        gen = np.random.default_rng(seed)
        table = _ring(gen, (cfg.num_items, cfg.width), cfg)
        s0, s1 = _servers(cfg, table)
        return cls(
            cfg,
            table,
            s0,
            s1,
            gen,
            np.zeros_like(table),
            np.zeros(cfg.dense_size, cfg.dtype),
        )

    def indices(self) -> np.ndarray:
        return self.gen.choice(self.cfg.num_items, self.cfg.m_prime, replace=False)

    def retrieve(
        self, uid: int, idx: np.ndarray | None = None
    ) -> tuple[SecEmbUser, np.ndarray]:
        idx = self.indices() if idx is None else idx
        user = _user(self.cfg, uid)
        r0, r1 = user.retrieval_request(idx)
        rows = user.retrieval_result(
            self.s0.handle_retrieval(uid, r0), self.s1.handle_retrieval(uid, r1)
        )
        assert np.array_equal(rows, self.table[idx])
        return user, idx

    def upload(self, uid: int, user: SecEmbUser, idx: np.ndarray) -> None:
        rows = _ring(self.gen, (self.cfg.m_prime, self.cfg.width), self.cfg)
        dense = _ring(self.gen, (self.cfg.dense_size,), self.cfg)
        u0, u1 = user.upload(rows, dense)
        self.s0.handle_upload(uid, u0)
        self.s1.handle_upload(uid, u1)
        np.add.at(self.sparse, idx, rows)
        self.dense += dense

    def honest(self, uid: int, idx: np.ndarray | None = None) -> None:
        user, idx = self.retrieve(uid, idx)
        self.upload(uid, user, idx)

    def check(self) -> None:
        sparse, dense = self.s0.combine(self.s1.aggregate_share())
        assert sparse.dtype == dense.dtype == self.cfg.dtype
        assert np.array_equal(sparse, self.sparse)
        assert np.array_equal(dense, self.dense)


# ------------------------------------------------------------------- exactness


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_round_is_exact(ring_bits: int) -> None:
    rnd = Round.start(_cfg(ring_bits), seed=ring_bits)
    for uid in range(6):
        rnd.honest(uid)
    rnd.check()
    assert rnd.s0.included_users() == rnd.s1.included_users() == list(range(6))


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_round_is_exact_with_overlapping_and_repeated_indices(ring_bits: int) -> None:
    cfg = _cfg(ring_bits, num_items=40, m_prime=8)
    rnd = Round.start(cfg, seed=1)
    rnd.honest(0, np.arange(8))
    rnd.honest(1, np.arange(8))  # the same items as user 0
    rnd.honest(2, np.array([39, 39, 0, 0, 5, 5, 5, 39]))  # repeated items add up
    rnd.honest(3, np.arange(32, 40))
    rnd.check()


@pytest.mark.parametrize(
    "cfg",
    [
        _cfg(num_items=1, m_prime=1, dense_size=0),
        _cfg(num_items=2, m_prime=1, width=1),
        _cfg(num_items=3, m_prime=3, dense_size=1),
        _cfg(64, num_items=129, m_prime=129, width=2),
        _cfg(num_items=1682, m_prime=20, width=9),
    ],
    ids=lambda c: (
        f"m{c.num_items}-mp{c.m_prime}-w{c.width}-P{c.dense_size}-k{c.ring_bits}"
    ),
)
def test_round_is_exact_for_edge_configurations(cfg: RoundConfig) -> None:
    rnd = Round.start(cfg, seed=cfg.num_items)
    for uid in range(3):
        rnd.honest(uid)
    rnd.check()


def test_padding_rows_with_zero_gradient_do_not_change_the_aggregate() -> None:
    """The caller pads one real item to m' with random items and zero gradients."""
    cfg = _cfg()
    rnd = Round.start(cfg, seed=3)
    real = 123
    pad = rnd.gen.choice(
        np.setdiff1d(np.arange(cfg.num_items), [real]), cfg.m_prime - 1, replace=False
    )
    idx = np.r_[real, pad]
    user, _ = rnd.retrieve(0, idx)
    rows = np.zeros((cfg.m_prime, cfg.width), cfg.dtype)
    rows[0] = _ring(rnd.gen, (cfg.width,), cfg)
    u0, u1 = user.upload(rows, np.zeros(cfg.dense_size, cfg.dtype))
    rnd.s0.handle_upload(0, u0)
    rnd.s1.handle_upload(0, u1)
    sparse, dense = rnd.s0.combine(rnd.s1.aggregate_share())
    assert np.array_equal(sparse[real], rows[0])
    assert np.count_nonzero(np.delete(sparse, real, axis=0)) == 0 and not dense.any()


def test_users_who_only_retrieve_are_not_in_the_aggregate() -> None:
    rnd = Round.start(_cfg(), seed=4)
    rnd.honest(0)
    rnd.retrieve(1)  # drops out after retrieval
    rnd.honest(2)
    rnd.check()
    assert rnd.s0.included_users() == [0, 2]


def test_get_protocol_builds_secemb() -> None:
    proto = get_protocol("secemb")
    assert isinstance(proto, SecEmbProtocol) and proto.name == "secemb"
    assert (
        isinstance(proto.make_server(1), SecEmbServer)
        and proto.make_server(1).party == 1
    )
    assert isinstance(proto.make_user(_cfg()), SecEmbUser)


def test_a_single_server_sees_shares_not_values() -> None:
    """Server 0's retrieval answers are not the rows; uploads carry correction words and a
    dense share, never the gradients themselves."""
    rnd = Round.start(_cfg(), seed=5)
    user = _user(rnd.cfg, 0)
    idx = rnd.indices()
    r0, r1 = user.retrieval_request(idx)
    a0 = rnd.s0.handle_retrieval(0, r0)
    answer = rnd.cfg.m_prime * (rnd.cfg.width + 4) * 4  # + the row tag's 4 words; the sketch seed's half follows
    share0 = np.frombuffer(a0[HDR : HDR + answer], "<u4").reshape(rnd.cfg.m_prime, rnd.cfg.width + 4)
    assert np.mean(share0[:, : rnd.cfg.width] == rnd.table[idx]) < 0.01
    user.retrieval_result(a0, rnd.s1.handle_retrieval(0, r1))
    cfg = rnd.cfg
    rows = _ring(rnd.gen, (cfg.m_prime, cfg.width), cfg)
    dense = _ring(rnd.gen, (cfg.dense_size,), cfg)
    u0, u1 = user.upload(rows, dense)
    words = cfg.m_prime * cfg.width
    for msg in (u0, u1):  # the sketch proof share (to server 0) or binding (to server 1) after the dense share
        body = np.frombuffer(msg[HDR:], "<u4")
        cw, dense_share = body[:words], body[words : words + cfg.dense_size]
        assert np.mean(cw == rows.reshape(-1)) < 0.01  # correction words, not gradients
        assert not np.any(
            dense_share == dense
        )  # an additive share, not the dense gradient
    # both servers get the same correction words (by design) but different dense shares
    assert (
        u0[HDR : HDR + 4 * cfg.m_prime * cfg.width]
        == u1[HDR : HDR + 4 * cfg.m_prime * cfg.width]
    )
    dense_at = slice(HDR + 4 * words, HDR + 4 * (words + cfg.dense_size))
    assert u0[dense_at] != u1[dense_at]


# ------------------------------------------------------------------- transcript audit


def _request_len(cfg: RoundConfig, party: int = 0) -> int:
    return (
        HDR
        + KEY_HDR
        + cfg.m_prime * fss.DPFParams(cfg.num_items, 1, cfg.ring_bits).key_bytes
        + 16 * party  # to server 1 the device's proof seed sigma (verified uploads, issue 34)
    )


def _upload_len(cfg: RoundConfig, party: int) -> int:
    """Correction words and dense share, then to server 0 the sketch proof share (``6c + 2M + 3``
    elements for ``K = m'`` keys, ``M = ceil(K / c)``, the least ``c`` minimizing it:
    docs/security.md) and to server 1 the 32-byte binding tau (verified uploads)."""
    k = cfg.m_prime
    proof = 8 * min(6 * c + 2 * -(-k // c) + 3 for c in range(1, k + 1))
    return HDR + (cfg.m_prime * cfg.width + cfg.dense_size) * cfg.dtype.itemsize + (32 if party else proof)


def _index_sets(cfg: RoundConfig, gen: np.random.Generator) -> dict[str, np.ndarray]:
    m, mp = cfg.num_items, cfg.m_prime
    one_real = np.r_[
        m // 3, gen.choice(np.setdiff1d(np.arange(m), [m // 3]), mp - 1, replace=False)
    ]
    return {
        "all-low": np.arange(mp),
        "all-high": np.arange(m - mp, m),
        "random": gen.choice(m, mp, replace=False),
        "one-real-plus-padding": one_real,
        "same-item": np.full(mp, m - 1),
        "first-and-last": np.r_[
            np.zeros(mp // 2, np.int64), np.full(mp - mp // 2, m - 1)
        ],
    }


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_server_messages_have_the_same_length_for_any_indices(ring_bits: int) -> None:
    cfg = _cfg(ring_bits, num_items=1682, m_prime=24)
    rnd = Round.start(cfg, seed=6)
    seen: dict[str, set[tuple[int, int]]] = {"request": set(), "reply": set(), "upload": set()}
    for uid, (name, idx) in enumerate(_index_sets(cfg, rnd.gen).items()):
        user = _user(cfg, uid)
        r0, r1 = user.retrieval_request(idx)
        a0, a1 = rnd.s0.handle_retrieval(uid, r0), rnd.s1.handle_retrieval(uid, r1)
        assert np.array_equal(user.retrieval_result(a0, a1), rnd.table[idx]), name
        # the number of real rows is invisible: padding rows are sent as zero gradients
        rows = np.zeros((cfg.m_prime, cfg.width), cfg.dtype)
        rows[:uid] = 1
        u0, u1 = user.upload(rows, np.zeros(cfg.dense_size, cfg.dtype))
        seen["request"].add((len(r0), len(r1)))
        seen["reply"].add((len(a0), len(a1)))
        seen["upload"].add((len(u0), len(u1)))
    assert seen["request"] == {(_request_len(cfg), _request_len(cfg, 1))}
    # 16-byte row tags, then each server's 16-byte half of the sketch seed and its 16-byte tag of
    # the other server's half
    reply = HDR + cfg.m_prime * cfg.width * cfg.dtype.itemsize + cfg.m_prime * 16 + 32
    assert seen["reply"] == {(reply, reply)}
    assert seen["upload"] == {(_upload_len(cfg, 0), _upload_len(cfg, 1))}


def test_request_length_matches_documented_movielens_figure() -> None:
    """docs/wire-format.md: m = 1682, m' = 200, k = 32 -> 39,681 bytes per server, and to server 1
    the device's 16-byte proof seed sigma (verified uploads, issue 34)."""
    assert _request_len(_cfg(num_items=1682, m_prime=200)) == 39_681
    user = _user(_cfg(num_items=1682, m_prime=200), 0)
    r0, r1 = user.retrieval_request(np.arange(200))
    assert (len(r0), len(r1)) == (39_681, 39_681 + 16)


def _poisson_upper(lam: float, p: float = 1e-9) -> int:
    """Smallest c with P[Poisson(lam) > c] < p."""
    term = math.exp(-lam)
    cdf, c = term, 0
    while 1.0 - cdf >= p:
        c += 1
        term *= lam / c
        cdf += term
    return c


def _count(hay: bytes, needle: bytes) -> int:
    count, pos = 0, hay.find(needle)
    while pos >= 0:
        count += 1
        pos = hay.find(needle, pos + 1)
    return count


def test_poisson_bound_helper() -> None:
    assert _poisson_upper(0.0) == 0
    assert 30 <= _poisson_upper(10.0) <= 45


def test_no_plaintext_index_in_what_servers_receive() -> None:
    """Count little-endian u16/u32/u64 encodings of the requested indices in every byte a
    server receives (requests and uploads of both servers).

    Null model: the key material and masked values are uniform bytes, so an ``L``-byte
    encoding occurs about ``N_positions / 256^L`` times (Poisson); we allow the 1e-9 upper
    quantile.  Under the alternative "each key carries its index in the clear" every one of
    the 32 keys of each of the 12 users' messages would add one occurrence (>= 768 in all),
    far above the bound (about 36 for u16).  The users request two unusual items over and
    over (v16 < 2^16, v32 >= 2^16, every byte of each >= 0x80 or a fixed small value), so
    structured bytes (a cw_tr padding byte, bit 0 of a root) cannot produce them; the
    headers are checked not to contain them.  Randomness is seeded: no flakes."""
    m = 200_000  # depth 18; user-side only, nothing is evaluated over the domain
    v16, v32 = 0xC3A5, 0x2B7D9
    cfg = _cfg(num_items=m, m_prime=64, width=3, dense_size=16)
    gen = np.random.default_rng(9)
    idx = np.r_[np.full(32, v16), np.full(32, v32)]
    messages = []
    for uid in range(12):
        user = _user(cfg, 100 + uid)
        r0, r1 = user.retrieval_request(idx)
        u0, u1 = _as_if_replied(user).upload(
            _ring(gen, (cfg.m_prime, cfg.width), cfg),
            _ring(gen, (cfg.dense_size,), cfg),
        )
        messages += [r0, r1, u0, u1]
    needles = {
        "u16": struct.pack("<H", v16),
        "u32 (v16)": struct.pack("<I", v16),
        "u64 (v16)": struct.pack("<Q", v16),
        "u32 (v32)": struct.pack("<I", v32),
        "u64 (v32)": struct.pack("<Q", v32),
        "u24 (v32)": struct.pack("<I", v32)[:3],
    }
    for msg in messages:
        head = msg[: HDR + KEY_HDR]
        assert not any(n in head for n in needles.values())
    for name, needle in needles.items():
        positions = sum(max(0, len(msg) - len(needle) + 1) for msg in messages)
        lam = positions / 256 ** len(needle)
        found = sum(_count(msg, needle) for msg in messages)
        assert found <= _poisson_upper(lam), (name, found, lam)


def test_no_plaintext_index_for_realistic_index_sets() -> None:
    """Distinct high indices (the most distinctive 32-bit patterns): none of the m'
    indices' u32/u64 encodings occurs more often than chance allows."""
    m = 3883
    cfg = _cfg(num_items=m, m_prime=48, width=4, dense_size=8)
    gen = np.random.default_rng(10)
    idx = np.arange(m - 48, m)
    blob = b""
    for uid in range(8):
        user = _user(cfg, 200 + uid)
        r0, r1 = user.retrieval_request(idx)
        u0, u1 = _as_if_replied(user).upload(
            _ring(gen, (cfg.m_prime, cfg.width), cfg),
            _ring(gen, (cfg.dense_size,), cfg),
        )
        # bodies only (headers hold public numbers such as m and m')
        blob += r0[HDR + KEY_HDR :] + r1[HDR + KEY_HDR :] + u0[HDR:] + u1[HDR:]
    for fmt in ("<I", "<Q"):
        needles = [struct.pack(fmt, int(i)) for i in idx]
        lam = len(needles) * len(blob) / 256 ** struct.calcsize(fmt)
        found = sum(_count(blob, n) for n in needles)
        assert found <= _poisson_upper(lam), (fmt, found, lam)


def test_requests_for_different_indices_look_alike_bitwise() -> None:
    """Bit frequency of the key material in requests for all-low vs all-high indices: both
    fair, and the same (40 users x 16 keys each)."""
    cfg = _cfg(num_items=1682, m_prime=16)
    freqs = []
    for idx in (np.arange(16), np.arange(1682 - 16, 1682)):
        bodies = []
        for uid in range(40):
            r0, _ = _user(cfg, 300 + uid + 1000 * int(idx[0])).retrieval_request(idx)
            keys = fss.DPFKeys.from_bytes(r0[HDR:])
            bodies.append(np.unpackbits(np.frombuffer(keys.path.cw_seed.tobytes() + keys.cw_out.tobytes(), np.uint8)))
        freqs.append(np.concatenate(bodies).mean())
    assert abs(freqs[0] - 0.5) < 0.01 and abs(freqs[1] - 0.5) < 0.01
    assert abs(freqs[0] - freqs[1]) < 0.01


# ------------------------------------------------------------------- bad messages

Mutation = Callable[[bytes], bytes]


def _set(offset: int, fmt: str, value: int) -> Mutation:
    def mutate(msg: bytes) -> bytes:
        buf = bytearray(msg)
        struct.pack_into("<" + fmt, buf, offset, value)
        return bytes(buf)

    return mutate


def _flip(offset: int, mask: int = 1) -> Mutation:
    def mutate(msg: bytes) -> bytes:
        buf = bytearray(msg)
        buf[offset] ^= mask
        return bytes(buf)

    return mutate


FRAME_MUTATIONS: dict[str, Mutation] = {
    "flipped-magic": _flip(0, 0x20),
    "zero-magic": lambda m: b"\0\0\0\0" + m[4:],
    "version-1": _set(4, "B", 1),
    "protocol-plaintext": _set(5, "B", 1),
    "other-kind": lambda m: _set(6, "B", m[6] % 6 + 1)(m),
    "flags": _set(7, "B", 1),
    "wrong-party": _set(8, "I", 1),
    "party-255": _set(8, "I", 255),
    "peer": _set(12, "I", 1),
    "wrong-round": _set(16, "Q", 8),
    "previous-round": _set(16, "Q", 6),
    "body-len-plus-one": lambda m: _set(24, "Q", len(m) - HDR + 1)(m),
    "truncated-by-one": lambda m: m[:-1],
    "truncated-to-header": lambda m: m[:HDR],
    "empty": lambda m: b"",
    "oversized-by-one": lambda m: m + b"\0",
    "oversized-by-a-block": lambda m: m + bytes(16),
    "doubled": lambda m: m + m,
}

KEY_MUTATIONS: dict[str, Mutation] = {
    "key-magic": _flip(HDR + 0, 0x01),
    "key-version": _set(HDR + 4, "B", 9),
    "key-kind-path": _set(HDR + 6, "B", 2),
    "key-party": _set(HDR + 8, "I", 1),
    "key-ring-64": _set(HDR + 32, "B", 64),
    "key-domain-same-depth": _set(HDR + 33, "Q", 1023),
    "key-width-2": _set(HDR + 41, "I", 2),
    "key-count": _set(HDR + 45, "I", 15),
    "root-control-bit": _flip(HDR + KEY_HDR, 0x01),
    "last-root-control-bit": _flip(HDR + KEY_HDR + 16 * 15, 0x01),
}


def _snapshot(server: SecEmbServer) -> tuple[list[int], bytes]:
    return server.included_users(), server.aggregate_share()


@pytest.fixture
def rnd() -> Round:
    """A round (m = 1000, depth 10) with user 0 done and user 1 retrieved."""
    r = Round.start(_cfg(num_items=1000), seed=11)
    r.honest(0)
    user1, idx1 = r.retrieve(1)
    r.pending = (user1, idx1)  # type: ignore[attr-defined]
    return r


def _finish(rnd: Round) -> None:
    user1, idx1 = rnd.pending  # type: ignore[attr-defined]
    rnd.upload(1, user1, idx1)
    rnd.honest(3)
    rnd.check()


@pytest.mark.parametrize("name", list(FRAME_MUTATIONS) + list(KEY_MUTATIONS))
def test_bad_retrieval_request_is_rejected_without_state_change(
    rnd: Round, name: str
) -> None:
    mutate = {**FRAME_MUTATIONS, **KEY_MUTATIONS}[name]
    user = _user(rnd.cfg, 2)
    idx = rnd.indices()
    r0, r1 = user.retrieval_request(idx)
    before = _snapshot(rnd.s0), _snapshot(rnd.s1)
    with pytest.raises(InvalidMessage):
        rnd.s0.handle_retrieval(2, mutate(r0))
    # for server 1 (party 1), "wrong party" means a 0 where the 1 is
    bad1 = {"wrong-party": _set(8, "I", 0), "key-party": _set(HDR + 8, "I", 0)}.get(
        name, mutate
    )(r1)
    with pytest.raises(InvalidMessage):
        rnd.s1.handle_retrieval(2, bad1)
    assert (_snapshot(rnd.s0), _snapshot(rnd.s1)) == before
    # the same user may retry with its good request, and everyone finishes the round
    rows = user.retrieval_result(
        rnd.s0.handle_retrieval(2, r0), rnd.s1.handle_retrieval(2, r1)
    )
    assert np.array_equal(rows, rnd.table[idx])
    rnd.upload(2, user, idx)
    _finish(rnd)


def _other_user_request(cfg: RoundConfig, seed: int) -> tuple[bytes, bytes]:
    return _user(cfg, seed).retrieval_request(np.arange(cfg.m_prime) % cfg.num_items)


@pytest.mark.parametrize(
    "other",
    [
        {"m_prime": 15},
        {"m_prime": 17},
        {"num_items": 1023},  # same depth: same length, different header
        {"num_items": 1024},
        {"num_items": 1025},
        {"ring_bits": 64},
        {"round_id": 8},
    ],
    ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()),
)
def test_request_made_for_other_round_parameters_is_rejected(
    rnd: Round, other: dict[str, int]
) -> None:
    cfg = dataclasses.replace(rnd.cfg, **other)
    r0, r1 = _other_user_request(cfg, 5)
    before = _snapshot(rnd.s0), _snapshot(rnd.s1)
    if other == {"num_items": 1023}:
        assert len(r0) == _request_len(rnd.cfg)
    for server, msg in ((rnd.s0, r0), (rnd.s1, r1)):
        with pytest.raises(InvalidMessage):
            server.handle_retrieval(5, msg)
    assert (_snapshot(rnd.s0), _snapshot(rnd.s1)) == before
    _finish(rnd)


def test_duplicate_retrieval_is_rejected(rnd: Round) -> None:
    user = _user(rnd.cfg, 1)
    r0, r1 = user.retrieval_request(rnd.indices())
    before = _snapshot(rnd.s0), _snapshot(rnd.s1)
    with pytest.raises(ProtocolError):
        rnd.s0.handle_retrieval(1, r0)  # user 1 already retrieved
    with pytest.raises(ProtocolError):
        rnd.s1.handle_retrieval(0, r1)  # user 0 already uploaded
    assert (_snapshot(rnd.s0), _snapshot(rnd.s1)) == before
    _finish(rnd)  # user 1's pending retrieval state is intact


@pytest.mark.parametrize("name", list(FRAME_MUTATIONS))
def test_bad_upload_is_rejected_without_state_change(rnd: Round, name: str) -> None:
    mutate = FRAME_MUTATIONS[name]
    user1, idx1 = rnd.pending  # type: ignore[attr-defined]
    rows = _ring(rnd.gen, (rnd.cfg.m_prime, rnd.cfg.width), rnd.cfg)
    dense = _ring(rnd.gen, (rnd.cfg.dense_size,), rnd.cfg)
    u0, u1 = user1.upload(rows, dense)
    before = _snapshot(rnd.s0), _snapshot(rnd.s1)
    with pytest.raises(InvalidMessage):
        rnd.s0.handle_upload(1, mutate(u0))
    with pytest.raises(InvalidMessage):
        rnd.s1.handle_upload(1, u0 if name == "wrong-party" else mutate(u1))
    assert (_snapshot(rnd.s0), _snapshot(rnd.s1)) == before
    # the good upload is still accepted afterwards
    rnd.s0.handle_upload(1, u0)
    rnd.s1.handle_upload(1, u1)
    np.add.at(rnd.sparse, idx1, rows)
    rnd.dense += dense
    rnd.honest(3)
    rnd.check()


@pytest.mark.parametrize(
    "other",
    [
        {"m_prime": 15},
        {"m_prime": 17},
        {"ring_bits": 64},
        {"width": 4},
        {"dense_size": 7},
        {"round_id": 6},
    ],
)
def test_upload_made_for_other_round_parameters_is_rejected(
    rnd: Round, other: dict[str, int]
) -> None:
    cfg = dataclasses.replace(rnd.cfg, **other)
    user = _user(cfg, 9)
    user.retrieval_request(np.arange(cfg.m_prime))
    u0, u1 = _as_if_replied(user).upload(
        np.zeros((cfg.m_prime, cfg.width), cfg.dtype),
        np.zeros(cfg.dense_size, cfg.dtype),
    )
    before = _snapshot(rnd.s0), _snapshot(rnd.s1)
    with pytest.raises(InvalidMessage):
        rnd.s0.handle_upload(1, u0)  # user 1 has retrieved: only the message is wrong
    with pytest.raises(InvalidMessage):
        rnd.s1.handle_upload(1, u1)
    assert (_snapshot(rnd.s0), _snapshot(rnd.s1)) == before
    _finish(rnd)


def test_duplicate_upload_is_rejected(rnd: Round) -> None:
    user = _user(rnd.cfg, 0)
    user.retrieval_request(np.arange(rnd.cfg.m_prime))
    u0, u1 = _as_if_replied(user).upload(
        np.ones((rnd.cfg.m_prime, rnd.cfg.width), rnd.cfg.dtype),
        np.ones(rnd.cfg.dense_size, rnd.cfg.dtype),
    )
    before = _snapshot(rnd.s0), _snapshot(rnd.s1)
    with pytest.raises(ProtocolError, match="already uploaded"):
        rnd.s0.handle_upload(0, u0)
    with pytest.raises(ProtocolError, match="already uploaded"):
        rnd.s1.handle_upload(0, u1)
    assert (_snapshot(rnd.s0), _snapshot(rnd.s1)) == before
    _finish(rnd)


def test_upload_without_retrieval_is_rejected(rnd: Round) -> None:
    user = _user(rnd.cfg, 42)
    user.retrieval_request(np.arange(rnd.cfg.m_prime))  # made, but never sent
    u0, u1 = _as_if_replied(user).upload(
        np.ones((rnd.cfg.m_prime, rnd.cfg.width), rnd.cfg.dtype),
        np.ones(rnd.cfg.dense_size, rnd.cfg.dtype),
    )
    before = _snapshot(rnd.s0), _snapshot(rnd.s1)
    with pytest.raises(ProtocolError, match="without retriev"):
        rnd.s0.handle_upload(42, u0)
    with pytest.raises(ProtocolError, match="without retriev"):
        rnd.s1.handle_upload(42, u1)
    assert (_snapshot(rnd.s0), _snapshot(rnd.s1)) == before
    _finish(rnd)


@pytest.mark.parametrize("user_id", [-1, 2**64, "bob", 1.5, None, True])
def test_server_rejects_invalid_user_ids(rnd: Round, user_id: object) -> None:
    r0, _ = _user(rnd.cfg, 50).retrieval_request(np.arange(rnd.cfg.m_prime))
    before = _snapshot(rnd.s0)
    with pytest.raises(InvalidParameters, match="user id"):
        rnd.s0.handle_retrieval(user_id, r0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters, match="user id"):
        rnd.s0.handle_upload(user_id, b"")  # type: ignore[arg-type]
    assert _snapshot(rnd.s0) == before
    _finish(rnd)


@pytest.mark.parametrize("junk", ["a string", None, 12345, bytearray(b"SEMB")])
def test_non_bytes_messages_are_rejected(rnd: Round, junk: object) -> None:
    before = _snapshot(rnd.s0)
    with pytest.raises(InvalidMessage):
        rnd.s0.handle_retrieval(60, junk)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage):
        rnd.s0.handle_upload(1, junk)  # type: ignore[arg-type]
    assert _snapshot(rnd.s0) == before
    _finish(rnd)


def test_many_bad_messages_then_aggregate_is_the_honest_sum() -> None:
    """A hostile mix, interleaved with honest users: the aggregate is exactly theirs."""
    rnd = Round.start(_cfg(64, num_items=1000), seed=12)
    gen = np.random.default_rng(0)
    mutations = list(FRAME_MUTATIONS.values()) + list(KEY_MUTATIONS.values())
    for uid in range(8):
        user = _user(rnd.cfg, uid)
        idx = rnd.indices()
        r0, r1 = user.retrieval_request(idx)
        for _ in range(3):
            bad = mutations[gen.integers(len(mutations))]
            with pytest.raises(SecembError):
                rnd.s0.handle_retrieval(uid, bad(r0))
        user.retrieval_result(
            rnd.s0.handle_retrieval(uid, r0), rnd.s1.handle_retrieval(uid, r1)
        )
        rows = _ring(rnd.gen, (rnd.cfg.m_prime, rnd.cfg.width), rnd.cfg)
        dense = _ring(rnd.gen, (rnd.cfg.dense_size,), rnd.cfg)
        u0, u1 = user.upload(rows, dense)
        for _ in range(3):
            bad = list(FRAME_MUTATIONS.values())[gen.integers(len(FRAME_MUTATIONS))]
            with pytest.raises(SecembError):
                rnd.s1.handle_upload(uid, bad(u1))
        if uid % 3 == 2:  # every third user drops out after retrieval
            continue
        rnd.s0.handle_upload(uid, u0)
        rnd.s1.handle_upload(uid, u1)
        np.add.at(rnd.sparse, idx, rows)
        rnd.dense += dense
    rnd.check()


# ------------------------------------------------------------------- aggregation across servers


def test_combine_detects_a_user_missing_at_one_server() -> None:
    """User 1 uploads to server 0 only: the user sets differ in size.  (Currently reported as
    InvalidMessage -- a length mismatch -- rather than ProtocolError; see the report.)"""
    rnd = Round.start(_cfg(), seed=13)
    rnd.honest(0)
    user, _ = rnd.retrieve(1)
    u0, _ = user.upload(
        np.ones((rnd.cfg.m_prime, rnd.cfg.width), rnd.cfg.dtype),
        np.ones(rnd.cfg.dense_size, rnd.cfg.dtype),
    )
    rnd.s0.handle_upload(1, u0)
    with pytest.raises((ProtocolError, InvalidMessage)):
        rnd.s0.combine(rnd.s1.aggregate_share())


def test_combine_detects_different_users_of_the_same_count() -> None:
    rnd = Round.start(_cfg(), seed=14)
    rnd.honest(0)
    ua, _ = rnd.retrieve(1)
    ub, _ = rnd.retrieve(2)
    ones = (
        np.ones((rnd.cfg.m_prime, rnd.cfg.width), rnd.cfg.dtype),
        np.ones(rnd.cfg.dense_size, rnd.cfg.dtype),
    )
    a0, _ = ua.upload(*ones)
    _, b1 = ub.upload(*ones)
    rnd.s0.handle_upload(1, a0)
    rnd.s1.handle_upload(2, b1)
    assert rnd.s0.included_users() == [0, 1] and rnd.s1.included_users() == [0, 2]
    with pytest.raises(ProtocolError, match="different sets of users"):
        rnd.s0.combine(rnd.s1.aggregate_share())


def test_combine_detects_forged_user_list() -> None:
    """Same length, same count, one id changed in the peer's share."""
    rnd = Round.start(_cfg(), seed=15)
    rnd.honest(0)
    rnd.honest(5)
    share = bytearray(rnd.s1.aggregate_share())
    struct.pack_into("<Q", share, HDR + 8 + 8, 6)  # second id 5 -> 6
    with pytest.raises(ProtocolError, match="different sets of users"):
        rnd.s0.combine(bytes(share))
    rnd.check()  # the genuine share still combines


@pytest.mark.parametrize("name", list(FRAME_MUTATIONS))
def test_combine_rejects_bad_peer_share(name: str) -> None:
    rnd = Round.start(_cfg(), seed=16)
    rnd.honest(0)
    rnd.honest(1)
    share = rnd.s1.aggregate_share()
    bad = (
        FRAME_MUTATIONS[name](share)
        if name != "wrong-party"
        else rnd.s0.aggregate_share()
    )
    with pytest.raises((InvalidMessage, ProtocolError)):
        rnd.s0.combine(bad)
    rnd.check()


def test_either_server_combines_the_same_exact_aggregate() -> None:
    """Issue 33: both servers reconstruct the update (each opens the other's share)."""
    rnd = Round.start(_cfg(), seed=17)
    rnd.honest(0)
    rnd.honest(1)
    at1 = rnd.s1.combine(rnd.s0.aggregate_share())
    at0 = rnd.s0.combine(rnd.s1.aggregate_share())
    assert all(np.array_equal(a, b) for a, b in zip(at0, at1, strict=True))
    assert np.array_equal(at1[0], rnd.sparse) and np.array_equal(at1[1], rnd.dense)


# ------------------------------------------------------------------- stages and lifecycle


def test_server_refuses_work_before_a_round_starts() -> None:
    s0 = PROTO.make_server(0)
    r0, _ = _user(_cfg(), 0).retrieval_request(np.arange(16))
    with pytest.raises(ProtocolError, match="no round"):
        s0.handle_retrieval(0, r0)
    with pytest.raises(ProtocolError, match="no round"):
        s0.handle_upload(0, b"")
    with pytest.raises(ProtocolError, match="no round"):
        s0.aggregate_share()


def test_new_round_resets_state_and_rejects_old_messages() -> None:
    cfg = _cfg()
    rnd = Round.start(cfg, seed=18)
    user = _user(cfg, 0)
    r0, _ = user.retrieval_request(np.arange(16))
    rnd.s0.handle_retrieval(0, r0)
    nxt = dataclasses.replace(cfg, round_id=cfg.round_id + 1)
    rnd.s0.begin_round(nxt, rnd.table)
    assert rnd.s0.included_users() == []
    with pytest.raises(InvalidMessage, match="round"):
        rnd.s0.handle_retrieval(0, r0)  # replay from the previous round


@pytest.mark.parametrize("party", [2, -1, None])
def test_make_server_fails_if_party_invalid(party: object) -> None:
    with pytest.raises(InvalidParameters, match="party"):
        PROTO.make_server(party)  # type: ignore[arg-type]


def test_begin_round_fails_if_table_does_not_match() -> None:
    cfg = _cfg()
    s0 = PROTO.make_server(0)
    for table in (
        np.zeros((600, 4), np.uint32),
        np.zeros((599, 5), np.uint32),
        np.zeros((600, 5), np.uint64),
    ):
        with pytest.raises(InvalidParameters, match="table"):
            s0.begin_round(cfg, table)


def test_user_stage_order_is_enforced() -> None:
    cfg = _cfg()
    zeros = (
        np.zeros((cfg.m_prime, cfg.width), cfg.dtype),
        np.zeros(cfg.dense_size, cfg.dtype),
    )
    user = _user(cfg, 0)
    with pytest.raises(ProtocolError):
        user.upload(*zeros)
    with pytest.raises(ProtocolError):
        user.retrieval_result(b"", b"")
    user.retrieval_request(np.arange(16))
    with pytest.raises(ProtocolError, match="twice"):
        user.retrieval_request(np.arange(16))
    with pytest.raises(ProtocolError, match="before the retrieval's reply"):
        user.upload(*zeros)  # verified uploads: the reply carries the sketch seed the proof needs
    _as_if_replied(user).upload(*zeros)
    with pytest.raises(ProtocolError):
        user.upload(*zeros)  # one upload per round


def test_user_rejects_bad_indices_and_gradients() -> None:
    cfg = _cfg()
    user = _user(cfg, 0)
    for idx in (np.arange(15), np.arange(17), np.arange(16).reshape(4, 4)):
        with pytest.raises(InvalidParameters, match="indices"):
            user.retrieval_request(idx)
    with pytest.raises(InvalidParameters, match="outside the domain"):
        user.retrieval_request(np.r_[np.arange(15), 600])
    with pytest.raises(TypeError):
        user.retrieval_request(np.arange(16, dtype=np.float64))
    user.retrieval_request(np.arange(16))  # failed attempts left no state behind
    _as_if_replied(user)
    good = (
        np.zeros((cfg.m_prime, cfg.width), cfg.dtype),
        np.zeros(cfg.dense_size, cfg.dtype),
    )
    for rows, dense in (
        (good[0].astype(np.uint64), good[1]),
        (good[0][:-1], good[1]),
        (good[0], good[1][:-1]),
        (good[0], good[1].astype(np.int32)),
    ):
        with pytest.raises(InvalidParameters):
            user.upload(rows, dense)
    user.upload(*good)  # a rejected upload did not consume the round


def test_user_rejects_bad_replies() -> None:
    rnd = Round.start(_cfg(), seed=19)
    user = _user(rnd.cfg, 0)
    idx = rnd.indices()
    r0, r1 = user.retrieval_request(idx)
    a0, a1 = rnd.s0.handle_retrieval(0, r0), rnd.s1.handle_retrieval(0, r1)
    for bad in (
        (a1, a0),
        (a0, a0),
        (a0[:-1], a1),
        (a0, a1 + b"\0"),
        (_set(8, "Q", 8)(a0), a1),
        (b"", a1),
    ):
        with pytest.raises(InvalidMessage):
            user.retrieval_result(*bad)
    assert np.array_equal(user.retrieval_result(a0, a1), rnd.table[idx])


def test_relay_prg_is_the_fixed_key_mmo_conversion_of_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    # the relay's masks and server 1's dense share: Convert_relay(seed), block j = AES_k(x_j) ^ x_j
    # with x_j = seed ^ (0, j) and k the tag's fixed key -- recomputed here through OpenSSL
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from secemb.fss import kernels
    from secemb.fss.prg import fixed_key
    from secemb.protocols.secemb import RELAY_TAG, relay_prg

    seed = bytes(range(16))
    lo, hi = np.frombuffer(seed, "<u8")
    blocks = np.array([[lo, hi ^ np.uint64(j)] for j in range(3)], "<u8")
    enc = Cipher(algorithms.AES(fixed_key("convert/" + RELAY_TAG)), modes.ECB()).encryptor()
    want = (np.frombuffer(enc.update(blocks.tobytes()), "<u8") ^ blocks.reshape(-1)).view("<u4")[:10]
    for backend in ("numba", "numpy") if kernels.available() else ("numpy",):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        got = relay_prg(seed, (2, 5), np.dtype(np.uint32))
        assert got.dtype == np.uint32 and got.shape == (2, 5)
        assert np.array_equal(got.reshape(-1), want), backend
    assert not np.array_equal(relay_prg(bytes(16), (4,), np.dtype(np.uint64)),
                              relay_prg(bytes(15) + b"\1", (4,), np.dtype(np.uint64)))
    with pytest.raises(InvalidParameters):
        relay_prg(b"short", (3,), np.dtype(np.uint32))


# ------------------------------------------------------------------- batched key generation


@pytest.mark.parametrize("layout, relay", [("full", False), ("cuckoo", True), ("cuckoo", False)])
def test_batched_requests_retrieve_and_aggregate_exactly_and_refuse_per_user(layout: str, relay: bool) -> None:
    """``SecEmbUser.retrieval_requests``: the keys of several users made as one batch give each
    user its own rows and its share of an exact aggregate; a user whose request is malformed,
    a second request, or (cuckoo) slots that put an item in a bucket that does not hold it is
    refused alone, and its state is unchanged."""
    proto = SecEmbProtocol(layout=layout, relay=relay)
    cfg = proto.round_config(3, 300, 4, 5, 12, 32)
    gen = np.random.default_rng(5)
    table = _ring(gen, (cfg.num_items, cfg.width), cfg)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)

    def slots() -> np.ndarray:
        items = gen.choice(cfg.num_items, 12, replace=False)
        return items if layout == "full" else cfg.cuckoo().assign(items, gen)[0]

    users = [proto.make_user(cfg) for _ in range(6)]
    indices = [slots() for _ in users]
    done = proto.make_user(cfg)
    done.retrieval_request(slots())  # a user that already asked this round
    users.append(done)
    indices.append(slots())
    users.append(proto.make_user(cfg))
    indices.append(np.zeros(cfg.slots + 1, np.int64))  # the wrong shape
    if layout == "cuckoo":
        wrong = slots()
        full = np.flatnonzero(wrong >= 0)
        wrong[full[0]], wrong[full[1]] = wrong[full[1]], wrong[full[0]]  # two items swap buckets
        if np.array_equal(np.sort(cfg.cuckoo().candidates[wrong[full[0]]]), np.sort(cfg.cuckoo().candidates[
                wrong[full[1]]])):
            pytest.skip("the two items share their buckets")  # pragma: no cover - not with this seed
        users.append(proto.make_user(cfg))
        indices.append(wrong)
    out = SecEmbUser.retrieval_requests(users, indices)
    assert all(isinstance(o, tuple) for o in out[:6])
    assert isinstance(out[6], ProtocolError) and isinstance(out[7], InvalidParameters)
    if layout == "cuckoo":
        assert isinstance(out[8], InvalidParameters) and "does not hold it" in str(out[8])
        assert users[8]._state is None  # refused: no keys kept
    if relay:  # each user its own secret seeds
        assert len({s for u in users[:6] for s in u._seeds}) == 12
    for user in users[:6]:  # and its own key state, not a view of the batch's (other users')
        assert user._state is not None and user._state.leaf0.base is None and user._state.leaf1.base is None
    sparse = np.zeros_like(table)
    dense_sum = np.zeros(cfg.dense_size, cfg.dtype)
    for uid, (user, idx, got) in enumerate(zip(users[:6], indices[:6], out[:6], strict=True)):
        assert isinstance(got, tuple)
        r0, r1 = got
        if relay:
            fwd = s0.handle_retrieval(uid, r0)
            assert s1.handle_retrieval(uid, r1) is None
            reply0, reply1 = s0.complete_retrieval(uid, s1.relay_retrieval(uid, fwd)), None
        else:
            reply0, reply1 = s0.handle_retrieval(uid, r0), s1.handle_retrieval(uid, r1)
        rows = user.retrieval_result(reply0, reply1)
        real = idx >= 0
        assert np.array_equal(rows[real], table[idx[real]]) and not rows[~real].any()
        grads = _ring(gen, (cfg.slots, cfg.width), cfg)
        grads[~real] = 0
        dense = _ring(gen, (cfg.dense_size,), cfg)
        deliver_upload(s0, s1, relay, uid, *user.upload(grads, dense))
        np.add.at(sparse, idx[real], grads[real])
        dense_sum += dense
    got_sparse, got_dense = s0.combine(s1.aggregate_share())
    assert np.array_equal(got_sparse, sparse) and np.array_equal(got_dense, dense_sum)


def test_batched_request_messages_have_the_single_request_lengths() -> None:
    """Every user's messages from one batch have the lengths of a request made alone (the
    server cannot tell them apart), and two users' keys differ."""
    proto = SecEmbProtocol(layout="cuckoo", relay=True)
    cfg = proto.round_config(3, 300, 4, 5, 12, 32)
    gen = np.random.default_rng(2)
    indices = [cfg.cuckoo().assign(gen.choice(300, 12, replace=False), gen)[0] for _ in range(3)]
    alone = proto.make_user(cfg).retrieval_request(indices[0])
    batch = SecEmbUser.retrieval_requests([proto.make_user(cfg) for _ in indices], indices)
    assert all(isinstance(b, tuple) and tuple(map(len, b)) == tuple(map(len, alone)) for b in batch)
    assert len({b[0] for b in batch if isinstance(b, tuple)}) == 3
