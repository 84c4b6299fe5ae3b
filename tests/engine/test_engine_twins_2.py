"""The twins of ``secemb train`` and ``secemb demo --network`` (:mod:`twin_runs`), share 2 of
the networked protocols (``test_engine_twins.py`` has the matrix), DeepFM's and a protocol
plug-in's."""

from __future__ import annotations

import pytest

from twin_runs import share, twins


@pytest.mark.parametrize("model", ["mf", "fm"])
@pytest.mark.parametrize("protocol", share(2))
def test_train_and_demo_network_give_the_same_model(tmp_path, protocol, model):
    twins(tmp_path, protocol, model)


@pytest.mark.parametrize("model", ["deepfm"])  # FM: in the matrix
def test_regression_demo_network_trains_feature_models(tmp_path, model):
    # issue 11, defect 2: `secemb demo --model fm` (and deepfm) crashed -- the servers could not
    # build the model from its hyperparameters ('unexpected keyword argument l_x') nor load its
    # public item features; now they build it from model.spec() and read the demo's features file
    twins(tmp_path, "plaintext", model)


def test_a_protocol_plug_in_runs_in_process_and_over_http(tmp_path, fulldownload_plugin):
    # examples/protocol_plugin: one module plus its entry point; the server processes of the
    # demo find it the way they find the built-in protocols
    twins(tmp_path, fulldownload_plugin, "mf")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["ncf", "deepfm"])
@pytest.mark.parametrize("protocol", share(2))
def test_train_and_demo_network_give_the_same_model_slow(tmp_path, protocol, model):
    twins(tmp_path, protocol, model)
