"""Private set union over secure aggregation: Algorithm 3 of secure federated submodel learning.

Each client encodes its index set (a subset of ``[0, domain)``) as a vector in Z_2^32 of
:attr:`BloomParams.length` words: a Bloom filter of ``size`` positions whose set positions hold
a random **non-zero** word instead of a 1, followed by a partition indicator (one word per
server-defined partition, randomized the same way).  The secure sum of these vectors is non-zero
exactly where some client set a position (up to a false negative of probability below
``n 2^-32`` for a position set by two or more clients), and its values are uniform: the server
learns the union (and the non-empty partitions, which the union shows anyway) but not how many
clients hold an index.  The server tests membership only for indices of non-empty partitions.

Parameters (paper, Sec. III-B3 and VI): for an expected union size ``phi`` and a target false
positive rate ``FPR``, ``size = ceil(-phi ln FPR / (ln 2)^2)`` and ``hashes = round(-ln FPR / ln 2)``
(at least 1).  When ``size`` reaches the domain, the paper's evaluation setting is used instead:
``size = domain``, the identity map as the only hash, no partitions; its false positive rate is 0.
A non-member of a non-empty partition is a false positive with probability
``(1 - exp(-hashes * u / size))^hashes`` (``u`` = the actual union size,
:meth:`BloomParams.false_positive_rate`).

Hashes: ``H_i(j) = AES_K(j || i)`` (128-bit block, little-endian 64-bit halves), first 8 bytes
as an integer mod ``size``, with the public key ``K = SHA-256(b"secemb/secagg/bloom")[:16]`` --
a public pseudorandom function, so anyone can recompute the positions.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters
from secemb.randomness import RandomBytes, random_words, system_rng
from secemb.secagg import messages
from secemb.secagg.config import SecAggConfig, check_rows
from secemb.secagg.local import Transcript, run_round

__all__ = ["BloomParams", "psu_input", "psu_union", "union_message", "read_union", "PsuResult", "run_psu"]

_HASH_KEY = hashlib.sha256(b"secemb/secagg/bloom").digest()[:16]
_CHUNK = 1 << 20  # candidate indices tested per vectorized batch


@dataclass(frozen=True)
class BloomParams:
    """The public parameters of one PSU.

    Attributes
    ----------
    domain: indices are ints in ``[0, domain)``.
    size: Bloom filter positions (``beta``).
    hashes: hash functions (``h``); ignored (1, the identity) when ``identity``.
    partitions: contiguous, balanced partitions of the domain (partition of ``j`` is
        ``j * partitions // domain``); 0 for none (every index is a candidate).
    identity: ``size == domain`` and ``H(j) = j``: exact, no false positives.
    """

    domain: int
    size: int
    hashes: int = 1
    partitions: int = 0
    identity: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.domain < 2**63:
            raise InvalidParameters(f"domain must be in [1, 2^63), got {self.domain}")
        if not 1 <= self.size < 2**32 or not 1 <= self.hashes <= 64:
            raise InvalidParameters(f"need 1 <= size < 2^32 and 1 <= hashes <= 64, got {self.size}, {self.hashes}")
        if not 0 <= self.partitions <= min(self.domain, 2**32 - 1 - self.size) \
                or self.domain * self.partitions >= 2**63:
            raise InvalidParameters(f"partitions must be in [0, min(domain, 2^32 - 1 - size)] with "
                                    f"domain * partitions < 2^63, got {self.partitions}")
        if self.identity and (self.size != self.domain or self.hashes != 1):
            raise InvalidParameters("the identity filter has size == domain and one hash")

    @classmethod
    def exact(cls, domain: int) -> BloomParams:
        """The paper's evaluation setting: one position per index, no partitions, no false
        positives (its Taobao run: ``domain = 143,534``)."""
        return cls(domain=domain, size=domain, hashes=1, partitions=0, identity=True)

    @classmethod
    def for_union(cls, domain: int, expected: int, fpr: float, partitions: int = 0) -> BloomParams:
        """Optimal Bloom parameters for an ``expected`` union size at false positive rate
        ``fpr`` (Eq. 1), or :meth:`exact` when that filter would not be smaller than the
        domain."""
        if not 0 < fpr < 1 or expected < 1:
            raise InvalidParameters(f"need 0 < fpr < 1 and expected >= 1, got {fpr}, {expected}")
        size = math.ceil(-expected * math.log(fpr) / math.log(2) ** 2)
        if size >= domain:
            return cls.exact(domain)
        return cls(domain=domain, size=size, hashes=max(1, round(-math.log(fpr) / math.log(2))),
                   partitions=partitions)

    @property
    def length(self) -> int:
        """Words of a client's PSU vector: the filter, then the partition indicator."""
        return self.size + self.partitions

    def false_positive_rate(self, union_size: int) -> float:
        """Probability that a non-member of a non-empty partition passes the membership test
        when the filter holds ``union_size`` distinct indices."""
        if self.identity:
            return 0.0
        return float((1.0 - math.exp(-self.hashes * union_size / self.size)) ** self.hashes)

    def positions(self, indices: np.ndarray) -> np.ndarray:
        """Filter positions of ``indices`` (int64 ``(k,)``): int64 ``(k, hashes)``."""
        j = np.asarray(indices, dtype=np.int64)
        if self.identity:
            return j[:, None].copy()
        blocks = np.empty((j.size, self.hashes, 2), "<u8")
        blocks[:, :, 0] = j[:, None]
        blocks[:, :, 1] = np.arange(self.hashes, dtype=np.uint64)
        enc = Cipher(algorithms.AES(_HASH_KEY), modes.ECB()).encryptor()
        out = np.frombuffer(enc.update(blocks.tobytes()), "<u8").reshape(j.size, self.hashes, 2)[:, :, 0]
        return (out % np.uint64(self.size)).astype(np.int64)

    def partition_of(self, indices: np.ndarray) -> np.ndarray:
        """Partition of each index (int64), for ``partitions > 0``."""
        return np.asarray(indices, dtype=np.int64) * self.partitions // self.domain

    def config(self, threshold: int, round_id: int = 0) -> SecAggConfig:
        """The secure-aggregation round that carries this PSU (dense, width 1)."""
        return SecAggConfig(length=self.length, threshold=threshold, round_id=round_id)


def _nonzero_words(count: int, rng: RandomBytes) -> np.ndarray:
    """``count`` uniform words of [1, 2^32) (rejection of 0)."""
    w = random_words(rng, (count,), np.uint32)
    while True:
        zero = np.flatnonzero(w == 0)
        if zero.size == 0:
            return w
        w[zero] = random_words(rng, (zero.size,), np.uint32)


def psu_input(params: BloomParams, indices: np.ndarray, *, _rng: RandomBytes | None = None) -> np.ndarray:
    """A client's PSU vector: ``uint32`` ``(params.length,)``, a uniform non-zero word at each
    filter position of ``indices`` and at each partition they fall in, 0 elsewhere.

    ``indices``: distinct ints in ``[0, domain)`` (any order), the client's (possibly
    perturbed) index set.
    """
    rng = system_rng if _rng is None else _rng
    j = check_rows(np.sort(np.asarray(indices)), params.domain)
    vec = np.zeros(params.length, np.uint32)
    pos = np.unique(params.positions(j))
    vec[pos] = _nonzero_words(pos.size, rng)
    if params.partitions:
        parts = np.unique(params.partition_of(j))
        vec[params.size + parts] = _nonzero_words(parts.size, rng)
    return vec


def psu_union(params: BloomParams, total: np.ndarray) -> np.ndarray:
    """The server's union from the secure sum ``total`` (``uint32``, ``(length,)`` or
    ``(length, 1)``): the indices of non-empty partitions (all indices if there are none) whose
    filter positions are all non-zero; int64, increasing.  Contains every client's index
    (barring a ``2^-32``-rare false negative) and false positives at
    :meth:`BloomParams.false_positive_rate`."""
    t = np.asarray(total).reshape(-1)
    if t.dtype != np.uint32 or t.size != params.length:
        raise InvalidParameters(f"total must be uint32 of {params.length} words, got {t.dtype} of {t.size}")
    bloom = t[: params.size] != 0
    if params.identity:
        return np.flatnonzero(bloom).astype(np.int64)
    if params.partitions:
        parts = np.flatnonzero(t[params.size :] != 0)
        # partition p holds [ceil(p D / P), ceil((p + 1) D / P))
        lo = -(-parts * params.domain // params.partitions)
        hi = -(-(parts + 1) * params.domain // params.partitions)
        ranges = [(int(a), int(b)) for a, b in zip(lo, hi, strict=True)]
    else:
        ranges = [(0, params.domain)]
    found = []
    for a, b in ranges:
        for start in range(a, b, _CHUNK):
            cand = np.arange(start, min(b, start + _CHUNK), dtype=np.int64)
            found.append(cand[bloom[params.positions(cand)].all(axis=1)])
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def union_message(round_id: int, union: np.ndarray) -> bytes:
    """What the server sends the live clients: the union (``count`` uint32 then the indices)."""
    return messages.frame("union", round_id, messages.SERVER, messages.rows_bytes(np.asarray(union)))


def read_union(msg: bytes, round_id: int, domain: int) -> np.ndarray:
    """A client's parse of :func:`union_message`: int64 increasing indices below ``domain``.

    Raises
    ------
    InvalidMessage: malformed, other round, or indices not increasing / out of the domain.
    """
    _, body = messages.open_frame(msg, "union", round_id, messages.SERVER)
    rd = messages.Reader(body, "union")
    out = rd.increasing(domain, "union")
    rd.end()
    return out


@dataclass
class PsuResult:
    """One PSU run in process.

    Attributes
    ----------
    union: int64 increasing, what the server delivered.
    receivers: the live clients that received the union (the survivors U3 of the aggregation).
    union_bytes: ``len()`` of the union message (one per receiver).
    upload_bytes / download_bytes: per client, every message it sent / received, the union
        message included.
    client_seconds: per client, its own time (building its PSU vector and its secure-aggregation
        stages).
    server_seconds: the server's total time (aggregation stages, membership tests, the union
        message).
    transcript: the aggregation's :class:`~secemb.secagg.local.Transcript` (per-stage server
        times there, e.g. the Unmasking recovery of Fig. 6).
    """

    union: np.ndarray
    receivers: list[int]
    union_bytes: int
    upload_bytes: dict[int, int]
    download_bytes: dict[int, int]
    client_seconds: dict[int, float]
    server_seconds: float
    transcript: Transcript


def run_psu(
    params: BloomParams,
    sets: Mapping[int, np.ndarray],
    threshold: int,
    *,
    round_id: int = 0,
    drop_after: Mapping[int, int] | None = None,
    signed: bool = False,
    _rng: RandomBytes | None = None,
) -> PsuResult:
    """Algorithm 3 for the clients ``sets`` (id -> index set) over :func:`run_round` (a signed
    round if ``signed``: its clients enrolled under a roster of the run's own); the union covers
    the sets of the survivors (clients whose vectors were summed).

    Raises
    ------
    SecAggAborted: fewer than ``threshold`` clients at some stage.
    """
    inputs, build = {}, {}
    for cid, idx in sets.items():
        t0 = time.perf_counter()
        inputs[cid] = psu_input(params, idx, _rng=_rng)
        build[cid] = time.perf_counter() - t0
    tr = run_round(replace(params.config(threshold, round_id), signed=signed), inputs, drop_after=drop_after,
                   _rng=_rng)
    t0 = time.perf_counter()
    union = psu_union(params, tr.total)
    msg = union_message(round_id, union)
    server = sum(tr.server_seconds.values()) + time.perf_counter() - t0
    down = dict(tr.download_bytes)
    for cid in tr.survivors:
        down[cid] += len(msg)
    return PsuResult(union=union, receivers=list(tr.survivors), union_bytes=len(msg),
                     upload_bytes=dict(tr.upload_bytes), download_bytes=down,
                     client_seconds={c: build[c] + tr.client_seconds[c] for c in tr.client_seconds},
                     server_seconds=server, transcript=tr)
