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


def test_ci_runs_the_readme_main_job_first_on_a_bare_install() -> None:
    """Issue 32: the README's main-job command runs in CI before any extra is installed."""
    main_job = [c for c in _readme_commands() if "secemb train" in c and "pytest" not in c]
    assert main_job == ["pip install -e . && secemb train"]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert main_job[0] in ci_lines
    first_extra = min(i for i, line in enumerate(ci_lines) if "'.[" in line and line.startswith("pip install"))
    assert ci_lines.index(main_job[0]) < first_extra


def test_ci_runs_the_readme_python_snippet() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(re.findall(r"```python\n", text)) == 1  # .ci/readme_snippet.py runs the one snippet
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_snippet.py" in ci
    assert ci.index("readme_snippet.py") < ci.index("pip install -e '.[test]'")
