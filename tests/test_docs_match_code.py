"""Issue 13, item 6: the docs said 1 default epoch (it is 5), an "interleaved" default schedule
(it is "staged"), suggested `--ssl-*` options `secemb serve` does not have, said Yelp is not
loaded from files, and cited files that are not in the repository."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from secemb.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_training_md_states_the_default_epochs() -> None:
    train = typer.main.get_command(app).commands["train"]
    epochs = next(p.default for p in train.params if p.name == "epochs")
    assert f"SecEmb protocol, {epochs} epochs" in _text("docs/training.md")


def test_training_md_states_the_default_schedule() -> None:
    from secemb.training import Experiment

    schedule = {f.name: f.default for f in dataclasses.fields(Experiment)}["schedule"]
    assert f'`schedule="{schedule}"` (default)' in _text("docs/training.md")


def test_deployment_md_suggests_no_serve_option_that_does_not_exist() -> None:
    serve_help = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).stdout
    for option in set(re.findall(r"`(--[a-z][a-z-]*)", _text("docs/deployment.md"))):
        if option.startswith("--ssl"):
            assert option in serve_help, option


def test_data_md_loads_yelp_from_files() -> None:
    assert "Yelp is not loaded" not in _text("docs/data.md")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_cite_only_files_in_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert "DESIGN.md" not in text and "shared/papers" not in text
