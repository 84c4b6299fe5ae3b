import pytest

from secemb.errors import InvalidParameters
from secemb.models import NCF, get_model

from _feature_models import check_local_step, check_predict, setup


def test_ncf_sizes_match_table9():
    for dim, dense in ((16, 688), (24, 1512), (20, 1060)):  # Table 9 "# Dense" (+ our global bias)
        m = NCF(dim=dim)
        assert m.dense_size == dense + 1
        assert m.sparse_width == 2 * dim + 1 == m.private_size
    assert NCF(dim=16).sparse_width * 1682 == 55_506  # Table 9 "# Sparse", ML-100K


def test_ncf_forward_backward_shapes_and_gradients():
    model, _, table, dense, store = setup("ncf", 8)
    check_local_step(model, table, dense, store)
    check_predict(model, table, dense, store)


def test_ncf_rejects_odd_dim():
    with pytest.raises(InvalidParameters):
        get_model("ncf", dim=7)
