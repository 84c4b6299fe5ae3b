"""RecModel.spec() is the constructor's arguments: get_model(name, **spec) rebuilds the model."""

import json

import numpy as np
import pytest

from secemb.data.features import synthetic_features
from secemb.errors import InvalidParameters
from secemb.models import MODELS, MatrixFactorization, get_model, uses_features

# non-default arguments, so a spec that fell back to defaults would be caught
_ARGS = {"mf": dict(dim=3, reg=0.02, init_std=0.3), "ncf": dict(dim=4, reg=0.003, init_std=0.2),
         "fm": dict(dim=3, reg=0.04, init_std=0.07), "deepfm": dict(dim=2, reg=0.05, init_std=0.02),
         "sasrec": dict(dim=4, max_len=7, blocks=1, dropout=0.1, reg=0.01, negatives=2),
         "caser": dict(dim=4, max_len=3, targets=2, n_v=2, n_h=3, dropout=0.25, reg=0.001, negatives=2, windows=5),
         "din": dict(num_categories=3, dim=4, reg=0.01, init_std=0.2)}
#: models registered by other packages, whose spec round trip is tested beside them (their public
#: initialization needs more than the spec: the denoiser's recommender)
_TESTED_ELSEWHERE = {"grec-denoiser": "tests/inference/test_denoiser.py::test_registered_and_sized"}


@pytest.mark.parametrize("name", sorted(_ARGS))
def test_spec_round_trips_through_get_model(name):
    feats = synthetic_features("ml-100k", 5, 12, seed=1)
    data = {"features": feats} if uses_features(name) else {}
    model = get_model(name, **_ARGS[name], **data)
    spec = json.loads(json.dumps(model.spec()))  # JSON-able, and what a config file carries
    assert spec == _ARGS[name]
    again = get_model(model.name, **spec, **data)
    assert type(again) is type(model) and again.spec() == model.spec() and again.hparams() == model.hparams()
    assert (again.sparse_width, again.dense_size, again.private_size) == (
        model.sparse_width, model.dense_size, model.private_size)
    a, b = model.init_public(12, np.random.default_rng(7)), again.init_public(12, np.random.default_rng(7))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_every_registered_model_has_a_test_case():
    import secemb.inference  # noqa: F401 - registers its model

    assert set(MODELS) <= set(_ARGS) | set(_TESTED_ELSEWHERE)


@pytest.mark.parametrize("name", ["fm", "deepfm"])
def test_feature_model_spec_has_no_data_derived_sizes(name):
    # hparams() records the feature counts; spec() must not carry them (l_x is no argument)
    model = get_model(name, dim=2, features=synthetic_features("ml-100k", 5, 12))
    assert model.hparams()["l_x"] == 84 and "l_x" not in model.spec()
    assert get_model(name, **model.spec()).l_x == 0  # builds (it crashed with l_x before)


def test_spec_refuses_a_constructor_it_cannot_read():
    class Wrapped(MatrixFactorization):
        def __init__(self, size: int = 2) -> None:
            super().__init__(dim=size)

    with pytest.raises(InvalidParameters, match="parameter 'size' is not stored"):
        Wrapped().spec()
