"""The sketch proof's batched server paths (session 29, helper B, issue 34: the servers' cost):
each against an independent statement of what it computes -- Lagrange rows against Python
integers, the coefficients against SHAKE-128 read as Python integers, server 1's shares against
``field.expand`` of each share seed (the specification, with its skip of ``p``), :func:`verify`
against :func:`decide` of :func:`verifier_messages`, :func:`well_formed` / :func:`parse` against
:func:`check_message` one message at a time."""

from __future__ import annotations

import hashlib
import secrets

import numpy as np
import pytest

from secemb.errors import InvalidMessage
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import sketchproof as S

P = F.P
BACKENDS = ["numba", "numpy"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numba" and not kernels.available():
        pytest.skip("numba kernels unavailable")
    monkeypatch.setattr(kernels, "BACKEND", request.param)
    return str(request.param)


def _lagrange(n: int, x: int, j: int) -> int:
    """``L_j(x)`` over the nodes ``0..n-1`` by its definition, in Python integers."""
    num = den = 1
    for m in range(n):
        if m != j:
            num, den = num * (x - m) % P, den * (j - m) % P
    return num * pow(den, P - 2, P) % P


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (2, 5), (30, 59), (27, 53), (59, 59)])
def test_query_rows_are_the_lagrange_coefficients(n1: int, n2: int) -> None:
    if not kernels.available():
        pytest.skip("numba kernels unavailable")
    from secemb.fss._sketchproof_kernels import query_rows

    points = np.array([n2, n2 + 1, P - 1, P - 2, P - n2, *(n2 + secrets.randbelow(P - n2) for _ in range(3))],
                      np.uint64)
    wire = np.empty((points.size, n1), np.uint64)
    gadget = np.empty((points.size, n2), np.uint64)
    query_rows(points, F.barycentric(n1), F.barycentric(n2), wire, gadget)
    for r, x in enumerate(points.tolist()):
        assert wire[r].tolist() == [_lagrange(n1, x, j) for j in range(n1)]
        assert gadget[r].tolist() == [_lagrange(n2, x, j) for j in range(n2)]


@pytest.mark.parametrize("keys", [1, 250, 1000])
def test_coefficients_are_shake_integers_mod_p(backend: str, keys: int) -> None:
    params = S.SketchParams(keys)
    seeds = [secrets.token_bytes(16) for _ in range(3)] + [bytes(16), b"\xff" * 16]
    r, s = S._coefficients(params, seeds)
    width = params.calls + params.chunk
    for d, seed in enumerate(seeds):
        blob = hashlib.shake_128(b"secemb/fss/sketchproof/v1/coefficients" + seed).digest(16 * width)
        want = [int.from_bytes(blob[16 * i : 16 * i + 16], "little") % P for i in range(width)]
        assert r[d].tolist() + s[d].tolist() == want
    assert S._coefficients(params, [])[0].shape == (0, params.calls)


@pytest.mark.parametrize("keys", [1, 250, 1000])
def test_server1_shares_are_each_seeds_expansion(backend: str, keys: int) -> None:
    params = S.SketchParams(keys)
    sigmas = [secrets.token_bytes(16) for _ in range(4)] + [bytes(16), b"\xff" * 16]
    got = S.server1_shares(params, sigmas)
    assert got.dtype == np.uint64 and got.shape == (len(sigmas), params.proof_length)
    for row, sigma in zip(got, sigmas, strict=True):
        assert row.tolist() == F.expand(S.share_seed(sigma), params.proof_length).tolist()
    assert S.server1_shares(params, []).shape == (0, params.proof_length)


