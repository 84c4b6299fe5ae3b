"""Session 35 (helper K): SHA-256 of a batch's messages :data:`~secemb.fss._shani.WIDE` at a time in
512-bit vector lanes (``_shani._compress_wide``, where the CPU has AVX-512), the rest on SHA-NI
(``_shani._sha_rows_wide``): every digest is :mod:`hashlib`'s, whichever path a message takes --
groups of 16, a short group with its lanes past the end repeating the last row, the SHA-NI
remainder -- at every padding edge of the message and of the row, with and without a prefix, rows
of any stride and order; and the kernel reads nothing outside the rows (a guard page, in a child)."""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np
import pytest
from guard_pages import run_guarded

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not kernels.sha_compiled(), reason="the SHA kernels need numba and SHA-NI")

#: message-length edges: a row's end at and around each padding boundary (55/56 bytes fit the
#: length in the block, 64 a block, 119/120 the second block's), and a long row
LENGTHS = (0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 1000)
#: messages of a batch: none, SHA-NI only (below WIDE_LEAST), one short wide group, whole groups, a
#: group and a SHA-NI remainder, a group and a short group
COUNTS = (0, 1, 8, 9, 15, 16, 17, 20, 33)


def _rows(n: int, length: int) -> np.ndarray:
    return np.frombuffer(os.urandom(n * length), np.uint8).reshape(n, length).copy()


def _wide(prefix: bytes, rows: np.ndarray, least: int) -> list[bytes]:
    from secemb.fss import _shani

    out = np.empty((len(rows), 8), np.uint32)
    _shani._sha_rows_wide(np.frombuffer(prefix, np.uint8), rows.ctypes.data, rows.strides[0], len(rows),
                          rows.shape[1], _shani._H0, out, least)
    return [bytes(r) for r in out.astype(">u4").view(np.uint8).reshape(-1, 32)]


@pytest.mark.parametrize("least", [0, 1, 9, 16])
@pytest.mark.parametrize("prefix_bytes", [0, 3, 64, 70])
def test_wide_rows_are_hashlib_at_every_edge(least: int, prefix_bytes: int) -> None:
    """``least`` 0: SHA-NI alone; 1: every message in wide groups; 9 (the default here) and 16:
    wide groups while that many are left, SHA-NI after."""
    prefix = os.urandom(prefix_bytes)
    for length in LENGTHS:
        for n in COUNTS:
            rows = _rows(n, length)
            assert _wide(prefix, rows, least) == [hashlib.sha256(prefix + r.tobytes()).digest() for r in rows], (
                least, prefix_bytes, length, n)


def test_the_default_takes_wide_groups_where_the_cpu_has_avx512() -> None:
    from secemb.fss import _shani

    assert _shani.WIDE == 16
    assert _shani.WIDE_LEAST == (9 if kernels.host_cpu_features().get("avx512f") else 0)


@pytest.mark.parametrize("n", [9, 16, 20, 37])
def test_sha256_many_reads_strided_and_reversed_rows_by_value(n: int) -> None:
    from secemb.fss.hashing import sha256_many

    wide = _rows(n, 300)
    for rows in (wide[:, 5:126], wide[::-1, 64:184], wide[::2, :57], wide[:, ::3]):
        want = [hashlib.sha256(b"head" + r.tobytes()).digest() for r in rows]
        assert [bytes(d) for d in sha256_many(b"head", rows)] == want


@pytest.mark.parametrize("n", [9, 20])
def test_hmac_rows_take_the_wide_groups_too(n: int) -> None:
    import hmac

    from secemb.fss.hashing import hmac_sha256_many

    keys, tails = _rows(n, 32), _rows(n, 40)
    for k in (keys, keys[:1]):  # a key a row, and one key for every row (its blocks a shared prefix)
        got = hmac_sha256_many(k, b"secemb-head", tails)
        assert [bytes(r) for r in got] == [hmac.digest(k[i % len(k)].tobytes(), b"secemb-head" + tails[i].tobytes(),
                                                       "sha256") for i in range(n)]


_GUARDED = """
import hashlib
from secemb.fss import _shani
from secemb.fss.hashing import sha256_many
rng = np.random.default_rng(35)

count = 0
for p in (0, 8, 64, 70):
    prefix = bytes(rng.integers(0, 256, p, dtype=np.uint8))
    for length in (0, 1, 55, 56, 63, 64, 65, 119, 120, 200):
        for n in (9, 16, 17, 20):
            for at in ("end", "start"):
                a = place(rng.integers(0, 256, (n, length), dtype=np.uint8), at)
                for rows in (a, a[::-1]):
                    got = sha256_many(prefix, rows)
                    assert [bytes(g) for g in got] == [hashlib.sha256(prefix + bytes(r)).digest() for r in rows]
                    count += 1
print("HASHED", count, _shani.WIDE_LEAST)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's mprotect")
def test_wide_groups_read_nothing_outside_the_rows() -> None:
    """Rows against a guard page at either end, in order and reversed (a negative stride): a read one
    byte outside them would end the child with SIGSEGV (the technique of
    ``tests/fss/test_s24_address_kernels_review.py``, whose own check shows the guard catches one byte)."""
    assert run_guarded(_GUARDED, timeout=300)[:2] == ["HASHED", str(4 * 10 * 4 * 2 * 2)]
