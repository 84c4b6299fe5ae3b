"""Session 33 (helper F, issue 34): the range proof's verifier in one compiled call a batch.

* :func:`secemb.fss._rangeproof_kernels.verifier_batch` draws a block's coefficients from its joint
  randomness (the Keccak kernel's SHAKE-128) and forms the batch's query from its randomness
  (:func:`secemb.fss.rangeproof._draw`) in the call (:func:`~secemb.fss._rangeproof_kernels.query_core`),
  then runs :func:`~secemb.fss._rangeproof_kernels.verifier_core` under them; :func:`rangeproof._coefficients`
  and :func:`rangeproof._query` (numpy, Python ints in :func:`secemb.fss.field.lagrange_coefficients` on
  that backend) are its reference.  The query's columns must be the reference's, element for element,
  and so must both servers' messages, for every shape of the parameters (odd and even ``t``, one row,
  one digit) and batch size.
* :func:`rangeproof.decide`'s compiled path checks the field elements in its kernel
  (:func:`~secemb.fss._rangeproof_kernels.decide_core`): it must refuse exactly what the numpy path
  refuses, with the same error (the first bad array named), and give the same verdicts.
* The joint randomness of a block is one SHA-256 batch (:func:`rangeproof._joints`); its bytes are
  checked against the specification in ``test_s30_batched_parts.py`` (both SHA paths, contexts of one
  length and mixed); here, the batch against :func:`rangeproof._joint` of each device.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from range_batches import honest_batch

from secemb.errors import InvalidMessage
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import rangeproof as R

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

K = 32
SHAPES = [(40, 26), (40, 25), (3, 5), (1, 2), (7, 30), (2, 3)]


def _batch(params: R.RangeParams, n: int, gen: np.random.Generator) -> tuple:
    """n honest devices' parsed shares for both servers, their ring shares and contexts (of two
    lengths where n is odd and above 1, so both of the joint randomness' hashing paths run), with
    every third device's server-0 shares replaced by uniform field elements."""
    contexts = [b"device %02d" % d + (b"+" if n % 2 and d % 2 else b"") for d in range(n)]
    s0, s1, a, b = honest_batch(params, gen, contexts)
    noise = [d for d in range(n) if d % 3 == 2]
    s0.inputs[noise] = gen.integers(0, F.P, (len(noise), s0.inputs.shape[1]), dtype=np.uint64)
    s0.proofs[noise] = gen.integers(0, F.P, (len(noise), s0.proofs.shape[1]), dtype=np.uint64)
    return s0, s1, a, b, contexts, noise


