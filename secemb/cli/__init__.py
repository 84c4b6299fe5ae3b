"""The ``secemb`` command line.  One thin module per command; each exposes ``register(app)``.

Exit codes: 0 success, 1 a run failed a check (for instance ``--verify``), 2 bad usage.
"""

from __future__ import annotations

import typer

from secemb.cli import bench, train
from secemb.cli import client, demo, serve

app = typer.Typer(
    name="secemb",
    help="Privacy-preserving federated recommendation with sparse embeddings (SecEmb).",
    no_args_is_help=True,
    add_completion=False,
)
train.register(app)
bench.register(app)
serve.register(app)
client.register(app)
demo.register(app)


def main() -> None:
    """Console entry point."""
    app()
