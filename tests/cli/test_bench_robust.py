"""``secemb bench robust`` (issue 34): checked against unchecked rounds, both layouts; the
byte figures are exact (32 bytes per key's check word, sent once with relay and to both servers
without)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from secemb.cli import app


def test_bench_robust_json() -> None:
    res = CliRunner().invoke(app, ["bench", "robust", "--users", "2", "--repeats", "1", "--json"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [(x["layout"], x["relay"]) for x in lines] == [("cuckoo", True), ("full", False)]
    cuckoo, full = lines
    # cuckoo: B = ceil(1.25 * 200) = 250 keys, one copy of their check words (server 0 forwards)
    assert cuckoo["checked"]["device_upload_bytes"] - cuckoo["unchecked"]["device_upload_bytes"] == 250 * 32
    # full: m' = 200 keys, their check words to each server
    assert full["checked"]["device_upload_bytes"] - full["unchecked"]["device_upload_bytes"] == 2 * 200 * 32
    assert all(x["server_time_ratio"] > 0 for x in lines)


def test_bench_robust_bound_adds_the_proof_and_sigma_to_the_upload() -> None:
    from secemb.framing import HEADER_BYTES
    from secemb.fss.rangeproof import RangeParams

    res = CliRunner().invoke(app, ["bench", "robust", "--users", "2", "--repeats", "1", "--json", "--bound",
                                   "--layouts", "cuckoo"])
    assert res.exit_code == 0, res.output
    (line,) = [json.loads(x) for x in res.stdout.splitlines()]
    # 2 users: t = floor(log2((2^31 - 1) / 2)) = 29 bits, 40 projections; the device's one proof message
    # (framed) to server 0, and the 16-byte seed sigma appended to its request to server 1
    proof = RangeParams(rows=40, bits=29, ring_bits=32).message_bytes(0) + HEADER_BYTES
    assert line["bounded"]["device_upload_bytes"] - line["checked"]["device_upload_bytes"] == proof + 16
    assert line["bounded"]["device_proof_s"] > 0 and line["checked"]["device_proof_s"] == 0
    assert line["bounded_server_time_ratio"] > 0 and line["bounded_server_bytes_ratio"] > 1
    # the round's uploads reach server 0 as one batch, as in the in-process engine: one challenge for both devices
    assert line["challenges"] == 1


def test_bench_robust_workers_runs_the_servers_on_threads() -> None:
    res = CliRunner().invoke(app, ["bench", "robust", "--users", "2", "--repeats", "1", "--json", "--bound",
                                   "--layouts", "cuckoo", "--workers", "2"])
    assert res.exit_code == 0, res.output
    (line,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert line["workers"] == 2
    table = CliRunner().invoke(app, ["bench", "robust", "--users", "2", "--repeats", "1", "--layouts", "cuckoo",
                                     "--workers", "2"])
    assert table.exit_code == 0 and "2 threads" in table.output
    refused = CliRunner().invoke(app, ["bench", "robust", "--workers", "-1"])
    assert refused.exit_code == 2
