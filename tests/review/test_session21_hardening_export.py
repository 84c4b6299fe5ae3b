"""Session 21 hardening (helper H), from helper F's observation 1: ``secemb admin export-model`` and
``save-denoiser`` write server 0's model only once server 1 confirms it.

Before, both commands checked server 0's model against the SHA-256 server 0 itself announces, so a
deviating server 0 could hand its operator another model than the one both servers agreed on, and
devices using ``secemb infer --recommender OUT`` would take it.  Now they also read server 1's status
as server 0 reads it before each round (``GET /v1/peer/status``, with server 0's half: its peer
secret over mutual TLS; a real operator's half holds no admin credential of server 1) and require
the same SHA-256 at the same model version.  Expected (docs/deployment.md, "Running it"): a
mismatch exits 1 with one line naming both digests, server 1 not answering exits 1 with one line
naming server 1, and nothing is written either way.

Two real servers (:class:`~secemb.sim.cluster.LocalCluster`: two ``secemb serve`` processes on
127.0.0.1 over TLS).  The deviating server 0 is the real server restarted on a checkpoint whose
model was altered (its SHA-256 recomputed, so server 0 is self-consistent): it serves and announces
a model server 1 never agreed on.  ``save-denoiser`` shares the code path; its cases use the
stubbed answers of ``tests/inference/test_save_denoiser.py`` (server 1's status differs).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from inference import test_save_denoiser as tsd  # noqa: E402
from inference.test_save_denoiser import deployment  # noqa: E402,F401  (the denoiser deployment fixture)

from secemb.cli import app  # noqa: E402
from secemb.data import synthetic_like  # noqa: E402
from secemb.digest import model_sha256  # noqa: E402
from secemb.models import MatrixFactorization  # noqa: E402
from secemb.protocols import get_protocol  # noqa: E402
from secemb.round.messages import encode_model  # noqa: E402
from secemb.server.store import DiskStore  # noqa: E402
from secemb.sim.cluster import LocalCluster  # noqa: E402
from secemb.sim.settings import cluster_settings  # noqa: E402
from secemb.training import TrainConfig  # noqa: E402
from secemb.transport.errors import Unreachable  # noqa: E402
from secemb.transport.network import ApiClient  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running two-server MF deployment (its initial model, version 0)."""
    data = synthetic_like(8, 10, 40, seed=4)
    proto = get_protocol("secemb", layout="full", relay=False)
    settings = cluster_settings(MatrixFactorization(dim=3, reg=0.01), proto, data, TrainConfig(m_prime=4), min_users=2)
    with LocalCluster(tmp_path_factory.mktemp("h21") / "dep", **settings) as c:
        c.start()
        yield c


def _export(c: LocalCluster, out: Path, *args: str) -> Any:
    return runner.invoke(app, ["admin", "export-model", str(out), "--deployment", str(c.workdir), *args])


def _status(c: LocalCluster, party: int) -> dict[str, Any]:
    doc: dict[str, Any] = c.admin(party).get_json("/v1/admin/status")
    return doc


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _one_line(res: Any) -> str:
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return " ".join(lines[0].split())


def test_export_model_exits_1_when_server_1_does_not_answer(cluster: LocalCluster, tmp_path: Path) -> None:
    """The honest deployment exports (both servers announce the model's SHA-256); with server 1
    down, the same command exits 1 with one line naming server 1 and writes nothing."""
    res = _export(cluster, tmp_path / "ok")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model_sha256"] == _status(cluster, 1)["model_sha256"] == \
        _status(cluster, 0)["model_sha256"]
    cluster.kill(1)
    try:
        res = _export(cluster, tmp_path / "down")
        assert res.exit_code == 1, res.output
        line = _one_line(res)
        assert "server 1" in line and "did not answer" in line and "not confirmed" in line, line
        assert not (tmp_path / "down").exists()
    finally:
        cluster.start(1)


