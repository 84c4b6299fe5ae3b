"""``secemb bench robust`` (issue 34): checked against unchecked rounds, both layouts; the
byte figures are exact (the sketch check since session 29: the 16-byte seed sigma to server 1, the
sketch proof share to server 0 -- ``8 (6c + 2M + 3)`` bytes for ``K`` keys, ``M = ceil(K / c)``, the
least ``c`` minimizing it -- and the 32-byte binding tau, forwarded under the MAC with relay)."""

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
    def proof(keys: int) -> int:
        return 8 * min(6 * c + 2 * -(-keys // c) + 3 for c in range(1, keys + 1))

    # cuckoo: B = ceil(1.25 * 200) = 250 keys (a proof of 904 bytes)
    assert cuckoo["checked"]["device_upload_bytes"] - cuckoo["unchecked"]["device_upload_bytes"] == \
        16 + proof(250) + 32 == 952
    # full: m' = 200 keys (808 bytes)
    assert full["checked"]["device_upload_bytes"] - full["unchecked"]["device_upload_bytes"] == \
        16 + proof(200) + 32 == 856
    assert all(x["server_time_ratio"] > 0 for x in lines)


def test_bench_robust_bound_adds_the_proof_to_the_upload() -> None:
    from secemb.framing import HEADER_BYTES
    from secemb.fss.rangeproof import RangeParams

    res = CliRunner().invoke(app, ["bench", "robust", "--users", "2", "--repeats", "1", "--json", "--bound",
                                   "--layouts", "cuckoo"])
    assert res.exit_code == 0, res.output
    (line,) = [json.loads(x) for x in res.stdout.splitlines()]
    # 2 users, cuckoo (3 proven values a row, session 31): t = floor(log2((2^31 - 1) / 6)) = 28 bits, 40
    # projections; the device's one proof message (framed) to server 0 (the seed sigma to server 1 is the
    # verified request's already)
    proof = RangeParams(rows=40, bits=28, ring_bits=32).message_bytes(0) + HEADER_BYTES
    assert line["bounded"]["device_upload_bytes"] - line["checked"]["device_upload_bytes"] == proof
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
