"""What every ``secemb bench`` command shows on a terminal: tables that fit its width and
progress bars with a count and an estimated time left.

A table wider than the terminal is not squeezed (rich would cut headers and cells to
``proto…``): its columns are dealt out over as few tables as fit, each repeating the first
column (the row's name).  A column counts at most :data:`WRAP_AT` characters wide when the
parts are made: text longer than that wraps inside its cell, never is cut.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

from secemb.bench.progress import Steps

__all__ = ["WRAP_AT", "fit_tables", "print_table", "steps_bar"]

#: widest a column counts when a table is split to fit (longer cells wrap)
WRAP_AT = 30


def _table(title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]],
           keep: Sequence[int], max_width: int | None = None) -> Table:
    table = Table(title=escape(title))
    for i in keep:
        name, justify = columns[i]
        table.add_column(escape(name), justify=justify, overflow="fold", max_width=max_width)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*(escape(row[i]) for i in keep))
    return table


def fit_tables(title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]],
               width: int) -> list[Table]:
    """``rows`` under ``columns`` (``(header, "left" | "right")``) as one table, or as several
    when one would be wider than ``width`` characters: every part has the first column and as
    many of the next ones, in order, as fit (at least one) with every column counted at most
    :data:`WRAP_AT` wide; parts after the first are titled ``(continued)``.  Cells are plain
    text (markup escaped)."""
    console = Console(width=10**6)  # measures natural widths

    def natural(keep: Sequence[int]) -> int:
        table = _table(title, columns, rows, keep, max_width=WRAP_AT)
        return Measurement.get(console, console.options, table).maximum

    groups: list[list[int]] = []
    current = [0]
    for i in range(1, len(columns)):
        if len(current) > 1 and natural([*current, i]) > width:
            groups.append(current)
            current = [0, i]
        else:
            current.append(i)
    groups.append(current)
    return [_table(title if n == 0 else f"{title} (continued)", columns, rows, keep) for n, keep in enumerate(groups)]


def print_table(title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]],
                console: Console | None = None) -> None:
    """Print :func:`fit_tables` of ``rows`` at the width of ``console`` (default: stdout's)."""
    console = console or Console()
    for table in fit_tables(title, columns, rows, console.width):
        console.print(table)


@contextlib.contextmanager
def steps_bar(quiet: bool = False, description: str = "measuring") -> Iterator[Steps]:
    """A progress bar on stderr (gone when done; off with ``quiet``) showing the current
    step's name, a bar, ``done/total`` and the elapsed and estimated remaining time; yields
    the :class:`~secemb.bench.progress.Steps` callback a benchmark reports its steps to."""
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                        console=Console(stderr=True), disable=quiet, transient=True)
    with progress:
        task = progress.add_task(description, total=None)

        def report(message: str, done: int, total: int) -> None:
            progress.update(task, description=escape(message), completed=done, total=total)

        yield report
