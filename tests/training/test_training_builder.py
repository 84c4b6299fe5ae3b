"""One experiment builder for every driver (issue 11), and models added with register_model
(issue 13 item 8)."""

import pytest

from secemb.errors import InvalidParameters
from secemb.models import MODELS, MatrixFactorization, register_model
from secemb.training import Experiment, run_experiment
from secemb.training.builder import build_experiment, experiment_hparams


class MyMF(MatrixFactorization):
    name = "mymf"


@pytest.fixture
def mymf():
    register_model("mymf", MyMF)  # the documented way to add a model
    yield "mymf"
    del MODELS["mymf"]


def test_a_registered_model_trains_with_dim_lr_and_reg_given(mymf):
    exp = Experiment(dataset="synthetic", model=mymf, protocol="plaintext", epochs=1, users_per_round=200,
                     dim=4, lr=0.02, reg=0.01)
    result = run_experiment(exp)
    assert result.config["model"] == "mymf" and result.final_rmse is not None
    # the same experiment as plain MF gives the same model: the builder used the values given
    mf = run_experiment(Experiment(dataset="synthetic", model="mf", protocol="plaintext", epochs=1,
                                   users_per_round=200, dim=4, lr=0.02, reg=0.01))
    assert result.model_sha256 == mf.model_sha256


def test_a_model_without_presets_names_what_is_missing(mymf):
    with pytest.raises(InvalidParameters, match="no preset for model 'mymf'.*give lr, reg"):
        build_experiment(Experiment(model=mymf, dim=4))


def test_presets_fill_what_is_not_given():
    # Table 8, MF on ML-100K: dim 64, lr 0.025, reg 0.01 (synthetic and own files use it)
    assert experiment_hparams(Experiment(model="mf")) == {"dim": 64, "lr": 0.025, "reg": 0.01}
    assert experiment_hparams(Experiment(model="mf", dataset="mine.csv", lr=0.5)) == {"dim": 64, "lr": 0.5, "reg": 0.01}
    # FM on ML-1M: dim 64, lr 0.025, reg 0.001
    assert experiment_hparams(Experiment(model="fm", dataset="synthetic-ml-1m")) == {"dim": 64, "lr": 0.025, "reg": 0.001}


def test_built_feature_model_carries_the_dataset_features():
    built = build_experiment(Experiment(dataset="synthetic", model="fm", protocol="plaintext", dim=4))
    assert built.features is not None and built.model.features is built.features
    assert built.model.l_x == built.features.l_x == 84
    assert built.train_data.num_items == built.test_data.num_items == built.features.num_items
    assert built.extra_config == {"dataset": "synthetic", "test_fraction": 0.2, "valid_fraction": 0.0, "split_seed": 0,
                                  "dim": 4, "reg": 0.1,
                                  "task": "rating", "evaluation": "random split of the ratings (test_fraction)"}
    assert built.val_data is None and built.config.metrics == ("rmse",)


def test_a_sequential_model_gets_leave_one_out_and_ranking_metrics():
    built = build_experiment(Experiment(dataset="synthetic-mini", model="sasrec", protocol="plaintext", dim=4))
    assert built.val_data is not None
    assert built.test_data.num_ratings == built.val_data.num_ratings == 120  # one each per user (all have >= 5)
    assert built.config.metrics == ("hr@10", "ndcg@10", "hr_sampled@10", "ndcg_sampled@10")
    assert built.config.m_prime == 101  # SASRec, L = 50: 51 positives + 50 negatives
    assert built.extra_config["task"] == "sequential" and "leave-one-out" in built.extra_config["evaluation"]
