"""A batch's sketch seeds derived and expanded in one compiled call (internal, numba): the servers'
:func:`secemb.fss.sketch.hmac_expand` with the SHA-NI kernel (:func:`secemb.fss.kernels.sha_compiled`).

Hazmat layer, imported only where the SHA-NI kernel runs (:mod:`secemb.fss._shani`, whose HMAC and
SHA-256 passes it calls).  :func:`hmac_expand_core` is the composition of the kernels the reference
path calls one by one -- :func:`secemb.fss._shani._hmac_rows` (the seeds), the Keccak kernel's
:func:`secemb.fss._keccak._shake_rows` (their expansion rows), :func:`secemb.fss._shani._sha_rows_wide`
(the coefficients' AES-256 keys) and :func:`secemb.fss._sketch_device_kernels.expand_core` -- in one
call: the same bytes (``tests/fss/test_s35_hmac_expand.py``), without the Python steps and the
dispatches between them (session 35, helper K2: a retrieval's seeds and their expansion ran as two
calls of several kernels each, right before the walk, each step's Python and dispatch cold).
Every index is unchecked: the caller checks the shapes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from secemb.fss import _kernel_cache  # noqa: F401 - first: its cache stamp covers the kernels compiled in below
from secemb.fss._keccak import _shake_rows
from secemb.fss._shani import _H0, WIDE_LEAST, _big_endian, _hmac_rows, _sha_rows_wide
from secemb.fss._sketch_device_kernels import expand_core

__all__ = ["WIDE_LEAST", "hmac_expand_core"]  # WIDE_LEAST: the argument least the caller passes


@njit(cache=True, nogil=True)
def hmac_expand_core(key, head, tails, expand_tag, drbg_domain, least, seeds, blob_words, blob, ctr_keys,  # noqa: ANN001, ANN201, PLR0913
                     r, r2, rks):
    """``seeds`` (uint8 (n, 16)) set to ``HMAC-SHA256(key, head || tails[i])[:16]`` (``key`` uint8
    (1, k), ``tails`` uint8 (n, L) C-contiguous), ``blob_words`` (uint64 (n, 4), C-contiguous;
    ``blob`` its bytes as uint8 (n, 32), the same memory) to ``SHAKE-128(expand_tag || seeds[i])``'s
    first 32 bytes, ``ctr_keys`` (uint8 (n, 32)) to ``SHA-256(drbg_domain || blob[i, 16:])`` and
    ``r``, ``r2``, ``rks`` as :func:`~secemb.fss._sketch_device_kernels.expand_core` sets them from
    ``blob`` and ``ctr_keys``; ``least``: :data:`secemb.fss._shani.WIDE_LEAST`."""
    n = tails.shape[0]
    macs = np.empty((n, 32), np.uint8)
    _hmac_rows(key, head, tails, macs, least)
    seeds[:] = macs[:, :16]
    _shake_rows(expand_tag, seeds, blob_words)
    states = np.empty((n, 8), np.uint32)
    _sha_rows_wide(drbg_domain, blob.ctypes.data + 16, 32, n, 16, _H0, states, least)
    _big_endian(states, ctr_keys, 0)
    expand_core(blob, ctr_keys, r, r2, rks)
