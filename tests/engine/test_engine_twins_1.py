"""The twins of ``secemb train`` and ``secemb demo --network`` (:mod:`twin_runs`), share 1 of
the networked protocols (``test_engine_twins.py`` has the matrix), and a sequential model's."""

from __future__ import annotations

import pytest

from twin_runs import share, twin_runs, twins


@pytest.mark.parametrize("model", ["mf", "fm"])
@pytest.mark.parametrize("protocol", share(1))
def test_train_and_demo_network_give_the_same_model(tmp_path, protocol, model):
    twins(tmp_path, protocol, model)


def test_a_sequential_model_runs_in_process_and_over_http(tmp_path):
    # SASRec: sampled negatives and dropout seeds come from the driver's generator, so the
    # devices behind HTTP train on what the in-process devices train on
    opts = ["--dataset", "synthetic-mini", "--model", "sasrec", "--protocol", "secemb", "--dim", "8",
            "--users-per-round", "60", "--epochs", "1", "--seed", "3", "--quiet"]
    a, _ = twin_runs(tmp_path, opts)
    assert a["config"]["task"] == "sequential" and "hr_sampled@10" in a["epochs"][0]["test_metrics"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["ncf", "deepfm"])
@pytest.mark.parametrize("protocol", share(1))
def test_train_and_demo_network_give_the_same_model_slow(tmp_path, protocol, model):
    twins(tmp_path, protocol, model)
