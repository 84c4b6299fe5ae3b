"""The ``secemb`` command line.  One thin module per command; each exposes ``register(app)``.

Exit codes: 0 success, 1 a run failed a check (for instance ``--verify``), 2 bad usage.
Help is rendered as plain text (``rich_markup_mode=None``): flags show no ``<bool>`` value
that they do not take.
"""

from __future__ import annotations

from typing import Annotated

import typer

from secemb.cli import bench, train
from secemb.cli import admin, client, demo, infer, recommend, serve

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


def main() -> None:
    """Console entry point."""
    app()
