"""A networked training run: simulated devices talk HTTP to two real server processes.

:func:`train_networked` is the network twin of :func:`secemb.training.train`: the same
driver (:func:`secemb.sim.driver.run`) plays the operator (opens and closes rounds, runs
the Eq. 11 count phase) and every device (one thread per concurrent device, each with its own
signed connections through the device SDK), against the server processes of a
:class:`Cluster` instead of in-process nodes.  The devices' ratings and private parameters
never reach a server; what the servers see is exactly the protocol's messages.  By default the
devices draw their private state from their own entropy, as deployed devices do
(``device_randomness="private"``); with ``device_randomness="reproducible"`` they draw it from
the run's seed and the final model's SHA-256 equals the in-process one of the same seed
(tested for every networked protocol).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from typing import Protocol as TypingProtocol

import httpx

from secemb.client.device import DeviceClient, RoundSession
from secemb.data import RatingData
from secemb.sim.driver import Servers, run
from secemb.sim.settings import DeviceRandomness
from secemb.models.base import RecModel
from secemb.protocols.base import Protocol
from secemb.round.results import TrainConfig, TrainResult
from secemb.transport.http import HttpAdminLink
from secemb.transport.network import ApiClient
from secemb.transport.paced import PacedTransport

__all__ = ["Cluster", "train_networked"]


class Cluster(TypingProtocol):
    """What the coordinator needs to know about the two servers (e.g.
    :class:`~secemb.sim.cluster.LocalCluster`)."""

    def url(self, party: int) -> str: ...

    def admin(self, party: int, *, timeout: float = ...) -> ApiClient: ...

    def device_keys(self, user: int) -> tuple[bytes, bytes]: ...

    #: the TLS context that verifies both servers (pins the deployment's CA)
    tls: ssl.SSLContext

    @property
    def min_users(self) -> int:
        """The servers' floor on users per aggregate (the simulated devices keep the same)."""
        ...


class _ThreadPhase:
    """A round's devices on ``workers`` threads, each sending its own requests (the server's
    batcher groups concurrent retrievals into one evaluation)."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        return list(self.pool.map(fn, items))

    def retrieve(self, sessions: Sequence[RoundSession]) -> list[BaseException | None]:
        def one(session: RoundSession) -> BaseException | None:
            try:
                session.send_requests()
            except Exception as exc:  # noqa: BLE001 - a device failure is data, not a crash (Ctrl-C is not)
                return exc
            return None

        return self.map(one, sessions)

    def send_uploads(self, items: Sequence[Any], send: Callable[[Any], None],
                     fail: Callable[[Any, BaseException], None]) -> None:
        """Each item's ``send`` on the threads (the server's batcher groups concurrent uploads)."""

        def one(x: Any) -> None:
            try:
                send(x)
            except Exception as exc:  # noqa: BLE001 - a device failure is data, not a crash (Ctrl-C is not)
                fail(x, exc)

        self.map(one, items)


def train_networked(
    cluster: Cluster,
    model: RecModel,
    protocol: Protocol,
    train_data: RatingData,
    test_data: RatingData | None,
    config: TrainConfig,
    *,
    workers: int = 8,
    wait_s: float = 120.0,
    device_randomness: DeviceRandomness = "private",
    **options: Any,
) -> TrainResult:
    """Train over the network; the :class:`~secemb.training.TrainResult` of the run.

    ``cluster``: the two servers (fresh state, configured by
    :func:`~secemb.sim.settings.cluster_settings`); ``workers``: devices running at the
    same time; ``wait_s``: how long to keep retrying operator calls while a server is
    unreachable; ``device_randomness``: where the devices' private draws come from
    (:data:`~secemb.sim.settings.DeviceRandomness`; ``"reproducible"`` to get the model of
    :func:`secemb.training.train` with the same seed).  ``options`` are the keyword options of
    :func:`secemb.sim.driver.run`
    (``val_data``, ``deadline_s``, ``close_when_done``, ``max_attempts``, ``behavior``, the
    round and progress callbacks, ``extra_config``), passed on as they are.
    Communication is what the device SDK sent and received (request and response bodies);
    server-to-server bytes are not seen from here (``server_bytes_per_round`` is 0).
    """
    admin = (HttpAdminLink(0, cluster.admin(0)), HttpAdminLink(1, cluster.admin(1)))
    http = httpx.Client(timeout=wait_s, trust_env=False, transport=PacedTransport(
        verify=cluster.tls, limits=httpx.Limits(max_connections=4 * workers, max_keepalive_connections=4 * workers)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="secemb-device")

    def device(user: int) -> DeviceClient:
        k0, k1 = cluster.device_keys(user)
        return DeviceClient(user, cluster.url(0), cluster.url(1), k0, k1, timeout=wait_s, http=http,
                            min_users=cluster.min_users)

    servers = Servers(admin=admin, device=device, phase=_ThreadPhase(pool), wait_s=wait_s)
    try:
        return run(servers, model, protocol, train_data, test_data, config, device_randomness=device_randomness,
                   **options)
    finally:
        pool.shutdown(wait=True)
        http.close()
        for link in admin:
            link.close()
