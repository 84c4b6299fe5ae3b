"""The raw ids behind a dataset's contiguous indices: :class:`IdMap`, and its two JSON files.

Every loader remaps the ids of its files to contiguous 0-based indices (in sorted order of the
raw ids) and keeps the raw ids here, by index, with the items' titles where the dataset has
them (MovieLens ``u.item``, ``movies.dat``, ``movies.csv``, RecBole's ``ml-100k.item``).  A
saved model keeps them in two files (:mod:`secemb.inference.trained`; docs/training.md):

``items.json`` (public catalogue data, beside ``public.npz``)::

    {"format": "secemb-items", "version": 1, "ids": ["1", "2", ...], "titles": ["Toy Story (1995)", ...]}

``titles`` is ``null`` when the dataset has none; a title the catalogue lacks is ``""``.

``users.json`` (each device's own id, private like ``devices.npz``)::

    {"format": "secemb-users", "version": 1, "ids": ["196", "186", ...]}

Raw ids are strings: an integer id in canonical decimal form (``"7"``, also for ``007`` in
a file whose ids are all integers), any other token as written.  They are data, never
pickle; a file a person may have edited is checked on load (:func:`item_ids_from_document`,
:func:`user_ids_from_document`): the format and version, a list of strings of the model's
length, no id twice, titles a list of strings of the same length.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from secemb.errors import InvalidMessage, InvalidParameters

__all__ = ["ITEMS_FORMAT", "USERS_FORMAT", "IDS_VERSION", "IdMap", "item_ids_from_document",
           "user_ids_from_document"]

#: the ``format`` fields of ``items.json`` and ``users.json``
ITEMS_FORMAT, USERS_FORMAT = "secemb-items", "secemb-users"
#: their ``version`` field; a reader refuses any other
IDS_VERSION = 1

_CANONICAL_INT = re.compile(r"-?(0|[1-9]\d*)\Z")
_INTEGER = re.compile(r"[+-]?\d{1,18}\Z")


def _check_ids(what: str, ids: object, n: int | None) -> tuple[str, ...]:
    """``ids`` as a tuple of distinct non-empty strings (``n`` of them when given)."""
    if not isinstance(ids, (list, tuple)) or not all(isinstance(x, str) and x for x in ids):
        raise InvalidParameters(f"{what} ids must be a list of non-empty strings")
    if n is not None and len(ids) != n:
        raise InvalidParameters(f"{what} ids: expected {n} (one per index), got {len(ids)}")
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        for x in ids:
            if x in seen:
                raise InvalidParameters(f"{what} ids must be distinct, {x!r} occurs twice")
            seen.add(x)
    return tuple(ids)


def _lookup(ids: tuple[str, ...]) -> tuple[dict[str, int], bool]:
    """``(raw id -> index, whether every id is a canonical integer)``."""
    return {raw: k for k, raw in enumerate(ids)}, all(_CANONICAL_INT.match(x) for x in ids)


def _index(what: str, raw: str, table: tuple[dict[str, int], bool]) -> int:
    index, integers = table
    if not isinstance(raw, str):
        raise InvalidParameters(f"{what} id must be a str (the dataset's raw id), got {type(raw).__name__}")
    if raw in index:
        return index[raw]
    if integers and _INTEGER.match(raw.strip()) and str(int(raw)) in index:  # "007" for the integer id 7
        return index[str(int(raw))]
    raise InvalidParameters(f"unknown {what} id {raw!r} (not among the model's {len(index)} {what} ids)")


@dataclass(frozen=True)
class IdMap:
    """The raw ids of a dataset's users and items, by internal index, and the items' titles.

    Attributes
    ----------
    users: the raw id of each user index, or ``None`` where the users' ids are not known (a
        model exported from a deployment: each device keeps its own).
    items: the raw id of each item index.
    titles: each item's title (``""`` where the catalogue has none), or ``None`` when the
        dataset has no titles.

    Raises
    ------
    InvalidParameters
        Ids that are not distinct non-empty strings, or titles not one string per item.
    """

    users: tuple[str, ...] | None
    items: tuple[str, ...]
    titles: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.users is not None:
            object.__setattr__(self, "users", _check_ids("user", self.users, None))
        object.__setattr__(self, "items", _check_ids("item", self.items, None))
        if self.titles is not None:
            if not isinstance(self.titles, (list, tuple)) or not all(isinstance(t, str) for t in self.titles) \
                    or len(self.titles) != len(self.items):
                raise InvalidParameters(f"titles must be a list of {len(self.items)} strings (one per item)")
            object.__setattr__(self, "titles", tuple(self.titles))

    @classmethod
    def from_raw(cls, users: Sequence[Any] | None, items: Sequence[Any], titles: Sequence[str] | None = None) -> IdMap:
        """The map of raw values (ints or strings, as a loader's sorted distinct ids) by index."""
        return cls(None if users is None else tuple(str(u) for u in users), tuple(str(i) for i in items),
                   None if titles is None else tuple(titles))

    @cached_property
    def _users(self) -> tuple[dict[str, int], bool]:
        if self.users is None:
            raise InvalidParameters("this model records no user ids (each device keeps its own): give the index")
        return _lookup(self.users)

    @cached_property
    def _items(self) -> tuple[dict[str, int], bool]:
        return _lookup(self.items)

    def user_index(self, raw: str) -> int:
        """The index of the user whose raw id is ``raw`` (``"007"`` finds ``"7"`` when every
        user id is an integer).

        Raises
        ------
        InvalidParameters
            No user has that id, or the map has no user ids.
        """
        return _index("user", raw, self._users)

    def item_index(self, raw: str) -> int:
        """The index of the item whose raw id is ``raw`` (as :meth:`user_index`)."""
        return _index("item", raw, self._items)

    def items_document(self) -> dict[str, Any]:
        """``items.json``'s document (see the module docstring)."""
        return {"format": ITEMS_FORMAT, "version": IDS_VERSION, "ids": list(self.items),
                "titles": None if self.titles is None else list(self.titles)}

    def users_document(self) -> dict[str, Any]:
        """``users.json``'s document.

        Raises
        ------
        InvalidParameters
            The map has no user ids.
        """
        if self.users is None:
            raise InvalidParameters("this map records no user ids")
        return {"format": USERS_FORMAT, "version": IDS_VERSION, "ids": list(self.users)}


def _document(doc: object, fmt: str, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("format") != fmt or doc.get("version") != IDS_VERSION:
        got = (doc.get("format"), doc.get("version")) if isinstance(doc, dict) else type(doc).__name__
        raise InvalidMessage(f"{where}: expected format {fmt!r} version {IDS_VERSION}, got {got!r}")
    return doc


def item_ids_from_document(doc: object, num_items: int, where: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """``(ids, titles)`` of an ``items.json`` document for a model of ``num_items`` items
    (``where``: the file, named in errors).

    Raises
    ------
    InvalidMessage
        Another format or version, ids that are not ``num_items`` distinct non-empty strings,
        or titles that are neither ``null`` nor one string per item.
    """
    d = _document(doc, ITEMS_FORMAT, where)
    try:
        ids = _check_ids("item", d.get("ids"), num_items)
        titles = d.get("titles")
        return ids, None if titles is None else IdMap(None, ids, titles).titles
    except InvalidParameters as exc:
        raise InvalidMessage(f"{where}: {exc}") from None


def user_ids_from_document(doc: object, num_users: int, where: str) -> tuple[str, ...]:
    """The ids of a ``users.json`` document for a model of ``num_users`` users (as
    :func:`item_ids_from_document`)."""
    d = _document(doc, USERS_FORMAT, where)
    try:
        return _check_ids("user", d.get("ids"), num_users)
    except InvalidParameters as exc:
        raise InvalidMessage(f"{where}: {exc}") from None
