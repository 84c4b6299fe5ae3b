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


def test_deepfm_split_tower_gives_the_slice_by_slice_gradient_exactly():
    """The deep tower reads W1 through one ``torch.split`` (a slice's backward zero-fills a
    full-size W1 gradient each): the step's gradients equal, bit for bit, those of the tower
    written with four slices of W1 (the formula of the module docstring, here)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from secemb.models.batch import rating_batch

    model, _, table, dense, store = setup("deepfm", 4)
    assert model.l_x and model.l_y
    rows = table[[3, 7, 11]].copy()
    pos, ratings = np.array([0, 1, 2, 1]), np.array([4.0, 3.0, 5.0, 2.0])
    before = store.params[2].copy()
    step = model.local_step(rows, dense, store.state(2), rating_batch(pos, ratings))

    def sliced(private, user_x, r, dense_fields):
        fm, y, v = model._parts(private, user_x, r, dense_fields)
        d, lx, w1 = model.dim, model.l_x, v["W1"]
        h = private[:, :d] @ w1[0] + r[:, :d] @ w1[1] + v["c1"]
        h = h + user_x @ torch.einsum("fd,fdh->fh", v["V_x"], w1[2 : 2 + lx])
        h = h + y @ torch.einsum("gd,gdh->gh", v["V_y"], w1[2 + lx :])
        z = torch.relu(F.layer_norm(h, (4 * d,), v["g1"], v["b1"]))
        z = torch.relu(F.layer_norm(z @ v["W2"] + v["c2"], (2 * d,), v["g2"], v["b2"]))
        return fm + z @ v["o"] + v["o0"]

    fields = model.layout.leaves(dense)
    rows_t = torch.tensor(model._rating_step_inputs(rows, dense, rating_batch(pos, ratings))[0], requires_grad=True)
    model_forward = model.forward
    try:
        model.forward = sliced
        loss = model.objective_torch(rows_t, fields, torch.tensor(before), rating_batch(pos, ratings), user=2)
    finally:
        model.forward = model_forward
    grads = torch.autograd.grad(loss, (rows_t, *fields.values()), allow_unused=True)
    want = np.zeros(model.dense_size)
    for name, g in zip(fields, grads[1:], strict=True):
        if g is not None:
            a, b, _ = model.layout.offsets[name]
            want[a:b] = g.numpy().reshape(-1)
    assert loss.item() == step.loss
    assert np.array_equal(step.dense_grad, want)
    got_rows = grads[0].numpy().copy()
    got_rows[:, model.trainable_width :] = 0.0
    assert np.array_equal(step.row_grads, got_rows)
