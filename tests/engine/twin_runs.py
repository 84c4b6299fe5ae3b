"""The twins of ``tests/engine/test_engine_twins*.py``: one run of ``secemb train`` (server nodes
in process) and one of ``secemb demo --network --reproducible`` (the same nodes in two server
processes, devices over HTTP) with the same options and seed, and their result documents
compared.

The matrix (every registered networked protocol, with MF and FM) is dealt to three files,
protocol ``NETWORKED[i]`` to file ``i % 3`` (:func:`share`), so that ``--dist loadfile`` can
give them to different workers: one file of them all was the longest unit of the suite, a floor
on its wall time.  A protocol registered later lands in one of them by the same rule."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from secemb.cli import app
from secemb.protocols import available_protocols, protocol_class

runner = CliRunner()

#: every registered two-server protocol that declares itself networked, sorted
NETWORKED = [name for name in available_protocols(2) if protocol_class(name).capabilities.networked]
#: how many files share the matrix
SHARES = 3


def share(k: int) -> list[str]:
    """The networked protocols whose twins file ``k`` (of :data:`SHARES`) runs."""
    return NETWORKED[k::SHARES]


def run_json(tmp_path: Path, command: list[str], name: str) -> dict:
    """``secemb COMMAND --json-out tmp_path/NAME.json``: exit 0 and its result document."""
    out = tmp_path / f"{name}.json"
    res = runner.invoke(app, [*command, "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def twin_runs(tmp_path: Path, opts: list[str]) -> tuple[dict, dict]:
    """The result documents of ``secemb train OPTS`` and ``secemb demo --network --reproducible
    OPTS --concurrency 16``, after checking that they trained the same model (``model_sha256``),
    with the same per-epoch metrics, the same per-user traffic and the same recorded
    configuration."""
    a = run_json(tmp_path, ["train", *opts], "inproc")
    b = run_json(tmp_path, ["demo", "--network", "--reproducible", *opts, "--concurrency", "16"], "net")
    assert a["model_sha256"] == b["model_sha256"]
    for field in ("epochs", "comm", "config"):
        assert a[field] == b[field], (field, a[field], b[field])
    return a, b


def twins(tmp_path: Path, protocol: str, model: str) -> None:
    """The twins of ``protocol`` and ``model`` on synthetic-mini (d = 16, 60 users a round, one
    epoch: two rounds, Eq. 11's m')."""
    opts = ["--dataset", "synthetic-mini", "--model", model, "--protocol", protocol, "--dim", "16",
            "--users-per-round", "60", "--epochs", "1", "--seed", "3", "--quiet"]
    a, b = twin_runs(tmp_path, opts)
    assert a["rounds"] == b["rounds"] == 2 and a["config"]["m_prime_source"] == "eq11"
