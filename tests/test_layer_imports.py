"""The package layout is the architecture (issue 36, DESIGN §2): dependencies point one way.

Every ``import secemb...`` / ``from secemb... import`` in the package is read from the source
with :mod:`ast` -- module-level, function-level and ``TYPE_CHECKING`` imports alike (an import
deferred to dodge a cycle is still a dependency) -- and resolved to the module it loads.  The
checks:

* no import runs up the layers (:data:`FORBIDDEN`);
* no import circle between modules of different packages, and none between packages;
* no function-level import of a secemb module unless it is there to defer a heavy dependency
  (:data:`LAZY_TARGETS`) or sits in a command line's code (:data:`LAZY_IMPORTERS`); every other
  import is at module level, where a cycle would show;
* no module ``__getattr__`` and no import by a run-time name (the other ways to hide an import)
  unless :data:`GETATTR` or :data:`IMPORT_BY_NAME` gives why.

Each allow-list entry says why it is there; ``*_PENDING`` entries are debts another change of
issue 36 removes, not exemptions.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "secemb"

#: the packages (and top-level modules) bottom to top (DESIGN §2): each may import its own
#: layer and those below, none above.  The hazmat and the data; the models and their metrics;
#: protocols/ (the stage vocabulary below every party); round/ (what every party of a round
#: shares: messages, results, the update step); inference/ and transport/; the parties; the
#: simulation; the orchestration (training/: loop, Experiment); bench/ and the command line.
#: A package not listed is not checked (give it a layer when it is created).
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer.split()) for layer in (
    "errors",
    "randomness ring outputs digest sharing framing options packing",
    "fss secagg privacy data",
    "models",
    "metrics",
    "protocols",
    "round",
    "inference transport",
    "server client",
    "sim",
    "training",
    "bench",
    "cli __main__",
))
#: within a layer, these do not import each other either
APART = {("transport", "inference"), ("server", "client"), ("client", "server")}

#: package -> packages it must not import
FORBIDDEN = {package: {p for upper in LAYERS[i + 1:] for p in upper} | {b for a, b in APART if a == package}
             for i, layer in enumerate(LAYERS) for package in layer}

#: (file, package) -> why that import up the layers is still there, and which change removes it
UPWARD_PENDING: dict[tuple[str, str], str] = {}

#: {package, package} circles still there -> why, and which change removes them
CIRCLES_PENDING: dict[frozenset[str], str] = {}

#: secemb modules (a name covers its submodules) a function may import, and why: each pulls in
#: a dependency that costs seconds or is optional, which only some calls need
LAZY_TARGETS = {
    "secemb.fss._numba_kernels": "numba compiles the kernels on first import (seconds)",
    "secemb.fss._aesni": "builds or loads the AES-NI extension",
    "secemb.fss._shani": "numba compiles or loads the SHA-NI kernel (a process that hashes with hashlib never does)",
    "secemb.fss._keccak": "numba compiles or loads the batched SHAKE-128 (a process without the compiled kernels "
                          "hashes with hashlib and never does)",
    "secemb.fss._projection_kernels": "numba compiles or loads the projections' loop (only project_each with kernels)",
    "secemb.fss._rangeproof_kernels": "numba compiles or loads the range proof's verifier and Lagrange loops "
                                      "(only with kernels)",
    "secemb.fss._scatter_kernels": "numba compiles or loads the cuckoo layout's scatter (only with kernels)",
    "secemb.fss._sketch_kernels": "numba compiles or loads the sketch check's loop (only sketch-checked uploads "
                                  "with kernels)",
    "secemb.fss._sketchproof_kernels": "numba compiles or loads the sketch proof's verifier (only sketch-checked "
                                       "uploads with kernels)",
    "secemb.fss._sketch_device_kernels": "numba compiles or loads the device's sketch inputs (only a device "
                                         "uploading to sketch-checking servers, with kernels)",
    "secemb.fss.fused": "numba kernels (seconds to compile)",
    "secemb.fss._kernel_cache": "numba's caching and dispatcher (only where numba imports: kernels.available)",
    "secemb.fss.gpu": "torch and a CUDA device (the gpu extra)",
    "secemb.server.app": "FastAPI (the server extra): only a running server needs it",
    "secemb.server.exchange_app": "FastAPI (the server extra): only a running server needs it",
    "secemb.server.listener": "uvicorn (the server extra): only a running server needs it",
    "secemb.transport.http": "httpx (the server extra): an in-process device or server never needs it",
    "secemb.transport.network": "httpx (the server extra): an in-process device or server never needs it",
}

#: secemb modules (a name covers its submodules) whose functions may import anything, and why
LAZY_IMPORTERS = {
    "secemb.cli": "each command imports its stack when it runs, so that `secemb --help` and a typo answer at once",
    "secemb.bench": "each benchmark imports what it measures when it runs (one `secemb bench` command runs one)",
}

#: (file, module) function-level imports that stay, and why
FUNCTION_IMPORTS = {
    ("secemb/__init__.py", "secemb.training.experiment"): "secemb.Experiment on first use: `import secemb` stays "
                                                          "cheap (GETATTR)",
}

def _each(path: str, targets: str, why: str) -> dict[tuple[str, str], str]:
    return {(path, target): why for target in targets.split()}


_HOIST = "no cycle: to module level"
#: (file, module) function-level imports still there -> why, and which change removes them
FUNCTION_IMPORTS_PENDING = {
}

#: modules that import a module by its name at run time (``importlib.import_module``,
#: ``__import__``: an import the scan cannot see) -> why
IMPORT_BY_NAME = {
    "secemb.protocols.registry": "a registered protocol's class is imported when first asked for: the built-ins are "
                                 "registered as 'module:Class' so that importing secemb.protocols stays cheap, and "
                                 "a plug-in registers its own module",
    "secemb.cli": "a process imports only the command it runs (COMMANDS: name -> module, session 37): the modules "
                  "it names are the CLI's own commands, secemb.cli.*, the top layer, so no dependency is hidden",
}

#: modules with a module-level ``__getattr__`` -> why
GETATTR = {
    "secemb": "``secemb.Experiment`` on first use: ``import secemb`` stays cheap (no training stack, no torch)",
    "secemb.cli": "``secemb.cli.app``, the whole app, built at first use: ``secemb serve`` imports only serve's module",
}


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` loads ``target`` at ``line``; ``where`` is
    ``"module"``, ``"function"`` or ``"type-checking"``."""

    source: str
    target: str
    line: int
    where: str

    def __str__(self) -> str:
        return f"{_path(self.source)}:{self.line}: {self.source} -> {self.target} ({self.where})"


