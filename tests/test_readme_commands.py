"""Issue 13, item 1: CI was green while a reader following the README was red (CI installed
RecBole, the README's test command did not).  CI must run the README's own commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    tests = [c for c in _readme_commands() if "pytest" in c]
    assert len(tests) == 1, tests
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert tests[0] in ci_lines
    assert ci_lines[-1] == tests[0]  # its status is the status of CI


def test_every_ci_install_step_is_in_the_readme_commands() -> None:
    readme = "\n".join(_readme_commands())
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    installs = re.findall(r"pip install [^&\n]*", ci)
    assert installs
    for step in installs:
        assert step.strip() in readme, step
