"""Session 38's walk schedule and the bench's AES reference against their definitions, bit for bit.

The BGI level intrinsic (``expand8``) reads :func:`secemb.fss._aesni.walk_keys`: with VAES one pair schedule
whose low 128-bit lane holds the left child's round keys and the high lane the right's; it loops over a row's
groups of parents with the keys loaded once.  The walk itself is checked against the numpy reference (OpenSSL's
AES) in ``test_fss_kernels.py``: rows of one group and of many (domains 5000, 93386 and 129: the top levels'
calls of 1 to 46 groups, the subtrees' of 1 to 8 a row), per-parent corrections (a subtree's first three levels,
1, 2 and 4 groups), batches of fewer than 8 rows.  Here the schedule's layout against :func:`round_keys`, and
``mmo_repeat`` (``secemb bench fss``'s kernel AES rate) against OpenSSL's MMO."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.fss import kernels
from secemb.fss.prg import aes_for

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")


def _mmo(name: str, words: np.ndarray) -> np.ndarray:
    """``AES(x) ^ x`` of every block (uint64 (N, 2)) under the fixed key ``name``, through OpenSSL."""
    out = np.empty_like(words)
    aes_for(name).encrypt_into(words, out)
    return out ^ words


def test_walk_keys_hold_each_childs_round_keys_in_its_lane() -> None:
    from secemb.fss._aesni import LANES, round_keys, walk_keys

    rk, pair = round_keys("tree/left", "tree/right"), walk_keys("tree/left", "tree/right")
    assert not pair.flags.writeable and pair.flags.c_contiguous
    if LANES == 1:
        assert pair is rk
    else:
        assert pair.shape == (1, 11, 4)
        assert np.array_equal(pair[0, :, :2], rk[0, :, :2]) and np.array_equal(pair[0, :, 2:], rk[1, :, :2])


def test_mmo_repeat_equals_openssl() -> None:
    from secemb.fss._aesni import BLOCKS, round_keys
    from secemb.fss._numba_kernels import mmo_repeat

    words = np.random.default_rng(3).integers(0, 2**64, (4 * BLOCKS, 2), dtype=np.uint64)
    out = np.zeros_like(words)
    mmo_repeat(words, round_keys("bench/raw")[0], 3, out)
    assert np.array_equal(out, _mmo("bench/raw", words))
