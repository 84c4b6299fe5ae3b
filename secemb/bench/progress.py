"""How a benchmark reports its progress: the name of the step it starts, the steps done so
far and the steps in all (a front end turns that into a bar with a count and a time left)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

__all__ = ["Steps", "reported"]

#: ``(name of the step starting, steps done, steps in all)``
Steps = Callable[[str, int, int], None]

T = TypeVar("T")


def reported(plan: Sequence[T], progress: Steps | None, name: Callable[[T], str]) -> Iterator[T]:
    """The items of ``plan`` in order, reporting ``(name(item), i, len(plan))`` to ``progress``
    before the ``i``-th (from 0) and ``("done", n, n)`` after the last."""
    total = len(plan)
    for i, item in enumerate(plan):
        if progress:
            progress(name(item), i, total)
        yield item
    if progress:
        progress("done", total, total)
