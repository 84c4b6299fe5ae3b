"""Two server processes on this machine (127.0.0.1): what ``secemb demo --network``, the
network benchmark and the tests run.

:class:`LocalCluster` creates the test setup in its work directory the way ``secemb admin
init`` without ``--party`` does (:func:`~secemb.server.deploy.init_deployment`: both servers'
halves, each with its own secrets and its own private CA and certificate -- every connection
is TLS, verified against the CA of the server it reaches; server 0 presents its certificate to
server 1 --, paired, on free ports chosen by the OS), plays both operators and every device,
starts each server as its own process (``python -m secemb serve``),
waits until it answers, and can kill (``SIGKILL``) and restart either one on the same port
and state directory.  With ``supervise=True`` a watcher restarts a server that died, like a
service manager would.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from secemb.errors import SecembError
from secemb.server.config import ServerConfig
from secemb.server.deploy import init_deployment
from secemb.server.faults import ENV_DIR, ENV_POINTS
from secemb.server.tls import client_context
from secemb.transport.network import ApiClient
from secemb.transport.signing import user_key

__all__ = ["LocalCluster", "free_port", "launcher", "popen_server"]


def popen_server(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start a server process: ``argv`` with ``env``, standard output and error appended to
    ``log``, no standard input."""
    logf = open(log, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    finally:
        logf.close()


#: what :class:`LocalCluster` starts its servers with: a callable ``(argv, env, log)`` returning
#: an object with :class:`subprocess.Popen`'s ``pid``, ``returncode``, ``poll``, ``wait``,
#: ``send_signal``, ``terminate`` and ``kill`` (the test suite swaps in one that forks the
#: servers from a warm template process: tests/_server_template.py)
launcher = popen_server


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """Server 0 and server 1 as child processes on 127.0.0.1.

    Parameters
    ----------
    workdir: directory for configs, state and logs (created).
    settings: :class:`~secemb.server.config.ServerConfig` fields shared by both servers
        (``num_items``, ``num_users``, protocol, model and training settings, ...).
    faults: per party, the ``SECEMB_FAULTS`` spec to arm (see :mod:`secemb.server.faults`).
    log_level: the servers' log level.
    """

    def __init__(self, workdir: str | os.PathLike, *, faults: dict[int, str] | None = None,
                 log_level: str = "warning", **settings: Any) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.workdir, 0o700)
        ports = [free_port(), free_port()]
        while ports[1] == ports[0]:
            ports[1] = free_port()
        self.ports = ports
        #: the deployment's files (``secemb admin`` commands work on ``workdir``)
        self.deployment = init_deployment(self.workdir, [["127.0.0.1", "localhost"]] * 2, ports=ports, **settings)
        self.configs: list[ServerConfig] = [self.deployment.config(p) for p in (0, 1)]
        self.config_paths: list[Path] = [self.deployment.config_path(p) for p in (0, 1)]
        self.peer_secret = self.configs[0].peer_secret
        self.admin_secrets = (self.configs[0].admin_secret, self.configs[1].admin_secret)
        self.user_secrets = (self.configs[0].user_secret, self.configs[1].user_secret)
        #: each server's own CA and certificate (its half's ``tls/``)
        self.pki = (self.deployment.pki(0), self.deployment.pki(1))
        #: what the clients of this harness verify either server with: both servers' CAs (a device pins
        #: each server's own; a test playing every device and both operators may trust both)
        self.tls = client_context(self.pki[0].ca)
        self.tls.load_verify_locations(str(self.pki[1].ca))
        self.faults = dict(faults or {})
        self.log_level = log_level
        self.procs: list[subprocess.Popen | None] = [None, None]
        self.restarts = [0, 0]
        self._supervise = False
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- addresses and keys
    def url(self, party: int) -> str:
        return f"https://127.0.0.1:{self.ports[party]}"

    def admin(self, party: int, *, timeout: float = 60.0) -> ApiClient:
        """A signed operator client for server ``party`` (its own admin secret).  It reads answers
        unbounded (``max_answer_bytes=None``): the servers are this process's own, on 127.0.0.1,
        and a simulation's model may be larger than the operator's floor."""
        return ApiClient(self.url(party), "admin", self.admin_secrets[party], timeout=timeout, tls=self.tls,
                         max_answer_bytes=None)

    def peer_tls(self) -> ssl.SSLContext:
        """Server 0's client context for server 1 (it pins server 1's CA and presents server
        0's certificate: mutual TLS), for tests of server 1's peer endpoints.  Server 0 itself
        trusts only server 1's CA for client certificates, so it refuses this certificate at
        the handshake: tests of server 0 use :attr:`tls`."""
        return client_context(self.pki[1].ca, self.pki[0].cert(0), self.pki[0].key(0))

    def device_keys(self, user: int) -> tuple[bytes, bytes]:
        """Device ``user``'s HMAC keys at server 0 and server 1."""
        return user_key(self.user_secrets[0], user), user_key(self.user_secrets[1], user)

    @property
    def min_users(self) -> int:
        """The servers' floor on users per aggregate (``[rounds] min_users``)."""
        return self.configs[0].min_users

    # ---------------------------------------------------------------- processes
    def command(self, party: int) -> tuple[list[str], dict[str, str], Path]:
        """How server ``party`` is started: its command line (``python -m secemb serve``), its
        environment (this process's, with the party's fault points armed or none) and its log
        file (appended to, standard output and error both)."""
        env = dict(os.environ)
        env.pop(ENV_POINTS, None)
        if self.faults.get(party):
            env[ENV_POINTS] = self.faults[party]
            fault_dir = self.workdir / f"faults{party}"
            fault_dir.mkdir(exist_ok=True)
            env[ENV_DIR] = str(fault_dir)
        argv = [sys.executable, "-m", "secemb", "serve", "--config", str(self.config_paths[party]),
                "--log-level", self.log_level]
        return argv, env, self.workdir / f"server{party}.log"

    def _spawn(self, party: int) -> subprocess.Popen:
        argv, env, log = self.command(party)
        return launcher(argv, env, log)

    def start(self, party: int | None = None, *, timeout: float = 60.0) -> None:
        """Start one server (or both) and wait until it answers ``/v1/health``."""
        parties = (0, 1) if party is None else (party,)
        for p in parties:
            with self._lock:
                proc = self.procs[p]
                if proc is None or proc.poll() is not None:
                    self.procs[p] = self._spawn(p)
        for p in parties:
            self.wait_ready(p, timeout=timeout)

    def wait_ready(self, party: int, *, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.procs[party]
            if proc is not None and proc.poll() is not None and not self._supervise:
                raise SecembError(f"server {party} exited with code {proc.returncode}; see {self.log(party)}")
            try:
                if httpx.get(self.url(party) + "/v1/health", timeout=1.0, trust_env=False,
                             verify=self.tls).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise SecembError(f"server {party} did not become ready in {timeout} s; see {self.log(party)}")

    def log(self, party: int) -> Path:
        return self.workdir / f"server{party}.log"

    def alive(self, party: int) -> bool:
        proc = self.procs[party]
        return proc is not None and proc.poll() is None

    def kill(self, party: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL) to server ``party`` and reap it."""
        proc = self.procs[party]
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(timeout=30)

    def restart(self, party: int, *, timeout: float = 60.0) -> None:
        """Kill server ``party`` if it runs, and start it again on the same port and state."""
        self.kill(party)
        with self._lock:
            self.procs[party] = self._spawn(party)
            self.restarts[party] += 1
        self.wait_ready(party, timeout=timeout)

    def supervise(self, enabled: bool = True) -> None:
        """Restart a server that died (checked every 50 ms) while enabled."""
        self._supervise = enabled
        if enabled and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, daemon=True, name="secemb-supervisor")
            self._watcher.start()

    def _watch(self) -> None:
        while True:
            time.sleep(0.05)
            if not self._supervise:
                continue
            for p in (0, 1):
                with self._lock:
                    proc = self.procs[p]
                    if proc is not None and proc.poll() is not None:
                        self.procs[p] = self._spawn(p)
                        self.restarts[p] += 1

    def stop(self) -> None:
        """Terminate both servers: both are asked to stop first, then each is waited for (killed
        if it has not ended within 10 s), so that they shut down together."""
        self._supervise = False
        live = [proc for proc in self.procs if proc is not None and proc.poll() is None]
        for proc in live:
            proc.terminate()
        for proc in live:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
