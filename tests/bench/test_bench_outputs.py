"""Issue 32, item 2 for the benches: every `secemb bench` output is checked before any work --
an existing result is refused without --force (and left byte for byte), an input is never
replaced, an unwritable path exits 2 at once -- and results are strict JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secemb.cli import app

#: (command and options, the file under the output that a run writes)
FILE_OUTPUTS = [
    (["bench", "scale", "--size", "tiny"], "--out"),
    (["bench", "scale", "--size", "tiny"], "--plot"),
    (["bench", "compare"], "--out"),
    (["bench", "compare"], "--plot"),
    (["bench", "seq"], "--out"),
    (["bench", "dp"], "--out"),
    (["bench", "noise"], "--out"),
    (["bench", "popularity"], "--out"),
    (["bench", "popularity"], "--plot"),
    (["bench", "secagg"], "--out"),
    (["bench", "secea"], "--out"),
    (["bench", "sfsl", "--quick"], "--out"),
    (["bench", "grec"], "--out"),
]
#: (command, the file it writes inside its --out folder)
FOLDER_OUTPUTS = [
    (["bench", "server", "--quick"], "server.json"),
    (["bench", "server", "--quick"], "server_vs_m.png"),
    (["bench", "comm"], "comm.md"),
    (["bench", "compute"], "compute.png"),
    (["bench", "memory"], "memory.csv"),
    (["bench", "he"], "he.md"),
    (["bench", "accuracy"], "table3.md"),
]


def refused(args: list[str], existing: Path) -> str:
    """Run ``args``; check it exits 2 with one ``error:`` line and ``existing`` untouched."""
    before = existing.read_bytes()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1 and "Traceback" not in res.output
    assert existing.read_bytes() == before
    return res.stderr


@pytest.mark.parametrize(("command", "option"), FILE_OUTPUTS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_an_existing_result_file_is_refused_without_force(tmp_path: Path, command: list[str], option: str) -> None:
    earlier = tmp_path / "earlier-result"
    earlier.write_text('{"an": "earlier result"}')
    message = refused([*command, option, str(earlier)], earlier)
    assert f"{option} {earlier}: exists; pass --force to replace it" in message


@pytest.mark.parametrize(("command", "name"), FOLDER_OUTPUTS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_an_existing_result_in_the_out_folder_is_refused_without_force(tmp_path: Path, command: list[str],
                                                                         name: str) -> None:
    (tmp_path / name).write_bytes(b"an earlier result")
    message = refused([*command, "--out", str(tmp_path)], tmp_path / name)
    assert name in message and "pass --force" in message


@pytest.mark.parametrize(("command", "option"), FILE_OUTPUTS[:3], ids=lambda v: " ".join(v) if isinstance(v, list)
                         else v)
def test_an_unwritable_output_exits_2_before_any_work(command: list[str], option: str) -> None:
    res = CliRunner().invoke(app, [*command, option, "/proc/secemb-no-such/out.json"])
    assert res.exit_code == 2 and res.stderr.startswith("error: ") and "cannot be written" in res.stderr


def test_compare_never_replaces_a_result_it_merges_even_with_force(tmp_path: Path) -> None:
    part = tmp_path / "cmp-grec.json"
    part.write_text(json.dumps({"rows": []}))
    message = refused(["bench", "compare", "--from", str(part), "--out", str(part), "--force",
                       "--plot", str(tmp_path / "c.png")], part)
    assert "is an input of this command" in message


def test_force_replaces_an_earlier_result_with_strict_json(tmp_path: Path) -> None:
    out, png = tmp_path / "scale.json", tmp_path / "scale.png"
    out.write_text("earlier")
    png.write_bytes(b"earlier")
    res = CliRunner().invoke(app, ["bench", "scale", "--size", "tiny", "--workers", "1", "--repeat", "1",
                                   "--backends", "thread", "--out", str(out), "--plot", str(png), "--force"])
    assert res.exit_code == 0, res.output
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert png.read_bytes().startswith(b"\x89PNG")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind
