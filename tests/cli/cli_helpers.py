"""What the CLI tests share: running ``secemb`` in process and checking a one-line usage error."""

from __future__ import annotations

from typer.testing import CliRunner

from secemb.cli import app


def run_cli(*args: str):  # noqa: ANN201 - click's Result
    """``secemb ARGS`` in process, on a wide terminal (no folded tables)."""
    return CliRunner().invoke(app, list(args), terminal_width=200)


def assert_usage_error(res, text: str) -> None:  # noqa: ANN001
    """``res`` is exit 2 with one line ``error: ...`` naming ``text`` on stderr, no traceback."""
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and text in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output
