"""Session 39 (helper P): the bound check's steps on a server's own inputs without their checks in Python.
:func:`secemb.fss.projections.project_own_affine` against :func:`project_affine` and against the vectors
formed and projected by numpy's matmul (:func:`project_reference`'s arithmetic), and the compiled
:func:`~secemb.fss._projection_kernels.affine_vector`'s refusal of parts whose shapes do not match, which
is what keeps the unchecked path from reading outside the arrays; :func:`secemb.fss.rangeproof.parse_taken`
(the proofs server 0 checked at intake) against :func:`~secemb.fss.rangeproof.parse`."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import rangeproof as R
from secemb.fss.projections import project_affine, project_own_affine, project_reference

BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])


def _parts(gen: np.random.Generator, n: int, dtype: type, slots: int = 7, width: int = 5,
           dense: int = 3) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    top = np.iinfo(dtype).max
    return [(gen.integers(0, top, (slots, width), dtype=dtype, endpoint=True), gen.integers(0, 9, slots),
             gen.integers(0, top, (slots, width), dtype=dtype, endpoint=True),
             gen.integers(0, top, dense, dtype=dtype, endpoint=True)) for _ in range(n)]


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("negate", [False, True])
def test_own_affine_is_project_affine_and_the_formed_vectors_projected(dtype: type, n: int, negate: bool) -> None:
    gen = np.random.default_rng([n, int(negate), np.dtype(dtype).itemsize])
    parts = _parts(gen, n, dtype)
    seeds = [bytes([d % 2]) * 16 for d in range(n)]  # two challenges, as several upload batches have
    got = project_own_affine(seeds, negate, parts, 40)
    assert got.dtype == dtype and got.shape == (n, 40)
    assert np.array_equal(got, project_affine(seeds, negate, parts, 40))
    for d, (base, count, words, tail) in enumerate(parts):  # x_d formed by numpy's wrapping arithmetic
        sparse = base + count.astype(dtype)[:, None] * words
        x = np.concatenate([((np.zeros_like(sparse) - sparse) if negate else sparse).ravel(), tail])[None]
        assert np.array_equal(got[d], project_reference(seeds[d], x, 40)[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", ["words", "count", "tail"])
def test_own_affine_refuses_a_part_that_does_not_make_the_first_ones_length(backend: str, bad: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A later part whose words or counts have fewer rows, or whose tail is longer, than the first part's
    length makes: the compiled kernel raises before it reads past them (the unchecked path's guard); numpy's
    path refuses it in :func:`project_affine`'s check."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(7)
    parts = _parts(gen, 3, np.uint32)
    base, count, words, tail = parts[2]
    parts[2] = {"words": (base, count, words[:-1], tail), "count": (base, count[:-1], words, tail),
                "tail": (base, count, words, np.concatenate([tail, tail]))}[bad]
    refusal = (ValueError, "affine_vector") if kernels.compiled() else (InvalidParameters, "part")
    with pytest.raises(refusal[0], match=refusal[1]):
        project_own_affine([bytes(16)] * 3, False, parts, 40)


def test_parse_taken_is_parse_of_checked_messages() -> None:
    """The shares of messages that :func:`~secemb.fss.rangeproof.well_formed` takes, element for element
    (keys, hints, witness and proof shares), as :func:`~secemb.fss.rangeproof.parse` gives them; a batch
    that does not join to whole messages is refused, not read past."""
    params = R.RangeParams(rows=6, bits=8, ring_bits=32)
    size, head = params.message_bytes(0), R.SEED_BYTES + R.PART_BYTES
    gen = np.random.default_rng(39)
    msgs = []
    for i in range(4):
        words = gen.integers(0, F.P - i, (size - head) // 8, dtype=np.uint64, endpoint=False)
        msgs.append(gen.bytes(head) + words.astype("<u8").tobytes())
    assert R.well_formed(params, msgs).all()
    want, got = R.parse(params, 0, msgs), R.parse_taken(params, msgs)
    assert got.party == 0
    for name in ("keys", "hints", "inputs", "proofs"):
        a, b = getattr(want, name), getattr(got, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert got.inputs.shape == (4, params.witness_length) and got.proofs.shape == (4, params.proof_length)
    with pytest.raises(ValueError):
        R.parse_taken(params, [*msgs[:3], msgs[3][:-8]])


def test_part_rows_are_the_parts_and_verify_as_them() -> None:
    """:func:`~secemb.fss.rangeproof.own_part_rows` and :func:`~secemb.fss.rangeproof.seed_part_rows` are
    the rows of :func:`~secemb.fss.rangeproof.own_parts` and :func:`~secemb.fss.rangeproof.seed_parts`
    (each part hashed by :func:`~secemb.fss.rangeproof.hint_of` / :func:`~secemb.fss.rangeproof.seed_part`
    alone); the verifier messages with the parts given as rows are those with the parts given as bytes, and
    rows of another shape or dtype are refused."""
    params = R.RangeParams(rows=6, bits=8, ring_bits=32)
    size, head = params.message_bytes(0), R.SEED_BYTES + R.PART_BYTES
    gen = np.random.default_rng(3939)
    msgs = [gen.bytes(head) + gen.integers(0, F.P, (size - head) // 8, dtype=np.uint64).astype("<u8").tobytes()
            for _ in range(3)]
    contexts = [b"ctx" + bytes([i]) * 20 for i in range(3)]
    shares = R.parse(params, 0, msgs)
    rows = R.own_part_rows(params, shares, contexts)
    assert rows.dtype == np.uint8 and rows.shape == (3, R.PART_BYTES)
    assert [r.tobytes() for r in rows] == R.own_parts(params, shares, contexts) == [
        R.hint_of(params, c, m) for c, m in zip(contexts, msgs, strict=True)]
    seeds = [gen.bytes(16) for _ in range(3)]
    assert [r.tobytes() for r in R.seed_part_rows(contexts, seeds)] == R.seed_parts(contexts, seeds) == [
        R.seed_part(c, s) for c, s in zip(contexts, seeds, strict=True)]
    assert R.own_part_rows(params, R.parse(params, 0, []), []).shape == (0, R.PART_BYTES)
    ring = gen.integers(0, 1 << 32, (3, params.rows), dtype=np.uint64)
    query = gen.bytes(16)
    by_bytes = R.verifier_messages(params, 0, shares, ring, contexts, query, parts=R.own_parts(params, shares,
                                                                                                 contexts))
    assert np.array_equal(R.verifier_messages(params, 0, shares, ring, contexts, query, parts=rows), by_bytes)
    assert np.array_equal(R.verifier_messages(params, 0, shares, ring, contexts, query), by_bytes)
    for bad in (rows[:2], rows.astype(np.int16), rows[:, :16]):
        with pytest.raises(InvalidParameters, match="parts"):
            R.prepare_verifier(params, 0, shares, contexts, query, parts=bad)


@pytest.mark.parametrize("case", ["no rows", "empty first part"])
def test_own_affine_checks_every_part_where_no_kernel_would_read_them(case: str) -> None:
    """Where no kernel runs -- no rows, or a first part of no length (S39-R1) -- nothing would refuse a later
    part of another length: the parts go to :func:`project_affine`, which checks them all (session 39, lead)."""
    parts = _parts(np.random.default_rng(11), 3, np.uint32)
    base, count, words, tail = parts[2]
    parts[2] = (base, count, words[:-1], tail)
    if case == "empty first part":
        parts[0] = (np.zeros((0, 5), np.uint32), np.zeros(0, np.int64), np.zeros((0, 5), np.uint32),
                    np.zeros(0, np.uint32))
    with pytest.raises(InvalidParameters, match="part"):
        project_own_affine([bytes(16)] * 3, False, parts, 0 if case == "no rows" else 40)