def _module(path: Path) -> str:
    """``secemb.server.app`` for secemb/server/app.py, ``secemb.server`` for its __init__.py."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module(path): path for path in sorted(ROOT.rglob("*.py"))}


def _path(module: str) -> str:
    return _modules()[module].relative_to(ROOT.parent).as_posix()


def _package(module: str) -> str:
    """``server`` for secemb.server.app, ``outputs`` for secemb.outputs, ``secemb`` for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _resolve(name: str, modules: dict[str, Path] | set[str]) -> str | None:
    """The module ``import name`` loads last: the longest prefix of ``name`` that is a module."""
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, text: str, modules: dict[str, Path] | set[str]) -> list[Import]:
    """The secemb imports in ``text`` (the code of module ``source``), resolved against ``modules``."""
    found: list[Import] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = "function"
            elif isinstance(child, ast.If) and where == "module" and _is_type_checking(child.test):
                for sub in child.body:
                    visit_one(sub, "type-checking")
                for sub in child.orelse:
                    visit_one(sub, where)
                continue
            visit_one(child, inner)

    def visit_one(node: ast.AST, where: str) -> None:
        names: list[str] = []
        line = 0
        if isinstance(node, ast.Import):
            names, line = [alias.name for alias in node.names], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                     for alias in node.names]
            line = node.lineno
        for name in names:
            target = _resolve(name, modules) if name.split(".")[0] == "secemb" else None
            if target is not None and target not in (source, "secemb"):  # every module loads the root anyway
                found.append(Import(source, target, line, where))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            visit(node, "function")
        else:
            visit(node, where)

    visit(ast.parse(text), "module")
    return found


@cache
def _all_imports() -> tuple[Import, ...]:
    modules = _modules()
    return tuple(imp for module, path in modules.items()
                 for imp in imports_of(module, path.read_text(encoding="utf-8"), modules))


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _graph(imports: tuple[Import, ...] | list[Import], key=lambda m: m) -> dict[str, set[str]]:  # noqa: ANN001
    graph: dict[str, set[str]] = {}
    for imp in imports:
        a, b = key(imp.source), key(imp.target)
        graph.setdefault(a, set())
        graph.setdefault(b, set())
        if a != b:
            graph[a].add(b)
    return graph


