"""``secemb recommend``: the top-k items a saved model recommends to one user.

Reads a folder written by ``secemb train --save-model DIR`` (format: docs/training.md) and
prints the ``k`` best-scored items the user did not interact with in training, best first
(ties by item id), one ``rank item score`` line each; ``--json`` prints one JSON document.

Exit codes: 0 success; 2 bad usage (a missing, corrupted or malformed model folder, a user
out of range).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``recommend`` command to ``app``."""

    @app.command()
    def recommend(
        model_dir: Annotated[Path, typer.Option(help="Folder written by 'secemb train --save-model'.")],
        user: Annotated[int, typer.Option(help="User id (0-based, the dataset's contiguous ids; docs/data.md).")],
        k: Annotated[int, typer.Option("-k", "--k", min=1, help="Number of items.")] = 10,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of lines.")] = False,
    ) -> None:
        """Recommend the top-k items a user has not rated, from a saved model."""
        from secemb.cli._usage import fail
        from secemb.errors import InvalidMessage, InvalidParameters
        from secemb.training.trained import TrainedModel

        try:
            trained = TrainedModel.load(model_dir)
            rec = trained.recommend(user, k)
        except (InvalidParameters, InvalidMessage) as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps({"user": rec.user, "items": rec.items.tolist(), "scores": rec.scores.tolist(),
                                   "model_sha256": trained.model_sha256}))
            return
        typer.echo(f"top {rec.items.size} unrated items for user {rec.user} ({trained.model.name}, "
                   f"{trained.info['protocol']}, {trained.info['dataset']}):")
        typer.echo(f"{'rank':>4}  {'item':>8}  score")
        for rank, (item, score) in enumerate(zip(rec.items.tolist(), rec.scores.tolist(), strict=True), start=1):
            typer.echo(f"{rank:>4}  {item:>8}  {score:.4f}")