@pytest.mark.parametrize(("rows", "bits"), SHAPES)
def test_the_compiled_query_is_the_numpy_query(rows: int, bits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """query_core of the draw (what verifier_batch calls) against _query on the numpy backend."""
    from secemb.fss._rangeproof_kernels import query_core

    params = R.RangeParams(rows, bits, K)
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    for seed in (bytes(16), os.urandom(16), os.urandom(40)):
        ref = R._query(params, seed)
        draw = R._draw(params, seed)
        f, place = R._places(params)
        lag, gadget = np.empty((2, params.calls + 2), np.uint64), np.empty((params.gadget_nodes, 2), np.uint64)
        pads, witness, ring = np.empty((2, params.chunk), np.uint64), np.empty(rows * place.size, np.uint64), \
            np.empty(rows, np.uint64)
        constant = query_core(draw.points, F.barycentric(params.calls + 2), F.barycentric(params.gadget_nodes),
                              params.half_calls, params.chunk, params.witness_length, draw.rho_words, place,
                              np.uint64(f), np.uint64(1 << (2 * params.digits - 1)), lag, gadget, pads, witness, ring)
        assert lag.tolist() == ref.wire_rows.tolist() and gadget.tolist() == ref.gadget_columns.tolist()
        assert pads.tolist() == ref.pads.tolist() and witness.tolist() == ref.witness_column[:, 0].tolist()
        assert ring.tolist() == ref.ring_column[:, 0].tolist() and int(constant) == int(ref.constant)
        assert int(draw.delta) == int(ref.delta)


@pytest.mark.parametrize(("rows", "bits"), SHAPES)
@pytest.mark.parametrize("n", [1, 3, 10])
def test_both_servers_messages_are_the_references(rows: int, bits: int, n: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """verifier_messages on the compiled kernels (verifier_batch) against the numpy reference,
    with and without the own parts given, ring shares as uint64 and uint32; the honest devices
    pass and the noisy ones fail."""
    params = R.RangeParams(rows, bits, K)
    s0, s1, a, b, contexts, noise = _batch(params, n, np.random.default_rng(rows * 100 + bits * 10 + n))
    query = os.urandom(16)
    parts = (R.own_parts(params, s0, contexts), R.own_parts(params, s1, contexts))
    runs = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        runs[name] = [R.verifier_messages(params, 0, s0, a, contexts, query),
                      R.verifier_messages(params, 1, s1, b, contexts, query),
                      R.verifier_messages(params, 0, s0, a, contexts, query, parts=parts[0]),
                      R.verifier_messages(params, 1, s1, b.astype(np.uint64), contexts, query, parts=parts[1])]
    for ref, fast in zip(runs["numpy"], runs["numba"], strict=True):
        assert fast.dtype == ref.dtype == np.uint64
        np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(runs["numba"][0], runs["numba"][2])
    np.testing.assert_array_equal(runs["numba"][1], runs["numba"][3])
    assert R.decide(params, *runs["numba"][:2]).tolist() == [d not in noise for d in range(n)]


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("n", [0, 1, 8, 21])
def test_the_joint_randomness_batch_is_each_devices_digest(sha_path: str, n: int, mixed: bool) -> None:
    contexts = [os.urandom(74 + (i % 2 if mixed else 0)) for i in range(n)]
    part0, part1 = (np.frombuffer(os.urandom(32 * n), np.uint8).reshape(n, 32) for _ in range(2))
    got = R._joints(contexts, part0, part1)
    assert got.shape == (n, 32) and got.dtype == np.uint8
    assert [g.tobytes() for g in got] == [R._joint(c, p.tobytes(), q.tobytes())
                                          for c, p, q in zip(contexts, part0, part1, strict=True)]


def _refusal(params: R.RangeParams, v0: np.ndarray, v1: np.ndarray) -> tuple[str, object]:
    try:
        return "ok", R.decide(params, v0, v1).tolist()
    except InvalidMessage as exc:
        return "refused", str(exc)


def test_decide_refuses_and_decides_alike_on_both_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Field elements of p or more (at the first and the last opened column, in either array or
    both), jr words of any value (they are compared, not added), a batch of another size: the
    compiled decide gives the numpy path's verdicts or its refusal, word for word."""
    params = R.RangeParams(5, 6, K)
    s0, s1, a, b, contexts, noise = _batch(params, 7, np.random.default_rng(7))
    query = os.urandom(16)
    v0 = R.verifier_messages(params, 0, s0, a, contexts, query)
    v1 = R.verifier_messages(params, 1, s1, b, contexts, query)
    opened = params.opened_length
    cases = [(v0, v1)]
    for col in (0, opened - 1):
        for value in (F.P - 1, F.P, 2**64 - 1):
            for which in ((0,), (1,), (0, 1)):
                pair = [v0.copy(), v1.copy()]
                for w in which:
                    pair[w][3, col] = value
                cases.append((pair[0], pair[1]))
    jr = v0.copy()
    jr[2, opened:] = 2**64 - 1  # another jr: that device fails, no refusal
    cases += [(jr, v1), (v0, v1[:5]), (v0[:0], v1[:0])]
    got = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        got[name] = [_refusal(params, x, y) for x, y in cases]
    assert got["numba"] == got["numpy"]
    assert got["numba"][0] == ("ok", [d not in noise for d in range(7)])
    assert got["numba"][-3] == ("ok", [d not in noise and d != 2 for d in range(7)])
    assert sum(kind == "refused" for kind, _ in got["numba"]) == 13  # 12 elements of p or more, the short batch
    assert got["numba"][4][1] == "v0: a field element is not below p"  # p at column 0 of v0 only
    assert got["numba"][5][1] == "v1: a field element is not below p"
    assert got["numba"][6][1] == got["numba"][4][1]  # in both: v0 named, as numpy names it


def test_parse_verifier_messages_reads_a_memoryview_as_its_bytes() -> None:
    """bound_rejected hands server 1's answer body over as the memoryview it opened, not a copy."""
    params = R.RangeParams(3, 5, K)
    data = np.random.default_rng(3).integers(0, F.P, (4, params.verifier_length), dtype=np.uint64)
    raw = data.astype("<u8").tobytes()
    framed = memoryview(b"head" + raw)[4:]
    got = R.parse_verifier_messages(params, framed, 4)
    np.testing.assert_array_equal(got, R.parse_verifier_messages(params, raw, 4))
    np.testing.assert_array_equal(got, data)
