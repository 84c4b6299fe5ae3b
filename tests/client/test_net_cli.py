"""The command line of the deployment: ``secemb demo --network`` writes the same JSON as
``secemb train`` (same model_sha256), ``secemb serve`` runs a server from a TOML file,
``secemb client`` runs one device, ``secemb bench network`` reports per-phase figures; the
committed OpenAPI description is the servers' own."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from _server_template import popen_secemb  # the processes below fork from the suite's warm template where they can
from typer.testing import CliRunner

from secemb.cli import app
from secemb.sim.settings import cluster_settings
from secemb.data import load_dataset, train_test_split
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.sim.cluster import LocalCluster, free_port
from secemb.training import TrainConfig
from secemb.transport.network import ApiClient

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_demo_network_json_equals_train_json(tmp_path):
    opts = ["--dataset", "synthetic-mini", "--protocol", "plaintext", "--dim", "2", "--m-prime", "10",
            "--users-per-round", "50", "--epochs", "1", "--quiet"]
    r1 = runner.invoke(app, ["train", *opts, "--json-out", str(tmp_path / "inproc.json")])
    assert r1.exit_code == 0, r1.output
    r2 = runner.invoke(app, ["demo", "--network", "--reproducible", *opts, "--concurrency", "16", "--json-out",
                              str(tmp_path / "net.json")])
    assert r2.exit_code == 0, r2.output
    a = json.loads((tmp_path / "inproc.json").read_text())
    b = json.loads((tmp_path / "net.json").read_text())
    assert a["model_sha256"] == b["model_sha256"]
    assert set(a) == set(b) and a["config"] == b["config"] and a["epochs"] == b["epochs"] and a["comm"] == b["comm"]
    assert "server 0 https://127.0.0.1:" in r2.output  # TLS by default


def test_demo_bad_usage_exits_2():
    r = runner.invoke(app, ["demo", "--network", "--protocol", "nope", "--quiet"])
    assert r.exit_code == 2 and "unknown protocol" in r.output


def _toml(doc: dict) -> str:
    lines = []
    for section, values in doc.items():
        lines.append(f"[{section}]")
        for k, v in values.items():
            if isinstance(v, dict):
                continue
            lines.append(f"{k} = {json.dumps(v)}")
        for k, v in values.items():
            if isinstance(v, dict):
                lines.append(f"[{section}.{k}]")
                lines += [f"{kk} = {json.dumps(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


def test_serve_runs_a_server_from_a_toml_file_and_refuses_unsigned_requests(tmp_path):
    # plain HTTP on loopback with --insecure-http (TLS is covered by the cluster tests)
    port = free_port()
    admin = secrets.token_bytes(32)
    doc = {
        "server": {"party": 0, "host": "127.0.0.1", "port": port, "peer_url": "http://127.0.0.1:9",
                   "state_dir": str(tmp_path / "state")},
        "protocol": {"name": "secemb", "layout": "cuckoo", "relay": True},
        "model": {"name": "mf", "num_items": 50, "num_users": 10, "hparams": {"dim": 4}},
        "training": {"m_prime": 5},
    }
    (tmp_path / "s0.toml").write_text(_toml(doc))
    env = dict(os.environ, SECEMB_PEER_SECRET=secrets.token_hex(32), SECEMB_ADMIN_SECRET=admin.hex(),
               SECEMB_USER_SECRET=secrets.token_hex(32))
    proc = popen_secemb([sys.executable, "-c", "from secemb.cli import main; main()", "serve", "--party", "0",
                         "--config", str(tmp_path / "s0.toml"), "--log-level", "warning", "--insecure-http"],
                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/v1/health", trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            pytest.fail("server did not start")
        assert httpx.get(url + "/v1/admin/status", trust_env=False).status_code == 401
        st = ApiClient(url, "admin", admin).get_json("/v1/admin/status")
        assert (st["party"], st["model_version"], st["m_prime"]) == (0, 0, 5)
        # server 1 is not running: opening a round fails cleanly (503), nothing is opened
        r = httpx.post(url + "/v1/admin/rounds", trust_env=False)
        assert r.status_code == 401
        with pytest.raises(Exception) as e:
            ApiClient(url, "admin", admin).post_json("/v1/admin/rounds", {"n_p": 10})
        assert getattr(e.value, "status", None) == 503
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
    assert "secemb server 0 on http://127.0.0.1:" in out
    assert (tmp_path / "state" / "checkpoint.npz").exists()


def test_serve_refuses_a_party_that_contradicts_the_file(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"server": {"party": 1}}))
    r = runner.invoke(app, ["serve", "--party", "0", "--config", str(tmp_path / "c.json")])
    assert r.exit_code == 2 and "party" in r.output


def test_client_command_runs_one_device_through_a_round_opened_by_secemb_admin(tmp_path):
    data = load_dataset("synthetic", seed=0)
    tr, _ = train_test_split(data, 0.2, seed=0)
    model, proto = MatrixFactorization(dim=4), get_protocol("secemb", layout="cuckoo", relay=True)
    settings = cluster_settings(model, proto, tr, TrainConfig(m_prime=20), min_users=2)
    with LocalCluster(tmp_path / "cluster", **settings) as cluster:  # a deployment directory, as admin init writes
        cluster.start()
        admin = cluster.admin(0)
        dep = str(tmp_path / "cluster")
        r = runner.invoke(app, ["admin", "add-devices", "--deployment", dep, "--users", "7-9"])
        assert r.exit_code == 0, r.output
        creds = {u: tmp_path / "cluster" / "devices" / f"device-{u}.json" for u in (7, 8, 9)}
        assert all((creds[u].stat().st_mode & 0o777) == 0o600 for u in creds)
        r = runner.invoke(app, ["admin", "open-round", "--deployment", dep, "--participants", "7,9", "--deadline", "60"])
        assert r.exit_code == 0, r.output
        rid = json.loads(r.output)["round_id"]
        r = runner.invoke(app, ["admin", "status", "--deployment", dep])
        assert r.exit_code == 0 and json.loads(r.output)["server1"]["round"]["round_id"] == rid, r.output
        state = tmp_path / "device7.npz"
        procs = [popen_secemb(
            [sys.executable, "-c", "from secemb.cli import main; main()", "client", "--user", str(u), "--credentials",
             str(creds[u]), "--wait", "30", "--min-users", "2"] + extra,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        ) for u, extra in ((7, ["--state-file", str(state)]), (9, []))]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, out + err
        line = json.loads(outs[0][0].strip().splitlines()[-1])
        assert (line["user"], line["round_id"], line["outcome"]) == (7, rid, "committed")
        assert line["upload_bytes"] > 0 and np.isfinite(line["loss"])
        assert admin.get_json(f"/v1/rounds/{rid}/status")["included"] == [7, 9]
        with np.load(state) as z:
            assert z["params"].shape == (5,) and int(z["t"]) == 1
        # no round for this device: it gives up after --wait with exit code 1 (in process from here on:
        # the devices above are the real processes)
        res = runner.invoke(app, ["client", "--user", "8", "--credentials", str(creds[8]), "--wait", "0.5"])
        assert res.exit_code == 1 and isinstance(res.exception, SystemExit) and "no open round" in res.stdout
        # another device's file is refused (exit 2), and so is a missing one
        for args in (["--user", "8", "--credentials", str(creds[7])], ["--user", "8", "--credentials", "/nonexistent"]):
            res = runner.invoke(app, ["client", *args])
            assert res.exit_code == 2 and isinstance(res.exception, SystemExit), (res.output, res.exception)
            assert "bad usage" in res.stdout, res.output


def test_bench_network_reports_every_phase():
    r = runner.invoke(app, ["bench", "network", "--devices", "24", "--concurrency", "6", "--dim", "4",
                            "--m-prime", "10", "--num-items", "200", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["devices"] == 24
    for phase in ("retrieval", "dense", "upload"):
        ph = doc["phases"][phase]
        assert ph["devices"] == 24 and 0 < ph["p50_ms"] <= ph["p99_ms"] <= ph["max_ms"] and ph["devices_per_s"] > 0
    assert doc["phases"]["close"]["wall_s"] > 0 and doc["upload_bytes_per_device"] > 0
    # each server's seconds in its role calls, from its own round outcome (session 41): both evaluate every device
    assert set(doc["server_s"]) == {"0", "1"} and all(v > 0 for v in doc["server_s"].values())
    assert doc["batch_wait_ms"] == 5  # the servers' default
    table = runner.invoke(app, ["bench", "network", "--devices", "12", "--concurrency", "4", "--dim", "4",
                                "--m-prime", "10", "--num-items", "200", "--batch-wait-ms", "0"])
    assert table.exit_code == 0 and "server compute" in table.output and "server 1" in table.output, table.output
    assert "batch wait 0 ms" in table.output, table.output


def test_committed_openapi_is_the_servers_own():
    from secemb.server.openapi import spec

    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert committed == json.loads(json.dumps(spec())), "regenerate: python -m secemb.server.openapi > docs/openapi.json"
    paths = committed["paths"]
    assert {"/v1/rounds/{round_id}/retrieval", "/v1/rounds/{round_id}/upload", "/v1/peer/rounds/{round_id}/share",
            "/v1/peer/model", "/v1/admin/rounds"} <= set(paths)
    body = paths["/v1/rounds/{round_id}/upload"]["post"]["requestBody"]["content"]
    assert "application/octet-stream" in body
    assert set(committed["components"]["securitySchemes"]) == {"keyId", "timestamp", "nonce", "signature"}
