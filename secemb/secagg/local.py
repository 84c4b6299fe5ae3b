"""One secure-aggregation round run in process, message by message, with dropouts.

:func:`run_round` plays the clients and the server of :mod:`secemb.secagg` over a list of
delivered messages (nothing but bytes passes between the objects): it is the reference driver
for tests and benchmarks, and the pattern a transport follows.  Byte counts are ``len()`` of the
messages; times are wall-clock seconds of each party's own work (``time.perf_counter``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from secemb.errors import InvalidParameters
from secemb.randomness import RandomBytes
from secemb.secagg.client import SecAggClient
from secemb.secagg.config import SecAggConfig
from secemb.secagg.identity import Identity, Roster
from secemb.secagg.server import SecAggServer

__all__ = ["STAGES", "Transcript", "run_round"]

#: The stages (ConsistencyCheck in a signed round only); ``drop_after[id] = k`` means the
#: client sends the messages of the first ``k`` stages and then goes silent (0: never
#: advertises, 3: drops before the consistency check or, unsigned, before unmasking; 4: a signed
#: round's client drops after signing the survivors, before unmasking).
STAGES = ("AdvertiseKeys", "ShareKeys", "MaskedInputCollection", "ConsistencyCheck", "Unmasking")


@dataclass
class Transcript:
    """What one round produced.

    Attributes
    ----------
    total: the server's output, ``uint32`` ``(length, width)``: the sum over ``survivors``.
    survivors: U3, the clients whose inputs are in ``total``.
    upload_bytes / download_bytes: per client, ``len()`` of every message it sent / received.
    server_seconds: per stage, the server's time to receive that stage's messages and close it.
    client_seconds: per client, its time over all stages.
    messages: every delivered message as ``(stage, sender, recipient, bytes)``, the server's
        id being ``-1`` (only with ``record=True``).
    """

    total: np.ndarray
    survivors: list[int]
    upload_bytes: dict[int, int] = field(default_factory=dict)
    download_bytes: dict[int, int] = field(default_factory=dict)
    server_seconds: dict[str, float] = field(default_factory=dict)
    client_seconds: dict[int, float] = field(default_factory=dict)
    messages: list[tuple[str, int, int, bytes]] = field(default_factory=list)


def run_round(
    config: SecAggConfig,
    inputs: Mapping[int, np.ndarray],
    *,
    rows: Mapping[int, np.ndarray] | None = None,
    drop_after: Mapping[int, int] | None = None,
    record: bool = False,
    identities: Mapping[int, Identity] | None = None,
    _rng: RandomBytes | None = None,
) -> Transcript:
    """Run one round for the clients ``inputs`` (id -> ``uint32`` input of shape
    ``(len(rows[id]), width)``, or ``(length, width)`` in a dense round).

    ``rows`` (id -> increasing rows) is required iff ``config.sparse``; ``drop_after`` gives the
    clients that drop out and after how many stages (see :data:`STAGES`).  In a signed round
    the clients use ``identities`` (id -> certified identity, one roster); without them the run
    makes its own roster and enrolls every client.

    Raises
    ------
    SecAggAborted: fewer than ``config.threshold`` clients at some stage.
    """
    drops = dict(drop_after or {})
    if config.sparse != (rows is not None):
        raise InvalidParameters("rows must be given exactly when the round is sparse")
    if any(not 0 <= k <= 4 for k in drops.values()) or not set(drops) <= set(inputs):
        raise InvalidParameters("drop_after maps client ids of the round to 0..4")
    if config.signed and identities is None:
        roster = Roster.generate()
        identities = {cid: roster.enroll(cid) for cid in inputs}
    ids = identities if config.signed else None
    tr = Transcript(total=np.zeros(0, np.uint32), survivors=[])
    clients = {}
    for cid in sorted(inputs):
        t0 = time.perf_counter()
        clients[cid] = SecAggClient(cid, config, identity=None if ids is None else ids[cid], _rng=_rng)
        tr.client_seconds[cid] = time.perf_counter() - t0
        tr.upload_bytes[cid] = tr.download_bytes[cid] = 0
    server = SecAggServer(config)

    def live(stage: int) -> list[int]:
        return [c for c in clients if drops.get(c, 5) > stage]

    def up(stage: int, cid: int, msg: bytes, receive: object) -> None:
        tr.upload_bytes[cid] += len(msg)
        if record:
            tr.messages.append((STAGES[stage], cid, -1, msg))
        t0 = time.perf_counter()
        receive(cid, msg)  # type: ignore[operator]
        tr.server_seconds[STAGES[stage]] = tr.server_seconds.get(STAGES[stage], 0.0) + time.perf_counter() - t0

    def close(stage: int, build: object) -> dict[int, bytes]:
        t0 = time.perf_counter()
        out: dict[int, bytes] = build()  # type: ignore[operator]
        tr.server_seconds[STAGES[stage]] = tr.server_seconds.get(STAGES[stage], 0.0) + time.perf_counter() - t0
        for cid, msg in out.items():
            tr.download_bytes[cid] += len(msg)
            if record:
                tr.messages.append((STAGES[stage], -1, cid, msg))
        return out

    def act(cid: int, fn: object, *args: object) -> bytes:
        t0 = time.perf_counter()
        msg: bytes = fn(*args)  # type: ignore[operator]
        tr.client_seconds[cid] += time.perf_counter() - t0
        return msg

    for cid in live(0):
        up(0, cid, act(cid, clients[cid].advertise, None if rows is None else rows[cid]), server.receive_advertise)
    keys = close(0, server.keys_messages)
    for cid in live(1):
        if cid in keys:
            up(1, cid, act(cid, clients[cid].share_keys, keys[cid]), server.receive_shares)
    relayed = close(1, server.relayed_messages)
    for cid in live(2):
        if cid in relayed:
            up(2, cid, act(cid, clients[cid].masked_input, relayed[cid], inputs[cid]), server.receive_masked)
    unmasking = close(2, server.survivors_messages)
    if config.signed:
        for cid in live(3):
            if cid in unmasking:
                up(3, cid, act(cid, clients[cid].consistency, unmasking[cid]), server.receive_consistency)
        unmasking = close(3, server.signatures_messages)
    for cid in live(3 if not config.signed else 4):
        if cid in unmasking:
            up(4, cid, act(cid, clients[cid].unmask, unmasking[cid]), server.receive_unmask)
    t0 = time.perf_counter()
    tr.total = server.result()
    tr.server_seconds[STAGES[4]] = tr.server_seconds.get(STAGES[4], 0.0) + time.perf_counter() - t0
    tr.survivors = server.survivors
    return tr
