"""SHA-256 of many messages with a shared prefix: the SHA-NI kernel and the hashlib reference give
hashlib's digests, and the servers' row tags built on them are the documented formula."""

from __future__ import annotations

import hashlib
import struct
import sys

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import hashing, kernels
from secemb.protocols.secemb.checks import row_tags

@pytest.mark.parametrize("prefix_len", [0, 5, 22, 64])
@pytest.mark.parametrize("length", [0, 1, 33, 41, 42, 55, 56, 63, 64, 100, 119, 120, 268])
def test_sha256_many_is_hashlib(sha_path: str, prefix_len: int, length: int) -> None:
    """Every padding case (the length word in the last block or one more block) on both paths."""
    rng = np.random.default_rng(prefix_len * 1000 + length)
    prefix = rng.integers(0, 256, prefix_len, dtype=np.uint8).tobytes()
    rows = rng.integers(0, 256, (7, length), dtype=np.uint8)
    got = hashing.sha256_many(prefix, rows)
    assert got.shape == (7, 32) and got.dtype == np.uint8
    for i in range(7):
        assert got[i].tobytes() == hashlib.sha256(prefix + rows[i].tobytes()).digest()


def test_sha256_many_takes_strided_rows_and_no_rows(sha_path: str) -> None:
    rows = np.arange(2 * 5 * 80, dtype=np.uint64).astype(np.uint8).reshape(10, 80)[::2, 3:70]
    got = hashing.sha256_many(b"p", rows)
    assert [g.tobytes() for g in got] == [hashlib.sha256(b"p" + r.tobytes()).digest() for r in rows]
    assert hashing.sha256_many(b"p", np.zeros((0, 12), np.uint8)).shape == (0, 32)


def test_sha256_many_takes_rows_in_any_layout(sha_path: str) -> None:
    """Rows that are not C-contiguous (a Fortran-order array, every other column): hashlib
    refuses such a row's buffer, so the reference must read them as bytes first."""
    base = np.arange(6 * 40, dtype=np.uint64).astype(np.uint8).reshape(6, 40)
    for rows in (np.asfortranarray(base), base[:, ::2], base[::-1, 5:]):
        got = hashing.sha256_many(b"pre", rows)
        assert [g.tobytes() for g in got] == [hashlib.sha256(b"pre" + r.tobytes()).digest() for r in rows]


def test_sha256_many_refuses_what_is_not_uint8_rows(sha_path: str) -> None:
    """Other dtypes would be hashed as elements by the kernel and as bytes by hashlib."""
    for bad in (np.zeros((3, 4), np.uint32), np.zeros(12, np.uint8), [[1, 2]]):
        with pytest.raises(InvalidParameters, match="uint8 \\(n, L\\)"):
            hashing.sha256_many(b"p", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("features", [{"aes": True}, {"aes": True, "sha": False}])
def test_a_cpu_without_sha_ni_never_loads_the_kernel(monkeypatch: pytest.MonkeyPatch, features: dict) -> None:
    """The compiled kernels on (AES-NI) but no SHA extensions: hashlib, and the SHA-NI module is
    not even imported (its instructions would fault there)."""
    monkeypatch.setattr(kernels, "BACKEND", "numba")
    monkeypatch.setattr(kernels, "host_cpu_features", lambda: features)
    monkeypatch.setitem(sys.modules, "secemb.fss._shani", None)  # importing it raises ImportError
    assert not kernels.sha_compiled()
    rows = np.arange(3 * 20, dtype=np.uint8).reshape(3, 20)
    got = hashing.sha256_many(b"x", rows)
    assert [g.tobytes() for g in got] == [hashlib.sha256(b"x" + r.tobytes()).digest() for r in rows]


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_row_tags_are_the_documented_formula(sha_path: str, dtype: type) -> None:
    """Item j's tag: the first 16 bytes of SHA-256(b"secemb-row-tag" || u64 round || u64 j || row),
    read as little-endian ring words."""
    rng = np.random.default_rng(3)
    rows: np.ndarray = rng.integers(0, 2**63, (300, 9), dtype=np.uint64).astype(dtype)
    items = rng.integers(0, 10**9, 300)
    got = row_tags(12, items, rows)
    little = f"<u{np.dtype(dtype).itemsize}"
    for j, row, tag in zip(items, rows, got, strict=True):
        digest = hashlib.sha256(b"secemb-row-tag" + struct.pack("<QQ", 12, j) + row.astype(little).tobytes()).digest()
        assert tag.dtype == dtype and tag.astype(little).tobytes() == digest[:16]


def test_row_bytes_gives_each_rows_prefix_as_bytes() -> None:
    """:func:`secemb.fss.hashing.row_bytes`: whole rows by default, the first ``width`` bytes
    otherwise, of rows of any stride (written out by hand here)."""
    from secemb.fss.hashing import row_bytes

    rows = np.arange(24, dtype=np.uint8).reshape(3, 8)
    assert row_bytes(rows) == [bytes(range(0, 8)), bytes(range(8, 16)), bytes(range(16, 24))]
    assert row_bytes(rows, 3) == [b"\x00\x01\x02", b"\x08\x09\x0a", b"\x10\x11\x12"]
    assert row_bytes(rows[:, 2:], 2) == [b"\x02\x03", b"\x0a\x0b", b"\x12\x13"]
    assert row_bytes(rows[:0]) == []
