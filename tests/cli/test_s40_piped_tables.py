"""Session 40, helper U: piped or redirected, the CLI's rich tables keep each row on one line.  Rich
took 80 columns there (or the width of whatever terminal stdin or stderr was), so ``secemb bench fss
--quick | cat`` folded row labels over two and three lines; now a console whose output is not a
terminal is :data:`~secemb.cli._console.PIPE_WIDTH` wide unless ``COLUMNS`` says otherwise
(:func:`secemb.cli._console.console`)."""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

from _server_template import popen_secemb
from secemb.cli import app

#: row labels of `bench fss` that an 80-column table folded (its first column was 33 wide)
LABELS = ("raw AES-128-ECB, OpenSSL (cryptography)", "[numpy] payload conversion + sum over keys (m=1682, d=64, k=32)")


def _body(output: str) -> list[str]:
    """The lines of the first table's rows (between its header rule and its bottom rule)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return lines[start + 1:end]


def test_bench_fss_through_a_pipe_prints_each_row_on_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = popen_secemb([sys.executable, "-m", "secemb", "bench", "fss", "--quick"], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, env=env, text=True)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    rows = _body(out)
    # every line of the table's body is a row of its own: it starts with a label, none continues one
    assert rows and all(line.startswith(("│ raw ", "│ [")) for line in rows), rows
    for label in LABELS:
        assert any(line.startswith(f"│ {label} ") for line in rows), (label, rows)
    assert max(len(line) for line in rows) > 80


def test_columns_still_sets_the_width_of_piped_tables() -> None:
    # an operator who sets COLUMNS gets that width (tables fitted to it: labels fold inside their cell)
    res = CliRunner().invoke(app, ["bench", "fss", "--quick"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    rows = _body(res.stdout)
    assert max(len(line) for line in rows) <= 80 and not all(line.startswith(("│ raw ", "│ [")) for line in rows)
