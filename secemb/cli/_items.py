"""What ``secemb recommend`` and ``secemb infer`` share about ids: the user given as a raw id
(``--user``) or as an index (``--index``), and the items printed with their raw ids and titles
(:class:`~secemb.data.ids.IdMap`; docs/training.md, "Ids")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from secemb.errors import InvalidParameters

if TYPE_CHECKING:  # secemb.data imports numpy; every command imports this module
    from secemb.data.ids import IdMap

__all__ = ["INDEX_HELP", "USER_HELP", "item_fields", "item_rows", "pick_user"]

USER_HELP = ("The user's id as in the dataset (e.g. 196 for MovieLens, user0 in your own CSV); a model saved "
             "without raw ids takes its index here.")
INDEX_HELP = "The user's internal index (0-based, the dataset's contiguous ids; docs/data.md) instead of --user."


def pick_user(user: str | None, index: int | None, lookup: Callable[[str], int], num_users: int) -> int:
    """The user's index from ``--user`` (a raw id, resolved by ``lookup``) or ``--index`` (in
    ``[0, num_users)``).

    Raises
    ------
    InvalidParameters
        Neither or both given, ``lookup``'s error for an unknown id, or an ``--index`` out of range
        (named as the option, with the model's range).
    """
    if user is not None and index is None:
        return lookup(user)
    if user is None and index is not None:
        if not 0 <= index < num_users:
            raise InvalidParameters(f"--index must be in [0, {num_users - 1}] (the model's {num_users} users), "
                                    f"got {index}")
        return index
    raise InvalidParameters("give --user (the user's id in the dataset) or --index (its internal index), one of the "
                            "two")


def item_fields(items: Sequence[int], ids: IdMap | None) -> dict[str, Any]:
    """The JSON fields of ``items`` (indices) beside ``items``: ``item_ids`` (raw ids; the
    indices as strings without a map), ``titles`` (``None`` when the dataset has none) and
    ``raw_ids`` (whether the model records raw ids)."""
    if ids is None:
        return {"item_ids": [str(i) for i in items], "titles": None, "raw_ids": False}
    return {"item_ids": [ids.items[i] for i in items],
            "titles": None if ids.titles is None else [ids.titles[i] for i in items], "raw_ids": True}


def item_rows(items: Sequence[int], scores: Sequence[float], ids: IdMap | None) -> list[str]:
    """The lines ``rank  item  score[  title]`` of ``items`` (raw ids where ``ids`` has them),
    with their header."""
    fields = item_fields(items, ids)
    titles = fields["titles"]
    lines = [f"{'rank':>4}  {'item':>8}  score" + ("  title" if titles is not None else "")]
    for rank, (item, score) in enumerate(zip(fields["item_ids"], scores, strict=True), start=1):
        lines.append(f"{rank:>4}  {item:>8}  {score:.4f}" + (f"  {titles[rank - 1]}" if titles is not None else ""))
    return lines
