"""``secemb train --adversary ATTACK --adversaries K`` (issue 34): malicious devices in an
in-process run; the JSON reports ``rejected_devices`` per round; bad usage is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from secemb.cli import app

SMALL = ["--dataset", "synthetic-mini", "--epochs", "1", "--users-per-round", "20", "--m-prime", "8", "--dim", "4",
         "-q"]


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["train", *args], terminal_width=120)


def test_adversaries_are_reported_per_round(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    res = _run(*SMALL, "--adversary", "two-points", "--adversaries", "3", "--json-out", str(out))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    per_round = doc["rejected_devices"]
    assert len(per_round) == doc["rounds"] == len(doc["adversary"]["rounds"])
    rejected = [u for ids in per_round for u in ids]
    assert rejected and set(rejected) <= {0, 1, 2}
    assert all(r["malicious_included"] == [] for r in doc["adversary"]["rounds"])
    assert doc["adversary"]["attack"] == "two-points" and doc["adversary"]["adversaries"] == 3


def test_bad_adversary_usage_is_one_line() -> None:
    for args, text in ((["--adversary", "nonsense"], "--adversary must be one of"),
                       (["--adversary", "two-points", "--protocol", "plaintext"], "--protocol secemb")):
        res = _run(*SMALL, *args)
        assert res.exit_code == 2, res.output
        assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1 and text in res.stderr, res.stderr