def test_a_deviating_server_0s_model_is_not_exported(cluster: LocalCluster, tmp_path: Path) -> None:
    """Server 0 restarts on an altered model of the same version (and announces its SHA-256):
    ``export-model --force`` onto an earlier export exits 1 with one line naming server 0's and
    server 1's digests, and leaves the earlier export as it was."""
    out = tmp_path / "rec"
    assert _export(cluster, out).exit_code == 0
    before = _files(out)
    agreed = _status(cluster, 1)["model_sha256"]
    cfg = cluster.configs[0]
    store = DiskStore(cfg.state_dir, 0, cfg.fingerprint())
    cluster.kill(0)
    honest = store.load()
    assert honest is not None and honest.model_sha256 == agreed
    table = honest.table.copy()
    table[0, 0] += 0.25  # the deviation: one weight of the model server 0 hands out
    deviating = model_sha256(table, honest.dense)
    store.save(type(honest)(**{**vars(honest), "table": table, "model_sha256": deviating}))
    cluster.start(0)
    try:
        assert _status(cluster, 0)["model_sha256"] == deviating != agreed
        assert _status(cluster, 0)["model_version"] == _status(cluster, 1)["model_version"]
        res = _export(cluster, out, "--force")
        assert res.exit_code == 1, res.output
        line = _one_line(res)
        assert deviating in line and agreed in line and "disagree" in line and "nothing written" in line, line
        assert _files(out) == before
    finally:
        cluster.kill(0)
        store.save(honest)
        cluster.start(0)
    assert _status(cluster, 0)["model_sha256"] == agreed


def _serve(monkeypatch: pytest.MonkeyPatch, server0: bytes, model: bytes, server1: bytes | None) -> None:
    """Server 0 answers its status with ``server0`` and its model with ``model``; server 1 its
    ``/v1/peer/status`` with ``server1`` (``None``: it does not answer)."""
    def request(self: ApiClient, method: str, path: str, **_: Any) -> httpx.Response:
        if path == "/v1/peer/status" and server1 is None:
            raise Unreachable(f"{method} {self.base_url}{path}: ConnectError: connection refused")
        body = {"/v1/admin/status": server0, "/v1/admin/model": model, "/v1/peer/status": server1}[path]
        return httpx.Response(200, content=body, request=httpx.Request(method, self.base_url + path))

    monkeypatch.setattr(ApiClient, "request", request)


@pytest.mark.parametrize("case", ["other model", "other version", "malformed", "down"])
def test_save_denoiser_writes_only_a_model_server_1_confirms(deployment: Any,  # noqa: F811
                                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             case: str) -> None:
    """Server 0's model is self-consistent (it hashes to what server 0 announces); server 1
    announces another SHA-256 at that version, stays at another version (every try), answers a
    malformed status, or does not answer: exit 1, one line, ``--out`` left as it was."""
    dep, _, table, dense = deployment
    sha = model_sha256(table, dense)
    other = model_sha256(table + 1.0, dense)
    server1 = {"other model": tsd._status(4, other), "other version": tsd._status(3, sha),
               "malformed": json.dumps({"model_version": 4}).encode(), "down": None}[case]
    _serve(monkeypatch, tsd._status(4, sha), encode_model(4, table, dense), server1)
    out = tmp_path / "den.npz"
    out.write_bytes(tsd.OLD)
    res = tsd._save(dep, out)
    assert res.exit_code == 1, res.output
    line = _one_line(res)
    want = {"other model": [sha, other, "disagree"], "other version": ["server 1 holds model version 3, server 0 4"],
            "malformed": ["server 1", "model_sha256"], "down": ["server 1", "did not answer"]}[case]
    assert all(w in line for w in want), line
    assert out.read_bytes() == tsd.OLD


def test_save_denoiser_writes_the_model_server_1_confirms(deployment: Any,  # noqa: F811
                                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The control: server 1 announces the same SHA-256 at the same version: written."""
    dep, _, table, dense = deployment
    status = tsd._status(4, model_sha256(table, dense))
    _serve(monkeypatch, status, encode_model(4, table, dense), status)
    out = tmp_path / "den.npz"
    res = tsd._save(dep, out)
    assert res.exit_code == 0, res.output
    with np.load(out) as got:
        assert "recommender_sha256" in got.files
