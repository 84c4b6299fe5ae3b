"""The point-function check's compiled loop (session 28, helper C): :func:`secemb.fss._check_kernels.check_accumulate`
keeps a leaf's four words in vector registers (:func:`secemb.fss._aesni.check_leaves`, ``LEAVES`` leaves a
call, a row's remainder through a staging buffer).  Its check values must be the documented formula's
(``sum_x r(x) * (F(w(x)) ^ t(x) (cs ^ H(x)))`` word-wise mod 2^64, computed here in Python integers from the
numpy reference's ``F`` and ``H``) on random words with every bit in play, rows of any width (a multiple of
``LEAVES``, less than it, and both), groups that cut keys, several users, and edge words; on a CPU without VAES
(two 128-bit vectors a leaf) too."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from secemb.fss import kernels
from secemb.fss.verify import CHECK_WORDS, LeafCheck, leaf_values, position_offsets

pytestmark = pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
MASK = 2**64 - 1


def _formula(leaves: np.ndarray, cs: np.ndarray, r: np.ndarray, per_user: int, width: int) -> np.ndarray:
    """Check values of rows ``key F + f`` (``leaves`` (K F, width, 2)) by the formula, in Python integers;
    ``F`` and ``H`` from the numpy reference (OpenSSL's AES), not from any compiled kernel."""
    mp = r.shape[1]
    frontier = mp // width
    saved, kernels.BACKEND = kernels.BACKEND, "numpy"
    try:
        f = leaf_values(leaves.reshape(-1, 2)).reshape(len(leaves), width, CHECK_WORDS)
        h = position_offsets(mp)
    finally:
        kernels.BACKEND = saved
    out = [[0] * CHECK_WORDS for _ in range(len(cs))]
    for row in range(len(leaves)):
        key = row // frontier
        for p in range(width):
            x = (row % frontier) * width + p
            t = int(leaves[row, p, 0]) & 1
            for c in range(CHECK_WORDS):
                v = int(f[row, p, c]) ^ (t * (int(cs[key, c]) ^ int(h[x, c])))
                out[key][c] = (out[key][c] + v * int(r[key // per_user, x, c])) & MASK
    return np.array(out, np.uint64)


def _compiled(leaves: np.ndarray, cs: np.ndarray, r: np.ndarray, per_user: int, group: int) -> np.ndarray:
    """The compiled kernels' check values, rows folded ``group`` at a time from row 0."""
    saved, kernels.BACKEND = kernels.BACKEND, "numba"
    try:
        check = LeafCheck(cs, r, per_user)
        for r0 in range(0, len(leaves), group):
            r1 = min(r0 + group, len(leaves))
            check.add(r0, r1, leaves[r0:r1])
    finally:
        kernels.BACKEND = saved
    return check.values


def _random(gen: np.random.Generator, keys: int, per_user: int, frontier: int, width: int) -> tuple[np.ndarray, ...]:
    """Leaf words, check words and challenges with every bit (the high ones too) random."""
    def words(*shape: int) -> np.ndarray:
        return gen.integers(0, MASK, shape, np.uint64, endpoint=True)

    return (words(keys * frontier, width, 2), words(keys, CHECK_WORDS),
            words(keys // per_user, frontier * width, CHECK_WORDS))


@pytest.mark.parametrize(("width", "frontier", "per_user", "users", "group"), [
    (1, 1, 1, 1, 1),      # one leaf in all
    (1, 4, 2, 3, 3),      # rows of one leaf: all staged
    (2, 3, 3, 2, 4),
    (8, 2, 2, 5, 3),      # less than LEAVES
    (16, 2, 3, 2, 5),     # LEAVES with VAES: all in place
    (20, 2, 1, 3, 2),     # LEAVES and a remainder in one row
    (32, 1, 125, 2, 250),  # the robust bench's ML-100K cuckoo rows, two users
    (40, 3, 2, 2, 5),
    (64, 1, 1, 7, 3),     # many users
])
def test_compiled_check_equals_the_formula(width: int, frontier: int, per_user: int, users: int, group: int) -> None:
    gen = np.random.default_rng(2800 + width)
    leaves, cs, r = _random(gen, users * per_user, per_user, frontier, width)
    want = _formula(leaves, cs, r, per_user, width)
    np.testing.assert_array_equal(_compiled(leaves, cs, r, per_user, group), want)
    assert np.all(want != 0)


@pytest.mark.parametrize("word", [0, MASK])
def test_edge_words(word: int) -> None:
    """All words 0 or all ones (every control bit 0 or 1, products at the top of the ring), with one leaf word
    of the other kind and one whose only set bit is the control bit, over rows with a staged remainder."""
    width, frontier, per_user = 24, 2, 2
    leaves = np.full((2 * per_user * frontier, width, 2), word, np.uint64)
    leaves[1, 5] = MASK - word
    leaves[2, 17] = (1, 0)
    cs = np.full((2 * per_user, CHECK_WORDS), word, np.uint64)
    r = np.full((2, frontier * width, CHECK_WORDS), MASK, np.uint64)
    np.testing.assert_array_equal(_compiled(leaves, cs, r, per_user, 3), _formula(leaves, cs, r, per_user, width))


def test_strided_check_words_and_challenges() -> None:
    """``cs`` and ``r`` given as strided views (the kernel reads them by address: LeafCheck keeps C-contiguous
    copies)."""
    gen = np.random.default_rng(28)
    leaves, cs, r = _random(gen, 4, 2, 2, 16)
    cs_view = np.repeat(cs, 2, axis=0)[::2]
    r_view = np.repeat(r, 3, axis=1)[:, ::3]
    assert not cs_view.flags.c_contiguous and not r_view.flags.c_contiguous
    np.testing.assert_array_equal(_compiled(leaves, cs_view, r_view, 2, 3), _formula(leaves, cs, r, 2, 16))


_WITHOUT_VAES = """
import json, sys
import numpy as np
from secemb.fss import kernels
features = kernels.host_cpu_features()
kernels.host_cpu_features = lambda: {**features, "vaes": False}
from secemb.fss import _aesni
from secemb.fss.verify import LeafCheck
assert _aesni.LANES == 1 and _aesni.LEAVES == 8
leaves, cs, r = (np.array(json.loads(a), np.uint64) for a in sys.argv[1:4])
check = LeafCheck(cs, r, 2)
check.add(0, len(leaves), leaves)
print(json.dumps([[int(v) for v in row] for row in check.values]))
"""


def test_without_vaes(tmp_path: os.PathLike[str]) -> None:
    """With 128-bit AES only (``LANES == 1``: a leaf in two vectors, 8 leaves a call), in a fresh process that
    hides VAES and compiles into its own cache."""
    gen = np.random.default_rng(29)
    width, frontier = 12, 2  # a row: one call in place and a staged remainder
    leaves, cs, r = _random(gen, 4, 2, frontier, width)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "SECEMB_FSS_KERNELS": "numba"}
    args = [json.dumps(a.tolist()) for a in (leaves, cs, r)]
    done = subprocess.run([sys.executable, "-c", _WITHOUT_VAES, *args], env=env, capture_output=True, text=True,
                          timeout=600, check=True)
    got = np.array(json.loads(done.stdout), np.uint64)
    np.testing.assert_array_equal(got, _formula(leaves, cs, r, 2, width))
