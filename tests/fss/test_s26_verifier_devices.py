"""Session 26 (issue 34): the range proof's compiled verifier
(:func:`secemb.fss._rangeproof_kernels.verifier_core`) runs its devices as the innermost loop
(one vector for several devices) instead of one pass a device.  For batch sizes around the
vector width and past the verifier's block (:data:`secemb.fss.rangeproof._VERIFIER_BLOCK`), with
honest proofs, a false one and shares that are no proof at all interleaved, both servers'
messages must be the numpy reference's field elements (:func:`secemb.fss.rangeproof._verify_reference`,
matrix products), and :func:`~secemb.fss.rangeproof.decide` must name exactly the bad devices.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from range_batches import honest_device

from secemb.fss import kernels
from secemb.fss import rangeproof as R

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

K = 32
P = 2**61 - 1


def _batch(params: R.RangeParams, n: int, gen: np.random.Generator) -> tuple:
    """n devices' parsed shares for both servers, their ring shares and contexts, and which are bad:
    every third device's server-0 shares replaced by uniform field elements, every fifth device
    proving a value one past the bound (a false statement, its shares made by hand)."""
    half = 2 ** (params.bits - 1)
    a_rows, b_rows, msgs, contexts, bad = [], [], [], [], []
    for d in range(n):
        contexts.append(b"device %d" % d)
        a, b, proof = honest_device(params, gen, contexts[-1])
        msgs.append(proof)
        if d % 5 == 4:  # the ring shares say one row is out of range: the proof no longer matches them
            b = b.copy()
            b[0] = (int(b[0]) + half) % 2**K
        a_rows.append(a)
        b_rows.append(b)
        bad.append(d % 5 == 4 or d % 3 == 2)
    s0 = R.parse(params, 0, [m0 for m0, _ in msgs])
    s1 = R.parse(params, 1, [m1 for _, m1 in msgs])
    noise = [d for d in range(n) if d % 3 == 2]
    s0.inputs[noise] = gen.integers(0, P, (len(noise), s0.inputs.shape[1]), dtype=np.uint64)
    s0.proofs[noise] = gen.integers(0, P, (len(noise), s0.proofs.shape[1]), dtype=np.uint64)
    return s0, s1, np.array(a_rows), np.array(b_rows), contexts, bad


@pytest.mark.parametrize("n", [1, 4, 5, 9, 21, 70])
def test_compiled_verifier_matches_the_reference_across_devices(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    params = R.RangeParams(rows=40, bits=26, ring_bits=K)
    s0, s1, a, b, contexts, bad = _batch(params, n, np.random.default_rng(n))
    query = os.urandom(16)
    runs = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        runs[name] = (R.verifier_messages(params, 0, s0, a, contexts, query),
                      R.verifier_messages(params, 1, s1, b, contexts, query))
    for ref, fast in zip(runs["numpy"], runs["numba"], strict=True):
        np.testing.assert_array_equal(fast, ref)
    assert R.decide(params, *runs["numba"]).tolist() == [not x for x in bad]
