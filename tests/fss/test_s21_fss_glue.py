"""Issue 37 (session 21): the data movement around the DPF kernels, compiled paths against the numpy
reference and against values computed another way (Python integers from per-leaf conversions).

* ``dpf.convert_gen``'s fused kernel (both conversions and the sign in one pass) gives the correction
  words ``(-1)^{t_1} (beta - Convert(s_0) + Convert(s_1))`` of SecEmb Algorithm 5, bit for bit as the
  numpy passes, for both rings, payload widths around the AES block and key counts across the
  kernel's steps; it writes over ``betas`` only where asked.
* ``retrieve_and_prepare_buckets(out=)`` writes answers, control bits and the folded part into
  strided blocks of a batch's arrays (the walk summing straight into the folded block where the
  bucket domain needs no padding), the same values as the returned arrays, the rest of the batch
  untouched, both backends and rings; the answers of the two parties reconstruct the table rows.
  The server's task (``tasks.evaluate_into_task``) places the same bytes as ``evaluate_task`` +
  ``place``.  Views of another shape or dtype, or read-only, are refused.
* After ``backends.warm_kernels`` a fresh process loads no further kernel signature for a round-size
  evaluation of either layout (numba's first-call cost is paid at warm-up, issue 37 goal 2; a product
  reading its operand strided would need one more).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from fss_strategies import random_ring

from secemb.errors import InvalidParameters
from secemb.fss import dpf, kernels
from secemb.fss.convert import convert
from secemb.fss.fused import RETRIEVAL_TAG, PayloadSums, retrieve_and_prepare_buckets
from secemb.fss.linalg import LimbMatrix
from secemb.fss.tasks import Buckets, evaluate_into_task, evaluate_task, place
from secemb.protocols.backends import SerialBackend
from secemb.randomness import CtrDrbg

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")


def _expected_words(state: dpf.GenState, betas: np.ndarray, ring_bits: int, tag: str) -> np.ndarray:
    """The correction words from each leaf's conversion, in Python integers."""
    modulus = 1 << ring_bits
    c0 = convert(state.leaf0, betas.shape[1], ring_bits, tag)
    c1 = convert(state.leaf1, betas.shape[1], ring_bits, tag)
    out = np.empty_like(betas)
    for i in range(betas.shape[0]):
        sign = -1 if int(state.leaf1[i, 0]) & 1 else 1
        for e in range(betas.shape[1]):
            out[i, e] = sign * (int(betas[i, e]) - int(c0[i, e]) + int(c1[i, e])) % modulus
    return out


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize(("keys", "width"), [(1, 1), (5, 3), (70, 4), (9, 65), (3, 130), (2100, 2), (600, 65)])
def test_convert_gen_fused_kernel_equals_reference(monkeypatch: pytest.MonkeyPatch, ring_bits: int, keys: int,
                                                   width: int) -> None:
    gen = np.random.default_rng(keys * 1000 + width + ring_bits)
    alphas = gen.integers(0, 300, keys)
    betas = random_ring(gen, (keys, width), ring_bits)
    _, _, state = dpf.gen_path(alphas, 300, _rng=CtrDrbg(b"s21-convert-gen"))
    got = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        given = betas.copy()
        got[backend] = dpf.convert_gen(state, given, ring_bits=ring_bits, tag="s21")
        assert np.array_equal(given, betas)  # not overwritten unless asked
        again = betas.copy()
        assert dpf.convert_gen(state, again, ring_bits=ring_bits, tag="s21", overwrite_betas=True) is again
        assert np.array_equal(again, got[backend])
    assert got["numba"].dtype == betas.dtype
    assert np.array_equal(got["numba"], got["numpy"])
    if keys * width <= 3000:
        assert np.array_equal(got["numba"], _expected_words(state, betas, ring_bits, "s21"))


