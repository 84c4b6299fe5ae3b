"""``secemb recommend``: the top-k items a saved model recommends to one user.

Reads a folder written by ``secemb train --save-model DIR`` (format: docs/training.md) and
prints the ``k`` best-scored items the user did not interact with in training, best first
(ties by item index), one ``rank item score [title]`` line each, the items by their raw ids
in the dataset (and titles where the dataset has them); ``--json`` prints one JSON document
with both the indices and the raw ids.  The user is ``--user`` (its raw id in the dataset) or
``--index`` (its internal index).  A model saved without raw ids (before they were recorded,
or trained on synthetic data) uses the indices as ids, and says so.

Exit codes: 0 success; 2 bad usage (a missing, corrupted or malformed model folder, a public
model exported from a deployment (no user's parameters), an unknown user id, an index out of
range).
"""

import json
from pathlib import Path
from typing import Annotated

import typer

from secemb.cli._items import INDEX_HELP, USER_HELP


def register(app: typer.Typer) -> None:
    """Attach the ``recommend`` command to ``app``."""

    @app.command()
    def recommend(
        model_dir: Annotated[Path, typer.Option(help="Folder written by 'secemb train --save-model'.")],
        user: Annotated[str | None, typer.Option(help=USER_HELP)] = None,
        index: Annotated[int | None, typer.Option(help=INDEX_HELP)] = None,
        k: Annotated[int, typer.Option("-k", "--k", min=1, help="Number of items.")] = 10,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of lines.")] = False,
    ) -> None:
        """Recommend the top-k items a user has not rated, from a saved model."""
        from secemb.cli._items import item_fields, item_rows, pick_user
        from secemb.cli._usage import fail
        from secemb.errors import InvalidMessage, InvalidParameters
        from secemb.inference.trained import TrainedModel

        try:
            trained = TrainedModel.load(model_dir)
            rec = trained.recommend(pick_user(user, index, trained.user_index, trained.num_users), k)
        except (InvalidParameters, InvalidMessage) as exc:
            fail(exc)
        items = rec.items.tolist()
        if as_json:
            typer.echo(json.dumps({"user": rec.user, "user_id": rec.user_id, "items": items,
                                   **item_fields(items, trained.ids), "scores": rec.scores.tolist(),
                                   "model_sha256": trained.model_sha256}))
            return
        who = f"{rec.user_id} (index {rec.user})" if rec.raw_ids else str(rec.user)
        note = "" if rec.raw_ids else " -- ids are indices (the model records no raw ids)"
        typer.echo(f"top {rec.items.size} unrated items for user {who} ({trained.model.name}, "
                   f"{trained.info['protocol']}, {trained.info['dataset']}){note}:")
        for line in item_rows(items, rec.scores.tolist(), trained.ids):
            typer.echo(line)
