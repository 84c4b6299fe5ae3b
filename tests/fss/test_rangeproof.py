"""secemb.fss.rangeproof: honest devices pass, cheating devices and tampered messages are rejected.

The statements are built from plain Python integers here (the shares, their signed sum and its
wrap); cheating witnesses are written by hand and proven with the prover's unchecked core."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import rangeproof as R
from secemb.randomness import CtrDrbg

P = 2**61 - 1
K = 32
T = 8
ROWS = 6
PARAMS = R.RangeParams(rows=ROWS, bits=T, ring_bits=K)
QSEED = b"query seed 0123456789"


def _shares(values: list[int], a: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Ring shares (a, b) with a + b = value mod 2^K for the given a."""
    b = [(v - x) % 2**K for v, x in zip(values, a, strict=True)]
    return np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)


def _signed(v: int) -> int:
    v %= 2**K
    return v - 2**K if v >= 2 ** (K - 1) else v


def _witness(a: np.ndarray, b: np.ndarray, t: int = T, k: int = K) -> list[list[int]]:
    """The honest witness rows, computed with Python ints: the m = ceil(t/2) base-4 digits of
    f u (f = 2^(2m - t), u = signed value + 2^(t-1)), low first, then the wrap w."""
    m = (t + 1) // 2
    rows = []
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        s = (x + y) % 2**k
        s = s - 2**k if s >= 2 ** (k - 1) else s
        u = s + 2 ** (t - 1)
        w = (x + y - s) // 2**k
        fu = u * 2 ** (2 * m - t)
        rows.append([fu // 4**j % 4 for j in range(m)] + [w])
    return rows


def _flat(rows: list[list[int]]) -> np.ndarray:
    return np.array([v % P for row in rows for v in row], dtype=np.uint64)


def _verify(params, proofs, a_rows, b_rows, contexts, qseed=QSEED, qseed1=None, contexts1=None) -> np.ndarray:
    """Both servers' run over a batch: parse, verifier messages, decide (checked symmetric)."""
    s0 = R.parse(params, 0, [m0 for m0, _ in proofs])
    s1 = R.parse(params, 1, [m1 for _, m1 in proofs])
    v0 = R.verifier_messages(params, 0, s0, np.array(a_rows, dtype=np.uint64), contexts, qseed)
    v1 = R.verifier_messages(params, 1, s1, np.array(b_rows, dtype=np.uint64), contexts1 or contexts,
                             qseed1 or qseed)
    assert v0.shape == v1.shape == (len(proofs), params.verifier_length) and v0.dtype == np.uint64
    ok = R.decide(params, v0, v1)
    np.testing.assert_array_equal(ok, R.decide(params, v1, v0))
    return ok


def _run_one(a, b, proof, ctx=b"ctx") -> bool:
    return bool(_verify(PARAMS, [proof], [a], [b], [ctx])[0])


def _rng(seed: int = 1) -> CtrDrbg:
    return CtrDrbg(seed)


#: the verifier's numpy reference and, where numba runs, its compiled pass (the same field elements)
BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(kernels, "BACKEND", request.param)
    return str(request.param)


# -- parameters -------------------------------------------------------------------------------------


def test_sizes_at_the_default_configuration():
    for bits in (25, 26):  # odd and even t, both m = 13 digits
        p = R.RangeParams(rows=40, bits=bits, ring_bits=32)
        # N = 40 * (13 + 1) = 560.  c minimizes c + 2 ceil(560 / c) >= c + 1120 / c >= 2 sqrt(1120) > 66.9:
        # 33 + 2 * 17 = 67 (35 + 2 * 16 = 67 too), while 32 + 36, 31 + 38, 30 + 38, 29 + 40, 28 + 40 are
        # 68 or more, and below 28 c + 1120 / c > 68.  M = 2 * 17 = 34, L = 66,
        # proof = 2 * 66 seeds + (4 * 34 + 5) gadget values = 273
        assert (p.digits, p.witness_length, p.chunk, p.calls, p.wires, p.proof_length) == (13, 560, 33, 34, 66, 273)
        assert p.message_bytes(0) == 16 + 32 + 8 * (560 + 273) == 6_712
        assert p.message_bytes(1) == 48
        # z, then per point 66 wires and the gadget value, then jr (4 words)
        assert p.verifier_length == 2 * 66 + 3 + 4 and p.verifier_bytes == 1_112
    with pytest.raises(InvalidParameters):
        p.message_bytes(2)
    # t = 24: N = 40 * 13 = 520, c = 29 (29 + 2 * 18 = 65 = 2 sqrt(1040) rounded up: the least),
    # M = 36, proof = 116 + 149 = 265
    p = R.RangeParams(rows=40, bits=24, ring_bits=32)
    assert (p.witness_length, p.chunk, p.calls, p.proof_length, p.message_bytes(0)) == (520, 29, 36, 265, 6_328)


def test_chunk_is_the_least_that_minimizes_the_proof_length():
    # against a search over every c in 1..N (the code searches a bounded range)
    for n in range(1, 700):
        lengths = [4 * c + 8 * -(-n // c) + 5 for c in range(1, n + 1)]
        assert R._chunk(n) == 1 + lengths.index(min(lengths)), n
    # through the parameters: m = 1 (bits 2), N = 2 rows; N = 2: c = 2 (2 + 2 < 1 + 4), N = 26: c = 7
    assert [R.RangeParams(rows=r, bits=2, ring_bits=4).chunk for r in (1, 2, 13)] == [2, 2, 7]


@pytest.mark.parametrize(
    "kwargs",
    [dict(rows=0, bits=8), dict(rows=2, bits=1), dict(rows=2, bits=31), dict(rows=2, bits=8, ring_bits=59),
     dict(rows=2, bits=2, ring_bits=3), dict(rows=2.0, bits=8), dict(rows=2, bits=True)],
)
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(InvalidParameters):
        R.RangeParams(**kwargs)


# -- honest devices ---------------------------------------------------------------------------------


def test_honest_proofs_pass_at_the_edges_zero_random_values_and_every_wrap():
    lo, hi = -(2 ** (T - 1)), 2 ** (T - 1) - 1
    cases = [
        # (values, server 0's shares)
        ([lo, hi, 0, 5, -3, 1], [0, 0, 0, 0, 0, 0]),
        ([lo, hi, 0, 5, -3, 1], [2**K - 1] * 6),
        ([hi, lo, -1, 0, 100, -100], [2**31, 12345, 2**K - 2, 7, 2**K - 1, 2**K - 1]),
    ]
    wraps = set()
    proofs, a_rows, b_rows, contexts = [], [], [], []
    for i, (values, a0) in enumerate(cases):
        a, b = _shares(values, a0)
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            wraps.add((x + y - _signed(x + y)) // 2**K)
        ctx = b"device %d" % i
        proofs.append(R.prove(PARAMS, a, b, ctx, _rng=_rng(i)))
        a_rows.append(a)
        b_rows.append(b)
        contexts.append(ctx)
    assert wraps == {0, 1, 2}
    gen = np.random.default_rng(7)  # the statement's values only, not secrets
    for i in range(3, 6):
        values = gen.integers(-(2 ** (T - 1)), 2 ** (T - 1), ROWS).tolist()
        a, b = _shares(values, gen.integers(0, 2**K, ROWS).tolist())
        ctx = b"device %d" % i
        proofs.append(R.prove(PARAMS, a, b, ctx, _rng=_rng(i)))
        a_rows.append(a)
        b_rows.append(b)
        contexts.append(ctx)
    assert all(len(m0) == PARAMS.message_bytes(0) and len(m1) == 48 for m0, m1 in proofs)
    assert _verify(PARAMS, proofs, a_rows, b_rows, contexts).tolist() == [True] * 6


@pytest.mark.parametrize("bits", [25, 26])
def test_honest_proof_passes_at_the_default_size(bits):
    p = R.RangeParams(rows=40, bits=bits, ring_bits=32)
    gen = np.random.default_rng(3)
    half = 2 ** (bits - 1)
    values = gen.integers(-half, half, 40).tolist()
    values[:2] = [-half, half - 1]
    a, b = _shares(values, gen.integers(0, 2**32, 40).tolist())
    proof = R.prove(p, a, b, b"round 1 user 7", _rng=_rng())
    assert _verify(p, [proof], [a], [b], [b"round 1 user 7"]).tolist() == [True]


def test_the_prover_writes_the_documented_witness():
    # the witness share server 0 gets plus server 1's expansion is the base-4 witness computed with Python ints
    for t in (T, 7):  # even (f = 1) and odd (f = 2: the digits of 2u)
        params = R.RangeParams(rows=ROWS, bits=t, ring_bits=K)
        a, b = _shares([-(2 ** (t - 1)), 2 ** (t - 1) - 1, 0, -1, 5, 1], [2**K - 1, 3, 0, 2**K - 1, 2**31, 9])
        m0, m1 = R.prove(params, a, b, b"ctx", _rng=_rng(t))
        x = F.add(R.parse(params, 0, [m0]).inputs[0], R.parse(params, 1, [m1]).inputs[0])
        assert x.tolist() == _flat(_witness(a, b, t)).tolist()
    # t = 7, value 2^6 - 1 = 63: u = 127, 2u = 254 = 3 * 64 + 3 * 16 + 3 * 4 + 2, digits (2, 3, 3, 3)
    assert _witness(*_shares([63], [0]), t=7) == [[2, 3, 3, 3, 0]]


def test_prove_refuses_values_just_out_of_range_and_malformed_shares():
    for t in (T, 7):
        params = R.RangeParams(rows=ROWS, bits=t, ring_bits=K)
        for bad in (2 ** (t - 1), -(2 ** (t - 1)) - 1, 2 ** (K - 1)):
            a, b = _shares([0, 0, bad, 0, 0, 0], [9] * ROWS)
            with pytest.raises(InvalidParameters, match="row 2"):
                R.prove(params, a, b, b"ctx")
    a, b = _shares([0] * ROWS, [9] * ROWS)
    for bad_a in (a[:-1], a.astype(float), np.full(ROWS, 2**K, dtype=np.uint64), np.full(ROWS, -1)):
        with pytest.raises(InvalidParameters):
            R.prove(PARAMS, bad_a, b, b"ctx")


# -- cheating devices -------------------------------------------------------------------------------


def test_the_digit_check_vanishes_exactly_on_0_1_2_3():
    # the gadget's outputs at the calls: sum_i s_i x_i (x_i - 1) (x_i - 2) (x_i - 3) over a call's slots, here
    # one row of one digit and the wrap (N = 2, c = 2, one call a half), s = (1, 2), s' = (3, 5)
    params = R.RangeParams(rows=1, bits=2, ring_bits=4)
    assert (params.witness_length, params.chunk, params.half_calls) == (2, 2, 1)
    slots = np.array([[1, 2], [3, 5]], dtype=np.uint64)
    inv2 = pow(2, P - 2, P)
    for pair in [(0, 1), (2, 3), (3, 0), (4, 0), (0, P - 1), (inv2, 3), (5, 2**60), (P - 2, P - 3), (1, 4)]:
        x = np.array(pair, dtype=np.uint64)
        d = [v * (v - 1) * (v - 2) * (v - 3) % P for v in pair]
        want = [(d[0] + 2 * d[1]) % P, (3 * d[0] + 5 * d[1]) % P]
        assert R._call_outputs(params, x, slots).tolist() == want, pair
        assert (want == [0, 0]) is all(v in (0, 1, 2, 3) for v in pair), pair


def _cheat(rows: list[list[int]], a, b, ctx=b"ctx", params=PARAMS) -> bool:
    proof = R._prove_witness(params, _flat(rows), ctx, _rng(5))
    return bool(_verify(params, [proof], [a], [b], [ctx])[0])


def _relation(row: list[int], a: int, b: int, t: int = T, k: int = K) -> int:
    """The ring relation's left side mod p for one row: f (a + b) + 2^(2m-1) - f 2^k w - sum_j 4^j d_j."""
    m = (t + 1) // 2
    f = 2 ** (2 * m - t)
    return (f * (a + b) + 2 ** (2 * m - 1) - f * 2**k * row[m] - sum(4**j * d for j, d in enumerate(row[:m]))) % P


def test_out_of_range_value_recomposed_with_a_digit_4_is_rejected():
    a, b = _shares([3, 2 ** (T - 1), 0, 0, 0, 0], [77] * ROWS)  # row 1 is just above the range
    rows = _witness(*_shares([3, 0, 0, 0, 0, 0], [77] * ROWS))
    # u = 2^(t-1) + 2^(t-1) = 2^t = 4^4: the top digit 4, everything else 0, no wrap (77 + b = 2^(t-1))
    rows[1] = [0, 0, 0, 4, 0]
    assert _relation(rows[1], int(a[1]), int(b[1])) == 0  # the relation alone would pass
    assert _cheat(rows, a, b) is False


def test_out_of_range_value_recomposed_with_a_digit_minus_one_is_rejected():
    a, b = _shares([-(2 ** (T - 1)) - 1, 0, 0, 0, 0, 0], [0] * ROWS)
    rows = _witness(*_shares([0] * ROWS, [0] * ROWS))
    # u = -1: the digit p - 1 in the lowest place; b = 2^K - 2^(t-1) - 1, so a + b = u - 2^(t-1) + 2^K
    rows[0] = [P - 1, 0, 0, 0, 1]
    assert _relation(rows[0], int(a[0]), int(b[0])) == 0
    assert _cheat(rows, a, b) is False


@pytest.mark.parametrize("place", [0, 3, 4])
def test_out_of_range_value_with_a_field_crafted_entry_is_rejected(place):
    # a value far out of range; one entry (a digit, or the wrap) chosen in F_p so that the relation holds mod p
    big = 2 ** (K - 2) + 5
    a, b = _shares([big] + [0] * (ROWS - 1), [1000] * ROWS)
    rows = _witness(*_shares([0] * ROWS, [1000] * ROWS))
    rows[0] = [1, 0, 2, 3, 0]
    weight = 2**K if place == 4 else 4**place  # the entry's weight in the relation (f = 1), with a minus sign
    rows[0][place] = 0
    rows[0][place] = _relation(rows[0], int(a[0]), int(b[0])) * pow(weight, P - 2, P) % P
    assert _relation(rows[0], int(a[0]), int(b[0])) == 0 and rows[0][place] not in (0, 1, 2, 3)
    assert _cheat(rows, a, b) is False


def test_wraps_of_3_and_4_and_a_changed_digit_are_rejected():
    a, b = _shares([5, -5, 0, 1, 2, 3], [2**K - 1] * ROWS)
    rows = _witness(a, b)
    assert _cheat(rows, a, b) is True  # the honest witness, through the same path
    for wrap in (3, 4):
        bad = [r[:] for r in rows]
        bad[1][4] = wrap
        assert _cheat(bad, a, b) is False, wrap
    for row, col in ((0, 0), (2, 3), (3, 4), (5, 1)):
        changed = [r[:] for r in rows]
        changed[row][col] ^= 1
        assert _cheat(changed, a, b) is False, (row, col)


def test_a_wrap_of_3_never_meets_the_relation():
    # the docstring's argument: u = a + b + 2^(t-1) - 3 2^k < 0 for all shares, so no digits recompose it.
    # At k = 4, t = 2 (one digit): every digit with the wrap 3, at the largest sums and others, is rejected
    params = R.RangeParams(rows=1, bits=2, ring_bits=4)
    proofs: list[tuple[bytes, bytes]] = []
    a_rows, b_rows, contexts = [], [], []
    for i, (a, b) in enumerate([(15, 15), (15, 14), (8, 9), (0, 0)]):
        for digit in range(4):
            assert _relation([digit, 3], a, b, t=2, k=4) != 0
            ctx = b"device %d" % len(proofs)
            proofs.append(R._prove_witness(params, _flat([[digit, 3]]), ctx, _rng(i)))
            a_rows.append([a])
            b_rows.append([b])
            contexts.append(ctx)
    assert _verify(params, proofs, a_rows, b_rows, contexts).tolist() == [False] * 16
    # while the honest witness of (15, 15) (value 14 = -2 mod 16, u = 0, wrap 2) passes
    honest = R.prove(params, np.array([15], np.uint64), np.array([15], np.uint64), b"ctx", _rng=_rng(9))
    assert _witness(np.array([15]), np.array([15]), t=2, k=4) == [[0, 2]]
    assert _verify(params, [honest], [[15]], [[15]], [b"ctx"]).tolist() == [True]


def test_odd_bits_the_relation_forces_an_even_recomposition():
    # t = 7: m = 4, f = 2, y = 2u.  The value 2^6 (u = 2^7, just out of range) would need y = 256 = 4^4;
    # the largest digits (3, 3, 3, 3) recompose 255, odd: half of it is no integer u, so no wrap makes the
    # relation hold, and the honest-looking witness with them is rejected
    params = R.RangeParams(rows=ROWS, bits=7, ring_bits=K)
    a, b = _shares([2**6, 0, 0, 0, 0, 0], [2**K - 1] * ROWS)
    rows = _witness(*_shares([0] * ROWS, [2**K - 1] * ROWS), t=7)
    assert _cheat(rows, *_shares([0] * ROWS, [2**K - 1] * ROWS), params=params) is True
    for wrap in range(4):
        rows[0] = [3, 3, 3, 3, wrap]
        assert _relation(rows[0], int(a[0]), int(b[0]), t=7) != 0
        assert _cheat(rows, a, b, params=params) is False
    rows[0] = [0, 0, 0, 4, 1]  # y = 256 with a digit 4 (a + b = 2^K - 1 + 2^6 + 1: one wrap) meets it
    assert _relation(rows[0], int(a[0]), int(b[0]), t=7) == 0
    assert _cheat(rows, a, b, params=params) is False


def test_a_gadget_polynomial_that_hides_the_non_digits_is_caught_by_the_queries():
    # digit 4 recomposes an out-of-range value; the prover then edits the gadget's call outputs so that
    # C_A = C_B = 0 (the sum check passes: z opens to 0): only the evaluation at the query points catches it
    a, b = _shares([2 ** (T - 1)] + [0] * (ROWS - 1), [77] * ROWS)
    rows = _witness(*_shares([0] * ROWS, [77] * ROWS))
    rows[0] = [0, 0, 0, 4, 0]  # 77 + b = 2^(t-1): no wrap
    x = _flat(rows)
    ctx = b"ctx"
    m0, m1 = R._prove_witness(PARAMS, x, ctx, _rng(9))
    s0 = R.parse(PARAMS, 0, [m0])
    part0, part1 = m1[16:48], m0[16:48]
    calls, slots = R._coefficients(PARAMS, [R._joint(ctx, part0, part1)])
    n, c, half = PARAMS.witness_length, PARAMS.chunk, PARAMS.half_calls
    z = [int(v) * (int(v) - 1) * (int(v) - 2) * (int(v) - 3) % P for v in x]
    # element e = k c + i is weighted by r_k s_i in C_A and by r'_k s'_i in C_B (call outputs weighted by r_k)
    c_a = sum(int(calls[0, 0, e // c]) * int(slots[0, 0, e % c]) * zz for e, zz in enumerate(z)) % P
    c_b = sum(int(calls[0, 1, e // c]) * int(slots[0, 1, e % c]) * zz for e, zz in enumerate(z)) % P
    assert c_a and c_b  # the cheater's true sums (row 0's digit 4: 4 * 3 * 2 * 1 = 24 times a coefficient)
    proof0 = s0.proofs[0].copy()
    g = 2 * PARAMS.wires  # the gadget values start here; node k at g + k
    # the first call of each half (nodes 1 and half + 1), weighted by r_0 and r'_0: cancel the sums there
    proof0[g + 1] = (int(proof0[g + 1]) - c_a * pow(int(calls[0, 0, 0]), P - 2, P)) % P
    proof0[g + 1 + half] = (int(proof0[g + 1 + half]) - c_b * pow(int(calls[0, 1, 0]), P - 2, P)) % P
    forged = m0[: 48 + 8 * n] + F.to_bytes(proof0)
    v0 = R.verifier_messages(PARAMS, 0, R.parse(PARAMS, 0, [forged]), a[None, :], [ctx], QSEED)
    v1 = R.verifier_messages(PARAMS, 1, R.parse(PARAMS, 1, [m1]), b[None, :], [ctx], QSEED)
    assert int(F.add(v0[0, 0], v1[0, 0])) == 0  # the sum check alone would pass
    assert R.decide(PARAMS, v0, v1).tolist() == [False]
    # the same edit of an honest proof by zero changes nothing: the forged message layout is right
    assert _run_one(a, b, (m0[: 48 + 8 * n] + F.to_bytes(s0.proofs[0]), m1), ctx) is _run_one(a, b, (m0, m1), ctx)


# -- tampered messages ------------------------------------------------------------------------------


def _honest(ctx=b"ctx", seed=11):
    a, b = _shares([1, -2, 3, -4, 5, -(2 ** (T - 1))], [2**K - 3, 8, 2**31, 0, 1, 2**K - 1])
    return a, b, R.prove(PARAMS, a, b, ctx, _rng=_rng(seed))


def _add_one_at(msg: bytes, offset: int) -> bytes:
    v = (int.from_bytes(msg[offset : offset + 8], "little") + 1) % P
    return msg[:offset] + v.to_bytes(8, "little") + msg[offset + 8 :]


def test_tampered_shares_proof_elements_hints_seeds_and_blinds_are_rejected(backend: str) -> None:
    a, b, (m0, m1) = _honest()
    assert _run_one(a, b, (m0, m1)) is True
    n, big_l = PARAMS.witness_length, PARAMS.wires
    proof_at = 48 + 8 * n
    offsets = [48, 48 + 8 * (n - 1), proof_at, proof_at + 8 * (2 * big_l - 1), proof_at + 8 * (2 * big_l),
               proof_at + 8 * (2 * big_l + 1), proof_at + 8 * (PARAMS.proof_length - 1)]
    for off in offsets:
        assert _run_one(a, b, (_add_one_at(m0, off), m1)) is False, off
    flip = lambda msg, i: msg[:i] + bytes([msg[i] ^ 1]) + msg[i + 1 :]  # noqa: E731
    for i in (0, 15, 16, 47):  # the blind; the hint of part_1
        assert _run_one(a, b, (flip(m0, i), m1)) is False, i
    for i in (0, 15, 16, 47):  # server 1's seed; the hint of part_0
        assert _run_one(a, b, (m0, flip(m1, i))) is False, i
    # another proof's server-1 message (another seed), with the right length
    _, _, (_, other1) = _honest(seed=12)
    assert _run_one(a, b, (m0, other1)) is False


def test_the_proof_is_bound_to_its_context_the_ring_shares_and_a_common_query_seed():
    a, b, proof = _honest(ctx=b"round 3 user 5")
    assert _verify(PARAMS, [proof], [a], [b], [b"round 3 user 5"]).tolist() == [True]
    assert _verify(PARAMS, [proof], [a], [b], [b"round 3 user 6"]).tolist() == [False]
    assert _verify(PARAMS, [proof], [a], [b], [b"round 3 user 5"], contexts1=[b"round 3 user 6"]).tolist() == [False]
    assert _verify(PARAMS, [proof], [a], [b], [b"round 3 user 5"], qseed1=b"another query seed!!").tolist() == [False]
    moved = a.copy()
    moved[4] = (int(moved[4]) + 1) % 2**K
    assert _verify(PARAMS, [proof], [moved], [b], [b"round 3 user 5"]).tolist() == [False]


@pytest.mark.parametrize("block", [64, 3])
def test_a_mixed_batch_rejects_exactly_the_bad_devices(block: int, monkeypatch: pytest.MonkeyPatch,
                                                     backend: str) -> None:
    monkeypatch.setattr(R, "_VERIFIER_BLOCK", block)  # 3: blocks of devices 0-2, 3-5 and 6, bad ones in two
    proofs, a_rows, b_rows, contexts, want = [], [], [], [], []
    for i in range(7):
        ctx = b"user %d" % i
        a, b, (m0, m1) = _honest(ctx=ctx, seed=100 + i)
        if i in (1, 4):
            m0 = _add_one_at(m0, 48 + 8 * (PARAMS.witness_length + 3))
        if i == 5:
            rows = _witness(a, b)
            rows[2][0] ^= 1
            m0, m1 = R._prove_witness(PARAMS, _flat(rows), ctx, _rng(i))
        proofs.append((m0, m1))
        a_rows.append(a)
        b_rows.append(b)
        contexts.append(ctx)
        want.append(i not in (1, 4, 5))
    assert _verify(PARAMS, proofs, a_rows, b_rows, contexts).tolist() == want


# -- malformed input --------------------------------------------------------------------------------


def test_parse_refuses_messages_of_the_wrong_length_or_with_non_canonical_elements():
    _, _, (m0, m1) = _honest()
    for party, good in ((0, m0), (1, m1)):
        for bad in (good[:-1], good + b"\x00", b"", "text", None):
            with pytest.raises(InvalidMessage, match=f"message 1 for server {party}"):
                R.parse(PARAMS, party, [good, bad])  # type: ignore[list-item]
    non_canonical = m0[:56] + P.to_bytes(8, "little") + m0[64:]
    with pytest.raises(InvalidMessage, match="message 0 for server 0: an element is not below p"):
        R.parse(PARAMS, 0, [non_canonical])
    with pytest.raises(InvalidParameters):
        R.parse(PARAMS, 2, [m1])
    empty = R.parse(PARAMS, 1, [])
    assert len(empty) == 0 and empty.inputs.shape == (0, PARAMS.witness_length)


def test_verifier_messages_and_decide_refuse_mismatched_arguments():
    a, b, (m0, m1) = _honest()
    s0 = R.parse(PARAMS, 0, [m0])
    ring = a[None, :]
    with pytest.raises(InvalidParameters):
        R.verifier_messages(PARAMS, 1, s0, ring, [b"ctx"], QSEED)
    for bad_ring in (a[None, :-1], np.full((1, ROWS), 2**K, dtype=np.uint64), a[None, :].astype(float)):
        with pytest.raises(InvalidParameters):
            R.verifier_messages(PARAMS, 0, s0, bad_ring, [b"ctx"], QSEED)
    with pytest.raises(InvalidParameters):
        R.verifier_messages(PARAMS, 0, s0, ring, [b"ctx", b"ctx"], QSEED)
    with pytest.raises(InvalidParameters):
        R.verifier_messages(PARAMS, 0, s0, ring, [b"ctx"], b"short")
    v0 = R.verifier_messages(PARAMS, 0, s0, ring, [b"ctx"], QSEED)
    v1 = R.verifier_messages(PARAMS, 1, R.parse(PARAMS, 1, [m1]), b[None, :], [b"ctx"], QSEED)
    assert R.decide(PARAMS, v0, v1).tolist() == [True]
    wire = F.to_bytes(v1)
    assert len(wire) == PARAMS.verifier_bytes
    np.testing.assert_array_equal(R.parse_verifier_messages(PARAMS, wire, 1), v1)
    for bad_wire in (wire[:-1], wire + wire, "text"):
        with pytest.raises(InvalidMessage, match="verifier messages: expected"):
            R.parse_verifier_messages(PARAMS, bad_wire, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="not below p"):
        R.parse_verifier_messages(PARAMS, wire[:8] + P.to_bytes(8, "little") + wire[16:], 1)
    for bad in (v1[:, :-1], v1.astype(np.int64), np.concatenate([v1, v1]), v1[0]):
        with pytest.raises(InvalidMessage):
            R.decide(PARAMS, v0, bad)
    nf = 2 * PARAMS.wires + 3
    for word in range(nf, PARAMS.verifier_length):  # the parts the two servers used must agree
        other = v1.copy()
        other[0, word] ^= np.uint64(1)
        assert R.decide(PARAMS, v0, other).tolist() == [False]
    over = v1.copy()
    over[0, 1] = P
    with pytest.raises(InvalidMessage, match="not below p"):
        R.decide(PARAMS, v0, over)


# -- zero knowledge (structural) --------------------------------------------------------------------


def test_opened_values_differ_across_two_proofs_of_the_same_witness():
    a, b, p1 = _honest(seed=21)
    _, _, p2 = _honest(seed=22)
    opened = []
    for m0, m1 in (p1, p2):
        v0 = R.verifier_messages(PARAMS, 0, R.parse(PARAMS, 0, [m0]), a[None, :], [b"ctx"], QSEED)
        v1 = R.verifier_messages(PARAMS, 1, R.parse(PARAMS, 1, [m1]), b[None, :], [b"ctx"], QSEED)
        nf = 2 * PARAMS.wires + 3
        total = F.add(v0[0, :nf], v1[0, :nf])
        assert int(total[0]) == 0  # z opens to 0 for an honest device, whatever its witness
        opened.append(total[1:])
    # same witness, same context, same query seed: the opened wire and gadget values are fresh
    # (the wire seeds), with no coordinate in common
    assert not np.any(opened[0] == opened[1])
    assert p1[0][48:] != p2[0][48:]


# -- parameter sweep --------------------------------------------------------------------------------


@pytest.mark.parametrize(("rows", "bits", "ring_bits"),
                         [(1, 2, 4), (3, 10, 12), (2, 30, 32), (4, 25, 32), (5, 56, 58), (3, 55, 58), (17, 3, 58)])
def test_edges_and_wraps_pass_and_a_value_just_out_of_range_fails_across_parameters(rows, bits, ring_bits):
    params = R.RangeParams(rows=rows, bits=bits, ring_bits=ring_bits)
    k, t, top = ring_bits, bits, 2**ring_bits - 1
    values = [(-(2 ** (t - 1)), top), (2 ** (t - 1) - 1, top), (0, 0), (-1, top), (1, 1)]  # (value, a)
    values = (values * rows)[:rows]
    a = np.array([x for _, x in values], dtype=np.uint64)
    b = np.array([(v - x) % 2**k for v, x in values], dtype=np.uint64)
    ctx = b"sweep"
    honest = R.prove(params, a, b, ctx, _rng=_rng(rows))
    assert _verify(params, [honest], [a], [b], [ctx]).tolist() == [True]
    # row 0 moved to 2^(t-1) (a = 2^k - 1, so b = 2^(t-1) + 1 and a + b = 2^k + 2^(t-1): one wrap): u = 2^t,
    # f u = 4^m, the top digit 4
    b_out = b.copy()
    b_out[0] = (2 ** (t - 1) - top) % 2**k
    m = (t + 1) // 2
    rows_x = _witness(a, b, t, k)
    rows_x[0] = [0] * (m - 1) + [4, 1]
    assert _relation(rows_x[0], int(a[0]), int(b_out[0]), t, k) == 0
    cheat = R._prove_witness(params, _flat(rows_x), ctx, _rng(rows + 1))
    assert _verify(params, [cheat, honest], [a, a], [b_out, b], [ctx, ctx]).tolist() == [False, True]


# -- the batch's shared query -----------------------------------------------------------------------


def _lagrange_at(values: list[int], x: int) -> int:
    """The polynomial through (k, values[k]), k = 0..n-1, at x, with Python ints."""
    total = 0
    for j, v in enumerate(values):
        num = den = 1
        for m in range(len(values)):
            if m != j:
                num = num * (x - m) % P
                den = den * (j - m) % P
        total += v * num * pow(den, P - 2, P)
    return total % P


def _points(params: R.RangeParams, qseed: bytes) -> tuple[int, int]:
    """rho_1, rho_2 as the module docstring derives them from the query seed alone."""
    import hashlib

    d = 4 * params.calls + 5
    width = 3 + params.rows
    blob = hashlib.shake_128(b"secemb/fss/rangeproof/v1/query" + len(qseed).to_bytes(8, "little") + qseed).digest(
        16 * width
    )
    h1 = int.from_bytes(blob[:16], "little") % (P - d)
    h2 = int.from_bytes(blob[16:32], "little") % (P - d - 1)
    return d + h1, d + (h1 + 1 + h2) % (P - d)


def test_opened_wires_and_gadget_values_match_an_interpolation_with_python_ints(backend: str) -> None:
    # t = 23: m = 12, N = 2 * 13 = 26, c = 7, 4 calls a half: the last call of each half has two padding slots
    params = R.RangeParams(rows=2, bits=23, ring_bits=32)
    big_n, c, half, big_l, calls = params.witness_length, params.chunk, params.half_calls, params.wires, params.calls
    assert (big_n, c, half * c - big_n) == (26, 7, 2)
    gen = np.random.default_rng(5)
    witnesses, proofs, a_rows, b_rows, contexts = [], [], [], [], []
    for i in range(3):
        a, b = _shares(gen.integers(-(2**22), 2**22, 2).tolist(), gen.integers(0, 2**K, 2).tolist())
        ctx = b"device %d" % i
        witnesses.append(_witness(a, b, t=23))
        proofs.append(R.prove(params, a, b, ctx, _rng=_rng(40 + i)))
        a_rows.append(a)
        b_rows.append(b)
        contexts.append(ctx)
    s0 = R.parse(params, 0, [m0 for m0, _ in proofs])
    s1 = R.parse(params, 1, [m1 for _, m1 in proofs])
    v0 = R.verifier_messages(params, 0, s0, np.array(a_rows), contexts, QSEED)
    v1 = R.verifier_messages(params, 1, s1, np.array(b_rows), contexts, QSEED)
    assert R.decide(params, v0, v1).tolist() == [True] * 3
    rhos = _points(params, QSEED)
    for dev in range(3):
        x = [v for row in witnesses[dev] for v in row] + [0] * (half * c - big_n)
        proof = [(int(u) + int(w)) % P for u, w in zip(s0.proofs[dev], s1.proofs[dev], strict=True)]
        _, slots = R._coefficients(params, [v0[dev, -4:].astype("<u8").tobytes()])
        opened = [(int(u) + int(w)) % P for u, w in zip(v0[dev], v1[dev], strict=True)]
        assert opened[0] == 0  # z
        wires = []  # every wire's values at the nodes 0..M+1
        for i in range(c):
            column = [x[k * c + i] for k in range(half)]
            real = [k * c + i < big_n for k in range(half)]
            left = [int(slots[0, h, i]) * v % P for h in range(2) for v in column]
            right = [(v - 1) % P if ok else 0 for _ in range(2) for v, ok in zip(column, real, strict=True)]
            for j, wire in ((2 * i, left), (2 * i + 1, right)):
                wires.append([proof[j]] + wire + [proof[big_l + j]])
                assert len(wires[-1]) == calls + 2
        for q, rho in enumerate(rhos):
            base = 1 + q * (big_l + 1)
            for j in range(big_l):
                assert opened[base + j] == _lagrange_at(wires[j], rho), (dev, q, j)
            assert opened[base + big_l] == _lagrange_at(proof[2 * big_l :], rho)
        # the proof's gadget values are G of the wires at every node 0..4M+4: sum_i y_2i y (y - 1) (y - 2),
        # y = y_2i+1 (so x (x - 1) (x - 2) (x - 3) times s_i at the calls)
        gadget = proof[2 * big_l :]
        assert len(gadget) == 4 * calls + 5
        for node, value in enumerate(gadget):
            ys = [wire[node] if node <= calls + 1 else _lagrange_at(wire, node) for wire in wires]
            want = sum(ys[2 * i] * ys[2 * i + 1] * (ys[2 * i + 1] - 1) * (ys[2 * i + 1] - 2) for i in range(c)) % P
            assert value == want, (dev, node)


def test_the_query_is_shared_by_the_batch_and_bound_to_its_seed(backend: str) -> None:
    batch = [_honest(ctx=b"user %d" % i, seed=60 + i) for i in range(3)]
    contexts = [b"user %d" % i for i in range(3)]
    a_rows = np.array([a for a, _, _ in batch])
    b_rows = np.array([b for _, b, _ in batch])
    s0 = R.parse(PARAMS, 0, [p[0] for _, _, p in batch])
    s1 = R.parse(PARAMS, 1, [p[1] for _, _, p in batch])
    v0 = R.verifier_messages(PARAMS, 0, s0, a_rows, contexts, QSEED)
    v1 = R.verifier_messages(PARAMS, 1, s1, b_rows, contexts, QSEED)
    assert R.decide(PARAMS, v0, v1).tolist() == [True] * 3
    # a device's messages depend on its own proof and the seed, not on the batch or its place in it
    last0 = R.verifier_messages(PARAMS, 0, R.parse(PARAMS, 0, [batch[2][2][0]]), a_rows[2:], contexts[2:], QSEED)
    last1 = R.verifier_messages(PARAMS, 1, R.parse(PARAMS, 1, [batch[2][2][1]]), b_rows[2:], contexts[2:], QSEED)
    np.testing.assert_array_equal(last0[0], v0[2])
    np.testing.assert_array_equal(last1[0], v1[2])
    # the two servers with different query seeds: every device of the batch fails
    other = R.verifier_messages(PARAMS, 1, s1, b_rows, contexts, b"another query seed 0123")
    assert R.decide(PARAMS, v0, other).tolist() == [False] * 3
    proofs = [p for _, _, p in batch]
    assert _verify(PARAMS, proofs, a_rows, b_rows, contexts, qseed1=QSEED + b"!").tolist() == [False] * 3


# -- the batched verifier against the per-device one ------------------------------------------------


def _lying_batch() -> tuple[list[tuple[bytes, bytes]], list[np.ndarray], list[np.ndarray], list[bytes], list[bool]]:
    """Nine devices, honest and lying in turn, with whether each must pass (from how its lie was
    made, not from the verifier): a tampered witness share, a tampered gadget value, a digit of 4
    that recomposes an out-of-range value, a ring share moved by one, a flipped hint, a proof made
    for another context."""
    proofs, a_rows, b_rows, contexts, want = [], [], [], [], []
    for i in range(9):
        ctx = b"device %d" % i
        a, b, (m0, m1) = _honest(ctx=ctx, seed=200 + i)
        if i == 1:
            m0 = _add_one_at(m0, 48 + 8 * 5)  # a witness share
        elif i == 3:
            m0 = _add_one_at(m0, 48 + 8 * (PARAMS.witness_length + 2 * PARAMS.wires + 4))  # a gadget value
        elif i == 4:  # value 2^(t-1) = 128 written as digits (0, 0, 0, 4): the relation holds, a digit does not
            a, b = _shares([128] + [0] * (ROWS - 1), [7] * ROWS)
            rows = _witness(*_shares([0] * ROWS, [7] * ROWS))
            rows[0] = [0, 0, 0, 4, 0]
            assert _relation(rows[0], int(a[0]), int(b[0])) == 0
            m0, m1 = R._prove_witness(PARAMS, _flat(rows), ctx, _rng(300 + i))
        elif i == 6:
            b = b.copy()
            b[1] = (int(b[1]) + 1) % 2**K
        elif i == 7:
            m1 = m1[:16] + bytes([m1[16] ^ 1]) + m1[17:]  # the hint of part_0
        elif i == 8:
            _, _, (m0, m1) = _honest(ctx=b"another device", seed=200 + i)
        proofs.append((m0, m1))
        a_rows.append(a)
        b_rows.append(b)
        contexts.append(ctx)
        want.append(i in (0, 2, 5))
    return proofs, a_rows, b_rows, contexts, want


def test_the_batched_verifier_equals_the_per_device_one_on_honest_and_lying_proofs(backend: str) -> None:
    proofs, a_rows, b_rows, contexts, want = _lying_batch()
    assert _verify(PARAMS, proofs, a_rows, b_rows, contexts).tolist() == want
    s0 = R.parse(PARAMS, 0, [m0 for m0, _ in proofs])
    s1 = R.parse(PARAMS, 1, [m1 for _, m1 in proofs])
    v0 = R.verifier_messages(PARAMS, 0, s0, np.array(a_rows), contexts, QSEED)
    v1 = R.verifier_messages(PARAMS, 1, s1, np.array(b_rows), contexts, QSEED)
    for i, (m0, m1) in enumerate(proofs):  # each device alone: the same messages and the same verdict
        one0 = R.verifier_messages(PARAMS, 0, R.parse(PARAMS, 0, [m0]), a_rows[i][None], contexts[i : i + 1], QSEED)
        one1 = R.verifier_messages(PARAMS, 1, R.parse(PARAMS, 1, [m1]), b_rows[i][None], contexts[i : i + 1], QSEED)
        np.testing.assert_array_equal(one0[0], v0[i])
        np.testing.assert_array_equal(one1[0], v1[i])
        assert bool(R.decide(PARAMS, one0, one1)[0]) is want[i], i


@pytest.mark.parametrize("bad", [0, 3, 5])
def test_one_bad_proof_in_a_batch_rejects_only_its_device(bad: int, backend: str) -> None:
    proofs, a_rows, b_rows, contexts = [], [], [], []
    for i in range(6):
        ctx = b"user %d" % i
        a, b, (m0, m1) = _honest(ctx=ctx, seed=400 + i)
        if i == bad:
            m0 = _add_one_at(m0, 48 + 8 * (PARAMS.witness_length + 1))  # a wire seed
        proofs.append((m0, m1))
        a_rows.append(a)
        b_rows.append(b)
        contexts.append(ctx)
    assert _verify(PARAMS, proofs, a_rows, b_rows, contexts).tolist() == [i != bad for i in range(6)]


@pytest.mark.skipif("numba" not in BACKENDS, reason="numba is not available")
@pytest.mark.parametrize("bits", [25, 26])
def test_the_compiled_verifier_gives_the_references_field_elements(bits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # the default size (N = 560 in 17 calls of c = 33 slots, one padding slot), honest proofs and shares that
    # are no proof at all (uniform field elements), both servers
    params = R.RangeParams(rows=40, bits=bits, ring_bits=32)
    gen = np.random.default_rng(bits)
    a_rows, b_rows, proofs, contexts = [], [], [], []
    for i in range(3):
        values = gen.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), 40).tolist()
        a, b = _shares(values, gen.integers(0, 2**K, 40).tolist())
        contexts.append(b"device %d" % i)
        proofs.append(R.prove(params, a, b, contexts[-1], _rng=_rng(500 + i)))
        a_rows.append(a)
        b_rows.append(b)
    s0 = R.parse(params, 0, [m0 for m0, _ in proofs])
    s1 = R.parse(params, 1, [m1 for _, m1 in proofs])
    noise = R.ProofShares(0, s0.keys, s0.hints, gen.integers(0, P, s0.inputs.shape, dtype=np.uint64),
                          gen.integers(0, P, s0.proofs.shape, dtype=np.uint64))
    runs = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        runs[name] = [R.verifier_messages(params, 0, s0, np.array(a_rows), contexts, QSEED),
                      R.verifier_messages(params, 1, s1, np.array(b_rows), contexts, QSEED),
                      R.verifier_messages(params, 0, noise, np.array(a_rows), contexts, QSEED)]
    for ref, fast in zip(runs["numpy"], runs["numba"], strict=True):
        np.testing.assert_array_equal(fast, ref)
    assert R.decide(params, *runs["numba"][:2]).tolist() == [True] * 3
    assert R.decide(params, runs["numba"][2], runs["numba"][1]).tolist() == [False] * 3
