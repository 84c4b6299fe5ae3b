"""The device's sketch inputs, compiled (session 29, helper B, issue 34): :func:`secemb.fss.sketch.device_inputs`
through :func:`secemb.fss._sketch_device_kernels.device_core` against the numpy reference and against Python integers.

Expected values are computed here, independently: the seed's expansion from ``hashlib.shake_128``, ``hashlib.sha256``
and OpenSSL's AES-256-CTR stream (``cryptography``) read by ``int.from_bytes``, each leaf's keyed MMO block with
OpenSSL's AES a leaf, ``(r_a z, r_a^2 z, z)`` in Python integers mod ``p``.  The servers' expansion
(:func:`secemb.fss.sketch.expand`, :func:`secemb.fss._sketch_device_kernels.coefficients_core`) is checked the same
way.  The kernels alone are also fed raw 128-bit words at the reduction's edges (``p - 1``, ``p``, ``2^127``,
``2^128 - 1``, ...), which SHAKE and AES outputs reach too rarely to test through ``device_inputs``."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters
from secemb.fss import field, kernels
from secemb.fss.sketch import device_inputs, expand

P = field.P
MASK = 2**64 - 1
BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(),
                                                                    reason="no compiled kernels here"))]
needs_kernels = pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
#: 64-bit words at the reduction's edges: zero, one, around p and 2^61, the top bit, all ones
EDGE_WORDS = [0, 1, 2, P - 1, P, P + 1, 1 << 61, 1 << 63, MASK - 1, MASK]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(kernels, "BACKEND", request.param)
    yield request.param


def _expansion(seed: bytes, mp: int) -> tuple[bytes, list[int]]:
    """The AES key ``k_u`` and ``r_x`` of a seed (the specification): SHAKE-128's first 16 bytes, and the stream seed
    (its next 16)'s AES-256-CTR stream under ``SHA-256(b"secemb.CtrDrbg" || s_r)`` from counter 0, 16 bytes a
    position read as a little-endian integer mod p."""
    d = hashlib.shake_128(b"secemb-sketch-expand" + seed).digest(32)
    enc = Cipher(algorithms.AES(hashlib.sha256(b"secemb.CtrDrbg" + d[16:]).digest()), modes.CTR(bytes(16))).encryptor()
    stream = enc.update(bytes(16 * mp))
    return d[:16], [int.from_bytes(stream[16 * x : 16 * (x + 1)], "little") % P for x in range(mp)]


def _python(seed: bytes, mp: int, alphas: np.ndarray, leaf0: np.ndarray, leaf1: np.ndarray) -> list[list[int]]:
    """``(r_a z, r_a^2 z, z)`` per key: :func:`_expansion`, OpenSSL's AES a leaf, Python integers."""
    key, coefficients = _expansion(seed, mp)

    def z(word: np.ndarray) -> int:
        w = int(word[0]).to_bytes(8, "little") + int(word[1]).to_bytes(8, "little")
        y = Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(w)
        return int.from_bytes(bytes(a ^ b for a, b in zip(y, w, strict=True)), "little") % P

    out = []
    for k, a in enumerate(alphas.tolist()):
        r = coefficients[a]
        zk = (z(leaf0[k]) - z(leaf1[k])) % P
        out.append([r * zk % P, r * r * zk % P, zk])
    return out