def _under(module: str, names: dict[str, str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


# ------------------------------------------------------------------------------------ checks
def test_no_import_runs_up_these_layers() -> None:
    bad = [str(imp) for imp in _all_imports()
           if _package(imp.target) in FORBIDDEN.get(_package(imp.source), ())
           and (_path(imp.source), _package(imp.target)) not in UPWARD_PENDING]
    assert bad == []


def test_no_circle_between_modules_of_different_packages() -> None:
    circles = [sorted(c) for c in _strongly_connected(_graph(_all_imports()))
               if len({_package(m) for m in c}) > 1]
    edges = sorted({str(imp) for imp in _all_imports() for c in circles if imp.source in c and imp.target in c})
    assert circles == [], "\n".join(edges)


def test_no_circle_between_packages() -> None:
    circles = [frozenset(c) for c in _strongly_connected(_graph(_all_imports(), _package))]
    unexplained = [sorted(c) for c in circles if c not in CIRCLES_PENDING]
    edges = sorted({str(imp) for imp in _all_imports() for c in unexplained
                    if _package(imp.source) in c and _package(imp.target) in c
                    and _package(imp.source) != _package(imp.target)})
    assert unexplained == [], "\n".join(edges)


def test_function_level_imports_defer_a_heavy_dependency() -> None:
    bad = [str(imp) for imp in _all_imports()
           if imp.where == "function" and not _under(imp.target, LAZY_TARGETS)
           and not _under(imp.source, LAZY_IMPORTERS)
           and (_path(imp.source), imp.target) not in FUNCTION_IMPORTS | FUNCTION_IMPORTS_PENDING]
    assert bad == [], ("import these at module level (a cycle that then shows is one to break), or name the heavy "
                       "dependency they defer in LAZY_TARGETS:\n" + "\n".join(bad))


def test_no_module_getattr_hides_an_import() -> None:
    found = {module for module, path in _modules().items()
             if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                    for node in ast.parse(path.read_text(encoding="utf-8")).body)}
    assert found == set(GETATTR)


def _imports_by_name(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
        or (isinstance(node.func, ast.Name) and node.func.id in ("__import__", "import_module")))
        for node in ast.walk(tree))


def test_no_import_by_name_hides_a_dependency() -> None:
    found = {module for module, path in _modules().items()
             if _imports_by_name(ast.parse(path.read_text(encoding="utf-8")))}
    assert found == set(IMPORT_BY_NAME)


def test_the_scan_sees_an_import_by_name() -> None:
    assert _imports_by_name(ast.parse("import importlib\ndef f(n):\n    return importlib.import_module(n)\n"))
    assert _imports_by_name(ast.parse("m = __import__('secemb.cli')\n"))
    assert not _imports_by_name(ast.parse("import importlib.util\nimportlib.util.find_spec('x')\n"))


def test_allow_lists_name_what_exists() -> None:
    """An entry for a file or module that is gone, or an import that is gone, is removed."""
    modules = _modules()
    assert [name for name in (*LAZY_TARGETS, *LAZY_IMPORTERS, *GETATTR, *IMPORT_BY_NAME)
            if _resolve(name, modules) != name] == []
    present = {(_path(imp.source), imp.target) for imp in _all_imports() if imp.where == "function"}
    assert (set(FUNCTION_IMPORTS) | set(FUNCTION_IMPORTS_PENDING)) - present == set()
    upward = {(_path(imp.source), _package(imp.target)) for imp in _all_imports()}
    assert set(UPWARD_PENDING) - upward == set()
    circles = {frozenset(c) for c in _strongly_connected(_graph(_all_imports(), _package))}
    assert set(CIRCLES_PENDING) - circles == set()


# ------------------------------------------------------------------------------------ the scan itself
MINI = {"secemb", "secemb.server", "secemb.server.persist", "secemb.cli", "secemb.engine", "secemb.typing_only"}


def test_the_scan_sees_function_level_and_type_checking_imports() -> None:
    text = ("from typing import TYPE_CHECKING\n"
            "def f():\n    from secemb.server.persist import atomic_write\n    import secemb.cli\n"
            "from secemb import engine\n"
            "if TYPE_CHECKING:\n    from secemb import typing_only\n"
            "class C:\n    def m(self):\n        from secemb.server import persist\n")
    got = [(i.target, i.line, i.where) for i in imports_of("secemb.m", text, MINI)]
    assert got == [("secemb.server.persist", 3, "function"), ("secemb.cli", 4, "function"),
                   ("secemb.engine", 5, "module"), ("secemb.typing_only", 7, "type-checking"),
                   ("secemb.server.persist", 10, "function")]


def test_the_circle_finder() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(sorted(c) for c in _strongly_connected(graph)) == [["a", "b", "c"], ["d", "e"]]


@pytest.mark.parametrize("package", ["protocols", "round", "inference", "transport", "server", "client", "sim",
                                     "training", "bench", "cli"])
def test_package_exists(package: str) -> None:
    assert (ROOT / package / "__init__.py").is_file()
