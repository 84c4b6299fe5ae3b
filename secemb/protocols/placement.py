"""Which rows a user requests: PadOrTruncIdx (SecEmb, Appendix C, Algorithm 1) for the full
layout, truncation plus cuckoo insertion for the cuckoo layout (:func:`place`).

Full layout: every user asks for exactly m' rows.

A user with fewer than m' rated items pads its request with items drawn uniformly without
replacement from the items it did *not* rate; a user with more keeps a uniform random subset of
m' of them (it trains this round on those only).  The padded list is then put in uniformly
random order -- not required by the paper, but it makes the position of the real items carry
no information even to code that sees the plain list.  All draws come from the training
:class:`numpy.random.Generator`, so secure and plaintext runs pad identically.

Padding rows get exact-zero gradients on upload (Algorithm 2, PadOrTruncEmb), which the
training loop builds from ``real_pos``.

Cuckoo layout: a user with more than m' rated items keeps a uniform random subset of m' (as
above); it then cuckoo-inserts them into the ``B`` public buckets (at most one per bucket);
an item that cannot be placed is dropped for the round like a truncated one.  Its request
has one slot per bucket: the item placed there, or -1 for an empty bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secemb.errors import InvalidParameters, check_int
from secemb.protocols.base import RoundConfig

__all__ = ["PaddedRequest", "pad_or_truncate", "place", "sample_unrated"]


@dataclass(frozen=True)
class PaddedRequest:
    """Result of :func:`pad_or_truncate`.

    Attributes
    ----------
    indices: int64 (S,), one entry per request slot: an item id, or -1 for an empty cuckoo
        bucket; ids are distinct.
    real_pos: int64 (n_kept,), positions in ``indices`` of the kept rated items.
    kept: int64 (n_kept,), increasing positions in the input ``items`` of those items,
        aligned with ``real_pos`` (``indices[real_pos] == items[kept]``).
    """

    indices: np.ndarray
    real_pos: np.ndarray
    kept: np.ndarray

    @property
    def num_padding(self) -> int:
        """Number of padding (unrated) items in the request."""
        return int(self.indices.shape[0] - self.real_pos.shape[0])


def sample_unrated(
    rated_sorted: np.ndarray, num_items: int, k: int, rng: np.random.Generator
) -> np.ndarray:
    """``k`` distinct items drawn uniformly from ``[0, num_items)`` minus ``rated_sorted``.

    ``rated_sorted`` must be sorted ascending and distinct.  Draws ranks among the unrated
    items and maps rank ``x`` to ``x + #{j : rated[j] - j <= x}``; no O(num_items) work.
    """
    n_free = num_items - rated_sorted.shape[0]
    if not 0 <= k <= n_free:
        raise InvalidParameters(f"cannot draw {k} unrated items out of {n_free}")
    ranks = rng.choice(n_free, size=k, replace=False).astype(np.int64)
    gaps = rated_sorted - np.arange(rated_sorted.shape[0], dtype=np.int64)
    return ranks + np.searchsorted(gaps, ranks, side="right")


def _checked_items(items: np.ndarray, num_items: int) -> tuple[np.ndarray, np.ndarray]:
    """``items`` as int64 (n,) and sorted, after checking they are distinct ids in ``[0, num_items)``.

    Raises
    ------
    InvalidParameters
        If ``items`` is not 1-D, not distinct or out of range.
    """
    items = np.asarray(items, dtype=np.int64)
    if items.ndim != 1:
        raise InvalidParameters(f"items must be 1-D, got shape {items.shape}")
    srt = np.sort(items, kind="stable")
    if srt.size and (srt[0] < 0 or srt[-1] >= num_items):
        bad = srt[-1] if srt[-1] >= num_items else srt[0]
        raise InvalidParameters(f"items must lie in [0, {num_items}) (the round's catalogue), got item id {bad}")
    if srt.size > 1 and np.any(srt[1:] == srt[:-1]):
        raise InvalidParameters("items must be distinct")
    return items, srt


def pad_or_truncate(
    items: np.ndarray, m_prime: int, num_items: int, rng: np.random.Generator
) -> PaddedRequest:
    """Standardize a user's distinct rated ``items`` to ``m_prime`` indices (Algorithm 1).

    Parameters
    ----------
    items: int64 (n,), distinct item ids in ``[0, num_items)``, n >= 0.
    m_prime: the public request size, ``1 <= m_prime <= num_items``.
    num_items: m.
    rng: the training generator.

    Raises
    ------
    InvalidParameters
        If ``items`` are not distinct, out of range, or ``m_prime`` is out of range.
    """
    items, srt = _checked_items(items, num_items)
    m_prime = check_int(f"m_prime (num_items={num_items})", m_prime, low=1, high=num_items)
    n = items.shape[0]
    if n <= m_prime:
        kept = np.arange(n, dtype=np.int64)
        pad = sample_unrated(srt, num_items, m_prime - n, rng)
        request = np.concatenate([items, pad])
    else:
        kept = np.sort(rng.choice(n, size=m_prime, replace=False).astype(np.int64))
        request = items[kept]
    perm = rng.permutation(m_prime)
    indices = request[perm]
    # position of request[j] in indices is inv[j]; the real items are request[:len(kept)].
    inv = np.empty(m_prime, dtype=np.int64)
    inv[perm] = np.arange(m_prime, dtype=np.int64)
    real_pos = inv[: kept.shape[0]]
    return PaddedRequest(indices, real_pos, kept)


def place(config: RoundConfig, items: np.ndarray, rng: np.random.Generator) -> PaddedRequest:
    """The request slots of a user with distinct rated ``items`` in a round of ``config``.

    Full layout: :func:`pad_or_truncate` to ``m'``.  Cuckoo layout: truncate to ``m'`` (same
    draws as :func:`pad_or_truncate`), then insert into the round's public buckets.

    Raises
    ------
    InvalidParameters
        If ``items`` are not distinct ids in ``[0, m)`` (a device whose data names more items
        than the deployment serves; the cuckoo kernel would index out of its tables).
    """
    if config.layout == "full":
        return pad_or_truncate(items, config.m_prime, config.num_items, rng)
    items, _ = _checked_items(items, config.num_items)  # the cuckoo kernel indexes by item id
    if items.size > config.m_prime:
        kept = np.sort(rng.choice(items.size, size=config.m_prime, replace=False).astype(np.int64))
    else:
        kept = np.arange(items.size, dtype=np.int64)
    slots, _ = config.cuckoo().assign(items[kept], rng)
    placed = np.flatnonzero(slots >= 0)
    # input position of the item in each placed slot, then both in increasing input order
    order = np.argsort(items[kept])
    source = kept[order[np.searchsorted(items[kept], slots[placed], sorter=order)]]
    by_input = np.argsort(source)
    return PaddedRequest(slots, placed[by_input], source[by_input])
