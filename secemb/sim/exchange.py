"""``secemb demo --network`` for a one-server protocol (``--protocol sfsl``, ...): its server
behind HTTPS on 127.0.0.1 and the simulated devices talking to it with signed requests
(:func:`train_networked`).

The server is the protocol's :class:`~secemb.protocols.exchange.ExchangeServer`, the same as in
process, served by :func:`~secemb.server.exchange_app.create_exchange_app` under uvicorn in a
thread of this process over TLS with the two-server app's guards
(:func:`~secemb.server.listener.guarded_config`: header and handshake deadlines, a connection
limit; bodies under a size limit and a deadline), like the two-server demo
(:class:`~secemb.sim.cluster.LocalCluster`): a fresh private CA and certificates for 127.0.0.1
(:func:`~secemb.server.tls.init_pki`, in a temporary directory removed when the server stops;
the node presents server 0's), and every client verifies the server against that CA only
(:func:`~secemb.server.tls.client_context`); there is no plain-HTTP mode.  The devices reach
it only through :class:`~secemb.transport.http.HttpStageLink` (concurrently,
``concurrency`` at a time), the operator through
:class:`~secemb.transport.http.HttpStageAdmin`, and the public model used for the
metric is fetched over HTTPS.  There is one server: nothing crosses between servers.

The run is the protocol's own ``train`` with the rounds played over HTTP instead of in
process, so with the same seed it trains the in-process run's model wherever the protocol's
randomness is seeded (SFSL: CPP1, whose perturbation draws nothing random; CPP2-CPP5 draw
randomized response from the OS CSPRNG, which differs from run to run by design).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from secemb.errors import InvalidParameters
from secemb.protocols.exchange import ExchangeProtocol, ExchangeServer
from secemb.sim.cluster import free_port
from secemb.sim.player import Rounds, train_exchange
from secemb.round.results import EpochStats, RoundStats, TrainResult
from secemb.server.auth import Verifier
from secemb.server.config import ServerConfig
from secemb.server.tls import client_context, init_pki, server_context_kwargs
from secemb.transport.http import HttpStageAdmin, HttpStageLink
from secemb.transport.network import ApiClient
from secemb.transport.paced import PacedTransport
from secemb.transport.signing import user_key

__all__ = ["NodeServer", "train_networked"]


class NodeServer:
    """Serves ``server`` (a one-server protocol's node, its body limit, public model and device
    ids) on ``127.0.0.1`` (a free port) in a thread, from :meth:`start` to
    :meth:`stop` (or as a context manager).

    ``url``: the base URL (``https``); ``tls``: the client context that pins the server's
    private CA (give it to every client); ``admin_secret``, ``user_secret``: the keys (fresh OS
    randomness).  The CA and the server's certificate and key are created fresh in a temporary
    directory (0700, keys 0600) that :meth:`stop` removes.  ``read_timeout_s``,
    ``max_connections``, ``max_body_reads``: the guards, as a SecEmb server's ``[server]``
    settings of those names (default: theirs).
    """

    def __init__(self, server: ExchangeServer, *, read_timeout_s: float | None = None,
                 max_connections: int | None = None, max_body_reads: int | None = None) -> None:
        import uvicorn

        from secemb.server.exchange_app import create_exchange_app
        from secemb.server.listener import guarded_config

        def setting(value: Any, name: str) -> Any:
            return ServerConfig.model_fields[name].default if value is None else value

        read_timeout_s = setting(read_timeout_s, "read_timeout_s")
        self.admin_secret, self.user_secret = os.urandom(32), os.urandom(32)
        verifier = Verifier(0, os.urandom(32), self.admin_secret, self.user_secret, server.num_users)
        app = create_exchange_app(server.node, verifier, max_body_bytes=server.max_body_bytes,
                                  model=server.model, read_timeout_s=read_timeout_s,
                                  max_body_reads=setting(max_body_reads, "max_body_reads"))
        self._pki_dir = tempfile.TemporaryDirectory(prefix="secemb-exchange-tls-")
        pki = init_pki(Path(self._pki_dir.name) / "tls", 0, ["127.0.0.1", "localhost"])
        self.tls = client_context(pki.ca)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        tls = server_context_kwargs(pki.ca, pki.cert(0), pki.key(0))
        self._server = uvicorn.Server(guarded_config(
            app, "127.0.0.1", self.port, read_timeout_s=read_timeout_s,
            max_connections=setting(max_connections, "max_connections"), tls=tls, log_level="warning",
            own_process=False))
        self._thread = threading.Thread(target=self._server.run, name="secemb-exchange-server", daemon=True)

    def __enter__(self) -> NodeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> NodeServer:
        """Start serving; return when the server listens."""
        self._thread.start()
        deadline = time.monotonic() + 30.0
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise InvalidParameters(f"the one-server node did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving and remove the TLS files."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=30.0)
        self._pki_dir.cleanup()


def train_networked(protocol: ExchangeProtocol, *, concurrency: int = 8,
                    on_start: Callable[[dict[str, Any]], None] | None = None,
                    on_round: Callable[[RoundStats], None] | None = None,
                    on_epoch: Callable[[EpochStats], None] | None = None,
                    on_server: Callable[[str], None] | None = None) -> TrainResult:
    """Train ``protocol`` (:func:`~secemb.sim.player.train_exchange`) with its server behind
    HTTPS (a :class:`NodeServer` per server it makes); the result (``config["network"]`` true).  ``on_server`` is called
    with the server's URL.

    Raises
    ------
    InvalidParameters: the protocol declares ``networked = False``; what its ``train`` raises;
    ``RemoteError`` if the server refuses a call (e.g. 409 when too few devices are left and
    the round aborts).
    """
    if not protocol.networked:
        raise InvalidParameters(f"--protocol {protocol.name} runs in process only (networked = False): use "
                                "--in-process")
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="secemb-device")
    serving: list[NodeServer] = []
    clients: list[httpx.Client] = []

    def connect(server: ExchangeServer) -> Rounds:
        host = NodeServer(server).start()
        serving.append(host)
        http = httpx.Client(timeout=120.0, trust_env=False, transport=PacedTransport(
            verify=host.tls, limits=httpx.Limits(max_connections=2 * concurrency,
                                                 max_keepalive_connections=2 * concurrency)))
        clients.append(http)
        if on_server is not None:
            on_server(host.url)
        # unbounded answers (max_answer_bytes=None): the server is this process's own, on 127.0.0.1
        admin = HttpStageAdmin(ApiClient(host.url, "admin", host.admin_secret, http=http, max_answer_bytes=None))
        links: dict[int, HttpStageLink] = {}

        def link(u: int) -> HttpStageLink:
            if u not in links:
                links[u] = HttpStageLink(u, ApiClient(host.url, f"user:{u}", user_key(host.user_secret, u),
                                                      http=http, max_answer_bytes=None))
            return links[u]

        return Rounds(server.node.plan, admin, link, admin.model, map=lambda fn, items: list(pool.map(fn, items)))

    def started(cfg: dict[str, Any]) -> None:
        cfg["network"] = True
        if on_start is not None:
            on_start(cfg)

    try:
        result = train_exchange(protocol, connect, on_start=started, on_round=on_round, on_epoch=on_epoch)
    finally:  # clients before servers: a TLS connection the client leaves open holds the server's shutdown
        pool.shutdown(wait=True)
        for http in clients:
            http.close()
        for host in serving:
            host.stop()
    return result

