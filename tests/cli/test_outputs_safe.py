"""Issue 32, item 2: no command loses a user's file.  Outputs refuse to replace an input, a
non-empty folder that holds no model of ours, or (without ``--force``) an earlier result; every
output is checked writable before any training; writes are atomic, so a Ctrl-C (exit 130) or a
failed write leaves the earlier file as it was."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.outputs import (
    NonFiniteValue,
    OutputRefused,
    atomic_dir,
    atomic_write_bytes,
    check_output,
    dumps_strict,
)

QUICK = ["--protocol", "plaintext", "--dataset", "synthetic-mini", "--model", "mf", "--dim", "4", "--epochs", "1",
         "-q"]


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, list(args), terminal_width=120)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _refused(res, text: str) -> None:  # noqa: ANN001
    """Exit 2, one ``error:`` line holding ``text``, before any epoch."""
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1 and text in res.stderr, res.stderr
    assert "epoch" not in res.stdout and "Traceback" not in res.output


@pytest.fixture()
def ratings(tmp_path: Path) -> Path:
    """A user's own rating file with string ids."""
    path = tmp_path / "ratings.csv"
    rows = [f"user{u},item{(u * 7 + k) % 23},{1 + (u + k) % 5}" for u in range(12) for k in range(6)]
    path.write_text("user,item,rating\n" + "\n".join(rows) + "\n")
    return path


# --- an input is never an output ----------------------------------------------------------------


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_json_out_naming_the_dataset_is_refused_and_the_file_kept(ratings: Path, force: list[str]) -> None:
    before = _digest(ratings)
    res = _run("train", "--dataset", str(ratings), "--json-out", str(ratings), "--epochs", "1", "-q", *force)
    _refused(res, f"--json-out {ratings}: is an input of this command")
    assert _digest(ratings) == before


def test_an_input_reached_through_a_link_is_refused(ratings: Path, tmp_path: Path) -> None:
    hard, soft = tmp_path / "hard.json", tmp_path / "soft.json"
    os.link(ratings, hard)
    soft.symlink_to(ratings)
    for out in (hard, soft):
        with pytest.raises(OutputRefused, match="is an input of this command"):
            check_output(out, option="--json-out", force=True, inputs=[ratings])


def test_a_model_folder_holding_an_input_is_refused(ratings: Path) -> None:
    res = _run("train", "--dataset", str(ratings), "--save-model", str(ratings.parent), "--force", "--epochs", "1")
    _refused(res, "holds an input of this command")


@pytest.mark.parametrize("json_name", ["model", "model/r.json"])
def test_json_out_inside_the_model_folder_is_refused(tmp_path: Path, json_name: str) -> None:
    # the model folder is replaced whole after the JSON is written: the JSON would be lost
    res = _run("train", *QUICK, "--json-out", str(tmp_path / json_name), "--save-model", str(tmp_path / "model"))
    _refused(res, "lies in --save-model")
    assert list(tmp_path.iterdir()) == []


# --- folders that are not ours, results that exist ----------------------------------------------


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_save_model_into_a_foreign_folder_is_refused(tmp_path: Path, force: list[str]) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8 not a model")
    res = _run("train", *QUICK, "--save-model", str(folder), *force)
    _refused(res, "a folder that is not empty and holds no model saved by secemb")
    assert sorted(p.name for p in folder.iterdir()) == ["cat.jpg"]


def test_an_existing_result_needs_force(tmp_path: Path) -> None:
    out, model = tmp_path / "r.json", tmp_path / "model"
    assert _run("train", *QUICK, "--json-out", str(out), "--save-model", str(model)).exit_code == 0
    first_json, first_manifest = _digest(out), _digest(model / "manifest.json")
    _refused(_run("train", *QUICK, "--seed", "1", "--json-out", str(out)), "exists; pass --force to replace it")
    _refused(_run("train", *QUICK, "--seed", "1", "--save-model", str(model)),
             "holds a saved model; pass --force to replace it")
    assert _digest(out) == first_json and _digest(model / "manifest.json") == first_manifest
    res = _run("train", *QUICK, "--seed", "1", "--json-out", str(out), "--save-model", str(model), "--force")
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["config"]["seed"] == 1
    assert json.loads((model / "manifest.json").read_text())["seed"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "r.json"]  # no temporary left behind


# --- checked before any work --------------------------------------------------------------------


@pytest.mark.parametrize(("option", "path"), [("--save-model", "/proc/x"), ("--json-out", "/proc/x.json")])
def test_an_unwritable_output_fails_before_training(option: str, path: str) -> None:
    t0 = time.monotonic()
    res = _run("train", "--epochs", "5", option, path)
    _refused(res, f"{option} {path}: cannot be written")
    assert time.monotonic() - t0 < 10.0  # the bound: seconds, not an epoch


