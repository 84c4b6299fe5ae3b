"""``ring_matmul`` against exact Python-integer matrix products modulo ``2^k``.

The float64 path is exact only while every partial sum stays below 2^53; the inner
dimension is cut into slices of ``2^52 / (terms * 2^term_bits)`` (2^19 for k = 32, 2^18 for
k = 64).  Shapes here cross those slice boundaries with all-ones-maximal entries, the worst
case for the float sums, where the answer has a closed form.

Every test runs twice: on the float reference and on the compiled kernels (numba's wrapping
ring arithmetic), which must give the same exact products.
"""

from __future__ import annotations

import numpy as np
import pytest
from fss_strategies import ring_dtype
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from secemb.errors import InvalidParameters
from secemb.fss import kernels, linalg
from secemb.fss.linalg import LimbMatrix, ring_matmul

SLICE = {32: 1 << 19, 64: 1 << 18}  # inner-dimension slice length without a_bits


@pytest.fixture(autouse=True, scope="module", params=["numpy", "numba"])
def backend(request: pytest.FixtureRequest) -> object:
    """The module's tests on the reference, then on the compiled kernels."""
    if request.param == "numba" and not kernels.available():
        pytest.skip("numba or AES-NI missing")
    old, kernels.BACKEND = kernels.BACKEND, request.param
    yield request.param
    kernels.BACKEND = old


def _exact(a: np.ndarray, b: np.ndarray, ring_bits: int) -> np.ndarray:
    prod = (
        a.astype(object) @ b.astype(object)
        if a.shape[1]
        else np.zeros((a.shape[0], b.shape[1]), object)
    )
    return (prod % (1 << ring_bits)).astype(ring_dtype(ring_bits))


