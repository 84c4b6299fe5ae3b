"""One device's honest input to the range proof, for the verifier tests (tests/fss/test_s26_verifier_devices.py,
test_s33_verifier_batch.py, test_s35_prepared_verifier.py)."""

from __future__ import annotations

import numpy as np

from secemb.fss import rangeproof as R


def honest_device(params: R.RangeParams, gen: np.random.Generator, context: bytes) -> tuple:
    """``(a, b, (m0, m1))``: ring shares uint64 (rows,) of values drawn within the bound (``a``
    uniform, ``b = values - a mod 2^ring_bits``) and the device's two proof messages under ``context``."""
    half, ring = 2 ** (params.bits - 1), 2**params.ring_bits
    values = gen.integers(-half, half, params.rows)
    a = gen.integers(0, ring, params.rows).astype(np.uint64)
    b = ((values.astype(np.int64) - a.astype(np.int64)) % ring).astype(np.uint64)
    return a, b, R.prove(params, a, b, context)


def honest_batch(params: R.RangeParams, gen: np.random.Generator, contexts: list[bytes]) -> tuple:
    """``(s0, s1, a, b)``: one :func:`honest_device` a context, in order, its proofs parsed by both servers
    (:func:`secemb.fss.rangeproof.parse`) and the ring shares stacked, uint64 (n, rows) and uint32 (n, rows)."""
    devices = [honest_device(params, gen, c) for c in contexts]
    s0 = R.parse(params, 0, [m0 for _, _, (m0, _) in devices])
    s1 = R.parse(params, 1, [m1 for _, _, (_, m1) in devices])
    return s0, s1, np.array([a for a, _, _ in devices]), np.array([b for _, b, _ in devices]).astype(np.uint32)
