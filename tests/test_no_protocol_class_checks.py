"""The node, the device SDK and the simulation run any protocol through its interface (DESIGN §2,
session 30): none of them asks whether an object is of a concrete protocol's class (``isinstance(p,
SecEmbProtocol)``, ``isinstance(role, SecEmbUser)``...), and none imports a concrete protocol's
module (``secemb.protocols.secemb.bounds``...); what differs between protocols is a method or a
capability of the protocol (``make_server(party, peer_key=...)``, ``upload_clip``,
``device_clip``, ``with_noise``, ``payload_bound_blocker``, ``check_ring_bits``,
``capabilities``), an optional role interface (:class:`~secemb.protocols.base.RelayRole`,
:class:`~secemb.protocols.base.BoundProver`) or a constant of the interface
(:data:`~secemb.protocols.base.BOUND_CHALLENGE_BYTES`).

Every ``isinstance`` / ``issubclass`` call in those packages is read with :mod:`ast`, its class
argument resolved through the module's own namespace, and refused if it is a class below
:class:`~secemb.protocols.base.Protocol`, :class:`~secemb.protocols.base.ServerRole` or
:class:`~secemb.protocols.base.UserRole` (the interfaces themselves are fine).  Every import
statement of those packages (module level or not) is read with :mod:`ast` and refused if it
loads a module of a registered protocol's own package (``secemb.protocols.X`` of a protocol class
defined in ``secemb.protocols.X`` or below it; the shared vocabulary -- base, stages, wire,
exchange, registry... -- defines no registered protocol)."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from secemb.protocols import available_protocols, protocol_class
from secemb.protocols.base import Protocol, ServerRole, UserRole
from secemb.protocols.registry import exchange_class

ROOT = Path(__file__).resolve().parents[1]
#: the packages that run protocols without knowing which
ENGINES = ("secemb/server", "secemb/client", "secemb/sim", "secemb/transport", "secemb/round")
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


#: engine modules that import a concrete protocol's package, and why (each a debt, not a design)
IMPORTS_PENDING = {
    ("secemb/sim/secea.py", "secemb.protocols.secea"): "the SecEA simulator builds SecEA's parties itself "
                                                       "(not the generic exchange engine); session 30 left it",
}


def concrete_protocol_packages() -> set[str]:
    """``secemb.protocols.X`` of every registered protocol (two-server and one-server) whose class
    is defined in that module or below it (a plug-in's own module is outside ``secemb``)."""
    modules = [protocol_class(n).__module__ for n in available_protocols(2)]
    modules += [exchange_class(n).__module__ for n in available_protocols(1)]
    return {".".join(m.split(".")[:3]) for m in modules if m.startswith("secemb.protocols.")}


def _imported(path: Path) -> list[tuple[int, list[str]]]:
    """``(line, modules)`` of every import of ``path``: the modules it may load, the one it names
    first (``import a.b``: ``a.b``; ``from a import b, c``: ``a``, then ``a.b`` and ``a.c``, which
    may be submodules)."""
    out: list[tuple[int, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, [alias.name]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            out.append((node.lineno, [node.module, *(f"{node.module}.{a.name}" for a in node.names)]))
    return out


def concrete_protocol_imports(root: Path, packages: set[str]) -> list[str]:
    """``file:line module`` of every import in :data:`ENGINES` under ``root`` that loads a module
    of ``packages`` (or below one), but for :data:`IMPORTS_PENDING`."""
    bad: list[str] = []
    for engine in ENGINES:
        for path in sorted((root / engine).rglob("*.py")):
            rel = str(path.relative_to(root))
            for line, modules in _imported(path):
                hits = [(m, p) for m in modules for p in packages if m == p or m.startswith(p + ".")]
                if hits and (rel, hits[0][1]) not in IMPORTS_PENDING:
                    bad.append(f"{rel}:{line} {hits[0][0]}")
    return bad


def test_the_concrete_packages_are_found() -> None:
    """The registry names the packages the scan refuses (not vacuous): SecEmb's, GREC's, SFSL's
    and SecEA's among them, and no shared module."""
    packages = concrete_protocol_packages()
    assert {"secemb.protocols.secemb", "secemb.protocols.grec", "secemb.protocols.sfsl",
            "secemb.protocols.secea", "secemb.protocols.plaintext"} <= packages
    assert not packages & {"secemb.protocols.base", "secemb.protocols.stages", "secemb.protocols.wire",
                           "secemb.protocols.exchange", "secemb.protocols.registry", "secemb.protocols.factory"}


def test_the_engines_import_no_concrete_protocol() -> None:
    assert concrete_protocol_imports(ROOT, concrete_protocol_packages()) == []


def test_the_import_scan_sees_every_form(tmp_path: Path) -> None:
    """The scan finds each way to import SecEmb's bounds (the imports session 30 removed from the
    device and the configuration), at module level or in a function, and passes the interface."""
    pkg = tmp_path / "secemb" / "client"
    pkg.mkdir(parents=True)
    for engine in ENGINES[::2]:
        (tmp_path / engine).mkdir(parents=True, exist_ok=True)
    (pkg / "probe.py").write_text("from secemb.protocols.base import BOUND_CHALLENGE_BYTES\n"
                                  "from secemb.protocols.secemb.bounds import CHALLENGE_BYTES\n"
                                  "import secemb.protocols.secemb.bounds\n"
                                  "from secemb.protocols import secemb\n\n"
                                  "def f():\n"
                                  "    from secemb.protocols.grec import GRECProtocol\n")
    assert concrete_protocol_imports(tmp_path, concrete_protocol_packages()) == [
        "secemb/client/probe.py:2 secemb.protocols.secemb.bounds",
        "secemb/client/probe.py:3 secemb.protocols.secemb.bounds",
        "secemb/client/probe.py:4 secemb.protocols.secemb",
        "secemb/client/probe.py:7 secemb.protocols.grec",
    ]
