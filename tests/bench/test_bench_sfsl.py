"""secemb bench sfsl: Table V's structure, byte counts that match the message layouts, the CLI."""

from __future__ import annotations

import json
import math

from typer.testing import CliRunner

from secemb.bench import sfsl
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
    header, d = 18, 18
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
