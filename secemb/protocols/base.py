"""Role interfaces shared by every training protocol.

A round of federated training runs in four stages, named in :mod:`secemb.protocols.stages`:

1. ``retrieval``: each participating user sends one request to each server and gets one
   reply from each; it reconstructs the ``m'`` rows it asked for.
2. local training (no protocol traffic).
3. ``upload``: each user sends one message to each server with its encoded sparse row
   gradients and its dense gradient.
4. ``aggregate``: server 1 sends its aggregate share to server 0, which reconstructs the
   round's sums.

Protocol objects speak only in ``bytes`` and never read each other's state; the driver
(:mod:`secemb.training`) or the network server moves the bytes through a transport.

Array conventions (all arrays in the ring of ``config.ring_bits``, dtype uint32 or uint64):

* the public sparse table ``T`` has shape ``(m, width)`` -- item embedding and item bias,
  fixed-point encoded;
* a user's retrieved rows and row gradients have shape ``(m_prime, width)``;
* the dense gradient has shape ``(dense_size,)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from secemb.errors import InvalidParameters
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


@lru_cache(maxsize=8)
def _layout(num_items: int, num_buckets: int, seed: int) -> CuckooLayout:
    return CuckooLayout(num_items, num_buckets, seed)


class UserRole(ABC):
    """The device side of one user in one round; created fresh every round."""

    @abstractmethod
    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        """Messages to server 0 and server 1 asking for rows ``indices`` (int64, (m',))."""

    @abstractmethod
    def retrieval_result(self, reply0: bytes, reply1: bytes) -> np.ndarray:
        """Reconstruct the requested rows from the servers' replies: ring array (m', width)."""

    @abstractmethod
    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        """Messages to server 0 and 1 carrying row gradients ``rows`` (ring, (m', width)),
        row ``i`` belonging to ``indices[i]`` of the retrieval request, and the dense
        gradient ``dense`` (ring, (dense_size,))."""


class ServerRole(ABC):
    """One server (party 0 or 1); lives across rounds."""

    party: int

    @abstractmethod
    def begin_round(self, config: RoundConfig, table: np.ndarray) -> None:
        """Start a round; ``table`` is the encoded public sparse table (ring, (m, width))."""

    @abstractmethod
    def handle_retrieval(self, user_id: int, message: bytes) -> bytes:
        """Answer one user's retrieval request."""

    @abstractmethod
    def handle_upload(self, user_id: int, message: bytes) -> None:
        """Absorb one user's upload into this server's running aggregate."""

    @abstractmethod
    def aggregate_share(self) -> bytes:
        """This server's share of the round's aggregate (server 1 sends it to server 0)."""

    @abstractmethod
    def combine(self, peer_share: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Server 0 only: reconstruct ``(sparse_sum (m, width), dense_sum (dense_size,))``
        in the ring from its own aggregate and the peer's share."""


class Protocol(ABC):
    """A training protocol: a factory for its roles."""

    name: str

    @abstractmethod
    def make_server(self, party: int) -> ServerRole:
        """A new server for ``party`` (0 or 1)."""

    @abstractmethod
    def make_user(self, config: RoundConfig, *, _rng: RandomBytes | None = None) -> UserRole:
        """A new user for one round; ``_rng`` injects seeded randomness in tests only."""