@st.composite
def _operands(
    draw: st.DrawFn, a_bits: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    ring_bits = draw(st.sampled_from([32, 64]))
    k, m, d = draw(st.integers(0, 6)), draw(st.integers(0, 40)), draw(st.integers(0, 6))
    dt = ring_dtype(ring_bits)
    if a_bits == 1:
        a = draw(hnp.arrays(np.uint8, (k, m), elements=st.integers(0, 1)))
    else:
        a = draw(hnp.arrays(dt, (k, m)))
    b = draw(hnp.arrays(dt, (m, d)))
    return a, b, ring_bits


@settings(max_examples=150, deadline=None)
@given(_operands())
def test_ring_matmul_is_exact(ops: tuple[np.ndarray, np.ndarray, int]) -> None:
    a, b, ring_bits = ops
    got = ring_matmul(a, b, ring_bits)
    assert got.dtype == ring_dtype(ring_bits) and got.shape == (a.shape[0], b.shape[1])
    assert np.array_equal(got, _exact(a, b, ring_bits))


@settings(max_examples=100, deadline=None)
@given(_operands(a_bits=1))
def test_ring_matmul_with_bit_matrix_is_exact(
    ops: tuple[np.ndarray, np.ndarray, int],
) -> None:
    a, b, ring_bits = ops
    assert np.array_equal(
        ring_matmul(a, b, ring_bits, a_bits=1), _exact(a, b, ring_bits)
    )
    assert np.array_equal(
        ring_matmul(a.T.copy().T, b, ring_bits, a_bits=1), _exact(a, b, ring_bits)
    )


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_ring_matmul_extreme_values(ring_bits: int) -> None:
    top = (1 << ring_bits) - 1
    dt = ring_dtype(ring_bits)
    a = np.array([[top, 0, 1, top, 1 << (ring_bits - 1)]], dt)
    b = np.array([[top, 1], [top, top], [top, 0], [1, top], [3, 2]], dt)
    assert np.array_equal(ring_matmul(a, b, ring_bits), _exact(a, b, ring_bits))


def _count_slices(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = linalg._limbs

    def counting(x: np.ndarray, count: int) -> list[np.ndarray]:
        calls.append(x.shape[0] if x.ndim == 2 else 0)
        return real(x, count)

    monkeypatch.setattr(linalg, "_limbs", counting)
    return calls


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_ring_matmul_exact_across_float_slices_worst_case(
    monkeypatch: pytest.MonkeyPatch, ring_bits: int, backend: str
) -> None:
    """All entries 2^k - 1 (every limb 0xFFFF, the largest float partial sums): the product
    is M * (2^k - 1)^2 = M mod 2^k.  M = 2 slices + 3 forces three slices."""
    calls = _count_slices(monkeypatch)
    m = 2 * SLICE[ring_bits] + 3
    dt = ring_dtype(ring_bits)
    top = np.iinfo(dt).max
    a = np.full((2, m), top, dt)
    b = np.full((m, 3), top, dt)
    got = ring_matmul(a, b, ring_bits)
    assert np.all(got == m % (1 << ring_bits))
    # the float path: one limb split per operand and slice; the kernels take no limbs
    assert len(calls) == (2 * 3 if backend == "numpy" else 0)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_ring_matmul_exact_across_float_slices_random(
    monkeypatch: pytest.MonkeyPatch, ring_bits: int, backend: str
) -> None:
    calls = _count_slices(monkeypatch)
    m = SLICE[ring_bits] + 5
    gen = np.random.default_rng(ring_bits)
    dt = ring_dtype(ring_bits)
    a = gen.integers(0, np.iinfo(dt).max, (2, m), dtype=dt, endpoint=True)
    b = gen.integers(0, np.iinfo(dt).max, (m, 2), dtype=dt, endpoint=True)
    assert np.array_equal(ring_matmul(a, b, ring_bits), _exact(a, b, ring_bits))
    assert len(calls) == (4 if backend == "numpy" else 0)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_ring_matmul_bit_matrix_worst_case(ring_bits: int) -> None:
    """a_bits=1 allows long slices; all-ones a against maximal b is the worst case."""
    m = 3 * SLICE[ring_bits] + 1
    dt = ring_dtype(ring_bits)
    a = np.ones((1, m), np.uint8)
    b = np.full((m, 2), np.iinfo(dt).max, dt)
    got = ring_matmul(a, b, ring_bits, a_bits=1)
    assert np.all(got == (-m) % (1 << ring_bits))


def test_ring_matmul_accepts_signed_and_narrow_inputs() -> None:
    """Values are taken modulo 2^k: a small signed left operand (a share's sign) works."""
    a = np.array([[-1, 2]], np.int64)
    b = np.array([[5], [7]], np.uint32)
    assert ring_matmul(a, b, 32)[0, 0] == (-5 + 14) % 2**32


@pytest.mark.parametrize("ring_bits", [0, 16, 128])
def test_ring_matmul_fails_if_ring_bits_unsupported(ring_bits: int) -> None:
    with pytest.raises(InvalidParameters, match="ring_bits"):
        ring_matmul(np.zeros((1, 1), np.uint32), np.zeros((1, 1), np.uint32), ring_bits)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((2, 3), (4, 1)), ((3,), (3, 1)), ((2, 3), (3,)), ((1, 2, 3), (2, 4, 1))],
)
def test_ring_matmul_fails_if_shapes_do_not_match(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> None:
    with pytest.raises(InvalidParameters, match="cannot multiply"):
        ring_matmul(np.zeros(a_shape, np.uint32), np.zeros(b_shape, np.uint32), 32)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([32, 64]),
    st.integers(1, 3),
    st.integers(0, 4),
    st.integers(0, 30),
    st.integers(0, 4),
    st.booleans(),
    st.data(),
)
def test_ring_matmul_batched_is_exact(
    ring_bits: int,
    batch: int,
    k: int,
    m: int,
    d: int,
    shared_b: bool,
    data: st.DataObject,
) -> None:
    """Leading batch dimensions broadcast as in numpy.matmul; each batch is exact."""
    dt = ring_dtype(ring_bits)
    a = data.draw(hnp.arrays(dt, (batch, k, m)))
    b = data.draw(hnp.arrays(dt, (m, d) if shared_b else (batch, m, d)))
    got = ring_matmul(a, b, ring_bits)
    assert got.shape == (batch, k, d) and got.dtype == dt
    for i in range(batch):
        assert np.array_equal(got[i], _exact(a[i], b if shared_b else b[i], ring_bits))


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_ring_matmul_with_column_limits_counts_only_the_leading_columns(ring_bits: int) -> None:
    """``cols[g]``: group ``g`` multiplies only its first ``cols[g]`` columns of ``a`` (rows of
    ``b``), whatever the rest holds; bad limits are refused."""
    dt = ring_dtype(ring_bits)
    gen = np.random.default_rng(ring_bits)
    a = gen.integers(0, np.iinfo(dt).max, (4, 6, 9), dtype=dt, endpoint=True)
    b = gen.integers(0, np.iinfo(dt).max, (4, 9, 3), dtype=dt, endpoint=True)
    cols = np.array([9, 0, 4, 1])
    got = ring_matmul(a, b, ring_bits, cols=cols)
    for g, c in enumerate(cols):
        assert np.array_equal(got[g], _exact(a[g, :, :c], b[g, :c], ring_bits))
    for bad in (cols[:3], np.array([9, 0, 4, 10]), np.array([9, -1, 4, 1])):
        with pytest.raises(InvalidParameters, match="cols"):
            ring_matmul(a, b, ring_bits, cols=bad)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_a_gathered_limb_matrix_multiplies_as_its_rows(ring_bits: int) -> None:
    """A table in bucket form (rows gathered, -1 a zero row) gives the products of those rows."""
    dt = ring_dtype(ring_bits)
    rng = np.random.default_rng(7)
    table = rng.integers(0, np.iinfo(dt).max, (9, 5), dtype=dt, endpoint=True)
    index = np.array([[3, -1, 8], [0, 0, -1]])
    rows = np.where(index[..., None] < 0, 0, table[np.maximum(index, 0)]).astype(dt)
    a = rng.integers(0, np.iinfo(dt).max, (2, 4, 3), dtype=dt, endpoint=True)
    got = ring_matmul(a, LimbMatrix(table, ring_bits).gather(index), ring_bits)
    for g in range(2):
        assert np.array_equal(got[g], _exact(a[g], rows[g], ring_bits))
