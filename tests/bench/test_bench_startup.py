"""``secemb bench startup`` (issue 37, goal 2): the set-up of ``secemb train`` and a fresh
process's first kernel call, each measured in fresh processes."""

from __future__ import annotations

import json

import pytest

from secemb.bench import startup
from secemb.errors import InvalidParameters, SecembError
from secemb.fss import kernels


def test_a_run_measures_every_phase_and_finds_the_kernels_cached() -> None:
    got = startup.run("synthetic-mini", repeats=2)
    assert len(got["setup"]) == 2 and len(got["first_call"]) == 2
    s = got["setup_best"]
    assert s in got["setup"]
    for key in ("import_cli_s", "to_first_round_s", "kernel_warm_up_s"):
        assert 0.0 <= s[key] <= s["cpu_s"] + 0.05  # the child's phases fit in its own CPU (clock granularity)
    assert s["wall_s"] > 0.0 and got["goal_setup_s"] == 1.5
    if kernels.available() and got["kernels"] == "numba":
        # the first child may have compiled (a cold cache); every later fresh process loads only
        assert got["first_call"][1]["compiled"] == 0 and got["first_call"][1]["cache_hits"] > 0
    rows = startup.table_rows(got)
    assert rows[0][2] == "<= 1.5 s" and any("warm-up" in r[0] for r in rows)


def test_bad_arguments_are_refused_before_any_child_runs() -> None:
    with pytest.raises(InvalidParameters, match="repeats"):
        startup.run("synthetic-mini", repeats=0)
    with pytest.raises(InvalidParameters, match="dataset"):
        startup.run("--help")


def test_a_child_that_cannot_reach_its_first_round_is_an_error() -> None:
    with pytest.raises(SecembError, match="child process failed"):
        startup.run("no-such-dataset", repeats=1)


def test_cli_json_and_refusal() -> None:
    from typer.testing import CliRunner

    from secemb.cli import app

    res = CliRunner().invoke(app, ["bench", "startup", "--dataset", "no-such-dataset", "--repeats", "1"])
    assert res.exit_code == 2 and "child process failed" in res.output
    res = CliRunner().invoke(app, ["bench", "startup", "--repeats", "0"])
    assert res.exit_code == 2
    res = CliRunner().invoke(app, ["bench", "startup", "--dataset", "synthetic-mini", "--repeats", "1", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["dataset"] == "synthetic-mini"
