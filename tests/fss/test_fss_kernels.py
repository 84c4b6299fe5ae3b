"""The compiled kernels (``secemb.fss.kernels``, numba with AES-NI/VAES) against the numpy
reference, bit for bit, over domain sizes, payload widths, both rings and both layouts'
domains (the full domain m and a cuckoo bucket's small domain M, many keys)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from fss_strategies import EDGE_DOMAINS, random_ring, ring_dtype
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import kernels, tree
from secemb.fss.convert import convert, convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG, retrieve_and_prepare, retrieve_and_prepare_buckets
from secemb.randomness import CtrDrbg

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _both(monkeypatch: pytest.MonkeyPatch, fn: Callable[[], object]) -> tuple[object, object]:
    """``fn()`` on the numpy reference, then on the compiled kernels."""
    out = []
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        out.append(fn())
    return out[0], out[1]


def _equal(a: object, b: object) -> bool:
    if isinstance(a, tuple):
        return all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("t_bits", "conv_sum"))


@st.composite
def _cases(draw: st.DrawFn, max_domain: int = 700):
    m = draw(st.sampled_from(EDGE_DOMAINS + (300, 511, 512, 513)) | st.integers(1, max_domain))
    k = draw(st.integers(1, 11))
    width = draw(st.integers(1, 70))
    ring_bits = draw(st.sampled_from([32, 64]))
    seed = draw(st.integers(0, 2**32))
    return m, k, width, ring_bits, seed


@FAST
@given(_cases())
def test_eval_full_is_the_same_on_both_backends(case) -> None:
    m, k, width, ring_bits, seed = case
    gen = np.random.default_rng(seed)
    alphas = gen.integers(0, m, k)
    betas = random_ring(gen, (k, width), ring_bits)
    k0, k1 = fss.gen(alphas, betas, m, ring_bits=ring_bits, _rng=CtrDrbg(seed))
    with pytest.MonkeyPatch.context() as mp:
        for keys, b in ((k0, 0), (k1, 1)):
            ref, fast = _both(mp, lambda: (fss.eval_full_path(keys, b), fss.eval_full(keys, b)))
            assert _equal(ref, fast)


@FAST
@given(_cases())
def test_key_generation_is_the_same_on_both_backends(case) -> None:
    m, k, _, _, seed = case
    alphas = np.random.default_rng(seed).integers(0, m, k)

    def keys() -> tuple[np.ndarray, ...]:
        p0, p1, state = fss.gen_path(alphas, m, _rng=CtrDrbg(seed))
        return p0.roots, p1.roots, p0.cw_seed, p0.cw_tl, p0.cw_tr, state.leaf0, state.leaf1

    with pytest.MonkeyPatch.context() as mp:
        assert _equal(*_both(mp, keys))


@FAST
@given(_cases(), st.integers(1, 9))
def test_server_evaluation_is_the_same_on_both_backends(case, d: int) -> None:
    """Retrieval answer (``eval_full_dot``) and the fused retrieval + aggregation summary."""
    m, k, width, ring_bits, seed = case
    gen = np.random.default_rng(seed)
    alphas = gen.integers(0, m, k)
    table = random_ring(gen, (m, d), ring_bits)
    ones = np.ones((k, 1), ring_dtype(ring_bits))
    k0, k1 = fss.gen(alphas, ones, m, ring_bits=ring_bits, _rng=CtrDrbg(seed))
    p0, p1, state = fss.gen_path(alphas, m, _rng=CtrDrbg(seed))
    with pytest.MonkeyPatch.context() as mp:
        cw_ret = _both(mp, lambda: fss.convert_gen(state, ones, ring_bits=ring_bits, tag=RETRIEVAL_TAG))
        assert _equal(*cw_ret)
        for keys, path, b in ((k0, p0, 0), (k1, p1, 1)):
            assert _equal(*_both(mp, lambda: fss.eval_full_dot(keys, b, table)))
            assert _equal(*_both(mp, lambda: retrieve_and_prepare(path, b, cw_ret[0], table, width)))


@FAST
@given(
    st.integers(1, 40),  # bucket domain M: a cuckoo bucket's small domain
    st.integers(1, 5),  # buckets B
    st.integers(1, 4),  # users U
    st.integers(1, 20),
    st.sampled_from([32, 64]),
    st.integers(0, 2**32),
)
def test_bucket_form_is_the_same_on_both_backends(big_m, buckets, users, width, ring_bits, seed) -> None:
    gen = np.random.default_rng(seed)
    k = buckets * users
    alphas = gen.integers(0, big_m, k)
    tables = random_ring(gen, (buckets, big_m, 3), ring_bits)
    p0, _, state = fss.gen_path(alphas, big_m, _rng=CtrDrbg(seed))
    cw_ret = fss.convert_gen(state, np.ones((k, 1), ring_dtype(ring_bits)), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    with pytest.MonkeyPatch.context() as mp:
        assert _equal(*_both(mp, lambda: retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, width)))


@pytest.mark.parametrize("width", [1, 3, 4, 5, 64, 65, 128, 200])
@pytest.mark.parametrize("ring_bits", [32, 64])
def test_conversion_kernels_equal_the_reference(monkeypatch: pytest.MonkeyPatch, width: int, ring_bits: int) -> None:
    """Every conversion path of the kernels: one block per leaf (the words are the AES input),
    whole 16-block counter runs, any other count of blocks (staged inputs, short tails), and
    counter runs followed by a staged remainder (65 and 200 values: 17/33 and 50/100 blocks);
    the accumulation wraps around its rows, and skips the rows not live (left as they were)."""
    gen = np.random.default_rng(width)
    words = gen.integers(0, 2**64, (1037, 2), dtype=np.uint64)
    ref, fast = _both(monkeypatch, lambda: convert(words, width, ring_bits, AGGREGATION_TAG))
    assert _equal(ref, fast)

    live = np.random.default_rng(1).random(300) < 0.6

    def accumulate(rows: np.ndarray | None) -> np.ndarray:
        acc = random_ring(np.random.default_rng(0), (300, width), ring_bits)
        convert_accumulate(words, AGGREGATION_TAG, acc, 250, rows)
        return acc

    assert _equal(*_both(monkeypatch, lambda: accumulate(None)))
    masked = _both(monkeypatch, lambda: accumulate(live))
    assert _equal(*masked)
    assert np.array_equal(masked[1][~live], random_ring(np.random.default_rng(0), (300, width), ring_bits)[~live])


@pytest.mark.parametrize(("m", "keys"), [(5000, 3), (93386, 1), (129, 33)])
def test_walk_equals_reference_over_many_row_groups(monkeypatch: pytest.MonkeyPatch, m: int, keys: int) -> None:
    """Deep trees (top levels on the numpy path, 7 levels in the kernel), row groups that end
    inside a key, and subtree batches of fewer than 8 rows."""
    monkeypatch.setattr(tree, "GROUP_LEAVES", 1 << 10)
    path, _, _ = fss.gen_path(np.random.default_rng(m).integers(0, m, keys), m, _rng=CtrDrbg(m))
    ref, fast = _both(monkeypatch, lambda: tree.expand(path).copy())
    assert _equal(ref, fast)


def test_backend_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECEMB_FSS_KERNELS", "numpy")
    assert kernels._initial_backend() == "numpy"
    monkeypatch.setenv("SECEMB_FSS_KERNELS", "numba")
    assert kernels._initial_backend() == "numba"
    monkeypatch.setenv("SECEMB_FSS_KERNELS", "fast")
    with pytest.raises(InvalidParameters, match="SECEMB_FSS_KERNELS"):
        kernels._initial_backend()


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize(("users", "buckets", "big_m", "width"), [(1, 3, 5, 1), (7, 4, 9, 3), (30, 12, 33, 16)])
def test_bits_product_is_the_same_on_both_backends(monkeypatch: pytest.MonkeyPatch, users, buckets, big_m, width,
                                                   ring_bits) -> None:
    """The control-bit part of a bucket-form aggregate, and against a per-user loop."""
    from secemb.fss.fused import bits_product

    dt = np.uint32 if ring_bits == 32 else np.uint64
    gen = np.random.default_rng(users * 100 + big_m)
    bits = [gen.integers(0, 2, (buckets, big_m), dtype=np.uint8) for _ in range(users)]
    cws = [gen.integers(0, np.iinfo(dt).max, (buckets, width), dtype=dt, endpoint=True) for _ in range(users)]
    ref, got = _both(monkeypatch, lambda: bits_product(np.stack(bits), np.stack(cws)))
    assert _equal(ref, got)
    want = np.zeros((buckets, big_m, width), dt)
    with np.errstate(over="ignore"):
        for t, cw in zip(bits, cws, strict=True):
            want += t[:, :, None].astype(dt) * cw[:, None, :]
    assert np.array_equal(got, want)
    # bucket sizes: positions past them are left zero
    sizes = gen.integers(0, big_m + 1, buckets)
    inside = np.arange(big_m)[None, :] < sizes[:, None]
    ref, got = _both(monkeypatch, lambda: bits_product(np.stack(bits), np.stack(cws), sizes))
    assert _equal(ref, got) and np.array_equal(got[inside], want[inside]) and not got[~inside].any()
    # accumulated into ``out``: added at the positions inside, the rest left as they were
    base = gen.integers(0, np.iinfo(dt).max, (buckets, big_m, width), dtype=dt, endpoint=True)
    ref, got = _both(monkeypatch, lambda: bits_product(np.stack(bits), np.stack(cws), sizes, out=base.copy()))
    with np.errstate(over="ignore"):
        assert _equal(ref, got) and np.array_equal(got, base + np.where(inside[:, :, None], want, dt(0)))
    with pytest.raises(InvalidParameters, match="out must be"):
        bits_product(np.stack(bits), np.stack(cws), out=np.zeros((buckets + 1, big_m, width), dt))


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("negate", [False, True])
def test_bits_product_of_per_user_arrays(monkeypatch: pytest.MonkeyPatch, ring_bits: int, negate: bool) -> None:
    """Issue 37 (session 24): the users' own arrays, read where they are -- a range of buckets of
    each (views), one not C-contiguous -- from ``start`` into ``out``, party 1's sign with
    ``negate``: the same on both backends and as a per-user loop; nothing but ``out`` written."""
    from secemb.fss.fused import bits_product

    dt = np.uint32 if ring_bits == 32 else np.uint64
    users, buckets, big_m, width, lo, hi = 9, 11, 7, 5, 2, 9
    gen = np.random.default_rng(ring_bits + negate)
    bits = [gen.integers(0, 2, (buckets, big_m), dtype=np.uint8) for _ in range(users)]
    cws = [gen.integers(0, np.iinfo(dt).max, (buckets, width), dtype=dt, endpoint=True) for _ in range(users)]
    cws[3] = np.asfortranarray(cws[3])  # not C-contiguous
    sizes = gen.integers(0, big_m + 1, hi - lo)
    start = gen.integers(0, np.iinfo(dt).max, (buckets, big_m, width), dtype=dt, endpoint=True)[lo:hi]
    kept = [x.copy() for x in (*bits, *cws, start)]
    ref, got = _both(monkeypatch, lambda: bits_product([b[lo:hi] for b in bits], [c[lo:hi] for c in cws], sizes,
                                                       out=np.full((hi - lo, big_m, width), 7, dt), start=start,
                                                       negate=negate))
    assert _equal(ref, got)
    want = start.copy()
    inside = (np.arange(big_m)[None, :] < sizes[:, None])[:, :, None]
    with np.errstate(over="ignore"):
        for t, cw in zip(bits, cws, strict=True):
            term = np.where(inside, t[lo:hi, :, None].astype(dt) * cw[lo:hi, None, :], dt(0))
            want = want - term if negate else want + term
    assert np.array_equal(got, want)
    assert all(np.array_equal(x, y) for x, y in zip(kept, (*bits, *cws, start), strict=True))
    # start defaults to out's contents
    base = gen.integers(0, np.iinfo(dt).max, (buckets, big_m, width), dtype=dt, endpoint=True)
    ref, got = _both(monkeypatch, lambda: bits_product(bits, cws, out=base.copy(), negate=negate))
    assert _equal(ref, got) and np.array_equal(got, bits_product(bits, cws, start=base, negate=negate))
    with pytest.raises(InvalidParameters, match="as many"):
        bits_product(bits, cws[:-1])
    with pytest.raises(InvalidParameters, match="the same for every user"):
        bits_product(bits, [*cws[:-1], cws[-1][:, :2]])
    with pytest.raises(InvalidParameters, match="start must be"):
        bits_product(bits, cws, start=start)
