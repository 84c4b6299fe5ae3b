"""SecEmb's integrity checks: the row tags a device checks its retrieved rows against
(verified retrieval) and the Fiat-Shamir challenge and per-user digest of verified uploads
(docs/security.md, "A deviating server" and "A malicious device")."""

from __future__ import annotations

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss.hashing import sha256_many
from secemb.protocols.secemb.sizes import TAG_BYTES, U64

__all__ = ["VERIFY_DOMAIN", "challenge_seeds", "key_digests", "row_tags", "suffix_tags"]

_ROW_TAG_DOMAIN = b"secemb-row-tag"
#: verified uploads (docs/security.md, "A malicious device"): domains of the challenge seed the
#: servers derive from a user's committed key bytes and of the per-user digest they compare
_CHALLENGE_DOMAIN = b"secemb-verify-challenge"
VERIFY_DOMAIN = b"secemb-verify-upload"


def row_tags(round_id: int, items: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The tags of table rows: for item ``j`` with row ``r`` (ring words, little-endian bytes)
    the first :data:`TAG_BYTES` of ``SHA-256(b"secemb-row-tag" || u64 round_id || u64 j || r)``
    read as little-endian ring words of ``rows.dtype``.

    Parameters
    ----------
    round_id: the round (>= 0).
    items: int (n,), the rows' item ids in ``[0, m)``.
    rows: ring (n, w), uint32 or uint64.

    Returns
    -------
    ring (n, TAG_BYTES / itemsize) of ``rows.dtype`` (once per round on each server for the
    whole table; a device's check writes the hashed suffixes in its own pass over its answers,
    :func:`~secemb.fss.fused.unmask_slots`, and tags them with :func:`suffix_tags`).
    """
    dt = rows.dtype
    if dt not in (np.dtype(np.uint32), np.dtype(np.uint64)) or rows.ndim != 2 or items.shape != rows.shape[:1]:
        raise InvalidParameters(f"rows must be uint32 or uint64 (n, w) with items (n,), got {dt} {rows.shape} "
                                f"and {items.shape}")
    n = len(items)
    # every row's hashed suffix u64 j || r in one array, hashed as one batch
    suffix = np.empty((n, 8 + rows.shape[1] * dt.itemsize), np.uint8)
    suffix[:, :8] = items.astype("<u8").reshape(n, 1).view(np.uint8)
    suffix[:, 8:].view(dt.newbyteorder("<"))[...] = rows  # one copy, from rows of any stride
    return suffix_tags(round_id, suffix, dt)


def suffix_tags(round_id: int, suffix: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The row tags (:func:`row_tags`) of the rows whose hashed suffixes ``u64 j || r`` are the
    rows of ``suffix`` (uint8 (n, 8 + w itemsize)), ring (n, TAG_BYTES / itemsize) of ``dtype``
    (:func:`~secemb.fss.hashing.sha256_many`)."""
    dt = np.dtype(dtype)
    tags = sha256_many(_ROW_TAG_DOMAIN + U64.pack(round_id), suffix)[:, :TAG_BYTES]
    return np.ascontiguousarray(tags).view(dt.newbyteorder("<")).astype(dt)


def key_digests(shared_header: bytes, rest: np.ndarray) -> list[bytes]:
    """Users' key digests, ``SHA-256(shared || checks)`` of each one's shared key part (as
    :meth:`~secemb.fss.keys.DPFKeys.shared_bytes` serializes it) and check words: what
    :func:`challenge_seeds` derives from and, with relay, what the device commits to.  The
    users' keys are of one parameter set: each shared part is ``shared_header``
    (:meth:`~secemb.fss.keys.DPFKeys.shared_header`) followed by row ``i`` of ``rest`` (uint8
    (n, L), rows of any stride; an empty header and whole serialized parts as the rows: the parts'
    plain digests, as server 1 takes them from forwarded parts), hashed as one batch
    (:func:`~secemb.fss.hashing.sha256_many`: without the GIL, two messages at a time on the
    SHA-NI kernel)."""
    digests = sha256_many(shared_header, rest).tobytes()
    return [digests[i : i + 32] for i in range(0, len(digests), 32)]


def challenge_seeds(round_id: int, key_digests: list[bytes]) -> np.ndarray:
    """The 128-bit seeds of users' check challenges, uint64 (n, 2): ``SHA-256(domain || u64
    round_id || K)[:16]`` of each key digest ``K`` (32 bytes, :func:`key_digests`), so that a
    seed is fixed only once the keys are (Fiat-Shamir; docs/security.md); hashed as one batch
    (:func:`~secemb.fss.hashing.sha256_many`)."""
    digests = np.frombuffer(b"".join(key_digests), np.uint8).reshape(len(key_digests), 32)
    seeds = sha256_many(_CHALLENGE_DOMAIN + U64.pack(round_id), digests)[:, :16]
    return seeds.view("<u8").astype(np.uint64)  # rows' bytes consecutive: viewed in place, then one copy
