"""Role interfaces shared by every training protocol.

A round of federated training runs in four stages, named by the driver:

1. ``retrieval``: each participating user sends one request to each server and gets one
   reply from each; it reconstructs the ``m'`` rows it asked for.
2. local training (no protocol traffic).
3. ``upload``: each user sends one message to each server with its encoded sparse row
   gradients and its dense gradient.
4. ``aggregate``: server 1 sends its aggregate share to server 0, which reconstructs the
   round's sums.

Protocol objects speak only in ``bytes`` and never read each other's state; the driver
(:mod:`secemb.training`) or the network server moves the bytes through a transport.  With
``Protocol.relay`` the retrieval runs user -> server 1 (roots), user -> server 0 (keys),
server 0 -> server 1 (:meth:`ServerRole.relay_retrieval`), server 1 -> server 0
(:meth:`ServerRole.complete_retrieval`), server 0 -> user; the upload user -> server 0,
server 0 -> server 1 (:meth:`ServerRole.relay_upload`).

Array conventions (all arrays in the ring of ``config.ring_bits``, dtype uint32 or uint64):

* the public sparse table ``T`` has shape ``(m, width)`` -- item embedding and item bias,
  fixed-point encoded;
* a user's retrieved rows and row gradients have shape ``(m_prime, width)``;
* the dense gradient has shape ``(dense_size,)``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from secemb.errors import InvalidParameters, ProtocolError, SecembError
from secemb.fss.cuckoo import NUM_HASHES, CuckooLayout
from secemb.randomness import RandomBytes

__all__ = ["RoundConfig", "UserRole", "ServerRole", "Protocol"]


@dataclass(frozen=True)
class RoundConfig:
    """Public parameters of one round, known to both servers and every participant.

    Attributes
    ----------
    round_id: round number, >= 0.
    num_items: ``m``, rows of the sparse table.
    width: columns of the sparse table (``d + 1`` for an embedding plus an item bias).
    dense_size: length of the flattened dense parameter vector.
    m_prime: ``m'``, the public bound on the rated items a user uses per round.
    ring_bits: 32 or 64.
    layout: ``"full"`` -- every user requests exactly ``m'`` rows, each key over all ``m``
        items (the paper); ``"cuckoo"`` -- every user requests one row per bucket of the
        public cuckoo layout, ``num_buckets`` keys over the bucket domain
        (:mod:`secemb.fss.cuckoo`).
    num_buckets: ``B`` for the cuckoo layout (``>= m'``); 0 for the full layout.
    layout_seed: public seed of the cuckoo hash functions.
    """

    round_id: int
    num_items: int
    width: int
    dense_size: int
    m_prime: int
    ring_bits: int = 32
    layout: str = "full"
    num_buckets: int = 0
    layout_seed: int = 0

    def __post_init__(self) -> None:
        if self.round_id < 0:
            raise InvalidParameters(f"round_id must be >= 0, got {self.round_id}")
        if self.num_items < 1:
            raise InvalidParameters(f"num_items must be >= 1, got {self.num_items}")
        if self.width < 1:
            raise InvalidParameters(f"width must be >= 1, got {self.width}")
        if self.dense_size < 0:
            raise InvalidParameters(f"dense_size must be >= 0, got {self.dense_size}")
        if not 1 <= self.m_prime <= self.num_items:
            raise InvalidParameters(
                f"m_prime must be in [1, num_items={self.num_items}], got {self.m_prime}"
            )
        if self.ring_bits not in (32, 64):
            raise InvalidParameters(f"ring_bits must be 32 or 64, got {self.ring_bits}")
        if self.layout == "full":
            if self.num_buckets != 0:
                raise InvalidParameters(f"num_buckets must be 0 for the full layout, got {self.num_buckets}")
        elif self.layout == "cuckoo":
            if self.num_buckets < max(self.m_prime, NUM_HASHES):
                raise InvalidParameters(
                    f"num_buckets must be >= max(m_prime, {NUM_HASHES}) = {max(self.m_prime, NUM_HASHES)}, "
                    f"got {self.num_buckets}"
                )
        else:
            raise InvalidParameters(f"layout must be 'full' or 'cuckoo', got {self.layout!r}")

    @property
    def slots(self) -> int:
        """Rows a user requests (and keys it sends each server): ``m'`` or ``B``."""
        return self.m_prime if self.layout == "full" else self.num_buckets

    def cuckoo(self) -> CuckooLayout:
        """The public cuckoo layout of this round (cached)."""
        if self.layout != "cuckoo":
            raise InvalidParameters("this round does not use the cuckoo layout")
        return _layout(self.num_items, self.num_buckets, self.layout_seed)

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of ring elements."""
        return np.dtype(np.uint32 if self.ring_bits == 32 else np.uint64)


def _or_error(fn, *args):  # noqa: ANN001, ANN202 - internal helper
    try:
        return fn(*args)
    except SecembError as exc:
        return exc


@lru_cache(maxsize=8)
def _layout(num_items: int, num_buckets: int, seed: int) -> CuckooLayout:
    return CuckooLayout(num_items, num_buckets, seed)


class UserRole(ABC):
    """The device side of one user in one round; created fresh every round."""

    @abstractmethod
    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        """Messages to server 0 and server 1 asking for rows ``indices`` (int64,
        (config.slots,); -1 marks an empty cuckoo bucket)."""

    @abstractmethod
    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        """Reconstruct the requested rows from the servers' replies (``reply1`` is ``None``
        with relay): ring array (slots, width), zero rows for empty slots."""

    @abstractmethod
    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes | None]:
        """Messages to server 0 and 1 (``None``: nothing for server 1, with relay) carrying
        row gradients ``rows`` (ring, (slots, width); zero rows for empty slots), row ``i``
        belonging to ``indices[i]`` of the retrieval request, and the dense gradient
        ``dense`` (ring, (dense_size,))."""


class ServerRole(ABC):
    """One server (party 0 or 1); lives across rounds."""

    party: int

    @abstractmethod
    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        """Start a round; ``table`` is the encoded public sparse table (ring, (m, width))."""

    @abstractmethod
    def handle_retrieval(self, user_id: int, message: bytes) -> bytes | None:
        """Answer one user's retrieval request.  With relay, server 0 returns the message to
        forward to server 1 and server 1 returns ``None``."""

    @abstractmethod
    def handle_upload(self, user_id: int, message: bytes) -> bytes | None:
        """Absorb one user's upload into this server's running aggregate.  With relay,
        server 0 returns the message to forward to server 1; otherwise ``None``."""

    def relay_retrieval(self, user_id: int, message: bytes) -> bytes:
        """Relay, server 1: answer server 0's forwarded request (to server 0)."""
        raise ProtocolError(f"{type(self).__name__} does not relay")

    def handle_retrieval_many(self, requests: list[tuple[int, bytes]]) -> list[bytes | None | SecembError]:
        """:meth:`handle_retrieval` for many ``(user_id, message)`` pairs; a rejected request
        yields its exception in its place.  Servers that can evaluate a batch faster than
        user by user override this."""
        return [_or_error(self.handle_retrieval, u, m) for u, m in requests]

    def relay_retrieval_many(self, forwards: list[tuple[int, bytes]]) -> list[bytes | SecembError]:
        """:meth:`relay_retrieval` for many users, like :meth:`handle_retrieval_many`."""
        return [_or_error(self.relay_retrieval, u, m) for u, m in forwards]

    def complete_retrieval(self, user_id: int, message: bytes) -> bytes:
        """Relay, server 0: combine server 1's answer into the reply to the user."""
        raise ProtocolError(f"{type(self).__name__} does not relay")

    def relay_upload(self, user_id: int, message: bytes) -> None:
        """Relay, server 1: absorb server 0's forwarded upload."""
        raise ProtocolError(f"{type(self).__name__} does not relay")

    @abstractmethod
    def aggregate_share(self) -> bytes:
        """This server's share of the round's aggregate (server 1 sends it to server 0)."""

    @abstractmethod
    def combine(self, peer_share: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Server 0 only: reconstruct ``(sparse_sum (m, width), dense_sum (dense_size,))``
        in the ring from its own aggregate and the peer's share."""


class Protocol(ABC):
    """A training protocol: a factory for its roles.

    Attributes
    ----------
    name: registry name.
    layout, expansion, layout_seed: the request layout of its rounds (:class:`RoundConfig`);
        ``B = max(m', ceil(expansion m'))`` buckets for the cuckoo layout.
    relay: whether server 0 relays between the user and server 1 (then server 1 sends the
        user nothing, and the driver calls the relay steps of :class:`ServerRole`).
    """

    name: str
    layout: str = "full"
    expansion: float = 1.25
    layout_seed: int = 0
    relay: bool = False

    def _set_layout(self, layout: str, expansion: float, layout_seed: int) -> None:
        if layout not in ("full", "cuckoo"):
            raise InvalidParameters(f"layout must be 'full' or 'cuckoo', got {layout!r}")
        if not expansion >= 1.0:
            raise InvalidParameters(f"expansion must be >= 1, got {expansion}")
        self.layout, self.expansion, self.layout_seed = layout, float(expansion), int(layout_seed)

    def round_config(
        self, round_id: int, num_items: int, width: int, dense_size: int, m_prime: int, ring_bits: int = 32
    ) -> RoundConfig:
        """The public configuration of a round of this protocol."""
        buckets = 0
        if self.layout == "cuckoo":
            buckets = max(NUM_HASHES, m_prime, math.ceil(self.expansion * m_prime))
        return RoundConfig(
            round_id, num_items, width, dense_size, m_prime, ring_bits, self.layout, buckets, self.layout_seed
        )

    @abstractmethod
    def make_server(self, party: int) -> ServerRole:
        """A new server for ``party`` (0 or 1)."""

    @abstractmethod
    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> UserRole:
        """A new user for one round; ``_rng`` injects seeded randomness in tests only."""
