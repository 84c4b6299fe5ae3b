"""SecFedRec -- the paper's "secure FedRec" baseline: full model download, and the full
gradient uploaded as two-server additive shares (Xiong et al., 2020; SecEmb Table 1).

Per round and user (``m`` items, row width ``w``, dense size ``P``, ring ``Z_2^k``):

* ``retrieval_request``: the user asks for the public table; the indices it needs stay on the
  device.  Both requests are header-only frames (server 1 is contacted only so that every
  protocol has the same two-server message pattern; its reply is empty).
* ``retrieval_reply``: server 0 sends the whole encoded table, ring ``(m, w)``; the user picks
  its rows locally.
* ``upload``: the user scatters its row gradients into the full ``(m, w)`` gradient (zeros
  elsewhere), appends the dense gradient and sends one additive share to each server:
  ``(m w + P) k / 8`` bytes each.
* ``aggregate_share`` / ``combine``: server 1 sends its ring sums and the sorted ids of the users
  it holds; server 0 checks both sets agree and adds.

What a server learns: nothing about an individual gradient (each share is uniform), nor which
items a user rated (it downloads everything, uploads a dense matrix).  Cost: ``O(m w)`` both
ways, which is what SecEmb avoids.  Exact: the aggregate equals the plaintext ring sum.

Every baseline message has the common 24-byte header of :mod:`secemb.protocols.wire`, with
the wire id each baseline is registered under (:mod:`secemb.protocols`).

The full-download pattern lives in :class:`FullModelUser` / :class:`FullModelServer`, which
the lossy baselines (:mod:`secemb.protocols.lossy`) and GREC (:mod:`secemb.protocols.grec`)
extend by overriding how the upload is encoded and aggregated; the sizes of their messages
are methods of the protocol object (:class:`FullModelProtocol`), which both roles hold.
"""

from __future__ import annotations

import struct

import numpy as np

from secemb.errors import InvalidParameters, ProtocolError
from secemb.protocols.base import Capabilities, Protocol, RoundConfig, ServerRole, UserRole
from secemb.protocols.spill import SpilledShares
from secemb.protocols.wire import (
    array_bytes,
    check_ring,
    check_user,
    frame,
    open_message,
    read_array,
    read_rows,
    users_bytes,
)
from secemb.randomness import RandomBytes, system_rng
from secemb.sharing import reconstruct, share

__all__ = [
    "FullModelProtocol",
    "FullModelServer",
    "FullModelUser",
    "SecFedRecProtocol",
]

_U64 = struct.Struct("<Q")



