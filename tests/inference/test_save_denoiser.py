"""``secemb admin save-denoiser`` at its trust boundaries, without server processes: server
0's HTTP answers are replaced at :meth:`secemb.transport.network.ApiClient.request` (the
bytes a server would send), so a malformed status or model is what the command reads.  A
server fault exits 1 with a message, never a traceback, and writes nothing: a file already at
``--out`` is left as it was.  And :mod:`secemb.inference.saved` replaces its files (the
denoiser, the frozen table) atomically: a write that fails leaves the previous file whole."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.digest import model_sha256
from secemb.inference import Denoiser, DenoiserContext, GaussianLDP
from secemb.inference.saved import save_denoiser, save_frozen_table
from secemb.inference.trained import TrainedModel
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.round.messages import encode_model
from secemb.server.deploy import init_deployment
from secemb.training import TrainConfig
from secemb.transport.network import ApiClient

runner = CliRunner()
NUM_USERS, NUM_ITEMS = 6, 9
OLD = b"the operator's previous denoiser file"


def _recommender(shift: float = 0.0) -> TrainedModel:
    """A small MF recommender (``shift`` moves its table: another model_sha256)."""
    from secemb.models import UserStore
    from secemb.models.optim import AdamConfig

    rec = MatrixFactorization(dim=2, reg=0.01)
    params = np.random.default_rng(1).normal(0.0, 0.4, (NUM_USERS, rec.private_size))
    table = np.random.default_rng(2).normal(0.0, 0.1, (NUM_ITEMS, rec.sparse_width))
    return TrainedModel(rec, table + shift, np.zeros(rec.dense_size), UserStore(params, AdamConfig()),
                        np.zeros(NUM_USERS + 1, np.int64), np.zeros(0, np.int64),
                        {"protocol": "secemb", "dataset": "toy", "seed": 0, "config": {}})


def _denoiser() -> Denoiser:
    rec = _recommender()
    ctx = DenoiserContext.from_trained(rec.model, rec.table, rec.dense, rec.user_store, GaussianLDP(2.0, 1e-4, 1.0),
                                       None)
    return Denoiser.for_context(ctx, hat_d=2, hidden=3)


@pytest.fixture
def deployment(tmp_path) -> tuple[Any, Denoiser, np.ndarray, np.ndarray]:
    """A denoiser deployment on disk (never started), the denoiser and a model of it; the
    recommender it was trained against saved in ``rec`` beside the deployment."""
    from secemb.data import RatingData

    _recommender().save(tmp_path / "rec")
    den = _denoiser()
    rng = np.random.default_rng(3)
    table, dense = den.init_public(NUM_ITEMS, rng)
    users = np.arange(NUM_USERS, dtype=np.int64)
    train = RatingData("toy", NUM_USERS, NUM_ITEMS, users, users % NUM_ITEMS, (users % 5 + 1).astype(np.float32))
    frozen = save_frozen_table(tmp_path / "frozen.npz", table[:, den.hat_d:])
    settings = {**_settings(den, train), "frozen_table": str(frozen)}
    init_deployment(tmp_path / "dep", [["127.0.0.1"]] * 2, ports=(9, 9), **settings)
    return tmp_path / "dep", den, table, dense


def _settings(den: Denoiser, train: Any) -> dict[str, Any]:
    from secemb.sim.settings import cluster_settings

    return cluster_settings(den, get_protocol("secemb", layout="full", relay=False), train, TrainConfig(m_prime=4),
                            min_users=2)


def _serve(monkeypatch, status: bytes, model: bytes) -> None:
    """Server 0 answers ``/v1/admin/status`` with ``status`` and ``/v1/admin/model`` with ``model``;
    server 1 its ``/v1/peer/status`` with ``status`` too (it confirms the model)."""
    def request(self, method: str, path: str, **_: Any) -> httpx.Response:
        body = {"/v1/admin/status": status, "/v1/admin/model": model, "/v1/peer/status": status}[path]
        return httpx.Response(200, content=body, request=httpx.Request(method, self.base_url + path))

    monkeypatch.setattr(ApiClient, "request", request)


def _status(version: Any, sha: Any) -> bytes:
    return json.dumps({"model_version": version, "model_sha256": sha, "last_committed_round": 0}).encode()


def _save(dep, out, recommender: Any = None) -> Any:
    """``secemb admin save-denoiser`` with ``--recommender`` (default: the fixture's, ``rec``)."""
    rec = dep.parent / "rec" if recommender is None else recommender
    return runner.invoke(app, ["admin", "save-denoiser", "--deployment", str(dep), "--out", str(out),
                               "--recommender", str(rec)])


def test_save_denoiser_writes_the_announced_model(deployment, monkeypatch, tmp_path) -> None:
    dep, den, table, dense = deployment
    _serve(monkeypatch, _status(4, model_sha256(table, dense)), encode_model(4, table, dense))
    out = tmp_path / "den.npz"
    res = _save(dep, out)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    rec_sha = _recommender().model_sha256
    assert doc["model_version"] == 4 and doc["model_sha256"] == model_sha256(table, dense)
    assert doc["recommender_sha256"] == rec_sha
    with np.load(out) as got, np.load(save_denoiser(tmp_path / "want.npz", den, table, dense,
                                                    recommender_sha256=rec_sha)) as want:
        assert set(got.files) == set(want.files) and "recommender_sha256" in got.files
        for key in got.files:
            np.testing.assert_array_equal(got[key], want[key])


def test_save_denoiser_refuses_another_recommender(deployment, monkeypatch, tmp_path) -> None:
    """``--recommender`` whose model is not the one the deployment's denoiser was trained
    against (its frozen columns with that dense vector do not hash to its model_sha256): exit 2
    naming the deployment and the folder, nothing written; a folder that is no saved
    recommender: exit 2 before any request."""
    dep, _, table, dense = deployment
    _recommender(shift=0.5).save(tmp_path / "other")
    _serve(monkeypatch, _status(4, model_sha256(table, dense)), encode_model(4, table, dense))
    out = tmp_path / "den.npz"
    res = _save(dep, out, tmp_path / "other")
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "another recommender" in text and str(tmp_path / "other") in text, res.output
    assert str(dep) in text and "Traceback" not in res.output and not out.exists()
    res = _save(dep, out, tmp_path / "nowhere")
    assert res.exit_code == 2 and "--recommender" in res.output and not out.exists(), res.output


@pytest.mark.parametrize("status", [
    b"<html>not json</html>",  # not JSON
    b"[1, 2]",  # not an object
    b"{}",  # no version, no SHA-256
    json.dumps({"model_version": 4}).encode(),  # no SHA-256
    _status("four", "x"),  # a version that is no integer
    _status(4, None),  # a SHA-256 that is no string
    _status(4, "0" * 64),  # a SHA-256 the model does not hash to
    _status(5, "0" * 64),  # a version the model does not have
])
def test_save_denoiser_refuses_a_malformed_status(deployment, monkeypatch, tmp_path, status) -> None:
    dep, _, table, dense = deployment
    _serve(monkeypatch, status, encode_model(4, table, dense))
    out = tmp_path / "den.npz"
    out.write_bytes(OLD)
    res = _save(dep, out)
    assert res.exit_code == 1 and "error:" in res.output and "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert out.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["den.npz", "dep", "frozen.npz", "rec"]


@pytest.mark.parametrize("model", [b"", b"\x00" * 7, b"garbage" * 100])
def test_save_denoiser_refuses_a_malformed_model(deployment, monkeypatch, tmp_path, model) -> None:
    dep, _, table, dense = deployment
    _serve(monkeypatch, _status(4, model_sha256(table, dense)), model)
    res = _save(dep, tmp_path / "den.npz")
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert not (tmp_path / "den.npz").exists()


@pytest.mark.parametrize("writer", ["denoiser", "frozen table"])
def test_saved_files_are_replaced_atomically(monkeypatch, tmp_path, writer) -> None:
    """A write that fails (the disk full as ``np.savez`` ends) leaves the previous file as it
    was and no temporary file beside it: the denoiser file and the frozen table alike."""
    den = _denoiser()
    table, dense = den.init_public(NUM_ITEMS, np.random.default_rng(3))
    out = tmp_path / "saved.npz"
    out.write_bytes(OLD)
    real = np.savez

    def write_then_fail(fh: Any, **arrays: Any) -> None:
        real(fh, **arrays)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", write_then_fail)
    with pytest.raises(OSError):
        if writer == "denoiser":
            save_denoiser(out, den, table, dense, recommender_sha256="0" * 64)
        else:
            save_frozen_table(out, table)
    assert out.read_bytes() == OLD and [p.name for p in tmp_path.iterdir()] == ["saved.npz"]
