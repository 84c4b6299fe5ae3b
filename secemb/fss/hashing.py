"""SHA-256 of many messages of one length that share a prefix (the servers' row tags, one message
per table row and round; the parties' key digests, one per user and round): on the SHA-NI kernel
(:mod:`secemb.fss._shani`) where it runs (:func:`secemb.fss.kernels.sha_compiled`) -- compiled,
without the GIL, so a backend's threads share it -- else with :mod:`hashlib`, the reference, row by
row.  SHAKE-128 of such messages likewise (:func:`shake128_many`: the verifiers' coefficients and
query points of a batch of proofs), on the Keccak kernel (:mod:`secemb.fss._keccak`) where the
compiled kernels run."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from functools import cache
from types import ModuleType

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss import kernels

__all__ = ["bytes_rows", "hmac_sha256_many", "row_bytes", "sha256_many", "shake128_many"]


@cache
def _shani() -> ModuleType:
    """The SHA-NI kernel's module (:mod:`secemb.fss._shani`), imported on first use (a process that
    hashes with hashlib never loads it) and then taken from here, not by an import statement at
    every call."""
    from secemb.fss import _shani

    return _shani


def sha256_many(prefix: bytes, suffixes: np.ndarray) -> np.ndarray:
    """``SHA-256(prefix || suffixes[i])`` of every row of ``suffixes`` (uint8 (n, L), in any
    memory layout), as uint8 (n, 32); the same bytes on either path.

    Raises
    ------
    InvalidParameters: ``suffixes`` is not a 2-D uint8 array (the kernel would hash its
    elements, hashlib their bytes).
    """
    if not isinstance(suffixes, np.ndarray) or suffixes.dtype != np.uint8 or suffixes.ndim != 2:
        raise InvalidParameters(f"suffixes must be a uint8 (n, L) array, got {getattr(suffixes, 'dtype', None)} "
                                f"{getattr(suffixes, 'shape', type(suffixes).__name__)}")
    if kernels.sha_compiled():
        return _shani().sha256_many(prefix, suffixes)
    base = hashlib.sha256(prefix)
    digests = []
    for row in np.ascontiguousarray(suffixes):  # hashlib reads C-contiguous rows only
        h = base.copy()
        h.update(row)
        digests.append(h.digest())
    return np.frombuffer(b"".join(digests), np.uint8).reshape(len(suffixes), 32)


#: SHA-256's block: the longest HMAC key :func:`hmac_sha256_many` pads rather than hashes (RFC 2104)
_HMAC_BLOCK = 64


def hmac_sha256_many(keys: np.ndarray, head: bytes, tails: np.ndarray) -> np.ndarray:
    """``HMAC-SHA256(key_i, head || tails[i])`` of every row of ``tails`` (uint8 (n, L), in any memory
    layout), ``key_i`` row ``i`` of ``keys`` (uint8 (n, k)) or, for ``keys`` of one row (uint8 (1, k)),
    that key for every row; as uint8 (n, 32), the same bytes on either path: with the SHA-NI kernel
    (:func:`secemb.fss.kernels.sha_compiled`) one compiled call for the batch, its inner and outer
    hashes each one :mod:`~secemb.fss._shani` pass (one key: its padded blocks the passes' shared
    prefixes), else :func:`hmac.digest` row by row (the reference).

    Raises
    ------
    InvalidParameters: ``head`` not bytes, ``keys`` or ``tails`` not 2-D uint8 arrays, keys longer than 64 bytes (RFC
    2104 would hash them first; the keys here are 16 or 32 bytes), or neither one key nor one a row.
    """
    if not isinstance(head, bytes) or not all(
            isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.ndim == 2 for a in (keys, tails)) or (
            keys.shape[1] > _HMAC_BLOCK or keys.shape[0] not in (1, tails.shape[0])):
        raise InvalidParameters(f"HMAC rows: head bytes, keys uint8 (1 or n, <= {_HMAC_BLOCK}) and tails uint8 "
                                f"(n, L), got {type(head).__name__}, {getattr(keys, 'dtype', None)} "
                                f"{getattr(keys, 'shape', None)} and {getattr(tails, 'dtype', None)} "
                                f"{getattr(tails, 'shape', None)}")
    if kernels.sha_compiled():
        return _shani().hmac_sha256_many(keys, head, tails)
    one = keys.shape[0] == 1
    data = b"".join(hmac.digest(keys[0 if one else i].tobytes(), head + tail.tobytes(), "sha256")
                    for i, tail in enumerate(tails))
    return np.frombuffer(data, np.uint8).reshape(len(tails), 32).copy()


@cache
def _keccak() -> ModuleType:
    """The Keccak kernel's module (:mod:`secemb.fss._keccak`), imported on first use."""
    from secemb.fss import _keccak

    return _keccak


def shake128_many(prefix: bytes, rows: np.ndarray, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` bytes of ``SHAKE-128(prefix || rows[i])`` of every row of ``rows`` (uint8
    (n, L), in any memory layout), as uint8 (n, nbytes), C-contiguous; the same bytes on either
    path: the Keccak kernel (:mod:`secemb.fss._keccak`, :data:`~secemb.fss._keccak.LANES` messages a
    permutation) where the compiled kernels run (:func:`secemb.fss.kernels.compiled`), else
    :mod:`hashlib` row by row (the reference).  At 20 messages of 48-70 bytes (the verifiers'): 592
    bytes each 10.6 against 47.4 us, 800 bytes 12.7 against 56.4, 32 bytes 4.9 against 23.6
    (medians of 2,000 calls; session 32, helper G, 2 shared cores under load 6-8).

    Raises
    ------
    InvalidParameters: ``rows`` is not a 2-D uint8 array, or ``nbytes`` is negative.
    """
    if not isinstance(rows, np.ndarray) or rows.dtype != np.uint8 or rows.ndim != 2:
        raise InvalidParameters(f"rows must be a uint8 (n, L) array, got {getattr(rows, 'dtype', None)} "
                                f"{getattr(rows, 'shape', type(rows).__name__)}")
    if nbytes < 0:
        raise InvalidParameters(f"nbytes must be non-negative, got {nbytes}")
    if kernels.compiled():
        return np.ascontiguousarray(_keccak().shake128_rows(prefix, np.ascontiguousarray(rows), nbytes))
    data = b"".join(hashlib.shake_128(prefix + row.tobytes()).digest(nbytes) for row in rows)
    return np.frombuffer(data, np.uint8).reshape(len(rows), nbytes).copy()


def bytes_rows(values: Sequence[bytes], size: int) -> np.ndarray:
    """``n`` byte strings of ``size`` bytes each (as the caller checked) as the rows of uint8 (n, size),
    read-only, one join: the inverse of :func:`row_bytes`."""
    return np.frombuffer(b"".join(values), np.uint8).reshape(len(values), size)


def row_bytes(rows: np.ndarray, width: int | None = None) -> list[bytes]:
    """The first ``width`` bytes (all, by default) of each row of uint8 ``rows`` (n, L), e.g. a
    :func:`sha256_many` batch's digests, as ``n`` bytes objects (one copy, then slices)."""
    n, size = rows.shape[0], rows.shape[1] if width is None else width
    data = np.ascontiguousarray(rows[:, :size]).tobytes()
    return [data[i * size : (i + 1) * size] for i in range(n)]
