"""Secure federated submodel learning: quantization, wire format, one round against its
plaintext twin, dropouts, aborts, and what the server learns from the requests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sfsl_world import plaintext_twin, world

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.models.din import DIN, click_batch
from secemb.privacy.randomized_response import get_cpp
from secemb.protocols.sfsl import SFSLDevice, TrainingSettings, sfsl_round
from secemb.protocols.sfsl import wire
from secemb.protocols.sfsl.quantize import dequantize_mean, max_weight, quantize
from secemb.randomness import CtrDrbg
from secemb.secagg import SecAggAborted

torch.set_num_threads(1)


def test_quantize_hand_values() -> None:
    rng = np.random.default_rng(0)
    # 5 levels over [-1, 1]: the grid is -1, -0.5, 0, 0.5, 1 -> codes 0..4; grid points are exact
    z, clipped = quantize(np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 3.0]), 1.0, 5, rng)
    assert z.tolist() == [0, 1, 2, 3, 4, 4] and clipped == pytest.approx(1 / 6)
    # weights 1 and 3 on codes 0 and 4 of one row: mean code 3 -> 0.5
    mean = dequantize_mean(np.array([[0 * 1 + 4 * 3]], np.uint32), np.array([4], np.uint32), 1.0, 5)
    assert mean.tolist() == [[0.5]]
    # a row nobody touched stays 0
    assert dequantize_mean(np.zeros((1, 2), np.uint32), np.zeros(1, np.uint32), 1.0, 5).tolist() == [[0.0, 0.0]]
    # 100 clients at 2^15 levels: 100 * 1310 * 32767 < 2^32 <= 100 * 1311 * 32767
    assert max_weight(100) == 1310


def test_quantize_is_unbiased() -> None:
    rng = np.random.default_rng(1)
    x = np.full(200_000, 0.123456)
    z, _ = quantize(x, 1.0, 1 << 15, rng)
    mean = dequantize_mean(np.array([[z.astype(np.uint64).sum() % (1 << 32)]], np.uint32),
                           np.array([x.size], np.uint32), 1.0, 1 << 15)
    assert abs(mean[0, 0] - 0.123456) < 2e-6


def test_wire_round_trip_and_rejects() -> None:
    req = wire.request(7, np.array([1, 5, 9]))
    assert wire.open_request(req, 7, 10).tolist() == [1, 5, 9]
    for bad in (req[:-1], req + b"\0", req.replace(b"SEMB", b"XXXX")):
        with pytest.raises(InvalidMessage):
            wire.open_request(bad, 7, 10)
    with pytest.raises(InvalidMessage):
        wire.open_request(req, 8, 10)  # another round
    with pytest.raises(InvalidMessage):
        wire.open_request(req, 7, 9)  # id 9 outside the domain
    with pytest.raises(InvalidMessage):
        wire.open_request(wire.request(7, np.array([5, 1])), 7, 10)  # not increasing
    rep = wire.reply(7, np.ones((3, 2)), np.zeros((1, 2)), np.arange(4.0))
    g, c, m = wire.open_reply(rep, 7, 3, 1, 2, 4)
    assert g.shape == (3, 2) and c.tolist() == [[0.0, 0.0]] and m.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(InvalidMessage):
        wire.open_reply(rep, 7, 2, 1, 2, 4)


SETTINGS = TrainingSettings(lr=0.5, batch=4, bound=0.5)


@pytest.mark.parametrize("drop", [None, 1])
def test_round_equals_plaintext_twin_bit_for_bit(drop: int | None) -> None:
    # CPP1 draws no perturbation coins, so both runs train on the same sets with the same rng
    server_a, devices_a = world("CPP1")
    server_b, devices_b = world("CPP1")
    drop_after = {} if drop is None else {3: drop}  # device 3 drops after advertising (not in U2)
    rep = sfsl_round(server_a, devices_a, 1, SETTINGS, np.random.default_rng(11), drop_after=drop_after,
                     _rng=CtrDrbg(5))
    survivors = [u for u in range(5) if u not in drop_after]
    assert rep.survivors == survivors
    plaintext_twin(server_b, devices_b, 1, survivors, SETTINGS)
    assert np.array_equal(server_a.table, server_b.table) and np.array_equal(server_a.dense, server_b.dense)
    assert rep.updated_rows > 0 and rep.union_size == int(rep.owners.size) and rep.owners.min() >= 1
    # traffic is what crossed: every device sent and received bytes in every stage
    for u in range(5):
        assert all(rep.upload_bytes[u][s] > 0 for s in ("psu", "download", "secagg"))
        assert rep.download_bytes[u]["download"] > rep.upload_bytes[u]["download"]


def test_a_dropout_that_leaves_a_row_one_surviving_holder_aborts_and_leaves_the_model() -> None:
    """Device 3 drops after ShareKeys: revealing its mask key would open rows it held with one
    survivor (MIN_ROW_HOLDERS, finding R6), so the honest server aborts the round."""
    server, devices = world("CPP1")
    before = server.table.copy(), server.dense.copy()
    with pytest.raises(SecAggAborted, match="fewer than min_row_holders 2, and client 3"):
        sfsl_round(server, devices, 1, SETTINGS, np.random.default_rng(11), drop_after={3: 2}, _rng=CtrDrbg(5))
    assert np.array_equal(server.table, before[0]) and np.array_equal(server.dense, before[1])


def test_too_many_dropouts_abort_and_leave_the_model() -> None:
    server, devices = world("CPP2")
    before = server.table.copy(), server.dense.copy()
    with pytest.raises(SecAggAborted):
        sfsl_round(server, devices, 1, SETTINGS, np.random.default_rng(0), drop_after={0: 1, 1: 1, 2: 1},
                   _rng=CtrDrbg(1))
    assert np.array_equal(server.table, before[0]) and np.array_equal(server.dense, before[1])


def test_cpp5_requests_reveal_nothing_but_the_union() -> None:
    # CPP5: every device asks for the whole union, so its request does not depend on its own set
    server, devices = world("CPP5")
    union = np.unique(np.concatenate([d.real for d in devices.values()]))
    for dev in devices.values():
        assert wire.open_request(dev.request(union, 1), 1, server.space.goods).tolist() == union.tolist()
    # CPP1: the request is the real set
    _, devices1 = world("CPP1")
    assert wire.open_request(devices1[0].request(union, 1), 1, server.space.goods).tolist() \
        == devices1[0].real.tolist()


def test_device_rejects_a_foreign_sample() -> None:
    server, devices = world("CPP2", n=3)
    with pytest.raises(InvalidParameters):
        SFSLDevice(1, devices[0].samples, get_cpp("CPP2"), server.model, np.zeros(6))


@pytest.mark.parametrize("reg", [0.0, 0.05])
def test_device_step_is_sgd_on_the_full_model(reg: float) -> None:
    # one full-batch step of the device (per-field leaves, its category rows only) against the
    # model's objective on the full flat dense vector and the real category ids; CPP1: S'' = S
    server, devices = world("CPP1")
    model = DIN(num_categories=server.model.num_categories, dim=6, reg=reg)
    server.model = model
    dev = devices[1]
    dev.model = model
    union = np.unique(np.concatenate([d.real for d in devices.values()]))
    reply = server.reply(dev.request(union, 1), 1)
    goods, s, d = dev._perturbed, dev.samples, model.dim
    user0 = dev.user_embedding.copy()
    settings = TrainingSettings(lr=0.5, batch=10_000, bound=0.5)
    rows, values = dev.train(reply, 1, server.space, settings, np.random.default_rng(3))
    # the reply carries float32
    rows_t = torch.tensor(server.table[goods].astype(np.float32).astype(np.float64), requires_grad=True)
    dense_t = torch.tensor(server.dense.astype(np.float32).astype(np.float64), requires_grad=True)
    user_t = torch.tensor(user0, requires_grad=True)
    hist = np.where(s.history >= 0, np.searchsorted(goods, np.maximum(s.history, 0)), -1)
    batch = click_batch(np.searchsorted(goods, s.target), hist, s.goods_category[s.target],
                        np.where(s.history >= 0, s.goods_category[np.maximum(s.history, 0)], -1), s.label)
    g_rows, g_dense, g_user = torch.autograd.grad(model.objective_torch(rows_t, dense_t, user_t, batch),
                                                  (rows_t, dense_t, user_t))
    assert np.allclose(dev.user_embedding, user0 - 0.5 * g_user.numpy(), rtol=0, atol=1e-12)
    c = model.num_categories * d
    cats = np.unique(s.goods_category[goods])
    mlp = np.zeros(server.space.dense_rows * d)
    mlp[:model.mlp_size] = -0.5 * g_dense.numpy()[c:]
    expect = np.concatenate([-0.5 * g_rows.numpy(), -0.5 * g_dense.numpy()[:c].reshape(-1, d)[cats],
                             mlp.reshape(-1, d)])
    assert rows.tolist() == server.space.rows_of(goods, cats).tolist()
    w = values[:, d].astype(np.float64)
    touched = w > 0
    decoded = values[touched, :d] / w[touched, None] * (1.0 / (settings.levels - 1)) - 0.5
    assert np.abs(decoded - expect[touched]).max() <= 1.0 / (settings.levels - 1) + 1e-12
    assert np.abs(expect[touched]).max() > 10.0 / (settings.levels - 1)  # the step moved something
