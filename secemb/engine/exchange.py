"""The one-server phase of the round engine: a round of *exchanges* (``RoundPlan.servers == 1``).

A one-server protocol (secure federated submodel learning) declares its round as a stage list
(:class:`~secemb.protocols.stages.RoundPlan` with ``servers=1``); each stage is an exchange:

1. every live device sends the server its message of the stage (:meth:`ExchangeParty.message`);
2. the operator closes the stage (:meth:`ExchangeAdmin.close_stage`): the server builds its
   answers (the secure aggregation closes a stage, fixing who is still in);
3. if the plan has a server -> user hop in the stage, each device fetches its answer
   (:meth:`ExchangeLink.fetch`); a device the server answers with nothing is out of the round.

:func:`play` runs the stages of one round against the server through links: in process
(:class:`LocalExchange`: the server node behind an :class:`~secemb.transport.inprocess.InProcessTransport`
that counts every message, tagged with its stage) or over HTTP
(:mod:`secemb.engine.http_exchange`).  The devices' messages of a stage are made one after
another in increasing id order (so a run's randomness is consumed in a fixed order) and sent
through ``map`` (concurrently over HTTP).  Communication is ``len()`` of the bodies that
crossed the links.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol as TypingProtocol

from secemb.errors import InvalidParameters
from secemb.protocols.base import ExchangeNode
from secemb.protocols.stages import SERVER0, RoundPlan
from secemb.transport.inprocess import InProcessTransport, user_endpoint

__all__ = ["ExchangeAdmin", "ExchangeLink", "ExchangeParty", "ExchangeRecord", "LocalExchange", "play"]


class ExchangeParty(TypingProtocol):
    """A device's part in one round of a one-server protocol."""

    def message(self, stage: str) -> bytes:
        """Its message of ``stage``."""

    def accept(self, stage: str, body: bytes) -> None:
        """The server's answer of ``stage``."""


class ExchangeLink(TypingProtocol):
    """Device ``user``'s connection to the one server."""

    user: int

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        """Deliver the device's message of ``stage``."""

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        """The server's answer of a closed stage (``None``: none)."""


class ExchangeAdmin(TypingProtocol):
    """The operator's connection to the one server."""

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        """Start round ``round_id`` for ``users``."""

    def close_stage(self, round_id: int, stage: str) -> None:
        """Close ``stage`` of the round (raises the server's refusal, e.g. an abort)."""

    def outcome(self, round_id: int) -> dict[str, Any]:
        """The round's outcome document."""


@dataclass
class ExchangeRecord:
    """What crossed the links in one round: ``up[user][stage]`` / ``down[user][stage]`` bytes,
    and the devices still in the round after the last stage (``finished``)."""

    up: dict[int, dict[str, int]] = field(default_factory=dict)
    down: dict[int, dict[str, int]] = field(default_factory=dict)
    finished: list[int] = field(default_factory=list)


def _serial(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    return [fn(x) for x in items]


def play(plan: RoundPlan, admin: ExchangeAdmin, links: Mapping[int, ExchangeLink],
         parties: Mapping[int, ExchangeParty], round_id: int, *, silent_from: Mapping[int, str] | None = None,
         map: Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]] = _serial) -> ExchangeRecord:
    """Run the stages of ``plan`` for round ``round_id`` (already opened at the server) with the
    devices ``parties`` (id -> party) over ``links`` (id -> link).

    ``silent_from``: device id -> the stage from which it sends nothing (a simulated dropout:
    it goes silent, as a device that loses its connection).  ``map``: how the messages of a
    stage are sent and the answers fetched (``[fn(x) for x in items]`` by default).

    Raises
    ------
    InvalidParameters: a one-server plan is required; a silent stage not in the plan.
    Whatever the server raises when a stage cannot close (e.g.
    :class:`~secemb.secagg.SecAggAborted` in process, a ``RemoteError`` over HTTP).
    """
    if plan.servers != 1:
        raise InvalidParameters("play runs the exchanges of a one-server plan")
    silent = dict(silent_from or {})
    if any(s not in plan.stages for s in silent.values()):
        raise InvalidParameters(f"a device goes silent at a stage of {plan.stages}")
    rec = ExchangeRecord(up={u: {} for u in parties}, down={u: {} for u in parties})
    active = sorted(parties)
    for k, stage in enumerate(plan.stages):
        active = [u for u in active if u not in silent or plan.stages.index(silent[u]) > k]
        bodies = [(u, parties[u].message(stage)) for u in active]

        def send(item: tuple[int, bytes], stage: str = stage) -> None:
            u, body = item
            links[u].send(round_id, stage, body)
            rec.up[u][stage] = len(body)

        map(send, bodies)
        admin.close_stage(round_id, stage)
        if not plan.replies(stage):
            continue

        def fetch(u: int, stage: str = stage) -> bytes | None:
            return links[u].fetch(round_id, stage)

        kept = []
        for u, out in zip(active, map(fetch, active), strict=True):
            if out is None:
                continue
            rec.down[u][stage] = len(out)
            parties[u].accept(stage, out)
            kept.append(u)
        active = kept
    rec.finished = active
    return rec


class LocalExchange:
    """A one-server node in process behind a counting transport (``SERVER0`` its endpoint):
    :meth:`link` for a device, :attr:`admin` for the operator."""

    def __init__(self, node: ExchangeNode, transport: InProcessTransport | None = None) -> None:
        self.node = node
        self.tp = InProcessTransport() if transport is None else transport
        self.admin = _LocalAdmin(self)

    def link(self, user: int) -> _LocalLink:
        """Device ``user``'s link."""
        return _LocalLink(self, int(user))

    def carry(self, src: str, dst: str, body: bytes, stage: str) -> bytes:
        """Move ``body`` over the transport (counted); what ``dst`` receives."""
        return self.tp.carry(src, dst, body, stage=stage)


class _LocalLink:
    def __init__(self, host: LocalExchange, user: int) -> None:
        self.host, self.user, self._me = host, user, user_endpoint(user)

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        got = self.host.carry(self._me, SERVER0, body, stage)
        self.host.node.receive(round_id, stage, self.user, got)

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        out = self.host.node.reply(round_id, stage, self.user)
        return None if out is None else self.host.carry(SERVER0, self._me, out, stage)


class _LocalAdmin:
    def __init__(self, host: LocalExchange) -> None:
        self.host = host

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        self.host.tp.set_round(round_id)
        return self.host.node.open_round(round_id, users)

    def close_stage(self, round_id: int, stage: str) -> None:
        self.host.node.close(round_id, stage)

    def outcome(self, round_id: int) -> dict[str, Any]:
        return self.host.node.outcome(round_id)
