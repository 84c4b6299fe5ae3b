"""Issue 37 (session 27, helper E): the retrieval product written where the answers belong.

:func:`secemb.fss.linalg.ring_matmul` takes ``out=``: a writeable array of the product's shape and dtype, of
any strides -- the retrieval passes the transposed (bucket-major) view of its user-major answers, so the
compiled kernel writes each answer row once, where it stays, instead of into a new zeroed product that a
transposed copy then moved.  The kernel overwrites ``out`` (it no longer adds into a zeroed array) and runs
row blocks outside and groups inside.  Here: the products into such views equal exact Python-integer
products on the compiled kernel and on the float reference, bit for bit, whatever ``out`` held before;
nothing outside the view is written; an ``out`` of another shape or dtype, read-only, or sharing memory with
an operand is refused; the bucket retrieval's answers are the same on both paths at a round's shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import dpf, kernels
from secemb.fss.fused import RETRIEVAL_TAG, retrieve_and_prepare_buckets
from secemb.fss.linalg import LimbMatrix, ring_matmul
from secemb.randomness import CtrDrbg


def _dtype(ring_bits: int) -> type[np.unsignedinteger]:
    return np.uint32 if ring_bits == 32 else np.uint64


def _exact(a: np.ndarray, b: np.ndarray, cols: np.ndarray, ring_bits: int) -> np.ndarray:
    """``a[g, :, :c] @ b[g, :c]`` per group in Python integers, modulo ``2^ring_bits``: (G, K, D)."""
    out = np.zeros((a.shape[0], a.shape[1], b.shape[2]), object)
    for g, c in enumerate(cols):
        if c:
            out[g] = a[g, :, :c].astype(object) @ b[g, :c].astype(object)
    return (out % (1 << ring_bits)).astype(_dtype(ring_bits))


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize(("groups", "k", "m", "d"), [(3, 9, 32, 69), (5, 4, 7, 1), (2, 1, 5, 3), (4, 6, 0, 2),
                                                     (1, 13, 16, 5)])
def test_the_product_into_a_transposed_view_is_exact(backend: str, ring_bits: int, groups: int, k: int, m: int,
                                                     d: int) -> None:
    gen = np.random.default_rng(groups * 100 + k)
    dt = _dtype(ring_bits)
    a = gen.integers(0, 2**ring_bits, (groups, k, m), dtype=dt)
    b = gen.integers(0, 2**ring_bits, (groups, m, d), dtype=dt)
    cols = gen.integers(0, m + 1, groups)
    # user-major answers (K, 2 + G + 1, D), random bytes; the product goes to columns 2 .. 2 + G
    base = gen.integers(0, 2**ring_bits, (k, groups + 3, d), dtype=dt)
    before = base.copy()
    view = base[:, 2 : 2 + groups].transpose(1, 0, 2)
    got = ring_matmul(a, b, ring_bits, cols=cols, out=view)
    assert got is view
    assert np.array_equal(view, _exact(a, b, cols, ring_bits))
    outside = np.ones(base.shape, bool)
    outside[:, 2 : 2 + groups] = False
    assert np.array_equal(base[outside], before[outside])


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_a_two_dimensional_product_into_a_strided_out_is_exact(backend: str, ring_bits: int) -> None:
    gen = np.random.default_rng(ring_bits)
    dt = _dtype(ring_bits)
    a = gen.integers(0, 2, (7, 20), dtype=np.uint8)  # a 0/1 matrix, as the control bits are
    b = gen.integers(0, 2**ring_bits, (20, 3), dtype=dt)
    base = np.full((7, 9), 5, dt)
    got = ring_matmul(a, LimbMatrix(b, ring_bits), ring_bits, a_bits=1, out=base[:, 0:6:2])  # columns 0, 2, 4
    assert np.array_equal(got, _exact(a[None], b[None], np.array([20]), ring_bits)[0])
    assert np.array_equal(base[:, [1, 3, 5, 6, 7, 8]], np.full((7, 6), 5, dt))  # the others are not written


def test_both_paths_give_the_same_bits_into_the_same_view(monkeypatch: pytest.MonkeyPatch) -> None:
    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    gen = np.random.default_rng(5)
    a = gen.integers(0, 2**32, (6, 11, 32), dtype=np.uint32)
    b = gen.integers(0, 2**32, (6, 32, 69), dtype=np.uint32)
    cols = np.array([32, 31, 0, 17, 32, 1])
    got = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        base = np.full((11, 8, 69), 0xFFFFFFFF, np.uint32)  # whatever out held is overwritten
        ring_matmul(a, b, 32, cols=cols, out=base[:, 1:7].transpose(1, 0, 2))
        got[name] = base
    assert np.array_equal(got["numpy"], got["numba"])


@pytest.mark.parametrize("make_bad", [
    lambda out: out[:, :-1],  # another shape
    lambda out: out.astype(np.uint64),  # another dtype
    lambda out: np.lib.stride_tricks.as_strided(out, writeable=False),  # read-only
    lambda out: "not an array",
])
def test_an_out_that_cannot_take_the_product_is_refused(backend: str, make_bad) -> None:  # noqa: ANN001
    a = np.ones((2, 3, 4), np.uint32)
    b = np.ones((2, 4, 5), np.uint32)
    with pytest.raises(InvalidParameters, match="out must be"):
        ring_matmul(a, b, 32, out=make_bad(np.zeros((2, 3, 5), np.uint32)))


def test_an_out_sharing_an_operands_memory_is_refused(backend: str) -> None:
    a = np.ones((3, 3), np.uint32)
    b = np.ones((3, 3), np.uint32)
    with pytest.raises(InvalidParameters, match="sharing no memory"):
        ring_matmul(a, b, 32, out=a)
    with pytest.raises(InvalidParameters, match="sharing no memory"):
        ring_matmul(a, LimbMatrix(b, 32), 32, out=b)
    assert (a == 1).all() and (b == 1).all()


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_the_bucket_retrieval_is_the_same_on_both_paths_at_a_rounds_shapes(monkeypatch: pytest.MonkeyPatch,
                                                                            ring_bits: int) -> None:
    """Keys of 10 users over 7 buckets of 32 (the ML-100K round's bucket domain), rows of 69 words, some
    buckets short; answers into the views of a batch of 9 buckets: compiled == reference, and the two
    parties' answers add up to the rows."""
    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    users, buckets, big_m, d = 10, 7, 32, 69
    gen = np.random.default_rng(ring_bits)
    dt = _dtype(ring_bits)
    sizes = np.array([32, 20, 32, 1, 31, 32, 9])
    alphas = np.concatenate([gen.integers(0, sizes) for _ in range(users)])
    live = (np.arange(big_m)[None, :] < sizes[:, None])[:, :, None]
    tables = gen.integers(0, 2**ring_bits, (buckets, big_m, d), dtype=dt) * live.astype(dt)
    p0, p1, state = dpf.gen_path(alphas, big_m, _rng=CtrDrbg(b"s27-product"))
    cw = dpf.convert_gen(state, np.ones((len(alphas), 1), dt), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    shares = []
    for party, path in enumerate((p0, p1)):
        got = {}
        for name in ("numpy", "numba"):
            monkeypatch.setattr(kernels, "BACKEND", name)
            answers = np.full((users, buckets + 2, d), 3, dt)
            views = (answers[:, 1 : buckets + 1], np.empty((users, buckets, big_m), np.uint8),
                     np.empty((buckets, big_m, 4), dt))
            retrieve_and_prepare_buckets(path, party, cw, LimbMatrix(tables, ring_bits), 4, sizes=sizes, out=views)
            got[name] = answers
            plain = retrieve_and_prepare_buckets(path, party, cw, LimbMatrix(tables, ring_bits), 4, sizes=sizes)[0]
            assert np.array_equal(plain, answers[:, 1 : buckets + 1].reshape(users * buckets, d))
        assert np.array_equal(got["numpy"], got["numba"])
        assert (got["numba"][:, [0, buckets + 1]] == 3).all()
        shares.append(got["numba"][:, 1 : buckets + 1])
    rows = tables[np.tile(np.arange(buckets), users), alphas].reshape(users, buckets, d)
    assert np.array_equal(shares[0] + shares[1], rows)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_a_gathered_operand_is_read_through_its_index(backend: str, ring_bits: int) -> None:
    """The bucket form of a table (``LimbMatrix.gather``: rows through an index, -1 a zero row, anywhere in a
    bucket) multiplies as the gathered rows, into a strided view, on both paths; the table is not written."""
    gen = np.random.default_rng(ring_bits + 1)
    dt = _dtype(ring_bits)
    rows = gen.integers(0, 2**ring_bits, (40, 6), dtype=dt)
    index = gen.integers(-1, 40, (5, 8))
    index[:, -2:] = -1  # padding at a bucket's end too, as the layout pads
    a = gen.integers(0, 2**ring_bits, (5, 7, 8), dtype=dt)
    cols = np.array([8, 6, 0, 3, 7])
    gathered = np.where((index >= 0)[:, :, None], rows[np.maximum(index, 0)], 0).astype(dt)
    before = rows.copy()
    base = np.zeros((7, 6, 6), dt)
    got = ring_matmul(a, LimbMatrix(rows, ring_bits).gather(index), ring_bits, cols=cols,
                      out=base[:, :5].transpose(1, 0, 2))
    assert np.array_equal(got, _exact(a, gathered, cols, ring_bits))
    assert (base[:, 5] == 0).all() and np.array_equal(rows, before)
    assert np.array_equal(LimbMatrix(rows, ring_bits).gather(index).ring, gathered)


@pytest.mark.parametrize("index", [np.array([[0, 40]]), np.array([[-2, 3]]), np.array([[0.0, 1.0]])])
def test_a_gather_index_outside_the_rows_is_refused(index: np.ndarray) -> None:
    """The compiled product reads the rows through the index unchecked: an entry outside ``[-1, N)`` (or not
    an integer) is refused when the operand is made."""
    with pytest.raises(InvalidParameters, match="gather index"):
        LimbMatrix(np.zeros((40, 3), np.uint32), 32).gather(index)