class FullModelUser(UserRole):
    """A user that downloads the whole table from server 0.  Subclasses implement
    :meth:`encode_upload` (ring rows at the request slots -> one message body per server)."""

    def __init__(self, config: RoundConfig, *, proto: FullModelProtocol, _rng: RandomBytes | None = None) -> None:
        self.config = config
        self.proto = proto
        self.protocol = proto.name
        self._rng = _rng or system_rng
        self._indices: np.ndarray | None = None
        self._stage = 0

    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        if self._stage != 0:
            raise ProtocolError("retrieval_request called twice in one round")
        idx = np.asarray(indices)
        if idx.shape != (cfg.slots,) or not np.issubdtype(idx.dtype, np.integer):
            raise InvalidParameters(f"indices must be integers of shape ({cfg.slots},), got {idx.dtype} {idx.shape}")
        idx = idx.astype(np.int64)
        lowest = -1 if cfg.layout == "cuckoo" else 0
        if idx.size and (int(idx.min()) < lowest or int(idx.max()) >= cfg.num_items):
            raise InvalidParameters(f"indices must lie in [0, {cfg.num_items})")
        self._indices = idx
        self._stage = 1
        return self.request_messages(idx)

    def _requested(self) -> np.ndarray:
        """This round's request slots (int64, as :meth:`retrieval_request` took them)."""
        if self._indices is None:
            raise ProtocolError("no retrieval request in this round")
        return self._indices

    def request_messages(self, idx: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        return (frame(self.protocol, "retrieval_request", 0, cfg.round_id),
                frame(self.protocol, "retrieval_request", 1, cfg.round_id))

    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        cfg = self.config
        if self._stage != 1:
            raise ProtocolError("retrieval_result before retrieval_request, or twice")
        body = open_message(reply0, self.protocol, "retrieval_reply", 0, cfg.round_id, self.proto.reply_body_bytes(cfg))
        if reply1 is None:
            raise ProtocolError("missing server 1's retrieval reply")
        open_message(reply1, self.protocol, "retrieval_reply", 1, cfg.round_id, 0)
        self.read_extra(body)
        idx = self._requested()
        rows = read_rows(body, 0, cfg.dtype, (cfg.num_items, cfg.width), np.maximum(idx, 0))
        rows[idx < 0] = 0
        self._stage = 2
        return rows

    def read_extra(self, body: memoryview) -> None:
        """Hook: public round data server 0 appends after the table."""

    def full_gradient(self, rows: np.ndarray) -> np.ndarray:
        """Ring (m, w): the row gradients scattered to their items, zero elsewhere."""
        cfg = self.config
        full = np.zeros((cfg.num_items, cfg.width), cfg.dtype)
        idx = self._requested()
        real = idx >= 0
        full[idx[real]] = rows[real]
        return full

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        if self._stage != 2:
            raise ProtocolError("upload before the retrieval finished, or twice")
        check_ring("rows", rows, (cfg.slots, cfg.width), cfg)
        check_ring("dense", dense, (cfg.dense_size,), cfg)
        if np.any(rows[self._requested() < 0]):
            raise InvalidParameters("rows of empty slots must be zero")
        b0, b1 = self.encode_upload(rows, dense)
        self._stage = 3
        return (frame(self.protocol, "upload", 0, cfg.round_id, b0),
                frame(self.protocol, "upload", 1, cfg.round_id, b1))

    def encode_upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        """SecFedRec: additive shares of ``[full gradient (m w), dense (P)]``."""
        vec = np.concatenate([self.full_gradient(rows).reshape(-1), dense])
        s0, s1 = share(vec, _rng=self._rng)
        return array_bytes(s0), array_bytes(s1)


def _accumulate(acc: np.ndarray, part: np.ndarray, retract: bool) -> None:
    """``acc += part`` (``retract``: ``acc -= part``) in place, wrapping in acc's ring."""
    (np.subtract if retract else np.add)(acc, part, out=acc)


class FullModelServer(ServerRole):
    """Server ``party`` of a full-download protocol.  Subclasses implement :meth:`absorb`
    (parse one upload body into the running state), :meth:`share_body` and
    :meth:`reconstruct`; the body sizes are the protocol's (:class:`FullModelProtocol`)."""

    def __init__(self, party: int, *, proto: FullModelProtocol) -> None:
        super().__init__(party)
        self.proto = proto
        self.protocol = proto.name
        #: the round's upload bodies, on disk until it closes (to retract a user left out)
        self._spilled = SpilledShares()

    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        if not isinstance(config, RoundConfig):
            raise InvalidParameters(f"config must be a RoundConfig, got {type(config).__name__}")
        check_ring("table", table, (config.num_items, config.width), config)
        self._start_round(config)
        self._requested: set[int] = set()
        self._uploaded: set[int] = set()
        self._spilled.clear()  # the last round's bodies
        self.reset_state(config)
        # every user of the round gets the same reply: framed once (the table is 48 MB at Yelp's shape)
        body = (array_bytes(table), self.extra_reply()) if self.party == 0 else ()
        self._reply = frame(self.protocol, "retrieval_reply", self.party, config.round_id, *body)

    def reset_state(self, config: RoundConfig) -> None:
        self._acc = np.zeros(config.num_items * config.width + config.dense_size, config.dtype)

    def extra_reply(self) -> bytes:
        """Hook: public round data appended to the table in server 0's reply (read once, when
        the round begins: it must not change before the round's aggregate)."""
        return b""

    def handle_retrieval(self, user_id: int, message: bytes) -> bytes:
        cfg = self._cfg()
        user_id = check_user(user_id)
        if user_id in self._requested:
            raise ProtocolError(f"server {self.party}: user {user_id} already retrieved in round {cfg.round_id}")
        open_message(message, self.protocol, "retrieval_request", self.party, cfg.round_id, 0)
        self._requested.add(user_id)
        return self._reply

    def absorb(self, user_id: int, body: memoryview, *, retract: bool = False) -> None:
        """Add upload ``body`` to the running state (``retract``: take it out again, for a
        user left out of the agreed set; only bodies absorbed before are retracted)."""
        cfg = self._cfg()
        _accumulate(self._acc, read_array(body, 0, cfg.dtype, (self._acc.size,))[0], retract)

    def handle_upload(self, user_id: int, message: bytes) -> None:
        cfg = self._cfg()
        user_id = check_user(user_id)
        if user_id not in self._requested:
            raise ProtocolError(f"server {self.party}: upload from user {user_id} before its retrieval")
        if user_id in self._uploaded:
            raise ProtocolError(f"server {self.party}: user {user_id} already uploaded in round {cfg.round_id}")
        body = open_message(message, self.protocol, "upload", self.party, cfg.round_id,
                            self.proto.upload_body_bytes(cfg, self.party))
        # kept on disk, not in memory (a full-model body is model-sized): written first, as it may
        # fail; a body absorb then refuses is replaced by the user's next upload
        self._spilled.put(user_id, np.frombuffer(body, np.uint8))
        self.absorb(user_id, body)
        self._uploaded.add(user_id)
        return None

    def _keep_only(self, include: list[int] | None) -> list[int]:
        """Retract the uploads of every user outside ``include`` (for good: the round's
        aggregate no longer holds them); the sorted included users."""
        users = self._include(include, self._uploaded, self._cfg().round_id)
        for u in sorted(self._uploaded - set(users)):
            self.absorb(u, self._spilled.get(u).data, retract=True)
            self._uploaded.discard(u)
        return users

    def share_body(self) -> bytes:
        return array_bytes(self._acc)

    def aggregate_share(self, include: list[int] | None = None) -> bytes:
        """The share over ``include``; users outside it are retracted (:meth:`_keep_only`)."""
        cfg = self._cfg()
        users = self._keep_only(include)
        return frame(self.protocol, "aggregate_share", self.party, cfg.round_id, users_bytes(users), self.share_body())

    def combine(self, peer_share: bytes, include: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        cfg = self._cfg()
        users = self._keep_only(include)
        head = 8 + 8 * len(users)
        size = head + self.proto.share_body_bytes(cfg, len(users))
        body = open_message(peer_share, self.protocol, "aggregate_share", 1 - self.party, cfg.round_id, size)
        if _U64.unpack_from(body, 0)[0] != len(users) or [
            _U64.unpack_from(body, 8 + 8 * i)[0] for i in range(len(users))
        ] != users:
            raise ProtocolError("the two servers aggregated different sets of users")
        return self.reconstruct(body[head:])

    def reconstruct(self, peer: memoryview) -> tuple[np.ndarray, np.ndarray]:
        """Ring ``(sparse sum (m, w), dense sum (P,))`` from the peer's share body."""
        cfg = self._cfg()
        total = reconstruct(self._acc, read_array(peer, 0, cfg.dtype, (self._acc.size,))[0])
        split = cfg.num_items * cfg.width
        return total[:split].reshape(cfg.num_items, cfg.width), total[split:]


class FullModelProtocol(Protocol):
    """Factory base of the full-download family, and the sizes of its messages.  Both
    layouts run (the user indexes the downloaded table with whatever slots it is given);
    nothing is relayed.  Subclasses override :meth:`upload_body_bytes` and
    :meth:`share_body_bytes` (and :meth:`reply_body_bytes` if server 0 appends data) when
    they change the upload."""

    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=True, central_dp=True)
    user_cls: type[FullModelUser] = FullModelUser
    server_cls: type[FullModelServer] = FullModelServer

    def reply_body_bytes(self, rc: RoundConfig) -> int:
        """Server 0's retrieval reply: the encoded table, ring ``(m, w)``."""
        return rc.num_items * rc.width * rc.dtype.itemsize

    def upload_body_bytes(self, rc: RoundConfig, party: int) -> int:
        """The upload body server ``party`` receives; SecFedRec: a share of the full gradient
        and of the dense gradient, the same size for both servers."""
        return (rc.num_items * rc.width + rc.dense_size) * rc.dtype.itemsize

    def share_body_bytes(self, rc: RoundConfig, num_users: int) -> int:
        """The aggregate share after its user list (``num_users`` users)."""
        return (rc.num_items * rc.width + rc.dense_size) * rc.dtype.itemsize

    def message_body_bytes(self, kind: str, rc: RoundConfig, *, party: int, num_users: int) -> int | None:
        """Exact: header-only requests, the upload, the share with ``num_users`` users."""
        if kind == "retrieval_request":
            return 0
        if kind == "upload":
            return self.upload_body_bytes(rc, party)
        if kind == "aggregate_share":
            return 8 + 8 * num_users + self.share_body_bytes(rc, num_users)
        return None  # no relay

    def make_server(self, party: int, *, peer_key: bytes | None = None) -> FullModelServer:
        """Server ``party``; its servers share no key (``peer_key`` is ignored)."""
        return self.server_cls(party, proto=self)

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> FullModelUser:
        if not isinstance(config, RoundConfig):
            raise InvalidParameters(f"config must be a RoundConfig, got {type(config).__name__}")
        return self.user_cls(config, proto=self, _rng=_rng)


class SecFedRecProtocol(FullModelProtocol):
    """Factory of SecFedRec roles (full download, additive shares of the full gradient)."""

    name = "secfedrec"



