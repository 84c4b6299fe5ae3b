"""The wrappers normalized in session 37 hand their kernel one numba type a ring, whatever layout the caller's
arrays come in (C or strided, writeable or read-only), and the elements are the caller's.

numba compiles a kernel once for each mix of argument types (dtype, layout, writability), 1-12 s of CPU each on a
fresh install: the fresh-clone CI's compile recorder (session 37) found tests compiling extra signatures of
``convert_accumulate`` (a batch's (U, G, w) view, 2 x 12 s), ``verifier_batch`` (strided shares, 12 s),
``convert_eval``, ``ring_matmul``, ``expand_top``, ``bgi_corrections``, ``_ctr_rows``, ``verify_core``, ``decide_core``
and the sketch loop (read-only vs writeable inputs, strided copies).  Each test below spies on the kernel the wrapper calls (the spy records
``numba.typeof`` of the arguments and calls the kernel), calls the wrapper with every layout, and asserts one
argument type for all of them, no signature added to the dispatcher after the first call, and the same results."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from secemb import fss
from secemb.fss import kernels

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")


@pytest.fixture(autouse=True)
def _compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", "numba")


def _variants(a: np.ndarray) -> list[np.ndarray]:
    """``a``'s elements as C writeable, C read-only, a strided view (every other column of a wider array) and
    Fortran order (2-D and up)."""
    frozen = a.copy()
    frozen.flags.writeable = False
    wide = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
    wide[..., ::2] = a
    out = [a.copy(), frozen, wide[..., ::2]]
    return out + ([np.asfortranarray(a)] if a.ndim > 1 else [])


@contextmanager
def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> Iterator[list[str]]:
    """Replace ``module.name`` (a numba dispatcher) by a spy that records the numba type of the arguments of
    each call and calls the kernel; on leaving, no signature may have been added to the dispatcher after the
    spy's first call (the layouts of the later calls compiled nothing)."""
    kernel, types, after_first = getattr(module, name), [], []

    def spy(*args: Any) -> Any:
        types.append(str(tuple(numba.typeof(a) for a in args)))
        got = kernel(*args)
        if not after_first:
            after_first.append(len(kernel.signatures))
        return got

    monkeypatch.setattr(module, name, spy)
    yield types
    assert after_first and len(kernel.signatures) == after_first[0], kernel.signatures


def _one_type(types: list[str], calls: int) -> None:
    assert len(types) >= calls and len(set(types)) == 1, set(types)


def test_convert_accumulate_takes_a_batch_view_in_one_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """key_acc (U, G, w) and key_t (U, G) as a batch's bucket range ([:, 2:6] of (U, 7, ...)), C-contiguous,
    read-only counts refused as before; the sums those of numpy's path."""
    from secemb.fss import _numba_kernels
    from secemb.fss.convert import convert_accumulate

    gen = np.random.default_rng(37)
    words = gen.integers(0, 1 << 63, (3 * 4 * 8, 2), np.uint64)
    live = np.ones(8, bool)
    results = []
    with _spy(monkeypatch, _numba_kernels, "convert_accumulate") as types:
        for view in (False, True):
            acc = np.zeros((8, 3), np.uint32)
            key_acc, key_t = np.full((3, 7, 3), 9, np.uint32), np.full((3, 7), -5, np.int64)
            ka, kt = (key_acc[:, 2:6], key_t[:, 2:6]) if view else (key_acc[:, 2:6].copy(), key_t[:, 2:6].copy())
            convert_accumulate(words, "t", acc, 0, live, key_acc=ka, period=8, key_t=kt, fresh=True)
            results.append((acc, ka.copy(), kt.copy()))
            if view:  # the rest of the batch untouched
                assert (key_acc[:, :2] == 9).all() and (key_acc[:, 6:] == 9).all() and (key_t[:, :2] == -5).all()
    _one_type(types, 2)
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    acc, ka, kt = np.zeros((8, 3), np.uint32), np.zeros((3, 4, 3), np.uint32), np.zeros((3, 4), np.int64)
    convert_accumulate(words, "t", acc, 0, live, key_acc=ka, period=8, key_t=kt, fresh=True)
    for got in results:
        assert all(np.array_equal(g, w) for g, w in zip(got, (acc, ka, kt), strict=True))


def test_convert_eval_reads_words_and_cw_in_one_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    from secemb.fss import _numba_kernels
    from secemb.fss.convert import convert_eval_into

    gen = np.random.default_rng(37)
    words = gen.integers(0, 1 << 63, (12, 2), np.uint64)
    cw = gen.integers(0, 1 << 32, (3, 2)).astype(np.uint32)
    outs = []
    with _spy(monkeypatch, _numba_kernels, "convert_eval") as types:
        for w, c in zip(_variants(words)[:3], _variants(cw)[:3], strict=True):
            out = np.empty((12, 2), np.uint32)
            convert_eval_into(w, c, 0, 4, 1, "t", out)
            outs.append(out)
    _one_type(types, 3)
    assert all(np.array_equal(o, outs[0]) for o in outs)


