"""Cost of verified uploads (issue 34): server seconds and bytes of a SecEmb round with the
servers' check against the same round without it, measured in one process.

``python -m secemb.bench.robust [--users U] [--repeats R] [--size ml100k|yelp]`` runs, for each
layout (cuckoo with relay: the default deployment; full without relay: the paper's protocol),
``R`` alternating pairs of rounds of ``U`` devices at ML-100K size (m = 1,682, m' = 200) or the
Yelp stand-in's (m = 93,386, m' = 500), w = 65, 32-bit ring,
through the protocol roles (the servers' work only: retrieval evaluation, uploads, the
digests and their comparison, server 1's sketch answer and server 0's decision of the sketch
proofs, both aggregate shares and their reconstruction; each kind of
round has its own two servers, kept from round to round as a deployment keeps its roles, and
one warm-up round before the measured ones), and prints one
JSON line per layout: median server seconds per round checked / unchecked, and the bytes a
device sends per round and the servers exchange per round, both ways.  Timings are ratios
within one run (the machine may be shared); bytes are exact.  The servers run on the serial
backend, or with ``--workers N`` on a thread backend of ``N`` threads (retrieval, uploads,
aggregation and the bound check in ranges of users or buckets, as a ``thread`` deployment does).

A round's uploads reach each server as one batch (``handle_upload_many``; with relay, server
0's forwards reach server 1 as one batch), as the in-process engine delivers a round's devices
(``send_uploads`` of :mod:`secemb.sim.local`; over HTTP the server batches the uploads that
arrive together, so a round may be absorbed in several batches).  ``--batch N`` has the servers take
the requests and uploads ``N`` devices at a time instead, as such a server does (both kinds of round
alike; ``"batch"`` in the JSON, 0 for one batch): each batch pays its own passes over the table and
the aggregate, and with ``--bound`` each upload batch draws its own challenge (cuckoo layout).

With ``--bound`` a third kind of round runs in the same alternation: verified uploads plus
bounded payloads (issue 34 (b), ``SecEmbProtocol(bound=True)``): each device's proof after its
upload (its CPU reported apart, ``device_proof_s``: the servers' seconds do not include it), server 0's
intake of the proofs, and the servers' bound check before the aggregate shares.  Cuckoo layout:
server 0 draws one projection challenge per batch of uploads it absorbs, so the round's devices
share one; full layout: each device's own, which both servers derive at its retrieval
(``"challenges"`` in the JSON: the distinct challenges of a bounded round, its median).  The proof
counts in the device's upload bytes, the check's request and answer in the server-to-server
bytes.  Each line names its machine (``"machine"``: :func:`~secemb.bench.machine.machine_info`, with the
kernels' paths: e.g. ``avx512vnni`` among its features, the bound check's projections as VNNI dot products).

With ``--roles`` each kind's figures also hold ``"roles"``: the median seconds a round of each
server's protocol-role call (``"s0.handle_retrieval_many"``, ``"s1.bound_answer"``, ...; in each
round they sum to its ``server_s``), which says where a check's extra time goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from secemb.bench.machine import machine_info
from secemb.collector import sparing_the_setup_heap
from secemb.protocols.backends import Backend, ThreadBackend
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbRelayServer, SecEmbServer
from secemb.server.verify import rejected
from secemb.sim.allocator import keeping_round_heap

__all__ = ["SIZES", "measure"]

#: catalogue size m and rows per device m' of each measured size
SIZES = {"ml100k": (1682, 200), "yelp": (93386, 500)}


#: the kinds of round measured: no check, verified uploads, verified uploads and bounded payloads
KINDS = ("unchecked", "checked", "bounded")
#: a round's per-call seconds are its figures named with this prefix (``--roles``)
ROLE_PREFIX = "role:"


class _Servers:
    """The two servers of one kind of round (:data:`KINDS`), kept from round to round as a
    deployment keeps its roles (what a role keeps between rounds, its work arrays, is then
    reused as in a deployment), and the next round's id."""

    def __init__(self, layout: str, relay: bool, kind: str, users: int, backend: Backend | None) -> None:
        bound = kind == "bounded"
        self.kind = kind
        self.proto = SecEmbProtocol(layout=layout, relay=relay, verify=kind != "unchecked", bound=bound,
                                    users_per_round=users if bound else None, backend=backend)
        self.s0, self.s1 = self.proto.make_server(0), self.proto.make_server(1)
        self.round_id = 0

    def next_round(self) -> int:
        """The id of a new round of these servers (increasing, as the servers require)."""
        self.round_id += 1
        return self.round_id


