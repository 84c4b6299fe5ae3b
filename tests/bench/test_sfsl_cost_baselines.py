"""secemb bench sfsl --parts baselines: Figure 5's cost baselines (SFL, pure FSL, pure FL) on
taobao-mini clients -- byte counts from the message layouts, refusals, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.bench import sfsl
from secemb.cli import app
from secemb.data.ctr import TaobaoShaped
from secemb.errors import InvalidParameters

HEADER, D, MLP = 32, 18, 49_242  # the framing header; DIN's d and dense layers (docs/sfsl.md)
DENSE_ROWS = -(-MLP // D)


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    return {s: sfsl.baseline_costs(s, 4, shape="taobao-mini", batch=8) for s in sfsl.COST_BASELINES}


def _used_categories() -> int:
    """The categories that hold at least one goods of the taobao-mini catalogue (the full model
    sends those; a category of no goods is never trained)."""
    world = TaobaoShaped("taobao-mini", 0)
    data = world.clients(np.arange(4))
    return int(np.unique(data.goods_category).size)


def test_pure_fl_sends_the_whole_model_down_and_its_update_up(rows) -> None:
    goods, cats = 2000, _used_categories()
    fl = rows["FL"]
    model_rows = goods + cats + DENSE_ROWS
    assert fl["rows"] == model_rows
    assert fl["download_bytes"]["download"] == HEADER + 4 * ((goods + cats) * D + MLP)
    assert fl["upload_bytes"]["download"] == 0  # the model is broadcast: no request
    # every row's float32 update (the dense rows zero-padded to d) and the uint32 sample count
    assert fl["upload_bytes"]["update"] == HEADER + 4 * model_rows * D + 4
    assert fl["download_bytes"]["update"] == 0 and fl["client_s"]["update"] == 0.0


def test_sfl_downloads_as_fl_and_sums_more_than_fl_uploads(rows) -> None:
    fl, sfl_row = rows["FL"], rows["SFL"]
    assert sfl_row["download_bytes"]["download"] == fl["download_bytes"]["download"]
    # the secure sum's masked input: every row of the row space plus the weight row, uint32
    space_rows = 2000 + 60 + DENSE_ROWS + 1
    assert sfl_row["upload_bytes"]["update"] > 4 * space_rows * D > fl["upload_bytes"]["update"] - HEADER - 4
    assert sfl_row["download_bytes"]["update"] > 0 and sfl_row["client_s"]["update"] > 0


def test_pure_fsl_asks_for_its_real_set_and_uploads_its_rows(rows) -> None:
    fsl = rows["FSL"]
    dense = DENSE_ROWS
    # request: header, count, the ids of S; rows = |S| + its categories + the dense rows
    goods = (fsl["upload_bytes"]["download"] - HEADER - 4) / 4
    cats = fsl["rows"] - goods - dense
    assert 0 < cats <= 60 and goods > 0
    assert fsl["download_bytes"]["download"] == pytest.approx(HEADER + 4 * ((goods + cats) * D + MLP))
    # ids, float32 updates, uint32 counts per row
    assert fsl["upload_bytes"]["update"] == pytest.approx(HEADER + 4 * fsl["rows"] * (D + 2))
    assert fsl["rows"] < rows["FL"]["rows"]


def test_an_unknown_scheme_is_refused() -> None:
    with pytest.raises(InvalidParameters, match="scheme"):
        sfsl.baseline_costs("CPP2", 4, shape="taobao-mini")


def test_cli_baselines_and_refusals(tmp_path) -> None:
    out = tmp_path / "b.json"
    res = CliRunner().invoke(app, ["bench", "sfsl", "--quick", "--parts", "baselines", "--baselines", "FSL,FL",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert [r["scheme"] for r in doc["baselines"]] == ["FSL", "FL"] and doc["plots"]
    for bad in (["--baselines", "XYZ"], ["--baseline-ns", "1"], ["--baseline-ns", "x"]):
        res = CliRunner().invoke(app, ["bench", "sfsl", "--parts", "baselines", *bad,
                                       "--out", str(tmp_path / "c.json")])
        assert res.exit_code == 2, (bad, res.output)
        assert "Traceback" not in res.output


def test_memory_of_a_client_is_measured_in_a_fresh_process() -> None:
    row = sfsl.memory("FL", 4, "client", shape="taobao-mini", batch=8)
    assert row["scheme"] == "FL" and row["what"] == "client" and row["rows"] == 2000 + _used_categories() + DENSE_ROWS
    # the peak above the RSS just before the client's work: at least the full model it received as float64
    assert row["work_mb"] > 8 * 2000 * D / 1e6
    assert row["process_mb"] == pytest.approx(row["base_mb"] + row["work_mb"])
    assert row["base_mb"] > 50  # the interpreter with numpy and torch imported


def test_memory_of_the_server_alone_is_measured_in_its_own_process() -> None:
    row = sfsl.memory("CPP1", 4, "server", shape="taobao-mini", batch=8)
    ref = sfsl.round_costs("CPP1", 4, shape="taobao-mini", batch=8)
    assert (row["scheme"], row["what"], row["n"]) == ("CPP1", "server", 4)
    # CPP1 draws nothing random: the round through the server's own process is the in-process
    # round, message for message (the same union, the same bytes per client)
    assert row["union"] == ref["union"] and row["perturbed"] == ref["perturbed"]
    assert row["client_bytes"] == sum(ref["upload_bytes"].values()) + sum(ref["download_bytes"].values())
    assert row["work_mb"] > 0 and row["process_mb"] == pytest.approx(row["base_mb"] + row["work_mb"])


def test_memory_plan_measures_the_server_alone_for_presets_only() -> None:
    steps = sfsl.plan(("memory",), memory_schemes=("CPP2", "SFL"), memory_ns=(10,), memory_what=("server", "round"))
    assert steps == [("memory", "server/CPP2", 10, 0.0), ("memory", "round/CPP2", 10, 0.0),
                     ("memory", "round/SFL", 10, 0.0)]


@pytest.mark.parametrize("scheme, what", [("CPP9", "client"), ("SFL", "server")])
def test_memory_refuses_unknown_schemes_and_parties(scheme, what) -> None:
    with pytest.raises(InvalidParameters, match="scheme"):
        sfsl.memory(scheme, 4, what, shape="taobao-mini")


def test_cli_memory(tmp_path) -> None:
    out = tmp_path / "m.json"
    res = CliRunner().invoke(app, ["bench", "sfsl", "--quick", "--parts", "memory", "--memory-schemes", "cpp2",
                                   "--memory-what", "client", "--out", str(out)])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(out.read_text())["memory"]
    assert (row["scheme"], row["what"], row["n"]) == ("CPP2", "client", 4) and row["work_mb"] > 0
    bad = CliRunner().invoke(app, ["bench", "sfsl", "--parts", "memory", "--memory-what", "disk",
                                   "--out", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
