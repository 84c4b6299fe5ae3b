"""``secemb train --protocol secea`` and ``secemb demo --network --protocol secea``: both train
(the full protocol, 2048-bit Paillier by default) and give the same ``model_sha256``; options
SecEA does not take are refused with exit 2, no traceback."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from secemb.cli import app


def run(args, tmp_path, name):
    out = tmp_path / f"{name}.json"
    res = CliRunner().invoke(app, [*args, "--json-out", str(out), "--quiet"], terminal_width=120)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_train_and_networked_demo_give_the_same_model(tmp_path):
    common = ["--protocol", "secea", "--epochs", "1", "--seed", "5"]
    local = run(["train", *common], tmp_path, "train")
    remote = run(["demo", "--network", *common], tmp_path, "demo")
    assert local["model_sha256"] == remote["model_sha256"]
    assert local["config"]["protocol"] == "secea" and local["config"]["secea_key_bits"] == 2048
    assert local["comm"]["upload_bytes_per_user_round"] == remote["comm"]["upload_bytes_per_user_round"] > 0
    assert 0 < local["epochs"][0]["test_metrics"]["rmse"] < 5


@pytest.mark.parametrize("args", [["--relay"], ["--model", "ncf"], ["--metrics", "auc"], ["--dim", "0"]])
def test_refused_options_exit_2(args, tmp_path):
    res = CliRunner().invoke(app, ["train", "--protocol", "secea", *args, "--json-out", str(tmp_path / "x.json")],
                             terminal_width=120)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "x.json").exists()