def _leaves(k: int, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random leaf words with edge words in the first rows and one key whose two words are equal (z = 0)."""
    leaf0 = gen.integers(0, MASK, (k, 2), dtype=np.uint64, endpoint=True)
    leaf1 = gen.integers(0, MASK, (k, 2), dtype=np.uint64, endpoint=True)
    for i, w in enumerate(EDGE_WORDS[: max(0, k - 1)]):
        leaf0[i] = (w, EDGE_WORDS[-1 - i])
        leaf1[i] = (EDGE_WORDS[-1 - i], w)
    if k:
        leaf1[-1] = leaf0[-1]
    return leaf0, leaf1


@pytest.mark.parametrize(("k", "mp"), [(0, 1), (1, 1), (7, 5), (11, 32), (250, 32), (200, 1792), (37, 300)])
def test_device_inputs_equal_python_integers(backend: str, k: int, mp: int) -> None:
    """Both backends give the specification's values, points at the domain's ends included, a zero ``z`` too."""
    gen = np.random.default_rng(k * 7919 + mp)
    seed = os.urandom(16)
    alphas = gen.integers(0, mp, k)
    if k >= 2:
        alphas[0], alphas[1] = 0, mp - 1
    leaf0, leaf1 = _leaves(k, gen)
    got = device_inputs(seed, mp, alphas, leaf0, leaf1)
    assert got.dtype == np.uint64 and got.shape == (k, 3)
    assert got.tolist() == _python(seed, mp, alphas, leaf0, leaf1)
    if k:
        assert got[-1].tolist() == [0, 0, 0]  # equal leaf words: z = 0


@needs_kernels
@pytest.mark.parametrize(("k", "mp"), [(1, 1), (250, 32), (200, 1792), (1000, 1792), (64, 3)])
def test_compiled_equals_the_numpy_reference(monkeypatch: pytest.MonkeyPatch, k: int, mp: int) -> None:
    """The compiled path and the numpy reference, bit for bit, over many seeds; points of any integer dtype, leaves
    strided (not C-contiguous), the same array for both parties."""
    gen = np.random.default_rng(k + mp)
    for trial in range(8):
        seed = os.urandom(16)
        alphas = gen.integers(0, mp, k).astype([np.int64, np.uint64, np.int32, np.uint16][trial % 4])
        leaf0, leaf1 = _leaves(k, gen)
        if trial == 5:
            leaf0 = np.repeat(leaf0, 2, axis=0)[::2]
        if trial == 6:
            leaf1 = leaf0
        got = {}
        for name in ("numpy", "numba"):
            monkeypatch.setattr(kernels, "BACKEND", name)
            got[name] = device_inputs(seed, mp, alphas, leaf0, leaf1)
        np.testing.assert_array_equal(got["numba"], got["numpy"])
        assert got["numba"].max(initial=0) < P


#: 128-bit words (low, high) from every pair of edge halves
EDGE_PAIRS = [(lo, hi) for lo in EDGE_WORDS for hi in EDGE_WORDS]


def _value(w: tuple[int, int]) -> int:
    return (w[0] + (w[1] << 64)) % P


@needs_kernels
def test_the_device_kernel_reduces_edge_words_as_python_integers() -> None:
    """:func:`device_core` on raw 128-bit words at the edges for the coefficient and both MMO blocks (each coefficient
    with three pairs of blocks): ``r = rw mod p``, ``z = (h0 mod p) - (h1 mod p)`` in Python integers."""
    from secemb.fss._sketch_device_kernels import device_core

    n = len(EDGE_PAIRS)
    rw = [EDGE_PAIRS[i // 3] for i in range(3 * n)]
    h0 = [EDGE_PAIRS[(7 * i) % n] for i in range(3 * n)]
    h1 = [EDGE_PAIRS[(13 * i + 5) % n] for i in range(3 * n)]
    out = np.empty((3 * n, 3), np.uint64)
    device_core(np.array(rw, np.uint64), np.array(h0 + h1, np.uint64), out)
    want = []
    for w, a, b in zip(rw, h0, h1, strict=True):
        r, z = _value(w), (_value(a) - _value(b)) % P
        want.append([r * z % P, r * r * z % P, z])
    assert out.tolist() == want


@needs_kernels
def test_the_coefficients_kernel_reduces_edge_words_as_python_integers() -> None:
    from secemb.fss._sketch_device_kernels import coefficients_core

    r, r2 = np.empty(len(EDGE_PAIRS), np.uint64), np.empty(len(EDGE_PAIRS), np.uint64)
    coefficients_core(np.array(EDGE_PAIRS, np.uint64), r, r2)
    assert r.tolist() == [_value(w) for w in EDGE_PAIRS]
    assert r2.tolist() == [_value(w) ** 2 % P for w in EDGE_PAIRS]


@pytest.mark.parametrize(("n", "mp"), [(0, 4), (1, 1), (3, 32), (2, 300), (2, 1792)])
def test_expand_equals_python_integers(backend: str, n: int, mp: int) -> None:
    """The servers' expansion on both backends: every position's ``r_x`` and ``r_x^2`` and each key, the spec's."""
    seeds = [os.urandom(16) for _ in range(n)]
    ex = expand(seeds, mp)
    assert ex.r.shape == ex.r2.shape == (n, mp) and ex.keys.shape == (n, 16)
    for u, seed in enumerate(seeds):
        key, coefficients = _expansion(seed, mp)
        assert ex.keys[u].tobytes() == key
        assert ex.r[u].tolist() == coefficients
        assert ex.r2[u].tolist() == [x * x % P for x in coefficients]


@needs_kernels
def test_the_devices_random_access_is_the_servers_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's compiled path draws ``r_a`` block by block at its points; with equal leaves but at one key the
    sketch's ``r z`` over ``z`` gives ``r_a``, which equals the servers' :func:`expand` at ``a`` -- at every position
    of a full row (mp = 1792) and the last ones of a long stream (counter blocks past 2^16)."""
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    seed = os.urandom(16)
    for mp, alphas in ((1792, np.arange(1792)), (70000, np.array([0, 65535, 65536, 65537, 69999]))):
        r = expand([seed], mp).r[0]
        leaf0 = np.zeros((len(alphas), 2), np.uint64)
        leaf1 = np.ones((len(alphas), 2), np.uint64)
        x = device_inputs(seed, mp, alphas, leaf0, leaf1)
        z = int(x[0, 2])
        assert z and (x[:, 2] == z).all()
        inverse = pow(z, P - 2, P)
        assert [int(v) * inverse % P for v in x[:, 0]] == r[alphas].tolist()


@pytest.mark.parametrize(("mp", "alphas", "why"), [
    (8, [0, 8], "a point at mp"),
    (8, [-1, 0], "a negative point"),
    (8, [0, 1 << 40], "a point far past the domain"),
])
def test_points_outside_the_domain_are_refused(backend: str, mp: int, alphas: list[int], why: str) -> None:
    """Refused before anything is read: the compiled loop indexes the coefficients by the points, unchecked."""
    leaf = np.zeros((2, 2), np.uint64)
    with pytest.raises(InvalidParameters, match=r"points must be in \[0, 8\)"):
        device_inputs(os.urandom(16), mp, np.array(alphas), leaf, leaf)


def test_bad_arguments_are_refused_on_both_backends(backend: str) -> None:
    seed, leaf = os.urandom(16), np.zeros((2, 2), np.uint64)
    with pytest.raises(InvalidParameters, match="16 bytes"):
        device_inputs(seed[:15], 8, np.array([0, 1]), leaf, leaf)
    with pytest.raises(InvalidParameters, match=r"16 bytes, got \['str'\]"):  # 16 characters, not bytes (S29-R1)
        device_inputs("a" * 16, 8, np.array([0, 1]), leaf, leaf)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters, match="mp must be"):
        device_inputs(seed, 0, np.array([0, 1]), leaf, leaf)
    with pytest.raises(InvalidParameters, match="leaf1 must be uint64"):
        device_inputs(seed, 8, np.array([0, 1]), leaf, np.zeros((2, 2), ">u8"))
    with pytest.raises(InvalidParameters, match="leaf0 must be uint64"):
        device_inputs(seed, 8, np.array([0, 1]), np.zeros((2, 3), np.uint64), leaf)
    with pytest.raises(InvalidParameters, match="points must be integers"):
        device_inputs(seed, 8, np.array([[0, 1]]), leaf, leaf)
    assert device_inputs(seed, 8, np.array([]), leaf[:0], leaf[:0]).shape == (0, 3)