def test_the_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "model"
    assert check_output(target, kind="model-dir") == target
    assert list(tmp_path.iterdir()) == []  # the folders made for the probe are removed again
    with pytest.raises(OutputRefused, match="which is a file"):
        (tmp_path / "f").write_text("")
        check_output(tmp_path / "f" / "r.json")


# --- atomic writes and strict JSON --------------------------------------------------------------


def test_an_interrupted_write_keeps_the_earlier_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r.json"
    out.write_bytes(b"earlier")

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(out, b"new")
    assert out.read_bytes() == b"earlier" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_an_interrupted_model_save_keeps_the_earlier_folder(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "manifest.json").write_text("earlier")
    with pytest.raises(KeyboardInterrupt), atomic_dir(model) as tmp:
        (tmp / "manifest.json").write_text("half")
        raise KeyboardInterrupt
    assert (model / "manifest.json").read_text() == "earlier" and [p.name for p in tmp_path.iterdir()] == ["model"]
    with atomic_dir(model) as tmp:
        (tmp / "manifest.json").write_text("new")
    assert (model / "manifest.json").read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["model"]


def test_an_interrupted_swap_puts_the_earlier_folder_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "manifest.json").write_text("earlier")
    replace, calls = os.replace, []

    def second_interrupted(src: str, dst: str) -> None:  # the earlier folder moved aside, then Ctrl-C
        calls.append(src)
        if len(calls) == 2:
            raise KeyboardInterrupt
        replace(src, dst)

    monkeypatch.setattr(os, "replace", second_interrupted)
    with pytest.raises(KeyboardInterrupt), atomic_dir(model) as tmp:
        (tmp / "manifest.json").write_text("new")
    assert len(calls) == 3  # aside, the interrupted swap, back
    assert (model / "manifest.json").read_text() == "earlier" and [p.name for p in tmp_path.iterdir()] == ["model"]


def test_json_is_strict() -> None:
    assert dumps_strict({"a": [1.5, None]}) == '{"a": [1.5, null]}'
    with pytest.raises(NonFiniteValue, match=r"epochs\[1\]\.train_loss = nan"):
        dumps_strict({"epochs": [{"train_loss": 0.5}, {"train_loss": float("nan")}]})
    with pytest.raises(NonFiniteValue, match=r"privacy\.epsilon = inf"):
        dumps_strict({"privacy": {"epsilon": float("inf")}})


def test_ctrl_c_during_training_exits_130_and_keeps_the_earlier_result(tmp_path: Path) -> None:
    out, model = tmp_path / "r.json", tmp_path / "model"
    out.write_text('{"earlier": true}\n')
    proc = subprocess.Popen(
        # a terminal's Ctrl-C: Python's handler even where this test runs as a background job (a
        # non-interactive shell's `&` starts it with SIGINT ignored, which the child would inherit)
        [sys.executable, "-c", "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
         "from secemb.cli import main; main()", "train", "--protocol", "plaintext",
         "--epochs", "500", "--json-out", str(out), "--save-model", str(model), "--force"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # interrupt once training is under way
            if line.startswith("epoch"):
                break
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert out.read_text() == '{"earlier": true}\n' and not model.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_demo_workdir_must_be_new_or_empty(tmp_path: Path) -> None:
    # the demo writes a deployment there (keys, configs, state, logs by fixed names) and makes it 0700
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    (home / "ca.pem").write_text("the user's own")
    res = _run("demo", "--network", "--dataset", "synthetic-mini", "--epochs", "1", "-q", "--workdir", str(home))
    _refused(res, f"--workdir {home}: not empty")
    assert (home / "ca.pem").read_text() == "the user's own" and home.stat().st_mode & 0o777 == 0o755


def test_a_non_finite_result_is_exit_1_and_keeps_the_earlier_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from secemb.round.results import TrainResult

    out = tmp_path / "r.json"
    out.write_text('{"earlier": true}\n')
    to_dict = TrainResult.to_dict

    def with_nan(self: TrainResult) -> dict:
        doc = to_dict(self)
        doc["epochs"][0]["train_loss"] = float("nan")
        return doc

    monkeypatch.setattr(TrainResult, "to_dict", with_nan)
    res = _run("train", *QUICK, "--json-out", str(out), "--force")
    assert res.exit_code == 1, res.output
    assert res.stderr == f"error: {out} not written: the result is not valid JSON: epochs[0].train_loss = nan\n"
    assert out.read_text() == '{"earlier": true}\n' and [p.name for p in tmp_path.iterdir()] == ["r.json"]
