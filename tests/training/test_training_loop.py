"""End-to-end federated training with the plaintext protocol: determinism, verification,
accuracy against the global-mean baseline, byte accounting, Eq. 11, and the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.data import by_user, load_dataset, synthetic_like, train_test_split
from secemb.models import MatrixFactorization
from secemb.protocols.plaintext import PlaintextProtocol, PlaintextServer
from secemb.round.messages import RECEIPT_BYTES
from secemb.training import (
    Experiment,
    TrainConfig,
    VerificationError,
    run_experiment,
    train,
)


@pytest.fixture(scope="module")
def small():
    data = synthetic_like(60, 50, 900, seed=3)
    return train_test_split(data, 0.2, seed=0)


def _train(small, protocol=None, **kw):
    tr, te = small
    cfg = TrainConfig(**{"epochs": 2, "users_per_round": 16, "verify": True, **kw})
    return train(MatrixFactorization(dim=8, reg=0.01), protocol or PlaintextProtocol(), tr, te, cfg)


def test_synthetic_run_is_deterministic_verified_and_beats_the_global_mean():
    data = load_dataset("synthetic")
    tr, te = train_test_split(data, 0.2, seed=0)
    baseline = float(np.sqrt(np.mean((te.ratings - tr.ratings.mean()) ** 2)))
    exp = Experiment(dataset="synthetic", protocol="plaintext", layout="full", epochs=2, verify=True)
    a = run_experiment(exp)
    b = run_experiment(exp)
    assert a.model_sha256 == b.model_sha256
    assert a.verified_rounds == a.rounds == 2 * math.ceil(943 / 100)
    assert a.epochs[-1].test_rmse < baseline - 0.03
    assert a.epochs[-1].train_loss < a.epochs[0].train_loss
    doc = json.loads(a.to_json())
    assert set(doc) == {
        "config",
        "epochs",
        "comm",
        "time",
        "verified_rounds",
        "rounds",
        "model_sha256",
        "selection",
    }
    # no validation split, no early stopping: the last epoch is the model (issue 35)
    assert doc["selection"] == {"epoch_kept": 2, "epochs_run": 2, "valid_fraction": 0.0, "early_stop": None,
                                "metric": None, "valid_per_epoch": None}
    assert set(doc["comm"]) == {"upload_bytes_per_user_round", "download_bytes_per_user_round"}
    assert set(doc["time"]) == {"user_ms_per_round", "server_s_per_round"}
    assert doc["epochs"][0].keys() == {"epoch", "test_rmse", "train_loss", "val_rmse", "test_metrics", "val_metrics"}
    assert doc["epochs"][0]["test_metrics"] == {"rmse": doc["epochs"][0]["test_rmse"]}
    assert doc["epochs"][0]["val_rmse"] is None  # no validation data given
    assert doc["config"]["m_prime_source"] == "eq11"


def test_seed_changes_the_model(small):
    assert _train(small, seed=1).model_sha256 != _train(small, seed=2).model_sha256


def test_staged_schedule_gives_the_same_model(small):
    a = _train(small)
    b = _train(small, schedule="staged")
    assert a.model_sha256 == b.model_sha256


def test_dense_adam_and_64_bit_ring_run(small):
    r = _train(small, lazy_adam=False, ring_bits=64, frac_bits=24, epochs=1)
    assert r.verified_rounds == r.rounds and np.isfinite(r.final_rmse)


def test_byte_accounting_matches_the_message_sizes(small):
    tr, _ = small
    mp, w, p = 7, 9, 1
    r = _train(small, m_prime=mp, epochs=1)
    # 32-byte header (docs/wire-format.md); no relay: server 1's receipt down, and up again with the upload to server 0
    up = (32 + 4 * mp) + 32 + (32 + 4 * (mp * w + p)) + 32 + RECEIPT_BYTES
    down = (32 + 4 * mp * w) + 32 + (32 + 4 * p) + RECEIPT_BYTES
    assert r.upload_bytes_per_user_round == up
    assert r.download_bytes_per_user_round == down
    # both servers' aggregate shares (each reconstructs, issue 33) and the model sync
    assert r.server_bytes_per_round == 2 * (32 + 4 * (50 * w + p)) + (8 + 32 + 8 * (50 * w + p))
    assert r.count_bytes_per_user == 0.0
    active = int((by_user(tr).counts() > 0).sum())
    assert r.participations == active


def test_m_prime_by_eq11(small):
    tr, _ = small
    counts = by_user(tr).counts()
    mean = counts[counts > 0].mean()
    r = _train(small, alpha=1.5, epochs=1)
    assert r.config["m_prime"] == min(math.ceil(1.5 * mean), 50)
    assert r.config["mean_rating_count"] == pytest.approx(mean)
    assert r.count_bytes_per_user == 2 * (32 + 4)  # one framed ring word to each server


class _CorruptingServer(PlaintextServer):
    def __init__(self, party, where):
        super().__init__(party)
        self.where = where

    def handle_retrieval(self, user_id, message):
        reply = super().handle_retrieval(user_id, message)
        if self.where == "row" and self.party == 0:
            reply = reply[:-1] + bytes([reply[-1] ^ 1])
        return reply

    def combine(self, peer_share, include=None):
        sparse, dense = super().combine(peer_share, include=include)
        if self.where == "sum":
            sparse = sparse.copy()
            sparse[0, 0] += 1
        return sparse, dense


class _Corrupting(PlaintextProtocol):
    def __init__(self, where):
        self.where = where

    def make_server(self, party, *, peer_key=None):
        return _CorruptingServer(party, self.where)


@pytest.mark.parametrize("where", ["row", "sum"])
def test_verification_catches_a_wrong_protocol(small, where):
    with pytest.raises(VerificationError):
        _train(small, protocol=_Corrupting(where))
    _train(small, protocol=_Corrupting(where), verify=False)  # unnoticed without verify


def test_cli_plaintext_run_writes_json(tmp_path):
    from secemb.cli import app

    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--protocol",
            "plaintext",
            "--epochs",
            "1",
            "--verify",
            "--users-per-round",
            "200",
            "--m-prime",
            "40",
            "--json-out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["rounds"] == doc["verified_rounds"] == 5
    assert doc["config"]["m_prime"] == 40
    assert "upload / user / round" in res.output


def test_cli_exit_codes():
    from secemb.cli import app

    res = CliRunner().invoke(app, ["train", "--protocol", "nope", "--quiet"])
    assert res.exit_code == 2 and "unknown protocol" in res.output
    res = CliRunner().invoke(
        app, ["train", "--protocol", "plaintext", "--model", "nope", "--quiet"]
    )
    assert res.exit_code == 2


def test_cli_exits_1_when_verification_fails():
    from secemb.cli import app
    from secemb.protocols import register_protocol, unregister_protocol

    class _CorruptingSum(_Corrupting):  # a registered factory takes the layout options
        def __init__(self, **layout):
            PlaintextProtocol.__init__(self, **layout)
            self.where = "sum"

    register_protocol("corrupt-for-test", _CorruptingSum, wire_id=250)
    try:
        res = CliRunner().invoke(
            app,
            [
                "train",
                "--protocol",
                "corrupt-for-test",
                "--epochs",
                "1",
                "--verify",
                "--users-per-round",
                "400",
                "--m-prime",
                "20",
                "--quiet",
            ],
        )
    finally:
        unregister_protocol("corrupt-for-test")
    assert res.exit_code == 1 and "verification failed" in res.output


def test_secure_and_plaintext_runs_give_identical_models(small):
    from secemb.errors import InvalidParameters
    from secemb.protocols import get_protocol

    try:
        secure = get_protocol("secemb")
    except InvalidParameters:
        pytest.skip("secemb protocol not available")
    a = _train(small, epochs=1)
    b = _train(small, protocol=secure, epochs=1)
    assert b.verified_rounds == b.rounds
    assert a.model_sha256 == b.model_sha256
    assert [e.test_rmse for e in a.epochs] == [e.test_rmse for e in b.epochs]


def test_validation_data_is_scored_but_not_trained_on(small):
    tr, te = small
    half = np.arange(len(te)) % 2 == 0
    val, test = te.subset(half), te.subset(~half)
    cfg = TrainConfig(epochs=2, users_per_round=16)
    plain = train(MatrixFactorization(dim=8, reg=0.01), PlaintextProtocol(), tr, test, cfg)
    with_val = train(MatrixFactorization(dim=8, reg=0.01), PlaintextProtocol(), tr, test, cfg, val_data=val)
    assert with_val.model_sha256 == plain.model_sha256  # scoring leaves training untouched
    assert [e.test_rmse for e in with_val.epochs] == [e.test_rmse for e in plain.epochs]
    for e in with_val.epochs:  # the RMSE of the model's clipped predictions on the validation half
        assert e.val_rmse is not None and e.val_rmse != e.test_rmse
    pred = MatrixFactorization(dim=8, reg=0.01).predict(
        with_val.table, with_val.dense, with_val.user_store, val.users, val.items
    )
    expect = float(np.sqrt(np.mean((np.clip(pred, 1.0, 5.0) - val.ratings) ** 2)))
    assert with_val.epochs[-1].val_rmse == pytest.approx(expect, rel=1e-12)
    with pytest.raises(Exception, match="id spaces"):
        train(MatrixFactorization(dim=8), PlaintextProtocol(), tr, test, cfg,
              val_data=synthetic_like(61, 50, 400, seed=1))


def test_feature_models_get_the_dataset_features_and_colr_keeps_their_codes():
    """``secemb train --model fm`` builds FM with Appendix H features; CoLR through
    run_experiment learns the model's frozen code columns and Table 10's rank."""
    from secemb.data.features import load_features
    from secemb.models.features import pack_codes

    res = run_experiment(Experiment(dataset="synthetic", model="fm", protocol="colr", epochs=1, dim=16,
                                    users_per_round=200))
    feats = load_features("synthetic", num_users=943, num_items=1682, seed=0)
    hp = res.config["model_hparams"]
    assert (hp["l_x"], hp["l_y"]) == (feats.l_x, feats.l_y) and feats.l_y > 0
    codes = pack_codes(feats.item)
    assert np.array_equal(res.table[:, -codes.shape[1]:], codes)  # CoLR left the codes alone
    assert res.config["protocol"] == "colr"
