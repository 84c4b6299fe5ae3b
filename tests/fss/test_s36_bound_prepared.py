"""Session 36 (issue 34, helper B3): :class:`secemb.fss.rangeproof.PreparedVerifier` keeps each block's
arguments of the compiled verifier and the messages' template (the joint randomness' words) from
:func:`~secemb.fss.rangeproof.prepare_verifier`, so that :meth:`~secemb.fss.rangeproof.PreparedVerifier.messages`
is one compiled call a block.  Its words are numpy's (the reference, :func:`secemb.fss.rangeproof._verify_reference`)
across blocks and ring dtypes, a second call does not see the first one's words, and the ring check still
refuses a value past ``2^k`` wherever the dtype can hold one (it reads no value where it cannot).
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

pytestmark = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels are not installed")


def _messages(backend: str, params: R.RangeParams, party: int, shares: R.ProofShares, ring: np.ndarray,
              contexts: list[bytes], query: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray]:
    """Two :meth:`messages` calls of one prepared verifier on ``backend`` (the second on a copy of ``ring``)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    prepared = R.prepare_verifier(params, party, shares, contexts, query)
    assert (prepared.blocks is None) == (backend == "numpy")
    return prepared.messages(ring), prepared.messages(ring.copy())


@pytest.mark.parametrize(("n", "block"), [(7, 3), (6, 64), (2, 1)])
def test_compiled_blocks_give_numpys_words(n: int, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "_VERIFIER_BLOCK", block)
    params = R.RangeParams(6, 10, 32)
    gen = np.random.default_rng(36)
    contexts = [b"device %02d" % d for d in range(n)]
    s0, s1, a, b = honest_batch(params, gen, contexts)
    s0.inputs[n - 1] = gen.integers(0, F.P, s0.inputs.shape[1], dtype=np.uint64)  # the last device fails
    query = os.urandom(16)
    got = {}
    for backend in ("numpy", "numba"):
        # server 1's ring shares as uint32 (what its projections give), server 0's as uint64
        got[backend] = (_messages(backend, params, 0, s0, a, contexts, query, monkeypatch),
                        _messages(backend, params, 1, s1, b, contexts, query, monkeypatch))
    for (first0, again0), (first1, again1) in got.values():
        assert np.array_equal(first0, again0) and np.array_equal(first1, again1)
        assert first0 is not again0
    (v0, _), (v1, _) = got["numpy"]
    assert np.array_equal(got["numba"][0][0], v0) and np.array_equal(got["numba"][1][0], v1)
    assert np.array_equal(v1, R.verifier_messages(params, 1, s1, b.astype(np.uint64), contexts, query))
    assert R.decide(params, v0, v1).tolist() == [d != n - 1 for d in range(n)]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_ring_check_where_the_dtype_holds_more_than_the_ring(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(7)
    contexts = [b"a", b"b"]
    params = R.RangeParams(6, 10, 16)  # a 16-bit ring: uint32 and int32 shares can hold 2^16
    s0, _, a, _ = honest_batch(params, gen, contexts)
    prepared = R.prepare_verifier(params, 0, s0, contexts, os.urandom(16))
    for dtype in (np.uint32, np.int32, np.uint64, np.int64):
        ring = a.astype(dtype)
        assert np.array_equal(prepared.messages(ring), prepared.messages(a))
        ring[1, 3] = 1 << 16
        with pytest.raises(InvalidParameters, match="ring elements"):
            prepared.messages(ring)
    with pytest.raises(InvalidParameters, match="ring elements"):
        prepared.messages(-a.astype(np.int32) - 1)
    full = R.RangeParams(6, 10, 32)  # uint32 on the 32-bit ring: every value is an element, none read
    s0, _, a, _ = honest_batch(full, gen, contexts)
    prepared = R.prepare_verifier(full, 0, s0, contexts, os.urandom(16))
    assert np.array_equal(prepared.messages(a.astype(np.uint32)), prepared.messages(a))
    big = a.copy()
    big[0, 0] = 1 << 32
    with pytest.raises(InvalidParameters, match="ring elements"):
        prepared.messages(big)
