"""``secemb train`` (placeholder until the training command lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the command to ``app``."""

    @app.command()
    def train() -> None:
        """Train a federated recommender."""
        raise typer.Exit(2)