def test_ring_matmul_reads_published_and_gathered_rows_in_one_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A right operand read-only (a published table) or writeable (a gathered one, a server's own), as an
    array or a :class:`~secemb.fss.linalg.LimbMatrix`: one type for the rows the kernel reads."""
    from secemb.fss import _numba_kernels
    from secemb.fss.linalg import LimbMatrix, ring_matmul

    gen = np.random.default_rng(37)
    a = gen.integers(0, 1 << 32, (2, 3, 5)).astype(np.uint32)
    b = gen.integers(0, 1 << 32, (2, 5, 4)).astype(np.uint32)
    want = np.einsum("gkm,gmd->gkd", a.astype(object), b.astype(object)) % (1 << 32)
    with _spy(monkeypatch, _numba_kernels, "ring_matmul") as types:
        for right in _variants(b)[:3]:
            for operand in (right, LimbMatrix(right, 32)):
                assert np.array_equal(ring_matmul(a, operand, 32).astype(object), want)
        gathered = LimbMatrix(b.reshape(10, 4), 32).gather(np.arange(10).reshape(2, 5))
        assert np.array_equal(ring_matmul(a, gathered, 32).astype(object), want)
    _one_type(types, 7)


def test_walk_reads_roots_and_corrections_in_one_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled walk's top (``expand_top``) and the BGI corrections (``bgi_corrections``) of keys whose
    fields are read-only (parsed from bytes) or strided: the same leaves."""
    import dataclasses

    from secemb.fss import _numba_kernels
    from secemb.fss.tree import leaf_groups

    p0, _, _ = fss.gen_path(np.array([1, 5, 9]), 300)
    fields = ("roots", "cw_seed", "cw_tl", "cw_tr")
    variants = [dataclasses.replace(p0, **{f: _variants(getattr(p0, f))[i] for f in fields}) for i in range(3)]
    leaves = []
    with _spy(monkeypatch, _numba_kernels, "expand_top") as top, \
            _spy(monkeypatch, _numba_kernels, "bgi_corrections") as corrections:
        for path in variants:
            leaves.append([x.copy() for _, _, x in leaf_groups(path)])
    _one_type(top, 3)
    _one_type(corrections, 3)
    assert all(len(got) == len(leaves[0]) and all(np.array_equal(g, w) for g, w in zip(got, leaves[0], strict=True))
               for got in leaves)


def test_ctr_streams_read_keys_in_one_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    from secemb.fss import _rangeproof_kernels as rk

    keys = np.frombuffer(os.urandom(3 * 32), np.uint8).reshape(3, 32).copy()
    outs = []
    with _spy(monkeypatch, rk, "_ctr_rows") as types:
        for k in (keys, _variants(keys)[1]):
            out = np.zeros(2 * 64 + 16 * rk.CTR_BLOCKS, np.uint8)  # a row's last pass runs past its 50 bytes
            rk.ctr_streams(k, out, 64, 50)
            outs.append(out[: 3 * 64].reshape(3, 64)[:, :50])
    _one_type(types, 2)
    assert np.array_equal(outs[0], outs[1]) and outs[0].any()


def test_sketch_check_reads_its_inputs_in_one_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """:meth:`SketchCheck.add` with the expansion's coefficients read-only (in-process) or writeable (a worker's
    shared memory) and leaves read-only or not: one type for the sketch loop (IFMA or scalar), the same sums."""
    import dataclasses

    from secemb.fss import _sketch_kernels
    from secemb.fss.sketch import SketchCheck, expand

    gen = np.random.default_rng(37)
    ex = expand([os.urandom(16), os.urandom(16)], 16)
    leaves = gen.integers(0, 1 << 63, (4, 16, 2), np.uint64)
    sums = []
    with _spy(monkeypatch, _sketch_kernels, "sketch_accumulate") as types:
        for i in range(2):
            r, r2 = (_variants(ex.r)[i], _variants(ex.r2)[i])
            check = SketchCheck(dataclasses.replace(ex, r=r, r2=r2), 2)
            check.add(0, 4, _variants(leaves)[1 - i])
            sums.append(check.values)
    _one_type(types, 2)
    assert np.array_equal(sums[0], sums[1]) and sums[0].any()


def test_verifier_blocks_take_strided_shares_in_one_layout() -> None:
    """The range proof verifier's blocks (:func:`secemb.fss.rangeproof._blocks`) of shares that are strided
    views (a parse's) or C arrays, read-only or not: one numba type of the kernel's arguments, the same
    elements."""
    import dataclasses

    from secemb.fss import rangeproof as R

    params = R.RangeParams(rows=2, bits=2, ring_bits=8)
    proofs = [R.prove(params, np.array([1, 2], np.uint64), np.array([0, 254], np.uint64), b"c%d" % i)
              for i in range(3)]
    shares = R.parse(params, 0, [m0 for m0, _ in proofs])
    query = R._draw(params, b"q" * 32)
    joints = np.zeros((3, 32), np.uint8)
    got = []
    for i in range(3):
        variant = dataclasses.replace(shares, inputs=_variants(np.ascontiguousarray(shares.inputs))[i],
                                      proofs=_variants(np.ascontiguousarray(shares.proofs))[i])
        blocks = R._blocks(params, 0, variant, query, joints)
        assert blocks is not None
        got.append([args for _, _, args in blocks])
    types = {str(tuple(numba.typeof(a) for a in args)) for blocks in got for args in blocks}
    assert len(types) == 1, types
    for blocks in got:
        for args, first in zip(blocks, got[0], strict=True):
            assert np.array_equal(args[-2], first[-2]) and np.array_equal(args[-1], first[-1])




def test_sketch_decide_reads_the_slots_coefficients_in_one_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sketch proof's decision with the slots' coefficients ``s`` (n, c) strided (a column range of the
    drawn coefficients) or C-contiguous and the other server's messages read-only (off the wire) or not: one
    type for ``decide_core``, the same verdicts."""
    from secemb.fss import _sketchproof_kernels
    from secemb.fss import sketchproof as S

    gen = np.random.default_rng(37)
    params = S.SketchParams(4)
    v0, v1 = (gen.integers(0, (1 << 61) - 1, (3, params.verifier_length), np.uint64) for _ in range(2))
    v1[0] = (np.uint64((1 << 61) - 1) - v0[0]) % np.uint64((1 << 61) - 1)  # device 0's z opens to 0
    s = gen.integers(0, (1 << 61) - 1, (3, params.chunk), np.uint64)
    verdicts = []
    with _spy(monkeypatch, _sketchproof_kernels, "decide_core") as types:
        for coefficients, other in zip(_variants(s)[:3], _variants(v1)[:3], strict=True):
            verdicts.append(S._decide(params, v0, other, coefficients))
    _one_type(types, 3)
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    assert all(np.array_equal(v, S._decide(params, v0, v1, s)) for v in verdicts)


def test_the_walk_copies_a_writeable_batch_view_once_and_refuses_a_read_only_one() -> None:
    """``retrieve_and_prepare_buckets`` walks a caller's strided payload views (a bucket range of a batch's
    arrays) in C-contiguous copies written back once; read-only views are passed on as they are and refused
    (InvalidParameters, S36-R2), the batch unchanged, not written back into (a numpy ValueError)."""
    from secemb.errors import InvalidParameters
    from secemb.fss.fused import RETRIEVAL_TAG, PayloadSums, retrieve_and_prepare_buckets

    sizes, big_m, width = np.array([20, 13, 1, 7]), 20, 3
    alphas = np.array([0, 5, 0, 3, 19, 12, 0, 6])
    p0, _, state = fss.gen_path(alphas, big_m)
    cw = fss.convert_gen(state, np.ones((len(alphas), 1), np.uint32), ring_bits=32, tag=RETRIEVAL_TAG)
    tables = np.zeros((4, big_m, 2), np.uint32)
    key_conv, t_count = np.full((2, 7, width), 9, np.uint32), np.full((2, 7), -5, np.int64)
    *_, sums = retrieve_and_prepare_buckets(p0, 0, cw, tables, width, sizes=sizes, payload_sums=True,
                                            payload_out=PayloadSums(key_conv[:, 2:6], t_count[:, 2:6]))
    plain = retrieve_and_prepare_buckets(p0, 0, cw, tables, width, sizes=sizes, payload_sums=True)[-1]
    assert np.array_equal(key_conv[:, 2:6].reshape(8, width), plain.key_conv)
    assert np.array_equal(t_count[:, 2:6].reshape(8), plain.t_count)
    assert (key_conv[:, :2] == 9).all() and (key_conv[:, 6:] == 9).all() and (t_count[:, 6:] == -5).all()
    frozen = np.full((2, 7, width), 9, np.uint32)
    frozen.flags.writeable = False
    with pytest.raises(InvalidParameters):
        retrieve_and_prepare_buckets(p0, 0, cw, tables, width, sizes=sizes, payload_sums=True,
                                     payload_out=PayloadSums(frozen[:, 2:6], t_count[:, 2:6].copy()))
    assert (frozen == 9).all()
