"""The ``secemb`` command line.  One thin module per command; each exposes ``register(app)``.

Exit codes: 0 success, 1 a run failed a check (for instance ``--verify``), 2 bad usage.
Help is rendered as plain text (``rich_markup_mode=None``): flags show no ``<bool>`` value
that they do not take.

A command that needs an optional extra which is not installed (``secemb serve`` without
``secemb[server]``, say) ends in one line naming the extra to install, exit 2.
"""

from __future__ import annotations

import atexit
import gc
import sys
from typing import Annotated

import typer

from secemb.cli import bench, train
from secemb.cli import admin, client, credentials, demo, infer, recommend, serve

app = typer.Typer(
    name="secemb",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from secemb import __version__

        typer.echo(f"secemb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Privacy-preserving federated recommendation with sparse embeddings (SecEmb)."""


train.register(app)
bench.register(app)
serve.register(app)
client.register(app)
demo.register(app)
recommend.register(app)
infer.register(app)
admin.register(app)
credentials.register(app)


#: top-level module -> the extra of pyproject.toml that installs it
EXTRA_OF_MODULE = {
    "fastapi": "server", "starlette": "server", "uvicorn": "server", "httpx": "server",
    "matplotlib": "bench", "ray": "ray", "triton": "gpu", "phe": "secea", "gmpy2": "secea", "tenseal": "he",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra whose absence raised ``exc`` (``None``: not an optional extra's module)."""
    return EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])


def main() -> None:
    """Console entry point.

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
        app()
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc)
        if extra is None:
            raise
        command = " ".join(a for a in sys.argv[1:3] if not a.startswith("-"))
        print(f"error: secemb {command} needs the optional extra '{extra}' ({exc.name} is not installed): "
              f"pip install 'secemb[{extra}]'", file=sys.stderr)
        raise SystemExit(2) from None
