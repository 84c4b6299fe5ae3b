"""One secure-aggregation round driven message by message against the real server, for the tests
of tests/secagg (session 24: the round each test module used to drive by hand, signed and unsigned,
with its own hooks).  A module of its own, imported by name (tests/secagg is on the test path, as
tests/fss's projection_spec is; a shares message's records are :mod:`share_records`'); the inputs it
draws are test data from numpy's generator, not secrets, and the expected sums (:meth:`Round.want`)
are numpy's, never the code under test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pytest
from share_records import H, N

from secemb.secagg import SecAggClient, SecAggConfig, SecAggServer, messages, shamir
from secemb.secagg.identity import Roster

STAGES = ("shares", "masked", "consistency", "unmask")
"""The stages whose client messages :meth:`Round.play` can hold back (``until``)."""

Hook = Callable[[int, bytes], bytes]
"""``hook(u, msg)``: the message client ``u`` sends (or, relayed, takes) instead of ``msg``."""


class Round:
    """A round of the clients of ``inputs`` (ids in its order; ``rows[u]`` each client's row set
    in a sparse round) under ``cfg``.  In a signed round each client holds an identity of a fresh
    roster and the server is pinned to it.  Every client advertises at construction
    (``advertised``), so a test may change a client between its advertise and the rest of the
    round; :meth:`play` keeps every message the clients send, after its hook (``shares``,
    ``masked``, ``consistency``, ``unmask``, and ``relayed``: the relayed messages as the clients
    took them)."""

    def __init__(self, cfg: SecAggConfig, inputs: dict[int, np.ndarray], *,
                 rows: dict[int, np.ndarray] | None = None) -> None:
        self.cfg, self.inputs, self.rows = cfg, inputs, rows
        self.ids = list(inputs)
        roster = Roster.generate() if cfg.signed else None
        self.clients = {u: SecAggClient(u, cfg, identity=None if roster is None else roster.enroll(u))
                        for u in self.ids}
        self.server = SecAggServer(cfg, pin=None if roster is None else roster.pin)
        self.advertised = {u: c.advertise(None if rows is None else rows[u]) for u, c in self.clients.items()}
        self.dropped: tuple[int, ...] = ()
        self.shares: dict[int, bytes] = {}
        self.relayed: dict[int, bytes] = {}
        self.masked: dict[int, bytes] = {}
        self.consistency: dict[int, bytes] = {}
        self.unmask: dict[int, bytes] = {}

    def play(self, *, deal: Hook | None = None, relay: Hook | None = None, unmask: Hook | None = None,
             dropped: tuple[int, ...] = (), silent: tuple[int, ...] = (), until: str | None = None) -> None:
        """Every stage against the server, up to the unmask messages (the test asks for the result).
        ``deal``, ``relay`` and ``unmask`` edit each client's shares message, relayed message and
        unmask message; ``dropped`` send nothing from their masked input on, ``silent`` no unmask
        message.  With ``until`` (one of :data:`STAGES`; ``consistency`` in signed rounds only) the
        clients make their messages of that stage (edited by its hook) and keep them, none is sent,
        and the round stops there."""
        if until is not None and (until not in STAGES or until == "consistency" and not self.cfg.signed):
            raise ValueError(f"no stage {until!r} to stop at in this round")
        self.dropped = dropped
        server, clients = self.server, self.clients
        listed = self.key_lists()
        if _stage(self.shares, self.ids, lambda u: clients[u].share_keys(listed[u]), deal, server.receive_shares,
                  until == "shares"):
            return
        live = [u for u in self.ids if u not in dropped]
        relayed = server.relayed_messages()
        self.relayed.update((u, relayed[u] if relay is None else relay(u, relayed[u])) for u in live)
        if _stage(self.masked, live, lambda u: clients[u].masked_input(self.relayed[u], self.inputs[u]), None,
                  server.receive_masked, until == "masked"):
            return
        answers = server.survivors_messages()
        if self.cfg.signed:
            if _stage(self.consistency, live, lambda u: clients[u].consistency(answers[u]), None,
                      server.receive_consistency, until == "consistency"):
                return
            answers = server.signatures_messages()
        _stage(self.unmask, [u for u in live if u not in silent], lambda u: clients[u].unmask(answers[u]), unmask,
               server.receive_unmask, until == "unmask")

    def key_lists(self) -> dict[int, bytes]:
        """Every client's advertise given to the server; its key lists (the first stage of :meth:`play`)."""
        for u in self.ids:
            self.server.receive_advertise(u, self.advertised[u])
        return self.server.keys_messages()

    def result_recording_weights(self) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """The server's ``result()``, and the point lists whose Lagrange weights it computed alone
        (``shamir._weights`` called with a plain list, not a :class:`~secemb.secagg.shamir.Points`
        that carries weights derived from another set's)."""
        alone: list[tuple[int, ...]] = []
        real = shamir._weights

        def recorded(xs: list[int]) -> list[int]:
            if not isinstance(xs, shamir.Points):
                alone.append(tuple(xs))
            return real(xs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(shamir, "_weights", recorded)
            total = self.server.result()
        return total, alone

    def want(self) -> np.ndarray:
        """The sum over the clients not dropped, numpy's: each row over its holders, mod 2^32."""
        cfg = self.cfg
        total = np.zeros((cfg.length, cfg.width), np.uint64)
        for u in self.ids:
            if u not in self.dropped:
                total[slice(None) if self.rows is None else self.rows[u]] += self.inputs[u].reshape(-1, cfg.width)
        return (total % 2**32).astype(np.uint32)


def _stage(kept: dict[int, bytes], who: Iterable[int], make: Callable[[int], bytes], hook: Hook | None,
           send: Callable[[int, bytes], None], hold: bool) -> bool:
    """Client ``u``'s message of one stage, for each ``u`` of ``who``: made, edited by ``hook``,
    kept in ``kept`` and, unless ``hold``, sent; returns ``hold`` (the round stops)."""
    for u in who:
        msg = make(u)
        kept[u] = msg if hook is None else hook(u, msg)
        if not hold:
            send(u, kept[u])
    return hold


def drawn(cfg: SecAggConfig, n: int, seed: int) -> Round:
    """A round of clients ``0 .. n - 1`` under ``cfg`` whose inputs (and, sparse, row sets: each
    row with probability 0.6, drawn first) are drawn from ``default_rng(seed)``."""
    g = np.random.default_rng(seed)  # test inputs and row sets, not secrets
    rows = {u: np.flatnonzero(g.random(cfg.length) < 0.6) for u in range(n)} if cfg.sparse else None
    inputs = {u: g.integers(0, 2**32, (cfg.length if rows is None else rows[u].size, cfg.width),
                            dtype=np.uint64).astype(np.uint32) for u in range(n)}
    return Round(cfg, inputs, rows=rows)


def move_unmask_share(msg: bytes, which: int, owner: int, shift: int) -> bytes:
    """An unmask message with its share of ``owner``'s mask key (``which`` 0) or self-mask seed
    (1) moved by ``shift`` in the field."""
    rd = messages.Reader(memoryview(msg)[H:], "unmask")
    parts = [dict(rd.records(N, "owner")), dict(rd.records(N, "owner"))]
    rd.end()
    parts[which][owner] = ((int.from_bytes(parts[which][owner], "little") + shift) % shamir.PRIME).to_bytes(N, "little")
    body = [len(p).to_bytes(4, "little") + b"".join(v.to_bytes(4, "little") + s for v, s in sorted(p.items()))
            for p in parts]
    return messages.frame("unmask", int.from_bytes(msg[16:24], "little"), int.from_bytes(msg[8:12], "little"), *body)
