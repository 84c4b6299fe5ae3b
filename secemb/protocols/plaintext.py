"""The plaintext baseline: SecEmb's pipeline with the cryptography replaced by direct sums.

It runs the same stages, through the same transport, with the same fixed-point ring values as
the secure protocol, so that with one seed both produce bit-identical models; only the privacy
differs.  Here server 0 sees everything:

* retrieval: the user sends its m' indices in the clear to server 0, which replies with the
  rows; server 1 receives an empty request and sends an empty reply;
* upload: the user sends its m' encoded row gradients and its dense gradient in the clear to
  server 0 (which remembers the user's indices from retrieval); server 1 gets an empty upload;
* aggregate: server 1's share is all zeros; server 0 adds it to its own sums.

Wire format: the common frame of :mod:`secemb.protocols.wire` (24-byte header: magic, version,
protocol id, kind, party, round id, exact body length); bodies, with shapes fixed by the round's
:class:`RoundConfig` and never read from the message::

    retrieval_request  to server 0:  indices uint32[S]             to server 1: empty
    retrieval_reply    from server 0: ring[S * width]              from server 1: empty
    upload             to server 0:  ring[S * width], ring[P]      to server 1: empty

(S = slots: m' in the full layout, B in the cuckoo layout; index 0xFFFFFFFF = empty slot.)
    aggregate_share    from server 1: ring[m * width], ring[P] (all zero)

Every parser checks the header and the exact length and raises
:class:`~secemb.errors.InvalidMessage`; a rejected message changes no state.  Stage order
violations (an upload before the retrieval, twice the same user, combine on server 1) raise
:class:`~secemb.errors.ProtocolError`.
"""

from __future__ import annotations

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols.base import Capabilities, Protocol, RoundConfig, ServerRole, UserRole
from secemb.protocols.spill import SpilledShares
from secemb.protocols.wire import array_bytes, check_ring, frame, open_message, read_array
from secemb.randomness import RandomBytes

__all__ = ["PlaintextProtocol", "PlaintextServer", "PlaintextUser"]

_NAME = "plaintext"
_U32 = np.dtype(np.uint32)
_EMPTY = np.uint32(0xFFFFFFFF)  # an empty cuckoo slot on the wire


def _request_bytes(cfg: RoundConfig, party: int) -> int:
    """Body of a retrieval request to ``party``: the indices for server 0, nothing for 1."""
    return 4 * cfg.slots if party == 0 else 0


def _upload_bytes(cfg: RoundConfig, party: int) -> int:
    """Body of an upload to ``party``: rows and dense gradient for server 0, nothing for 1."""
    return (cfg.slots * cfg.width + cfg.dense_size) * cfg.dtype.itemsize if party == 0 else 0


def _share_bytes(cfg: RoundConfig) -> int:
    return (cfg.num_items * cfg.width + cfg.dense_size) * cfg.dtype.itemsize


