"""Issue 34 over HTTP: two ``secemb serve`` processes configured with the deployment's defaults verify
bounded payloads -- a device that sends oversized payloads is left out of every round it tries, the model
is bit for bit the model of the run in which that device drops out, and both servers say so at start-up
and in ``/v1/admin/status``.  With ``bound = false`` stated, the same device is included and changes the
model, and the servers warn at start-up.

The cluster is the one of tests/server/test_net_bounded_payloads.py (:mod:`net_helpers`); its settings are
:func:`~secemb.sim.settings.cluster_settings`' with the ``bound`` option removed (a configuration that says
nothing about bounds), or as they are (a simulation states ``bound = false``)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from net_helpers import WAIT_S, dump_logs, setup, small_data  # noqa: E402
from _server_template import popen_secemb  # noqa: E402

from secemb.data import load_dataset, train_test_split  # noqa: E402

from secemb.cli import app  # noqa: E402
from secemb.protocols.adversary import AdversaryRecord, attack_behavior  # noqa: E402
from secemb.protocols.secemb import SecEmbProtocol  # noqa: E402
from secemb.sim.cluster import LocalCluster  # noqa: E402
from secemb.sim.coordinator import train_networked  # noqa: E402
from secemb.sim.driver import run  # noqa: E402
from secemb.sim.local import InProcessServers  # noqa: E402
from secemb.sim.settings import cluster_settings  # noqa: E402
from secemb.training import TrainConfig  # noqa: E402

#: the attack and its devices (users 0 and 1)
ATTACK, COUNT = "oversized-payload", 2
#: the default bound's round size for small_data()'s 30 users: min(100, num_users)
DEFAULT_N = 30


@contextlib.contextmanager
def _cluster(settings: dict[str, Any]) -> Iterator[LocalCluster]:
    with tempfile.TemporaryDirectory(prefix="secemb-test-") as d:
        cluster = LocalCluster(d, **settings)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


def _run(cluster: LocalCluster, proto: SecEmbProtocol, record: AdversaryRecord) -> tuple[Any, dict, dict]:
    """A networked run with the attackers; its result, the users of each round and each round's outcome."""
    model, _, config = setup("secemb", "cuckoo", proto.relay, m_prime=8, epochs=1, users_per_round=10)
    tr, te = small_data()
    took_part: dict[int, list[int]] = {}
    try:
        got = train_networked(cluster, model, proto, tr, te, config, workers=8, wait_s=WAIT_S,
                              device_randomness="reproducible", behavior=attack_behavior(ATTACK, COUNT),
                              after_round=record.after_round,
                              before_round=lambda _i, _a, r, users: took_part.__setitem__(r, sorted(users)))
    except Exception:
        print(dump_logs(cluster))
        raise
    outcomes = {r: cluster.admin(0).get_json(f"/v1/rounds/{r}/status") for r in took_part}
    return got, took_part, outcomes


def _absent(proto: SecEmbProtocol, settings: dict[str, Any]) -> str:
    """The model digest of the in-process run on servers configured by ``settings`` in which the attackers
    drop out (retrieve, never upload)."""
    model, _, config = setup("secemb", "cuckoo", proto.relay, m_prime=8, epochs=1, users_per_round=10)
    tr, te = small_data()
    servers = InProcessServers(settings, proto, model)
    try:
        return run(servers.servers(), model, proto, tr, te, config, device_randomness="reproducible",
                   behavior=lambda _r, u: "drop" if u < COUNT else None).model_sha256
    finally:
        servers.stop()


def _settings(proto: SecEmbProtocol) -> dict[str, Any]:
    model, _, config = setup("secemb", "cuckoo", proto.relay, m_prime=8, epochs=1, users_per_round=10)
    tr, _ = small_data()
    return cluster_settings(model, proto, tr, config, deadline_s=60.0) | {"min_users": 2}


def _startup_lines(cluster: LocalCluster, party: int) -> list[str]:
    return [line for line in cluster.log(party).read_text().splitlines() if "payload bounds" in line]


