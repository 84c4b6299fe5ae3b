"""Binary user and item features (SecEmb Appendix H) as one object, and the encoders that make
them: :class:`FeatureSet`, :func:`one_hot`, :func:`multi_hot`.  The loaders are in
:mod:`secemb.data.features` (MovieLens, synthetic) and :mod:`secemb.data.yelp`; both build on
this module, which imports no loader.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from secemb.errors import InvalidParameters, check_int

__all__ = ["FeatureSet", "multi_hot", "one_hot"]


@dataclass(frozen=True)
class FeatureSet:
    """Binary features of every user and item of one dataset.

    Attributes
    ----------
    name: dataset name.
    user: uint8 (num_users, l_x), 0/1; private data of each device.
    item: uint8 (num_items, l_y), 0/1; public catalogue metadata.
    user_names, item_names: one name per column (``"gender=F"``, ``"genre=Drama"``).
    """

    name: str
    user: np.ndarray
    item: np.ndarray
    user_names: tuple[str, ...] = field(default=())
    item_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for what in ("user", "item"):
            a = getattr(self, what)
            if not isinstance(a, np.ndarray) or a.ndim != 2:
                raise InvalidParameters(f"{what} features must be a 2-D numpy array")
            if a.size and not np.isin(a, (0, 1)).all():
                raise InvalidParameters(f"{what} features must be 0/1")
            object.__setattr__(self, what, np.ascontiguousarray(a, dtype=np.uint8))
            names = getattr(self, f"{what}_names")
            if names and len(names) != a.shape[1]:
                raise InvalidParameters(f"{len(names)} {what} feature names for {a.shape[1]} columns")

    @property
    def num_users(self) -> int:
        return int(self.user.shape[0])

    @property
    def num_items(self) -> int:
        return int(self.item.shape[0])

    @property
    def l_x(self) -> int:
        """Number of user features."""
        return int(self.user.shape[1])

    @property
    def l_y(self) -> int:
        """Number of item features."""
        return int(self.item.shape[1])

    def public_sha256(self) -> str:
        """SHA-256 of the public part as a model takes it: ``num_items``, ``l_y`` and ``l_x``
        (little-endian int64), then the item matrix (uint8, row-major).  Names and user rows do
        not enter (a device's :meth:`for_device` hashes as the servers' full set).  The servers
        announce it in the round document (``model.item_features_sha256``); a device compares
        its own (:meth:`secemb.client.device.RoundInfo.check_model`).

        >>> a = FeatureSet("x", np.zeros((2, 3)), np.eye(4, 2))
        >>> a.public_sha256() == a.for_device(1).public_sha256() != FeatureSet("x", np.zeros((2, 3)),
        ...                                                                    np.eye(4, 2)[::-1]).public_sha256()
        True
        """
        h = hashlib.sha256(np.array([self.num_items, self.l_y, self.l_x], dtype="<i8").tobytes())
        h.update(self.item.tobytes())
        return h.hexdigest()

    def for_device(self, user: int) -> FeatureSet:
        """What device ``user`` holds: its own user row (``(1, l_x)``: row 0, as the device's
        one-row :class:`~secemb.models.UserStore`, a copy) and the public item matrix; nobody
        else's row, and no view that keeps the full user matrix alive.

        Raises
        ------
        InvalidParameters
            ``user`` outside ``[0, num_users)``.
        """
        user = check_int("user", user, low=0, high=self.num_users - 1)
        return FeatureSet(self.name, self.user[user : user + 1].copy(), self.item, self.user_names, self.item_names)

    def check_sizes(self, num_users: int, num_items: int) -> None:
        """Raise :class:`InvalidParameters` unless the features cover exactly these ids."""
        if (self.num_users, self.num_items) != (num_users, num_items):
            raise InvalidParameters(
                f"features of {self.name!r} cover {self.num_users} users x {self.num_items} items, "
                f"the data has {num_users} x {num_items}"
            )

    def __repr__(self) -> str:
        return f"FeatureSet({self.name!r}, users={self.num_users}x{self.l_x}, items={self.num_items}x{self.l_y})"


# ----------------------------------------------------------------------------- encoders


def one_hot(
    values: Sequence[str], prefix: str, vocabulary: Sequence[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """One 0/1 column per distinct value (sorted; or the given ``vocabulary``).

    Returns ``(uint8 (n, V), names)``.  A value outside a given vocabulary maps to an all-zero
    row; ``""`` (missing) always does.
    """
    vocab = sorted({v for v in values if v != ""}, key=_natural) if vocabulary is None else list(vocabulary)
    index = {v: j for j, v in enumerate(vocab)}
    out = np.zeros((len(values), len(vocab)), np.uint8)
    for i, v in enumerate(values):
        j = index.get(v)
        if j is not None:
            out[i, j] = 1
    return out, [f"{prefix}={v}" for v in vocab]


def multi_hot(
    lists: Sequence[Iterable[str]], prefix: str, vocabulary: Sequence[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """One 0/1 column per distinct token over all lists (sorted, or ``vocabulary``)."""
    lists = [list(x) for x in lists]
    vocab = sorted({t for x in lists for t in x if t}) if vocabulary is None else list(vocabulary)
    index = {v: j for j, v in enumerate(vocab)}
    out = np.zeros((len(lists), len(vocab)), np.uint8)
    for i, x in enumerate(lists):
        for t in x:
            j = index.get(t)
            if j is not None:
                out[i, j] = 1
    return out, [f"{prefix}={v}" for v in vocab]


def _natural(v: str) -> tuple[int, int | str]:
    return (0, int(v)) if v.lstrip("-").isdigit() else (1, v)
