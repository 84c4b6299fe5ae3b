"""Session 38 red team (helper R): helper W's walk kernel and helper B4's walk buffers, attacked.

* The level intrinsics (``expand8``, ``expand8_rows``, ``halftree16``, ``halftree16_rows``), now a loop
  over ``groups`` groups with the round keys loaded once, the MMO's ``^ x`` and the correction folded
  into the last round's key: against their definition (the module docstring of
  :mod:`secemb.fss._aesni`) with the AES of OpenSSL (``cryptography``, ECB), for ``groups`` -1, 0, 1, 2,
  3 and 5, control bits 0 and 1 in every lane, a row's corrections and each parent's own (different
  rows), nothing written past the groups' children; here (VAES where this CPU has it) and in a child
  under the ``haswell`` profile (AES-NI without VAES: one block a vector, ``walk_keys`` the plain
  schedules).
* The walk (:func:`secemb.fss.tree.expand`, :func:`secemb.fss.halftree.leaf_groups`): compiled
  against the numpy reference, both parties, BGI and Half-Tree, domains around every group boundary
  of the top levels and the subtrees (``m`` = 1, 2, 3, 15, 16, 17, ``2^k +- 1``), 9 keys (a subtree
  batch of 8 rows and one of 1), the groups' rows as well as their leaves.
* ``mmo_repeat`` against OpenSSL ECB, ``reps`` 0 (nothing written) to 3; ``walk_keys`` cached.
* The bounded walk's payload sums into new buffers (``fused._walk_buffer``): poisoned buffers, keys
  that span several leaf groups, buckets of size 0 and buckets whose later groups are all dead, the
  uint64 ring; a walk that raises half-way leaves the caller's strided views as they were; read-only
  views are refused with nothing written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import fused, halftree, kernels, tree
from secemb.fss.convert import convert
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG, PayloadSums, retrieve_and_prepare_buckets
from secemb.randomness import CtrDrbg

needs_kernels = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")

#: the level intrinsics against their definition, OpenSSL's AES: prints {case: equal} as JSON (run here
#: through exec, and in a child under another CPU profile)
_PROBE = r'''
import json
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from numba import njit
from secemb.fss import _aesni
from secemb.fss.prg import fixed_key

E8, E8R, H16, H16R = _aesni.expand8, _aesni.expand8_rows, _aesni.halftree16, _aesni.halftree16_rows


@njit
def level(kind, rk, x, cw, out, groups):
    a, b, c, d = np.int64(rk.ctypes.data), np.int64(x.ctypes.data), np.int64(cw.ctypes.data), np.int64(out.ctypes.data)
    if kind == 0:
        E8(a, b, c, d, groups)
    elif kind == 1:
        E8R(a, b, c, d, groups)
    elif kind == 2:
        H16(a, b, c, d, groups)
    else:
        H16R(a, b, c, d, groups)


def aes(name, words):
    enc = Cipher(algorithms.AES(fixed_key(name)), modes.ECB()).encryptor()
    return np.frombuffer(enc.update(words.tobytes()) + enc.finalize(), np.uint64).reshape(-1, 2)


def sigma(x):
    return np.stack([x[:, 0] ^ x[:, 1], x[:, 0]], axis=1)


def probe():
    gen = np.random.default_rng(3801)
    same = {}
    for kind in range(4):
        ht, rows = kind >= 2, kind % 2 == 1
        per, words = (16, 2) if ht else (8, 4)
        rk = _aesni.round_keys("halftree/ccr") if ht else _aesni.walk_keys("tree/left", "tree/right")
        for groups in (-1, 0, 1, 2, 3, 5):
            n = per * max(groups, 0)
            x = gen.integers(0, 2**64, (per * 6, 2), dtype=np.uint64)
            t = gen.integers(0, 2, per * 6).astype(np.uint64)
            t[:per] = np.arange(per) % 2  # every lane 0 and 1 over the first two groups
            t[per:2 * per] = 1 - t[:per]
            x[:, 0] = (x[:, 0] & ~np.uint64(1)) | t
            # each parent's own row (addresses for 6 groups: a group too many reads valid ones, writes past)
            table = gen.integers(0, 2**64, (per * 6, words), dtype=np.uint64)
            if rows:
                cw = (np.int64(table.ctypes.data) + 8 * words * np.arange(per * 6, dtype=np.int64)).view(np.uint64)
                mine = table
            else:
                cw = table[0].copy()
                mine = np.broadcast_to(table[0], (per * 6, words))
            out = np.full((2 * per * 6, 2), 0xDEADBEEFDEADBEEF, np.uint64)
            level(kind, rk, x, cw, out, groups)
            want = np.full_like(out, 0xDEADBEEFDEADBEEF)  # nothing past the groups' children
            xs, tm = x[:n], (0 - (x[:n, 0] & np.uint64(1)))[:, None]
            if ht:
                s = sigma(xs)
                left = aes("halftree/ccr", s) ^ s ^ (mine[:n, :2] & tm)
                want[0:2 * n:2], want[1:2 * n:2] = left, left ^ xs
            else:
                want[0:2 * n:2] = aes("tree/left", xs) ^ xs ^ (mine[:n, :2] & tm)
                want[1:2 * n:2] = aes("tree/right", xs) ^ xs ^ (mine[:n, 2:] & tm)
            same[f"kind {kind} groups {groups}"] = bool(np.array_equal(out, want))
    plain = _aesni.round_keys("tree/left", "tree/right")
    pair = _aesni.walk_keys("tree/left", "tree/right")
    same["walk_keys"] = bool(pair is plain if _aesni.LANES == 1 else np.array_equal(
        pair[0], np.concatenate([plain[0, :, :2], plain[1, :, :2]], axis=1)))
    return {"lanes": _aesni.LANES, "same": same}


print(json.dumps(probe()))
'''

_CASES = 4 * 6 + 1


def _check_probe(got: dict, lanes: int) -> None:
    assert got["lanes"] == lanes
    assert len(got["same"]) == _CASES
    assert [k for k, v in got["same"].items() if not v] == []


@needs_kernels
def test_level_intrinsics_equal_their_definition_here(capsys: pytest.CaptureFixture[str]) -> None:
    from secemb.fss._aesni import LANES

    exec(compile(_PROBE, "probe", "exec"), {"__name__": "probe"})  # noqa: S102 - this file's own script
    _check_probe(json.loads(capsys.readouterr().out.strip().splitlines()[-1]), LANES)


@needs_kernels
def test_level_intrinsics_equal_their_definition_without_vaes() -> None:
    """The same under ``haswell`` (AES-NI, no VAES) in a fresh process: the code LLVM made for it."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "fss"))
    try:
        from test_cpu_profiles import _run
    finally:
        sys.path.pop(0)
    _check_probe(_run("haswell", _PROBE, timeout=300), 1)