def _round(servers: _Servers, users: int, gen: np.random.Generator, size: tuple[int, int],
           batch: int | None = None) -> dict[str, float]:
    """One round of ``servers``' kind (:data:`KINDS`) with ``users`` devices (the servers'
    ``users_per_round`` with bounded payloads); server seconds (both servers, summed), the
    devices' proof seconds (``bounded`` only, summed over devices), and bytes (device -> servers
    per device, server <-> server in total).  The devices' retrieval requests and uploads reach
    each server in batches of ``batch`` devices (one batch of all: ``None``), as a server takes
    those that arrive together over HTTP; with bounded payloads each upload batch has its own
    challenge."""
    m, m_prime = size
    bound = servers.kind == "bounded"
    proto, s0, s1 = servers.proto, servers.s0, servers.s1
    relay = proto.relay
    cfg = proto.round_config(servers.next_round(), num_items=m, width=65, dense_size=1, m_prime=m_prime,
                             ring_bits=32)
    table = gen.integers(0, 1 << 20, (m, 65)).astype(cfg.dtype)
    clock = [0.0]
    roles: dict[str, float] = {}

    def timed(fn: Callable[..., Any], *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            took = time.perf_counter() - t
            clock[0] += took
            server = getattr(fn, "__self__", None)
            name = f"{ROLE_PREFIX}{'' if server is None else f's{server.party}.'}{fn.__name__}"
            roles[name] = roles.get(name, 0.0) + took

    for s in (s0, s1):
        s.begin_round(cfg, table)  # the table's tags and limbs: the same work either way, not timed
    devices = [proto.make_user(cfg) for _ in range(users)]
    slots = [place(cfg, gen.choice(m, min(m, m_prime * 3 // 10), replace=False), gen).indices for _ in devices]
    up = s2s = 0
    reqs = [d.retrieval_request(sl) for d, sl in zip(devices, slots, strict=True)]
    up += sum(len(a) + len(b) for a, b in reqs)
    ids = list(range(users))
    step = batch or users
    groups = [range(lo, min(users, lo + step)) for lo in range(0, users, step)]
    replies: list[tuple[bytes, bytes | None]] = []
    for g in groups:
        if relay:
            assert isinstance(s0, SecEmbRelayServer) and isinstance(s1, SecEmbRelayServer)  # make_server's, relay
            timed(s1.handle_retrieval_many, [(u, reqs[u][1]) for u in g])
            fwds = timed(s0.handle_retrieval_many, [(u, reqs[u][0]) for u in g])
            masked = timed(s1.relay_retrieval_many, list(zip(g, fwds, strict=True)))
            s2s += sum(len(f) + len(m) for f, m in zip(fwds, masked, strict=True))
            replies += [(timed(s0.complete_retrieval, u, m), None) for u, m in zip(g, masked, strict=True)]
        else:
            a0 = timed(s0.handle_retrieval_many, [(u, reqs[u][0]) for u in g])
            a1 = timed(s1.handle_retrieval_many, [(u, reqs[u][1]) for u in g])
            replies += list(zip(a0, a1, strict=True))
    uploads = []
    for dev, (x0, x1), sl in zip(devices, replies, slots, strict=True):
        dev.retrieval_result(x0, x1)
        rows = np.zeros((cfg.slots, 65), cfg.dtype)
        rows[sl >= 0] = 1
        u0, u1 = dev.upload(rows, np.zeros(1, cfg.dtype))
        up += len(u0) + (0 if u1 is None else len(u1))
        uploads.append((u0, u1))
    # by default the round's uploads reach each server as one batch, as the in-process engine delivers a
    # round's group (secemb.sim.local): with bounded payloads, server 0 draws one challenge for them
    refused = []
    for g in groups:
        if relay:
            assert isinstance(s1, SecEmbRelayServer)
            fwds = timed(s0.handle_upload_many, [(u, uploads[u][0]) for u in g])
            assert all(isinstance(f, bytes) for f in fwds), "an upload was refused"
            s2s += sum(len(f) for f in fwds)
            refused += timed(s1.relay_upload_many, list(zip(g, fwds, strict=True)))
        else:
            refused += timed(s1.handle_upload_many, [(u, uploads[u][1]) for u in g])
            refused += timed(s0.handle_upload_many, [(u, uploads[u][0]) for u in g])
    assert all(e is None for e in refused), "an upload was refused"
    proving = 0.0
    challenges: set[bytes] = set()
    if bound:
        proofs = []
        for u, dev in zip(ids, devices, strict=True):
            challenges.add(c := timed(s0.challenge, u))
            t = time.process_time()
            proofs.append((u, dev.bound_proof(c)))
            proving += time.process_time() - t
        up += sum(len(p) for _, p in proofs)
        assert all(e is None for e in timed(s0.handle_proof_many, proofs)), "a proof was refused"
    include = ids
    d0: dict[int, bytes] | None = timed(s0.upload_digests, ids)
    d1: dict[int, bytes] | None = timed(s1.upload_digests, ids)
    if d0 is not None and d1 is not None:
        answer = timed(s1.verify_answer, ids)  # the sketch check: sent with server 1's digests
        s2s += 32 * len(d1) + len(answer)
        failed = timed(s0.verify_rejected, ids, answer)
        mismatched = timed(rejected, d0, d1)  # once a round, as the close does (secemb.server.close)
        include = [u for u in ids if u not in mismatched and u not in failed]
        assert include == ids, "an honest device was rejected"
    if bound:
        request = timed(s0.bound_request, include)
        answer = timed(s1.bound_answer, request)
        s2s += len(request) + len(answer)
        assert not timed(s0.bound_rejected, answer), "an honest device failed the bound check"
    share1 = timed(s1.aggregate_share, include)
    share0 = timed(s0.aggregate_share, include)
    s2s += len(share0) + len(share1)
    _combine(timed, s0, share1, include)
    _combine(timed, s1, share0, include)
    return {"server_s": clock[0], "device_proof_s": proving, "device_upload_bytes": up / users,
            "server_bytes": float(s2s), "challenges": float(len(challenges)), **roles}


def _combine(timed: Callable[..., Any], server: SecEmbServer, share: bytes, include: list[int]) -> None:
    timed(server.combine, share, include)


def measure(users: int, repeats: int, seed: int = 0, size: str = "ml100k",
            layouts: tuple[str, ...] = ("cuckoo", "full"), bound: bool = False,
            workers: int | None = None, roles: bool = False, batch: int | None = None) -> list[dict[str, Any]]:
    """Per layout (cuckoo with relay, full without), the checked and unchecked figures (median
    of ``repeats`` rounds of each kind, their order rotating) at ``size`` (:data:`SIZES`); with
    ``bound``, the bounded ones too (``bounded`` and its ``bounded_*_ratio`` against unchecked).
    The servers evaluate on the serial backend, or with ``workers`` on a thread backend of that
    many threads (``"workers"`` in each line: 1 for serial).  With ``roles``, each kind's figures
    hold ``"roles"``: the median seconds a round of each server's role call (module docstring).
    ``batch``: the servers take the devices' requests and uploads ``batch`` at a time (``"batch"`` in
    each line; 0 there for one batch a round), as over HTTP, each upload batch with its own
    challenge (bounded, cuckoo layout); ``None``: one batch a round."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    if batch is not None and batch < 1:
        raise ValueError(f"batch must be None or >= 1, got {batch}")
    keeping_round_heap()  # as a server process does (secemb serve)
    backend = None if workers is None else ThreadBackend(workers)
    try:
        with sparing_the_setup_heap():  # as secemb serve's rounds run (secemb.server.serve)
            return _measure(users, repeats, seed, size, layouts, bound, backend, roles, batch)
    finally:
        if backend is not None:
            backend.close()


def _medians(runs: list[dict[str, float]], roles: bool) -> dict[str, Any]:
    """The median of each figure over a kind's rounds; the role calls' (a call a round makes only
    in some rounds counts 0 in the others) nested under ``"roles"`` with ``roles``, else left out."""
    names = sorted({k for r in runs for k in r})
    med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in names}
    out: dict[str, Any] = {k: v for k, v in med.items() if not k.startswith(ROLE_PREFIX)}
    if roles:
        out["roles"] = {k[len(ROLE_PREFIX) :]: v for k, v in med.items() if k.startswith(ROLE_PREFIX)}
    return out


def _measure(users: int, repeats: int, seed: int, size: str, layouts: tuple[str, ...], bound: bool,
             backend: Backend | None, roles: bool = False, batch: int | None = None) -> list[dict[str, Any]]:
    gen = np.random.default_rng(seed)  # public test data: tables and item choices
    out = []
    for layout, relay in (("cuckoo", True), ("full", False)):
        if layout not in layouts:
            continue
        kinds = KINDS if bound else KINDS[:2]
        servers = {kind: _Servers(layout, relay, kind, users, backend) for kind in kinds}
        for kind in kinds:
            _round(servers[kind], users, gen, SIZES[size], batch)  # warm-up (kernel compilation, caches, work arrays)
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for i in range(repeats):
            for j in range(len(kinds)):  # each kind first in turn
                kind = kinds[(i + j) % len(kinds)]
                runs[kind].append(_round(servers[kind], users, gen, SIZES[size], batch))
        med = {v: _medians(runs[v], roles) for v in runs}
        line: dict[str, Any] = {"size": size, "layout": layout, "relay": relay, "users": users, "repeats": repeats,
                                "workers": 1 if backend is None else backend.workers, "batch": batch or 0,
                                "machine": machine_info()}
        for kind, prefix in (("checked", ""), ("bounded", "bounded_")):
            if kind not in med:
                continue
            line[kind] = med[kind]
            line[f"{prefix}server_time_ratio"] = med[kind]["server_s"] / med["unchecked"]["server_s"]
            line[f"{prefix}device_upload_ratio"] = (med[kind]["device_upload_bytes"]
                                                    / med["unchecked"]["device_upload_bytes"])
            line[f"{prefix}server_bytes_ratio"] = med[kind]["server_bytes"] / med["unchecked"]["server_bytes"]
        if "bounded" in med:
            line["challenges"] = med["bounded"]["challenges"]
        line["unchecked"] = med["unchecked"]
        out.append(line)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--size", choices=sorted(SIZES), default="ml100k")
    ap.add_argument("--layouts", default="cuckoo,full")
    ap.add_argument("--bound", action="store_true", help="also rounds with bounded payloads (issue 34 (b))")
    ap.add_argument("--workers", type=int, default=None, help="threads of a thread backend (default: serial)")
    ap.add_argument("--roles", action="store_true", help="also each server role call's median seconds a round")
    ap.add_argument("--batch", type=int, default=None, help="devices a server takes at once (default: all)")
    args = ap.parse_args()
    for line in measure(args.users, args.repeats, size=args.size, layouts=tuple(args.layouts.split(",")),
                        bound=args.bound, workers=args.workers, roles=args.roles, batch=args.batch):
        print(json.dumps(line))


if __name__ == "__main__":
    main()
