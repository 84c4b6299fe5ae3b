"""secemb.fss.field: arithmetic mod 2^61 - 1 against Python integers."""

from __future__ import annotations

import random

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels

P = 2**61 - 1
EDGES = [0, 1, 2, 3, P - 1, P - 2, 2**32 - 1, 2**32, 2**32 + 1, 2**60, 2**61 - 2, 2**29, 2**31 * 3 + 7, (P - 1) // 2]
VALUES = EDGES + [random.Random(34).randrange(P) for _ in range(120)]


def _grid() -> tuple[np.ndarray, np.ndarray]:
    a = np.array(VALUES, dtype=np.uint64)
    return a[:, None], a[None, :]


def test_modulus_is_the_mersenne_prime():
    assert F.P == P


@pytest.mark.parametrize(
    ("op", "ref"),
    [
        (F.add, lambda x, y: (x + y) % P),
        (F.sub, lambda x, y: (x - y) % P),
        (F.mul, lambda x, y: (x * y) % P),
    ],
)
def test_binary_operations_match_python_integers(op, ref):
    a, b = _grid()
    got = op(a, b)
    assert got.dtype == np.uint64 and got.shape == (len(VALUES), len(VALUES))
    want = np.array([[ref(x, y) for y in VALUES] for x in VALUES], dtype=np.uint64)
    np.testing.assert_array_equal(got, want)


def test_largest_products_reduce_exactly():
    # (p-1)^2 = 1, (2^61 - 2)^2 = 1, (2^32)^2 = 2^64 = 8, (2^32 - 1)^2 = 2^64 - 2^33 + 1 = 9 - 2^33 (mod p)
    assert int(F.mul(np.uint64(P - 1), np.uint64(P - 1))) == 1
    assert int(F.mul(np.uint64(2**61 - 2), np.uint64(2**61 - 2))) == 1
    assert int(F.mul(np.uint64(2**32), np.uint64(2**32))) == 8
    assert int(F.mul(np.uint64(2**32 - 1), np.uint64(2**32 - 1))) == (9 - 2**33) % P


def test_neg_and_reduce64():
    a = np.array(VALUES, dtype=np.uint64)
    np.testing.assert_array_equal(F.neg(a), np.array([(-x) % P for x in VALUES], dtype=np.uint64))
    raw = [0, P, P + 1, 2**64 - 1, 2**63, 2**62 + 5, 2 * P, 2 * P - 1]
    np.testing.assert_array_equal(F.reduce64(np.array(raw, dtype=np.uint64)), [x % P for x in raw])


def test_sum_mod_and_dot_match_python_integers():
    a = np.array(VALUES, dtype=np.uint64).reshape(2, -1)
    b = a[:, ::-1].copy()
    assert [int(v) for v in F.sum_mod(a, axis=1)] == [sum(int(v) for v in row) % P for row in a]
    assert int(F.sum_mod(np.full(1000, P - 1, dtype=np.uint64))) == (1000 * (P - 1)) % P
    raw = [2**64 - 1, 2**63, P, 2 * P + 3] * 250  # not field elements: any uint64 values sum exactly
    assert int(F.sum_mod(np.array(raw, dtype=np.uint64))) == sum(raw) % P
    want = [sum(int(x) * int(y) for x, y in zip(ra, rb, strict=True)) % P for ra, rb in zip(a, b, strict=True)]
    assert [int(v) for v in F.dot(a, b)] == want
    # a matrix product through broadcasting
    m = a[:, :5]
    k = b[:, :5].T  # (5, 2)
    prod = F.dot(m[:, :, None], k[None, :, :], axis=1)
    assert [[int(v) for v in row] for row in prod] == [
        [sum(int(m[i, j]) * int(k[j, c]) for j in range(5)) % P for c in range(2)] for i in range(2)
    ]


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (3, 2, 4), (3, 5, 4), (4, 2048, 2), (2, 2049, 3), (2, 5000, 2)])
def test_matmul_matches_python_integers_across_inner_dimensions(m, k, n):
    r = random.Random(m * 7919 + k)
    a = [[r.choice([0, 1, P - 1, P - 2, r.randrange(P)]) for _ in range(k)] for _ in range(m)]
    b = [[r.choice([0, 1, P - 1, 2**61 - 2, r.randrange(P)]) for _ in range(n)] for _ in range(k)]
    got = F.matmul(np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64))
    assert got.dtype == np.uint64
    assert got.tolist() == [[sum(a[i][t] * b[t][j] for t in range(k)) % P for j in range(n)] for i in range(m)]


