"""The test suite's servers start from a warm template process (a pytest plugin: tests/conftest.py).

Each ``secemb serve`` process that :class:`~secemb.sim.cluster.LocalCluster` starts costs about
two seconds of CPU before it answers: the imports (the CLI, numba, FastAPI) and numba's first
call (its registries and on-disk cache).  The suite starts about 170 of them; their start-up was
about a sixth of the suite's samples in a profile of a whole run (session 37).  This plugin
swaps the cluster's :data:`~secemb.sim.cluster.launcher` for one that asks a *template*
process -- started once per pytest process, having imported the server and torch (the SecEA and
SFSL devices' models) and loaded the kernels -- to fork the server instead (and the CLI tests'
clients, :func:`popen_secemb`: ``python -m secemb ...`` or a ``python -c`` script; the kernel children,
:func:`run_script`).  The child then runs ``python -m secemb serve ...`` as a fresh process would
(:func:`runpy.run_module` of ``secemb``, the same command line), with the environment and the log
file the cluster asked for: the same code, the same configuration, files and state, the same signals
and exit codes; what it skips is only the import and the kernel loading the template did before the fork.

A server is started the usual way (:func:`~secemb.sim.cluster.popen_server`) when the
environment it is given differs from the template's in a variable that a module may read at
import (:data:`_AT_IMPORT`: ``SECEMB_FSS_KERNELS``, numba's, ...; but the fault-injection
variables and the others of :data:`_PER_PROCESS`): the module-level state would otherwise be the
template's.  ``SECEMB_TEST_FRESH_SERVERS=1`` turns the
template off.  The template warms up in the background (started with an xdist worker, or at the
first process a plain run starts); until it is ready, the processes start fresh.

The template stays single-threaded (it refuses to fork otherwise), reaps its children and
reports each exit status the way :class:`subprocess.Popen` does (negative: killed by that
signal); :class:`Forked` offers the part of :class:`subprocess.Popen`'s interface the
cluster and the tests use.  When the pytest process ends (the template's socket closes), the
template kills what it still runs.
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
from typing import IO, Any

#: environment variables that may differ between a forked process and the template although they match
#: :data:`_AT_IMPORT`: the fault points, unbuffered output (set again in the child), and what libraries write
#: into the environment of the process that used them, read at run time: torch's inductor its cache folder (its
#: default, the same everywhere), Ray's driver ``PYTHONBREAKPOINT`` (read by ``breakpoint()``), and the secrets a
#: ``secemb serve`` or ``client`` reads from the environment when it loads its configuration
#: (``secemb.server.config``, ``secemb.cli.client``)
_PER_PROCESS = ("SECEMB_FAULTS", "SECEMB_FAULT_DIR", "PYTHONUNBUFFERED", "TORCHINDUCTOR_CACHE_DIR", "PYTHONBREAKPOINT",
                "SECEMB_PEER_SECRET", "SECEMB_ADMIN_SECRET", "SECEMB_USER_SECRET", "SECEMB_DEVICE_KEY0",
                "SECEMB_DEVICE_KEY1")
#: prefixes of the variables that the template's modules may read at import (this package's, numba's, Python's,
#: torch's and Triton's, the math libraries' threads, the loader's): a process whose environment differs from
#: the template's in one of these starts fresh.  Others (a library's own marks, a test's leftovers) reach the
#: child's environment all the same, where it reads them at run time.
_AT_IMPORT = ("SECEMB_", "NUMBA_", "PYTHON", "TORCH", "TRITON_", "OMP_", "MKL_", "OPENBLAS_", "LD_", "CUDA_")


# ---------------------------------------------------------------------------------------- template side
def _child(req: dict[str, Any], fds: list[int], keep_closed: list[int]) -> None:
    """In the forked child: become ``python -m secemb ARGS`` (in the requested directory and
    environment, ``fds`` as standard input, output and error) and never return; the template's
    own channels ``keep_closed`` are closed first."""
    import runpy
    import traceback

    code = 1
    try:
        for fd in keep_closed:
            os.close(fd)
        os.chdir(req["cwd"])
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(req["env"])
        if req["env"].get("PYTHONUNBUFFERED"):
            sys.stdout.reconfigure(line_buffering=True, write_through=True)
            sys.stderr.reconfigure(line_buffering=True, write_through=True)
        script = req["argv"][2] if req["argv"][1] == "-c" else None
        if script is None:
            sys.argv = [req["argv"][0], *req["argv"][3:]]  # as `python -m secemb ...` sets it
            sys.path[0] = req["cwd"]  # where `python -m` looks first (the template's is this file's folder)
        else:
            sys.argv = ["-c", *req["argv"][3:]]  # as `python -c SCRIPT ...` sets them
            sys.path[0] = ""
        try:
            if script is None:
                runpy.run_module("secemb", run_name="__main__", alter_sys=True)
            else:
                exec(compile(script, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
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


def _template(channel: int) -> None:
    """The template's loop: receive one request a message on the socket ``channel`` (JSON:
    ``argv``, ``env``, ``cwd``; three descriptors: the child's standard input, output and
    error), fork, answer ``{"pid": N}`` or ``{"error": ...}`` on standard output; report every
    child's exit as ``{"exit": N, "code": C}``; when the socket closes, kill the children still
    running and exit."""
    import select
    import socket

    import typer.main
    from rich.console import Console  # noqa: F401 - what `secemb serve` imports when it runs

    from secemb.cli import app
    from secemb.cli import _usage  # noqa: F401
    from secemb.protocols.backends import warm_kernels
    from secemb.server import app as server_app, exchange_deploy, listener, persist  # noqa: F401
    from secemb.sim import allocator  # noqa: F401
    # what a server imports only once it runs: FastAPI's compatibility layer while it builds the app, and anyio's
    # event loop backend (0.025-0.029 s and 0.015-0.016 s of import time, `python -X importtime`, 3 runs; helper T's
    # py-spy of the suite had seen each forked server import them, ~0.1 s a fork, session 38)
    import anyio._backends._asyncio  # noqa: F401
    import pydantic.v1  # noqa: F401

    typer.main.get_command(app)  # the imports building the command line does
    # the SecEA and SFSL devices' torch (its import, and torch._dynamo's at their optimizers' first step: ~5 s of
    # CPU a client; session 37, helper H); forking after importing torch is what torch's own DataLoader does
    import torch._dynamo  # noqa: F401
    import torch.optim  # noqa: F401
    warm_kernels()
    sock = socket.socket(fileno=channel)
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
    while True:
        ready, _, _ = select.select([sock], [], [], 0.02)
        reap()
        if not ready:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        if not msg:
            break
        req = json.loads(msg)
        if threading.active_count() != 1 or len(fds) != 3:
            say({"error": f"cannot fork: {threading.active_count()} threads, {len(fds)} descriptors"})
        else:
            out.flush()
            pid = os.fork()
            if pid == 0:
                _child(req, fds, [sock.fileno(), out.fileno()])
            live.add(pid)
            say({"pid": pid})
        for fd in fds:
            os.close(fd)
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
class Forked:
    """A process forked by the template: :class:`subprocess.Popen`'s ``pid``, ``args``,
    ``returncode``, ``stdout``/``stderr`` (where piped), ``poll``, ``wait``, ``communicate``,
    ``send_signal``, ``terminate`` and ``kill``."""

    def __init__(self, template: Template, pid: int, args: list[str], stdout: IO[Any] | None = None,
                 stderr: IO[Any] | None = None) -> None:
        self._template = template
        self.pid = pid
        self.args = args
        self.stdout = stdout
        self.stderr = stderr
        self._read: dict[str, Any] = {}
        self._readers: list[threading.Thread] = []

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
            raise RuntimeError("the process template died")
        return code

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read the piped outputs to their end and wait for the exit, as :meth:`subprocess.Popen.communicate`
        (no input): after a :class:`subprocess.TimeoutExpired`, call again to go on."""
        if not self._readers:
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    def drain(stream: IO[Any] = stream, name: str = name) -> None:
                        self._read[name] = stream.read()
                        stream.close()

                    self._readers.append(threading.Thread(target=drain, daemon=True))
                    self._readers[-1].start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self._read.get("stdout"), self._read.get("stderr")

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # the template has not reaped it: the pid is still this process's
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Template:
    """The template process and the thread that reads its answers.  Started, it imports and loads
    in the background (seconds; minutes where the kernels' cache is cold and the machine busy): until
    it says it is ready, :meth:`eligible` is false and the processes start fresh, as before."""

    def __init__(self) -> None:
        import socket

        self.env = dict(os.environ)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, __file__, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=self.env)
        theirs.close()
        self.codes: dict[int, int] = {}
        self.changed = threading.Condition()
        self.answers: list[dict[str, Any]] = []
        self.dead = False
        self.lock = threading.Lock()  # one request at a time
        self.ready = False
        self.reader = threading.Thread(target=self._read, daemon=True, name="process-template")
        self.reader.start()

    def wait_ready(self, timeout: float) -> bool:
        """Whether the template is ready within ``timeout`` seconds (for the tests of this module)."""
        with self.changed:
            return self.changed.wait_for(lambda: self.ready or self.dead, timeout) and self.ready and not self.dead

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            doc = json.loads(line)
            with self.changed:
                if "exit" in doc:
                    self.codes[doc["exit"]] = doc["code"]
                elif "ready" in doc:
                    self.ready = True
                else:
                    self.answers.append(doc)
                self.changed.notify_all()
        with self.changed:
            self.dead = True
            self.changed.notify_all()

    def differs(self, env: dict[str, str]) -> list[str]:
        """The variables read at import (:data:`_AT_IMPORT`, but :data:`_PER_PROCESS`) whose values in ``env``
        are not the template's."""
        return sorted(k for k in set(env) | set(self.env) if k.startswith(_AT_IMPORT) and k not in _PER_PROCESS
                      and env.get(k) != self.env.get(k))

    def eligible(self, env: dict[str, str]) -> bool:
        return self.ready and not self.dead and not self.differs(env)

    def spawn(self, argv: list[str], env: dict[str, str], fds: list[int], cwd: str | None = None) -> int | None:
        """Fork ``argv`` (``python -m secemb ...`` or ``python -c SCRIPT ...``) with ``env``, ``fds`` as its
        standard input, output and error and ``cwd`` (default: this process's) as its working directory: its pid,
        or ``None`` where the template could not."""
        import socket

        req = {"argv": argv, "env": env, "cwd": os.fspath(cwd) if cwd is not None else os.getcwd()}
        with self.lock:
            socket.send_fds(self.sock, [json.dumps(req).encode()], fds)
            with self.changed:
                self.changed.wait_for(lambda: self.answers or self.dead, 60)
                doc = self.answers.pop(0) if self.answers else {"error": "the process template died"}
        return doc.get("pid")