def _groups(walk: object) -> list[tuple[int, int, np.ndarray]]:
    return [(r0, r1, leaves.copy()) for r0, r1, leaves in walk]  # type: ignore[attr-defined]


#: domains around the group boundaries: the top levels' parents (8 BGI, 16 Half-Tree a group) and the subtrees'
DOMAINS = (1, 2, 3, 15, 16, 17, 31, 33, 127, 128, 129, 255, 257, 1023, 1025, 2049, 4097)


@needs_kernels
@pytest.mark.parametrize("m", DOMAINS)
def test_walk_equals_the_reference_around_group_boundaries(monkeypatch: pytest.MonkeyPatch, m: int) -> None:
    keys = 9  # subtree batches of 8 rows and of fewer
    alphas = np.random.default_rng(m).integers(0, m, keys)
    bgi = fss.gen_path(alphas, m, _rng=CtrDrbg(m))[:2]
    ht = halftree.gen_path(alphas, m, _rng=CtrDrbg(m + 1))[:2]
    walks = [lambda p=p: tree.leaf_groups(p) for p in bgi] + [lambda p=p: halftree.leaf_groups(p) for p in ht]
    for walk in walks:
        got = []
        for backend in ("numpy", "numba"):
            monkeypatch.setattr(kernels, "BACKEND", backend)
            got.append(_groups(walk()))
        ref, fast = got
        assert [g[:2] for g in ref] == [g[:2] for g in fast]
        assert all(np.array_equal(a[2], b[2]) for a, b in zip(ref, fast, strict=True))


@needs_kernels
def test_mmo_repeat_equals_openssl_ecb() -> None:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from secemb.fss._aesni import BLOCKS, round_keys, walk_keys
    from secemb.fss._numba_kernels import mmo_repeat
    from secemb.fss.prg import fixed_key

    words = np.random.default_rng(38).integers(0, 2**64, (3 * BLOCKS, 2), dtype=np.uint64)
    enc = Cipher(algorithms.AES(fixed_key("bench/raw")), modes.ECB()).encryptor()
    want = np.frombuffer(enc.update(words.tobytes()) + enc.finalize(), np.uint64).reshape(-1, 2) ^ words
    for reps in (0, 1, 3):
        out = np.full_like(words, 7)
        mmo_repeat(words, round_keys("bench/raw")[0], reps, out)
        assert np.array_equal(out, want if reps else np.full_like(words, 7))
    assert walk_keys("tree/left", "tree/right") is walk_keys("tree/left", "tree/right")


