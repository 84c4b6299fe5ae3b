"""Imports that ran up the layers (issue 36, DESIGN §2) and were moved down stay gone.

Every ``import secemb...`` / ``from secemb... import`` in the package is read from the source
(function-level imports included: an import deferred to dodge a cycle is still a dependency)
and mapped to the top-level packages it joins.  The pairs below are the upward imports that
were removed; the ones that remain (the round-layer modules still in ``training/``, the
simulation's and the experiments' mix in ``engine/`` and ``training/``) are not listed yet.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "secemb"

#: package -> packages it must not import (each was an upward import before issue 36's moves)
FORBIDDEN = {
    "protocols": {"round", "engine", "server", "client", "sim", "training", "inference", "transport", "bench", "cli"},
    "round": {"engine", "server", "client", "sim", "training", "inference", "transport", "bench", "cli"},
    "transport": {"engine", "server", "client", "sim", "training", "inference", "bench", "cli"},
    "inference": {"engine", "server", "client", "sim", "training", "bench", "cli"},
    "server": {"engine", "client", "sim", "training", "bench", "cli"},
    "client": {"engine", "server", "sim", "training", "bench", "cli"},
}

#: (file, package) -> why that import up the layers is still there; each entry names who removes it
UPWARD_PENDING = {
    ("secemb/protocols/exchange.py", "round"): "a TYPE_CHECKING import of the result types ExchangeProtocol.train "
                                               "returns (issue 36, the one-server protocol interface, in progress)",
}


def _package(path: Path) -> str:
    """``server`` for secemb/server/app.py, ``outputs`` for secemb/outputs.py."""
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_packages(path: Path) -> dict[str, int]:
    """The secemb top-level packages ``path`` imports, each with the line of its first import."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "secemb" else [f"secemb.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "secemb" and len(parts) > 1:
                found.setdefault(parts[1], node.lineno)
    return found


def _upward() -> list[str]:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        src = _package(path)
        for dst, line in _imported_packages(path).items():
            if dst in FORBIDDEN.get(src, ()) and (path.relative_to(ROOT.parent).as_posix(), dst) not in UPWARD_PENDING:
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}: {src} -> {dst}")
    return bad


def test_the_scan_sees_function_level_imports(tmp_path: Path) -> None:
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from secemb.server.persist import atomic_write\n    import secemb.cli\n"
                   "from secemb import engine\n")
    assert _imported_packages(mod) == {"server": 2, "cli": 3, "engine": 4}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_exists(package: str) -> None:
    assert (ROOT / package / "__init__.py").is_file()


def test_no_import_runs_up_these_layers() -> None:
    assert _upward() == []
