"""Simulation and deployment are one engine: every registered protocol that declares itself
networked, with MF and FM (NCF and DeepFM marked slow), trained by ``secemb train`` (server
nodes in process) and by ``secemb demo --network`` (the same nodes in two server processes,
devices over HTTP) with one seed, gives the same model bit for bit, the same per-epoch metrics
and the same per-user traffic (:mod:`twin_runs`).

The protocols' twins are dealt to three files (:func:`twin_runs.share`): this one (share 0, and
the matrix's coverage), ``test_engine_twins_1.py`` and ``test_engine_twins_2.py``, which also hold
the twins of the plug-in, DeepFM and SASRec."""

from __future__ import annotations

import pytest

from twin_runs import NETWORKED, share, twins


def test_the_matrix_covers_every_networked_protocol():
    assert {"secemb", "plaintext", "secfedrec", "secemb-init", "secemb-rowenc", "grec", "svd", "colr"} <= set(
        NETWORKED)
    assert "quant8" not in NETWORKED and "ternary" not in NETWORKED  # they declare networked=False


@pytest.mark.parametrize("model", ["mf", "fm"])
@pytest.mark.parametrize("protocol", share(0))
def test_train_and_demo_network_give_the_same_model(tmp_path, protocol, model):
    twins(tmp_path, protocol, model)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["ncf", "deepfm"])
@pytest.mark.parametrize("protocol", share(0))
def test_train_and_demo_network_give_the_same_model_slow(tmp_path, protocol, model):
    twins(tmp_path, protocol, model)