def test_matmul_broadcasts_batches_and_refuses_mismatched_shapes():
    a = np.array(VALUES[:24], dtype=np.uint64).reshape(2, 3, 4)
    b = np.array(VALUES[24:32], dtype=np.uint64).reshape(4, 2)
    got = F.matmul(a, b)
    assert got.shape == (2, 3, 2)
    want = [[[sum(int(a[z, i, t]) * int(b[t, j]) for t in range(4)) % P for j in range(2)] for i in range(3)]
            for z in range(2)]
    assert got.tolist() == want
    with pytest.raises(InvalidParameters, match="inner dimensions"):
        F.matmul(a, b[:3])


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 8, 9, 64, 65, 1024, 1025, 2048, 2049, 4097])
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((2, 3, -1), (-1, 2)), ((3, -1), (4, -1, 5)), ((2, 1, 3, -1), (4, -1, 2)), ((1, -1), (-1, 1))],
)
@pytest.mark.parametrize("fill", [P - 1, P - 2**32])
def test_matmul_is_exact_at_the_largest_limbs_either_operand_wide_and_with_batches(k, a_shape, b_shape, fill):
    # p - 2^32 has an all-ones low half and nearly all-ones limbs, p - 1 all ones but the lowest bit: every
    # float64 partial sum is as large as the split allows; every entry of the product is k fill^2 mod p
    a = np.full(tuple(k if d == -1 else d for d in a_shape), fill, dtype=np.uint64)
    b = np.full(tuple(k if d == -1 else d for d in b_shape), fill, dtype=np.uint64)
    got = F.matmul(a, b)
    assert got.shape == np.matmul(a.astype(np.float64), b.astype(np.float64)).shape
    assert np.all(got == np.uint64(k * fill * fill % P))
    # one entry of a moved to 2: the first row's entries become (k - 1) fill^2 + 2 fill
    a[..., 0, 0] = 2
    got = F.matmul(a, b)
    assert np.all(got[..., 0, :] == np.uint64(((k - 1) * fill * fill + 2 * fill) % P))
    assert np.all(got[..., 1:, :] == np.uint64(k * fill * fill % P))


@pytest.mark.parametrize("top", [0, 1, 2**14 - 1, 2**14, 2**28, P - 1])
def test_matmul_with_small_entries_on_the_narrow_side_matches_python_integers(top):
    # the narrow operand takes as many limbs as its largest element needs (w = 14 bits at k = 66):
    # bits, a full limb, one bit more, ...; the wide operand is arbitrary
    r = random.Random(top)
    a = [[r.randrange(top + 1) for _ in range(66)] for _ in range(3)]
    a[2][5] = top
    b = [[r.randrange(P) for _ in range(40)] for _ in range(66)]
    want = [[sum(a[i][t] * b[t][j] for t in range(66)) % P for j in range(40)] for i in range(3)]
    got = F.matmul(np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64))
    assert got.tolist() == want
    got_t = F.matmul(np.array(b, dtype=np.uint64).T.copy(), np.array(a, dtype=np.uint64).T.copy())  # narrow right
    assert got_t.T.tolist() == want


@pytest.mark.parametrize("top", [1, P - 1])
def test_matmul_keeps_every_blas_call_on_one_thread_and_stays_exact(monkeypatch, top):
    # OpenBLAS threads a product above M N K = 2^18 (gemm) or M N = 9216 (gemv, one row); under load a
    # woken thread pool costs 10-100x: every float64 product matmul asks for stays within those sizes
    calls = []
    real = np.matmul

    def spy(x, y, *args, **kwargs):
        if x.dtype == np.float64:
            calls.append((x.shape[-2], x.shape[-1], y.shape[-1]))
        return real(x, y, *args, **kwargs)

    monkeypatch.setattr(np, "matmul", spy)
    r = random.Random(top)
    a = [[r.randrange(top + 1) for _ in range(2000)]]  # one row: bits take one limb (gemv), p - 1 seven
    b = [[r.randrange(P) for _ in range(40)] for _ in range(2000)]
    got = F.matmul(np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64))
    assert len(calls) > 2
    assert all(m * k * n <= 2**18 if m > 1 else k * n < 9216 for m, k, n in calls)
    assert got.tolist() == [[sum(a[0][t] * b[t][j] for t in range(2000)) % P for j in range(40)]]


def test_inv_matches_fermat_in_python_and_refuses_zero():
    a = np.array([v for v in VALUES if v], dtype=np.uint64)
    np.testing.assert_array_equal(F.inv(a), np.array([pow(int(v), P - 2, P) for v in a], dtype=np.uint64))
    np.testing.assert_array_equal(F.mul(a, F.inv(a)), np.ones_like(a))
    with pytest.raises(InvalidParameters, match="0 has no inverse"):
        F.inv(np.array([3, 0], dtype=np.uint64))