_template_of: dict[int, Template] = {}


def _template_here() -> Template:
    template = _template_of.get(os.getpid())
    if template is None:
        template = _template_of[os.getpid()] = Template()
    return template


def _fork(argv: list[str], env: dict[str, str], out: int, err: int, cwd: str | None = None) -> Forked | None:
    """``argv`` forked by this process's template with ``env``, no standard input, ``out``/``err`` as its
    standard output and error (descriptors, left open here) and ``cwd``, or ``None`` where it cannot be: the
    template turned off or not ready, another command than ``python -m secemb ...`` or ``python -c SCRIPT ...``
    (a script that runs the command line, as the ``secemb`` script does; only :func:`popen_secemb`'s callers ask
    for one), a variable read at import that differs (:meth:`Template.eligible`), or the template refused."""
    if os.environ.get("SECEMB_TEST_FRESH_SERVERS") == "1" or not (
            argv[:3] == [sys.executable, "-m", "secemb"] or (argv[:2] == [sys.executable, "-c"] and len(argv) > 2)):
        return None
    template = _template_here()
    if not template.eligible(env):
        return None
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        pid = template.spawn(argv, env, [null, out, err], cwd)
    finally:
        os.close(null)
    return None if pid is None else Forked(template, pid, argv)


def popen_secemb(argv: list[str], *, stdout: Any = None, stderr: Any = None, env: dict[str, str] | None = None,
                 text: bool = False, cwd: str | os.PathLike[str] | None = None) -> Any:
    """``subprocess.Popen(argv, stdin=DEVNULL, stdout=..., stderr=..., env=..., text=..., cwd=...)`` for ``argv`` =
    ``python -m secemb ...`` or ``python -c SCRIPT ...`` (a script that runs ``secemb``'s command line, as the
    installed ``secemb`` script does), forked from the template where it can be (:func:`_fork`; stdout: ``None``
    or ``PIPE``; stderr: ``None``, ``PIPE`` or ``STDOUT``), else that very Popen."""
    env = dict(os.environ) if env is None else env
    if stdout in (None, subprocess.PIPE) and stderr in (None, subprocess.PIPE, subprocess.STDOUT):
        mine: dict[str, int] = {}
        theirs = [1, 2]
        if stdout == subprocess.PIPE:
            mine["stdout"], theirs[0] = os.pipe()
        if stderr == subprocess.PIPE:
            mine["stderr"], theirs[1] = os.pipe()
        elif stderr == subprocess.STDOUT:
            theirs[1] = theirs[0]
        try:
            forked = _fork(argv, env, *theirs, cwd=None if cwd is None else os.fspath(cwd))
        finally:
            for fd in set(theirs) - {1, 2}:
                os.close(fd)
        if forked is not None:
            forked.stdout, forked.stderr = (open(mine[name], "r" if text else "rb") if name in mine else None  # noqa: SIM115
                                            for name in ("stdout", "stderr"))
            return forked
        for fd in mine.values():
            os.close(fd)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=env, text=text, cwd=cwd)


