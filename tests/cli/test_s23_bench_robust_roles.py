"""``secemb bench robust --roles`` (session 23, issue 34): the CLI passes ``roles`` to the bench, as
docs/results.md ("Verified uploads") tells a reader to run it: each kind's role-call medians in the
JSON, a table of them otherwise; without the option, neither."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from secemb.cli import app

BASE = ["bench", "robust", "--users", "2", "--repeats", "1", "--layouts", "cuckoo", "--bound"]


def test_roles_reach_the_json_and_the_table() -> None:
    res = CliRunner().invoke(app, [*BASE, "--json", "--roles"])
    assert res.exit_code == 0, res.output
    (line,) = [json.loads(x) for x in res.stdout.splitlines()]
    for kind in ("unchecked", "checked", "bounded"):
        assert "s0.handle_retrieval_many" in line[kind]["roles"]
    assert "s1.bound_answer" in line["bounded"]["roles"] and "s1.bound_answer" not in line["checked"]["roles"]
    table = CliRunner().invoke(app, [*BASE, "--roles"])
    assert table.exit_code == 0 and "role calls" in table.output and "s1.bound_answer" in table.output


def test_without_roles_there_are_none() -> None:
    res = CliRunner().invoke(app, [*BASE, "--json"])
    assert res.exit_code == 0, res.output
    (line,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert all("roles" not in line[kind] for kind in ("unchecked", "checked", "bounded"))
    assert "role calls" not in CliRunner().invoke(app, BASE).output
