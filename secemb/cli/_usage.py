"""How every ``secemb`` command reports bad usage: one plain ``error: ...`` line on stderr and
exit code 2, never a traceback; and the checks of output paths that run before any work.

The line is written with :func:`typer.echo`, not through Rich, so user text such as a TOML
section name (``[rounds]``) or a file name with brackets is printed as it is, never read as
markup.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import typer

__all__ = ["check_output_dir", "check_output_file", "fail"]


def fail(message: object, code: int = 2) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with ``code`` (2: bad usage)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _nearest_existing(path: Path) -> Path:
    """``path`` itself or its closest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()  # pragma: no cover - the root always exists


def _check_creatable_dir(folder: Path, option: str, given: Path) -> None:
    """Exit 2 unless ``folder`` exists writable or can be created; ``given`` is the value of
    ``option`` that the message names."""
    base = _nearest_existing(folder)
    if not base.is_dir():
        fail(f"{option} {given}: expected a path under a folder, got {base} which is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        fail(f"{option} {given}: expected a writable folder, got {base} which is not writable")


def check_output_file(path: Path | None, option: str) -> None:
    """Exit 2 unless ``path`` (when given) can be written: not a folder, and its folder is one
    that exists writable or can be created.  Called before any work, so a bad ``--json-out``
    never costs a finished run."""
    if path is None:
        return
    if path.is_dir():
        fail(f"{option} {path}: expected a file name, got a folder")
    if path.exists() and not os.access(path, os.W_OK):
        fail(f"{option} {path}: expected a writable file, got one that is not writable")
    _check_creatable_dir(path.parent, option, path)


def check_output_dir(path: Path, option: str) -> None:
    """Exit 2 unless ``path`` is a writable folder or one that can be created."""
    if path.exists() and not path.is_dir():
        fail(f"{option} {path}: expected a folder, got a file")
    _check_creatable_dir(path, option, path)