def _bucket_case(ring_bits: int, big_m: int, users: int = 3, buckets: int = 4, seed: int = 0):
    """Every user's keys of ``buckets`` buckets of ``big_m`` positions (user-major), the
    buckets' tables (zero past each size) and sizes."""
    gen = np.random.default_rng([ring_bits, big_m, seed])
    sizes = gen.integers(1, big_m + 1, buckets)
    sizes[0] = big_m
    alphas = np.concatenate([gen.integers(0, sizes) for _ in range(users)])
    live = np.arange(big_m)[None, :] < sizes[:, None]
    tables = random_ring(gen, (buckets, big_m, 5), ring_bits) * live[:, :, None].astype(np.uint64).astype(
        np.uint32 if ring_bits == 32 else np.uint64)
    p0, p1, state = dpf.gen_path(alphas, big_m, _rng=CtrDrbg(b"s21-buckets"))
    cw_ret = dpf.convert_gen(state, np.ones((len(alphas), 1), tables.dtype), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    return (p0, p1), cw_ret, tables, sizes, alphas


def _batch(users: int, buckets: int, big_m: int, width: int, dtype: np.dtype, gen: np.random.Generator):
    """A batch's arrays of twice ``buckets`` buckets, random bytes, and the views of buckets 1..buckets."""
    arrays = [gen.integers(0, 255, shape, np.uint8).view(dt) if dt == np.uint8 else
              gen.integers(0, 2**32, shape, np.uint64).astype(dt)
              for shape, dt in (((users, 2 * buckets, 5), dtype), ((users, 2 * buckets, big_m), np.uint8),
                                ((2 * buckets, big_m, width), dtype))]
    views = (arrays[0][:, 1 : buckets + 1], arrays[1][:, 1 : buckets + 1], arrays[2][1 : buckets + 1])
    return arrays, views


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("big_m", [32, 37])  # the walk's padded domain is the bucket's (32) or wider (37 -> 64)
def test_bucket_walk_writes_into_batch_views(monkeypatch: pytest.MonkeyPatch, backend: str, ring_bits: int,
                                              big_m: int) -> None:
    if backend == "numba" and not kernels.available():
        pytest.skip("numba or AES-NI missing")
    monkeypatch.setattr(kernels, "BACKEND", backend)
    users, buckets, width = 3, 4, 6
    paths, cw_ret, tables, sizes, alphas = _bucket_case(ring_bits, big_m, users, buckets)
    gen = np.random.default_rng(7)
    answers = []
    for party, path in enumerate(paths):
        want = retrieve_and_prepare_buckets(path, party, cw_ret, tables, width, sizes=sizes)
        arrays, views = _batch(users, buckets, big_m, width, tables.dtype, gen)
        before = [a.copy() for a in arrays]
        got = retrieve_and_prepare_buckets(path, party, cw_ret, tables, width, sizes=sizes, out=views)
        assert all(g is v for g, v in zip(got, views, strict=True))
        assert np.array_equal(views[0], want[0].reshape(users, buckets, 5))
        assert np.array_equal(views[1], want[1].reshape(users, buckets, big_m))
        assert np.array_equal(views[2], want[2])
        for a, b in zip(arrays, before, strict=True):  # nothing outside the views changed
            rest = np.ones(a.shape, bool)
            inside = slice(1, buckets + 1)
            rest[(slice(None), inside) if a.shape[0] == users else inside] = False
            assert np.array_equal(a[rest], b[rest])
        answers.append(views[0].copy())
    rows = tables[np.tile(np.arange(buckets), users), alphas].reshape(users, buckets, 5)
    assert np.array_equal(answers[0] + answers[1], rows)


def test_bucket_walk_refuses_other_views() -> None:
    paths, cw_ret, tables, sizes, _ = _bucket_case(32, 32)
    good = (np.empty((3, 4, 5), np.uint32), np.empty((3, 4, 32), np.uint8), np.empty((4, 32, 6), np.uint32))
    ro = np.empty((3, 4, 32), np.uint8)
    ro.flags.writeable = False
    bad: tuple[np.ndarray, ...]
    for bad in ((good[0][:, :3], good[1], good[2]), (good[0], good[1].astype(np.int8), good[2]),
                (good[0], good[1], good[2].astype(np.uint64)), (good[0], ro, good[2]), good[:2]):
        with pytest.raises(InvalidParameters, match="out must be"):
            retrieve_and_prepare_buckets(paths[0], 0, cw_ret, tables, 6, sizes=sizes, out=bad)  # type: ignore[arg-type]
        # refused before anything is written: the payload sums' arrays keep their bytes too
        sums = PayloadSums(np.full((3, 4, 6), 7, np.uint32), np.full((3, 4), 7, np.int64))
        with pytest.raises(InvalidParameters, match="out must be"):
            retrieve_and_prepare_buckets(paths[0], 0, cw_ret, tables, 6, sizes=sizes, payload_sums=True,  # type: ignore[call-overload]
                                         payload_out=sums, out=bad)
        assert (sums.key_conv == 7).all() and (sums.t_count == 7).all()


@pytest.mark.parametrize("party", [0, 1])
def test_evaluate_into_task_places_what_evaluate_task_returns(party: int) -> None:
    users, buckets, big_m, width = 3, 4, 32, 6
    paths, cw_ret, tables, sizes, _ = _bucket_case(32, big_m, users, buckets, seed=party)
    # the table as the server publishes it: rows and a gather index (-1 pads a bucket)
    index = np.full((buckets, big_m), -1, np.int64)
    rows: list[np.ndarray] = []
    for i in range(buckets):
        index[i, : sizes[i]] = np.arange(len(rows), len(rows) + sizes[i])
        rows.extend(tables[i, : sizes[i]])
    handle = SerialBackend().publish(Buckets(LimbMatrix(np.array(rows), 32), index))
    keys = dpf.DPFKeys(paths[party], cw_ret, dpf.DPFParams(big_m, 1, 32))
    task = ("cuckoo", party, keys, handle, width, (0, buckets), None)
    gen = np.random.default_rng(party)
    placed, views = _batch(users, buckets, big_m, width, tables.dtype, gen)
    other, other_views = _batch(users, buckets, big_m, width, tables.dtype, np.random.default_rng(party))
    extra = (np.empty((users, buckets, 4), np.uint64), np.empty((users, buckets, 0), np.uint32),
             np.empty((users, 0), np.int64))
    evaluate_into_task((task, *views, *extra))
    place(evaluate_task(task), other_views[0], other_views[1], other_views[2], *extra)
    for a, b in zip(placed, other, strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(views[2], 0)  # the folded part was written (and negated by party 1 alike)


_SIGNATURES = """
import numpy as np
import secemb.fss._numba_kernels as k
from secemb.fss import dpf
from secemb.fss.fused import retrieve_and_prepare, retrieve_and_prepare_buckets
from secemb.fss.linalg import LimbMatrix
from secemb.protocols.backends import warm_kernels

warm_kernels()
counts = lambda: {n: len(d.signatures) for n, d in vars(k).items() if hasattr(d, "signatures")}
before = counts()
for dt, bits in ((np.uint32, 32), (np.uint64, 64)):
    for make, domain, shape, keys in ((retrieve_and_prepare_buckets, 20, (4, 20, 3), 12),
                                      (retrieve_and_prepare, 300, (300, 3), 3)):
        table = np.zeros(shape, dt)
        table.flags.writeable = False  # as published tables are
        p0, _, st = dpf.gen_path(np.arange(keys) * 7 % domain, domain)
        make(p0, 0, dpf.convert_gen(st, np.ones((keys, 1), dt), ring_bits=bits), LimbMatrix(table, bits), 2)
print({n: (before[n], c) for n, c in counts().items() if c != before[n]})
"""


def test_warm_kernels_load_every_signature_a_round_uses() -> None:
    proc = subprocess.run([sys.executable, "-c", _SIGNATURES], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "{}"
