"""Issue 37 (session 24, helper G): the SHA-NI kernel hashes two messages side by side and reads the
blocks that lie wholly in a row where they are (only the prefix's and the padding's blocks go through
its buffer), so that the parties' key digests run on it too.  Every digest is hashlib's: prefixes and
rows that put the row's first and last bytes in every position of a block, a batch of one and odd
batches (the last pair repeats a row), rows read through every kind of stride, and the key digests of
the protocol against hashlib on both paths."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from secemb.fss import hashing
from secemb.protocols.secemb import checks, relay


def _expected(prefix: bytes, rows: np.ndarray) -> list[bytes]:
    return [hashlib.sha256(prefix + row.tobytes()).digest() for row in rows]


@pytest.mark.parametrize("prefix_len", [0, 1, 55, 56, 63, 64, 65, 128, 131])
@pytest.mark.parametrize("length", [0, 9, 63, 64, 65, 127, 128, 191, 200, 1000])
def test_every_block_boundary_and_batch_size(sha_path: str, prefix_len: int, length: int) -> None:
    """The prefix's end and the row's end anywhere in a block, in-place blocks between them or
    none, and 1 to 5 rows (odd counts leave the last pair one row)."""
    rng = np.random.default_rng(prefix_len * 10_000 + length)
    prefix = rng.integers(0, 256, prefix_len, dtype=np.uint8).tobytes()
    for n in (1, 2, 3, 5):
        rows = rng.integers(0, 256, (n, length), dtype=np.uint8)
        got = hashing.sha256_many(prefix, rows)
        assert [g.tobytes() for g in got] == _expected(prefix, rows)


def test_rows_of_any_stride_are_read_where_they_are(sha_path: str) -> None:
    """Rows inside wider rows (the key digests' ``rows[:, k:]``), every other row, rows in reverse
    order (a negative row stride) and reversed columns (copied first): the bytes around a row
    never enter its digest."""
    rng = np.random.default_rng(7)
    wide = rng.integers(0, 256, (9, 700), dtype=np.uint8)
    for rows in (wide[:, 37:], wide[::2, 5:650], wide[::-1, 64:600], wide[::-3, ::-1], wide[:, 11:12]):
        got = hashing.sha256_many(b"secemb", rows)
        assert [g.tobytes() for g in got] == _expected(b"secemb", rows)


def test_a_row_change_changes_only_its_digest(sha_path: str) -> None:
    """Each message of a pair is its own: one byte changed in row 2's in-place block changes
    digest 2 alone."""
    rows = np.zeros((4, 300), np.uint8)
    before = hashing.sha256_many(b"p", rows)
    rows[2, 150] = 1
    after = hashing.sha256_many(b"p", rows)
    assert [i for i in range(4) if before[i].tobytes() != after[i].tobytes()] == [2]
    assert after[2].tobytes() == hashlib.sha256(b"p" + rows[2].tobytes()).digest()


def test_key_digests_are_sha256_of_the_shared_parts(sha_path: str) -> None:
    """``key_digests(header, rest)[i]`` = SHA-256(header || rest[i]) and the relay's digests of
    forwarded parts SHA-256 of the part, at a key part's size, for rows cut out of wider rows as
    the device and the servers pass them."""
    rng = np.random.default_rng(11)
    header = rng.integers(0, 256, 40, dtype=np.uint8).tobytes()
    rows = rng.integers(0, 256, (5, 32 + 29_500), dtype=np.uint8)
    rest = rows[:, 32:]
    assert checks.key_digests(header, rest) == _expected(header, rest)
    assert relay._digests(rows) == _expected(b"", rows)
    assert checks.key_digests(header, rest[:0]) == []