class PlaintextUser(UserRole):
    """One user's side for one round: sends indices and gradients in the clear to server 0."""

    def __init__(self, config: RoundConfig) -> None:
        self.config = config
        self._stage = 0  # 0 new, 1 requested, 2 rows received, 3 uploaded

    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        if self._stage != 0:
            raise ProtocolError("retrieval_request called twice in one round")
        idx = np.asarray(indices)
        if idx.shape != (cfg.slots,) or not np.issubdtype(idx.dtype, np.integer):
            raise InvalidParameters(
                f"indices must be integers of shape ({cfg.slots},), got {idx.dtype} {idx.shape}"
            )
        lowest = -1 if cfg.layout == "cuckoo" else 0
        if idx.size and (int(idx.min()) < lowest or int(idx.max()) >= cfg.num_items):
            raise InvalidParameters(f"indices must lie in [0, {cfg.num_items})" + (" or be -1" if lowest else ""))
        self._stage = 1
        wire_idx = np.where(idx < 0, _EMPTY, idx).astype(_U32)
        return (
            frame(_NAME, "retrieval_request", 0, cfg.round_id, array_bytes(wire_idx)),
            frame(_NAME, "retrieval_request", 1, cfg.round_id),
        )

    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        cfg = self.config
        if self._stage != 1:
            raise ProtocolError("retrieval_result before retrieval_request, or twice")
        if reply1 is None:
            raise ProtocolError("missing server 1's retrieval reply")
        shape = (cfg.slots, cfg.width)
        body = open_message(
            reply0,
            _NAME,
            "retrieval_reply",
            0,
            cfg.round_id,
            shape[0] * shape[1] * cfg.dtype.itemsize,
        )
        open_message(reply1, _NAME, "retrieval_reply", 1, cfg.round_id, 0)
        rows, _ = read_array(body, 0, cfg.dtype, shape)
        self._stage = 2
        return rows

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        if self._stage != 2:
            raise ProtocolError("upload before the retrieval finished, or twice")
        check_ring("rows", rows, (cfg.slots, cfg.width), cfg)
        check_ring("dense", dense, (cfg.dense_size,), cfg)
        self._stage = 3
        return (
            frame(_NAME, "upload", 0, cfg.round_id, array_bytes(rows), array_bytes(dense)),
            frame(_NAME, "upload", 1, cfg.round_id),
        )


