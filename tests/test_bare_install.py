"""Issue 32, item 1: the README's main job and Python API run on a bare install (no extras).

A subprocess makes every optional extra's modules unimportable (a stand-in for a fresh venv with
``pip install -e .``; CI's first step is the real check) and runs the CLI's entry point."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from secemb.cli import EXTRA_OF_MODULE

_BLOCK = textwrap.dedent(
    f"""
    import importlib.abc, sys
    EXTRAS = {tuple(EXTRA_OF_MODULE)!r}
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in EXTRAS:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None
    sys.meta_path.insert(0, Block())
    """
)


def _bare(code: str, *args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCK + textwrap.dedent(code), *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _bare("from secemb.cli import main\nsys.argv = ['secemb', *sys.argv[1:]]\nmain()\n", *args)


def test_main_job_runs_without_any_extra() -> None:
    done = _cli("train", "--epochs", "1", "--users-per-round", "20")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "test RMSE" in done.stdout


def test_python_api_imports_without_any_extra(tmp_path) -> None:
    done = _bare("import secemb\nfrom secemb import Experiment\nimport secemb.training, secemb.cli\nprint('ok')\n",
                 cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("demo", "--network", "--epochs", "1"), "server"),
        (("bench", "secea", "--quick"), "secea"),
    ],
)
def test_a_command_that_needs_a_missing_extra_names_it(args: tuple[str, ...], extra: str) -> None:
    done = _cli(*args)
    assert done.returncode == 2, (done.stdout[-500:], done.stderr[-2000:])
    assert f"pip install 'secemb[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
