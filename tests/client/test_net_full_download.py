"""Regression (issue 11, defect 1): ``secemb demo --network --protocol secfedrec --layout full
--no-relay --epochs 1`` aborted every round with HTTP 413, because the server bounded request
bodies with SecEmb's key-size formula instead of asking the protocol.  Now each endpoint's
limit is the protocol's own exact bound, and the networked run equals the in-process one."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from secemb.cli import app

runner = CliRunner()


def _ratings_csv(path, num_users: int = 40, num_items: int = 300, per_user: int = 20) -> None:
    """Enough items that the full upload (about m w 4 bytes) exceeded the old formula's bound
    (4096 + m' (16 (log2 m + 2) + 8 + 8 w) + 8 P bytes)."""
    rng = np.random.default_rng(7)
    lines = ["user,item,rating"]
    for u in range(num_users):
        for i in rng.choice(num_items, size=per_user, replace=False):
            lines.append(f"{u},{i},{int(rng.integers(1, 6))}")
    path.write_text("\n".join(lines) + "\n")


def test_demo_network_secfedrec_full_no_relay_is_not_refused_with_413(tmp_path):
    data = tmp_path / "ratings.csv"
    _ratings_csv(data)
    opts = ["--dataset", str(data), "--protocol", "secfedrec", "--layout", "full", "--no-relay", "--epochs", "1",
            "--dim", "8", "--m-prime", "8", "--users-per-round", "12", "--quiet"]
    r1 = runner.invoke(app, ["train", *opts, "--json-out", str(tmp_path / "inproc.json")])
    assert r1.exit_code == 0, r1.output
    r2 = runner.invoke(app, ["demo", "--network", "--reproducible", *opts, "--concurrency", "6", "--json-out",
                              str(tmp_path / "net.json")])
    assert r2.exit_code == 0, r2.output
    a = json.loads((tmp_path / "inproc.json").read_text())
    b = json.loads((tmp_path / "net.json").read_text())
    assert b["rounds"] == a["rounds"] == 4  # 40 users, 12 a round: no round aborted
    assert b["model_sha256"] == a["model_sha256"]
    assert b["comm"] == a["comm"]


def test_demo_explicit_unsupported_layout_exits_2():
    for cmd in (["train"], ["demo"], ["demo", "--network"]):
        r = runner.invoke(app, [*cmd, "--protocol", "secemb-init", "--layout", "cuckoo", "--quiet"])
        assert r.exit_code == 2, (cmd, r.output)
        assert "'secemb-init' does not support layout='cuckoo'; allowed: ['full']" in r.output