def test_server1_shares_skip_p_as_expand_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream word whose top 61 bits are ``p`` (here forced into row 1's word 5) makes that row
    again by ``expand`` of the real stream: the shares equal the specification's, with no ``p``."""
    if not kernels.available():
        pytest.skip("numba kernels unavailable")
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    from secemb.fss import _rangeproof_kernels as R

    real = R.ctr_streams

    def forced(keys: np.ndarray, buf: np.ndarray, size: int, stride: int) -> None:
        real(keys, buf, size, stride)
        buf[stride + 40 : stride + 48] = np.frombuffer((P << 3).to_bytes(8, "little"), np.uint8)

    monkeypatch.setattr(R, "ctr_streams", forced)
    params = S.SketchParams(250)
    sigmas = [secrets.token_bytes(16) for _ in range(3)]
    got = S.server1_shares(params, sigmas)
    assert not np.any(got == np.uint64(P))
    for row, sigma in zip(got, sigmas, strict=True):
        assert row.tolist() == F.expand(S.share_seed(sigma), params.proof_length).tolist()


def _honest(params: S.SketchParams, n: int) -> tuple[np.ndarray, np.ndarray, list[bytes], list[bytes]]:
    """``n`` devices' inputs ``x = (r z, r^2 z, z)`` (uint64 (n, K, 3)), their sigmas and seeds."""
    r = np.array([[secrets.randbelow(P) for _ in range(params.keys)] for _ in range(n)], np.uint64)
    z = np.array([[secrets.randbelow(P) for _ in range(params.keys)] for _ in range(n)], np.uint64)
    x = np.stack([F.mul(r, z), F.mul(F.mul(r, r), z), z], axis=-1)
    return x, np.array(0), [secrets.token_bytes(16) for _ in range(n)], [secrets.token_bytes(16) for _ in range(n)]


@pytest.mark.parametrize("keys", [7, 250])
def test_verify_is_decide_of_the_messages(backend: str, keys: int) -> None:
    params = S.SketchParams(keys)
    n = 4
    x, _, sigmas, seeds = _honest(params, n)
    x[2, keys // 2, 0] = F.add(x[2, keys // 2, 0], np.uint64(1))  # device 2: A^2 != BC at one key
    pi0 = [S._share(params, S._prove_inputs(params, x[d], seeds[d], sigmas[d], secrets.token_bytes), sigmas[d])
           for d in range(n)]
    x0 = np.array([[[secrets.randbelow(P) for _ in range(3)] for _ in range(keys)] for _ in range(n)], np.uint64)
    x1 = F.sub(x, x0)
    queries = [secrets.token_bytes(16) for _ in range(n)]
    shares0 = S.parse(params, pi0)
    v1 = S.verifier_messages(params, x1, S.server1_shares(params, sigmas), seeds, queries)
    v0 = S.verifier_messages(params, x0, shares0, seeds, queries)
    want = S.decide(params, v0, v1, seeds)
    assert want.tolist() == [True, True, False, True]
    assert S.verify(params, x0, shares0, seeds, queries, v1).tolist() == want.tolist()
    with pytest.raises(InvalidMessage):
        S.verify(params, x0, shares0, seeds, queries, v1[:3])


def test_well_formed_and_parse_name_the_first_bad_message(backend: str) -> None:
    params = S.SketchParams(20)
    size = params.proof_bytes
    good = S.prove(params, np.zeros((20, 3), np.uint64), secrets.token_bytes(16), secrets.token_bytes(16))
    top = (P - 1).to_bytes(8, "little") * params.proof_length  # the largest element, taken
    msgs: list[bytes | memoryview] = [good, top, good[:8] + P.to_bytes(8, "little") + good[16:], good[:-1],
                                      b"\xff" * size, memoryview(good), good + b"\0"]
    want = []
    for m in msgs:
        try:
            S.check_message(params, m)
            want.append(True)
        except InvalidMessage:
            want.append(False)
    assert want == [True, True, False, False, False, True, False]
    assert S.well_formed(params, msgs).tolist() == want
    assert S.well_formed(params, []).shape == (0,)
    for bad, fault in ((2, "an element"), (3, "expected"), (4, "an element"), (6, "expected")):
        # parse names the first bad message and its own fault, whatever follows it
        with pytest.raises(InvalidMessage, match=f"sketch proof 2: {fault}"):
            S.parse(params, [good, top, msgs[bad], msgs[3], msgs[2]])
    assert S.parse(params, [good, top, memoryview(good)]).tolist() == [
        list(np.frombuffer(m, "<u8")) for m in (good, top, good)]
