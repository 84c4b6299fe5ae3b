"""Ternary projections (``secemb.fss.projections``) against an independent expansion and
plain Python-integer arithmetic modulo ``2^k``.

The expected rows come from ``cryptography``'s own AES-CTR mode and a Python-int bit walk
written from the module docstring's specification, not from the module's ECB/unpackbits
path; expected projections are Python-int sums reduced modulo ``2^k``.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters
from secemb.fss import kernels, projections
from secemb.fss.projections import project, project_each, project_reference, ternary_rows

BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])
DTYPES = [np.uint32, np.uint64]


def _spec_rows(seed: bytes, rows: int, length: int) -> list[list[int]]:
    """The specification, independently: AES-128-CTR (counter block 0, big-endian) under
    SHA-256(domain || seed)[:16]; row i is bytes [i B, (i + 1) B), B = ceil(length / 4); entry j
    is bit 2 (j mod 4) minus bit 2 (j mod 4) + 1 of the row's byte j // 4."""
    key = hashlib.sha256(b"secemb/fss/projections" + seed).digest()[:16]
    per_row = -(-length // 4)
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(rows * per_row))
    out = []
    for i in range(rows):
        row = []
        for j in range(length):
            v = stream[i * per_row + j // 4] >> (2 * (j % 4))
            row.append((v & 1) - ((v >> 1) & 1))
        out.append(row)
    return out


def _python_projections(r: list[list[int]], x: np.ndarray, k: int) -> list[list[int]]:
    return [[sum(a * int(v) for a, v in zip(row, dev, strict=True)) % (1 << k) for row in r] for dev in x]


def _random_ring(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    dt = np.dtype(dtype)
    return np.frombuffer(os.urandom(int(np.prod(shape)) * dt.itemsize), dt).reshape(shape).copy()


@pytest.mark.parametrize(("rows", "length"), [(1, 1), (3, 7), (4, 16), (5, 33), (0, 9), (2, 0)])
def test_ternary_rows_match_an_independent_aes_ctr_expansion(rows: int, length: int) -> None:
    seed = os.urandom(16)
    got = ternary_rows(seed, rows, length)
    assert got.dtype == np.int8 and got.shape == (rows, length)
    assert got.tolist() == _spec_rows(seed, rows, length)


def test_ternary_rows_known_answer() -> None:
    # pinned from the independent expansion above (_spec_rows) for seed 00 01 .. 0f
    expected = [[0, -1, 1, 1, -1, 0, -1], [0, 1, -1, 0, -1, 0, -1], [0, 0, -1, 0, 0, -1, 0]]
    seed = bytes(range(16))
    assert _spec_rows(seed, 3, 7) == expected
    assert ternary_rows(seed, 3, 7).tolist() == expected


def test_the_distribution_over_a_million_entries_is_a_quarter_a_half_a_quarter() -> None:
    t = ternary_rows(os.urandom(16), 25, 40_000)
    counts = {v: int(np.count_nonzero(t == v)) / t.size for v in (-1, 0, 1)}
    assert set(np.unique(t).tolist()) == {-1, 0, 1}
    # standard deviation of each fraction is about 0.0005: a loose 10-sigma bound
    assert abs(counts[-1] - 0.25) < 0.005 and abs(counts[0] - 0.5) < 0.005 and abs(counts[1] - 0.25) < 0.005


def test_different_seeds_give_different_rows_and_one_seed_the_same() -> None:
    a, b = os.urandom(16), os.urandom(16)
    assert np.array_equal(ternary_rows(a, 4, 100), ternary_rows(a, 4, 100))
    assert not np.array_equal(ternary_rows(a, 4, 100), ternary_rows(b, 4, 100))
    # a longer matrix continues the same stream: the first rows of the same length agree
    assert np.array_equal(ternary_rows(a, 6, 100)[:4], ternary_rows(a, 4, 100))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "rows", "length"), [(1, 1, 1), (3, 5, 11), (4, 40, 64), (0, 3, 5), (2, 3, 0)])
def test_project_matches_python_ints(dtype: type, n: int, rows: int, length: int) -> None:
    k = np.dtype(dtype).itemsize * 8
    seed = os.urandom(16)
    x = _random_ring((n, length), dtype)
    expected = _python_projections(_spec_rows(seed, rows, length), x, k)
    for fn in (project, project_reference):
        got = fn(seed, x, rows)
        assert got.dtype == dtype and got.shape == (n, rows)
        assert got.tolist() == expected


