"""Issue 35 item 1: the validation split (from the training ratings, never the test set) and the
best-validation-epoch model kept by early stopping."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.data import RatingData, load_dataset, train_test_split, validation_split
from secemb.errors import InvalidParameters
from secemb.inference.trained import TrainedModel
from secemb.models.base import UserStore
from secemb.models.optim import AdamConfig
from secemb.privacy.accounting import DPSettings
from secemb.round.results import EpochStats
from secemb.round.selection import EpochSelection
from secemb.training import Experiment, TrainConfig, run_experiment
from secemb.training.builder import build_experiment
from secemb.training.experiment import ExperimentResult
from secemb.training.loop import train

#: a learning rate high enough that the validation RMSE of MF on synthetic-mini rises again after
#: a few epochs (1.37, 1.43, 1.29, 1.25, 1.33, 1.39 at seed 0): the case early stopping is for
HIGH_LR = dict(dataset="synthetic-mini", model="mf", protocol="plaintext", users_per_round=50, lr=0.3)


def _pairs(data: RatingData) -> set[tuple[int, int]]:
    return set(zip(data.users.tolist(), data.items.tolist(), strict=True))


def _rows(data: RatingData) -> list[tuple[int, int, float]]:
    return sorted(zip(data.users.tolist(), data.items.tolist(), data.ratings.tolist(), strict=True))


# ---------------------------------------------------------------- the split


def test_validation_split_holds_out_per_user_and_keeps_one_rating_each() -> None:
    # user 0: 1 rating, user 1: 2, user 2: 10, user 3: none; valid_fraction 0.25 holds out
    # min(floor(0.25 n + 0.5), n - 1) = 0, 1 (not 0.5 -> 1 capped at 1), 3 (2.5 + 0.5 -> 3)
    users = np.array([0, 1, 1] + [2] * 10, dtype=np.int64)
    items = np.arange(13, dtype=np.int64)
    data = RatingData("toy", 4, 13, users, items, np.arange(13, dtype=np.float32))
    fit, val = validation_split(data, 0.25, seed=7)
    assert np.bincount(val.users, minlength=4).tolist() == [0, 1, 3, 0]
    assert np.bincount(fit.users, minlength=4).tolist() == [1, 1, 7, 0]
    assert sorted(_rows(fit) + _rows(val)) == _rows(data)  # a partition of the training ratings
    again = validation_split(data, 0.25, seed=7)[1]
    assert np.array_equal(again.items, val.items)  # deterministic under the seed
    assert any(not np.array_equal(validation_split(data, 0.25, seed=s)[1].items, val.items) for s in range(8, 16))
    assert len(validation_split(data, 0.0)[1]) == 0


@pytest.mark.parametrize("bad", [1.0, -0.1, True, "0.1"])
def test_validation_split_refuses_a_bad_fraction(bad: object) -> None:
    data = load_dataset("synthetic-mini")
    with pytest.raises(InvalidParameters, match="valid_fraction"):
        validation_split(data, bad)  # type: ignore[arg-type]


def test_the_experiment_validates_on_training_ratings_never_the_test_set() -> None:
    data = load_dataset("synthetic-mini", seed=3)  # a synthetic set is drawn from the run's seed
    assert len(_pairs(data)) == len(data)  # one rating per (user, item): pairs identify ratings
    train_all, test = train_test_split(data, 0.2, seed=3)
    built = build_experiment(Experiment(dataset="synthetic-mini", protocol="plaintext", seed=3, valid_fraction=0.1))
    assert built.val_data is not None and len(built.val_data) > 0
    assert _rows(built.test_data) == _rows(test)  # the test set is the one without validation
    assert not _pairs(built.val_data) & _pairs(built.test_data)
    assert not _pairs(built.val_data) & _pairs(built.train_data)
    assert sorted(_rows(built.train_data) + _rows(built.val_data)) == _rows(train_all)
    assert set(np.unique(built.train_data.users)) == set(np.unique(train_all.users))  # nobody loses all ratings
    assert built.extra_config["valid_fraction"] == 0.1


def test_options_that_cannot_work_are_refused() -> None:
    with pytest.raises(InvalidParameters, match="valid_fraction > 0"):
        build_experiment(Experiment(dataset="synthetic-mini", protocol="plaintext", early_stop=2))
    with pytest.raises(InvalidParameters, match=r"^valid_fraction must be a finite number in \[0, 1\), got 1.0$"):
        build_experiment(Experiment(dataset="synthetic-mini", protocol="plaintext", valid_fraction=1.0))
    with pytest.raises(InvalidParameters, match="DP guarantee"):
        TrainConfig(early_stop=2, dp=DPSettings(2.0, 1e-5, 1.0, "user"))
    with pytest.raises(InvalidParameters, match="early_stop must be"):
        TrainConfig(early_stop=0)
    built = build_experiment(Experiment(dataset="synthetic-mini", protocol="plaintext"))
    with pytest.raises(InvalidParameters, match="needs validation data"):
        train(built.model, built.protocol, built.train_data, built.test_data, replace(built.config, early_stop=1))


def test_a_sequential_task_keeps_its_own_validation_set() -> None:
    with pytest.raises(InvalidParameters, match="own validation set"):
        build_experiment(Experiment(dataset="synthetic-mini", model="sasrec", protocol="plaintext",
                                    valid_fraction=0.1))


# ---------------------------------------------------------------- the selection rule


def _stats(epoch: int, value: float, name: str) -> EpochStats:
    return EpochStats(epoch, None, 0.0, val_metrics={name: value})


def _store(value: float) -> UserStore:
    return UserStore(np.full((2, 1), value), AdamConfig(0.1))


def _snapshot(value: float) -> tuple[np.ndarray, np.ndarray, UserStore]:
    """A model whose table and device parameters all hold ``value`` (the epoch it stands for)."""
    return np.full((1, 1), value), np.zeros(1), _store(value)


@pytest.mark.parametrize(("metric", "scores", "kept", "stops_after"), [
    ("rmse", [1.0, 0.9, 0.95, 0.9, 0.97], 2, 4),   # lower is better; a tie keeps the earlier epoch
    ("auc", [0.6, 0.7, 0.65, 0.8, 0.8, 0.7], 4, 6),  # higher is better (the registry says so)
])
def test_the_selection_keeps_the_best_epoch_and_stops_after_patience(metric, scores, kept, stops_after) -> None:
    sel = EpochSelection(TrainConfig(metrics=(metric,), early_stop=2), load_dataset("synthetic-mini"))
    stopped_at = None
    for epoch, score in enumerate(scores, start=1):
        if sel.observe(_stats(epoch, score, metric), partial(_snapshot, float(epoch))):
            stopped_at = epoch
            break
    assert (sel.epoch_kept, stopped_at) == (kept, stops_after)
    table, _, store = sel.kept(np.full((1, 1), -1.0), np.zeros(1), _store(-1.0))
    assert table[0, 0] == kept and store.params[0, 0] == kept  # the copies made at the kept epoch


def test_without_early_stopping_the_last_epoch_is_kept_and_nothing_is_copied() -> None:
    sel = EpochSelection(TrainConfig(), None)

    def never() -> tuple[np.ndarray, np.ndarray, UserStore]:
        raise AssertionError("no copy without early stopping")

    assert not any(sel.observe(_stats(e, 1.0 / e, "rmse"), never) for e in (1, 2, 3))
    last = np.ones((1, 1))
    assert sel.epoch_kept == 3 and sel.kept(last, np.zeros(1), _store(0.0))[0] is last


# ---------------------------------------------------------------- training with it


@pytest.fixture(scope="module")
def stopped() -> ExperimentResult:
    return Experiment(**HIGH_LR, epochs=12, valid_fraction=0.2, early_stop=2).run()


def test_training_keeps_the_best_validation_epoch_and_stops(stopped) -> None:
    result = stopped.train_result
    val = [e.val_rmse for e in result.epochs]
    best = int(np.argmin(val)) + 1
    assert result.epoch_kept == best
    assert max(val[best:]) > val[best - 1]  # the validation RMSE rose after the kept epoch
    assert len(result.epochs) == best + 2 < 12  # stopped after 2 epochs without improvement
    assert stopped.metrics == result.epochs[best - 1].test_metrics  # the kept model's test metrics
    # the model returned is the one a run of `best` epochs ends with: public and device-private
    short = Experiment(**HIGH_LR, epochs=best, valid_fraction=0.2).run().train_result
    assert result.model_sha256 == short.model_sha256
    for key, arr in short.user_store.state_dict().items():
        assert np.array_equal(result.user_store.state_dict()[key], arr), key


def test_the_json_and_the_saved_model_name_the_epoch_kept(stopped, tmp_path) -> None:
    result = stopped.train_result
    doc = json.loads(result.to_json())
    sel = doc["selection"]
    assert sel["epoch_kept"] == result.epoch_kept and sel["epochs_run"] == len(result.epochs)
    assert (sel["valid_fraction"], sel["early_stop"], sel["metric"]) == (0.2, 2, "rmse")
    assert sel["valid_per_epoch"] == [e["val_metrics"]["rmse"] for e in doc["epochs"]]
    assert (doc["config"]["valid_fraction"], doc["config"]["early_stop"]) == (0.2, 2)
    stopped.model.save(tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["selection"] == sel and manifest["model_sha256"] == result.model_sha256
    loaded = TrainedModel.load(tmp_path / "m")
    assert loaded.info["selection"]["epoch_kept"] == result.epoch_kept
    assert np.array_equal(loaded.user_store.params, result.user_store.params)


def test_the_choice_does_not_depend_on_the_test_set() -> None:
    built = build_experiment(Experiment(**HIGH_LR, epochs=8, valid_fraction=0.2, early_stop=2))
    with_test = train(built.model, built.protocol, built.train_data, built.test_data, built.config,
                      val_data=built.val_data)
    without = train(built.model, built.protocol, built.train_data, None, built.config, val_data=built.val_data)
    assert (with_test.epoch_kept, with_test.model_sha256) == (without.epoch_kept, without.model_sha256)
    assert all(e.test_rmse is None for e in without.epochs)


@pytest.mark.parametrize(("model", "sha"), [
    # secemb train's default run before issue 35 (no validation, last epoch), computed at the commit before it
    ("mf", "de2a04999bdd6f8588d3408fdce2c848c4ebaea5eb6c2ed350ee3ad80e22d0e0"),
    ("ncf", "7a4c794a0f8e78d539bc14770076bb1d67c2ff11200d631d02a90ed781d66fae"),
])
def test_the_default_run_is_unchanged(model: str, sha: str) -> None:
    result = run_experiment(Experiment(dataset="synthetic-mini", model=model, protocol="plaintext", epochs=3,
                                       users_per_round=20))
    assert result.model_sha256 == sha and result.epoch_kept == 3 == len(result.epochs)
    assert result.selection()["early_stop"] is None and all(e.val_rmse is None for e in result.epochs)


def test_secemb_train_on_the_command_line(tmp_path) -> None:
    runner = CliRunner()
    out = tmp_path / "r.json"
    got = runner.invoke(app, ["train", "--dataset", "synthetic-mini", "--protocol", "plaintext", "--epochs", "4",
                              "--lr", "0.3", "--users-per-round", "50", "--valid-fraction", "0.2", "--early-stop", "1",
                              "--json-out", str(out), "-q"])
    assert got.exit_code == 0, got.output
    assert "epoch kept" in got.output
    sel = json.loads(out.read_text())["selection"]
    assert sel["early_stop"] == 1 and 1 <= sel["epoch_kept"] <= sel["epochs_run"] <= 4
    bad = runner.invoke(app, ["train", "--dataset", "synthetic-mini", "--early-stop", "2", "-q"])
    assert bad.exit_code == 2 and "valid_fraction" in bad.output


# ---------------------------------------------------------------- GREC's denoiser


def test_bench_grec_early_stops_both_models_on_the_validation_ratings(tmp_path) -> None:
    from secemb.bench import grec

    row = grec.run_one("mf", dataset="synthetic-mini", rec_epochs=3, den_epochs=6, users_per_round=20, m_prime=20,
                       early_stop=1, with_ranking=False, save_dir=tmp_path)[0]
    assert (row["valid_fraction"], row["early_stop"]) == (grec.VALID_FRACTION, 1)
    for sel, planned in ((row["rec_selection"], 3), (row["den_selection"], 6)):
        vals = sel["valid_per_epoch"]
        assert (sel["early_stop"], sel["valid_fraction"], sel["metric"]) == (1, grec.VALID_FRACTION, "rmse")
        assert sel["epoch_kept"] == int(np.argmin(vals)) + 1 and sel["epochs_run"] == len(vals)
        assert sel["epochs_run"] in (planned, sel["epoch_kept"] + 1)  # all planned, or stopped after patience 1
    assert len(row["den_test_per_epoch"]) == row["den_selection"]["epochs_run"]
    saved = tmp_path / "mf-seed0"
    with np.load(saved / "denoiser.npz") as f:
        assert json.loads(f["selection"].tobytes()) == row["den_selection"]
    assert json.loads((saved / "recommender" / "manifest.json").read_text())["selection"] == row["rec_selection"]
    assert grec.rank_saved(saved)["rec_model_sha256"] == row["rec_model_sha256"]  # the split is rebuilt


def test_bench_grec_refuses_early_stopping_without_validation(tmp_path) -> None:
    got = CliRunner().invoke(app, ["bench", "grec", "--dataset", "synthetic-mini", "--valid-fraction", "0",
                                   "--early-stop", "3", "--out", str(tmp_path / "t.json")])
    assert got.exit_code == 2 and "--early-stop 0 turns it off" in got.output
    assert not (tmp_path / "t.json").exists()


def test_a_networked_run_keeps_the_same_epoch_and_model() -> None:
    """Two server processes on 127.0.0.1, the devices here: early stopping in the one driver
    gives the in-process run's epoch, model and device state.  :data:`HIGH_LR` with 100 users a
    round (two rounds an epoch) and seed 3: validation RMSE 1.318, 1.292, 1.307, 1.341, so it keeps
    epoch 2 of 4 -- neither the first nor the last epoch, as at seed 0 (epoch 4 of 6), in 8 rounds
    over HTTP instead of 18."""
    from secemb.training.networked import train_on_local_cluster

    built = build_experiment(Experiment(**{**HIGH_LR, "users_per_round": 100}, seed=3, epochs=8, valid_fraction=0.2,
                                        early_stop=2))
    ref = train(built.model, built.protocol, built.train_data, built.test_data, built.config, val_data=built.val_data)
    got = train_on_local_cluster(built.model, built.protocol, built.train_data, built.test_data, built.config,
                                 val_data=built.val_data, device_randomness="reproducible")
    assert (len(ref.epochs), ref.epoch_kept) == (4, 2)  # it stopped early, keeping an epoch between the ends
    assert (got.epoch_kept, got.model_sha256, len(got.epochs)) == (ref.epoch_kept, ref.model_sha256, len(ref.epochs))
    assert np.array_equal(got.user_store.params, ref.user_store.params)
