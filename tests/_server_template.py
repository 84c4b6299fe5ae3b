"""The test suite's servers start from a warm template process (a pytest plugin: tests/conftest.py).

Each ``secemb serve`` process that :class:`~secemb.sim.cluster.LocalCluster` starts costs about
two seconds of CPU before it answers: the imports (the CLI, numba, FastAPI) and numba's first
call (its registries and on-disk cache).  The suite starts about 170 of them; their start-up was
about a sixth of the suite's samples in a profile of a whole run (session 37).  This plugin
swaps the cluster's :data:`~secemb.sim.cluster.launcher` for one that asks a *template*
process -- started once per pytest process, having imported the server and loaded its kernels --
to fork the server instead.  The child then runs ``python -m secemb serve ...`` as a fresh
process would (:func:`runpy.run_module` of ``secemb``, the same command line), with the
environment and the log file the cluster asked for: the same code, the same configuration,
files and state, the same signals and exit codes; what it skips is only the import and the
kernel loading the template did before the fork.

A server is started the usual way (:func:`~secemb.sim.cluster.popen_server`) when the
environment it is given differs from the template's in anything but the fault-injection
variables (``SECEMB_FAULTS``, ``SECEMB_FAULT_DIR``) and pytest's ``PYTEST_CURRENT_TEST``:
module-level state read from the environment at import (``SECEMB_FSS_KERNELS``, numba's
variables) would otherwise be the template's.  ``SECEMB_TEST_FRESH_SERVERS=1`` turns the
template off.

The template stays single-threaded (it refuses to fork otherwise), reaps its children and
reports each exit status the way :class:`subprocess.Popen` does (negative: killed by that
signal); :class:`ForkedServer` offers the part of :class:`subprocess.Popen`'s interface the
cluster and the tests use.  When the pytest process ends (the template's standard input
closes), the template kills what it still runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: environment variables that may differ between a forked server and the template
_PER_SERVER = ("SECEMB_FAULTS", "SECEMB_FAULT_DIR", "PYTEST_CURRENT_TEST")


# ---------------------------------------------------------------------------------------- template side
def _child(req: dict[str, Any], status_fd: int) -> None:
    """In the forked child: become ``python -m secemb ARGS`` (in the requested directory,
    environment and log file) and never return; ``status_fd`` is the template's answer pipe,
    closed here."""
    import runpy
    import traceback

    code = 1
    try:
        os.close(status_fd)
        os.chdir(req["cwd"])
        log = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = [req["argv"][0], *req["argv"][3:]]  # as `python -m secemb ...` sets it
        sys.path[0] = req["cwd"]  # where `python -m` looks first (the template's is this file's folder)
        try:
            runpy.run_module("secemb", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - printed as the interpreter would
            traceback.print_exc()
            code = 1
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _template() -> None:
    """The template's loop: read one JSON request a line on standard input (``argv``, ``env``,
    ``log``), fork, answer ``{"pid": N}`` or ``{"error": ...}``; report every child's exit as
    ``{"exit": N, "code": C}``; on end of input kill the children still running and exit."""
    import select

    import typer.main
    from rich.console import Console  # noqa: F401 - what `secemb serve` imports when it runs

    from secemb.cli import app
    from secemb.cli import _usage  # noqa: F401
    from secemb.protocols.backends import warm_kernels
    from secemb.server import app as server_app, exchange_deploy, listener, persist  # noqa: F401
    from secemb.sim import allocator  # noqa: F401

    typer.main.get_command(app)  # the imports building the command line does
    warm_kernels()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    live: set[int] = set()

    def say(doc: dict[str, Any]) -> None:
        out.write(json.dumps(doc) + "\n")

    def reap() -> None:
        while live:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            live.discard(pid)
            say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    say({"ready": os.getpid()})
    buf = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.02)
        reap()
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            if threading.active_count() != 1:
                say({"error": f"the template runs {threading.active_count()} threads: it cannot fork"})
                continue
            out.flush()
            pid = os.fork()
            if pid == 0:
                _child(req, out.fileno())
            live.add(pid)
            say({"pid": pid})
    for pid in list(live):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while live and time.monotonic() < deadline:
        reap()
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------- pytest side
class ForkedServer:
    """A server forked by the template: :class:`subprocess.Popen`'s ``pid``, ``returncode``,
    ``poll``, ``wait``, ``send_signal``, ``terminate`` and ``kill``."""

    def __init__(self, template: Template, pid: int, args: list[str]) -> None:
        self._template = template
        self.pid = pid
        self.args = args

    @property
    def returncode(self) -> int | None:
        return self._template.codes.get(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self._template.changed:
            if not self._template.changed.wait_for(lambda: self.pid in self._template.codes or self._template.dead,
                                                   timeout):
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        code = self.returncode
        if code is None:
            raise RuntimeError("the server template died")
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # the template has not reaped it: the pid is still this server's
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Template:
    """The template process and the thread that reads its answers."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=self.env)
        self.codes: dict[int, int] = {}
        self.changed = threading.Condition()
        self.answers: list[dict[str, Any]] = []
        self.dead = False
        self.lock = threading.Lock()  # one request at a time
        self.reader = threading.Thread(target=self._read, daemon=True, name="server-template")
        self.reader.start()
        with self.changed:
            self.changed.wait_for(lambda: self.answers or self.dead, 120)
            self.ok = bool(self.answers) and "ready" in self.answers.pop(0)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            doc = json.loads(line)
            with self.changed:
                if "exit" in doc:
                    self.codes[doc["exit"]] = doc["code"]
                else:
                    self.answers.append(doc)
                self.changed.notify_all()
        with self.changed:
            self.dead = True
            self.changed.notify_all()

    def eligible(self, env: dict[str, str]) -> bool:
        def common(e: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in e.items() if k not in _PER_SERVER}

        return self.ok and not self.dead and common(env) == common(self.env)

    def spawn(self, argv: list[str], env: dict[str, str], log: Path) -> ForkedServer | None:
        assert self.proc.stdin is not None
        with self.lock:
            req = {"argv": argv, "env": env, "log": str(log), "cwd": os.getcwd()}
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            with self.changed:
                self.changed.wait_for(lambda: self.answers or self.dead, 60)
                doc = self.answers.pop(0) if self.answers else {"error": "the server template died"}
        if "pid" not in doc:
            return None
        return ForkedServer(self, doc["pid"], argv)


_template_of: dict[int, Template] = {}


def _launcher(original: Any) -> Any:
    def launch(argv: list[str], env: dict[str, str], log: Path) -> Any:
        template = _template_of.get(os.getpid())
        if template is None:
            template = _template_of[os.getpid()] = Template()
        is_serve = argv[1:4] == ["-m", "secemb", "serve"]
        if is_serve and template.eligible(env):
            server = template.spawn(argv, env, log)
            if server is not None:
                return server
        return original(argv, env, log)

    return launch


def pytest_configure(config: Any) -> None:
    if os.environ.get("SECEMB_TEST_FRESH_SERVERS") == "1":
        return
    from secemb.sim import cluster

    cluster.launcher = _launcher(cluster.popen_server)


def pytest_unconfigure(config: Any) -> None:
    template = _template_of.pop(os.getpid(), None)
    if template is not None and template.proc.stdin is not None:
        template.proc.stdin.close()
        try:
            template.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            template.proc.kill()


if __name__ == "__main__":
    _template()
