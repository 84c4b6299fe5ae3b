"""An in-process SecEA deployment: one server, N clients, every message carried as bytes and
counted (``len()`` per client, up and down).  Used by the tests and ``secemb bench secea``.

Setup runs the key directory and the private entity union; :meth:`Deployment.round` runs one
aggregation round (Sec. III-A and III-B) and returns each client's averages.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient, SecEAServer
from secemb.protocols.secea.union import private_union
from secemb.randomness import RandomBytes, system_rng

R = TypeVar("R")

__all__ = ["Traffic", "Deployment"]


@dataclass
class Traffic:
    """Bytes per client (``up``: client -> server, ``down``: server -> client), the messages in
    order, and seconds spent per party (client index, or ``"server"``) per stage."""

    up: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    down: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    log: list[bytes] = field(default_factory=list)
    seconds: dict[tuple[int | str, str], float] = field(default_factory=lambda: defaultdict(float))

    def sent(self, client: int, data: bytes) -> bytes:
        self.up[client] += len(data)
        self.log.append(data)
        return data

    def received(self, client: int, data: bytes) -> bytes:
        self.down[client] += len(data)
        self.log.append(data)
        return data


class Deployment:
    """Server and clients of one SecEA deployment, set up (keys and entity union) on creation.

    Parameters
    ----------
    params:
        The public parameters (N, T, K, d, f).
    entity_sets:
        ``N`` arrays of distinct int64 entity ids, one per client.
    domain:
        Entity ids are in ``[0, domain)`` (the PSU's filter length); ``None``: one past the
        largest id.
    key_bits:
        Paillier modulus size of every client.
    query_bound:
        Queries every client sends per round (:class:`SecEAClient`); ``None``: its own count.
    """

    def __init__(self, params: SecEAParams, entity_sets: list[np.ndarray], *, domain: int | None = None,
                 key_bits: int = 2048, query_bound: int | None = None, _rng: RandomBytes | None = None) -> None:
        rng = system_rng if _rng is None else _rng
        self.params = params
        self.traffic = Traffic()
        self.setup_traffic = Traffic()
        self.server = SecEAServer(params, _rng=rng)
        self.clients = [SecEAClient(i, params, s, key_bits=key_bits, query_bound=query_bound, _rng=rng)
                        for i, s in enumerate(entity_sets)]
        t = self.setup_traffic
        hellos = {i: t.sent(i, c.hello()) for i, c in enumerate(self.clients)}
        for i, msg in self.server.directory(hellos).items():
            self.clients[i].receive_directory(t.received(i, msg))
        sets = [c.entities for c in self.clients]
        top = 1 + max((int(e.max()) for e in sets if e.size), default=0)
        self.union, up, down = private_union(sets, top if domain is None else domain, _rng=rng)
        for i in range(len(sets)):
            t.up[i] += up.get(i, 0)
            t.down[i] += down.get(i, 0)
        for c in self.clients:
            c.set_union(self.union)

    def _timed(self, who: int | str, stage: str, fn: Callable[..., R], *args: object) -> R:
        start = time.perf_counter()
        out = fn(*args)
        self.traffic.seconds[(who, stage)] += time.perf_counter() - start
        return out

    def uploads(self, round_id: int, rows: list[np.ndarray]) -> dict[int, bytes]:
        """Every client's UPLOAD of ``round_id`` (counted)."""
        return {
            i: self.traffic.sent(i, self._timed(i, "share+query", c.upload, round_id, rows[i]))
            for i, c in enumerate(self.clients)
        }

    def precompute(self, queries: list[int]) -> None:
        """The offline phase before a round: every client's and the server's encryption
        randomizers for ``queries[n]`` queries of each client n (timed as stage "offline")."""
        chunks = [c.paillier_key.chunks(self.params.width) for c in self.clients]
        counts = {n: q * chunks[n] for n, q in enumerate(queries)}
        for v, client in enumerate(self.clients):
            self._timed(v, "offline", client.precompute, counts)
        self._timed("server", "offline", self.server.precompute,
                    {n: c * self.params.num_clients for n, c in counts.items()})

    def round(self, round_id: int, rows: list[np.ndarray], drop_after_upload: set[int] | None = None
              ) -> dict[int, np.ndarray]:
        """One aggregation round; ``rows[i]`` are client i's embeddings (order of its entities).

        Clients in ``drop_after_upload`` send their UPLOAD and nothing after it.  Returns the
        averages of every client that finished.

        Raises
        ------
        secemb.errors.ProtocolError
            The round is aborted (too few answers).
        """
        gone = drop_after_upload or set()
        relays = self._timed("server", "relay", self.server.relay, round_id, self.uploads(round_id, rows))
        answers = {
            v: self.traffic.sent(v, self._timed(v, "answer", self.clients[v].answer, self.traffic.received(v, msg)))
            for v, msg in relays.items()
            if v not in gone
        }
        results = self._timed("server", "mask", self.server.mask, round_id, answers)
        return {
            n: self._timed(n, "decode", self.clients[n].finish, self.traffic.received(n, msg))
            for n, msg in results.items()
        }
