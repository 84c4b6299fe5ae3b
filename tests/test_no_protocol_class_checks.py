"""The node, the device SDK and the simulation run any protocol through its interface (DESIGN §2,
session 30): none of them asks whether an object is of a concrete protocol's class (``isinstance(p,
SecEmbProtocol)``, ``isinstance(role, SecEmbUser)``...); what differs between protocols is a
method or a capability of the protocol (``make_server(party, peer_key=...)``, ``upload_clip``,
``device_clip``, ``with_noise``, ``capabilities``) or an optional role interface
(:class:`~secemb.protocols.base.RelayRole`, :class:`~secemb.protocols.base.BoundProver`).

Every ``isinstance`` / ``issubclass`` call in those packages is read with :mod:`ast`, its class
argument resolved through the module's own namespace, and refused if it is a class below
:class:`~secemb.protocols.base.Protocol`, :class:`~secemb.protocols.base.ServerRole` or
:class:`~secemb.protocols.base.UserRole` (the interfaces themselves are fine)."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from secemb.protocols.base import Protocol, ServerRole, UserRole

ROOT = Path(__file__).resolve().parents[1]
#: the packages that run protocols without knowing which
ENGINES = ("secemb/server", "secemb/client", "secemb/sim")
INTERFACES = (Protocol, ServerRole, UserRole)


def _class_checks(path: Path) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every class named in an isinstance/issubclass call of ``path``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
            continue
        arg = node.args[1]
        for el in arg.elts if isinstance(arg, ast.Tuple) else [arg]:
            if isinstance(el, ast.Name | ast.Attribute):
                out.append((node.lineno, ast.unparse(el)))
    return out


def _resolve(module: object, dotted: str) -> object:
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


def concrete_protocol_checks(root: Path) -> list[str]:
    """``file:line name`` of every class check in :data:`ENGINES` under ``root`` on a concrete
    protocol or role class."""
    bad: list[str] = []
    for package in ENGINES:
        for path in sorted((root / package).rglob("*.py")):
            checks = _class_checks(path)
            if not checks:
                continue
            module = importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
            for line, name in checks:
                obj = _resolve(module, name)
                if isinstance(obj, type) and issubclass(obj, INTERFACES) and obj not in INTERFACES:
                    bad.append(f"{path.relative_to(root)}:{line} {name}")
    return bad


def test_the_engines_never_check_for_a_concrete_protocol() -> None:
    assert concrete_protocol_checks(ROOT) == []


def test_the_check_sees_a_concrete_protocol_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan is not vacuous: a module of an engine package that checks for SecEmbProtocol is
    found (the check session 30 removed from the node)."""
    pkg = tmp_path / "secemb" / "server"
    pkg.mkdir(parents=True)
    for p in (tmp_path / "secemb", pkg):
        (p / "__init__.py").write_text("")
    (tmp_path / "secemb" / "client").mkdir()
    (tmp_path / "secemb" / "sim").mkdir()
    (pkg / "probe_m.py").write_text("from secemb.protocols.base import RelayRole\n"
                                    "from secemb.protocols.secemb import SecEmbProtocol\n\n"
                                    "def f(p, r):\n"
                                    "    return isinstance(r, RelayRole) and isinstance(p, (int, SecEmbProtocol))\n")
    import secemb.server

    monkeypatch.setattr(secemb.server, "__path__", [*secemb.server.__path__, str(pkg)])
    try:
        assert concrete_protocol_checks(tmp_path) == ["secemb/server/probe_m.py:5 SecEmbProtocol"]
    finally:
        sys.modules.pop("secemb.server.probe_m", None)
