"""What a device trains on in a round: the *task* turns its interactions into the items it
requests and the named batch its model's local step reads.

Two tasks:

* :data:`RATING` (:class:`RatingTask`) -- explicit ratings (MF, NCF, FM, DeepFM): the request
  is the device's distinct rated items, the batch ``item_pos``/``rating``
  (:func:`~secemb.models.batch.rating_batch`); no randomness.
* :class:`SequenceTask` -- next-item prediction from the device's chronological sequence
  (Caser, SASRec): the request is the items of its training windows (histories and targets)
  together with *sampled negatives*, which need their rows and receive gradients, so they are
  requested privately like every other row; the batch holds ``history``, ``target``,
  ``negative`` (positions into the request, -1 = padding) and ``seed`` (the step's dropout).

A task's randomness (negatives, windows, dropout seeds) comes from the generator it is given: in
a simulation the driver's seeded generator, drawn per user in a fixed order, so the in-process
and networked runs of one seed train on the same samples.  A model names its task
(:attr:`secemb.models.base.RecModel.task`); the driver and the device SDK ask the model and never
branch on the model kind.  Nothing here imports torch or crypto.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from secemb.data import RatingData, leave_one_out, train_test_split
from secemb.errors import InvalidParameters, check_int
from secemb.models.batch import HISTORY, ITEM_POS, NEGATIVE, SEED, TARGET, Batch, rating_batch

__all__ = ["RATING", "RatingTask", "Sample", "SequenceTask", "Task", "distinct_items", "unrated_from_ranks"]


@dataclass(frozen=True)
class Sample:
    """One device's training material for one round.

    Attributes
    ----------
    items: int64 (n,), distinct, ascending: the items whose rows the device requests (before
        padding/truncation to m').
    batch: the samples; its position fields index ``items``.
    """

    items: np.ndarray
    batch: Batch


def distinct_items(items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct items ascending, position of each rating's item among them)``: int64 (u,)
    and int64 (n,) for ``items`` int64 (n,)."""
    if items.size < 2 or np.all(items[1:] > items[:-1]):
        return items, np.arange(items.size, dtype=np.int64)
    uniq, inv = np.unique(items, return_inverse=True)
    return uniq, inv.astype(np.int64)


def unrated_from_ranks(rated_sorted: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Map ranks among the items *not* in ``rated_sorted`` to item ids.

    ``rated_sorted``: int64 (r,), ascending and distinct; ``ranks``: int64, any shape, values in
    ``[0, num_items - r)``.  Rank ``x`` maps to ``x + #{j : rated[j] - j <= x}``: no
    O(num_items) work.
    """
    gaps = rated_sorted - np.arange(rated_sorted.shape[0], dtype=np.int64)
    return ranks + np.searchsorted(gaps, ranks, side="right")


class Task(ABC):
    """How a device's interactions become its request and batch (see the module docstring)."""

    #: the task's name, recorded in results
    name: ClassVar[str]
    #: the per-user order the task reads (:func:`secemb.data.by_user`'s ``order``)
    order: ClassVar[Literal["item", "time"]]
    #: the metrics a run of the task scores by default (registry names)
    metrics: ClassVar[tuple[str, ...]]
    #: how :meth:`split` holds data out, in words (recorded in results)
    evaluation: ClassVar[str]

    @abstractmethod
    def split(self, data: RatingData, test_fraction: float, seed: int) -> tuple[RatingData, RatingData | None,
                                                                                 RatingData]:
        """``(train, validation or None, test)`` of ``data`` for this task."""

    def default_m_prime(self, num_items: int) -> int | None:
        """m' when none is given: ``None`` (Eq. 11 from the counts) unless the task bounds its
        requests."""
        return None

    @abstractmethod
    def request_counts(self, lengths: np.ndarray) -> np.ndarray:
        """Upper bound of each user's request size (before padding) from its number of distinct
        training interactions ``lengths`` (int64 (u,)); int64 (u,), 0 for a user the task cannot
        train on.  The users with a count > 0 take part; Eq. 11 averages these counts."""

    @abstractmethod
    def sample(self, items: np.ndarray, ratings: np.ndarray, num_items: int, rng: np.random.Generator) -> Sample:
        """The round's :class:`Sample` of a device with interactions ``items`` (int64 (n,)) and
        ``ratings`` (float32 (n,)) in :attr:`order`, over a catalogue of ``num_items``."""

    @abstractmethod
    def restrict(self, batch: Batch, row_of: np.ndarray) -> Batch:
        """``batch`` re-pointed at the rows the device retrieved: ``row_of`` int64 (n,) maps a
        position in :attr:`Sample.items` to its retrieved row, -1 where placement dropped the
        item (truncation).  Samples left without anything to learn are removed."""


class RatingTask(Task):
    """Explicit ratings: request = distinct rated items, batch = ``item_pos``, ``rating``."""

    name = "rating"
    order = "item"
    metrics = ("rmse",)
    evaluation = "random split of the ratings (test_fraction)"

    def split(self, data: RatingData, test_fraction: float, seed: int) -> tuple[RatingData, RatingData | None,
                                                                                 RatingData]:
        """:func:`~secemb.data.train_test_split`; no validation set."""
        train, test = train_test_split(data, test_fraction, seed=seed)
        return train, None, test

    def request_counts(self, lengths: np.ndarray) -> np.ndarray:
        return np.asarray(lengths, dtype=np.int64)

    def sample(self, items: np.ndarray, ratings: np.ndarray, num_items: int, rng: np.random.Generator) -> Sample:
        uniq, pos = distinct_items(items)
        return Sample(uniq, rating_batch(pos, ratings))

    def restrict(self, batch: Batch, row_of: np.ndarray) -> Batch:
        pos = row_of[batch[ITEM_POS]]
        sel = pos >= 0
        return batch.select(sel).replace(**{ITEM_POS: pos[sel]})


#: the rating task (every rating model's)
RATING = RatingTask()


@dataclass(frozen=True)
class SequenceTask(Task):
    """Next-item prediction over a device's chronological sequence.

    Parameters
    ----------
    max_len: L, history length (older items are cut, shorter histories left-padded with -1).
    targets: T, targets per sample; ``windows="last"`` needs ``targets == max_len``.
    negatives: sampled negatives per target, drawn uniformly (with replacement) from the items
        *not* in the device's training sequence.
    windows: ``"last"`` (SASRec): one sample, the last L + 1 items: history = all but the last,
        target at every position = the next item (aligned with the history);
        ``"sliding"`` (Caser): samples ``history = s[j-L:j]``, ``target = s[j:j+T]`` for every
        ``j`` with ``1 <= j <= n - T``, of which ``max_windows`` are drawn per round.
    max_windows: samples per round with ``"sliding"`` (a uniform draw without replacement when
        the user has more).

    Batch fields (positions into :attr:`Sample.items`, -1 = none): ``history`` int64 (k, L),
    ``target`` int64 (k, T), ``negative`` int64 (k, T, negatives) (-1 where the target is -1),
    ``seed`` int64 (k,): the dropout seed of the step (the model uses ``seed[0]``).
    """

    max_len: int
    targets: int
    negatives: int
    windows: Literal["last", "sliding"]
    max_windows: int = 1

    name = "sequential"
    order = "time"
    metrics = ("hr@10", "ndcg@10", "hr_sampled@10", "ndcg_sampled@10")
    evaluation = ("leave-one-out (last item test, second-to-last validation); ranked after the history "
                  "over the full catalogue (hr, ndcg) and against 100 sampled negatives (hr_sampled, ndcg_sampled)")

    def split(self, data: RatingData, test_fraction: float, seed: int) -> tuple[RatingData, RatingData | None,
                                                                                 RatingData]:
        """:func:`~secemb.data.leave_one_out` (``test_fraction`` and ``seed`` are not used)."""
        return leave_one_out(data)

    def default_m_prime(self, num_items: int) -> int | None:
        """:meth:`max_request` (no device is ever truncated), at most ``num_items``."""
        return min(self.max_request(), num_items)

    def __post_init__(self) -> None:
        for field in ("max_len", "targets", "negatives", "max_windows"):
            check_int(field, getattr(self, field), low=1)
        if self.windows not in ("last", "sliding"):
            raise InvalidParameters(f"windows must be 'last' or 'sliding', got {self.windows!r}")
        if self.windows == "last" and self.targets != self.max_len:
            raise InvalidParameters(f"windows='last' predicts every position: targets must be max_len={self.max_len}, "
                                    f"got {self.targets}")

    def max_request(self) -> int:
        """The largest request a device can make (distinct positives plus negatives)."""
        return int(self.request_counts(np.array([np.iinfo(np.int32).max]))[0])

    def _num_windows(self, lengths: np.ndarray) -> np.ndarray:
        if self.windows == "last":
            return (lengths >= 2).astype(np.int64)
        return np.clip(lengths - self.targets, 0, self.max_windows)

    def request_counts(self, lengths: np.ndarray) -> np.ndarray:
        n = np.asarray(lengths, dtype=np.int64)
        w = self._num_windows(n)
        if self.windows == "last":
            targets = np.minimum(np.maximum(n - 1, 0), self.max_len)
            positives = np.minimum(n, self.max_len + 1)
        else:
            targets = w * self.targets
            positives = np.minimum(n, w * (self.max_len + self.targets))
        return np.where(w > 0, positives + targets * self.negatives, 0)

    def sample(self, items: np.ndarray, ratings: np.ndarray, num_items: int, rng: np.random.Generator) -> Sample:
        seq = np.asarray(items, dtype=np.int64)
        n, L, T = seq.size, self.max_len, self.targets
        if self._num_windows(np.array([n]))[0] == 0:
            raise InvalidParameters(f"a sequence of {n} items is too short for this task (request_counts is 0)")
        if self.windows == "last":
            s = seq[-(L + 1):]
            hist = np.full((1, L), -1, np.int64)
            tgt = np.full((1, L), -1, np.int64)
            hist[0, L - (s.size - 1):] = s[:-1]
            tgt[0, L - (s.size - 1):] = s[1:]
        else:
            starts = np.arange(1, n - T + 1)
            if starts.size > self.max_windows:
                starts = np.sort(rng.choice(starts, size=self.max_windows, replace=False))
            idx = starts[:, None] + np.arange(-L, 0)[None, :]
            hist = np.where(idx >= 0, seq[np.maximum(idx, 0)], -1)
            tgt = seq[starts[:, None] + np.arange(T)[None, :]]
        rated = np.unique(seq)
        ranks = rng.integers(0, num_items - rated.size, size=(*tgt.shape, self.negatives))
        neg = np.where((tgt >= 0)[..., None], unrated_from_ranks(rated, ranks), -1)
        seeds = rng.integers(0, 2**62, size=tgt.shape[0], dtype=np.int64)
        ids = np.concatenate([hist.ravel(), tgt.ravel(), neg.ravel()])
        uniq = np.unique(ids[ids >= 0])

        def pos(a: np.ndarray) -> np.ndarray:
            return np.where(a >= 0, np.searchsorted(uniq, a), -1)

        return Sample(uniq, Batch(**{HISTORY: pos(hist), TARGET: pos(tgt), NEGATIVE: pos(neg), SEED: seeds}))

    def restrict(self, batch: Batch, row_of: np.ndarray) -> Batch:
        def through(a: np.ndarray) -> np.ndarray:
            return np.where(a >= 0, row_of[np.maximum(a, 0)], -1)

        tgt = through(batch[TARGET])
        neg = np.where((tgt >= 0)[..., None], through(batch[NEGATIVE]), -1)
        out = batch.replace(**{HISTORY: through(batch[HISTORY]), TARGET: tgt, NEGATIVE: neg})
        return out.select(np.any(tgt >= 0, axis=1))