def test_from_uniform_bytes_reduces_128_bit_integers():
    chunks = [b"\xff" * 16, b"\x00" * 16, (P).to_bytes(16, "little"), (2**64).to_bytes(16, "little"),
              bytes(range(16)), (P * 2**66 + 5).to_bytes(16, "little")]
    got = F.from_uniform_bytes(b"".join(chunks), len(chunks))
    assert [int(v) for v in got] == [int.from_bytes(c, "little") % P for c in chunks]
    with pytest.raises(InvalidParameters):
        F.from_uniform_bytes(b"\x00" * 31, 2)


def test_expand_and_xof_are_deterministic_field_elements():
    x = F.expand(b"\x01" * 16, 500)
    assert x.shape == (500,) and x.dtype == np.uint64 and np.all(x < P)
    np.testing.assert_array_equal(x, F.expand(b"\x01" * 16, 500))
    assert not np.array_equal(x, F.expand(b"\x02" * 16, 500))
    assert len(np.unique(x)) == 500
    with pytest.raises(InvalidParameters):
        F.expand(b"\x01" * 15, 3)
    y = F.xof(b"data", 7)
    np.testing.assert_array_equal(y, F.xof(b"data", 7))
    assert np.all(y < P) and not np.array_equal(y, F.xof(b"datb", 7))


def test_expand_is_the_documented_stream_of_61_bit_words_skipping_p(monkeypatch):
    from secemb.randomness import CtrDrbg

    seed = bytes(range(16))
    stream = CtrDrbg(seed)(8 * 40)  # expand_seed's stream: AES-256-CTR under SHA-256(tag || seed)
    want = [int.from_bytes(stream[8 * i : 8 * i + 8], "little") >> 3 for i in range(40)]
    assert F.expand(seed, 30).tolist() == want[:30]
    # a word whose top 61 bits are p is skipped, and a longer prefix of the stream fills the gap
    words = np.array([(P << 3) | 5, 8 * 7, (P << 3), 8 * 9, 2**64 - 1, 8 * (P - 1)], dtype=np.uint64)

    def fake(seed: bytes, shape: tuple[int, ...], dtype: object) -> np.ndarray:
        return words[: shape[0]].copy() if shape[0] <= len(words) else np.concatenate([words] * 2)[: shape[0]]

    monkeypatch.setattr(F, "expand_seed", fake)
    assert F.expand(seed, 1).tolist() == [7]
    assert F.expand(seed, 3).tolist() == [7, 9, P - 1]


def test_canonical_bytes_round_trip_and_refuse_non_canonical():
    x = np.array([0, 1, P - 1, 2**40], dtype=np.uint64)
    data = F.to_bytes(x)
    assert data == b"".join(int(v).to_bytes(8, "little") for v in x)
    np.testing.assert_array_equal(F.from_canonical_bytes(data, 4), x)
    with pytest.raises(InvalidMessage, match="expected 32 bytes"):
        F.from_canonical_bytes(data[:-1], 4)
    for bad in (P, P + 1, 2**64 - 1):
        with pytest.raises(InvalidMessage, match="not below p"):
            F.from_canonical_bytes(data[:8] + bad.to_bytes(8, "little") + data[16:], 4)


@pytest.mark.parametrize("backend", ["numpy"] + (["numba"] if kernels.available() else []))
def test_lagrange_coefficients_interpolate_a_known_polynomial(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)  # Python ints, or the compiled loop
    coeffs = [5, P - 3, 17, 2**60, 1]  # degree 4: 5 nodes

    def poly(x: int) -> int:
        return sum(c * pow(x, i, P) for i, c in enumerate(coeffs)) % P

    values = np.array([poly(j) for j in range(5)], dtype=np.uint64)
    xs = [5, 6, 1000, P - 1, 2**50 + 3]
    lag = F.lagrange_coefficients(5, np.array(xs, dtype=np.uint64))
    assert lag.shape == (5, 5)
    assert [int(v) for v in F.dot(lag, values[None, :])] == [poly(x) for x in xs]
    # the coefficients at x = 5 for nodes 0..4 are binomial: L_j(5) = (-1)^(4-j) C(5, j)
    assert [int(v) for v in lag[0]] == [1, P - 5, 10, P - 10, 5]
    with pytest.raises(InvalidParameters, match="avoid the nodes"):
        F.lagrange_coefficients(5, np.array([4], dtype=np.uint64))
    # a degree-140 polynomial (the range proof's gadget size) at two points, and the shape of a 2-D x
    big = [random.Random(140).randrange(P) for _ in range(141)]
    at = [10**6, P - 2]
    lag = F.lagrange_coefficients(141, np.array([at], dtype=np.uint64))
    assert lag.shape == (1, 2, 141)
    want = [sum(c * pow(x, i, P) for i, c in enumerate(big)) % P for x in at]
    values = np.array([sum(c * pow(j, i, P) for i, c in enumerate(big)) % P for j in range(141)], dtype=np.uint64)
    assert [int(v) for v in F.dot(lag[0], values[None, :])] == want
