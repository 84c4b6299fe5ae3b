"""Sources of cryptographic randomness.

Every function that needs secret randomness takes a keyword-only ``_rng`` argument: a
callable ``rng(n) -> bytes`` returning ``n`` uniformly random bytes.  The default is
:func:`os.urandom`.  :class:`CtrDrbg` is a deterministic AES-256-CTR generator for test
vectors and reproducible experiments only; never use it with a guessable seed in deployment.
numpy's random generators are never used for anything a server must not predict.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters

__all__ = ["SEED_BYTES", "DRBG_DOMAIN", "RandomBytes", "system_rng", "CtrDrbg", "drbg_key", "random_words",
           "expand_seed"]

#: Bytes of a secret seed that stands for a pseudorandom array (a 128-bit key): :func:`expand_seed`'s,
#: a relay seed, a pairwise mask seed, server 0's seeded share of a dense upload
SEED_BYTES = 16
#: the prefix of :func:`drbg_key`'s hash, ``SHA-256(DRBG_DOMAIN || seed)`` (defined once: the batched
#: key derivations, :func:`secemb.fss.hashing.sha256_many` over many seeds, hash under it too)
DRBG_DOMAIN = b"secemb.CtrDrbg"

RandomBytes = Callable[[int], bytes]


def system_rng(n: int) -> bytes:
    """Return ``n`` bytes from the operating system's CSPRNG (:func:`os.urandom`)."""
    return os.urandom(n)


class CtrDrbg:
    """Deterministic random bytes: AES-256 in counter mode keyed by ``SHA-256(seed)``.

    Parameters
    ----------
    seed:
        Bytes or an int.  The same seed yields the same byte stream.
    """

    def __init__(self, seed: bytes | int) -> None:
        if isinstance(seed, int):
            if seed < 0:
                raise InvalidParameters(f"seed must be non-negative, got {seed}")
            seed = seed.to_bytes((seed.bit_length() + 8) // 8, "little")
        self._enc = Cipher(algorithms.AES(drbg_key(seed)), modes.CTR(b"\x00" * 16)).encryptor()

    def __call__(self, n: int) -> bytes:
        if n < 0:
            raise InvalidParameters(f"number of random bytes must be >= 0, got {n}")
        return self._enc.update(b"\x00" * n)

    def words(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """The next ``prod(shape)`` words of unsigned ``dtype`` of the stream, as
        ``random_words(self, shape, dtype)`` gives them, written once into a new array."""
        dt = np.dtype(dtype)
        count = math.prod(shape)
        n = count * dt.itemsize
        buf = bytearray(n + 15)  # update_into wants room for a block beyond the input
        self._enc.update_into(bytes(n), buf)
        return np.frombuffer(buf, dtype=dt, count=count).reshape(shape)


def drbg_key(seed: bytes) -> bytes:
    """The AES-256 key of :class:`CtrDrbg`'s stream for ``seed``: ``SHA-256(b"secemb.CtrDrbg" || seed)``
    (the counter block starts at 0); for a compiled expansion of many seeds' streams at once."""
    from hashlib import sha256

    return sha256(DRBG_DOMAIN + bytes(seed)).digest()


def random_words(rng: RandomBytes, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """Uniform unsigned integers of ``dtype`` and ``shape`` drawn from ``rng``."""
    dt = np.dtype(dtype)
    count = math.prod(shape)
    return np.frombuffer(rng(count * dt.itemsize), dtype=dt).reshape(shape).copy()


def expand_seed(seed: bytes, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """The pseudorandom array of ``shape`` and unsigned ``dtype`` that a 16-byte secret
    ``seed`` stands for (AES-256-CTR under ``SHA-256(seed)``, :class:`CtrDrbg`).  Two parties
    holding the same seed expand it to the same array; a party without it sees uniform
    values."""
    if len(seed) != SEED_BYTES:
        raise InvalidParameters(f"seed must be {SEED_BYTES} bytes, got {len(seed)}")
    return CtrDrbg(bytes(seed)).words(shape, dtype)
