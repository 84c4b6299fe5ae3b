"""Shared pieces of the deviation tests (issue 33): the two servers in process, or server 1 as a
real ``secemb serve`` process (HTTPS, mutual TLS) with server 0 in process -- so that a test can
make server 0 deviate and watch the honest server 1 catch it over the network -- and devices
(the device SDK: :class:`~secemb.client.device.Device`) that play a whole round through the
same node methods and links a deployment uses."""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from secemb.client.device import Device, DeviceClient
from secemb.data import by_user, synthetic_like
from secemb.sim.local import InProcessServers, LocalServerLink
from secemb.sim.settings import cluster_settings
from secemb.models import MatrixFactorization
from secemb.protocols import get_protocol
from secemb.server.node import LeaderNode, make_node
from secemb.server.peer import HttpPeer
from secemb.server.store import MemoryStore
from secemb.sim.cluster import LocalCluster
from secemb.training import TrainConfig
from secemb.transport.http import HttpServerLink
from secemb.transport.inprocess import InProcessTransport
from secemb.transport.links import ServerLink

#: the servers' (and devices') floor on users per aggregate
FLOOR = 3
DATA = synthetic_like(30, 40, 600, seed=3)
RATINGS = by_user(DATA)
#: four users with ratings: one round's participants
USERS = [u for u in range(DATA.num_users) if RATINGS.of(u)[0].size][:4]
#: every call to a server process gives up after this many seconds
WAIT_S = 30.0


def _setup(relay: bool = True) -> tuple[MatrixFactorization, Any, dict[str, Any]]:
    model = MatrixFactorization(dim=4, reg=0.01)
    proto = get_protocol("secemb", layout="cuckoo", relay=relay)
    settings = cluster_settings(model, proto, DATA, TrainConfig(m_prime=4, seed=5), deadline_s=WAIT_S,
                                min_users=FLOOR)
    return model, proto, settings


@dataclass
class Pair:
    """Server 0 (in process, so a test can make it deviate) and server 1 (in process or a
    process); ``status1()`` is server 1's status as its operator sees it, ``clear1()`` the
    operator's clearing of its alarms, ``links(user)`` a device's links to both."""

    leader: LeaderNode
    status1: Callable[[], dict[str, Any]]
    round_status1: Callable[[int], dict[str, Any]]
    clear1: Callable[[], Any]
    links: Callable[[int], tuple[ServerLink, ServerLink]]


def in_process(relay: bool = True) -> tuple[Pair, InProcessServers]:
    """Both servers in process (the engine's :class:`InProcessServers`)."""
    model, proto, settings = _setup(relay)
    servers = InProcessServers(settings, proto, model)
    leader, follower = servers.nodes
    assert isinstance(leader, LeaderNode)
    pair = Pair(leader, follower.status, lambda r: follower.round_status(r, None), follower.clear_alarms,
                lambda u: (LocalServerLink(leader, u, servers.tp), LocalServerLink(follower, u, servers.tp)))
    return pair, servers


@contextlib.contextmanager
def over_http() -> Iterator[tuple[Pair, LocalCluster]]:
    """Server 1 as a ``secemb serve`` process; server 0 in process, configured as the
    deployment's server 0 and talking to server 1 over HTTPS (mutual TLS) with the peer secret."""
    model, proto, settings = _setup()
    with tempfile.TemporaryDirectory(prefix="secemb-deviation-") as d:
        cluster = LocalCluster(d, **settings)
        peer = HttpPeer(cluster.url(1), cluster.peer_secret, timeout=WAIT_S, tls=cluster.peer_tls())
        try:
            cluster.start(1)
            cfg0 = cluster.configs[0]
            leader = make_node(cfg0, peer=peer, store=MemoryStore(0, cfg0.fingerprint()), start_threads=False,
                               protocol=proto, model=model)
            assert isinstance(leader, LeaderNode)
            tp = InProcessTransport()
            admin1 = cluster.admin(1, timeout=WAIT_S)

            def links(u: int) -> tuple[ServerLink, ServerLink]:
                key1 = cluster.device_keys(u)[1]
                return (LocalServerLink(leader, u, tp),
                        HttpServerLink(1, u, cluster.url(1), key1, timeout=WAIT_S, tls=cluster.tls))

            yield Pair(leader, lambda: admin1.get_json("/v1/admin/status"),
                       lambda r: admin1.get_json(f"/v1/rounds/{r}/status"),
                       lambda: admin1.post_json("/v1/admin/alarms/clear"), links), cluster
        finally:
            peer.shutdown()
            cluster.stop()


def client(pair: Pair, user: int) -> DeviceClient:
    return DeviceClient.over(user, pair.links(user), min_users=FLOOR)


def play_round(pair: Pair, users: list[int] = USERS) -> tuple[int, dict[str, Any], dict[int, BaseException]]:
    """Server 0 opens a round for ``users``; each device checks the round both servers
    announce, retrieves, trains and uploads (the SDK's :meth:`Device.participate`); server 0
    closes it.  ``(round id, server 0's outcome, the devices' errors by user)``."""
    r = int(pair.leader.open_round(participants=users, deadline_s=WAIT_S)["round_id"])
    errors: dict[int, BaseException] = {}
    for u in users:
        c = client(pair, u)
        try:
            Device(c, *RATINGS.of(u)).participate(c.round_info())
        except Exception as exc:  # noqa: BLE001 - a device's failure is what some tests look for
            errors[u] = exc
    return r, pair.leader.close_round(r), errors


def in_one_batch(monkeypatch: Any, leader: Any, first: Callable[[], None], rest: list[Callable[[], None]]) -> list[int]:
    """Run ``first``, then each of ``rest``, each in a thread, so that the uploads ``rest`` sends
    reach server 0's role together: the role's first ``handle_upload_many`` call (``first``'s)
    is held until every one of ``rest`` has queued at the node's upload batcher (or
    :data:`WAIT_S` has passed); returns the sizes of the role's calls, in order."""
    role = leader.role
    real = role.handle_upload_many
    sizes: list[int] = []
    first_in, go = threading.Event(), threading.Event()

    def held_first(items: list[tuple[int, bytes]]) -> list:
        sizes.append(len(items))
        if len(sizes) == 1:  # hold the batcher until the others have queued
            first_in.set()
            assert go.wait(WAIT_S)
        return real(items)

    monkeypatch.setattr(role, "handle_upload_many", held_first)
    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert first_in.wait(WAIT_S)
    threads += [threading.Thread(target=send) for send in rest]
    for t in threads[1:]:
        t.start()
    deadline = time.monotonic() + WAIT_S
    while leader._upload_batch._q.qsize() < len(rest) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.set()
    for t in threads:
        t.join(WAIT_S)
    return sizes
