"""How every ``secemb`` command reports bad usage: one plain ``error: ...`` line on stderr and
exit code 2, never a traceback; and the checks of output paths that run before any work.

The line is written with :func:`typer.echo`, not through Rich, so user text such as a TOML
section name (``[rounds]``) or a file name with brackets is printed as it is, never read as
markup.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:  # pragma: no cover
    from secemb.outputs import OutputKind

__all__ = ["check_output", "check_output_file", "fail"]


def fail(message: object, code: int = 2) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with ``code`` (2: bad usage)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def check_output(path: Path, option: str, *, force: bool, inputs: Sequence[str | os.PathLike[str] | None] = (),
                 kind: OutputKind = "file") -> Path:
    """:func:`secemb.outputs.check_output` for a command line: exit 2 with its one-line
    message when it refuses ``path`` (an input, a foreign folder, an existing result without
    ``--force``, a path that cannot be written).  ``None`` entries of ``inputs`` are skipped."""
    from secemb.outputs import OutputRefused
    from secemb.outputs import check_output as check

    try:
        return check(path, option=option, force=force, inputs=[i for i in inputs if i is not None], kind=kind)
    except OutputRefused as exc:
        fail(exc)


def check_output_file(path: Path | None, option: str) -> None:
    """Exit 2 unless ``path`` (when given) can be written: not a folder, and a probe file can be
    created in its folder.  An existing file is not refused: commands with a ``--force`` option
    call :func:`check_output` instead."""
    if path is not None:
        check_output(path, option, force=True)
