"""AES-128 lookup tables and key schedule for the GPU kernels (host side, numpy only).

Hazmat layer.  The GPU AES (:mod:`secemb.fss.gpu._triton`) is the classic T-table
implementation, written for little-endian 32-bit columns: a 128-bit block stored as two
little-endian ``uint64`` (:mod:`secemb.fss.prg`) is, read as four little-endian ``uint32``,
the four AES state columns with row ``r`` in byte ``r``.  One round maps columns ``s`` to::

    t_j = T0[s_j & 0xff] ^ T1[(s_{j+1} >> 8) & 0xff] ^ T2[(s_{j+2} >> 16) & 0xff]
          ^ T3[s_{j+3} >> 24] ^ rk[4 r + j]                       (indices mod 4)

(SubBytes, ShiftRows and MixColumns in four lookups per column) and the last round uses the
S-box alone.  ``T0[x]`` holds the column ``(2 S[x], S[x], S[x], 3 S[x])`` (row 0 in the low
byte) and ``T_k`` is ``T0`` rotated left by ``8 k`` bits.  Everything here is public (the
fixed keys of :func:`secemb.fss.prg.fixed_key`); the table lookups depend only on the public
key and on the data being expanded, which a server holds anyway.  The one exception, the
sketch check's per-device keys ``k_u`` (:func:`expand_keys`), is no secret either by the time a
server's walk uses it: the device has been sent its seed ``c_u`` with its retrieval reply
(docs/security.md, "A sound sketch with the challenge drawn at retrieval"), and the round's
secret it derives from never enters a lookup.  Tests check the tables and the schedule against
OpenSSL (``cryptography``).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss.prg import fixed_key

__all__ = ["SBOX", "TABLES", "expand_key", "expand_keys", "round_keys"]


def _xtime(x: int) -> int:
    """Multiplication by 2 in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1."""
    x <<= 1
    return (x ^ 0x11B) if x & 0x100 else x


def _sbox() -> np.ndarray:
    """The AES S-box (FIPS-197 §5.1.1): inversion in GF(2^8), then the affine map."""
    # log/antilog tables over the generator 3
    exp, log = [0] * 255, [0] * 256
    x = 1
    for i in range(255):
        exp[i], log[x] = x, i
        x ^= _xtime(x)  # x * 3
    box = np.empty(256, np.uint8)
    for a in range(256):
        inv = 0 if a == 0 else exp[(255 - log[a]) % 255]
        y = inv
        for shift in range(1, 5):
            y ^= ((inv << shift) | (inv >> (8 - shift))) & 0xFF
        box[a] = y ^ 0x63
    return box


#: the AES S-box, uint8 (256,)
SBOX = _sbox()


def _tables() -> np.ndarray:
    """uint32 (5, 256): T0..T3 (little-endian columns) and the S-box widened to 32 bits."""
    s = SBOX.astype(np.uint32)
    s2 = np.array([_xtime(int(v)) for v in SBOX], np.uint32)
    t0 = s2 | (s << np.uint32(8)) | (s << np.uint32(16)) | ((s2 ^ s) << np.uint32(24))
    out = np.empty((5, 256), np.uint32)
    for k in range(4):
        r = np.uint32(8 * k)
        out[k] = t0 if k == 0 else (t0 << r) | (t0 >> np.uint32(32 - 8 * k))
    out[4] = s
    return out


#: uint32 (5, 256): the four T-tables and the S-box, as the kernels read them
TABLES = _tables()

_RCON = (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1B, 0x36)


def expand_keys(keys: np.ndarray) -> np.ndarray:
    """The AES-128 key schedules (FIPS-197 §5.2) of ``n`` keys, uint8 (n, 16): uint32 (n, 44),
    each word the little-endian reading of its four bytes; one numpy pass over all keys a word.

    Raises
    ------
    InvalidParameters: ``keys`` not uint8 (n, 16).
    """
    if not isinstance(keys, np.ndarray) or keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != 16:
        raise InvalidParameters(f"AES-128 keys must be uint8 (n, 16), got {getattr(keys, 'dtype', type(keys))} "
                                f"{getattr(keys, 'shape', '')}")
    n = len(keys)
    w = np.empty((n, 44, 4), np.uint8)
    w[:, :4] = keys.reshape(n, 4, 4)
    for i in range(4, 44):
        temp = w[:, i - 1]
        if i % 4 == 0:
            temp = SBOX[np.roll(temp, -1, axis=1)]  # RotWord, SubWord (a copy)
            temp[:, 0] ^= _RCON[i // 4 - 1]
        w[:, i] = w[:, i - 4] ^ temp
    return w.reshape(n, 176).view("<u4").astype(np.uint32)


def expand_key(key: bytes) -> np.ndarray:
    """The AES-128 key schedule of one 16-byte key: uint32 (44,) (:func:`expand_keys`).

    Raises
    ------
    InvalidParameters: ``key`` not 16 bytes.
    """
    if len(key) != 16:
        raise InvalidParameters(f"AES-128 keys are 16 bytes, got {len(key)}")
    return expand_keys(np.frombuffer(key, np.uint8).reshape(1, 16))[0]


@cache
def round_keys(name: str) -> np.ndarray:
    """Round keys (uint32 (44,), read-only) of the public fixed key ``name``
    (:func:`secemb.fss.prg.fixed_key`)."""
    rk = expand_key(fixed_key(name))
    rk.setflags(write=False)
    return rk
