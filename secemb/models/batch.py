"""The named batch a model's local step consumes (RecBole's ``Interaction``, trimmed down).

A :class:`Batch` is a read-only mapping from field names to numpy arrays that all have the
same leading length ``k`` (the number of samples).  What a task puts in it:

==========  ===============  =========  ==================================================
task        field            dtype      meaning
==========  ===============  =========  ==================================================
rating      ``item_pos``     int64 (k,) row index, in the user's retrieved rows, of the
                                        sample's item
rating      ``rating``       float64    the rating
                             (k,)
sequential  ``history``      int64      row index of each history item, oldest first,
                             (k, L)     left-padded with -1
sequential  ``target``       int64      row index of each target item (-1: none)
                             (k, T)
sequential  ``negative``     int64      row index of each sampled negative of each target
                             (k, T, n)  (-1 where the target is -1)
sequential  ``seed``         int64 (k,) dropout seed of the local step (``seed[0]``)
==========  ===============  =========  ==================================================

A model reads the fields it needs and :meth:`Batch.require` names a missing one.  The position
fields point into the retrieved rows, so when placement drops items (truncation), the task
(:meth:`secemb.models.task.Task.restrict`) re-points them and drops the samples left without
anything to learn (:meth:`Batch.select` then :meth:`Batch.replace`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from secemb.errors import InvalidParameters

__all__ = ["Batch", "HISTORY", "ITEM_POS", "NEGATIVE", "RATING", "SEED", "TARGET", "rating_batch"]

#: int64 (k,): each sample's row index in the retrieved rows
ITEM_POS = "item_pos"
#: float64 (k,): each sample's rating
RATING = "rating"
#: int64 (k, L): row index of each history item, left-padded with -1
HISTORY = "history"
#: int64 (k, T): row index of each target item, -1 for none
TARGET = "target"
#: int64 (k, T, n): row index of each sampled negative, -1 where the target is -1
NEGATIVE = "negative"
#: int64 (k,): dropout seed of the local step
SEED = "seed"


class Batch(Mapping[str, np.ndarray]):
    """Named per-sample arrays with a common leading length ``num_samples``.

    Parameters
    ----------
    **fields:
        name -> numpy array of at least one dimension; every array has the same ``shape[0]``.
        The arrays are held as given (no copy); treat them as read-only.

    Raises
    ------
    InvalidParameters
        No field, a field that is not a numpy array or is 0-D, or leading lengths that differ
        (the message names the field, the expected length and the length received).
    """

    __slots__ = ("_fields", "num_samples")

    def __init__(self, **fields: np.ndarray) -> None:
        if not fields:
            raise InvalidParameters("a batch needs at least one field, got none")
        k: int | None = None
        first = ""
        for name, arr in fields.items():
            if not isinstance(arr, np.ndarray) or arr.ndim < 1:
                got = type(arr).__name__ if not isinstance(arr, np.ndarray) else "a 0-D array"
                raise InvalidParameters(f"batch field {name!r} must be a numpy array with ndim >= 1, got {got}")
            if k is None:
                k, first = int(arr.shape[0]), name
            elif arr.shape[0] != k:
                raise InvalidParameters(
                    f"batch field {name!r} must have leading length {k} (as {first!r}), got {arr.shape[0]}"
                )
        self._fields: dict[str, np.ndarray] = dict(fields)
        self.num_samples: int = int(k or 0)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._fields[name]
        except KeyError:
            raise InvalidParameters(f"batch has no field {name!r}; fields: {sorted(self._fields)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        """Number of fields (a Mapping's length); the number of samples is ``num_samples``."""
        return len(self._fields)

    def __repr__(self) -> str:
        desc = ", ".join(f"{n}: {a.dtype}{tuple(a.shape)}" for n, a in self._fields.items())
        return f"Batch({desc})"

    def require(self, *names: str) -> None:
        """Raise :class:`~secemb.errors.InvalidParameters` naming the first missing field."""
        for name in names:
            if name not in self._fields:
                raise InvalidParameters(f"batch must have field {name!r}; got fields {sorted(self._fields)}")

    def select(self, index: Any) -> Batch:
        """The samples ``index`` (boolean mask or integer index over the leading axis) of
        every field."""
        return Batch(**{name: arr[index] for name, arr in self._fields.items()})

    def replace(self, **fields: np.ndarray) -> Batch:
        """A batch with ``fields`` added or replaced (same leading length)."""
        return Batch(**{**self._fields, **fields})


def rating_batch(item_pos: Any, rating: Any) -> Batch:
    """The rating task's batch: ``item_pos`` as int64 (k,), ``rating`` as float64 (k,).

    Converting float32 ratings to float64 here is exact, so a model sees the values it saw when
    it converted them itself.

    Raises
    ------
    InvalidParameters
        Either array is not 1-D, or their lengths differ.
    """
    pos = np.asarray(item_pos, dtype=np.int64)
    r = np.asarray(rating, dtype=np.float64)
    for name, arr in ((ITEM_POS, pos), (RATING, r)):
        if arr.ndim != 1:
            raise InvalidParameters(f"{name} must be 1-D (k,), got shape {arr.shape}")
    return Batch(**{ITEM_POS: pos, RATING: r})
