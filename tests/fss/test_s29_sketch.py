"""The sketch check's kernel (session 29, helper A, issue 34 (a)): :mod:`secemb.fss.sketch` and its compiled loop
:func:`secemb.fss._sketch_kernels.sketch_accumulate`.

Expected values are computed here, independently: the seed's expansion from ``hashlib.shake_128`` and
``int.from_bytes``; each leaf's hash with OpenSSL's AES (``cryptography``) a leaf and Python integers; the sums
``(A, B, C)`` in Python integers mod ``p``.  The numpy reference and the compiled loop must both give them, bit for bit,
on random and edge leaves (all-ones words, zero, words near ``p``), coefficients at ``p - 1``, rows of 1 to 128
leaves, groups that cut keys, several devices; real DPF keys of both parties, walked by the repo's walk, give
sketches with ``A^2 = B C`` that the device computes from its own leaves, and a key whose leaves differ at two
positions does not; bad arguments are refused before the kernel reads anything by address."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import field, kernels
from secemb.fss.keys import PathKeys
from secemb.fss.sketch import (EXPAND_TAG, SKETCH_SEED_BYTES, Expanded, SketchCheck, device_inputs, expand,
                               server_inputs)
from secemb.fss.tree import leaf_groups, padded_leaves

P = field.P
MASK = 2**64 - 1

def _ifma() -> bool:
    """Whether the compiled kernels run here and the CPU has the IFMA loop's instructions."""
    if not kernels.available():
        return False
    from secemb.fss import _aesni

    return _aesni.IFMA


#: the numpy reference and the compiled loops: the scalar one and, where the CPU has it, the IFMA one
BACKENDS = ["numpy", pytest.param("scalar", marks=pytest.mark.skipif(not kernels.available(),
                                                                     reason="no compiled kernels here")),
            pytest.param("ifma", marks=pytest.mark.skipif(not _ifma(), reason="no AVX-512 IFMA here"))]
