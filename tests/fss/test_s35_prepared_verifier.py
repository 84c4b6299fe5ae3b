"""Session 35 (issue 34, helper B): :func:`secemb.fss.rangeproof.prepare_verifier` -- the verifier's
checks, query and joint randomness before the ring shares -- gives :func:`~secemb.fss.rangeproof.verifier_messages`'
words on both kernel backends, with and without the server's own parts, across the verifier's blocks,
and refuses what it refuses, in the same order (the shares before the ring shares before the contexts).
The honest devices' messages pass :func:`~secemb.fss.rangeproof.decide` and the tampered ones fail.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from range_batches import honest_batch

from secemb.errors import InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import rangeproof as R

BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])
K = 32


def _batch(params: R.RangeParams, n: int) -> tuple:
    """n devices' proofs parsed by both servers, their ring shares and contexts; device 1's server-0
    witness shares replaced (it must fail)."""
    gen = np.random.default_rng(35)
    contexts = [b"device %02d" % d for d in range(n)]
    s0, s1, a, b = honest_batch(params, gen, contexts)
    if n > 1:
        s0.inputs[1] = gen.integers(0, F.P, s0.inputs.shape[1], dtype=np.uint64)
    return s0, s1, a, b, contexts


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("n", "block"), [(1, 64), (5, 64), (7, 3), (0, 64)])
def test_prepared_messages_are_verifier_messages(backend: str, n: int, block: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    monkeypatch.setattr(R, "_VERIFIER_BLOCK", block)
    params = R.RangeParams(6, 10, K)
    s0, s1, a, b, contexts = _batch(params, max(n, 1))
    s0, s1, a, b, contexts = s0.rows(0, n), s1.rows(0, n), a[:n], b[:n], contexts[:n]
    query = os.urandom(16)
    hints = R.own_parts(params, s0, contexts)
    v0 = R.verifier_messages(params, 0, s0, a, contexts, query, parts=hints)
    v1 = R.verifier_messages(params, 1, s1, b, contexts, query)
    prepared0 = R.prepare_verifier(params, 0, s0, contexts, query)  # its own parts hashed here
    prepared1 = R.prepare_verifier(params, 1, s1, contexts, query, parts=R.seed_parts(contexts, [bytes(k) for k in
                                                                                           s1.keys]))
    got0, again0 = prepared0.messages(a), prepared0.messages(a)
    assert np.array_equal(got0, v0) and np.array_equal(again0, v0) and got0 is not again0
    assert np.array_equal(prepared1.messages(b), v1)
    assert R.decide(params, v0, v1).tolist() == [d != 1 for d in range(n)]


def test_prepared_refusals_and_their_order() -> None:
    params = R.RangeParams(6, 10, K)
    s0, _, a, _, contexts = _batch(params, 3)
    query = os.urandom(16)
    prepared = R.prepare_verifier(params, 0, s0, contexts, query)
    for ring, match in ((a[:2], "integer array"), (a.astype(np.float64), "integer array"),
                        (a + np.uint64(2**K), "ring elements")):
        with pytest.raises(InvalidParameters, match=match):
            prepared.messages(ring)
        with pytest.raises(InvalidParameters, match=match):
            R.verifier_messages(params, 0, s0, ring, contexts, query)
    with pytest.raises(InvalidParameters, match="contexts"):
        R.prepare_verifier(params, 0, s0, contexts[:2], query)
    with pytest.raises(InvalidParameters, match="integer array"):  # the ring shares before the contexts
        R.verifier_messages(params, 0, s0, a[:2], contexts[:2], query)
    with pytest.raises(InvalidParameters, match="not server 1"):  # the shares before the ring shares
        R.verifier_messages(params, 1, s0, a[:2], contexts, query)
    with pytest.raises(InvalidParameters, match="query_seed"):
        R.prepare_verifier(params, 0, s0, contexts, b"short")
    with pytest.raises(InvalidParameters, match="parts"):
        R.prepare_verifier(params, 0, s0, contexts, query, parts=[b"x" * 32] * 2)
