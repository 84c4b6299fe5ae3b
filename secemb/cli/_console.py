"""The CLI's rich consoles: :func:`console`.

On a terminal a console is as wide as the terminal.  Piped or redirected (``secemb bench fss
--quick | cat``, ``> out.txt``), rich would take 80 columns -- or the width of whatever terminal
stdin or stderr is -- and fold every table row and line past it, so a row's label broke over
two lines in the file.  There the console is :data:`PIPE_WIDTH` wide instead, unless
``COLUMNS`` says otherwise: lines keep whole, tables are split only past that width
(:func:`~secemb.cli.bench_output.fit_tables`).
"""

from __future__ import annotations

import os

from rich.console import Console

__all__ = ["PIPE_WIDTH", "console"]

#: the width of a console whose output is not a terminal and ``COLUMNS`` is unset: wider than
#: any line or table row the CLI prints, so none is folded
PIPE_WIDTH = 10_000


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (``stderr``: on stderr): the terminal's width on a terminal,
    ``COLUMNS`` when set, else :data:`PIPE_WIDTH` (output to a pipe or a file)."""
    con = Console(stderr=stderr)
    if not con.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        con.width = PIPE_WIDTH
    return con
