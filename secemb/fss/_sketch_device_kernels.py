"""The device's side of the sketch check, compiled (internal, numba): :func:`device_core`, the field
part of :func:`secemb.fss.sketch.device_inputs` with the compiled kernels.

The caller (``device_inputs``) draws the seed's SHAKE-128 expansion and hashes both leaf arrays in
one OpenSSL ECB call; this loop reads, per key ``k`` at point ``a``, the raw 128-bit words of
``r_a`` and of the two keyed MMO blocks, reduces each mod ``p = 2^61 - 1``
(:func:`secemb.fss._sketch_kernels.red128`: the same canonical value as
:func:`secemb.fss.field.from_uniform_bytes`), and writes ``(r_a z, r_a^2 z, z)`` with
``z = z_0 - z_1 mod p``, each product 128 bits (:func:`~secemb.fss._sketch_kernels.mac128`)
reduced at once.  Only the ``K`` coefficients at the device's points are reduced, not the ``mp``
of the whole domain.  It equals the numpy reference in :mod:`secemb.fss.sketch` bit for bit
(``tests/fss/test_s29_sketch_device.py``).  Device glue, not a DPF kernel: ``bench overhead``'s
kernel clock does not time it.  Every index is unchecked: the caller checks the shapes and points.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from secemb.fss import _kernel_cache  # noqa: F401 - first: the kernels' cache also covers _sketch_kernels' helpers
from secemb.fss._sketch_kernels import mac128, red128

__all__ = ["device_core"]


@njit(cache=True, nogil=True)
def device_core(r_words, alphas, hashed, out):  # noqa: ANN001, ANN201
    """``out[k] = (r_a z, r_a^2 z, z) mod p`` for ``K`` keys, ``a = alphas[k]``.

    ``r_words`` uint64 (mp, 2): position ``x``'s coefficient as two little-endian words (low, high)
    of a 128-bit integer, ``r_x`` its residue mod ``p``; ``alphas`` int64 (K,) in ``[0, mp)``;
    ``hashed`` uint64 (2K, 2): the keyed MMO blocks ``AES(w) XOR w`` of ``leaf0``'s K words, then
    ``leaf1``'s, the same way, ``z = z_0 - z_1`` of their residues; ``out`` uint64 (K, 3)."""
    k_all = alphas.shape[0]
    p = np.uint64((1 << 61) - 1)
    zero = np.uint64(0)
    hi, lo = zero, zero
    for k in range(k_all):
        a = alphas[k]
        r = red128(r_words[a, 1], r_words[a, 0])
        z0 = red128(hashed[k, 1], hashed[k, 0])
        z1 = red128(hashed[k_all + k, 1], hashed[k_all + k, 0])
        z = z0 - z1 if z0 >= z1 else z0 + p - z1
        hi, lo = mac128(zero, zero, r, z)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
        rz = red128(hi, lo)
        hi, lo = mac128(zero, zero, r, rz)
        out[k, 0], out[k, 1], out[k, 2] = rz, red128(hi, lo), z