def test_a_default_deployment_rejects_oversized_payloads_and_trains_the_model_without_them() -> None:
    proto = SecEmbProtocol(layout="cuckoo", relay=True, bound=True, users_per_round=DEFAULT_N)  # what the devices run
    settings = _settings(proto)
    options = {k: v for k, v in settings["protocol_options"].items() if k not in ("bound", "users_per_round")}
    settings |= {"protocol_options": options}
    record = AdversaryRecord(ATTACK, COUNT)
    with _cluster(settings) as cluster:
        assert cluster.deployment.config(0).protocol_options == {"bound": True, "users_per_round": DEFAULT_N}
        got, took_part, outcomes = _run(cluster, proto, record)
        statuses = [cluster.admin(p).get_json("/v1/admin/status") for p in (0, 1)]
        lines = [_startup_lines(cluster, p) for p in (0, 1)]
    for status in statuses:
        assert status["payload_bounds"]["verified"] is True
        assert status["payload_bounds"]["users_per_round"] == DEFAULT_N
    for party_lines in lines:
        assert len(party_lines) == 1 and party_lines[0].startswith("payload bounds verified"), party_lines
    attacked = 0
    for r, users in took_part.items():
        out = outcomes[r]
        if out["state"] != "committed":
            continue
        bad = [u for u in users if u < COUNT]
        assert out["rejected"] == bad and out["included"] == [u for u in users if u >= COUNT], (r, users, out)
        attacked += bool(bad)
    assert attacked >= 1  # the attackers took part in some round
    assert all(r["malicious_included"] == [] for r in record.rounds)
    assert got.model_sha256 == _absent(proto, settings)


def test_bound_false_turns_the_check_off_with_a_warning_and_the_attack_lands() -> None:
    proto = SecEmbProtocol(layout="cuckoo", relay=True)
    settings = _settings(proto)
    assert settings["protocol_options"] == {"bound": False}  # a simulation without --bound states it
    record = AdversaryRecord(ATTACK, COUNT)
    with _cluster(settings) as cluster:
        got, took_part, outcomes = _run(cluster, proto, record)
        status = cluster.admin(0).get_json("/v1/admin/status")
        lines = _startup_lines(cluster, 0)
    assert status["payload_bounds"] == {"verified": False, "users_per_round": None, "turned_off": True,
                                        "detail": status["payload_bounds"]["detail"]}
    assert len(lines) == 1 and lines[0].startswith("warning: payload bounds off ([protocol.options] bound = false)")
    included = [u for r, users in took_part.items() if outcomes[r]["state"] == "committed"
                for u in outcomes[r]["included"] if u < COUNT]
    assert included  # nothing rejects the attackers' uploads
    assert all(out.get("rejected", []) == [] for out in outcomes.values())
    assert got.model_sha256 != _absent(proto, settings)


def test_the_client_command_trains_a_round_of_a_default_deployment(tmp_path: Path) -> None:
    """The quick start of docs/deployment.md on a configuration that says nothing about bounds (943
    devices: users_per_round 100): the operator adds devices and opens a round with ``secemb admin``, two
    ``secemb client`` devices prove their uploads and are included; ``secemb admin status`` reports the bound
    verified at both servers."""
    tr, _ = train_test_split(load_dataset("synthetic", seed=0), 0.2, seed=0)  # the client's own data: its default
    model, proto = setup("secemb", "cuckoo", True)[:2]
    settings = cluster_settings(model, proto, tr, TrainConfig(m_prime=20), min_users=2)
    settings["protocol_options"] = {k: v for k, v in settings["protocol_options"].items() if k != "bound"}
    a, b = 7, 9
    runner = CliRunner()
    with _cluster(settings) as cluster:
        dep = str(cluster.workdir)
        assert runner.invoke(app, ["admin", "add-devices", "--deployment", dep, "--users", f"{a},{b}"]).exit_code == 0
        r = runner.invoke(app, ["admin", "open-round", "--deployment", dep, "--participants", f"{a},{b}",
                                "--deadline", "60"])
        assert r.exit_code == 0, r.output
        rid = json.loads(r.output)["round_id"]
        procs = [popen_secemb([sys.executable, "-m", "secemb", "client", "--user", str(u), "--credentials",
                               f"{dep}/devices/device-{u}.json", "--wait", "30", "--min-users", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for u in (a, b)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, out + err + dump_logs(cluster)
        outcome = cluster.admin(0).get_json(f"/v1/rounds/{rid}/status")
        r = runner.invoke(app, ["admin", "status", "--deployment", dep])
    assert (outcome["state"], outcome["included"], outcome["rejected"]) == ("committed", sorted((a, b)), [])
    assert r.exit_code == 0, r.output
    status = json.loads(r.output)
    for name in ("server0", "server1"):
        assert status[name]["payload_bounds"]["verified"] is True
        assert status[name]["payload_bounds"]["users_per_round"] == 100  # the default: 943 devices