def run(argv: list[str], *, timeout: float, cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None, text: bool = False) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, capture_output=True, timeout=timeout, cwd=cwd, env=env, text=text)`` for ``argv`` =
    ``python -m secemb ...`` or ``python -c SCRIPT ...``, forked from the template where it can be
    (:func:`popen_secemb`): a child of its own (a signal that ends it, a SIGSEGV from a guard page, is its exit
    status, negative), without the ~0.9-1.5 s of CPU a fresh interpreter spends importing numpy, numba and this
    package (and the CLI) and loading the kernels.  For children that check what a command or a kernel does,
    not what a fresh interpreter imports or compiles (those use :func:`subprocess.run`).  Past ``timeout`` the
    child is killed and :class:`subprocess.TimeoutExpired` raised, as :func:`subprocess.run` does."""
    proc = popen_secemb(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=text, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_script(script: str, *args: str, timeout: float, cwd: str | os.PathLike[str] | None = None,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """:func:`run` of ``python -c SCRIPT ARGS`` (text output): the kernel children."""
    return run([sys.executable, "-c", script, *args], timeout=timeout, cwd=cwd, env=env, text=True)


def _launch_server(argv: list[str], env: dict[str, str], log: Path) -> Any:
    """:data:`secemb.sim.cluster.launcher` for the suite: :func:`~secemb.sim.cluster.popen_server`'s
    process, forked from the template where it can be (:func:`_fork`)."""
    from secemb.sim import cluster

    logf = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        forked = _fork(argv, env, logf, logf)
    finally:
        os.close(logf)
    return cluster.popen_server(argv, env, log) if forked is None else forked


def pytest_configure(config: Any) -> None:
    """Swap the cluster's launcher; in an xdist worker, start the template now, so that it warms up while the
    first tests run (elsewhere at the first process the tests start: a run without servers starts none)."""
    if os.environ.get("SECEMB_TEST_FRESH_SERVERS") == "1":
        return
    from secemb.sim import cluster

    cluster.launcher = _launch_server
    if hasattr(config, "workerinput"):
        _template_here()


def pytest_unconfigure(config: Any) -> None:
    template = _template_of.pop(os.getpid(), None)
    if template is not None:
        template.sock.close()  # the template kills what it still runs and exits
        try:
            template.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            template.proc.kill()


if __name__ == "__main__":
    try:
        _template(int(sys.argv[1]))
    except BrokenPipeError:  # the worker that started it ended first (a short run): no one to tell
        os._exit(0)
