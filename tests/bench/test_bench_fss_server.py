"""Smoke tests of the `bench fss` and `bench server` harnesses on small workloads (the
figures themselves are never asserted: timings live in benchmarks, not tests)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from secemb.cli import app


def test_bench_fss_quick_prints_the_documented_fields() -> None:
    res = CliRunner().invoke(app, ["bench", "fss", "--json", "--quick"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert set(doc) >= {"aes_blocks_per_s", "backends", "machine"}
    assert doc["aes_blocks_per_s"]["openssl"] > 0
    assert "numpy" in doc["backends"]  # the reference is always measured
    rates = {"eval_leaves_per_s", "eval_leaves_per_s_ml100k", "convert_blocks_per_s", "convert_blocks_per_s_d65",
             "dot_leaves_per_s", "eval_full_leaves_per_s", "halftree_eval_leaves_per_s",
             "halftree_eval_full_leaves_per_s", "end_to_end_bgi", "end_to_end_halftree"}
    ratios = {"halftree_over_bgi", "eval_full_over_walk"}  # of two rates above, measured in the same run
    assert "thread_time" in doc["timing"]["method"] and "warm-up" in doc["timing"]["method"]
    for figures in doc["backends"].values():
        per_aes = {"keygen_ms", "aes_blocks_per_s", "share_of_openssl_aes", "share_of_fastest_aes"}
        # walk_share_of_ceiling only where the kernels' own AES rate is a reference (numba)
        assert set(figures) - {"walk_share_of_ceiling"} == per_aes | rates | ratios
        assert figures["halftree_over_bgi"] == pytest.approx(figures["end_to_end_halftree"] / figures["end_to_end_bgi"])
        assert set(figures["keygen_ms"]) == {"ml100k"}
        assert figures["eval_leaves_per_s"] > 0
        # every figure carries the AES rates timed interleaved with it, and its shares of them
        assert set(figures["aes_blocks_per_s"]) == set(figures["share_of_fastest_aes"]) == rates
        for name in rates:
            fastest = max(figures["aes_blocks_per_s"][name].values())
            assert figures["share_of_fastest_aes"][name] == pytest.approx(figures[name] / fastest)
            assert figures["share_of_fastest_aes"][name] <= doc["ceilings"][name]


def test_bench_fss_table_shows_every_figure_as_a_share_of_the_aes_rate() -> None:
    res = CliRunner().invoke(app, ["bench", "fss", "--quick"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "of OpenSSL" in res.output and "[numpy] full-domain path eval" in res.output
    assert "warm-up" in res.output and "interleaved" in res.output


def test_bench_server_quick_lists_both_layouts(tmp_path) -> None:
    res = CliRunner().invoke(app, ["bench", "server", "--json", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    records = json.loads(res.output[res.output.index("["):])
    assert {(r["layout"], r["relay"]) for r in records} == {("full", False), ("cuckoo", False), ("cuckoo", True)}
    for r in records:
        assert set(r) >= {"layout", "relay", "m", "m_prime", "d", "users", "server_s_per_round"}
    assert (tmp_path / "server_vs_m.png").stat().st_size > 0
    saved = json.loads((tmp_path / "server.json").read_text())
    assert saved["insertion"][0]["users"] == 100
    assert "untimed round of every variant" in saved["warm_up"]


def test_bench_server_table_fits_80_columns_and_states_the_warm_up(tmp_path) -> None:
    res = CliRunner().invoke(app, ["bench", "server", "--quick", "--out", str(tmp_path)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    table = res.output[: res.output.index("server s: ")]
    assert max(len(line) for line in table.splitlines()) <= 80 and "…" not in table
    assert "cpu s" in table and "kernel compilation and first-call costs are in no figure" in res.output
