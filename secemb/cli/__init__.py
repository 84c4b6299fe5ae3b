"""The ``secemb`` command line.  One thin module per command; each exposes ``register(app)``.

Exit codes: 0 success, 1 a run failed a check (for instance ``--verify``), 2 bad usage.
Help is rendered as plain text (``rich_markup_mode=None``): flags show no ``<bool>`` value
that they do not take.

A command that needs an optional extra which is not installed (``secemb serve`` without
``secemb[server]``, say) ends in one line naming the extra to install, exit 2.

``secemb COMMAND ...`` imports and builds only COMMAND's module (:func:`main`): a server or
device process pays for no other command's imports, nor for typer building the others;
``secemb``, ``secemb --help``, ``--version`` and an unknown command get the whole app, which
``secemb.cli.app`` also is (built at its first use).  The command modules declare their options
with annotation objects, not strings (no ``from __future__ import annotations``): typer evaluates
a string annotation anew on every build of a command (``eval``, four times a parameter); an option
that must be made on each build (``--protocol``'s help lists the registered protocols) is a
:class:`~secemb.cli._run_options.Fresh` one.
"""

import atexit
import gc
import importlib
import sys
from collections.abc import Iterable
from typing import Annotated

import typer

#: command -> the module whose ``register(app)`` attaches it, in ``secemb --help``'s order (typer lists
#: the single commands before the groups): the one list of commands, which the whole app
#: (:func:`build_app`) and a process's own command (:func:`main`) are both built from
COMMANDS = {
    "train": "secemb.cli.train", "serve": "secemb.cli.serve", "client": "secemb.cli.client",
    "demo": "secemb.cli.demo", "recommend": "secemb.cli.recommend", "infer": "secemb.cli.infer",
    "bench": "secemb.cli.bench", "admin": "secemb.cli.admin", "credentials": "secemb.cli.credentials",
}


def _print_version(value: bool) -> None:
    if value:
        from secemb import __version__

        typer.echo(f"secemb {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Privacy-preserving federated recommendation with sparse embeddings (SecEmb)."""


def build_app(commands: Iterable[str] = COMMANDS) -> typer.Typer:
    """The ``secemb`` app with the root options and ``commands`` (names of :data:`COMMANDS`; default
    all), each command's module imported here.

    Raises
    ------
    KeyError
        A name that is not in :data:`COMMANDS`.
    ModuleNotFoundError
        A command module needs an optional extra that is not installed (:func:`missing_extra`).
    """
    app = typer.Typer(name="secemb", no_args_is_help=True, add_completion=False, rich_markup_mode=None)
    app.callback()(_root)
    for name in commands:
        importlib.import_module(COMMANDS[name]).register(app)
    return app


def __getattr__(name: str) -> typer.Typer:
    """``secemb.cli.app``, the whole app (every command), built at its first use and kept."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    app = globals()["app"] = build_app()
    return app


#: top-level module -> the extra of pyproject.toml that installs it
EXTRA_OF_MODULE = {
    "fastapi": "server", "starlette": "server", "uvicorn": "server", "httpx": "server",
    "matplotlib": "bench", "ray": "ray", "triton": "gpu", "phe": "secea", "gmpy2": "secea", "tenseal": "he",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra whose absence raised ``exc`` (``None``: not an optional extra's module)."""
    return EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])


def main() -> None:
    """Console entry point: the app of the command ``sys.argv[1]`` names (only that command's
    module imported; its ``--help`` and usage errors are the whole app's), else the whole app.

    At exit the process skips the interpreter's final garbage collections over what it holds
    (:func:`gc.freeze` from an exit handler): with numba's registries and the compiled
    kernels loaded they cost 0.25-0.3 s of CPU in every process (measured, issue 37) and
    free nothing the operating system does not reclaim.  Exit handlers still run, objects
    still go when their last reference does, and the commands write their outputs with
    :mod:`secemb.outputs`' atomic writers, which close and sync before returning; only the
    finalizers of objects in reference cycles alive at exit are skipped.
    """
    atexit.register(gc.freeze)
    try:
        first = sys.argv[1] if len(sys.argv) > 1 else ""
        build_app([first] if first in COMMANDS else COMMANDS)()
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc)
        if extra is None:
            raise
        command = " ".join(a for a in sys.argv[1:3] if not a.startswith("-"))
        print(f"error: secemb {command} needs the optional extra '{extra}' ({exc.name} is not installed): "
              f"pip install 'secemb[{extra}]'", file=sys.stderr)
        raise SystemExit(2) from None