@pytest.mark.parametrize("dtype", DTYPES)
def test_wraparound_with_every_coordinate_at_the_ring_maximum(dtype: type) -> None:
    k = np.dtype(dtype).itemsize * 8
    seed, rows, length = os.urandom(16), 6, 301
    x: np.ndarray = np.full((2, length), (1 << k) - 1, dtype)
    # (2^k - 1) * s = -s mod 2^k for the row sum s
    expected = [[(-sum(row)) % (1 << k) for row in _spec_rows(seed, rows, length)]] * 2
    assert project(seed, x, rows).tolist() == expected
    assert project_reference(seed, x, rows).tolist() == expected


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [16_251, 40_626])
def test_project_at_deployment_lengths(dtype: type, length: int) -> None:
    k = np.dtype(dtype).itemsize * 8
    seed = os.urandom(16)
    x = _random_ring((3, length), dtype)
    x[0] = (1 << k) - 1
    got = project(seed, x, 40)
    assert np.array_equal(got, project_reference(seed, x, 40))
    # two rows of each device by Python ints
    expected = _python_projections(_spec_rows(seed, 2, length), x, k)
    assert got[:, :2].tolist() == expected


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sign", [1, -1])
def test_the_float_path_is_exact_at_its_worst_case_past_one_slice(dtype: type, sign: int) -> None:
    # every entry sign * 1 and every coordinate 2^k - 1: partial sums reach 2^21 (2^32 - 1) per
    # slice, the bound of the exactness argument, and the inner dimension crosses a slice
    k = np.dtype(dtype).itemsize * 8
    length = (1 << 21) + 5
    t = np.full((1, length), sign, np.int8)
    x: np.ndarray = np.full((1, length), (1 << k) - 1, dtype)
    got = projections._float_products(t, x)
    assert got.tolist() == [[(sign * length * ((1 << k) - 1)) % (1 << k)]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_float_path_across_several_slices(dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(projections, "_SLICE", 7)
    k = np.dtype(dtype).itemsize * 8
    seed = os.urandom(16)
    x = _random_ring((3, 50), dtype)
    assert project(seed, x, 4).tolist() == _python_projections(_spec_rows(seed, 4, 50), x, k)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "length", "temp"), [(5, 13, 1 << 23), (7, 101, 300), (3, 40_626, 1 << 23), (0, 4, 8)])
def test_project_each_equals_project_per_device(backend: str, dtype: type, n: int, length: int, temp: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    monkeypatch.setattr(projections, "_TEMP_ENTRIES", temp)  # 300: chunks of 1 and of several devices
    rows = 40 if length > 1000 else 3
    seeds = [os.urandom(16) for _ in range(n)]
    x = _random_ring((n, length), dtype)
    if n:
        x[0] = np.iinfo(dtype).max
    per_device = [project(s, x[d : d + 1], rows)[0] for d, s in enumerate(seeds)]
    expected: np.ndarray = np.array(per_device, dtype).reshape(n, rows)
    got = project_each(seeds, x, rows)
    assert got.dtype == dtype and np.array_equal(got, expected)
    as_array = np.frombuffer(b"".join(seeds), np.uint8).reshape(n, 16)
    assert np.array_equal(project_each(as_array, x, rows), expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_project_each_matches_python_ints(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [os.urandom(16) for _ in range(3)]
    x = _random_ring((3, 9), np.uint32)
    expected = [_python_projections(_spec_rows(s, 5, 9), x[d : d + 1], 32)[0] for d, s in enumerate(seeds)]
    assert project_each(seeds, x, 5).tolist() == expected


GOOD = np.zeros((2, 4), np.uint32)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ternary_rows(b"short", 2, 2), "16 bytes"),
        (lambda: ternary_rows("0123456789abcdef", 2, 2), "16 bytes"),  # type: ignore[arg-type]
        (lambda: ternary_rows(bytes(16), -1, 2), "rows"),
        (lambda: ternary_rows(bytes(16), 2, 2.0), "length"),  # type: ignore[arg-type]
        (lambda: project(bytes(16), GOOD.astype(np.int64)), "uint32 or uint64"),
        (lambda: project(bytes(16), GOOD.astype(np.float64)), "uint32 or uint64"),
        (lambda: project(bytes(16), GOOD[0]), "2-D"),
        (lambda: project(bytes(15), GOOD), "16 bytes"),
        (lambda: project_reference(bytes(16), [[1, 2]]), "uint32 or uint64"),  # type: ignore[arg-type]
        (lambda: project_each([bytes(16)], GOOD), "one seed per device"),
        (lambda: project_each([bytes(16), bytes(17)], GOOD), "16 bytes"),
        (lambda: project_each(np.zeros((2, 15), np.uint8), GOOD), r"uint8 \(2, 16\)"),
        (lambda: project_each(np.zeros((2, 16), np.int8), GOOD), r"uint8 \(2, 16\)"),
        (lambda: project_each([bytes(16)] * 2, GOOD, -3), "rows"),
    ],
)
def test_bad_arguments_raise_invalid_parameters(call: object, match: str) -> None:
    with pytest.raises(InvalidParameters, match=match):
        call()  # type: ignore[operator]


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_and_fortran_order_shares_give_the_same_projections(backend: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [os.urandom(16) for _ in range(3)]
    wide = _random_ring((3, 42), np.uint64)
    strided, fortran = wide[:, ::2], np.asfortranarray(wide[:, ::2])
    expected = project_each(seeds, np.ascontiguousarray(strided), 5)
    assert np.array_equal(project_each(seeds, strided, 5), expected)
    assert np.array_equal(project_each(seeds, fortran, 5), expected)
    assert np.array_equal(project(seeds[0], fortran, 5), project(seeds[0], np.ascontiguousarray(strided), 5))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temp", [1 << 23, 90])
def test_project_each_with_repeated_seeds_matches_python_ints(backend: str, temp: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # devices sharing a seed (one stream expanded for them) interleaved with others, in one chunk
    # or in chunks of two devices (temp 90 at 5 x 9 entries a device)
    monkeypatch.setattr(kernels, "BACKEND", backend)
    monkeypatch.setattr(projections, "_TEMP_ENTRIES", temp)
    a, b, c = (os.urandom(16) for _ in range(3))
    seeds = [a, b, a, a, c, b, a]
    x = _random_ring((7, 9), np.uint64)
    x[2] = np.iinfo(np.uint64).max
    expected = [_python_projections(_spec_rows(s, 5, 9), x[d : d + 1], 64)[0] for d, s in enumerate(seeds)]
    assert project_each(seeds, x, 5).tolist() == expected
    assert project_each(seeds, x.astype(np.uint32), 5).tolist() == [[v % (1 << 32) for v in r] for r in expected]
