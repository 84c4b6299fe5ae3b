"""Session 34: ``hashing.hmac_sha256_many`` -- HMAC-SHA256 of a batch's rows under one key or a key a
row (the servers' sketch seeds, challenges and query seeds under the round secret; server 1's seed
tags and their relay sub-keys under each device's key) -- is :func:`hmac.digest` row by row on both
paths: the SHA-NI kernel's one call (``_shani._hmac_rows``) and the reference."""

from __future__ import annotations

import hmac
import os

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import hashing, kernels

PATHS = ["reference", pytest.param("kernel", marks=pytest.mark.skipif(not kernels.sha_compiled(),
                                                                      reason="no SHA-NI kernel here"))]


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "reference":
        monkeypatch.setattr(kernels, "sha_compiled", lambda: False)
    return str(request.param)


def _rows(n: int, width: int) -> np.ndarray:
    return np.frombuffer(os.urandom(n * width), np.uint8).reshape(n, width)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 20])
@pytest.mark.parametrize(("k", "length"), [(0, 16), (16, 0), (16, 40), (32, 16), (32, 100), (64, 55), (64, 200)])
def test_hmac_rows_are_hmac_digest_row_by_row(path: str, n: int, k: int, length: int) -> None:
    keys, tails, head = _rows(n, k), _rows(n, length), os.urandom(22)
    got = hashing.hmac_sha256_many(keys, head, tails)
    assert got.dtype == np.uint8 and got.shape == (n, 32)
    assert [bytes(r) for r in got] == [hmac.digest(keys[i].tobytes(), head + tails[i].tobytes(), "sha256")
                                       for i in range(n)]
    one = _rows(1, k)  # one key for every row: the kernel's shared-prefix form
    got = hashing.hmac_sha256_many(one, head, tails)
    assert [bytes(r) for r in got] == [hmac.digest(one.tobytes(), head + tails[i].tobytes(), "sha256")
                                       for i in range(n)]


def test_hmac_rows_read_strided_rows_by_value(path: str) -> None:
    wide, keys = _rows(5, 90), _rows(5, 32)
    tails = wide[:, 7:47]  # rows of another stride
    got = hashing.hmac_sha256_many(keys[:, ::2], b"h", tails)
    assert [bytes(r) for r in got] == [hmac.digest(keys[i, ::2].tobytes(), b"h" + tails[i].tobytes(), "sha256")
                                       for i in range(5)]


@pytest.mark.parametrize(("keys", "tails"), [
    (np.zeros((2, 65), np.uint8), np.zeros((2, 4), np.uint8)),   # a key longer than SHA-256's block
    (np.zeros((3, 16), np.uint8), np.zeros((2, 4), np.uint8)),   # neither one key nor one a row
    (np.zeros((2, 16), np.uint16), np.zeros((2, 4), np.uint8)),  # not bytes
    (np.zeros((2, 16), np.uint8), np.zeros(8, np.uint8)),        # not rows
])
def test_hmac_rows_refuse_other_arrays(path: str, keys: np.ndarray, tails: np.ndarray) -> None:
    with pytest.raises(InvalidParameters):
        hashing.hmac_sha256_many(keys, b"", tails)


def test_bytes_rows_is_the_inverse_of_row_bytes() -> None:
    """``hashing.bytes_rows``: byte strings of one size as the rows of uint8 (n, size), row ``i`` byte
    ``j`` the ``j``-th byte of string ``i``; ``row_bytes`` of them gives the strings back; no strings:
    shape (0, size)."""
    from secemb.fss.hashing import bytes_rows, row_bytes

    values = [bytes([i, 255 - i, 7, i ^ 0x5A]) for i in range(5)]
    rows = bytes_rows(values, 4)
    assert rows.dtype == np.uint8 and rows.shape == (5, 4)
    for i, v in enumerate(values):
        assert [int(x) for x in rows[i]] == list(v)
    assert row_bytes(rows) == values
    assert bytes_rows([], 16).shape == (0, 16)
