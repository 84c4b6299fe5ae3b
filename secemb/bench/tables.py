"""Markdown and CSV writers for the benchmark tables (results/<table>/), each written
atomically (temp + rename: an interrupted write leaves the earlier file as it was)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from secemb.outputs import atomic_write_text

__all__ = ["markdown_table", "write_csv", "write_markdown"]


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4f}" if abs(v) < 10 else f"{v:,.2f}"
    return "" if v is None else str(v)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub Markdown table of ``rows`` (dicts) with ``columns`` in order."""
    head = "| " + " | ".join(columns) + " |\n| " + " | ".join("---" for _ in columns) + " |\n"
    return head + "".join("| " + " | ".join(_cell(r.get(c)) for c in columns) + " |\n" for r in rows)


def write_csv(path: str | Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """``rows`` (dicts) as CSV with ``columns`` in order, to ``path``."""
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=list(columns), extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c) for c in columns})
    atomic_write_text(path, text.getvalue())


def write_markdown(path: str | Path, title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str],
                   notes: Sequence[str] = ()) -> None:
    """A Markdown document: ``# title``, the table of ``rows`` and the ``notes`` paragraphs."""
    atomic_write_text(path, f"# {title}\n\n" + markdown_table(rows, columns) + "".join(f"\n{n}\n" for n in notes))
