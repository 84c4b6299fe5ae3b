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
