"""What every ``secemb bench`` command shows on a terminal -- tables that fit its width and
progress bars with a count and an estimated time left -- and how it writes its results: every
output checked before any measurement (an existing result is replaced only with ``--force``;
an input is never replaced; an unwritable path exits 2 at once, :mod:`secemb.outputs`), the
JSON strict and written atomically.

A table wider than the terminal is not squeezed (rich would cut headers and cells to
``proto…``): its columns are dealt out over as few tables as fit, each repeating the first
column (the row's name).  A column counts at most :data:`WRAP_AT` characters wide when the
parts are made: text longer than that wraps inside its cell, never is cut.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import typer

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table
from rich.text import Text

from secemb.bench.progress import Steps
from secemb.cli._console import console as make_console
from secemb.cli._usage import fail
from secemb.outputs import NonFiniteValue, OutputRefused, atomic_write_text, check_output, dumps_strict

__all__ = ["FORCE_HELP", "WRAP_AT", "check_folder", "check_outputs", "fit_tables", "print_fitted", "print_table",
           "report_goals", "save_json", "steps_bar"]

#: the help of every bench command's ``--force``
FORCE_HELP = "Replace existing results at the output paths (without it they are refused before any work)."

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
    :data:`WRAP_AT` wide; parts after the first are titled ``(continued)`` alone (a narrow part
    would wrap a long title over many lines).  Cells are plain
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
    return [_table(title if n == 0 else "(continued)", columns, rows, keep) for n, keep in enumerate(groups)]


def print_table(title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]],
                console: Console | None = None) -> None:
    """Print :func:`fit_tables` of ``rows`` at the width of ``console`` (default: stdout's)."""
    console = console or make_console()
    for table in fit_tables(title, columns, rows, console.width):
        console.print(table)


def print_fitted(table: Table, console: Console | None = None) -> None:
    """Print a built rich ``table`` as :func:`print_table` does: split to fit the width of
    ``console`` (default: stdout's).  Its title, headers and cells are taken as plain text
    (markup rendered away)."""
    columns = [(Text.from_markup(str(c.header)).plain, str(c.justify)) for c in table.columns]
    cells = [[Text.from_markup(str(cell)).plain for cell in c.cells] for c in table.columns]
    rows = [list(row) for row in zip(*cells, strict=True)]
    print_table(Text.from_markup(str(table.title or "")).plain, columns, rows, console)


@contextlib.contextmanager
def steps_bar(quiet: bool = False, description: str = "measuring",
              console: Console | None = None) -> Iterator[Steps]:
    """A progress bar on ``console`` (default stderr; gone when done; off with ``quiet``)
    showing the current step's name, a bar, ``done/total`` and the elapsed and estimated
    remaining time; yields the :class:`~secemb.bench.progress.Steps` callback a benchmark
    reports its steps to.  Lines printed on the same ``console`` meanwhile appear above it."""
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                        console=console or make_console(stderr=True), disable=quiet, transient=True)
    with progress:
        task = progress.add_task(description, total=None)

        def report(message: str, done: int, total: int) -> None:
            progress.update(task, description=escape(message), completed=done, total=total)

        yield report


def check_outputs(force: bool, *outputs: tuple[str, Path | None], inputs: Sequence[Path] = ()) -> None:
    """Before any work: exit 2 with one line unless every ``(option, path)`` of ``outputs``
    (``None``: not written) may be written as a file -- not one of ``inputs`` (even with
    ``force``), not an existing result unless ``force``, writable (probed)."""
    try:
        for option, path in outputs:
            if path is not None:
                check_output(path, option=option, force=force, inputs=inputs)
    except OutputRefused as exc:
        fail(exc)


def check_folder(force: bool, option: str, folder: Path, names: Sequence[str],
                 inputs: Sequence[Path] = ()) -> None:
    """:func:`check_outputs` for a folder the command writes the files ``names`` into: the
    folder writable (or creatable), and each of its files as a result of its own."""
    try:
        check_output(folder, option=option, kind="dir", inputs=inputs)
    except OutputRefused as exc:
        fail(exc)
    check_outputs(force, *((f"{option} ({name})", folder / name) for name in names), inputs=inputs)


def save_json(result: Any, out: Path, as_json: bool) -> bool:
    """Write a bench command's ``result`` to ``out`` as strict JSON, atomically (temp +
    rename); with ``as_json`` also print it.  Returns ``as_json``: the caller prints its table
    only when this is false.  A NaN or infinity in ``result`` exits 1 naming where, writing
    nothing."""
    try:
        text = dumps_strict(result, indent=2)
    except NonFiniteValue as exc:
        fail(f"{out}: {exc}", code=1)
    atomic_write_text(out, text + "\n")
    if as_json:
        typer.echo(text)
    return as_json


def report_goals(command: str, measure: Callable[[Callable[[str], None]], dict[str, Any]],
                 table_rows: Callable[[dict[str, Any]], Sequence[Sequence[str]]], as_json: bool,
                 machine_note: Callable[[dict[str, Any]], str]) -> None:
    """The body of a goal benchmark command (``secemb bench overhead``, ``startup``): ``measure(progress)``
    under a spinner on stderr that shows each step it reports (a :class:`~secemb.errors.SecembError` exits 2
    with one line), then the result as one JSON object (``as_json``) or as the table ``secemb bench COMMAND
    (dataset, kernels: ...)`` of ``table_rows(result)`` (measure, value, goal) and a line on the machine and
    its load average before and after, ending with ``machine_note(result)``."""
    from secemb.errors import SecembError

    console = make_console(stderr=True)
    try:
        with console.status("measuring") as status:
            result = measure(lambda step: status.update(step))
    except SecembError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    m = result["machine"]
    print_table(f"secemb bench {command} ({result['dataset']}, kernels: {result['kernels']})",
                [("measure", "left"), ("value", "right"), ("goal", "right")], table_rows(result))
    load = result["loadavg"]
    typer.echo(f"machine: {m['processor']}, {m['cores']} cores; load average {load['before'][0]:.1f} before, "
               f"{load['after'][0]:.1f} after{machine_note(result)}")
