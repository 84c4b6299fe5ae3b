"""Public cuckoo-hashing layout for batched keys (probabilistic batch codes, Angel et al.,
S&P 2018), so a server's work per user no longer grows with ``m'``.

Three public hash functions ``h_0, h_1, h_2 : [m] -> [B]`` place every item in (up to) three
of ``B`` buckets.  Bucket ``b`` lists its items in increasing order; its *domain* is
``[0, M)`` with ``M`` the largest bucket size (shorter buckets are padded with empty rows),
so all keys of a user have one shape.  A user places each of its items in one of its
candidate buckets, at most one per bucket (cuckoo insertion), and makes one key per bucket
over that bucket's domain -- a dummy key (payload 0) for an empty bucket -- so it always
sends exactly ``B`` keys.  A server evaluates ``B`` keys over ``M`` leaves each, about
``3 m`` leaves per user instead of ``m' m``.

The hash functions are ``h_j(i) = (AES_k(i || j || seed) XOR (i || j || seed))_lo mod B``
under the fixed public key ``fixed_key("cuckoo")``: public, deterministic, and free of
structure an adversary could exploit to correlate buckets.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.prg import aes_for

__all__ = ["CuckooLayout", "NUM_HASHES", "MAX_EXPANSION", "MAX_KICKS", "buckets_for"]

NUM_HASHES = 3
#: the most buckets a request row (``B / m'``): more only adds keys (the default is 1.25), and a device
#: refuses a round announcing more buckets than this many a row (finding S41-R4)
MAX_EXPANSION = 8.0
def buckets_for(m_prime: int, expansion: float) -> int:
    """``B = ceil(expansion m')`` buckets for requests of ``m'`` rows (at least :data:`NUM_HASHES`, and at least
    ``m'``): the layout's, a round's, and -- at :data:`MAX_EXPANSION` -- the most a device accepts."""
    return max(NUM_HASHES, m_prime, math.ceil(expansion * m_prime))


#: evictions tried before an item is given up for the round
MAX_KICKS = 200


@dataclass(frozen=True)
class CuckooLayout:
    """The public layout of ``num_items`` items in ``num_buckets`` buckets.

    Attributes
    ----------
    num_items: ``m >= 1``.
    num_buckets: ``B >= NUM_HASHES``.
    seed: public seed of the hash functions (an int in [0, 2^32)).
    """

    num_items: int
    num_buckets: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_items < 1:
            raise InvalidParameters(f"num_items must be >= 1, got {self.num_items}")
        if self.num_buckets < NUM_HASHES:
            raise InvalidParameters(f"num_buckets must be >= {NUM_HASHES}, got {self.num_buckets}")
        if not 0 <= self.seed < 2**32:
            raise InvalidParameters(f"seed must be in [0, 2^32), got {self.seed}")

    @classmethod
    def for_request_size(cls, num_items: int, m_prime: int, expansion: float = 1.25, seed: int = 0) -> CuckooLayout:
        """``B = ceil(expansion * m')`` buckets (at least 3)."""
        if not 1.0 <= expansion <= MAX_EXPANSION:
            raise InvalidParameters(f"expansion must be in [1, {MAX_EXPANSION:g}], got {expansion}")
        return cls(num_items, buckets_for(m_prime, expansion), seed)

    @cached_property
    def candidates(self) -> np.ndarray:
        """int64 (m, 3): each item's candidate buckets (an item's hashes may coincide)."""
        m = self.num_items
        blocks = np.empty((m, NUM_HASHES, 2), np.uint64)
        blocks[:, :, 0] = np.arange(m, dtype=np.uint64)[:, None]
        blocks[:, :, 1] = np.arange(NUM_HASHES, dtype=np.uint64)[None, :] | (np.uint64(self.seed) << np.uint64(32))
        out = aes_for("cuckoo").mmo(blocks)
        return (out[:, :, 0] % np.uint64(self.num_buckets)).astype(np.int64)

    @cached_property
    def _candidate_lists(self) -> list[list[int]]:
        """:attr:`candidates` as Python lists, for the insertion loop."""
        lists: list[list[int]] = self.candidates.tolist()
        return lists

    @cached_property
    def _pairs(self) -> np.ndarray:
        """int64, sorted: ``b m + i`` for each distinct (bucket ``b``, item ``i``) pair."""
        m = self.num_items
        return np.unique(self.candidates * m + np.arange(m)[:, None])

    @cached_property
    def _entries(self) -> tuple[np.ndarray, np.ndarray]:
        """Sorted distinct (bucket, item) pairs: bucket ids and item ids, bucket-major."""
        return self._pairs // self.num_items, self._pairs % self.num_items

    @cached_property
    def indptr(self) -> np.ndarray:
        """int64 (B + 1,): bucket ``b`` holds ``items[indptr[b]:indptr[b+1]]``."""
        buckets, _ = self._entries
        return np.searchsorted(buckets, np.arange(self.num_buckets + 1)).astype(np.int64)

    @cached_property
    def bucket_size(self) -> int:
        """``M``: the largest bucket, the domain of every bucket key (at least 1)."""
        return max(1, int(np.diff(self.indptr).max()))

    @cached_property
    def gather_index(self) -> np.ndarray:
        """int64 (B, M): the item at each position of each bucket, -1 for padding."""
        buckets, items = self._entries
        out = np.full((self.num_buckets, self.bucket_size), -1, np.int64)
        pos = np.arange(items.size) - self.indptr[buckets]
        out[buckets, pos] = items
        return out

    def find(self, items: np.ndarray, buckets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, found)``: the position of each ``items[i]`` inside bucket
        ``buckets[i]`` (int64, meaningless where not found) and whether the bucket holds it
        (bool), both of the inputs' shape."""
        m = self.num_items
        keys = self._pairs
        b = np.asarray(buckets, np.int64)
        want = b * m + np.asarray(items, np.int64)
        where = np.searchsorted(keys, want)
        found = (where < keys.size) & (keys[np.minimum(where, keys.size - 1)] == want)
        return where - self.indptr[b], found

    def positions(self, items: np.ndarray, buckets: np.ndarray) -> np.ndarray:
        """Position of each ``items[i]`` inside bucket ``buckets[i]`` (it must be there)."""
        pos, found = self.find(items, buckets)
        if not found.all():
            raise InvalidParameters("an item was assigned to a bucket that does not hold it")
        return pos

    @cached_property
    def occurrences(self) -> np.ndarray:
        """int64 (m, 3): flat positions ``b M + p`` of each item's (up to three distinct)
        places in the bucket form, -1 where an item has fewer than three buckets."""
        buckets, items = self._entries
        flat = buckets * self.bucket_size + (np.arange(items.size) - self.indptr[buckets])
        order = np.argsort(items, kind="stable")
        items, flat = items[order], flat[order]
        rank = np.arange(items.size) - np.searchsorted(items, items)
        out = np.full((self.num_items, NUM_HASHES), -1, np.int64)
        out[items, rank] = flat
        return out

    def scatter(self, bucket_form: np.ndarray, items: slice = slice(None), out: np.ndarray | None = None) -> np.ndarray:
        """Sum a bucket-form array (B, M, w) back onto items: ring (m, w), or its rows
        ``items`` (a range of items: ranges can be summed in parallel, each into its rows of one
        result).  Linear, so it maps shares to shares; padding positions are ignored.

        ``out``: where to write it (returned), C-contiguous, writeable, of the result's shape and
        ``bucket_form``'s dtype, overlapping neither it nor the layout's :attr:`occurrences` (the
        compiled kernel reads them unchecked: red team P's S27-P4); a new array without it.  The compiled kernel
        (:func:`~secemb.fss._scatter_kernels.scatter_rows`, with :func:`kernels.compiled`) sums
        each item's rows straight into its row of the result; the numpy reference gathers a
        result-sized array a hash and adds them: the same words."""
        b, big_m = self.num_buckets, self.bucket_size
        if bucket_form.ndim != 3 or bucket_form.shape[:2] != (b, big_m):
            raise InvalidParameters(f"bucket form must have shape ({b}, {big_m}, w), got {bucket_form.shape}")
        flat = np.ascontiguousarray(bucket_form.reshape(b * big_m, -1))
        occ = self.occurrences[items]
        shape = (occ.shape[0], flat.shape[1])
        if out is None:
            out = np.empty(shape, flat.dtype)
        elif (out.shape != shape or out.dtype != flat.dtype or not out.flags.c_contiguous or not out.flags.writeable
              or np.may_share_memory(out, bucket_form) or np.may_share_memory(out, self.occurrences)):
            raise InvalidParameters(f"out must be a writeable C-contiguous {flat.dtype} array of shape {shape} apart "
                                    f"from the bucket form and the layout's occurrences, got {out.dtype} {out.shape}")
        if kernels.compiled():
            from secemb.fss._scatter_kernels import scatter_rows

            scatter_rows(flat, np.ascontiguousarray(occ), out)
            return out
        np.take(flat, occ[:, 0], axis=0, out=out)  # every item has at least one bucket
        for k in range(1, NUM_HASHES):
            rows = np.flatnonzero(occ[:, k] >= 0)
            out[rows] += flat[occ[rows, k]]
        return out

    def assign(self, items: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Cuckoo-insert distinct ``items`` (at most one per bucket).

        Parameters
        ----------
        items: distinct int item ids in ``[0, m)``.
        rng: training randomness (the placement is hidden from the servers by the keys; it
             only decides which items, if any, fail to fit).

        Returns
        -------
        ``(slots, dropped)``: int64 (B,) the item placed in each bucket or -1; int64 array of
        the items that could not be placed (dropped for the round, like truncation).
        """
        items = np.asarray(items, np.int64)
        if items.size > self.num_buckets:
            raise InvalidParameters(f"cannot place {items.size} items in {self.num_buckets} buckets")
        if items.size and (items.min() < 0 or items.max() >= self.num_items):  # the kernel indexes by id
            raise InvalidParameters(f"items must lie in [0, {self.num_items})")
        if kernels.compiled():
            from secemb.fss._numba_kernels import cuckoo_assign

            slots_arr = np.full(self.num_buckets, -1, np.int64)
            dropped_arr = np.empty(items.size, np.int64)
            with kernels.signals_deferred():  # the kernel takes the Generator: see there
                n = cuckoo_assign(self.candidates, slots_arr, items, MAX_KICKS, rng, dropped_arr)
            return slots_arr, dropped_arr[:n].copy()
        # plain Python lists: a user places a few hundred items, where numpy's per-call
        # overhead would dominate
        cands = self._candidate_lists
        slots = [-1] * self.num_buckets
        dropped: list[int] = []
        for x in items.tolist():
            cur, came_from = x, -1
            for _ in range(MAX_KICKS):
                choices = cands[cur]
                free = [c for c in choices if slots[c] < 0]
                if free:
                    slots[free[0]] = cur
                    cur = -1
                    break
                options = [c for c in choices if c != came_from] or choices
                b = options[int(rng.integers(len(options)))]
                slots[b], cur, came_from = cur, slots[b], b
            if cur >= 0:
                dropped.append(cur)
        return np.asarray(slots, np.int64), np.asarray(dropped, np.int64)
