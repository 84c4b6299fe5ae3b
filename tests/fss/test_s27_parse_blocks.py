"""Issue 37 (session 27, helper N): the walk reads a range's correction words where the request batch holds them.

The server's cuckoo evaluation task of buckets ``lo..hi-1`` hands the walk every user's keys of them as a
:class:`~secemb.fss.keys.PathBlocks` of the parsed batch (``tasks.evaluate_task`` with ``keys = (batch, users)``)
instead of a copy made by ``PathKeys.blocks``; ``bgi_corrections`` forms the compiled walk's corrections of those
keys straight from the batch's fields.  Checked here: the kernel against the corrections the test composes from
the fields of the keys it picks itself; the walk, the bucket retrieval and the task of a range read in place equal,
bit for bit, those of the keys sliced out by the test (both backends); out-of-range blocks and a batch whose fields
do not have their shapes are refused before the kernel, which indexes them unchecked, runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import dpf, kernels
from secemb.fss.fused import RETRIEVAL_TAG, retrieve_and_prepare_buckets
from secemb.fss.keys import PathBlocks, PathKeys
from secemb.fss.linalg import LimbMatrix
from secemb.fss.tasks import Buckets, evaluate_task
from secemb.fss.tree import leaf_groups
from secemb.randomness import CtrDrbg


class _Handle:
    """A table handle as a backend passes one (``get()``)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def get(self) -> object:
        return self.value


def _sliced(path: PathKeys, count: int, lo: int, hi: int) -> PathKeys:
    """Keys ``lo..hi-1`` of each of ``count`` blocks, sliced one block at a time (not by ``blocks``)."""
    size = len(path) // count
    return PathKeys.concat([path[b * size + lo : b * size + hi] for b in range(count)])


def _walked(path: PathKeys | PathBlocks) -> np.ndarray:
    """Every leaf word of ``path``'s walk, in its rows' order."""
    return np.concatenate([np.empty((0, 2), np.uint64)]
                          + [leaves.reshape(-1, 2).copy() for _, _, leaves in leaf_groups(path)])


def _users_keys(users: int, buckets: int, m: int, seed: bytes) -> tuple[np.ndarray, PathKeys, PathKeys, object]:
    alphas = np.random.default_rng(len(seed)).integers(0, m, users * buckets)
    p0, p1, state = dpf.gen_path(alphas, m, _rng=CtrDrbg(seed))
    return alphas, p0, p1, state


@pytest.mark.parametrize(("count", "lo", "hi"), [(1, 0, 6), (5, 0, 6), (5, 2, 5), (5, 5, 6), (5, 3, 3), (30, 0, 1)])
@pytest.mark.parametrize("m", [2, 32, 300])
def test_the_corrections_of_a_range_are_those_of_its_keys(count: int, lo: int, hi: int, m: int) -> None:
    """``bgi_corrections(cw_seed, cw_tl, cw_tr, blocks, lo, out)``: row ``b G + j`` of ``out`` is key
    ``b S + lo + j``'s ``((lo | tCW_L, hi), (lo | tCW_R, hi))`` per level, composed here from its fields."""
    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    from secemb.fss._numba_kernels import bgi_corrections

    _, path, _, _ = _users_keys(5, 6, m, b"s27-corrections")
    size, n = len(path) // count, path.params.depth
    keys = [b * size + lo + j for b in range(count) for j in range(hi - lo)]
    got = np.full((len(keys), n, 2, 2), 7, np.uint64)
    bgi_corrections(path.cw_seed, path.cw_tl, path.cw_tr, count, lo, got)
    for r, key in enumerate(keys):
        for i in range(n):
            w0, w1 = int(path.cw_seed[key, i, 0]), int(path.cw_seed[key, i, 1])
            assert got[r, i].tolist() == [[w0 | int(path.cw_tl[key, i]), w1], [w0 | int(path.cw_tr[key, i]), w1]]


