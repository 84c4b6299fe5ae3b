"""SecEmb (Algorithm 3 of the paper): private embedding retrieval and secure sparse
aggregation with row-wise encoding and path sharing; dense parameters as additive shares.

Per round and user (``m'`` rows, ``w = width`` columns, ``P = dense_size``):

* ``retrieval_request``: the user makes ``m'`` path keys for its (padded or truncated)
  indices (:func:`~secemb.fss.gen_path`) and the retrieval output correction words for
  payload 1; server ``b`` gets ``DPFKeys`` of party ``b``.
* ``handle_retrieval``: the server walks every tree once
  (:func:`~secemb.fss.fused.retrieve_and_prepare`), answers with its shares of the ``m'``
  rows and keeps the leaf summary for the aggregation stage.
* ``upload``: the user sends one aggregation correction word per row
  (:func:`~secemb.fss.convert_gen` on the same path, a separate conversion tag) and an
  additive share of its dense gradient.
* ``handle_upload``: the server adds ``PreparedAggregation.apply(CW)`` to its sparse
  aggregate and the dense share to its dense aggregate.
* ``aggregate_share`` / ``combine``: server 1 sends its aggregates (and the sorted ids of the
  users they include) to server 0, which checks both sets agree and reconstructs.

A server never sees an index, a row count or a gradient: every message has a size fixed by
the public round parameters.
"""

from __future__ import annotations

import numbers
import struct

import numpy as np

from secemb import fss
from secemb.errors import InvalidKey, InvalidMessage, InvalidParameters, ProtocolError
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG, PreparedAggregation, retrieve_and_prepare
from secemb.protocols.base import Protocol, RoundConfig, ServerRole, UserRole
from secemb.protocols.wire import array_bytes, frame, open_message, read_array
from secemb.randomness import RandomBytes, system_rng
from secemb.sharing import reconstruct, share

__all__ = ["SecEmbProtocol", "SecEmbUser", "SecEmbServer"]

_NAME = "secemb"
_U64 = struct.Struct("<Q")


def _check_user(user_id: object) -> int:
    """User ids are packed as ``u64`` into the aggregate share: reject anything else up front,
    not when the round is being closed."""
    if isinstance(user_id, bool) or not isinstance(user_id, numbers.Integral) or not 0 <= user_id < 1 << 64:
        raise InvalidParameters(f"user id must be an int in [0, 2^64), got {user_id!r}")
    return int(user_id)


def _key_params(config: RoundConfig) -> fss.DPFParams:
    return fss.DPFParams(config.num_items, 1, config.ring_bits)


def request_bytes(config: RoundConfig) -> int:
    """Body length of a retrieval request."""
    return fss.keys.HEADER_BYTES + config.m_prime * _key_params(config).key_bytes


def upload_bytes(config: RoundConfig) -> int:
    """Body length of an upload: aggregation correction words and the dense share."""
    item = config.dtype.itemsize
    return (config.m_prime * config.width + config.dense_size) * item


