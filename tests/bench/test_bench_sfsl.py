"""secemb bench sfsl: Table V's structure, byte counts that match the message layouts, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
from typer.testing import CliRunner

from secemb.bench import sfsl
from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.cli import app


def test_table5_rows() -> None:
    t5 = sfsl.table5(n=8, shape="taobao-mini")
    rows = {r["preset"]: r for r in t5["presets"]}
    assert set(rows) == {"CPP1", "CPP2", "CPP3", "CPP4", "CPP5"}
    # CPP1: p7 is the share of single-owner indices; CPP5: nothing learnt
    assert math.isclose(rows["CPP1"]["p7"], t5["single_owner_share"])
    assert rows["CPP5"]["p7"] == rows["CPP5"]["p8"] == 0.0
    assert rows["CPP2"]["paper"]["eps_one"] == 2.02


def test_download_bytes_match_the_wire_layout() -> None:
    row = sfsl.round_costs("CPP1", 4, shape="taobao-mini", batch=16)
    header, d = 32, 18  # the framing header (docs/wire-format.md)
    # CPP1: S'' is the real set; request = header + count + ids, reply = rows, category rows, MLPs (float32)
    assert row["upload_bytes"]["download"] == header + 4 + 4 * row["perturbed"]
    mlp = 49_242
    assert row["download_bytes"]["download"] > header + 4 * (row["perturbed"] * d + mlp)


def test_cli(tmp_path) -> None:
    out = tmp_path / "s.json"
    res = CliRunner().invoke(app, ["bench", "sfsl", "--quick", "--parts", "table5", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "CPP2" in json.dumps(json.loads(out.read_text())["table5"])
    bad = CliRunner().invoke(app, ["bench", "sfsl", "--parts", "nope", "--out", str(out)])
    assert bad.exit_code == 2
    bad = CliRunner().invoke(app, ["bench", "sfsl", "--presets", "CPP9", "--out", str(out)])
    assert bad.exit_code == 2


def test_cli_figure_plots_and_merge(tmp_path) -> None:
    # Figure 5 at one n and Figure 4 with one SFSL and one baseline curve, in two runs merged by --from
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    res = CliRunner().invoke(app, ["bench", "sfsl", "--quick", "--parts", "fig5", "--presets", "CPP5",
                                   "--out", str(a)])  # --quick: n = 4, and CPP2 at n = 6
    assert res.exit_code == 0, res.output
    assert (tmp_path / "a-fig5.png").stat().st_size > 10_000
    res = CliRunner().invoke(app, ["bench", "sfsl", "--quick", "--parts", "fig4", "--curves", "CPP2,fl",
                                   "--out", str(b)])
    assert res.exit_code == 0, res.output
    curves = json.loads(b.read_text())["fig4"]
    assert [x["scheme"] for x in curves] == ["CPP2", "fl"]
    assert all(x["rounds_run"] == 2 and set(x["auc"]) == {"1", "2"} for x in curves)
    res = CliRunner().invoke(app, ["bench", "sfsl", "--parts", "", "--from", f"{a},{b}", "--out", str(c)])
    assert res.exit_code == 0, res.output
    merged = json.loads(c.read_text())
    assert len(merged["fig5"]) == 2 and len(merged["fig4"]) == 2
    assert (tmp_path / "c-fig5.png").exists() and (tmp_path / "c-fig4.png").exists()
    for bad in (["--parts", "fig4", "--curves", "SFL"], ["--parts", "", "--from", str(tmp_path / "none.json")]):
        assert CliRunner().invoke(app, ["bench", "sfsl", *bad, "--out", str(c)]).exit_code == 2


def test_curve_stops_on_its_time_budget() -> None:
    train, test = split_clicks(TaobaoShaped("taobao-mini", 1).clients(np.arange(6)))
    row = sfsl.curve(train, test, "centralized", clients_per_round=3, rounds=50, batch=8, eval_every=2, seconds=0.0)
    assert row["stopped_by_time"] and row["rounds_run"] == 2 and list(row["auc"]) == ["2"]