@pytest.mark.parametrize(("count", "lo", "hi"), [(4, 0, 7), (4, 2, 5), (4, 6, 7), (1, 3, 4), (28, 0, 1), (4, 3, 3)])
@pytest.mark.parametrize("m", [2, 32, 300, 70000])
def test_a_range_walked_in_place_is_the_walk_of_its_keys(backend: str, count: int, lo: int, hi: int, m: int) -> None:
    """The leaves of a :class:`PathBlocks` walk are those of the keys the test slices out, walked by the numpy
    reference; ``copy()`` and ``roots()`` are those keys' fields."""
    _, path, _, _ = _users_keys(4, 7, m, b"s27-walk-%d" % m)
    part = PathBlocks(path, count, lo, hi)
    want = _sliced(path, count, lo, hi)
    assert len(part) == len(want) and part.params == path.params and part.party == 0
    for f in ("roots", "cw_seed", "cw_tl", "cw_tr"):
        assert np.array_equal(getattr(part.copy(), f), getattr(want, f)), f
    assert np.array_equal(part.roots(), want.roots)
    got = _walked(part)
    kernels.BACKEND = "numpy"  # the fixture restores the backend
    assert np.array_equal(got, _walked(want))


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_the_bucket_retrieval_of_a_range_in_place_is_that_of_its_keys(backend: str, ring_bits: int) -> None:
    """``retrieve_and_prepare_buckets`` of buckets 2..5 of 6 users' keys of 7 buckets of 32, read in place, is
    bit for bit that of the keys sliced out (answers, control bits, folded part, payload sums); both parties'
    answers add up to the rows."""
    users, buckets, big_m, d, lo, hi = 6, 7, 32, 5, 2, 5
    dt = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
    gen = np.random.default_rng(ring_bits)
    alphas, p0, p1, state = _users_keys(users, buckets, big_m, b"s27-buckets")
    cw = dpf.convert_gen(state, np.ones((len(alphas), 1), dt), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    tables = gen.integers(0, 2**ring_bits, (hi - lo, big_m, d), dtype=dt)
    sizes = np.array([32, 17, 1])
    live = (np.arange(big_m)[None, :] < sizes[:, None])[:, :, None]
    tables *= live.astype(dt)
    cw_range = cw.reshape(users, buckets, 1)[:, lo:hi].reshape(-1, 1)
    shares = []
    for party, path in enumerate((p0, p1)):
        got = [retrieve_and_prepare_buckets(keys, party, cw_range, LimbMatrix(tables, ring_bits), 3, sizes=sizes,
                                            payload_sums=True)
               for keys in (PathBlocks(path, users, lo, hi), _sliced(path, users, lo, hi))]
        for a, b in zip(got[0][:3], got[1][:3], strict=True):
            assert np.array_equal(a, b)
        assert np.array_equal(got[0][3].key_conv, got[1][3].key_conv)
        assert np.array_equal(got[0][3].t_count, got[1][3].t_count)
        shares.append(got[0][0])
    picked = alphas.reshape(users, buckets)[:, lo:hi]
    rows = tables[np.tile(np.arange(hi - lo), users), picked.reshape(-1)]
    assert np.array_equal(shares[0] + shares[1], rows)


def test_the_task_of_a_batchs_range_is_the_task_of_its_copy(backend: str) -> None:
    """``evaluate_task`` with ``keys = (batch, users)`` returns what it returns for the range's keys copied
    (``DPFKeys.blocks``): answers, control bits and the (negated, party 1) folded part."""
    users, buckets, big_m, d = 5, 6, 32, 4
    gen = np.random.default_rng(5)
    alphas = gen.integers(0, big_m, users * buckets)
    k0, k1 = fss.gen(alphas, np.ones((users * buckets, 1), np.uint32), big_m, _rng=CtrDrbg(b"s27-task"))
    rows = gen.integers(0, 2**32, (40, d), dtype=np.uint32)
    index = gen.integers(-1, 40, (buckets, big_m))
    index[:, 20:] = -1
    handle = _Handle(Buckets(LimbMatrix(rows, 32), index))
    for party, keys in enumerate((k0, k1)):
        for lo, hi in ((0, 6), (1, 4), (5, 6)):
            a = evaluate_task(("cuckoo", party, (keys, users), handle, 2, (lo, hi), None))
            b = evaluate_task(("cuckoo", party, keys.blocks(users, lo, hi), handle, 2, (lo, hi), None))
            for x, y in zip(a[:3], b[:3], strict=True):
                assert np.array_equal(x, y)


@pytest.mark.parametrize(("count", "lo", "hi"), [(0, 0, 1), (-1, 0, 1), (5, 0, 1), (3, -1, 2), (3, 2, 1),
                                                 (3, 0, 9), (3, 10, 10), (True, 0, 1), (3.0, 0, 1), (3, 0.5, 1)])
def test_blocks_outside_the_batch_are_refused(count: object, lo: object, hi: object) -> None:
    """A count that does not divide the batch (or is not an int >= 1) and a range outside a block are refused
    with InvalidParameters when the blocks are named, before any walk reads them."""
    _, path, _, _ = _users_keys(3, 8, 32, b"s27-refuse")
    with pytest.raises(InvalidParameters):
        PathBlocks(path, count, lo, hi)  # type: ignore[arg-type]


def test_a_batch_whose_fields_are_not_its_keys_is_refused_before_the_walk(backend: str) -> None:
    """A hand-built batch with a correction word field one key short is refused by the walk (check_path)
    whatever range of it is named: the kernel would read past it."""
    _, path, _, _ = _users_keys(3, 8, 32, b"s27-short")
    short = PathKeys(path.params, path.party, path.roots, path.cw_seed, path.cw_tl, path.cw_tr[:-1])
    with pytest.raises(InvalidParameters, match="cw_tr"):
        next(iter(leaf_groups(PathBlocks(short, 3, 0, 8))))
    deep = PathKeys(path.params, path.party, path.roots, path.cw_seed[:, :-1], path.cw_tl, path.cw_tr)
    with pytest.raises(InvalidParameters, match="cw_seed"):
        next(iter(leaf_groups(PathBlocks(deep, 1, 0, 24))))
