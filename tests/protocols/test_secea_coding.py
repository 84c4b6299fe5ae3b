"""SecEA's coding layer: the paper's worked example (Sec. III-C, N = 3, K = T = 1) with the
values typed from the paper, and exactness of the decoded average over random N, T, K, d."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secemb.errors import InvalidParameters, ProtocolError
from secemb.protocols.secea import coding, field
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.field import P
from secemb.randomness import CtrDrbg

EXAMPLE = SecEAParams(3, 1, dim=2, alphas=(3, 4, 5), betas=(1, 2))


def f(x: int) -> int:
    return x % P


def test_example_parameters_k_and_needed_answers():
    assert EXAMPLE.k == 1 and EXAMPLE.needed_answers == 3 and EXAMPLE.noise_points == 2


def test_example_shares_are_minus_h_plus_2z_minus_2h_plus_3z_minus_3h_plus_4z():
    h = np.array([[7, 11, 1]], dtype=np.uint64)  # one entity, h~ = (7, 11, 1)
    y = coding.share(EXAMPLE, h, CtrDrbg(1))[:, 0, :].astype(object)
    z = [(int(y[0, j]) + int(h[0, j])) * pow(2, P - 2, P) % P for j in range(3)]  # from y_1 = -h + 2z
    for j in range(3):
        hj = int(h[0, j])
        assert y[0, j] == f(-hj + 2 * z[j])
        assert y[1, j] == f(-2 * hj + 3 * z[j])
        assert y[2, j] == f(-3 * hj + 4 * z[j])


def test_example_queries_for_e1():
    q = coding.queries(EXAMPLE, np.array([0]), 2, CtrDrbg(2))[:, 0, :].astype(object)  # (N, M)
    inv2 = pow(2, P - 2, P)
    z1 = (int(q[0, 0]) + 1) * inv2 % P  # q_1 = (-1 + 2 z1, 2 z2)
    z2 = int(q[0, 1]) * inv2 % P
    assert q[1, 0] == f(-2 + 3 * z1) and q[1, 1] == f(3 * z2)
    assert q[2, 0] == f(-3 + 4 * z1) and q[2, 1] == f(4 * z2)


def test_example_server_terms_3s1_3s2_minus6s1_plus8s2():
    r, psi = coding.server_noise(EXAMPLE, 1, CtrDrbg(3))
    assert r[0] != 0
    inv3 = pow(3, P - 2, P)
    for j in range(EXAMPLE.width):
        s1, s2 = int(psi[0, 0, j]) * inv3 % P, int(psi[1, 0, j]) * inv3 % P
        assert int(psi[2, 0, j]) == f(-6 * s1 + 8 * s2)


def test_example_decoding_coefficients_6_minus8_3():
    assert EXAMPLE.decode_matrix([0, 1, 2]).tolist() == [[6, f(-8), 3]]


def test_example_end_to_end_gives_r_times_h1_plus_h3_and_2r():
    # E1 = {e1}, E2 = {e2}, E3 = {e1}; h_{1,e1} = (1.5, -2), h_{2,e2} = (3, 0.25), h_{3,e1} = (0.5, 1)
    own = {0: [0], 1: [1], 2: [0]}
    rows = {0: [[1.5, -2.0]], 1: [[3.0, 0.25]], 2: [[0.5, 1.0]]}
    rng = CtrDrbg(4)
    expanded = [coding.expand(EXAMPLE, 2, np.array(own[n]), np.array(rows[n])) for n in range(3)]
    y = sum(coding.share(EXAMPLE, x, rng) for x in expanded)
    y = y % np.uint64(P)
    q = coding.queries(EXAMPLE, np.array([0]), 2, rng)  # client 1 retrieves e1
    a = np.stack([coding.answer(q[v], y[v]) for v in range(3)])
    r, psi = coding.server_noise(EXAMPLE, 1, rng)
    answers = (a * r[None, :, None] + psi) % np.uint64(P)
    ys = [[int(answers[v, 0, j]) for j in range(3)] for v in range(3)]
    combined = [(6 * ys[0][j] - 8 * ys[1][j] + 3 * ys[2][j]) % P for j in range(3)]
    r0, two16 = int(r[0]), 2**16
    expected = [f(r0 * (int(1.5 * two16) + int(0.5 * two16))), f(r0 * (-2 * two16 + 1 * two16)), f(2 * r0)]
    assert combined == expected
    assert coding.decode(EXAMPLE, answers, [0, 1, 2]).tolist() == [combined]
    _, avg = coding.decode_average(EXAMPLE, coding.decode(EXAMPLE, answers, [0, 1, 2]))
    assert avg.tolist() == [[1.0, -0.5]]


def test_decode_refuses_too_few_answers():
    with pytest.raises(ProtocolError, match="3 = 2"):
        EXAMPLE.decode_matrix([0, 2])


@pytest.mark.parametrize(
    ("n", "t", "k"), [(1, 0, None), (4, 2, None), (3, -1, None), (5, 1, 3), (3, 1, 0)]
)
def test_params_refuse_bad_n_t_k(n, t, k):
    with pytest.raises(InvalidParameters):
        SecEAParams(n, t, dim=4, parts=k)


def test_params_refuse_colliding_points():
    with pytest.raises(InvalidParameters, match="distinct"):
        SecEAParams(3, 1, dim=2, alphas=(1, 4, 5), betas=(1, 2))


def test_field_matmul_matches_python_integers_on_long_axis():
    rng = CtrDrbg(5)
    a = field.uniform(rng, (3, 300))
    b = field.uniform(rng, (300, 4))
    expected = [[sum(int(a[i, m]) * int(b[m, j]) for m in range(300)) % P for j in range(4)] for i in range(3)]
    assert field.matmul(a, b).tolist() == expected


def test_field_uniform_never_returns_p_and_inverse_is_inverse():
    x = field.uniform(CtrDrbg(6), (10_000,))
    assert x.max() < P
    x = x[x != 0]
    assert np.all((x * field.inverse(x)) % np.uint64(P) == 1)


@st.composite
def deployments(draw):
    n = draw(st.integers(2, 7))
    t = draw(st.integers(0, (n - 1) // 2))
    k = draw(st.integers(1, (n + 1) // 2 - t))
    d = draw(st.integers(1, 6))
    m = draw(st.integers(1, 10))
    owners = draw(st.lists(st.lists(st.booleans(), min_size=n, max_size=n).filter(any), min_size=m, max_size=m))
    seed = draw(st.integers(0, 2**32 - 1))
    return n, t, k, d, m, np.array(owners, dtype=bool), seed


@settings(max_examples=60, deadline=None)
@given(deployments())
def test_decoded_average_equals_plaintext_average_exactly(case):
    n, t, k, d, m, owns, seed = case
    params = SecEAParams(n, t, dim=d, parts=k)
    gen = np.random.default_rng(seed)  # test data only
    rng = CtrDrbg(seed)
    rows = {v: gen.uniform(-params.max_abs, params.max_abs, size=(int(owns[:, v].sum()), d)) for v in range(n)}
    own = {v: np.flatnonzero(owns[:, v]) for v in range(n)}
    y = sum(coding.share(params, coding.expand(params, m, own[v], rows[v]), rng) for v in range(n)) % np.uint64(P)
    for c in range(n):
        if own[c].size == 0:
            continue
        q = coding.queries(params, own[c], m, rng)
        a = np.stack([coding.answer(q[v], y[v]) for v in range(n)])
        r, psi = coding.server_noise(params, own[c].size, rng)
        answers = (a * r[None, :, None] + psi) % np.uint64(P)
        answered = sorted(gen.permutation(n)[: params.needed_answers].tolist())  # any D answers suffice
        nums, avgs = coding.decode_average(params, coding.decode(params, answers[answered], answered))
        for i, e in enumerate(own[c]):
            holders = [v for v in range(n) if owns[e, v]]
            fixed = [np.rint(rows[v][list(own[v]).index(e)] * 2**params.frac_bits).astype(np.int64) for v in holders]
            for j in range(d):
                expected = Fraction(sum(int(x[j]) for x in fixed), len(holders) * 2**params.frac_bits)
                assert Fraction(int(nums[i, j]), params.lcm * 2**params.frac_bits) == expected
                assert avgs[i, j] == float(expected)