#: leaf words at the edges: zero, one, around p and 2^61, the top bit, all ones
EDGE_WORDS = [0, 1, 2, P - 1, P, P + 1, 1 << 61, 1 << 63, MASK - 1, MASK]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The numpy reference, or the compiled kernels with :meth:`SketchCheck.add` calling the loop named."""
    monkeypatch.setattr(kernels, "BACKEND", "numpy" if request.param == "numpy" else "numba")
    if request.param != "numpy":
        from secemb.fss import _sketch_kernels

        monkeypatch.setattr(_sketch_kernels, "sketch_accumulate",
                            getattr(_sketch_kernels, f"sketch_accumulate_{request.param}"))
    yield request.param


def _expansion(seed: bytes, mp: int) -> tuple[bytes, list[int]]:
    """The AES key and ``r_x`` of a seed (the specification): SHAKE-128's first 16 bytes, and the stream seed (its next
    16)'s AES-256-CTR stream under ``SHA-256(b"secemb.CtrDrbg" || s_r)`` from counter 0, 16 bytes a position read by
    ``int.from_bytes`` mod p (session 29, helper B: r by random access)."""
    d = hashlib.shake_128(b"secemb-sketch-expand" + seed).digest(32)
    enc = Cipher(algorithms.AES(hashlib.sha256(b"secemb.CtrDrbg" + d[16:]).digest()), modes.CTR(bytes(16))).encryptor()
    stream = enc.update(bytes(16 * mp))
    return d[:16], [int.from_bytes(stream[16 * x : 16 * (x + 1)], "little") % P for x in range(mp)]


def _z(key: bytes, word: np.ndarray) -> int:
    """A leaf's hash: OpenSSL's AES of its 16 little-endian bytes, XOR the bytes, a little-endian integer mod p."""
    w = int(word[0]).to_bytes(8, "little") + int(word[1]).to_bytes(8, "little")
    y = Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(w)
    return int.from_bytes(bytes(a ^ b for a, b in zip(y, w, strict=True)), "little") % P


def _formula(leaves: np.ndarray, row0: int, frontier: int, per_user: int, keys: list[bytes], r: list[list[int]],
             acc0: np.ndarray) -> np.ndarray:
    """``acc0 + (sum r z, sum r^2 z, sum z)`` per key over rows ``row0 + i`` of ``leaves``, in Python integers."""
    out = [[int(v) for v in row] for row in acc0]
    width = leaves.shape[1]
    for i in range(leaves.shape[0]):
        row = row0 + i
        key = row // frontier
        u = key // per_user
        for e in range(width):
            z = _z(keys[u], leaves[i, e])
            rx = r[u][(row % frontier) * width + e]
            out[key][0] += rx * z
            out[key][1] += rx * rx * z
            out[key][2] += z
    return np.array([[v % P for v in row] for row in out], np.uint64)


def _expanded(keys: list[bytes], r: list[list[int]]) -> Expanded:
    """Given keys and coefficients (edge values the expansion would rarely give), ``r^2`` in Python integers."""
    return Expanded(np.frombuffer(b"".join(keys), np.uint8).reshape(len(keys), 16), np.array(r, np.uint64),
                    np.array([[x * x % P for x in row] for row in r], np.uint64))


def _fold(check: SketchCheck, leaves: np.ndarray, group: int) -> np.ndarray:
    for r0 in range(0, len(leaves), group):
        r1 = min(r0 + group, len(leaves))
        check.add(r0, r1, leaves[r0:r1])
    return check.values


def test_expand_is_shake_128_of_the_seed() -> None:
    seeds = [os.urandom(SKETCH_SEED_BYTES) for _ in range(3)]
    ex = expand(seeds, 37)
    assert EXPAND_TAG == b"secemb-sketch-expand"
    assert ex.keys.shape == (3, 16) and ex.r.shape == ex.r2.shape == (3, 37) and ex.r.dtype == np.uint64
    for u, seed in enumerate(seeds):
        key, r = _expansion(seed, 37)
        assert ex.keys[u].tobytes() == key
        assert ex.r[u].tolist() == r
        assert ex.r2[u].tolist() == [x * x % P for x in r]
    assert not ex.r.flags.writeable and not ex.r2.flags.writeable and not ex.keys.flags.writeable
    assert expand([], 4).r.shape == (0, 4)


@pytest.mark.parametrize(("width", "frontier", "per_user", "users", "group"), [
    (1, 1, 1, 1, 1),       # one leaf in all
    (1, 5, 2, 2, 3),       # rows of one leaf: all staged
    (3, 2, 3, 2, 4),
    (15, 2, 1, 3, 2),      # one short of a block
    (16, 2, 2, 2, 3),      # one whole block a row: in place
    (17, 1, 2, 2, 3),      # a block and one staged leaf
    (31, 2, 1, 2, 3),
    (32, 1, 5, 2, 4),      # the cuckoo layout's rows (one 128-bit sum a key)
    (33, 2, 2, 1, 3),      # two sums a row, the second of one leaf
    (64, 2, 1, 3, 5),
    (100, 1, 3, 1, 2),
    (128, 3, 1, 2, 2),     # the full layout's rows: four sums a row
])
def test_sketch_equals_python_integers_and_openssl(backend: str, width: int, frontier: int, per_user: int,
                                                   users: int, group: int) -> None:
    gen = np.random.default_rng(2900 + width)
    seeds = [os.urandom(16) for _ in range(users)]
    ex = expand(seeds, width * frontier)
    leaves = gen.integers(0, MASK, (users * per_user * frontier, width, 2), np.uint64, endpoint=True)
    got = _fold(SketchCheck(ex, per_user), leaves, group)
    keys, r = zip(*(_expansion(s, width * frontier) for s in seeds), strict=True)
    want = _formula(leaves, 0, frontier, per_user, list(keys), list(r), np.zeros((users * per_user, 3), np.uint64))
    np.testing.assert_array_equal(got, want)
    assert np.all(want != 0) and np.all(got < P)


@pytest.mark.parametrize("width", [8, 24, 128])
def test_edge_leaves_coefficients_and_sums(backend: str, width: int) -> None:
    """Leaf words from :data:`EDGE_WORDS` (all-ones and zero rows among them), every ``r_x = p - 1`` (the largest
    products: 32 of them the largest 128-bit sums) and values starting at ``p - 1``, a group that starts mid-walk."""
    gen = np.random.default_rng(width)
    frontier, per_user = 2, 2
    leaves = np.array(EDGE_WORDS, np.uint64)[gen.integers(0, len(EDGE_WORDS), (2 * per_user * frontier, width, 2))]
    leaves[0] = MASK
    leaves[1] = 0
    keys = [os.urandom(16), os.urandom(16)]
    r = [[P - 1] * (frontier * width), [P - 1 - (x % 3) for x in range(frontier * width)]]
    check = SketchCheck(_expanded(keys, r), per_user)
    acc0 = np.full((4, 3), P - 1, np.uint64)
    check.values[:] = acc0
    check.add(3, 8, leaves[3:])  # rows 3..7: a group that starts in the middle of key 1
    check.add(0, 3, leaves[:3])
    np.testing.assert_array_equal(check.values, _formula(leaves, 0, frontier, per_user, keys, r, acc0))


@pytest.mark.parametrize(("width", "frontier", "group"), [(4200, 1, 1), (700, 3, 2)])
def test_long_key_runs_at_large_coefficients(backend: str, width: int, frontier: int, group: int) -> None:
    """A key's run of 2,100 or 4,200 leaves: the IFMA loop's calls of 1,024 leaves, chunks and a staged remainder, its
    unreduced sums at their largest: ``r_x`` alternately ``p - 1`` and ``p - k`` with ``k = isqrt(p - 1)`` (both
    ``r`` and ``r^2 = k^2`` above ``p - 2^32``), so a call of 4,096 leaves would wrap its sums."""
    gen = np.random.default_rng(width)
    k = int(np.sqrt(float(P - 1)))
    while k * k >= P:
        k -= 1
    assert (P - k) ** 2 % P > P - 2**32
    keys = [os.urandom(16)]
    r = [[P - 1 if x % 2 else P - k for x in range(width * frontier)]]
    leaves = gen.integers(0, MASK, (frontier, width, 2), np.uint64, endpoint=True)
    got = _fold(SketchCheck(_expanded(keys, r), 1), leaves, group)
    np.testing.assert_array_equal(got, _formula(leaves, 0, frontier, 1, keys, r, np.zeros((1, 3), np.uint64)))


def test_strided_leaves(backend: str) -> None:
    """A strided view of leaves (the compiled path reads a C-contiguous copy by address)."""
    gen = np.random.default_rng(7)
    leaves = gen.integers(0, MASK, (4, 64, 2), np.uint64, endpoint=True)
    view = leaves[:, ::2]
    assert not view.flags.c_contiguous
    seeds = [os.urandom(16)]
    keys, r = zip(*(_expansion(s, 64) for s in seeds), strict=True)
    got = _fold(SketchCheck(expand(seeds, 64), 2), view, 4)
    np.testing.assert_array_equal(got, _formula(np.ascontiguousarray(view), 0, 2, 2, list(keys), list(r),
                                                np.zeros((2, 3), np.uint64)))


def test_strided_coefficients(backend: str) -> None:
    """Coefficients in strided views (the IFMA loop reads C-contiguous copies by address)."""
    gen = np.random.default_rng(8)
    keys = [os.urandom(16), os.urandom(16)]
    r = gen.integers(0, P, (2, 96)).tolist()
    ex = _expanded(keys, r)
    wide = Expanded(ex.keys, np.repeat(ex.r, 2, axis=1)[:, ::2], np.repeat(ex.r2, 2, axis=1)[:, ::2])
    assert not wide.r.flags.c_contiguous and not wide.r2.flags.c_contiguous
    leaves = gen.integers(0, MASK, (4, 48, 2), np.uint64, endpoint=True)
    got = _fold(SketchCheck(wide, 1), leaves, 3)
    np.testing.assert_array_equal(got, _formula(leaves, 0, 2, 1, keys, r, np.zeros((2, 3), np.uint64)))


@pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
def test_the_reduction_at_its_edges() -> None:
    """``red128`` and ``fold128`` (below ``2^62 + 2^6``, what the sums' bound needs) on 128-bit values at the edges
    (multiples of p and next to them, 32 largest products, 2^128 - 1), ``red64`` on every 64-bit edge, ``addp`` at
    p - 1."""
    from secemb.fss._sketch_kernels import addp, fold128, red64, red128

    values = [0, 1, P - 1, P, P + 1, 2 * P, 1 << 61, 1 << 64, (1 << 64) + 7, P * P, 32 * (P - 1) ** 2,
              (1 << 127) - 1, 1 << 127, 8 * P, (1 << 128) - 1, (1 << 128) - P, (1 << 128) - (1 << 61),
              (1 << 125) - 1, ((1 << 61) - 1) << 64 | MASK]
    for v in values:
        assert int(red128(np.uint64(v >> 64), np.uint64(v & MASK))) == v % P, v
        folded = int(fold128(np.uint64(v >> 64), np.uint64(v & MASK)))
        assert folded % P == v % P and folded < 2**62 + 2**6, v
    for v in [0, 1, P - 1, P, P + 1, 2 * P, MASK - 1, MASK, (1 << 63), 8 * P]:
        assert int(red64(np.uint64(v))) == v % P, v
    for a, b in [(P - 1, P - 1), (P - 1, 1), (0, 0), (P - 1, 0), (1 << 60, 1 << 60)]:
        assert int(addp(np.uint64(a), np.uint64(b))) == (a + b) % P


def _walk(path: PathKeys, ex: Expanded, per_user: int) -> np.ndarray:
    check = SketchCheck(ex, per_user)
    for r0, r1, leaves in leaf_groups(path):
        check.add(r0, r1, leaves)
    return check.values


def _square_gap(x: np.ndarray) -> list[int]:
    """``A^2 - B C mod p`` of each key's sketch, in Python integers."""
    return [(int(a) * int(a) - int(b) * int(c)) % P for a, b, c in x]


@pytest.mark.parametrize(("domain", "per_user", "users"), [
    (20, 5, 3),    # a cuckoo bucket's domain: one row of 32 leaves a key
    (300, 2, 2),   # rows of 128 leaves, three a key, the last partly padding
    (1, 3, 2),     # a one-point domain: a leaf a key
])
def test_honest_keys_give_a_square_and_the_devices_own_sketch(backend: str, domain: int, per_user: int,
                                                              users: int) -> None:
    """Real DPF keys (:func:`secemb.fss.gen_path`), both parties walked by the repo's walk: the servers' shares add up
    to the device's sketch from its own two leaf words at its points -- ``(r_a z, r_a^2 z, z)``, which the test also
    computes in Python integers -- so ``A^2 = B C``; ``z`` is not 0."""
    gen = np.random.default_rng(domain)
    alphas = gen.integers(0, domain, users * per_user)
    p0, p1, state = fss.gen_path(alphas, domain)
    mp = padded_leaves(p0.params)
    seeds = [os.urandom(16) for _ in range(users)]
    ex = expand(seeds, mp)
    x = field.add(server_inputs(_walk(p0, ex, per_user), 0), server_inputs(_walk(p1, ex, per_user), 1))
    mine = np.concatenate([device_inputs(seeds[u], mp, alphas[u * per_user : (u + 1) * per_user],
                                         state.leaf0[u * per_user : (u + 1) * per_user],
                                         state.leaf1[u * per_user : (u + 1) * per_user]) for u in range(users)])
    np.testing.assert_array_equal(x, mine)
    for k, a in enumerate(alphas.tolist()):
        key, r = _expansion(seeds[k // per_user], mp)
        z = (_z(key, state.leaf0[k]) - _z(key, state.leaf1[k])) % P
        assert z != 0 and x[k].tolist() == [r[a] * z % P, r[a] * r[a] * z % P, z]
    assert _square_gap(x) == [0] * len(x)


def test_a_two_point_key_breaks_the_square(backend: str) -> None:
    """The ``two-points`` attack (:mod:`secemb.protocols.adversary`): one key's last-level seed correction word with
    bit 1 flipped, the same for both servers, so that key's leaves differ at its point and its sibling.  Its sketch
    has ``A^2 != B C`` (the other keys' still square) and differs from what the device can claim from its leaves."""
    domain, per_user, users, bad = 50, 4, 2, 5
    alphas = np.random.default_rng(34).integers(0, domain, users * per_user)
    p0, p1, state = fss.gen_path(alphas, domain)
    cw = p0.cw_seed.copy()
    cw[bad, -1, 0] ^= np.uint64(2)
    paths = [PathKeys(p.params, p.party, p.roots, cw, p.cw_tl, p.cw_tr) for p in (p0, p1)]
    mp = padded_leaves(p0.params)
    seeds = [os.urandom(16) for _ in range(users)]
    ex = expand(seeds, mp)
    x = field.add(server_inputs(_walk(paths[0], ex, per_user), 0), server_inputs(_walk(paths[1], ex, per_user), 1))
    gap = _square_gap(x)
    assert gap[bad] != 0 and gap[:bad] + gap[bad + 1 :] == [0] * (len(x) - 1)
    u = bad // per_user
    sl = slice(u * per_user, (u + 1) * per_user)
    claim = device_inputs(seeds[u], mp, alphas[sl], state.leaf0[sl], state.leaf1[sl])
    assert not np.array_equal(claim[bad % per_user], x[bad])


def test_server_inputs_are_the_values_and_their_negation() -> None:
    values = np.array([[0, 1, P - 1], [5, P - 5, 2]], np.uint64)
    assert server_inputs(values, 0).tolist() == values.tolist()
    assert server_inputs(values, 1).tolist() == [[(-int(v)) % P for v in row] for row in values]
    assert server_inputs(values, 0) is not values


@pytest.mark.parametrize(("r0", "r1", "leaves", "why"), [
    (0, 2, np.zeros((2, 16, 2), np.int64), "another dtype"),
    (0, 2, np.zeros((2, 16, 2), ">u8"), "another byte order"),
    (0, 2, np.zeros((2, 16, 2), np.float64), "floats"),
    (0, 2, np.zeros((2, 16), np.uint64), "no word axis"),
    (0, 2, np.zeros((2, 16, 3), np.uint64), "three words a leaf"),
    (0, 3, np.zeros((2, 16, 2), np.uint64), "rows that do not match the shape"),
    (0, 2, np.zeros((2, 64, 2), np.uint64), "rows wider than the domain"),
    (0, 2, np.zeros((2, 0, 2), np.uint64), "rows of no leaves"),
    (7, 9, np.zeros((2, 16, 2), np.uint64), "rows past the walk's end (8 rows)"),
    (-1, 1, np.zeros((2, 16, 2), np.uint64), "a negative row"),
])
def test_bad_leaf_groups_are_refused(backend: str, r0: int, r1: int, leaves: np.ndarray, why: str) -> None:
    """Refused with InvalidParameters before anything is read (the compiled loop reads leaves, round keys and
    coefficients by address and indexes the values by row, unchecked): a walk of 4 keys over 32 positions."""
    check = SketchCheck(expand([os.urandom(16), os.urandom(16)], 32), 2)
    with pytest.raises(InvalidParameters, match="must be uint64"):
        check.add(r0, r1, leaves)
    assert not check.values.any(), why


def test_bad_arguments_are_refused() -> None:
    seed = os.urandom(16)
    leaf = np.zeros((2, 2), np.uint64)
    with pytest.raises(InvalidParameters, match="16 bytes"):
        expand([seed, seed[:15]], 8)
    with pytest.raises(InvalidParameters, match="mp must be"):
        expand([seed], 0)
    with pytest.raises(InvalidParameters, match="per_user"):
        SketchCheck(expand([seed], 8), 0)
    good = expand([seed], 8)
    for bad in ({"keys": good.keys.astype(np.uint64)}, {"keys": good.keys[:, :8]},
                {"keys": np.zeros((1, 32), np.uint8)[:, ::2]}, {"keys": np.zeros((2, 16), np.uint8)},
                {"r": good.r[:, :4]}, {"r": np.full((1, 8), P, np.uint64)}, {"r2": good.r2.astype(np.int64)},
                {"r": np.zeros((1, 0), np.uint64), "r2": np.zeros((1, 0), np.uint64)}):
        with pytest.raises(InvalidParameters, match="expanded seeds must be"):
            dataclasses.replace(good, **bad)
    with pytest.raises(InvalidParameters, match="expanded seeds"):
        SketchCheck(np.zeros((1, 8), np.uint64), 1)  # type: ignore[arg-type]
    for alphas in ([0, 8], [-1, 0]):
        with pytest.raises(InvalidParameters, match=r"points must be in \[0, 8\)"):
            device_inputs(seed, 8, np.array(alphas), leaf, leaf)
    with pytest.raises(InvalidParameters, match="points must be integers"):
        device_inputs(seed, 8, np.array([0.0, 1.0]), leaf, leaf)
    with pytest.raises(InvalidParameters, match="leaf1 must be uint64"):
        device_inputs(seed, 8, np.array([0, 1]), leaf, leaf[:1])
    with pytest.raises(InvalidParameters, match="leaf0 must be uint64"):
        device_inputs(seed, 8, np.array([0, 1]), leaf.astype(np.int64), leaf)
    with pytest.raises(InvalidParameters, match="16 bytes"):
        device_inputs(seed[:8], 8, np.array([0, 1]), leaf, leaf)
    assert device_inputs(seed, 8, np.array([], np.int64), leaf[:0], leaf[:0]).shape == (0, 3)
    with pytest.raises(InvalidParameters, match="party must be"):
        server_inputs(np.zeros((2, 3), np.uint64), 2)
    with pytest.raises(InvalidParameters, match="below p"):
        server_inputs(np.full((2, 3), P, np.uint64), 1)
    with pytest.raises(InvalidParameters, match="below p"):
        server_inputs(np.zeros((2, 4), np.uint64), 0)


@pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
def test_the_kernel_is_cached_through_the_dependency_stamped_locator() -> None:
    """The sketch's loop inlines ``_aesni``'s intrinsics: its cache is stamped with ``_aesni.py`` too
    (:mod:`secemb.fss._kernel_cache`)."""
    from secemb.fss import _kernel_cache, _sketch_kernels

    for kernel in (_sketch_kernels.sketch_accumulate_scalar, _sketch_kernels.sketch_accumulate_ifma,
                   _sketch_kernels.sketch_schedules):
        locator = kernel._cache._impl._locator
        assert type(locator).__name__.startswith("Secemb"), type(locator)
        assert locator.get_source_stamp()[1] == _kernel_cache.dependency_stamp(locator._py_file)


_HIDDEN = """
import json, sys
import numpy as np
from secemb.fss import kernels
features = kernels.host_cpu_features()
kernels.host_cpu_features = lambda: {**features, sys.argv[1]: False}
from secemb.fss import _aesni, _sketch_kernels
from secemb.fss.sketch import Expanded, SketchCheck, expand
assert not _aesni.IFMA and _sketch_kernels.sketch_accumulate is _sketch_kernels.sketch_accumulate_scalar
assert _aesni.LANES == (2 if features.get("vaes") and sys.argv[1] != "vaes" else 1)  # unless hidden or absent
seeds = [bytes.fromhex(s) for s in json.loads(sys.argv[2])]
leaves = np.array(json.loads(sys.argv[3]), np.uint64)
if sys.argv[1] == "vaes":  # the seeds' expansion on 128-bit AES too
    expanded = expand(seeds, leaves.shape[1] * 2)
else:  # with VAES the expansion compiles as in this process: the parent's (expand), not compiled again
    keys, r, r2 = (np.array(a, dt) for a, dt in zip(json.loads(sys.argv[4]), (np.uint8, np.uint64, np.uint64)))
    expanded = Expanded(keys, r, r2)
check = SketchCheck(expanded, 2)
check.add(0, len(leaves), leaves)
print(json.dumps(check.values.tolist()))
"""


@pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
@pytest.mark.parametrize("feature", ["vaes", "avx512ifma"])
def test_without_vaes_or_ifma(tmp_path: os.PathLike[str], feature: str) -> None:
    """In a fresh process that hides VAES (128-bit AES only: ``LANES == 1``, round keys stored once, one block a
    vector) or AVX-512 IFMA, and compiles into its own cache: :meth:`SketchCheck.add` takes the scalar loop.

    Hiding VAES, the child expands the seeds itself (:func:`expand` on 128-bit AES, checked through the sums);
    hiding only IFMA, :func:`expand` compiles the same code as in this process, so the child takes this process's
    expansion and compiles only the sketch kernels (session 33: about half this test's time was that compile)."""
    gen = np.random.default_rng(30)
    width, frontier, per_user = 20, 2, 2  # a row: a block in place and a staged remainder
    seeds = [os.urandom(16), os.urandom(16)]
    leaves = gen.integers(0, MASK, (2 * per_user * frontier, width, 2), np.uint64, endpoint=True)
    ours = expand(seeds, width * frontier)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "SECEMB_FSS_KERNELS": "numba"}
    done = subprocess.run([sys.executable, "-c", _HIDDEN, feature, json.dumps([s.hex() for s in seeds]),
                           json.dumps(leaves.tolist()), json.dumps([ours.keys.tolist(), ours.r.tolist(),
                                                                    ours.r2.tolist()])],
                          env=env, capture_output=True, text=True, timeout=600, check=True)
    keys, r = zip(*(_expansion(s, width * frontier) for s in seeds), strict=True)
    want = _formula(leaves, 0, frontier, per_user, list(keys), list(r), np.zeros((4, 3), np.uint64))
    np.testing.assert_array_equal(np.array(json.loads(done.stdout), np.uint64), want)


@pytest.mark.skipif(not _ifma(), reason="no AVX-512 IFMA here")
def test_this_cpu_takes_the_ifma_loop() -> None:
    from secemb.fss import _sketch_kernels

    assert _sketch_kernels.sketch_accumulate is _sketch_kernels.sketch_accumulate_ifma


@pytest.mark.skipif(not _ifma(), reason="no AVX-512 IFMA here")
@pytest.mark.parametrize(("width", "per_user", "users", "row0", "rows"), [
    (16, 3, 3, 0, 9),      # one chunk a key, every device whole
    (32, 125, 2, 100, 60),  # the cuckoo layout's rows at the bench's size: a group from mid-device 0 into device 1
    (32, 5, 4, 7, 1),      # one key alone, mid-device
    (48, 1, 5, 1, 3),      # one key a device: one sketch_rows call a key
    (1024, 2, 2, 1, 3),    # the most chunks a call takes (SKETCH_CHUNKS): the largest unreduced sums
])
def test_short_keys_take_one_call_a_device(width: int, per_user: int, users: int, row0: int, rows: int) -> None:
    """The IFMA loop's path for groups whose rows are whole keys of whole chunks (``frontier`` 1: the cuckoo layout's
    walk), :func:`secemb.fss._sketch_kernels._sketch_short_keys` called directly (so the test fails if it is not
    the path that gives the values): a device's keys in one :func:`secemb.fss._aesni.sketch_rows` call, equal to the
    sums in Python integers and OpenSSL's AES from values at ``p - 1``, with coefficients at their largest
    (``r_x = p - 1``, and ``p - k`` with ``r^2`` above ``p - 2^32``) and edge leaves among random ones; the scalar
    loop gives the same; rows outside the group are left alone."""
    from secemb.fss import _sketch_kernels

    gen = np.random.default_rng(3200 + width + row0)
    k = int(np.sqrt(float(P - 1)))
    while k * k >= P:
        k -= 1
    keys = [os.urandom(16) for _ in range(users)]
    r = [[P - 1 if (x + u) % 2 else P - k for x in range(width)] for u in range(users)]
    r[-1] = gen.integers(0, P, width).tolist()
    ex = _expanded(keys, r)
    leaves = gen.integers(0, MASK, (rows, width, 2), np.uint64, endpoint=True)
    leaves[0, : min(width, len(EDGE_WORDS))] = np.array(EDGE_WORDS, np.uint64)[:, None][: min(width, len(EDGE_WORDS))]
    leaves[-1, -1] = MASK
    acc0 = np.full((users * per_user, 3), P - 1, np.uint64)
    acc0[::2] = gen.integers(0, P, acc0[::2].shape)
    want = _formula(leaves, row0, 1, per_user, keys, r, acc0)  # the other rows as they were
    got = acc0.copy()
    _sketch_kernels._sketch_short_keys(leaves, row0, per_user, ex.round_keys, ex.r, ex.r2, got)
    np.testing.assert_array_equal(got, want)
    scalar = acc0.copy()
    _sketch_kernels.sketch_accumulate_scalar(leaves, row0, 1, per_user, ex.round_keys, ex.r, ex.r2, scalar)
    np.testing.assert_array_equal(scalar, got)


@pytest.mark.skipif(not _ifma(), reason="no AVX-512 IFMA here")
def test_sketch_rows_writes_each_run_its_slot() -> None:
    """:func:`secemb.fss._aesni.sketch_rows` alone: ``keys`` runs, each run's ``[A, B, C, 0]`` in its own four words
    (the sums in Python integers), nothing past them; ``keys = 0`` writes nothing."""
    from numba import njit

    from secemb.fss._aesni import sketch_rows

    @njit
    def call(rks, leaves, r, r2, chunks, keys, out):  # noqa: ANN001, ANN202
        sketch_rows(rks.ctypes.data, leaves.ctypes.data, r.ctypes.data, r2.ctypes.data, chunks, keys, out.ctypes.data)

    gen = np.random.default_rng(32)
    key = os.urandom(16)
    r = gen.integers(0, P, 32).tolist()
    ex = _expanded([key], [r])
    leaves = gen.integers(0, MASK, (3, 32, 2), np.uint64, endpoint=True)
    out = np.full(16, 7, np.uint64)
    call(ex.round_keys[0], leaves, ex.r[0], ex.r2[0], 2, 3, out)
    want = np.array(
        [[sum(int(c) * _z(key, w) for c, w in zip(coef, row, strict=True)) % P for coef in (ex.r[0], ex.r2[0])]
         + [sum(_z(key, w) for w in row) % P] for row in leaves], np.uint64)
    np.testing.assert_array_equal(out[:12].reshape(3, 4)[:, :3], want)
    assert out[3] == out[7] == out[11] == 0 and np.all(out[12:] == 7)
    none = np.full(4, 7, np.uint64)
    call(ex.round_keys[0], leaves, ex.r[0], ex.r2[0], 2, 0, none)
    assert np.all(none == 7)
