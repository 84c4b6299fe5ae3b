"""A minimal secure protocol as a secemb plug-in: one module plus its registration.

``fulldownload`` is the simplest protocol that hides what a user rated from both servers:

* retrieval: the user sends server 0 an empty request and gets the whole encoded table back
  (it keeps the rows it needs; server 0 learns nothing but that the user takes part);
  server 1 is not contacted -- the protocol declares that in its round plan;
* upload: the user scatters its row gradients into a full ``(m, width)`` gradient, splits
  it and its dense gradient into two additive shares (fresh OS randomness) and sends one
  share to each server, so neither server alone learns anything about the gradient;
* aggregate: each server sums the shares of the agreed users; server 0 adds server 1's sum.

Its cost is the full table both ways (what SecEmb avoids), which makes it a useful baseline
and a short example.  Install this directory (``pip install -e examples/protocol_plugin``)
and ``secemb train --protocol fulldownload`` and the server processes of
``secemb demo --network`` find it through the ``secemb.protocols`` entry point; see
``docs/protocol.md``, "Adding a protocol".
"""

from __future__ import annotations

import numpy as np

from secemb.errors import ProtocolError
from secemb.protocols import Capabilities, Protocol, RoundConfig, ServerRole, UserRole, register_protocol
from secemb.protocols.stages import CLOSING, COUNT, DENSE, RETRIEVAL, UPLOAD, Hop, RoundPlan
from secemb.protocols.wire import array_bytes, check_ring, frame, open_message, read_array
from secemb.randomness import RandomBytes
from secemb.sharing import share

NAME = "fulldownload"
WIRE_ID = 200  # any id in [1, 255] no other protocol has (the built-in ones use 1-23)


def _sum_bytes(rc: RoundConfig) -> int:
    """Body of an upload share or an aggregate share: ring[m * width], ring[P]."""
    return (rc.num_items * rc.width + rc.dense_size) * rc.dtype.itemsize


class FullDownloadUser(UserRole):
    def __init__(self, rc: RoundConfig, rng: RandomBytes | None) -> None:
        self.rc, self.rng, self.indices = rc, rng, np.zeros(0, np.int64)

    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes | None]:
        self.indices = np.asarray(indices, dtype=np.int64)
        return frame(NAME, "retrieval_request", 0, self.rc.round_id), None

    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        rc = self.rc
        size = rc.num_items * rc.width * rc.dtype.itemsize
        body = open_message(reply0, NAME, "retrieval_reply", 0, rc.round_id, size)
        table, _ = read_array(body, 0, rc.dtype, (rc.num_items, rc.width))
        rows = table[np.maximum(self.indices, 0)]
        rows[self.indices < 0] = 0  # empty cuckoo slots
        return rows

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        rc = self.rc
        check_ring("rows", rows, (rc.slots, rc.width), rc)
        check_ring("dense", dense, (rc.dense_size,), rc)
        full = np.zeros((rc.num_items, rc.width), rc.dtype)
        real = self.indices >= 0
        full[self.indices[real]] = rows[real]  # distinct items: one row per item
        s0, s1 = share(np.concatenate([full.reshape(-1), dense]), _rng=self.rng)
        return (frame(NAME, "upload", 0, rc.round_id, array_bytes(s0)),
                frame(NAME, "upload", 1, rc.round_id, array_bytes(s1)))


class FullDownloadServer(ServerRole):
    """The base checks the party, keeps the round (``_start_round``/``_cfg``: round ids must
    increase) and the user-set agreement (``_include``)."""

    def __init__(self, party: int) -> None:
        super().__init__(party)
        self.table = np.zeros((0, 0), np.uint32)
        self.shares: dict[int, np.ndarray] = {}

    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        check_ring("table", table, (config.num_items, config.width), config)
        self._start_round(config)
        self.table, self.shares = table, {}

    def handle_retrieval(self, user_id: int, message: bytes) -> bytes:
        rc = self._cfg()
        if self.party != 0:
            raise ProtocolError("fulldownload retrieves from server 0 only")
        open_message(message, NAME, "retrieval_request", 0, rc.round_id, 0)
        return frame(NAME, "retrieval_reply", 0, rc.round_id, array_bytes(self.table))

    def handle_upload(self, user_id: int, message: bytes) -> None:
        rc = self._cfg()
        if user_id in self.shares:
            raise ProtocolError(f"user {user_id} already uploaded in round {rc.round_id}")
        body = open_message(message, NAME, "upload", self.party, rc.round_id, _sum_bytes(rc))
        self.shares[user_id] = read_array(body, 0, rc.dtype, (rc.num_items * rc.width + rc.dense_size,))[0]

    def _sum(self, include: list[int] | None) -> np.ndarray:
        rc = self._cfg()
        total = np.zeros(rc.num_items * rc.width + rc.dense_size, rc.dtype)
        for user in self._include(include, self.shares, rc.round_id):
            total += self.shares[user]  # wraps mod 2^k
        return total

    def aggregate_share(self, include: list[int] | None = None) -> bytes:
        rc = self._cfg()
        return frame(NAME, "aggregate_share", self.party, rc.round_id, array_bytes(self._sum(include)))

    def combine(self, peer_share: bytes, include: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        rc = self._cfg()  # either server combines (both reconstruct the update): the peer is party 1 - self.party
        body = open_message(peer_share, NAME, "aggregate_share", 1 - self.party, rc.round_id, _sum_bytes(rc))
        total = self._sum(include) + read_array(body, 0, rc.dtype, (rc.num_items * rc.width + rc.dense_size,))[0]
        cut = rc.num_items * rc.width
        return total[:cut].reshape(rc.num_items, rc.width), total[cut:]


class FullDownloadProtocol(Protocol):
    """Whole-table download from server 0, additively shared full-size uploads."""

    name = NAME
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=True)

    def plan(self) -> RoundPlan:
        """The two-server round without server 1 in the retrieval stage."""
        return RoundPlan((
            Hop(COUNT, "user", "server1", "count_share"), Hop(COUNT, "user", "server0", "count_share"),
            Hop(COUNT, "server1", "server0", "count_share"),
            Hop(RETRIEVAL, "user", "server0", "retrieval_request"),
            Hop(RETRIEVAL, "server0", "user", "retrieval_reply"),
            Hop(DENSE, "server0", "user", "dense"),
            Hop(UPLOAD, "user", "server1", "upload"), Hop(UPLOAD, "user", "server0", "upload"),
            *CLOSING,
        ))

    def message_body_bytes(self, kind: str, rc: RoundConfig, *, party: int, num_users: int) -> int | None:
        if kind == "retrieval_request":
            return 0 if party == 0 else None
        if kind in ("upload", "aggregate_share"):
            return _sum_bytes(rc)
        return None

    def make_server(self, party: int, *, peer_key: bytes | None = None) -> FullDownloadServer:
        """Server ``party``; its servers share no key (``peer_key`` is ignored)."""
        return FullDownloadServer(party)

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> FullDownloadUser:
        return FullDownloadUser(config, _rng)


register_protocol(NAME, FullDownloadProtocol, wire_id=WIRE_ID)
