"""The DPF key byte format: exact length, exact round trip, rejection of untrusted bytes with
``InvalidKey`` whatever is wrong, and simple statistics showing that one party's keys do not
depend on the point ``alpha``."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from fss_reference import ref_parse
from fss_strategies import DPFCase, dpf_cases, random_ring, ring_dtype
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secemb import fss
from secemb.errors import InvalidKey, InvalidMessage, InvalidParameters
from secemb.randomness import CtrDrbg

FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# the framing header (magic, version, protocol, kind, flags, party, peer, round, body length)
# and the key parameters (ring, domain, width, count), docs/wire-format.md
FRAME = struct.Struct("<4sBBBBIIQQ")
PARAMS = struct.Struct("<BQII")
PREFIX = 49  # bytes before the roots: 32 + 17
# field offsets (docs/wire-format.md)
(
    OFF_MAGIC,
    OFF_VERSION,
    OFF_KIND,
    OFF_PARTY,
    OFF_BODY_LEN,
    OFF_RING,
    OFF_DOMAIN,
    OFF_WIDTH,
    OFF_COUNT,
) = 0, 4, 6, 8, 24, 32, 33, 41, 45


def _formula(k: int, m: int, d: int, ring_bits: int) -> int:
    n = (m - 1).bit_length()  # ceil(log2 m)
    return PREFIX + k * (16 + 16 * n + -(-n // 8) + d * ring_bits // 8)


def _keys(case: DPFCase) -> tuple[fss.DPFKeys, fss.DPFKeys]:
    return fss.gen(
        case.alphas,
        case.betas,
        case.domain_size,
        ring_bits=case.ring_bits,
        _rng=case.rng(),
    )


def _sample_keys(
    m: int = 1000, k: int = 3, d: int = 2, ring_bits: int = 32, seed: int = 0
) -> tuple[fss.DPFKeys, fss.DPFKeys]:
    gen = np.random.default_rng(seed)
    return fss.gen(
        gen.integers(0, m, k),
        random_ring(gen, (k, d), ring_bits),
        m,
        ring_bits=ring_bits,
        _rng=CtrDrbg(seed),
    )


def _patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into("<" + fmt, buf, offset, value)
    return bytes(buf)


def _expect(keys: fss.DPFKeys) -> dict[str, int]:
    p = keys.params
    return {
        "domain_size": p.domain_size,
        "party": keys.party,
        "count": len(keys),
        "payload_width": p.payload_width,
        "ring_bits": p.ring_bits,
    }


def _same_keys(a: fss.DPFKeys, b: fss.DPFKeys) -> None:
    assert a.params == b.params and a.party == b.party
    for name in ("roots", "cw_seed", "cw_tl", "cw_tr"):
        x, y = getattr(a.path, name), getattr(b.path, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.cw_out.dtype == b.cw_out.dtype and np.array_equal(a.cw_out, b.cw_out)


# ------------------------------------------------------------------- length and round trip


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("width", [1, 65])
@pytest.mark.parametrize("m", [1, 2, 3, 255, 256, 257, 1682, 3883, (1 << 17) + 1])
def test_serialized_length_matches_documented_formula(
    m: int, width: int, ring_bits: int
) -> None:
    k = 3
    k0, k1 = _sample_keys(m, k, width, ring_bits)
    want = _formula(k, m, width, ring_bits)
    assert len(k0.to_bytes()) == len(k1.to_bytes()) == want
    assert k0.params.key_bytes * k + PREFIX == want
    assert len(k0.path.to_bytes()) == PREFIX + k * k0.params.path_key_bytes


def test_serialized_length_of_movielens_retrieval_key() -> None:
    """docs/wire-format.md: m = 1682, d = 1, k = 32 gives 198 bytes per key."""
    assert fss.DPFParams(1682, 1, 32).key_bytes == 198


@FAST
@given(dpf_cases(max_keys=5))
def test_key_length_matches_formula_for_any_case(case: DPFCase) -> None:
    k0, k1 = _keys(case)
    want = _formula(
        len(case.alphas), case.domain_size, case.betas.shape[1], case.ring_bits
    )
    assert len(k0.to_bytes()) == len(k1.to_bytes()) == want


@pytest.mark.parametrize("m", [2, 3, 1000, 3883])
def test_key_length_does_not_depend_on_alpha(m: int) -> None:
    lengths = set()
    for alphas in ([0, 0], [m - 1, m - 1], [0, m - 1], [m // 2, 1]):
        k0, k1 = fss.gen(alphas, np.ones((2, 4), np.uint32), m)
        lengths |= {
            len(k0.to_bytes()),
            len(k1.to_bytes()),
            len(k0.path.to_bytes()) + 2 * 16,
        }
    assert lengths == {_formula(2, m, 4, 32)}


@FAST
@given(dpf_cases(max_keys=5))
def test_round_trip_is_exact(case: DPFCase) -> None:
    for b, keys in enumerate(_keys(case)):
        data = keys.to_bytes()
        assert isinstance(data, bytes)
        back = fss.DPFKeys.from_bytes(data)
        _same_keys(back, keys)
        assert back.to_bytes() == data
        assert type(keys).from_bytes(data, **_expect(keys)).to_bytes() == data
        assert np.array_equal(fss.eval_full(back, b), fss.eval_full(keys, b))


@FAST
@given(dpf_cases(max_keys=5))
def test_path_round_trip_is_exact(case: DPFCase) -> None:
    for keys in _keys(case):
        data = keys.path.to_bytes()
        back = fss.PathKeys.from_bytes(
            data, domain_size=case.domain_size, party=keys.party, count=len(keys)
        )
        assert back.to_bytes() == data
        assert np.array_equal(back.roots, keys.path.roots) and np.array_equal(
            back.cw_tr, keys.path.cw_tr
        )


def test_round_trip_accepts_bytearray_and_memoryview() -> None:
    k0, _ = _sample_keys()
    data = k0.to_bytes()
    assert fss.DPFKeys.from_bytes(bytearray(data)).to_bytes() == data
    assert fss.DPFKeys.from_bytes(memoryview(data)).to_bytes() == data
    assert fss.DPFKeys.from_bytes(memoryview(b"xx" + data)[2:]).to_bytes() == data


def test_serialized_keys_follow_the_documented_layout() -> None:
    """An independent parser written from docs/wire-format.md reads back the arrays."""
    for ring_bits in (32, 64):
        k0, k1 = _sample_keys(m=300, k=4, d=3, ring_bits=ring_bits)
        for keys in (k0, k1):
            ref = ref_parse(keys.to_bytes())
            assert (ref.kind, ref.party, ref.ring_bits, ref.domain_size, ref.width) == (
                1,
                keys.party,
                ring_bits,
                300,
                3,
            )
            for i, rk in enumerate(ref.keys):
                lo, hi = (int(v) for v in keys.path.roots[i])
                assert rk.root == lo | hi << 64
                assert rk.cw_tl == [int(v) for v in keys.path.cw_tl[i]]
                assert rk.cw_tr == [int(v) for v in keys.path.cw_tr[i]]
                assert rk.cw_seed == [
                    int(s[0]) | int(s[1]) << 64 for s in keys.path.cw_seed[i]
                ]
                assert rk.cw_out == [int(v) for v in keys.cw_out[i]]


def test_both_parties_share_correction_words_but_not_roots() -> None:
    k0, k1 = _sample_keys(k=50)
    b0, b1 = k0.to_bytes(), k1.to_bytes()
    roots = PREFIX + 50 * 16
    assert b0[roots:] == b1[roots:]
    r0, r1 = k0.path.roots, k1.path.roots
    assert np.all(r0[:, 0] & 1 == 0) and np.all(r1[:, 0] & 1 == 1)
    assert not np.any(r0[:, 1] == r1[:, 1])


# ------------------------------------------------------------------- untrusted bytes


@FAST
@given(dpf_cases(max_domain=600, max_keys=3, max_width=3), st.data())
def test_flipped_byte_is_rejected_or_parses_canonically(
    case: DPFCase, data: st.DataObject
) -> None:
    """A flip is either caught (InvalidKey, nothing else) or it changed key material that has
    no redundancy, and then the parsed key serializes back to exactly the flipped bytes (the
    encoding is canonical).  Header flips are always caught when the receiver states what it
    expects."""
    keys = _keys(case)[data.draw(st.integers(0, 1))]
    good = keys.to_bytes()
    pos = data.draw(st.integers(0, len(good) - 1))
    mask = data.draw(st.integers(1, 255))
    bad = bytearray(good)
    bad[pos] ^= mask
    bad = bytes(bad)
    try:
        parsed = fss.DPFKeys.from_bytes(bad)
    except InvalidKey:
        pass
    else:
        assert parsed.to_bytes() == bad
    if pos < PREFIX:
        with pytest.raises(InvalidKey):
            fss.DPFKeys.from_bytes(bad, **_expect(keys))
    if PREFIX <= pos < PREFIX + 16 * len(keys) and (pos - PREFIX) % 16 == 0 and mask & 1:
        with pytest.raises(InvalidKey, match="root control bit"):
            fss.DPFKeys.from_bytes(bad)


@FAST
@given(dpf_cases(max_domain=600, max_keys=3, max_width=3), st.data())
def test_truncated_bytes_are_rejected(case: DPFCase, data: st.DataObject) -> None:
    k0, k1 = _keys(case)
    good, path = k0.to_bytes(), k1.path.to_bytes()
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(good[: data.draw(st.integers(0, len(good) - 1))])
    with pytest.raises(InvalidKey):
        fss.PathKeys.from_bytes(path[: data.draw(st.integers(0, len(path) - 1))])


@FAST
@given(
    dpf_cases(max_domain=600, max_keys=3, max_width=3),
    st.binary(min_size=1, max_size=64),
)
def test_extended_bytes_are_rejected(case: DPFCase, extra: bytes) -> None:
    k0, k1 = _keys(case)
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(k0.to_bytes() + extra)
    with pytest.raises(InvalidKey):
        fss.PathKeys.from_bytes(k1.path.to_bytes() + extra)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_invalid_key(data: bytes) -> None:
    for parse in (fss.DPFKeys.from_bytes, fss.PathKeys.from_bytes):
        try:
            parse(data)
        except InvalidKey:
            pass


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([1, 2]),
    st.integers(0, 2),
    st.sampled_from([0, 8, 16, 32, 64, 128, 255]),
    st.integers(0, 2**64 - 1) | st.integers(0, 70),
    st.integers(0, 2**32 - 1) | st.integers(0, 3),
    st.integers(0, 2**32 - 1) | st.integers(0, 3),
    st.binary(max_size=300),
)
def test_forged_headers_raise_only_invalid_key(
    kind: int, party: int, ring: int, m: int, width: int, count: int, body: bytes
) -> None:
    """Well-formed magic and version, every other header field attacker-chosen."""
    data = FRAME.pack(b"SEMB", 2, 255, kind, 0, party, 0, 0, PARAMS.size + len(body)) + PARAMS.pack(
        ring, m, width, count) + body
    for parse in (fss.DPFKeys.from_bytes, fss.PathKeys.from_bytes):
        try:
            keys = parse(data)
        except InvalidKey:
            continue
        assert (
            keys.to_bytes() == data
        )  # whatever parses is a canonical, consistent batch


def _one_case() -> tuple[fss.DPFKeys, bytes]:
    k0, _ = _sample_keys(m=1000, k=3, d=2)  # n = 10: cw_tr has 6 padding bits per key
    return k0, k0.to_bytes()


@pytest.mark.parametrize("magic", [b"SEDL", b"semb", b"\x00\x00\x00\x00", b"SEDK"])
def test_from_bytes_fails_if_magic_wrong(magic: bytes) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey, match="not a secemb key batch"):
        fss.DPFKeys.from_bytes(magic + data[4:])


@pytest.mark.parametrize("version", [0, 1, 255])
def test_from_bytes_fails_if_version_unsupported(version: int) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey, match="version"):
        fss.DPFKeys.from_bytes(_patch(data, OFF_VERSION, "B", version))


@pytest.mark.parametrize("kind", [0, 2, 3, 255])
def test_from_bytes_fails_if_kind_wrong(kind: int) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey, match="kind"):
        fss.DPFKeys.from_bytes(_patch(data, OFF_KIND, "B", kind))


def test_path_from_bytes_fails_if_given_full_keys() -> None:
    k0, data = _one_case()
    with pytest.raises(InvalidKey, match="kind"):
        fss.PathKeys.from_bytes(data)
    with pytest.raises(InvalidKey, match="kind"):
        fss.DPFKeys.from_bytes(k0.path.to_bytes())


@pytest.mark.parametrize("party", [2, 3, 255])
def test_from_bytes_fails_if_party_not_zero_or_one(party: int) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey, match="party"):
        fss.DPFKeys.from_bytes(_patch(data, OFF_PARTY, "B", party))


def test_from_bytes_fails_if_party_is_not_the_expected_one() -> None:
    k0, data = _one_case()
    with pytest.raises(InvalidKey, match="party"):
        fss.DPFKeys.from_bytes(data, party=1)
    with pytest.raises(InvalidKey, match="party"):
        fss.PathKeys.from_bytes(k0.path.to_bytes(), party=1)


def test_from_bytes_fails_if_header_party_disagrees_with_root_control_bits() -> None:
    """Relabelling party 0's keys as party 1's is caught by t_b^(0) = b."""
    _, data = _one_case()
    with pytest.raises(InvalidKey, match="root control bit"):
        fss.DPFKeys.from_bytes(_patch(data, OFF_PARTY, "B", 1))


@pytest.mark.parametrize("key_index", [0, 1, 2])
def test_from_bytes_fails_if_root_control_bit_not_party(key_index: int) -> None:
    _, data = _one_case()
    bad = bytearray(data)
    bad[PREFIX + 16 * key_index] ^= 1
    with pytest.raises(InvalidKey, match="root control bit"):
        fss.DPFKeys.from_bytes(bytes(bad))


@pytest.mark.parametrize(
    "bit", [2, 3, 4, 5, 6, 7]
)  # n = 10 uses bits 0, 1 of the second byte
def test_from_bytes_fails_if_padding_bits_nonzero(bit: int) -> None:
    k0, data = _one_case()
    n = k0.params.depth
    tr_start = PREFIX + 3 * 16 + 3 * n * 16
    bad = bytearray(data)
    bad[tr_start + 2 * 2 - 1] |= 1 << bit  # last byte of the last key's cw_tr
    with pytest.raises(InvalidKey, match="padding bits"):
        fss.DPFKeys.from_bytes(bytes(bad))
    ok = bytearray(data)
    ok[tr_start + 2 * 2 - 1] ^= 1 << (bit - 2)  # a real tCW_R bit: parses
    if bit - 2 < n % 8:
        assert fss.DPFKeys.from_bytes(bytes(ok)).to_bytes() == bytes(ok)


@pytest.mark.parametrize("ring", [0, 16, 33, 128, 64])
def test_from_bytes_fails_if_ring_wrong(ring: int) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(_patch(data, OFF_RING, "B", ring))


def test_from_bytes_fails_if_ring_is_not_the_expected_one() -> None:
    k64, _ = _sample_keys(ring_bits=64)
    with pytest.raises(InvalidKey, match="ring_bits"):
        fss.DPFKeys.from_bytes(k64.to_bytes(), ring_bits=32)
    # a consistent 64-bit batch with half the width has the 32-bit batch's length
    kw, _ = _sample_keys(d=1, ring_bits=64)
    k32, _ = _sample_keys(d=2, ring_bits=32)
    assert len(kw.to_bytes()) == len(k32.to_bytes())
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(kw.to_bytes(), ring_bits=32, payload_width=2)


@pytest.mark.parametrize("m", [0, 2**40 + 1, 2**64 - 1])
def test_from_bytes_fails_if_domain_size_invalid(m: int) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(_patch(data, OFF_DOMAIN, "Q", m))


def test_from_bytes_fails_if_domain_size_not_the_expected_one() -> None:
    """Domains of the same depth have keys of the same length: only the header tells them
    apart, and the receiver must check it."""
    _, data = _one_case()
    other = _patch(data, OFF_DOMAIN, "Q", 1023)  # same depth 10
    assert fss.DPFKeys.from_bytes(other).params.domain_size == 1023
    with pytest.raises(InvalidKey, match="domain size"):
        fss.DPFKeys.from_bytes(other, domain_size=1000)
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(
            _patch(data, OFF_DOMAIN, "Q", 1025)
        )  # depth 11: wrong length


@pytest.mark.parametrize("width", [0, 1, 3, 2**20 + 1, 2**32 - 1])
def test_from_bytes_fails_if_width_wrong(width: int) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(_patch(data, OFF_WIDTH, "I", width))


def test_from_bytes_fails_if_width_zero_even_with_matching_length() -> None:
    k0, _ = _sample_keys(k=2, d=1)
    data = k0.to_bytes()
    body_len = len(data) - PREFIX - 2 * 4  # drop the cw_out words
    forged = _patch(_patch(data, OFF_WIDTH, "I", 0), OFF_BODY_LEN, "Q", PREFIX - 32 + body_len)[: PREFIX + body_len]
    with pytest.raises(InvalidKey, match="width"):
        fss.DPFKeys.from_bytes(forged)


@pytest.mark.parametrize("count", [0, 2, 4, 2**32 - 1])
def test_from_bytes_fails_if_count_wrong(count: int) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(_patch(data, OFF_COUNT, "I", count))


@pytest.mark.parametrize(
    "expect",
    [
        {"domain_size": 999},
        {"party": 1},
        {"count": 2},
        {"payload_width": 1},
        {"ring_bits": 64},
    ],
)
def test_from_bytes_fails_if_expectation_not_met(expect: dict[str, int]) -> None:
    _, data = _one_case()
    with pytest.raises(InvalidKey):
        fss.DPFKeys.from_bytes(data, **expect)


def test_path_from_bytes_fails_if_ring_or_width_set() -> None:
    k0, _ = _one_case()
    data = k0.path.to_bytes()
    for off, fmt in ((OFF_RING, "B"), (OFF_WIDTH, "I")):
        with pytest.raises(InvalidKey, match="ring_bits 0 and width 0"):
            fss.PathKeys.from_bytes(_patch(data, off, fmt, 32))


@pytest.mark.parametrize("data", [b"", b"SEDK", b"SEDK\x01\x01\x00\x20" + bytes(15)])
def test_from_bytes_fails_if_shorter_than_header(data: bytes) -> None:
    with pytest.raises(InvalidKey, match="too short"):
        fss.DPFKeys.from_bytes(data)


@pytest.mark.parametrize("data", ["SEDK", None, 12, [1, 2]])
def test_from_bytes_fails_if_not_bytes(data: object) -> None:
    with pytest.raises(TypeError):
        fss.DPFKeys.from_bytes(data)  # type: ignore[arg-type]


def test_invalid_key_is_an_invalid_message_and_a_value_error() -> None:
    assert issubclass(InvalidKey, InvalidMessage) and issubclass(InvalidKey, ValueError)
    with pytest.raises(InvalidMessage):
        fss.DPFKeys.from_bytes(b"junk" * 10)
    with pytest.raises(ValueError):
        fss.DPFKeys.from_bytes(b"junk" * 10)


# ------------------------------------------------------------------- indistinguishability

STAT_KEYS = 20_000  # per setting; seeded, so the test is deterministic
STAT_M = 3883  # n = 12: the second cw_tr byte has 4 padding bits


def _bit_matrix(keys: fss.DPFKeys) -> tuple[np.ndarray, np.ndarray]:
    """Per key, every serialized bit of its key material, (K, bits) uint8, and a boolean
    mask of the positions that are public constants (root bit 0 = party, cw_tr padding)."""
    k, p = len(keys), keys.params
    n = p.depth
    body = np.frombuffer(keys.to_bytes(), np.uint8, offset=PREFIX)
    parts, const = [], []
    off = 0
    for per_key in (16, 16 * n, (n + 7) // 8, p.cw_bytes):
        field = body[off : off + k * per_key].reshape(k, per_key)
        off += k * per_key
        parts.append(np.unpackbits(field, axis=1, bitorder="little"))
        const.append(np.zeros(8 * per_key, bool))
    const[0][0] = True  # root control bit
    const[2][n:] = True  # cw_tr padding bits
    assert off == body.size
    return np.concatenate(parts, axis=1), np.concatenate(const)


def _stat_keys(alpha_kind: str, party: int, ring_bits: int = 32) -> fss.DPFKeys:
    m, k = STAT_M, STAT_KEYS
    alphas = {
        "first": np.zeros(k, np.int64),
        "last": np.full(k, m - 1, np.int64),
        "random": np.random.default_rng(1).integers(0, m, k),
    }[alpha_kind]
    betas = np.ones((k, 1), ring_dtype(ring_bits))  # the retrieval payload: a constant
    keys = fss.gen(
        alphas, betas, m, ring_bits=ring_bits, _rng=CtrDrbg(alpha_kind.encode())
    )
    return keys[party]


@pytest.fixture(scope="module")
def stat_bits() -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    return {
        (a, b): _bit_matrix(_stat_keys(a, b))
        for a in ("first", "last", "random")
        for b in (0, 1)
    }


def test_key_bits_are_balanced_for_every_alpha(stat_bits) -> None:
    """Each bit position of one party's keys (roots, seed CWs, tCW_L, tCW_R, CW_out) is 1 in
    0.5 +- 0.02 of 20,000 keys (5.7 sigma), for alpha = 0, alpha = m - 1 and random alpha."""
    for (alpha_kind, party), (bits, const) in stat_bits.items():
        freq = bits.mean(axis=0)
        worst = np.abs(freq[~const] - 0.5).max()
        assert worst < 0.02, (
            alpha_kind,
            party,
            worst,
            int(np.abs(freq - 0.5)[~const].argmax()),
        )
        assert np.all(freq[const][1:] == 0.0)  # padding bits all zero
        assert freq[0] == party  # root control bit is the party
        assert abs(bits[:, ~const].mean() - 0.5) < 0.002  # > 30 M bits overall


def test_key_bit_statistics_same_for_first_and_last_alpha(stat_bits) -> None:
    for party in (0, 1):
        (b0, const), (b1, _) = stat_bits[("first", party)], stat_bits[("last", party)]
        diff = np.abs(b0.mean(axis=0) - b1.mean(axis=0))[~const]
        assert diff.max() < 0.03  # difference of two 20k-sample means: sigma 0.005


def test_control_bit_corrections_are_balanced_per_level(stat_bits) -> None:
    """tCW_L, tCW_R and tCW_L XOR tCW_R at every level look like fair coins, whatever alpha's
    bit at that level is (alpha = 0 goes left everywhere, alpha = m - 1 mostly right)."""
    n = (STAT_M - 1).bit_length()
    for alpha_kind in ("first", "last", "random"):
        keys = _stat_keys(alpha_kind, 0)
        tl, tr = keys.path.cw_tl.astype(float), keys.path.cw_tr.astype(float)
        assert tl.shape == tr.shape == (STAT_KEYS, n)
        for series in (tl, tr, (keys.path.cw_tl ^ keys.path.cw_tr).astype(float)):
            assert np.all(np.abs(series.mean(axis=0) - 0.5) < 0.02), (
                alpha_kind,
                series.mean(axis=0),
            )


def test_roots_and_correction_words_overall_bit_balance() -> None:
    """Over >= 100k bits each: root seeds (127 random bits per root) and seed correction
    words (127 bits per level), for several alphas, both rings."""
    for ring_bits in (32, 64):
        for alpha in (0, 1, 2047, 2048, 4095):
            k0, k1 = fss.gen(
                np.full(1000, alpha),
                np.ones((1000, 1), ring_dtype(ring_bits)),
                4096,
                ring_bits=ring_bits,
            )
            for keys in (k0, k1):
                roots = keys.path.roots.copy()
                roots[:, 0] >>= np.uint64(1)
                root_bits = np.unpackbits(roots.view(np.uint8))
                cw = keys.path.cw_seed.copy()
                cw[..., 0] >>= np.uint64(1)
                cw_bits = np.unpackbits(cw.view(np.uint8))
                out_bits = np.unpackbits(keys.cw_out.view(np.uint8))
                assert root_bits.size >= 100_000 and cw_bits.size >= 100_000
                # the shifted-in top bit of the low word is always 0: 1 of 128 bits
                assert abs(root_bits.mean() - 0.5 * 127 / 128) < 0.02
                assert abs(cw_bits.mean() - 0.5 * 127 / 128) < 0.02
                assert abs(out_bits.mean() - 0.5) < 0.02


def test_roots_of_the_two_parties_are_independent() -> None:
    k0, k1 = _stat_keys("first", 0), _stat_keys("first", 1)
    x = k0.path.roots ^ k1.path.roots
    x[:, 0] >>= np.uint64(1)  # the differing control bits
    bits = np.unpackbits(x.view(np.uint8))
    assert abs(bits.mean() - 0.5 * 127 / 128) < 0.005
    assert len({bytes(r) for r in k0.path.roots}) == STAT_KEYS


# ------------------------------------------------------------------- many batches at once


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_parsing_many_batches_gives_each_its_keys_or_its_error(ring_bits: int) -> None:
    """``from_bytes_many`` (and ``from_shared_many``) answer each input as ``from_bytes``
    (``from_shared``) does alone: the same keys, or an error with the same message."""
    batches = [_sample_keys(m=1000, k=3, d=2, ring_bits=ring_bits, seed=s) for s in range(4)]
    k0 = batches[0][0]
    n = k0.params.depth
    good = [b[0].to_bytes() for b in batches]
    root_bit = bytearray(good[1])
    root_bit[PREFIX + 16] ^= 1  # the second key's root control bit
    padding = bytearray(good[2])
    padding[PREFIX + 3 * 16 + 3 * n * 16 + 1] |= 1 << 7  # a padding bit of the first key's cw_tr
    inputs = [good[0], bytes(root_bit), good[3][:-1], b"SEDL" + good[0][4:], bytes(padding), good[3],
              _patch(good[0], OFF_DOMAIN, "Q", 999), b""]
    expect = _expect(k0)
    many = fss.DPFKeys.from_bytes_many(inputs, **expect)
    assert len(many) == len(inputs)
    for data, got in zip(inputs, many, strict=True):
        try:
            want = fss.DPFKeys.from_bytes(data, **expect)
        except InvalidKey as exc:
            assert isinstance(got, InvalidKey) and str(got) == str(exc)
        else:
            assert isinstance(got, fss.DPFKeys)
            _same_keys(got, want)
    assert [isinstance(x, fss.DPFKeys) for x in many] == [True, False, False, False, False, True, False, False]

    shared = [(b[0].shared_bytes(), b[1].path.roots.astype("<u8").tobytes()) for b in batches]
    shared[1] = (shared[1][0], shared[1][1][:-16])  # too few roots
    shared[2] = (good[2], shared[2][1])  # a full batch where a shared part belongs
    expect1 = dict(expect, party=1)
    del expect1["party"]
    for (part, roots), got in zip(shared, fss.DPFKeys.from_shared_many(shared, 1, **expect1), strict=True):
        try:
            want = fss.DPFKeys.from_shared(part, roots, 1, **expect1)
        except InvalidKey as exc:
            assert isinstance(got, InvalidKey) and str(got) == str(exc)
        else:
            assert isinstance(got, fss.DPFKeys)
            _same_keys(got, want)


@pytest.mark.parametrize(("users", "per", "lo", "hi"), [(1, 4, 0, 4), (3, 5, 1, 3), (4, 6, 5, 6), (2, 3, 0, 0)])
def test_blocks_are_the_concatenated_slices(users: int, per: int, lo: int, hi: int) -> None:
    """``blocks`` picks keys ``lo..hi-1`` of every user's batch of ``per`` keys, user after
    user, as concatenating each user's slice does."""
    rng = np.random.default_rng(users * 10 + per)
    batches = [fss.gen(rng.integers(0, 37, per), random_ring(rng, (per, 3), 32), 37, _rng=CtrDrbg(u))[1]
               for u in range(users)]
    got = fss.DPFKeys.concat(batches).blocks(users, lo, hi)
    want = fss.DPFKeys.concat([b[lo:hi] for b in batches])
    assert len(got) == users * (hi - lo) and got.party == want.party == 1
    for field in ("roots", "cw_seed", "cw_tl", "cw_tr"):
        assert np.array_equal(getattr(got.path, field), getattr(want.path, field))
    assert np.array_equal(got.cw_out, want.cw_out) and got.to_bytes() == want.to_bytes()


@pytest.mark.parametrize("m, width, k, parts", [(30, 1, 12, 3), (1000, 3, 8, 8), (2, 2, 6, 1), (5000, 1, 20, 4)])
def test_split_serialization_is_each_batch_serialized_alone(m: int, width: int, k: int, parts: int) -> None:
    """``to_bytes_split``: one serialization cut into the bytes each equal batch of keys (one
    user's, of keys made for many users at once) would have alone, and each parses back."""
    alphas = np.random.default_rng(m).integers(0, m, k)
    k0, _ = fss.gen(alphas, np.ones((k, width), np.uint32), m)
    c = k // parts
    got = k0.to_bytes_split(parts)
    assert got == [k0[i * c : (i + 1) * c].to_bytes() for i in range(parts)]
    again = fss.DPFKeys.from_bytes(got[-1])
    assert np.array_equal(again.path.roots, k0.path.roots[-c:]) and np.array_equal(again.cw_out, k0.cw_out[-c:])
    with pytest.raises(InvalidParameters, match="cannot split"):
        k0.to_bytes_split(k + 1)
