import numpy as np

from secemb.data.features import synthetic_features
from secemb.models import FactorizationMachine

from _feature_models import check_local_step, check_predict, setup


def test_fm_dense_size_matches_table9():
    for base, dense in (("ml-100k", 6696), ("ml-1m", 3121), ("ml-10m", 1301), ("yelp", 1041)):
        f = synthetic_features(base, 3, 5)
        assert FactorizationMachine(dim=64, features=f).dense_size == dense


def test_fm_forward_backward_shapes_and_gradients():
    model, feats, table, dense, store = setup("fm", 6)
    assert model.sparse_width == 6 + 1 + 2  # 19 genre bits need two code columns
    check_local_step(model, table, dense, store)
    check_predict(model, table, dense, store)


def test_fm_pairwise_term_equals_explicit_sum():

    model, feats, table, dense, store = setup("fm", 4)
    u, i = 1, 5
    v = model.layout.views(dense)
    embs = [store.params[u, :4], table[i, :4]]
    embs += [v["V_x"][f] for f in np.flatnonzero(feats.user[u])]
    embs += [v["V_y"][g] for g in np.flatnonzero(feats.item[i])]
    pair = sum(float(a @ b) for k, a in enumerate(embs) for b in embs[k + 1 :])
    lin = v["w0"] + store.params[u, 4] + table[i, 4] + feats.user[u] @ v["w_x"] + feats.item[i] @ v["w_y"]
    pred = model.predict(table, dense, store, np.array([u]), np.array([i]))[0]
    assert abs(pred - (lin + pair)) < 1e-10


def test_fm_without_features():
    m = FactorizationMachine(dim=8)
    assert m.dense_size == 1 and m.sparse_width == 9
