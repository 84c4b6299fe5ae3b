"""Session 39 (lead; helper U's finding): a fresh install's first ``secemb train`` spends about 50 s
compiling the kernels inside its rounds, and its summary's compute figures (server compute a round 0.77 s
against 0.07 s warm, in U's run) read as the protocol's cost.  :func:`secemb.fss.kernels.compile_clock`
times numba's compilations (not its cache loads) and the summary names them from 1 s on.  And the run's
one-line header stays one line when the output is piped (rich's 80 columns folded it mid-word, U)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.fss import kernels

numba = pytest.importorskip("numba")


def test_compile_clock_counts_a_compilation_and_not_a_loaded_kernel() -> None:
    @numba.njit(cache=False)
    def fresh(x: np.ndarray) -> int:  # a new function object: nothing cached anywhere
        return int(x.sum()) + 1

    with kernels.compile_clock() as compiling:
        assert compiling() == 0.0
        assert fresh(np.arange(3)) == 4  # compiles its int64 signature
        first = compiling()
        assert first > 0.0
        assert fresh(np.arange(4)) == 7  # the same signature: no compilation
        assert compiling() == first
    with kernels.compile_clock() as compiling:
        fresh(np.arange(5))
    assert compiling() == 0.0  # a kernel the process holds already adds nothing


def _train(monkeypatch: pytest.MonkeyPatch, seconds: float) -> str:
    @contextlib.contextmanager
    def clock() -> Iterator[Callable[[], float]]:
        yield lambda: seconds

    monkeypatch.setattr(kernels, "compile_clock", clock)
    res = CliRunner().invoke(app, ["train", "--dataset", "synthetic-mini", "--protocol", "plaintext", "--epochs",
                                   "1", "--users-per-round", "50"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.stdout


def test_the_summary_names_the_compilation_of_a_first_run(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _train(monkeypatch, 48.25)
    assert "compiling the kernels (the first run after an install; then cached on disk)" in out
    assert "48.2 s, included in the times above" in out


def test_the_summary_says_nothing_of_compilation_below_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _train(monkeypatch, 0.4)
    assert "compiling the kernels" not in out and "wall time" in out


def test_the_run_header_is_one_line_when_piped() -> None:
    res = CliRunner().invoke(app, ["train", "--dataset", "synthetic-mini", "--protocol", "plaintext", "--epochs",
                                   "1", "--users-per-round", "50"])  # no terminal: rich's 80 columns
    assert res.exit_code == 0, res.output
    header = res.stdout.splitlines()[0]
    assert header.startswith("plaintext (cuckoo) | synthetic-mini") and len(header) > 80
    assert "120 users, 300 items | m'=50" in header and header.endswith("3 rounds")