class PlaintextServer(ServerRole):
    """Server ``party``.  Server 0 answers in the clear and sums the uploads as they arrive
    (a user's dense gradient is kept on disk only, to take it out again if the user is left
    out: docs/training.md, "Server memory"); server 1 only acknowledges and contributes an
    all-zero share."""

    def __init__(self, party: int) -> None:
        super().__init__(party)
        self._table = np.zeros((0, 0), np.uint32)
        self._requested: dict[int, np.ndarray] = {}
        self._uploaded: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # server 0: idx, rows (dense: spilled)
        self._spilled = SpilledShares()
        self._sparse = np.zeros((0, 0), np.uint32)  # server 0: the running sums over every upload
        self._dense = np.zeros(0, np.uint32)


    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        if not isinstance(config, RoundConfig):
            raise InvalidParameters(f"config must be a RoundConfig, got {type(config).__name__}")
        check_ring("table", table, (config.num_items, config.width), config)
        self._start_round(config)
        self._table = table.copy() if self.party == 0 else np.zeros((0, config.width), config.dtype)
        self._requested = {}
        self._uploaded = {}
        self._spilled.clear()
        self._sparse = np.zeros((config.num_items, config.width) if self.party == 0 else (0, 0), config.dtype)
        self._dense = np.zeros(config.dense_size if self.party == 0 else 0, config.dtype)

    def handle_retrieval(self, user_id: int, message: bytes) -> bytes:
        cfg = self._cfg()
        if user_id in self._requested:
            raise ProtocolError(
                f"server {self.party}: user {user_id} already retrieved in round {cfg.round_id}"
            )
        body = open_message(message, _NAME, "retrieval_request", self.party, cfg.round_id,
                            _request_bytes(cfg, self.party))
        if self.party == 1:
            self._requested[user_id] = np.zeros(0, np.int64)
            return frame(_NAME, "retrieval_reply", 1, cfg.round_id)
        raw = read_array(body, 0, _U32, (cfg.slots,))[0]
        idx = np.where(raw == _EMPTY, -1, raw.astype(np.int64))
        if cfg.layout == "full" and np.any(idx < 0) or idx.size and int(idx.max()) >= cfg.num_items:
            bad = int(raw[(idx < 0) | (idx >= cfg.num_items)][0])
            raise InvalidMessage(f"retrieval_request: index {bad} outside [0, {cfg.num_items})")
        self._requested[user_id] = idx
        rows = self._table[np.maximum(idx, 0)]
        rows[idx < 0] = 0
        return frame(_NAME, "retrieval_reply", 0, cfg.round_id, array_bytes(rows))

    def handle_upload(self, user_id: int, message: bytes) -> None:
        cfg = self._cfg()
        if user_id not in self._requested:
            raise ProtocolError(
                f"server {self.party}: upload from user {user_id} before its retrieval"
            )
        if user_id in self._uploaded:
            raise ProtocolError(
                f"server {self.party}: user {user_id} already uploaded in round {cfg.round_id}"
            )
        body = open_message(message, _NAME, "upload", self.party, cfg.round_id, _upload_bytes(cfg, self.party))
        idx = self._requested[user_id]
        grads = np.zeros((0, cfg.width), cfg.dtype)
        if self.party == 0:
            grads, off = read_array(body, 0, cfg.dtype, (cfg.slots, cfg.width))
            dense, _ = read_array(body, off, cfg.dtype, (cfg.dense_size,))
            self._spilled.put(user_id, dense)  # first: it may fail (OSError), and nothing has changed yet
            # all checks passed: the user's contribution enters the running sums now
            np.add.at(self._sparse, idx[idx >= 0], grads[idx >= 0])
            self._dense += dense
        self._uploaded[user_id] = (idx, grads)

    def _sums(self, include: list[int] | None) -> tuple[np.ndarray, np.ndarray]:
        """Ring sums of the uploads of ``include`` (``None``: all), new arrays: the running sums
        less the users left out (their dense gradients read back from disk, one at a time); all
        zero at server 1 (in the clear everything went to server 0).  uint arithmetic wraps
        mod 2^k, so the order of the terms does not matter.

        Raises
        ------
        ProtocolError: ``include`` names a user that did not upload.
        OSError: a left-out user's dense gradient could not be read back.
        """
        cfg = self._cfg()
        users = set(self._include(include, self._uploaded, cfg.round_id))
        if self.party != 0:
            return np.zeros((cfg.num_items, cfg.width), cfg.dtype), np.zeros(cfg.dense_size, cfg.dtype)
        sparse, dense = self._sparse.copy(), self._dense.copy()
        for u in self._uploaded.keys() - users:
            idx, grads = self._uploaded[u]
            np.subtract.at(sparse, idx[idx >= 0], grads[idx >= 0])
            dense -= self._spilled.get(u)
        return sparse, dense

    def aggregate_share(self, include: list[int] | None = None) -> bytes:
        cfg = self._cfg()
        sparse, dense = self._sums(include)
        return frame(
            _NAME,
            "aggregate_share",
            self.party,
            cfg.round_id,
            array_bytes(sparse),
            array_bytes(dense),
        )

    def combine(self, peer_share: bytes, include: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        cfg = self._cfg()
        body = open_message(peer_share, _NAME, "aggregate_share", 1 - self.party, cfg.round_id, _share_bytes(cfg))
        sparse1, off = read_array(body, 0, cfg.dtype, (cfg.num_items, cfg.width))
        dense1, _ = read_array(body, off, cfg.dtype, (cfg.dense_size,))
        sparse, dense = self._sums(include)
        return sparse + sparse1, dense + dense1


class PlaintextProtocol(Protocol):
    """Factory of plaintext roles.  ``layout``/``expansion``/``layout_seed`` choose the
    request layout exactly as for :class:`~secemb.protocols.secemb.SecEmbProtocol`, so a
    plaintext run can mirror a secure run of either layout; there is nothing to relay
    (``relay=True`` is refused)."""

    name = _NAME
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=True, central_dp=True)

    def message_body_bytes(self, kind: str, rc: RoundConfig, *, party: int, num_users: int) -> int | None:
        """Exact body lengths; server 1's request and upload are empty frames."""
        if kind == "retrieval_request":
            return _request_bytes(rc, party)
        if kind == "upload":
            return _upload_bytes(rc, party)
        if kind == "aggregate_share":
            return _share_bytes(rc)
        return None  # no relay

    def make_server(self, party: int, *, peer_key: bytes | None = None) -> PlaintextServer:
        """Server ``party``; its servers share no key (``peer_key`` is ignored)."""
        return PlaintextServer(party)

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> PlaintextUser:
        if not isinstance(config, RoundConfig):
            raise InvalidParameters(f"config must be a RoundConfig, got {type(config).__name__}")
        return PlaintextUser(config)
