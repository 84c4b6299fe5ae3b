"""SHA-256 of many short messages that share a prefix (the servers' row tags, one message per
table row and round): on the SHA-NI kernel (:mod:`secemb.fss._shani`) where it runs
(:func:`secemb.fss.kernels.sha_compiled`) -- compiled, without the GIL, so a backend's threads
share it -- else with :mod:`hashlib`, the reference, row by row."""

from __future__ import annotations

import hashlib

import numpy as np

from secemb.fss import kernels

__all__ = ["sha256_many"]


def sha256_many(prefix: bytes, suffixes: np.ndarray) -> np.ndarray:
    """``SHA-256(prefix || suffixes[i])`` of every row of ``suffixes`` (uint8 (n, L), C-contiguous
    or not), as uint8 (n, 32); the same bytes on either path."""
    if kernels.sha_compiled():
        from secemb.fss._shani import sha256_many as compiled

        return compiled(prefix, suffixes)
    base = hashlib.sha256(prefix)
    digests = []
    for row in suffixes:
        h = base.copy()
        h.update(row)
        digests.append(h.digest())
    return np.frombuffer(b"".join(digests), np.uint8).reshape(len(suffixes), 32)
