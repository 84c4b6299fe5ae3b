"""Start-up (issue 37): ``secemb COMMAND`` builds only COMMAND, and says what the whole app says.

:func:`secemb.cli.main` imports and builds only the module of the command ``argv[1]`` names
(:data:`secemb.cli.COMMANDS`); the whole app (``secemb.cli.app``) is built from the same mapping.
Each command's ``--help`` and usage errors, through the app of that command alone, are compared with
the whole app's, byte for byte; the entry point's own choice is checked in a fresh interpreter.
The command modules' annotations are objects (typer evaluates string annotations on every build),
and the tests' cache of built commands (``tests/_cli_cache.py``) follows the protocol registry.
"""

import ast
import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main
from typer.testing import CliRunner

import secemb.cli
from secemb.cli import COMMANDS, app, build_app

CLI_DIR = Path(secemb.cli.__file__).parent


def _commands(typer_app: typer.Typer) -> dict:
    return dict(typer.main.get_command(typer_app).commands)  # type: ignore[attr-defined]


def test_the_mapping_is_every_command_each_module_registers_its_own() -> None:
    assert list(_commands(app)) == list(COMMANDS)  # also the order of 'secemb --help'
    for name in COMMANDS:
        assert list(_commands(build_app([name]))) == [name]


def test_every_module_with_a_top_level_register_is_in_the_mapping() -> None:
    """A new command module (``register(app)``, not a bench group's ``register(bench_app)``) is listed."""
    registering = set()
    for path in CLI_DIR.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "register" and node.args.args[0].arg == "app":
                registering.add(f"secemb.cli.{path.stem}")
    assert registering == set(COMMANDS.values())


def _cases(name: str, command: object) -> list[list[str]]:
    """Arguments to compare for top-level ``name``: its help and bad usage, and for a group its
    subcommands' too."""
    cases = [[name, "--help"], [name, "--no-such-option"]]
    subcommands = getattr(command, "commands", None)
    if subcommands is not None:
        cases += [[name], [name, "no-such-command"]]
        for sub in subcommands:
            cases += [[name, sub, "--help"], [name, sub, "--no-such-option"]]
    return cases


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_app_of_one_command_says_what_the_whole_app_says(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import _cli_cache

    monkeypatch.setattr(typer.testing, "_get_command", _cli_cache.cached_command)  # each app built once
    whole = _commands(app)[name]
    alone = build_app([name])
    for args in _cases(name, whole):
        want, got = CliRunner().invoke(app, args), CliRunner().invoke(alone, args)
        assert (got.exit_code, got.stdout, got.stderr) == (want.exit_code, want.stdout, want.stderr), args
        assert want.exit_code in (0, 2), (args, want.output)  # help or a usage error, never a crash


_MAIN = """
import contextlib, io, json, sys
from secemb.cli import main

def run(*args):
    sys.argv = ["secemb", *args]
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
    cli = sorted(m for m in sys.modules if m.startswith("secemb.cli.") and not m.startswith("secemb.cli._"))
    return {"args": list(args), "code": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "cli": cli}

print(json.dumps([run("serve", "--help"), run("client", "--no-such-option"), run("admin", "status", "--help"),
                  run(), run("--help"), run("--version"), run("no-such-command"), run("serve", "--help")]))
"""


def test_main_builds_the_named_command_only_and_the_whole_app_otherwise() -> None:
    """In one fresh interpreter: ``serve``, ``client`` and ``admin`` import their own modules only
    (no other command's); no command, ``--help``, ``--version`` and an unknown command, the whole app.
    Every answer is the whole app's in process (same text, same exit code)."""
    proc = subprocess.run([sys.executable, "-c", _MAIN], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs[0]["cli"] == ["secemb.cli.serve"]
    assert runs[1]["cli"] == ["secemb.cli.client", "secemb.cli.serve"]
    assert runs[2]["cli"] == ["secemb.cli.admin", "secemb.cli.client", "secemb.cli.serve"]
    assert set(COMMANDS.values()) <= set(runs[3]["cli"])  # no command: the whole app
    for got in runs:
        want = CliRunner().invoke(app, got["args"], terminal_width=78)  # click's width on an 80-column terminal
        assert (got["code"], got["stdout"], got["stderr"]) == (want.exit_code, want.stdout, want.stderr), got["args"]
    assert [r["code"] for r in runs] == [0, 2, 0, 2, 0, 0, 2, 0]
    assert runs[5]["stdout"].startswith("secemb ") and "No such command 'no-such-command'" in runs[6]["stderr"]


def _callbacks(typer_app: typer.Typer):  # noqa: ANN202 - a generator of functions
    if typer_app.registered_callback is not None:
        yield typer_app.registered_callback.callback
    for info in typer_app.registered_commands:
        yield info.callback
    for group in typer_app.registered_groups:
        assert group.typer_instance is not None
        yield from _callbacks(group.typer_instance)


def test_no_command_declares_string_annotations() -> None:
    """typer evaluates a string annotation (``from __future__ import annotations``) on every build of the
    command; the command modules declare objects, made once."""
    callbacks = list(_callbacks(app))
    assert len(callbacks) >= len(COMMANDS)
    for callback in callbacks:
        function = inspect.unwrap(callback)
        strings = {k: v for k, v in inspect.get_annotations(function).items() if isinstance(v, str)}
        assert strings == {}, (function.__qualname__, strings)


@pytest.fixture
def cached(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - the plugin module
    """``CliRunner.invoke`` through the tests' cache of built commands, its builds counted."""
    import _cli_cache

    builds = []
    real = typer.main.get_command

    def counting(typer_app: typer.Typer):  # noqa: ANN202
        builds.append(typer_app)
        return real(typer_app)

    monkeypatch.setattr(typer.testing, "_get_command", _cli_cache.cached_command)
    monkeypatch.setattr(typer.main, "get_command", counting)
    monkeypatch.setattr(_cli_cache, "_BUILT", {})
    return builds


def _protocol_help(command: str) -> str:
    res = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    return " ".join(res.stdout.split())


def test_the_cached_command_follows_the_protocol_registry(cached: list) -> None:
    """A protocol registered after a build (a plug-in's) is in ``--protocol``'s help of the next invoke, and
    gone once unregistered: a cache keyed on the app alone fails here."""
    from secemb.protocols import register_protocol, unregister_protocol

    assert "zz-late-plugin" not in _protocol_help("train")
    assert "zz-late-plugin" not in _protocol_help("demo")
    assert len(cached) == 1  # one build for both invokes
    register_protocol("zz-late-plugin", "zz_late_plugin:Protocol", wire_id=251, servers=1)
    try:
        for command in ("train", "demo"):
            assert "zz-late-plugin" in _protocol_help(command)
        assert len(cached) == 2
    finally:
        unregister_protocol("zz-late-plugin")
    assert "zz-late-plugin" not in _protocol_help("train")
    assert len(cached) == 2  # the registry as before: the first build again


def test_the_cached_command_follows_the_app(cached: list) -> None:
    """A command registered on an app after a build is there on the next invoke."""
    own = build_app(["credentials"])
    assert CliRunner().invoke(own, ["serve", "--help"]).exit_code == 2
    importlib.import_module(COMMANDS["serve"]).register(own)
    res = CliRunner().invoke(own, ["serve", "--help"])
    assert res.exit_code == 0 and "--peer-url" in res.stdout
    assert len(cached) == 2
