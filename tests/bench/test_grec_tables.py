"""secemb bench grec --table9 / --table15: GREC's Table 9 (FedMF w/ Top-K against lossless
training) and Table 15 (server minutes of GREC's training protocol) at small sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.bench import grec
from secemb.cli import app
from secemb.errors import InvalidParameters


def test_server_minutes_rows() -> None:
    rows = grec.server_minutes((2, 3), dataset="ml-100k")
    assert [r["users"] for r in rows] == [2, 3]
    for r in rows:
        assert r["protocol"] == "grec" and r["m_prime"] == 200 and r["server_s"] > 0
        assert r["server_min"] == pytest.approx(r["server_s"] / 60)
        assert r["paper_min"] is None  # the paper measures 100..500 users
    # m' full DPF row keys of 65 ring words (MF, d = 64) plus the dense share: the same for every user
    assert rows[0]["upload_bytes_per_user"] == rows[1]["upload_bytes_per_user"] > 200 * 65 * 4 / 16
    assert dict(zip(grec.TABLE15_USERS, grec.PAPER_TABLE15["grec"], strict=True))[100] == 0.99


@pytest.mark.parametrize("users", [(1,), (), (10**7,)])
def test_server_minutes_refuses_bad_counts(users) -> None:
    with pytest.raises(InvalidParameters, match="user counts"):
        grec.server_minutes(users, dataset="ml-100k")


def test_table9_two_schemes_and_their_reduction_ratios() -> None:
    res = grec.table9((0,), epochs=1, dataset="synthetic")
    runs = {r["scheme"]: r for r in res["runs"]}
    assert set(runs) == {"grec", "fedmf-topk", "fedmf-topk-table"}
    assert all(np.isfinite(r["rmse"]) and len(r["rmse_per_epoch"]) == 1 for r in runs.values())
    table = {r["scheme"]: r for r in res["table"]}
    # Top-K's item part is 1/16 of the basis; the uncompressed dense shares and headers pull the ratio just below
    assert 15.0 < table["fedmf-topk-table"]["reduction_ratio"] <= 16.0
    # ... of the user's m' rows to one server; Top-K sends indices and a value share to each of two: ~8
    assert 7.0 < table["fedmf-topk"]["ratio_to_sparse"] <= 8.0
    assert res["plaintext_upload_bytes"] == runs["grec"]["upload_bytes_per_user_round"]  # the same m' measured
    assert table["fedmf-topk"]["reduction_ratio"] > table["fedmf-topk-table"]["reduction_ratio"]
    assert table["fedmf-topk"]["upload_bytes_per_user_round"] == runs["fedmf-topk"]["upload_bytes_per_user_round"]
    assert table["grec"]["reduction_ratio"] == pytest.approx(
        res["secfedrec_upload_bytes"] / table["grec"]["upload_bytes_per_user_round"])
    assert table["fedmf-topk"]["paper"]["yelp"] == table["fedmf-topk-table"]["paper"]["yelp"] == (1.829, 0.005, 16.00)


def test_cli_table15_and_refusals(tmp_path) -> None:
    out = tmp_path / "t15.json"
    res = CliRunner().invoke(app, ["bench", "grec", "--table15", "2", "--dataset", "ml-100k", "--out", str(out)])
    # --dataset ml-100k is the default, which --table15 reads as the paper's ML-1M shape
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["table15"][0]["m"] == 3883
    for bad in ("1", "x"):
        res = CliRunner().invoke(app, ["bench", "grec", "--table15", bad, "--out", str(tmp_path / "b.json")])
        assert res.exit_code == 2, (bad, res.output)
        assert "Traceback" not in res.output