def _poison(made: list[np.ndarray]):  # noqa: ANN202
    def poisoned(view: np.ndarray) -> np.ndarray:
        buffer = np.full(view.shape, -7 if view.dtype == np.int64 else 0xA5A5A5A5, view.dtype)
        made.append(buffer)
        return buffer
    return poisoned


def _bounded_case(ring: type, sizes: np.ndarray, big_m: int, users: int, seed: int):  # noqa: ANN202
    gen = np.random.default_rng(seed)
    alphas = gen.integers(0, np.maximum(sizes, 1), (users, len(sizes))).reshape(-1)
    p0, _, state = fss.gen_path(alphas, big_m, _rng=CtrDrbg(seed))
    ring_bits = 8 * np.dtype(ring).itemsize
    cw = fss.convert_gen(state, np.ones((len(alphas), 1), ring), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    tables = gen.integers(0, np.iinfo(ring).max, (len(sizes), big_m, 2), dtype=ring, endpoint=True)
    return p0, cw, tables, ring_bits


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=needs_kernels)])
def test_poisoned_buffers_over_keys_of_several_groups(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys of 3 rows a key (M = 300: F = 3 subtrees of 128 leaves), one row a leaf group: a key's sums are
    set by its first group and added to by its next two; bucket sizes 0 (no live leaf), 100 (rows 2 and 3
    dead), 129 (row 3 dead) and 300; uint64."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    monkeypatch.setattr(tree, "GROUP_LEAVES", 1 << 7)
    made: list[np.ndarray] = []
    monkeypatch.setattr(fused, "_walk_buffer", _poison(made))
    big_m, sizes, users, width = 300, np.array([0, 100, 129, 300]), 2, 5
    p0, cw, tables, ring_bits = _bounded_case(np.uint64, sizes, big_m, users, 3802)
    buckets = len(sizes)
    key_conv = np.full((users, buckets, 2 * width), 3, np.uint64)  # the views: every other column
    t_count = np.full((buckets, users), 11, np.int64)  # the view: transposed
    retrieve_and_prepare_buckets(p0, 0, cw, tables, width, sizes=sizes, payload_sums=True,
                                 payload_out=PayloadSums(key_conv[:, :, ::2], t_count.T))
    assert len(made) == 2
    leaves = fss.eval_full_path(p0, 0)
    live = np.arange(big_m)[None, :] < np.tile(sizes, users)[:, None]
    conv = convert(leaves, width, ring_bits, AGGREGATION_TAG) * live[..., None].astype(np.uint64)
    want = [[sum(int(v) for v in conv[u * buckets + i, :, c]) % 2**64 for c in range(width)]
            for u in range(users) for i in range(buckets)]  # Python integers
    assert key_conv[:, :, ::2].reshape(-1, width).tolist() == want
    assert not key_conv[:, 0, ::2].any()
    assert (key_conv[:, :, 1::2] == 3).all()  # the views' neighbours
    ones = ((leaves[..., 0] & np.uint64(1)).astype(np.int64) * live).sum(axis=1).reshape(users, buckets)
    assert np.array_equal(t_count.T, ones) and not t_count[0].any()


@needs_kernels
def test_a_walk_that_raises_half_way_leaves_the_views_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tree, "GROUP_LEAVES", 1 << 7)
    calls = []
    real = fused.convert_accumulate

    def failing(*args: object, **kw: object) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("half-way")
        real(*args, **kw)

    monkeypatch.setattr(fused, "convert_accumulate", failing)
    sizes = np.array([300, 7])
    p0, cw, tables, _ = _bounded_case(np.uint32, sizes, 300, 2, 3803)
    key_conv = np.full((2, 3, 4), 5, np.uint32)
    t_count = np.full((2, 3), 9, np.int64)
    with pytest.raises(RuntimeError, match="half-way"):
        retrieve_and_prepare_buckets(p0, 0, cw, tables, 4, sizes=sizes, payload_sums=True,
                                     payload_out=PayloadSums(key_conv[:, 1:], t_count[:, 1:]))
    assert len(calls) == 2
    assert (key_conv == 5).all() and (t_count == 9).all()


def test_read_only_views_are_refused_with_nothing_written() -> None:
    sizes = np.array([20, 0, 13])
    p0, cw, tables, _ = _bounded_case(np.uint32, sizes, 20, 2, 3804)
    key_conv = np.full((2, 4, 3), 5, np.uint32)
    t_count = np.full((2, 4), 9, np.int64)
    frozen = key_conv[:, 1:]
    frozen.flags.writeable = False
    with pytest.raises(InvalidParameters, match="writeable"):
        retrieve_and_prepare_buckets(p0, 0, cw, tables, 3, sizes=sizes, payload_sums=True,
                                     payload_out=PayloadSums(frozen, t_count[:, 1:]))
    assert (key_conv == 5).all() and (t_count == 9).all()

