"""``secemb bench network``: one round of N simulated devices against two server processes on
loopback, phase by phase.

Setup: two servers (``python -m secemb.server``) on 127.0.0.1 with fresh state; N devices
with synthetic ratings (``synthetic_like``), each with its own signed connections (a shared
connection pool), ``concurrency`` of them at a time in threads of this process.  The round is
driven in stages so that each phase is timed on its own:

``open``       the operator opens the round (server 0 reconciles with server 1, both begin it)
``prepare``    device-side: placement and DPF key generation (no network)
``retrieval``  per device: request to server 1, request to server 0 (with relay, server 0
               forwards to server 1 and completes), reply reconstruction
``dense``      per device: the dense vector from server 0
``upload``     per device: local training step, encoding, upload (server 1 first without relay)
``close``      the operator closes: agreed user set, server 1's share, combine, Adam step,
               durable checkpoint, sync of server 1

For each per-device phase: p50 / p99 / max latency of one device's requests and throughput
(devices per second over the phase's wall time); for the round, each server's seconds in its
protocol role's calls (``server_s``, the servers' own round outcomes: what their batching saves
shows there, docs/deployment.md "Batching").  The timed round follows an untimed warm-up
round of ``min(N, min_users)`` devices through the same phases (:data:`WARM_UP`, also in the
result), so first-call costs of the servers and the devices are in no figure.  Every loop is
bounded: N devices, two rounds, a timeout on every request.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from secemb.bench.machine import machine_info
from secemb.transport.paced import PacedTransport

if TYPE_CHECKING:
    from secemb.client.device import DeviceClient
    from secemb.data.ratings import UserRatings
    from secemb.models import MatrixFactorization
    from secemb.models.base import UserStore
    from secemb.protocols.base import Protocol
    from secemb.transport.network import ApiClient

__all__ = ["WARM_UP", "run"]


def _summary(lat: list[float], wall: float) -> dict[str, float]:
    a = np.asarray(lat) * 1e3
    return {
        "devices": int(a.size),
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
        "wall_s": wall,
        "devices_per_s": a.size / wall if wall > 0 else float("inf"),
    }


#: what the result says about first-call costs (``devices``: the warm-up round's)
WARM_UP = ("one untimed round of {devices} devices (every phase, both servers) before the timed round: "
           "first-call costs (the servers' and the devices') are in no figure; startup_s is the servers' start alone")


def _round(admins: tuple[ApiClient, ApiClient], clients: dict[int, DeviceClient], per_user: UserRatings,
           proto: Protocol, model: MatrixFactorization, store: UserStore, pool: ThreadPoolExecutor,
           rng: np.random.Generator) -> dict[str, Any]:
    """One round of the devices of ``clients``, phase by phase, each timed; returns ``slots``,
    ``phases`` (open and close: ``wall_s``; the others: :func:`_summary`), ``round_s``, the
    protocol bytes per device and ``server_s``: each server's seconds in its protocol role's calls
    for the round, from its own round outcome (``admins``: the two operators' clients).  Raises
    :class:`RuntimeError` unless the round commits with every device."""
    from secemb.client.device import RoundInfo, RoundSession
    from secemb.protocols.placement import place
    from secemb.round.local import distinct_items

    users = list(clients)
    admin0 = admins[0]
    t = time.perf_counter()
    opened = admin0.post_json("/v1/admin/rounds", {"participants": users, "deadline_s": 3600.0})
    open_s = time.perf_counter() - t
    info = RoundInfo.from_doc(opened)
    plans = {u: place(info.config, distinct_items(per_user.of(u)[0])[0], rng) for u in users}
    sessions = {u: RoundSession(clients[u], info, protocol=proto) for u in users}

    def timed(fn: Callable[[int], object]) -> Callable[[int], float]:
        def go(u: int) -> float:
            t0 = time.perf_counter()
            fn(u)
            return time.perf_counter() - t0
        return go

    def phase(fn: Callable[[int], object]) -> dict[str, float]:
        t0 = time.perf_counter()
        lat = list(pool.map(timed(fn), users))
        return _summary(lat, time.perf_counter() - t0)

    results: dict[str, Any] = {}
    results["prepare"] = phase(lambda u: sessions[u].prepare(*per_user.of(u), placement=plans[u]))

    def upload(u: int) -> None:
        s = sessions[u]
        state = store.state(u)  # the local step (device compute) is inside this phase
        s.train(lambda rows, d, batch: model.local_step(rows, d, state, batch))
        s.upload()

    results["retrieval"] = phase(lambda u: sessions[u].send_requests())
    results["dense"] = phase(lambda u: sessions[u].fetch_dense())
    for s in sessions.values():
        s.reconstruct()
    results["upload"] = phase(upload)
    t = time.perf_counter()
    outcome = admin0.post_json(f"/v1/admin/rounds/{info.round_id}/close")
    close_s = time.perf_counter() - t
    if outcome["state"] != "committed" or len(outcome["included"]) != len(users):
        raise RuntimeError(f"the round did not commit with every device: {outcome}")
    server_s = [float(a.get_json(f"/v1/rounds/{info.round_id}/status")["server_s"]) for a in admins]
    return {
        "slots": info.config.slots,
        "phases": {"open": {"wall_s": open_s}, **results, "close": {"wall_s": close_s}},
        "round_s": sum(results[k]["wall_s"] for k in ("retrieval", "dense", "upload")) + open_s + close_s,
        "upload_bytes_per_device": sum(s.upload_bytes for s in sessions.values()) / len(users),
        "download_bytes_per_device": sum(s.download_bytes for s in sessions.values()) / len(users),
        "server_s": {"0": server_s[0], "1": server_s[1]},
    }


def run(
    devices: int = 1000,
    *,
    concurrency: int = 32,
    num_items: int = 1682,
    ratings_per_user: int = 40,
    dim: int = 16,
    m_prime: int = 50,
    protocol: str = "secemb",
    layout: str = "cuckoo",
    relay: bool = True,
    timeout_s: float = 120.0,
    workdir: str | None = None,
    batch_wait_ms: float | None = None,
) -> dict[str, Any]:
    """Run the benchmark; a JSON-able result document.  One untimed round of
    ``min(devices, min_users)`` devices runs first (the warm-up, stated in ``warm_up``): the
    figures are those of the next round, of all ``devices``.  ``batch_wait_ms``: the servers'
    ``[server] batch_wait_ms`` (``None``: their default; in the result as the servers ran it)."""
    from secemb.client.device import DeviceClient
    from secemb.data import by_user, synthetic_like
    from secemb.sim.settings import cluster_settings
    from secemb.models import MatrixFactorization
    from secemb.protocols import get_protocol
    from secemb.sim.cluster import LocalCluster
    from secemb.training import TrainConfig

    if devices < 1 or concurrency < 1:
        raise ValueError("devices and concurrency must be >= 1")
    data = synthetic_like(devices, num_items, devices * ratings_per_user, seed=7)
    per_user = by_user(data)
    model = MatrixFactorization(dim=dim, reg=0.01)
    proto = get_protocol(protocol, layout=layout, relay=relay)
    cfg = TrainConfig(users_per_round=devices, m_prime=m_prime, seed=0)
    settings = cluster_settings(model, proto, data, cfg, deadline_s=3600.0)
    if batch_wait_ms is not None:
        settings["batch_wait_ms"] = batch_wait_ms
    store = model.new_user_store(devices, np.random.default_rng(1), cfg.adam())
    users = list(range(devices))
    with tempfile.TemporaryDirectory(prefix="secemb-bench-") as tmp, \
            LocalCluster(workdir or tmp, **settings) as cluster:
        t = time.perf_counter()
        cluster.start()
        startup_s = time.perf_counter() - t
        waited_ms = cluster.configs[0].batch_wait_ms  # as the servers run it (both the same here)
        http = httpx.Client(timeout=timeout_s, trust_env=False, transport=PacedTransport(
            verify=cluster.tls, limits=httpx.Limits(max_connections=4 * concurrency,
                                                    max_keepalive_connections=4 * concurrency)))
        admins = (cluster.admin(0, timeout=timeout_s), cluster.admin(1, timeout=timeout_s))
        clients = {u: DeviceClient(u, cluster.url(0), cluster.url(1), *cluster.device_keys(u), timeout=timeout_s,
                                   http=http, min_users=cluster.min_users) for u in users}
        pool = ThreadPoolExecutor(max_workers=concurrency)
        warm_users = users[:min(devices, cluster.min_users)]
        try:
            def one_round(who: list[int], seed: int) -> dict[str, Any]:
                return _round(admins, {u: clients[u] for u in who}, per_user, proto, model, store, pool,
                              np.random.default_rng(seed))

            one_round(warm_users, 3)  # warm-up, untimed: first calls (both servers' too) are in no figure
            timed = one_round(users, 2)
        finally:
            pool.shutdown(wait=True)
            for c in clients.values():
                c.close()
            http.close()
            for admin in admins:
                admin.close()
    return {
        "devices": devices,
        "concurrency": concurrency,
        "batch_wait_ms": waited_ms,
        "protocol": protocol,
        "layout": layout,
        "relay": relay,
        "num_items": num_items,
        "dim": dim,
        "m_prime": m_prime,
        "startup_s": startup_s,
        "warm_up": WARM_UP.format(devices=len(warm_users)),
        **timed,
        "devices_per_s": devices / timed["round_s"],
        "machine": machine_info(),
    }
