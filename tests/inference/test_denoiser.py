"""The denoiser F_p as a federated model: frozen recommender columns, its training through
SecEmb (uploads are SecEmb's messages; the secure run gives the plaintext twin's model), and
that it learns to beat naive LDP."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data import synthetic_like, train_test_split
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP, clip_frobenius, gaussian_noise
from secemb.inference.denoiser import NAME
from secemb.metrics.rating import rmse
from secemb.models import MatrixFactorization, UserStore, get_model
from secemb.models.batch import rating_batch
from secemb.models.optim import AdamConfig
from secemb.protocols import get_protocol
from secemb.protocols.registry import wire_id
from secemb.protocols.wire import KINDS
from secemb.randomness import CtrDrbg
from secemb.training import TrainConfig, train
from secemb.transport.inprocess import UPLOAD, InProcessTransport, parse_endpoint


@pytest.fixture(scope="module")
def trained():
    data = synthetic_like(40, 30, 700, seed=4)
    tr, te = train_test_split(data, 0.2, seed=0)
    mf = MatrixFactorization(dim=6, reg=0.01)
    rec = train(mf, get_protocol("plaintext"), tr, te, TrainConfig(epochs=3, users_per_round=10, lr=0.05))
    return tr, te, mf, rec


def _denoiser(trained, seed: int = 9, **hp) -> Denoiser:
    tr, te, mf, rec = trained
    ctx = DenoiserContext.from_trained(mf, rec.table, rec.dense, rec.user_store, GaussianLDP(1.0, 1e-4, 1.0))
    return Denoiser.for_context(ctx, _rng=CtrDrbg(seed), **{"hat_d": 4, "hidden": 8, **hp})


def test_registered_and_sized(trained) -> None:
    den = _denoiser(trained)
    assert den.sparse_width == 4 + 7 and den.private_size == 0 and den.frozen_columns == 7
    shell = get_model(NAME, **den.spec())  # what the servers' configuration rebuilds
    assert (shell.sparse_width, shell.dense_size) == (den.sparse_width, den.dense_size)
    with pytest.raises(Exception, match="without its recommender"):
        shell.init_public(30, np.random.default_rng(0))


def test_local_step_leaves_the_recommender_columns_alone(trained) -> None:
    tr, _, _, rec = trained
    den = _denoiser(trained)
    table, dense = den.init_public(30, np.random.default_rng(0))
    np.testing.assert_array_equal(table[:, 4:], rec.table)
    store = UserStore(den.init_private(tr.num_users, np.random.default_rng(0)), AdamConfig())
    items = np.array([2, 5, 7])
    step = den.local_step(table[items], dense, store.state(3), rating_batch(np.arange(3), np.array([4.0, 2.0, 5.0])))
    assert np.abs(step.row_grads[:, :4]).sum() > 0 and np.abs(step.dense_grad).sum() > 0
    np.testing.assert_array_equal(step.row_grads[:, 4:], 0.0)


class _Recording(InProcessTransport):
    """Keeps a copy of every upload message."""

    def __init__(self) -> None:
        super().__init__()
        self.uploads: list[tuple[str, str, bytes]] = []

    def send(self, src: str, dst: str, payload: bytes, *, stage: str) -> int:
        if parse_endpoint(src)[0] == "user":
            self.uploads.append((src, dst, bytes(payload)))
        return super().send(src, dst, payload, stage=stage)


def test_training_goes_through_secemb_and_equals_the_plaintext_twin(trained) -> None:
    tr, te, _, _ = trained
    cfg = TrainConfig(epochs=1, users_per_round=10, lr=0.025, seed=1, verify=True)
    tp = _Recording()
    secure = train(_denoiser(trained), get_protocol("secemb", layout="full", relay=False), tr, te, cfg, transport=tp)
    plain = train(_denoiser(trained), get_protocol("plaintext", layout="full", relay=False), tr, te, cfg)
    assert secure.verified_rounds == secure.rounds
    assert secure.model_sha256 == plain.model_sha256  # same noise stream, ring sums exact
    # every upload of a device is a SecEmb upload message, of one size whatever the device rated
    uploads = [(dst, p) for _, dst, p in tp.uploads if p[6] == KINDS["upload"]]  # header byte 6: kind
    assert len(uploads) == 2 * len(np.unique(tr.users))
    assert {p[5] for _, p in uploads} == {wire_id("secemb")}  # header byte 5: protocol
    for server in ("server0", "server1"):
        assert len({len(p) for dst, p in uploads if dst == server}) == 1
    # no message a device sent carries its rated items' ids in the clear (the retrieval is private)
    assert tp.total_bytes(direction=UPLOAD) == sum(len(p) for _, _, p in tp.uploads)


def test_denoiser_beats_naive_ldp(trained) -> None:
    """Post-processing LDP (re-clip, F_p) against naive LDP (Eq. 7: clip(H) + Z', no re-clip)
    with the same noise draw."""
    tr, te, mf, rec = trained
    den = _denoiser(trained, seed=2)
    res = train(den, get_protocol("plaintext"), tr, None, TrainConfig(epochs=4, users_per_round=10, lr=0.05, seed=0))
    uniq, pair_user = np.unique(te.users, return_inverse=True)
    mech = den.context.mechanism
    h = den.context.h[uniq]
    sent_naive = clip_frobenius(h, mech.bound) + gaussian_noise(h.shape, mech.sigma, _rng=CtrDrbg(11))
    h_tilde = clip_frobenius(sent_naive, mech.bound)
    r_naive = den.noisy_scores(uniq, sent_naive, rec.table[te.items], pair_user)
    r_tilde = den.noisy_scores(uniq, h_tilde, rec.table[te.items], pair_user)
    r_hat = den.denoise(res.table, res.dense, uniq, h_tilde, h_tilde - h, pair_user, te.items, r_tilde)
    naive, post = rmse(r_naive, te.ratings, (1.0, 5.0)), rmse(r_hat, te.ratings, (1.0, 5.0))
    assert naive is not None and post is not None and post < naive
