"""GREC's denoiser trained over the network: two server processes on 127.0.0.1 (TLS), the
devices simulated by the same driver, the same protocol objects (SecEmb, full layout) -- and
the same denoiser, bit for bit, as the in-process run of the same seed and noise stream.

The servers build the denoiser from its JSON spec and the recommender's public table
(``[model] frozen_table``), which they need for the initial model's frozen columns; the
devices' clean representations, offsets and noise never leave the driver's devices."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.data import synthetic_like, train_test_split
from secemb.errors import InvalidParameters
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
from secemb.inference.saved import save_frozen_table
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.randomness import CtrDrbg
from secemb.server.config import ServerConfig
from secemb.training import TrainConfig, train
from secemb.training.networked import train_on_local_cluster


@pytest.fixture(scope="module")
def trained():
    tr, te = train_test_split(synthetic_like(30, 24, 500, seed=4), 0.2, seed=0)
    mf = MatrixFactorization(dim=4, reg=0.01)
    rec = train(mf, get_protocol("plaintext"), tr, te, TrainConfig(epochs=2, users_per_round=10, lr=0.05))
    return tr, te, mf, rec


def _denoiser(trained) -> Denoiser:
    _, _, mf, rec = trained
    ctx = DenoiserContext.from_trained(mf, rec.table, rec.dense, rec.user_store, GaussianLDP(1.0, 1e-4, 1.0))
    return Denoiser.for_context(ctx, _rng=CtrDrbg(9), hat_d=3, hidden=6)


def test_networked_denoiser_equals_the_in_process_one(trained, tmp_path) -> None:
    tr, te, _, rec = trained
    cfg = TrainConfig(epochs=1, users_per_round=10, m_prime=6, lr=0.025, seed=1, verify=True)
    proto = get_protocol("secemb", layout="full", relay=False)
    ref = train(_denoiser(trained), proto, tr, te, cfg)
    den = _denoiser(trained)
    # one device at a time: the devices draw their noise from one seeded stream, in round order
    got = train_on_local_cluster(den, proto, tr, te, cfg, workdir=tmp_path / "cluster", frozen_table=den.public_table,
                                 concurrency=1, deadline_s=60.0, device_randomness="reproducible")
    assert got.model_sha256 == ref.model_sha256
    assert got.verified_rounds == got.rounds == ref.rounds == 3
    assert got.upload_bytes_per_user_round == ref.upload_bytes_per_user_round
    np.testing.assert_array_equal(got.table[:, 3:], rec.table)  # the frozen columns stayed the recommender's
    assert (tmp_path / "cluster" / "frozen_table.npz").is_file()  # what the server processes read


def test_server_configuration_builds_the_denoiser_from_the_frozen_table(trained, tmp_path) -> None:
    den = _denoiser(trained)
    path = save_frozen_table(tmp_path / "t.npz", den.public_table)
    base = {"party": 0, "peer_url": "https://127.0.0.1:1", "state_dir": str(tmp_path / "s"),
            "peer_secret": "ab" * 32, "admin_secret": "cd" * 32, "user_secret": "ef" * 32, "insecure_http": True,
            "host": "127.0.0.1", "model": "grec-denoiser", "model_hparams": den.spec(), "num_items": 24,
            "num_users": 30}
    cfg = ServerConfig(**base, frozen_table=path)
    shell = cfg.make_model()
    table, dense = shell.init_public(24, np.random.default_rng(0))
    want_t, want_d = den.init_public(24, np.random.default_rng(0))
    np.testing.assert_array_equal(table, want_t)
    np.testing.assert_array_equal(dense, want_d)
    # another table, another fingerprint (both servers must hold the same one)
    other = save_frozen_table(tmp_path / "u.npz", den.public_table + 1.0)
    assert ServerConfig(**base, frozen_table=other).fingerprint() != cfg.fingerprint()
    with pytest.raises(InvalidParameters, match="rows"):
        ServerConfig(**{**base, "num_items": 25}, frozen_table=path)
    with pytest.raises(InvalidParameters, match="frozen_table is for model"):
        ServerConfig(**{**base, "model": "mf", "model_hparams": {}}, frozen_table=path)
    with pytest.raises(InvalidParameters, match="without its recommender"):
        ServerConfig(**base).make_model().init_public(24, np.random.default_rng(0))
