"""Issue 32: the long benches report counted steps (a bar with a count and the time left), and
the count rises to its total -- checked on the calls, never on times."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secemb.cli import app


@pytest.fixture
def bar_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, str]]:
    """The ``(done, total, step)`` calls every bench command makes to its progress bar."""
    import secemb.cli.bench_output as output

    calls: list[tuple[int, int, str]] = []

    @contextlib.contextmanager
    def recording(quiet: bool = False, description: str = "", console: object = None) -> Iterator[object]:
        yield lambda message, done, total: calls.append((done, total, message))

    monkeypatch.setattr(output, "steps_bar", recording)
    return calls


def assert_counted(calls: list[tuple[int, int, str]]) -> None:
    assert calls, "no progress reported"
    totals = {t for _, t, _ in calls}
    assert len(totals) == 1 and totals.pop() > 0
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:], strict=False))  # never backwards
    assert calls[0][0] == 0 and calls[-1][0] == calls[-1][1]  # from 0 to the total


def test_bench_sfsl_counts_measurements_and_rounds(tmp_path: Path, bar_calls: list[tuple[int, int, str]]) -> None:
    res = CliRunner().invoke(app, ["bench", "sfsl", "--quick", "--parts", "table5,fig5,train,fig4",
                                   "--out", str(tmp_path / "s.json"), "--json"])
    assert res.exit_code == 0, res.output
    assert_counted(bar_calls)
    assert any("round 2/2" in m for _, _, m in bar_calls) and bar_calls[0][2] == "Table V"


def test_bench_server_counts_its_configurations(tmp_path: Path, bar_calls: list[tuple[int, int, str]]) -> None:
    res = CliRunner().invoke(app, ["bench", "server", "--quick", "--json", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert_counted(bar_calls)
    assert bar_calls[0][2] == "warm-up (untimed)"
    # warm-up, 3 variants, 2 sweep points, insertion: 7 steps
    assert bar_calls[0][1] == 7


def test_bench_secagg_counts_its_runs(tmp_path: Path, bar_calls: list[tuple[int, int, str]]) -> None:
    res = CliRunner().invoke(app, ["bench", "secagg", "--quick", "--repeats", "2", "--out", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    assert_counted(bar_calls)
    # quick: n = 6 (dropout 0 shared with the PSU sweep) and dropout 20 %, twice each
    assert bar_calls[0][1] == 4


def test_bench_grec_counts_every_epoch(tmp_path: Path, bar_calls: list[tuple[int, int, str]]) -> None:
    res = CliRunner().invoke(app, ["bench", "grec", "--models", "mf", "--dataset", "synthetic-mini", "--rec-epochs",
                                   "2", "--den-epochs", "1", "--epsilons", "1,4", "--no-ranking", "--json",
                                   "--out", str(tmp_path / "g.json")])
    assert res.exit_code == 0, res.output
    assert_counted(bar_calls)
    assert bar_calls[0][1] == 2 + 2 * 1  # the recommender's epochs, then a denoiser's epoch per epsilon
