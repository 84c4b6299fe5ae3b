"""The compiled verifier of the sketch check's proof (internal, numba): :func:`messages_core`, the
field part of :func:`secemb.fss.sketchproof.verifier_messages`, and :func:`decide_core`,
:func:`secemb.fss.sketchproof.decide`'s arithmetic.

The same linear maps and gadget as the numpy reference in :mod:`secemb.fss.sketchproof` (its
``_messages_reference`` and ``_decide_reference``), in ``F_p`` (``p = 2^61 - 1``): each sum of
products is taken as 128-bit products (:func:`secemb.fss._sketch_kernels.mac128`) summed
unreduced over at most 32 terms (32 products of factors below ``p`` stay below ``2^127``) and
reduced once (:func:`~secemb.fss._sketch_kernels.red128`); every value is canonical, so the same
field elements, bit for bit (``tests/fss/test_s29_sketchproof.py``).  Ported from session 28's
prototype (helper E, ``flp_kernel.py``).  Every index is unchecked: the caller checks the shapes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from secemb.fss import _kernel_cache  # noqa: F401 - first: the kernels' cache also covers _sketch_kernels' helpers
from secemb.fss._sketch_kernels import addp, mac128, red128

__all__ = ["messages_core", "decide_core"]

#: products one unreduced 128-bit sum takes (32 products below p^2 < 2^122 stay below 2^127)
_TERMS = 32
_P = np.uint64((1 << 61) - 1)


@njit(inline="always")
def _dot(a, b):  # noqa: ANN001, ANN202
    """``sum_t a[t] b[t] mod p`` over two 1-D arrays of field elements of ``a``'s length."""
    zero = np.uint64(0)
    acc, hi, lo = zero, zero, zero
    for t in range(a.shape[0]):
        hi, lo = mac128(hi, lo, a[t], b[t])  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
        if t % _TERMS == _TERMS - 1:
            acc = addp(acc, red128(hi, lo))
            hi, lo = zero, zero
    return addp(acc, red128(hi, lo))


@njit(inline="always")
def _mulp(a, b):  # noqa: ANN001, ANN202
    """``a b mod p`` for field elements."""
    zero = np.uint64(0)
    hi, lo = zero, zero
    hi, lo = mac128(hi, lo, a, b)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    return red128(hi, lo)


@njit(cache=True, nogil=True)
def messages_core(x, proofs, r, wire_rows, gadget_rows, chunk, out):  # noqa: ANN001, ANN201
    """``out[d]`` (``uint64 (n, 2L + 3)``, ``L = 3 chunk``) set to device ``d``'s verifier message
    share: ``z = sum_j r[d, j] g(j + 1)``, then per point ``q`` the ``L`` wires and ``g(rho_q)``.

    Shapes (``uint64`` field elements): ``x`` (n, K, 3) input shares, ``proofs`` (n, 2L + 2M + 3)
    proof shares (the wire seeds of node 0, those of node ``M + 1``, the gadget polynomial's
    values), ``r`` (n, M), ``wire_rows`` (n, 2, M + 2) and ``gadget_rows`` (n, 2, 2M + 3) the
    devices' Lagrange rows.  Wire ``j = 3i + w`` (key ``k = call chunk + i``, component ``w``) at
    point ``q`` is ``l_0 seed_0j + l_(M+1) seed_1j + sum_call l_(call+1) x[d, call chunk + i, w]``
    over the calls whose slot ``i`` holds a key (``k < K``; padding keys are zero)."""
    n = x.shape[0]
    big_l = 3 * chunk
    m = wire_rows.shape[2] - 2
    zero = np.uint64(0)
    for d in range(n):
        g = proofs[d, 2 * big_l :]
        out[d, 0] = _dot(r[d], g[1 : m + 1])
        for q in range(2):
            lw = wire_rows[d, q]
            base = 1 + q * (big_l + 1)
            for j in range(big_l):
                i, w = j // 3, j % 3
                keys = x[d, i::chunk, w]  # the calls' values of slot i, component w (fewer than M where padded)
                hi, lo = zero, zero
                for node, seed in ((0, j), (m + 1, big_l + j)):  # the seeds' terms
                    hi, lo = mac128(hi, lo, lw[node], proofs[d, seed])  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
                out[d, base + j] = addp(red128(hi, lo), _dot(keys, lw[1 : m + 1]))
            out[d, base + big_l] = _dot(gadget_rows[d, q], g)


@njit(cache=True, nogil=True)
def decide_core(v0, v1, s, chunk, ok):  # noqa: ANN001, ANN201
    """``ok[d]`` (``bool (n,)``) set to whether device ``d``'s messages ``v0[d] + v1[d]``
    (``uint64 (n, 2L + 3)`` field elements) have ``z = 0`` and ``G_s(wires) = g`` at both points,
    ``G_s(y) = sum_i s[d, i] (y_3i^2 - y_3i+1 y_3i+2)`` (``s`` ``(n, chunk)``)."""
    big_l = 3 * chunk
    for d in range(v0.shape[0]):
        good = addp(v0[d, 0], v1[d, 0]) == 0
        for q in range(2):
            base = 1 + q * (big_l + 1)
            gad = np.uint64(0)
            for i in range(chunk):
                a = addp(v0[d, base + 3 * i], v1[d, base + 3 * i])
                b = addp(v0[d, base + 3 * i + 1], v1[d, base + 3 * i + 1])
                c = addp(v0[d, base + 3 * i + 2], v1[d, base + 3 * i + 2])
                bc = _mulp(b, c)
                gad = addp(gad, _mulp(s[d, i], addp(_mulp(a, a), _P - bc if bc else bc)))
            good &= gad == addp(v0[d, base + big_l], v1[d, base + big_l])
        ok[d] = good
