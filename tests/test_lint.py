"""Issue 11: CI runs ``ruff`` and ``mypy`` on ``secemb/`` (and the protocol plug-in example) and
both are clean.

CI runs the README's test command only, so the linters run here, as subprocesses of the
interpreter that runs the tests (both come with the ``test`` extra).  Their configuration is in
``pyproject.toml`` (``[tool.ruff]``, ``[tool.mypy]``): pycodestyle, pyflakes, bugbear and
pyupgrade; mypy with ``strict_optional`` and ``check_untyped_defs``, so a use of a value that
may be ``None`` and an override or call that does not match its signature fail here.

mypy keeps its cache in the system's temporary directory: a cold run of the whole package
takes tens of seconds, a warm one a few.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _assert_clean(proc: subprocess.CompletedProcess[str], tool: str) -> None:
    assert proc.returncode == 0, f"{tool} found problems (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"


def test_ruff_is_clean() -> None:
    _assert_clean(_run("ruff", "check", "--no-cache", "secemb", "examples"), "ruff check secemb examples")


def test_mypy_is_clean() -> None:
    cache = Path(tempfile.gettempdir()) / "secemb-mypy-cache"
    _assert_clean(_run("mypy", "--cache-dir", str(cache), "secemb"), "mypy secemb")


def test_mypy_is_clean_on_the_protocol_plugin_example() -> None:
    """The plug-in example (docs/protocol.md, "Adding a protocol") against the base classes it
    subclasses: an override that the contract does not allow fails here."""
    cache = Path(tempfile.gettempdir()) / "secemb-mypy-cache"
    plugin = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples" / "protocol_plugin").glob("*.py"))
    _assert_clean(_run("mypy", "--cache-dir", str(cache), *plugin), "mypy examples/protocol_plugin")
