"""The sketch seeds' field glue, compiled (internal, numba): :func:`device_inputs_core`, the whole
of :func:`secemb.fss.sketch.device_inputs` after the seed's SHAKE (its AES on AES-NI, its field
part :func:`device_core`; :func:`device_inputs_many_core` that of a batch's devices in one call),
and :func:`expand_core`, the servers' :func:`secemb.fss.sketch.expand` after the seeds' SHAKE and
their streams' keys (the streams, their field part :func:`coefficients_core` and the AES keys'
schedules), with the compiled kernels.

The servers' caller draws the bytes (the coefficients' AES-256-CTR streams on the AES-NI stream),
the device's kernel its own (its leaves' keyed MMO blocks and its points' CTR blocks, on AES-NI,
no OpenSSL cipher object a device); the field loops read them as 128-bit little-endian integers
(two words, low first), reduce each mod ``p = 2^61 - 1``
(:func:`secemb.fss._sketch_kernels.red128`: the same canonical value as
:func:`secemb.fss.field.from_uniform_bytes`) and multiply, each product 128 bits
(:func:`~secemb.fss._sketch_kernels.mulp`) reduced at once.  The device reduces only the ``K``
coefficients at its points, drawn by random access, not the ``mp`` of the whole domain.  Both
equal the numpy reference in :mod:`secemb.fss.sketch` bit for bit
(``tests/fss/test_s29_sketch_device.py``).  Glue, not DPF kernels: ``bench overhead``'s kernel
clock times neither.  Every index is unchecked: the caller checks the shapes and points.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from secemb.fss import _kernel_cache  # noqa: F401 - first: the kernels' cache also covers _sketch_kernels' helpers
from secemb.fss._aesni import BLOCKS, LANES, key_expand, mmo_blocks
from secemb.fss._rangeproof_kernels import CTR_BLOCKS, ctr_blocks, schedule256
from secemb.fss._sketch_kernels import mulp, red128, subp

__all__ = ["device_inputs_core", "device_inputs_many_core", "device_core", "coefficients_core", "expand_core"]


@njit(cache=True, nogil=True)
def device_inputs_core(key, ctr_key, alphas, leaf0, leaf1, out):  # noqa: ANN001, ANN201, PLR0913
    """A device's sketches ``out[k] = (r z, r^2 z, z) mod p`` (:func:`device_core`) from its AES
    keys, one call a device: ``key`` uint8 (16,) the leaf hash's ``k_u``, ``ctr_key`` uint8 (32,)
    the coefficients' AES-256 key (``drbg_key(s_r)``), both C-contiguous (read by address);
    ``alphas`` int64 (K,) the points, ``leaf0`` and ``leaf1`` uint64 (K, 2) the two parties' leaf
    words at them, ``out`` uint64 (K, 3).

    The leaves, ``leaf0``'s then ``leaf1``'s, are copied into a buffer of whole
    :data:`~secemb.fss._aesni.BLOCKS`-block passes (the padding hashed, not read) and hashed there
    in place (:func:`~secemb.fss._aesni.mmo_blocks` under ``key``'s round keys); ``r``'s word at
    point ``a`` is block ``a`` of ``ctr_key``'s CTR stream, drawn a pass of
    :data:`~secemb.fss._rangeproof_kernels.CTR_BLOCKS` blocks at a time, each pass that holds a
    point once (random access: at most ``min(K, ceil(mp / CTR_BLOCKS))`` passes).  Points
    unchecked (the caller keeps them in ``[0, mp)``, ``mp`` below ``2^63``)."""
    k_all = alphas.shape[0]
    rks = np.empty((11, 2 * LANES), np.uint64)
    key_expand(key.ctypes.data, rks.ctypes.data)  # type: ignore[call-arg]  # numba's stub keeps the intrinsic's typing-context parameter
    hashed = np.zeros((-(-2 * k_all // BLOCKS) * BLOCKS, 2), np.uint64)
    for k in range(k_all):
        hashed[k, 0], hashed[k, 1] = leaf0[k, 0], leaf0[k, 1]
        hashed[k_all + k, 0], hashed[k_all + k, 1] = leaf1[k, 0], leaf1[k, 1]
    base = hashed.ctypes.data
    for b in range(0, hashed.shape[0], BLOCKS):
        mmo_blocks(rks.ctypes.data, base + 16 * b, base + 16 * b)
    schedule = np.empty(15 * 16, np.uint8)
    schedule256(ctr_key.ctypes.data, schedule.ctypes.data)
    last = 0
    for k in range(k_all):
        last = max(last, alphas[k] // CTR_BLOCKS)
    stream = np.empty(((last + 1) * CTR_BLOCKS, 2), np.uint64)
    drawn = np.zeros(last + 1, np.bool_)
    r_words = np.empty((k_all, 2), np.uint64)
    for k in range(k_all):
        a = alphas[k]
        q = a // CTR_BLOCKS
        if not drawn[q]:
            ctr_blocks(schedule.ctypes.data, np.uint64(q * CTR_BLOCKS), stream.ctypes.data + 16 * q * CTR_BLOCKS)
            drawn[q] = True
        r_words[k, 0], r_words[k, 1] = stream[a, 0], stream[a, 1]
    device_core(r_words, hashed, out)


@njit(cache=True, nogil=True)
def device_inputs_many_core(keys, ctr_keys, alphas, leaf0, leaf1, out):  # noqa: ANN001, ANN201, PLR0913
    """:func:`device_inputs_core` of ``n`` devices (:func:`secemb.fss.sketch.device_inputs_many`):
    row ``d`` of ``keys`` uint8 (n, 16), ``ctr_keys`` uint8 (n, 32) (both C-contiguous),
    ``alphas`` int64 (n, K), ``leaf0`` and ``leaf1`` uint64 (n, K, 2) device ``d``'s arguments, its
    sketches into ``out[d]`` (uint64 (n, K, 3))."""
    for d in range(keys.shape[0]):
        device_inputs_core(keys[d], ctr_keys[d], alphas[d], leaf0[d], leaf1[d], out[d])


@njit(cache=True, nogil=True)
def device_core(r_words, hashed, out):  # noqa: ANN001, ANN201
    """``out[k] = (r z, r^2 z, z) mod p`` for ``K`` keys.

    ``r_words`` uint64 (K, 2): key ``k``'s coefficient (its point's) as two little-endian words (low,
    high) of a 128-bit integer, ``r`` its residue mod ``p``; ``hashed`` uint64 (2K, 2): the keyed MMO
    blocks ``AES(w) XOR w`` of ``leaf0``'s K words, then ``leaf1``'s, the same way, ``z = z_0 - z_1``
    of their residues; ``out`` uint64 (K, 3)."""
    k_all = r_words.shape[0]
    for k in range(k_all):
        r = red128(r_words[k, 1], r_words[k, 0])
        z = subp(red128(hashed[k, 1], hashed[k, 0]), red128(hashed[k_all + k, 1], hashed[k_all + k, 0]))
        rz = mulp(r, z)
        out[k, 0], out[k, 1], out[k, 2] = rz, mulp(r, rz), z


@njit(cache=True, nogil=True)
def coefficients_core(words, r, r2):  # noqa: ANN001, ANN201
    """``r[i] = (words[i, 1] 2^64 + words[i, 0]) mod p`` and ``r2[i] = r[i]^2 mod p``: ``words``
    uint64 (N, 2), ``r`` and ``r2`` uint64 (N,)."""
    for i in range(words.shape[0]):
        x = red128(words[i, 1], words[i, 0])
        r[i], r2[i] = x, mulp(x, x)


@njit(cache=True, nogil=True)
def expand_core(rows, ctr_keys, r, r2, rks):  # noqa: ANN001, ANN201
    """The servers' :func:`secemb.fss.sketch.expand` after the seeds' SHAKE and the coefficients'
    AES-256 keys, one call for the batch: ``rows`` uint8 (n, 32), row ``u`` device ``u``'s
    ``k_u || s_r``, and ``ctr_keys`` uint8 (n, 32), row ``u`` ``drbg_key(s_r)`` (both C-contiguous,
    read by address); into ``r`` and ``r2`` uint64 (n, mp) device ``u``'s coefficients ``r_x``
    (block ``x`` of its CTR stream as a little-endian 128-bit integer mod ``p``) and ``r_x^2 mod
    p``, by :func:`coefficients_core` (the words of :func:`secemb.fss.field.stream_words`), and
    into ``rks`` uint64 (n, 11, 2W) (C-contiguous, written by address) the AES-128 round keys of
    ``k_u`` as :func:`secemb.fss._sketch_kernels.sketch_schedules` writes them.  Each
    device's stream is drawn a pass of :data:`~secemb.fss._rangeproof_kernels.CTR_BLOCKS` blocks at
    a time into one buffer (its passes past ``mp`` computed, not read) and reduced from there: no
    stream of the batch's size, no second pass over its words."""
    n, mp = r.shape
    passes = -(-mp // CTR_BLOCKS)
    stream = np.empty((passes * CTR_BLOCKS, 2), np.uint64)
    schedule = np.empty(15 * 16, np.uint8)
    sp, kp, op = stream.ctypes.data, rows.ctypes.data, rks.ctypes.data
    for u in range(n):
        schedule256(ctr_keys[u].ctypes.data, schedule.ctypes.data)  # type: ignore[call-arg]  # numba's stub keeps typingctx
        for q in range(passes):
            ctr_blocks(schedule.ctypes.data, np.uint64(q * CTR_BLOCKS), sp + 16 * q * CTR_BLOCKS)
        coefficients_core(stream[:mp], r[u], r2[u])
        key_expand(kp + 32 * u, op + rks.strides[0] * u)
