"""Issue 32 item 5: ``secemb admin export-model OUT --deployment DEP`` against a running
deployment (two server processes on 127.0.0.1, TLS with the deployment's CA:
:class:`~secemb.sim.cluster.LocalCluster`, what the network tests run), trained on a CSV with
string ids.

OUT holds the deployment's current public model in the saved-model format -- ``manifest.json``,
``public.npz`` and (with ``--dataset``) ``items.json`` -- and nothing of a user: a device serves
its own recommendations from it (``secemb infer --credentials ... --recommender OUT``, raw item
ids printed); ``secemb recommend`` refuses it with one line (no user's parameters).  The
expected model is what server 0 announces and sends (its status SHA-256 and its model bytes,
read here through the operator's own client), not what the command computed.  OUT is checked
before any work: a model there needs ``--force``, a foreign non-empty folder is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from cli_helpers import assert_usage_error, run_cli

from secemb.data import read_own_ratings, train_test_split  # noqa: E402
from secemb.sim.settings import cluster_settings  # noqa: E402
from secemb.inference.saved import load_public_recommender  # noqa: E402
from secemb.models import MatrixFactorization  # noqa: E402
from secemb.protocols import get_protocol  # noqa: E402
from secemb.round import messages  # noqa: E402
from secemb.sim.cluster import LocalCluster  # noqa: E402
from secemb.training import TrainConfig  # noqa: E402

USERS = [f"user{i}" for i in range(10)]
ITEMS = ["The Matrix", "Heat", "Alien", "Up", "Jaws", "Big", "Fargo", "Se7en", "Rocky", "Tron", "Brazil", "Ran"]
DIM = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LocalCluster]]:
    """A running deployment of MF on ``ratings.csv`` (string ids), and the CSV's folder."""
    root = tmp_path_factory.mktemp("export")
    rows = [(u, it, 1 + (k + len(it)) % 5) for k, u in enumerate(USERS) for it in ITEMS[k % 3 :: 2]]
    (root / "ratings.csv").write_text("user,item,rating\n" + "".join(f"{u},{i},{r}\n" for u, i, r in rows))
    train, _ = train_test_split(read_own_ratings(root / "ratings.csv"), 0.2, seed=0)
    settings = cluster_settings(MatrixFactorization(dim=DIM, reg=0.01),
                                get_protocol("secemb", layout="full", relay=False), train, TrainConfig(m_prime=6),
                                min_users=2)
    with LocalCluster(root / "dep", **settings) as c:
        c.start()
        yield root, c


def _export(cluster: LocalCluster, out: Path, *args: str):  # noqa: ANN202
    return run_cli("admin", "export-model", str(out), "--deployment", str(cluster.workdir), *args)


def test_export_writes_the_announced_public_model_and_the_item_ids(cluster, tmp_path: Path) -> None:
    root, c = cluster
    out = tmp_path / "exported"
    res = _export(c, out, "--dataset", str(root / "ratings.csv"))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    status = c.admin(0).get_json("/v1/admin/status")
    version = status["model_version"]
    table, dense = messages.decode_model(c.admin(0).get_bytes("/v1/admin/model"), version=version,
                                         num_items=len(ITEMS), width=DIM + 1, dense_size=1)
    assert (doc["model"], doc["model_version"], doc["model_sha256"]) == ("mf", version, status["model_sha256"])
    assert sorted(p.name for p in out.iterdir()) == ["items.json", "manifest.json", "public.npz"]  # no user's data
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "secemb-model" and manifest["model_sha256"] == status["model_sha256"]
    assert list(manifest["files"]) == ["public.npz"] and manifest["ids"] == {"items": "items.json"}
    assert manifest["num_users"] == len(USERS) and manifest["config"]["source"] == "deployment"
    with np.load(out / "public.npz", allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["table"], table)
        np.testing.assert_array_equal(npz["dense"], dense)
    assert json.loads((out / "items.json").read_text())["ids"] == sorted(ITEMS)
    model, _, sha, num_items, _ = load_public_recommender(out)
    assert (model.name, sha, num_items) == ("mf", status["model_sha256"], len(ITEMS))


def test_a_device_serves_raw_ids_from_the_export_and_recommend_refuses_it(cluster, tmp_path: Path) -> None:
    root, c = cluster
    out = tmp_path / "exported"
    assert _export(c, out, "--dataset", str(root / "ratings.csv")).exit_code == 0
    creds = c.deployment.devices([3])[0].save(tmp_path / "dev3.json")
    state = tmp_path / "dev3.npz"
    params = np.array([0.3, -0.2, 0.5, 0.1, 0.07])  # p_u (d = 4), b_u
    np.savez(state, params=params, m=np.zeros_like(params), v=np.zeros_like(params), t=np.int64(0))
    res = run_cli("infer", "--credentials", str(creds), "--state-file", str(state), "--recommender", str(out),
               "--items", "Heat,The Matrix", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["items"] == [sorted(ITEMS).index("Heat"), sorted(ITEMS).index("The Matrix")]
    assert doc["item_ids"] == ["Heat", "The Matrix"] and doc["raw_ids"] is True
    assert_usage_error(run_cli("recommend", "--model-dir", str(out), "--user", "user0"), "holds a public model only")
    assert_usage_error(run_cli("infer", "--model-dir", str(out), "--user", "user0"), "holds a public model only")


def test_without_dataset_the_ids_are_the_indices(cluster, tmp_path: Path) -> None:
    _, c = cluster
    out = tmp_path / "bare"
    res = _export(c, out)
    assert res.exit_code == 0, res.output
    assert not json.loads(res.stdout)["item_ids"] and not (out / "items.json").exists()
    assert json.loads((out / "manifest.json").read_text())["ids"] is None


def test_out_is_checked_before_any_work(cluster, tmp_path: Path) -> None:
    root, c = cluster
    out = tmp_path / "again"
    assert _export(c, out).exit_code == 0
    assert_usage_error(_export(c, out), "pass --force to replace it")
    assert _export(c, out, "--force").exit_code == 0
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"meow")
    assert_usage_error(_export(c, foreign, "--force"), "holds no model saved by secemb")
    assert sorted(p.name for p in foreign.iterdir()) == ["cat.jpg"] and (foreign / "cat.jpg").read_bytes() == b"meow"
    other = tmp_path / "other.csv"
    other.write_text("a,x,1\nb,y,2\n")
    assert_usage_error(_export(c, tmp_path / "new", "--dataset", str(other)), "has 2 items, the deployment 12")
    assert not (tmp_path / "new").exists()
