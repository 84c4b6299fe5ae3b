"""The suite's forked servers (tests/_server_template.py) behave as the processes they stand for:
``python -m secemb serve`` with the same command line gives the same exit code and the same log
text whether it is started fresh (:func:`~secemb.sim.cluster.popen_server`) or forked from the
warm template; signals reach the forked server and its exit status reads as
:class:`subprocess.Popen`'s; an environment that differs from the template's in anything but the
fault variables starts a fresh process."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import _server_template
from secemb.sim import cluster

pytestmark = pytest.mark.skipif(os.environ.get("SECEMB_TEST_FRESH_SERVERS") == "1", reason="template off")

SERVE = [sys.executable, "-m", "secemb", "serve"]


@pytest.fixture(autouse=True)
def template_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """The template has warmed up (until then the processes start fresh, as they would without it), and this
    test runs in its environment: where an earlier test of this process left a variable read at import behind,
    the processes start fresh, which is right, but not what these tests are about (that tests/fss/test_fss_gpu.py
    leaves none behind: :func:`test_the_gpu_tests_leave_the_environment_as_they_found_it`)."""
    template = _server_template._template_here()
    assert template.wait_ready(600)
    for name in template.differs(dict(os.environ)):
        if name in template.env:
            monkeypatch.setenv(name, template.env[name])
        else:
            monkeypatch.delenv(name)
    assert template.differs(dict(os.environ)) == []


def test_a_bad_configuration_exits_2_with_the_same_message_forked_or_fresh(tmp_path):
    argv = [*SERVE, "--config", str(tmp_path / "missing.json"), "--log-level", "warning"]
    forked = cluster.launcher(argv, dict(os.environ), tmp_path / "forked.log")
    fresh = cluster.popen_server(argv, dict(os.environ), tmp_path / "fresh.log")
    assert isinstance(forked, _server_template.Forked)
    assert forked.wait(timeout=60) == fresh.wait(timeout=60) == 2
    text = (tmp_path / "fresh.log").read_text()
    assert "missing.json" in text and (tmp_path / "forked.log").read_text() == text


def test_a_forked_server_killed_reads_as_popen_does_and_another_environment_starts_fresh(tmp_path):
    from net_helpers import cluster_for, setup, small_data

    tr, _ = small_data()
    model, proto, config = setup("plaintext", "cuckoo", False, m_prime=8, epochs=1, users_per_round=8)
    with cluster_for(model, proto, tr, config) as running:
        procs = list(running.procs)
        assert all(isinstance(p, _server_template.Forked) for p in procs)
        assert all(p.poll() is None for p in procs)
        procs[0].send_signal(signal.SIGKILL)
        assert procs[0].wait(timeout=30) == -signal.SIGKILL and procs[0].returncode == -signal.SIGKILL
        running.restart(0)  # the same state directory and port, forked again
        assert running.alive(0) and running.procs[0].pid != procs[0].pid
    assert all(p is not None and p.poll() == 0 for p in running.procs)  # SIGTERM: a clean stop
    other = {**os.environ, "SECEMB_FSS_KERNELS": "numpy"}
    proc = cluster.launcher([*SERVE, "--help"], other, tmp_path / "help.log")
    assert not isinstance(proc, _server_template.Forked)
    assert proc.wait(timeout=60) == 0 and "--config" in (tmp_path / "help.log").read_text()


@pytest.mark.parametrize("text", [False, True])
def test_piped_outputs_and_exit_codes_are_popens(text):
    """``secemb --version`` (exit 0, stdout) and an unknown command (exit 2, stderr), piped and merged,
    forked and fresh: the same bytes (or text) and codes."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for args, stderr in ((["--version"], subprocess.PIPE), (["no-such-command"], subprocess.PIPE),
                         (["no-such-command"], subprocess.STDOUT)):
        argv = [sys.executable, "-m", "secemb", *args]
        forked = _server_template.popen_secemb(argv, stdout=subprocess.PIPE, stderr=stderr, env=env, text=text)
        fresh = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, env=env,
                                 text=text)
        assert isinstance(forked, _server_template.Forked)
        got, want = forked.communicate(timeout=60), fresh.communicate(timeout=60)
        assert got == want and forked.returncode == fresh.returncode, (args, got, want)
        assert (forked.returncode, bool(got[0])) in ((0, True), (2, stderr == subprocess.STDOUT))


#: a script as the tests' devices run it (``python -c SCRIPT ARGS``): what it sees of its process, then the CLI
_SCRIPT = """
import os, sys
print(repr(sys.argv), repr(sys.path[0]), os.getcwd(), __name__, flush=True)
from secemb.cli import main
main()
"""


@pytest.mark.parametrize("args", [["--version"], ["no-such-command"]])
def test_a_script_forked_sees_what_python_c_gives_it(tmp_path, args):
    """``python -c SCRIPT ARGS`` forked (the devices of tests/client/test_net_cli.py and the marking clients of
    tests/review/test_session22_redteam_deploy.py): the same ``sys.argv``, ``sys.path[0]``, working directory,
    ``__name__``, output and exit code as a fresh ``python -c`` in that directory."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-c", _SCRIPT, *args]
    forked = _server_template.popen_secemb(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                           text=True, cwd=tmp_path)
    fresh = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             text=True, cwd=tmp_path)
    assert isinstance(forked, _server_template.Forked)
    got, want = forked.communicate(timeout=60), fresh.communicate(timeout=60)
    assert got == want and forked.returncode == fresh.returncode, (got, want)
    assert got[0].splitlines()[0] == f"{['-c', *args]!r} '' {tmp_path} __main__"
    assert forked.returncode == (0 if args == ["--version"] else 2)


def test_what_torch_writes_into_the_environment_keeps_the_template(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """A process that used torch's inductor has ``TORCHINDUCTOR_CACHE_DIR`` in its environment (torch sets it):
    the processes it starts afterwards are still forked (in the CI of session 37 they were not: every server of
    a worker started fresh once one test had used torch in process)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    proc = _server_template.popen_secemb([sys.executable, "-m", "secemb", "--version"], stdout=subprocess.PIPE)
    assert isinstance(proc, _server_template.Forked) and proc.communicate(timeout=60)[0].startswith(b"secemb ")


def test_the_gpu_tests_leave_the_environment_as_they_found_it() -> None:
    """tests/fss/test_fss_gpu.py runs Triton's CPU interpreter (``TRITON_INTERPRET=1``, which Triton reads at
    import) for its imports and its tests only.  Its import (what every xdist worker's collection does) and its
    module fixture leave ``os.environ`` as they found it, so the processes a worker starts afterwards still fork
    from the template (in session 37's CI the variable stayed set: every worker's processes started fresh).  The
    module is executed again here under another name; under its fixture the variable is the one it asks for."""
    if importlib.util.find_spec("triton") is None:  # (not importorskip: Triton is imported by the module only)
        pytest.skip("needs Triton: pip install 'secemb[gpu]'")
    before = dict(os.environ)
    spec = importlib.util.spec_from_file_location("_test_fss_gpu_again",
                                                  Path(__file__).parents[1] / "fss" / "test_fss_gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert dict(os.environ) == before
    fixture = module.interpreter.__wrapped__()
    next(fixture)
    assert {name: os.environ.get(name) for name in module.INTERPRETER} == module.INTERPRETER
    if module.INTERPRETER:  # no CUDA device: the interpreter, on the CPU
        assert module.gpu.interpreting() and module.DEV.type == "cpu"
    with pytest.raises(StopIteration):
        next(fixture)
    assert dict(os.environ) == before
