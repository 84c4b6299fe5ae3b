"""Issue 32 item 6: ``secemb bench secea`` and ``secemb bench network`` run an untimed warm-up
(the same code path on a tiny input) before every timed figure, keep it out of the figures, and
say so in their JSON and their text output.  Structure only: the order of calls against a
recording clock, never a duration."""

from __future__ import annotations

import json
import time
import types
from typing import Any

import pytest
from typer.testing import CliRunner

from secemb.bench import network, secea
from secemb.cli import app
from secemb.data import load_movielens
from secemb.protocols.secea import coding
from secemb.sim import secea as driver  # SecEA's in-process Deployment (was protocols.secea.driver)

runner = CliRunner()


@pytest.fixture(scope="module")
def ml100k():
    return load_movielens("ml-100k")


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A log of the bench module's clock reads ("clock"), shared with the wrappers below."""
    log: list[Any] = []

    def perf_counter() -> float:
        log.append("clock")
        return time.perf_counter()

    monkeypatch.setattr(secea, "time", types.SimpleNamespace(perf_counter=perf_counter))
    return log


def test_cost_times_only_the_round_after_an_untimed_warm_up_round(ml100k, events, monkeypatch):
    made: list[driver.Deployment] = []

    class Recording(driver.Deployment):
        def __init__(self, params, entity_sets, *, domain=None, key_bits=2048, **kw):
            events.append(("setup", domain, key_bits))
            super().__init__(params, entity_sets, domain=domain, key_bits=key_bits, **kw)
            made.append(self)

        def precompute(self, queries):
            events.append("precompute")
            super().precompute(queries)

        def round(self, round_id, rows, drop_after_upload=None):
            events.append("round")
            return super().round(round_id, rows, drop_after_upload)

    monkeypatch.setattr(driver, "Deployment", Recording)
    c = secea.cost(ml100k, 3, cost_items=4, key_bits=1024)
    # the warm-up: a whole round on 2 entities per silo with the smallest key (1,024 bits), before
    # the first clock read; the timed setup is the only thing between the two reads around it
    assert events == [("setup", 2, 1024), "precompute", "round",
                      "clock", ("setup", ml100k.num_items, 1024), "clock", "precompute", "round"]
    warm, timed = made
    assert [len(c.entities) for c in warm.clients] == [2, 2, 2]
    assert warm.traffic.seconds[("server", "mask")] > 0  # it ran, on its own (discarded) counters
    assert c["server_seconds"] == {stage: timed.traffic.seconds[("server", stage)]
                                   for stage in ("offline", "relay", "mask")}
    assert [cl["up_bytes"] for cl in c["clients"]] == [timed.traffic.up[n] for n in range(3)]
    assert c["exact"] and c["warm_up"] == secea.WARM_UP and "untimed" in c["warm_up"]


def test_accuracy_warms_the_arithmetic_up_before_its_first_timed_round(ml100k, events, monkeypatch):
    real = coding.run_arithmetic

    def recording(params, num_entities, own, rows, rng):
        events.append(("arithmetic", num_entities))
        return real(params, num_entities, own, rows, rng)

    monkeypatch.setattr(coding, "run_arithmetic", recording)
    acc = secea.accuracy(ml100k, 3, rounds=1, local_epochs=1, kinds=("secea",))
    assert acc["secea_equals_fixed_point_average"]
    assert events[0] == ("arithmetic", 2)  # untimed: before any clock read
    # the one timed round: the whole catalogue's arithmetic, alone between two clock reads (the
    # aggregation's), inside the run's two (its run_seconds)
    assert [e if e == "clock" else e[0] for e in events[1:]] == ["clock", "clock", "arithmetic", "clock", "clock"]
    assert events[3][1] > 1000


def test_run_states_the_warm_up(ml100k, monkeypatch):
    for part in ("accuracy", "protocol_accuracy", "cost"):
        monkeypatch.setattr(secea, part, lambda *a, **k: {})
    result = secea.run(silos=(3,), rounds=1, secemb_epochs=0)
    assert result["warm_up"] == secea.WARM_UP


def test_secea_cli_prints_the_warm_up(monkeypatch, tmp_path):
    doc = {"dataset": "ml-100k", "warm_up": secea.WARM_UP, "accuracy": [], "protocol": [], "cost": []}
    monkeypatch.setattr(secea, "run", lambda **kw: doc)
    r = runner.invoke(app, ["bench", "secea", "--out", str(tmp_path / "s.json")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert secea.WARM_UP in " ".join(r.output.split())
    assert json.loads((tmp_path / "s.json").read_text())["warm_up"] == secea.WARM_UP


def test_network_times_the_round_after_an_untimed_warm_up_round(monkeypatch):
    calls: list[tuple[int, dict[str, Any]]] = []
    real = network._round

    def recording(admin0, clients, *args):
        out = real(admin0, clients, *args)
        calls.append((len(clients), out))
        return out

    monkeypatch.setattr(network, "_round", recording)
    doc = network.run(12, concurrency=4, dim=4, m_prime=10, num_items=200, timeout_s=60.0)
    # the warm-up: the servers' floor of 10 devices (min(12, 10)) through every phase, first
    assert [n for n, _ in calls] == [10, 12]
    timed = calls[1][1]
    assert doc["phases"] == timed["phases"] and doc["round_s"] == timed["round_s"]
    assert doc["phases"]["retrieval"]["devices"] == 12 and calls[0][1]["phases"]["retrieval"]["devices"] == 10
    assert doc["warm_up"] == network.WARM_UP.format(devices=10) and "untimed round of 10 devices" in doc["warm_up"]


def test_network_cli_prints_the_warm_up(monkeypatch):
    phase = {"devices": 2, "p50_ms": 1.0, "p99_ms": 2.0, "max_ms": 3.0, "wall_s": 0.5, "devices_per_s": 4.0}
    doc = {"phases": {"open": {"wall_s": 0.1}, "retrieval": phase, "close": {"wall_s": 0.2}}, "round_s": 0.8,
           "devices_per_s": 2.5, "warm_up": network.WARM_UP.format(devices=2), "batch_wait_ms": 5.0,
           "server_s": {"0": 0.25, "1": 0.5}}  # since session 41: the servers' wait and role seconds
    monkeypatch.setattr(network, "run", lambda *a, **k: doc)
    r = runner.invoke(app, ["bench", "network", "--devices", "2"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert network.WARM_UP.format(devices=2) in " ".join(r.output.split())
