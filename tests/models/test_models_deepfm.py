from secemb.data.features import synthetic_features
from secemb.models import DeepFM

from _feature_models import check_local_step, check_predict, setup


def test_deepfm_dense_size_matches_table9():
    assert DeepFM(dim=64, features=synthetic_features("ml-100k", 3, 5)).dense_size == 1_761_065
    assert DeepFM(dim=64, features=synthetic_features("ml-1m", 3, 5)).dense_size == 856_370


def test_deepfm_forward_backward_shapes_and_gradients():
    model, _, table, dense, store = setup("deepfm", 4)
    check_local_step(model, table, dense, store)
    check_predict(model, table, dense, store)
