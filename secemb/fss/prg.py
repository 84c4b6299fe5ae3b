"""Fixed-key AES-128 in Matyas-Meyer-Oseas mode, over numpy arrays of 128-bit words.

Hazmat layer.  A 128-bit word is stored as two little-endian ``uint64`` (shape ``(..., 2)``,
C-contiguous), i.e. exactly the 16 bytes AES sees.

The PRG of the DPF tree is ``G(x) = (MMO_L(x), MMO_R(x))`` with
``MMO_k(x) = AES_k(x) XOR x`` (Matyas-Meyer-Oseas), the construction of Boyle, Gilboa and
Ishai (CCS 2016) and of Google's distributed_point_functions library.  Payload conversion
expands a leaf word ``s`` into ``c`` blocks ``MMO_tag(s XOR j)``, ``j = 0..c-1`` (``j`` in the
high 64 bits).  Every fixed AES key is the first 16 bytes of ``SHA-256(b"secemb/fss/" + name)``
so that anyone can recompute it; distinct names give domain-separated functions (the
retrieval and aggregation conversions use different names).

All AES work goes through ``cryptography`` (OpenSSL, AES-NI) in ECB calls of at most
:data:`CHUNK_BLOCKS` blocks, written straight into the caller's buffer with ``update_into``.
"""

from __future__ import annotations

import hashlib
import threading
from functools import cache

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

__all__ = ["CHUNK_BLOCKS", "fixed_key", "FixedKeyAES", "aes_for"]

#: Blocks per ECB call: 64 Ki blocks = 1 MiB, the size at which OpenSSL runs at full speed.
CHUNK_BLOCKS = 1 << 16


def fixed_key(name: str) -> bytes:
    """The public fixed AES-128 key called ``name``: ``SHA-256(b"secemb/fss/" + name)[:16]``."""
    return hashlib.sha256(b"secemb/fss/" + name.encode()).digest()[:16]


class FixedKeyAES:
    """AES-128-ECB under one public fixed key, applied to numpy word arrays.

    Encryptor contexts are kept per thread (an OpenSSL context must not be shared).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._cipher = Cipher(algorithms.AES(fixed_key(name)), modes.ECB())
        self._local = threading.local()

    def _encryptor(self):  # noqa: ANN202 - cryptography's context type is private
        enc = getattr(self._local, "enc", None)
        if enc is None:
            enc = self._local.enc = self._cipher.encryptor()
        return enc

    def encrypt_into(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """``dst = AES(src)`` blockwise; both C-contiguous with the same byte size (a multiple
        of 16).  Returns ``dst``."""
        if src.nbytes == 0:  # memoryview.cast rejects shapes with a zero
            return dst
        enc = self._encryptor()
        s = src.data.cast("B")
        d = dst.data.cast("B")
        total = len(s)
        step = CHUNK_BLOCKS * 16
        pos = 0
        while pos < total:
            end = min(pos + step, total)
            if total - end >= 16:
                # at least one spare block after this chunk: update_into's slack is there
                enc.update_into(s[pos:end], d[pos : end + 16])
            else:
                # final chunk: all but its last block in place, the last one via a scratch
                if end - pos > 16:
                    enc.update_into(s[pos : end - 16], d[pos:end])
                scratch = bytearray(32)
                enc.update_into(s[end - 16 : end], scratch)
                d[end - 16 : end] = scratch[:16]
            pos = end
        return dst

    def mmo(self, words: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``AES(words) XOR words`` for a C-contiguous ``uint64`` array of shape ``(..., 2)``."""
        if out is None:
            out = np.empty_like(words)
        self.encrypt_into(words, out)
        np.bitwise_xor(out, words, out=out)
        return out


@cache
def aes_for(name: str) -> FixedKeyAES:
    """The shared :class:`FixedKeyAES` instance for ``name``."""
    return FixedKeyAES(name)
