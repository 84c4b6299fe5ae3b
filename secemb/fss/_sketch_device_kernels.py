"""The sketch seeds' field glue, compiled (internal, numba): :func:`device_core`, the field part of
:func:`secemb.fss.sketch.device_inputs`, and :func:`coefficients_core`, that of
:func:`secemb.fss.sketch.expand`, with the compiled kernels.

The callers draw the bytes (SHAKE-128 of the seed, the coefficients' AES-256-CTR blocks, the
keyed MMO blocks of the leaves, through OpenSSL or the AES-NI stream); these loops read them as
128-bit little-endian integers (two words, low first), reduce each mod ``p = 2^61 - 1``
(:func:`secemb.fss._sketch_kernels.red128`: the same canonical value as
:func:`secemb.fss.field.from_uniform_bytes`) and multiply, each product 128 bits
(:func:`~secemb.fss._sketch_kernels.mac128`) reduced at once.  The device reduces only the ``K``
coefficients at its points, drawn by random access, not the ``mp`` of the whole domain.  Both
equal the numpy reference in :mod:`secemb.fss.sketch` bit for bit
(``tests/fss/test_s29_sketch_device.py``).  Glue, not DPF kernels: ``bench overhead``'s kernel
clock times neither.  Every index is unchecked: the caller checks the shapes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from secemb.fss import _kernel_cache  # noqa: F401 - first: the kernels' cache also covers _sketch_kernels' helpers
from secemb.fss._sketch_kernels import mac128, red128

__all__ = ["device_core", "coefficients_core"]


@njit(cache=True, nogil=True)
def device_core(r_words, hashed, out):  # noqa: ANN001, ANN201
    """``out[k] = (r z, r^2 z, z) mod p`` for ``K`` keys.

    ``r_words`` uint64 (K, 2): key ``k``'s coefficient (its point's) as two little-endian words (low,
    high) of a 128-bit integer, ``r`` its residue mod ``p``; ``hashed`` uint64 (2K, 2): the keyed MMO
    blocks ``AES(w) XOR w`` of ``leaf0``'s K words, then ``leaf1``'s, the same way, ``z = z_0 - z_1``
    of their residues; ``out`` uint64 (K, 3)."""
    k_all = r_words.shape[0]
    p = np.uint64((1 << 61) - 1)
    zero = np.uint64(0)
    hi, lo = zero, zero
    for k in range(k_all):
        r = red128(r_words[k, 1], r_words[k, 0])
        z0 = red128(hashed[k, 1], hashed[k, 0])
        z1 = red128(hashed[k_all + k, 1], hashed[k_all + k, 0])
        z = z0 - z1 if z0 >= z1 else z0 + p - z1
        hi, lo = mac128(zero, zero, r, z)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
        rz = red128(hi, lo)
        hi, lo = mac128(zero, zero, r, rz)
        out[k, 0], out[k, 1], out[k, 2] = rz, red128(hi, lo), z


@njit(cache=True, nogil=True)
def coefficients_core(words, r, r2):  # noqa: ANN001, ANN201
    """``r[i] = (words[i, 1] 2^64 + words[i, 0]) mod p`` and ``r2[i] = r[i]^2 mod p``: ``words``
    uint64 (N, 2), ``r`` and ``r2`` uint64 (N,)."""
    zero = np.uint64(0)
    hi, lo = zero, zero
    for i in range(words.shape[0]):
        x = red128(words[i, 1], words[i, 0])
        hi, lo = mac128(zero, zero, x, x)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
        r[i], r2[i] = x, red128(hi, lo)