class SecEmbUser(UserRole):
    """One user's side of one SecEmb round."""

    def __init__(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> None:
        self.config = config
        self._rng = _rng or system_rng
        self._state: fss.GenState | None = None

    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        idx = np.asarray(indices)
        if idx.shape != (cfg.m_prime,):
            raise InvalidParameters(f"indices must have shape ({cfg.m_prime},), got {idx.shape}")
        if self._state is not None:
            raise ProtocolError("retrieval_request called twice in one round")
        p0, p1, state = fss.gen_path(idx, cfg.num_items, _rng=self._rng)
        ones = np.ones((cfg.m_prime, 1), cfg.dtype)
        cw = fss.convert_gen(state, ones, ring_bits=cfg.ring_bits, tag=RETRIEVAL_TAG)
        params = _key_params(cfg)
        self._state = state
        return tuple(  # type: ignore[return-value]
            frame(_NAME, "retrieval_request", b, cfg.round_id, fss.DPFKeys(p, cw, params).to_bytes())
            for b, p in ((0, p0), (1, p1))
        )

    def retrieval_result(self, reply0: bytes, reply1: bytes) -> np.ndarray:
        cfg = self.config
        if self._state is None:
            raise ProtocolError("retrieval_result before retrieval_request")
        shape = (cfg.m_prime, cfg.width)
        size = shape[0] * shape[1] * cfg.dtype.itemsize
        shares = []
        for b, reply in ((0, reply0), (1, reply1)):
            body = open_message(reply, _NAME, "retrieval_reply", b, cfg.round_id, size)
            shares.append(read_array(body, 0, cfg.dtype, shape)[0])
        return reconstruct(shares[0], shares[1])

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        if self._state is None:
            raise ProtocolError("upload before retrieval_request")
        if rows.dtype != cfg.dtype or rows.shape != (cfg.m_prime, cfg.width):
            raise InvalidParameters(
                f"rows must be {cfg.dtype} of shape ({cfg.m_prime}, {cfg.width}), got {rows.dtype} {rows.shape}"
            )
        if dense.dtype != cfg.dtype or dense.shape != (cfg.dense_size,):
            raise InvalidParameters(
                f"dense must be {cfg.dtype} of shape ({cfg.dense_size},), got {dense.dtype} {dense.shape}"
            )
        cw = fss.convert_gen(self._state, rows, ring_bits=cfg.ring_bits, tag=AGGREGATION_TAG)
        d0, d1 = share(dense, _rng=self._rng)
        cw_bytes = array_bytes(cw)
        self._state = None  # one upload per round
        return (
            frame(_NAME, "upload", 0, cfg.round_id, cw_bytes, array_bytes(d0)),
            frame(_NAME, "upload", 1, cfg.round_id, cw_bytes, array_bytes(d1)),
        )


class SecEmbServer(ServerRole):
    """Server ``party`` of SecEmb; party 0 leads (reconstructs the aggregate)."""

    def __init__(self, party: int) -> None:
        if party not in (0, 1):
            raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
        self.party = party
        self.config: RoundConfig | None = None
        self._table: np.ndarray | None = None
        self._prepared: dict[int, PreparedAggregation] = {}
        self._uploaded: set[int] = set()
        self._sparse: np.ndarray | None = None
        self._dense: np.ndarray | None = None

    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        if table.dtype != config.dtype or table.shape != (config.num_items, config.width):
            raise InvalidParameters(
                f"table must be {config.dtype} of shape ({config.num_items}, {config.width}), "
                f"got {table.dtype} {table.shape}"
            )
        self.config = config
        self._table = np.ascontiguousarray(table)
        self._prepared = {}
        self._uploaded = set()
        self._sparse = np.zeros((config.num_items, config.width), config.dtype)
        self._dense = np.zeros(config.dense_size, config.dtype)

    def _cfg(self) -> RoundConfig:
        if self.config is None:
            raise ProtocolError("no round in progress")
        return self.config

    def handle_retrieval(self, user_id: int, message: bytes) -> bytes:
        cfg = self._cfg()
        user_id = _check_user(user_id)
        if user_id in self._prepared or user_id in self._uploaded:
            raise ProtocolError(f"user {user_id} already retrieved in round {cfg.round_id}")
        body = open_message(message, _NAME, "retrieval_request", self.party, cfg.round_id, request_bytes(cfg))
        try:
            keys = fss.DPFKeys.from_bytes(
                body,
                domain_size=cfg.num_items,
                party=self.party,
                count=cfg.m_prime,
                payload_width=1,
                ring_bits=cfg.ring_bits,
            )
        except InvalidKey as exc:
            raise InvalidMessage(f"retrieval_request: {exc}") from None
        answers, prepared = retrieve_and_prepare(keys.path, self.party, keys.cw_out, self._table, cfg.width)
        self._prepared[user_id] = prepared
        return frame(_NAME, "retrieval_reply", self.party, cfg.round_id, array_bytes(answers))

    def handle_upload(self, user_id: int, message: bytes) -> None:
        cfg = self._cfg()
        user_id = _check_user(user_id)
        if user_id in self._uploaded:
            raise ProtocolError(f"user {user_id} already uploaded in round {cfg.round_id}")
        prepared = self._prepared.get(user_id)
        if prepared is None:
            raise ProtocolError(f"user {user_id} uploaded without retrieving in round {cfg.round_id}")
        body = open_message(message, _NAME, "upload", self.party, cfg.round_id, upload_bytes(cfg))
        cw, off = read_array(body, 0, cfg.dtype, (cfg.m_prime, cfg.width))
        dense, _ = read_array(body, off, cfg.dtype, (cfg.dense_size,))
        contribution = prepared.apply(cw)
        # all checks passed: change state
        self._sparse += contribution
        self._dense += dense
        del self._prepared[user_id]
        self._uploaded.add(user_id)

    def included_users(self) -> list[int]:
        """Sorted ids of the users whose uploads the aggregate holds."""
        return sorted(self._uploaded)

    def aggregate_share(self) -> bytes:
        cfg = self._cfg()
        users = self.included_users()
        ids = b"".join(_U64.pack(u) for u in users)
        return frame(
            _NAME,
            "aggregate_share",
            self.party,
            cfg.round_id,
            _U64.pack(len(users)),
            ids,
            array_bytes(self._sparse),
            array_bytes(self._dense),
        )

    def combine(self, peer_share: bytes) -> tuple[np.ndarray, np.ndarray]:
        cfg = self._cfg()
        if self.party != 0:
            raise ProtocolError("only server 0 combines the aggregate")
        users = self.included_users()
        item = cfg.dtype.itemsize
        size = 8 + 8 * len(users) + (cfg.num_items * cfg.width + cfg.dense_size) * item
        body = open_message(peer_share, _NAME, "aggregate_share", 1, cfg.round_id, size)
        (count,) = _U64.unpack_from(body, 0)
        peer_users = [_U64.unpack_from(body, 8 + 8 * i)[0] for i in range(count)] if count == len(users) else None
        if peer_users != users:
            raise ProtocolError("the two servers aggregated different sets of users")
        off = 8 + 8 * len(users)
        sparse1, off = read_array(body, off, cfg.dtype, (cfg.num_items, cfg.width))
        dense1, _ = read_array(body, off, cfg.dtype, (cfg.dense_size,))
        return reconstruct(self._sparse, sparse1), reconstruct(self._dense, dense1)


class SecEmbProtocol(Protocol):
    """Factory of SecEmb roles."""

    name = _NAME

    def make_server(self, party: int) -> SecEmbServer:
        return SecEmbServer(party)

    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> SecEmbUser:
        return SecEmbUser(config, _rng=_rng)
