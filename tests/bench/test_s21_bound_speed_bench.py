"""``python -m secemb.bench.robust --roles`` (session 21, issue 34): each kind's figures hold the
median seconds a round of every server role call, named by server and method; a round's calls
add up to its server seconds, and the bound check's calls appear in bounded rounds only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from secemb.bench.robust import measure


def test_roles_name_each_servers_calls_and_add_up_to_the_server_seconds() -> None:
    (line,) = measure(3, 1, size="ml100k", layouts=("cuckoo",), bound=True, roles=True)
    bound_calls = {"s0.challenge", "s0.handle_proof_many", "s0.bound_request", "s1.bound_answer", "s0.bound_rejected"}
    for kind in ("unchecked", "checked", "bounded"):
        roles = line[kind]["roles"]
        assert {"s0.handle_retrieval_many", "s1.relay_retrieval_many", "s0.aggregate_share", "s1.combine"} <= set(roles)
        assert all(v >= 0 for v in roles.values())
        assert sum(roles.values()) == pytest.approx(line[kind]["server_s"], rel=1e-9)  # one round: its own calls
        assert bound_calls <= set(roles) if kind == "bounded" else not bound_calls & set(roles)
    assert ("rejected" in line["checked"]["roles"]) and "rejected" not in line["unchecked"]["roles"]
    (plain,) = measure(2, 1, size="ml100k", layouts=("cuckoo",), bound=True)
    assert all("roles" not in plain[kind] for kind in ("unchecked", "checked", "bounded"))


def test_cli_roles_flag() -> None:
    out = subprocess.run([sys.executable, "-m", "secemb.bench.robust", "--users", "2", "--repeats", "1",
                          "--layouts", "cuckoo", "--roles"], capture_output=True, text=True, timeout=300, check=True)
    (line,) = [json.loads(x) for x in out.stdout.splitlines()]
    assert "s1.relay_upload_many" in line["checked"]["roles"]
