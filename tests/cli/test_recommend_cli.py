"""Issue 13, items 9 and 13 end to end: ``secemb train --save-model`` then ``secemb
recommend``; the saved folder's manifest; corrupted or missing files; ``--metrics`` from the
registry; and the Python API (``secemb.Experiment(...).run()``) against the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import secemb
from secemb.cli import app
from secemb.training.builder import build_experiment

OPTIONS = ("--dataset", "synthetic-mini", "--epochs", "1", "--seed", "3", "--dim", "8")


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, list(args), terminal_width=120)


def _usage_error(res, text: str) -> None:  # noqa: ANN001
    """Exit 2, one ``error: ...`` line on stderr holding ``text``, no traceback."""
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and text in res.stderr, res.stderr
    assert "Traceback" not in res.output


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A model trained and saved through the CLI, and its result document."""
    root = tmp_path_factory.mktemp("saved")
    res = _run("train", *OPTIONS, "-q", "--save-model", str(root / "model"), "--json-out", str(root / "r.json"))
    assert res.exit_code == 0, res.output
    return root / "model", json.loads((root / "r.json").read_text())


def _recommend_json(folder: Path, user: int, k: int = 10) -> dict:
    res = _run("recommend", "--model-dir", str(folder), "--user", str(user), "-k", str(k), "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / "copy"))


def test_manifest_records_the_run_and_the_model_hash(saved: tuple[Path, dict]) -> None:
    folder, result = saved
    assert sorted(p.name for p in folder.iterdir()) == ["devices.npz", "manifest.json", "public.npz"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["model_sha256"] == result["model_sha256"]
    assert (manifest["format"], manifest["version"]) == ("secemb-model", 1)
    assert (manifest["protocol"], manifest["model"], manifest["dataset"], manifest["seed"]) == (
        "secemb", "mf", "synthetic-mini", 3)
    assert manifest["model_spec"] == result["config"]["model_hparams"]
    with np.load(folder / "public.npz", allow_pickle=False) as npz:  # plain arrays, no pickle
        assert sorted(npz.files) == ["dense", "table"] and npz["table"].shape == (300, manifest["model_spec"]["dim"] + 1)


def test_recommend_prints_k_items_the_user_did_not_rate_in_training(saved: tuple[Path, dict]) -> None:
    folder, _ = saved
    built = build_experiment(secemb.Experiment(dataset="synthetic-mini", seed=3, dim=8))
    train = built.train_data
    for user in (0, 7, 119):
        rec = _recommend_json(folder, user)
        rated = set(train.items[train.users == user].tolist())
        assert rated and len(rec["items"]) == 10 == len(set(rec["items"]))
        assert not rated & set(rec["items"])
        assert rec["scores"] == sorted(rec["scores"], reverse=True)
        assert rec == _recommend_json(folder, user)  # deterministic
    lines = _run("recommend", "--model-dir", str(folder), "--user", "7", "-k", "4").stdout.splitlines()
    assert lines[0].startswith("top 4 unrated items for user 7 (mf, secemb, synthetic-mini)")
    assert [int(line.split()[1]) for line in lines[2:]] == _recommend_json(folder, 7, 4)["items"]


def test_recommend_rejects_a_user_out_of_range(saved: tuple[Path, dict]) -> None:
    _usage_error(_run("recommend", "--model-dir", str(saved[0]), "--user", "120"), "user must be in [0, 120), got 120")


def test_recommend_without_a_model_folder_is_a_usage_error(tmp_path: Path) -> None:
    _usage_error(_run("recommend", "--model-dir", str(tmp_path / "nope"), "--user", "0"), "nothing there")
    _usage_error(_run("recommend", "--model-dir", str(tmp_path), "--user", "0"), "manifest.json: missing")


@pytest.mark.parametrize("name", ["public.npz", "devices.npz"])
def test_recommend_refuses_a_corrupted_file(saved: tuple[Path, dict], tmp_path: Path, name: str) -> None:
    folder = _copy(saved[0], tmp_path)
    data = bytearray((folder / name).read_bytes())
    data[len(data) // 2] ^= 1
    (folder / name).write_bytes(bytes(data))
    _usage_error(_run("recommend", "--model-dir", str(folder), "--user", "0"),
                 f"{name}: SHA-256")


@pytest.mark.parametrize("name", ["public.npz", "devices.npz"])
def test_recommend_refuses_a_missing_file(saved: tuple[Path, dict], tmp_path: Path, name: str) -> None:
    folder = _copy(saved[0], tmp_path)
    (folder / name).unlink()
    _usage_error(_run("recommend", "--model-dir", str(folder), "--user", "0"), f"{name}: missing")


def test_recommend_refuses_a_malformed_manifest(saved: tuple[Path, dict], tmp_path: Path) -> None:
    folder = _copy(saved[0], tmp_path)
    (folder / "manifest.json").write_text("{not json")
    _usage_error(_run("recommend", "--model-dir", str(folder), "--user", "0"), "manifest.json: not valid JSON")
    manifest = json.loads((saved[0] / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "version": 2}))
    _usage_error(_run("recommend", "--model-dir", str(folder), "--user", "0"), "expected format 'secemb-model' version 1")


def test_recommend_refuses_a_model_other_than_the_manifests(saved: tuple[Path, dict], tmp_path: Path) -> None:
    """File hashes consistent, model hash not: the arrays were swapped for others."""
    folder = _copy(saved[0], tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["model_sha256"] = "0" * 64
    (folder / "manifest.json").write_text(json.dumps(manifest))
    _usage_error(_run("recommend", "--model-dir", str(folder), "--user", "0"),
                 "public.npz: the model's SHA-256 differs from the manifest's")


def test_save_model_path_is_checked_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = _run("train", *OPTIONS, "-q", "--save-model", str(blocker))
    _usage_error(res, f"--save-model {blocker}: expected a folder, got a file")
    assert "epoch" not in res.output


def test_train_metrics_from_the_registry(tmp_path: Path) -> None:
    res = _run("train", *OPTIONS, "-q", "--metrics", "rmse, mae", "--json-out", str(tmp_path / "r.json"))
    assert res.exit_code == 0, res.output
    assert "final test RMSE" in res.stdout and "final test MAE" in res.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["config"]["metrics"] == ["rmse", "mae"]
    assert set(doc["epochs"][-1]["test_metrics"]) == {"rmse", "mae"}


@pytest.mark.parametrize(("metrics", "message"), [
    ("rmse,nope", "unknown metric 'nope'"),
    ("ndcg", "needs a cut-off"),
    ("ndcg@10", "model 'mf' does not rank next items"),
])
def test_train_refuses_a_bad_metric_before_any_epoch(metrics: str, message: str) -> None:
    res = _run("train", *OPTIONS, "--metrics", metrics)
    _usage_error(res, message)
    assert "epoch " not in res.output


# --- item 13: the Python API ------------------------------------------------------------------------


def test_api_run_equals_the_cli(saved: tuple[Path, dict]) -> None:
    folder, doc = saved
    result = secemb.Experiment(dataset="synthetic-mini", epochs=1, seed=3, dim=8, metrics=["rmse", "mae"]).run()
    assert result.model_sha256 == doc["model_sha256"] == result.model.model_sha256
    assert set(result.metrics) == {"rmse", "mae"}
    assert result.metrics["rmse"] == pytest.approx(doc["epochs"][-1]["test_rmse"])
    r = result.train_result
    assert result.traffic["upload_bytes_per_user_round"] == r.upload_bytes_per_user_round > 0
    assert result.traffic["download_bytes_per_user_round"] == r.download_bytes_per_user_round > 0
    rec = result.model.recommend(5, k=10)
    assert rec.items.tolist() == _recommend_json(folder, 5)["items"]


def test_import_secemb_stays_light() -> None:
    code = ("import sys, secemb; heavy = [m for m in ('torch', 'secemb.training') if m in sys.modules]; "
            "print(heavy); assert not heavy; assert secemb.Experiment.__module__ == 'secemb.training.experiment'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in readme.split("```python\n")[1:] if "secemb.Experiment(" in b]
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0].split("```")[0], "README.md", "exec"), {})  # noqa: S102 - the README's own example
    assert (tmp_path / "my-model" / "manifest.json").is_file()
