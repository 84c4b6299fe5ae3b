"""The inference exchange: the server's view is the device's noisy representation and its own
public candidate set, nothing else (a transcript test); the device's predictions."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP, privatize
from secemb.inference.service import InferenceDevice, InferenceServer, decode_request, infer
from secemb.models import MatrixFactorization
from secemb.randomness import CtrDrbg
from secemb.transport.inprocess import DOWNLOAD, UPLOAD, InProcessTransport


class _Recording(InProcessTransport):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, str, bytes]] = []

    def send(self, src: str, dst: str, payload: bytes, *, stage: str) -> int:
        self.log.append((src, dst, bytes(payload)))
        return super().send(src, dst, payload, stage=stage)


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(0)
    mf = MatrixFactorization(dim=5)
    table, dense = mf.init_public(40, rng)
    table[:, 5] = rng.normal(0, 0.3, 40)
    params = mf.init_private(8, rng) + rng.normal(0, 0.3, (8, 6))
    mech = GaussianLDP(1.0, 1e-4, 0.8)
    ctx = DenoiserContext.from_trained(mf, table, dense, params, mech)
    return mf, table, dense, params, mech, ctx


def _device(world, user: int, seed: int, **kw) -> InferenceDevice:
    _, table, _, _, mech, ctx = world
    return InferenceDevice(ctx.h[user], float(ctx.offset[user]), mech, num_items=table.shape[0], user=user,
                           _rng=CtrDrbg(seed), **kw)


def test_the_server_sees_the_noisy_representation_only(world) -> None:
    _, table, _, _, mech, ctx = world
    server = InferenceServer(ctx.rep, table)
    views = []
    for wanted in ([1, 2], [30, 31, 39]):  # two different queries of the same device, same noise
        tp = _Recording()
        infer(_device(world, 3, seed=5), server, np.array(wanted), user=3, transport=tp)
        assert [(s, d) for s, d, _ in tp.log] == [("user:3", "server0"), ("server0", "user:3")]
        assert tp.total_messages(direction=UPLOAD) == 1 and tp.total_messages(direction=DOWNLOAD) == 1
        views.append(tp.log[0][2])
        # the reply is the score of every public candidate, whatever the device asked for
        assert len(tp.log[1][2]) == 8 + 8 * table.shape[0]
    assert views[0] == views[1]  # the request does not depend on the items asked about
    # ... and it is H~ = clip(clip(H) + N(0, sigma^2)) of the device's noise, as float64
    expect = privatize(ctx.h[3][None], mech, _rng=CtrDrbg(5))[0][0]
    assert len(views[0]) == 12 + 8 * expect.size
    np.testing.assert_array_equal(np.frombuffer(views[0][12:], "<f8").reshape(expect.shape), expect)


def test_naive_prediction_is_the_model_on_the_noisy_vector(world) -> None:
    mf, table, dense, params, mech, ctx = world
    dev = _device(world, 2, seed=1)
    got = infer(dev, InferenceServer(ctx.rep, table), np.array([4, 9]), user=2)
    h_tilde = decode_request(dev.request(), 1, 5)
    noisy = params[2].copy()
    noisy[:5] = h_tilde[0]
    np.testing.assert_allclose(got, mf.predict(table, dense, noisy[None], np.array([0, 0]), np.array([4, 9])))


def test_repeated_queries_reuse_the_release_and_the_denoiser_runs_on_the_device(world) -> None:
    _, table, _, _, mech, ctx = world
    den = Denoiser.for_context(ctx, hat_d=3, hidden=4)
    den_table, den_dense = den.init_public(table.shape[0], np.random.default_rng(1))
    dev = _device(world, 4, seed=2, denoiser=(den, den_table, den_dense))
    assert dev.request() == dev.request()
    server = InferenceServer(ctx.rep, table)
    out = infer(dev, server, np.array([0, 7, 8]), user=4)
    naive = infer(_device(world, 4, seed=2), server, np.array([0, 7, 8]), user=4)
    h_tilde, z = privatize(ctx.h[4][None], mech, _rng=CtrDrbg(2))
    np.testing.assert_allclose(out, den.denoise(den_table, den_dense, np.array([4]), h_tilde, z,
                                                np.zeros(3, dtype=np.int64), np.array([0, 7, 8]), naive))


def test_bad_messages_and_items_outside_the_public_set(world) -> None:
    _, table, _, _, _, ctx = world
    server = InferenceServer(ctx.rep, table, candidates=np.arange(10))
    with pytest.raises(InvalidMessage):
        server.answer(b"GRQ1" + b"\x00" * 7)
    bad = bytearray(_device(world, 0, seed=1).request())
    bad[12:20] = np.array([np.nan]).tobytes()
    with pytest.raises(InvalidMessage, match="non-finite"):
        server.answer(bytes(bad))
    with pytest.raises(InvalidParameters, match="candidate set"):
        infer(_device(world, 0, seed=1, candidates=np.arange(10)), server, np.array([12]))
