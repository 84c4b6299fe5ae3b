"""Sparse secure aggregation baselines of SecEmb Appendix K.3 (Table 13) and the CKKS
homomorphic-encryption aggregation of Appendix K.4 (Table 14) -- message builders whose bytes
are measured, with a server-side aggregator that checks them.

These protocols need an all-users phase between retrieval and upload (TopkSecAgg publishes
the union of the round's index sets) or a different trust model (one server, pairwise masks;
a CKKS key pair), so they are built here as faithful *messages* for one round of ``n`` users
rather than as :class:`~secemb.protocols.base.Protocol` roles; ``secemb bench comm`` measures
``len()`` of what they produce.

Both one-server baselines mask with pairwise seeds from a key agreement: each user draws an
X25519 key pair and the pair ``(u, v)`` derives its 16-byte seed from X25519 and HKDF
(:func:`secemb.secagg.agree`, purpose :data:`secemb.secagg.keys.MASK`), as in Bonawitz et al.'s
secure aggregation.  The messages measured here are the gradient uploads only (the papers'
Table 13 accounting); the key advertisement and, for dropout recovery, the Shamir-share exchange
of :mod:`secemb.secagg` come on top (``docs/secagg.md`` measures them).

``secaggmask`` -- Secure Aggregation with Mask Sparsification (Liu et al., 2023), one server
    Every pair of users ``(u, v)`` shares a 16-byte seed from the key agreement.  The pair's
    PRG marks a random subset of the ``m w`` coordinates
    (each with probability ``q``) and gives a mask for each; ``u`` adds it, ``v`` subtracts it.
    ``q`` is set so that a coordinate is masked by at least one of the ``n - 1`` peers with
    probability ``mask_rate`` (0.6: "60 % of non-zero gradients masked in expectation").
    Message: a bitmap of the sent coordinates (``m w`` bits), then 32-bit values at every
    coordinate that is masked *or* non-zero, plus the masked dense gradient.  **Leaks**: each
    unmasked non-zero coordinate is sent in the clear (value and position; ~40 % of them), and
    the bitmap shows which coordinates the user sent.
``topksecagg`` -- Top-k Sparse Secure Aggregation (Lu et al., 2023), ``mu = 0.1``, one server
    Phase 1: the user sends its non-zero row indices plus ``ceil(mu k)`` random extra rows
    (uint32 each).  The server publishes the union ``U`` of the round's index sets.  Phase 2:
    the user sends pairwise-masked values for every row in ``U`` (``|U| w`` ring elements) plus
    the masked dense gradient.  **Leaks**: each user's rated rows up to the ``mu`` perturbation
    (phase 1 is in the clear).
``he-ckks`` -- CKKS server-side aggregation (Cheon et al., 2017) through TenSEAL
    Each user encrypts its full gradient (``m w + P`` values) under the public key, in
    ciphertexts of ``poly_modulus_degree / 2`` slots; the server adds the ciphertexts; the key
    holder decrypts the sum.  Approximate (CKKS noise, error ~1e-6 at scale 2^40).  Requires
    ``pip install tenseal``.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

import numpy as np

from secemb.errors import InvalidParameters, ProtocolError
from secemb.randomness import expand_seed
from secemb.secagg import KeyPair, agree
from secemb.secagg.keys import MASK

__all__ = [
    "CkksAggregator",
    "SecAggMaskRound",
    "TopkSecAggRound",
    "mask_probability",
]


def mask_probability(mask_rate: float, n_users: int) -> float:
    """Per-pair probability ``q`` with ``1 - (1 - q)^(n - 1) = mask_rate``."""
    if not 0 < mask_rate < 1 or n_users < 2:
        raise InvalidParameters("need 0 < mask_rate < 1 and n_users >= 2")
    return 1.0 - (1.0 - mask_rate) ** (1.0 / (n_users - 1))


def _pair_seeds(n: int, round_id: int = 0) -> dict[tuple[int, int], bytes]:
    """The 16-byte seed of every pair ``a < b`` of ``n`` users, agreed over X25519: each user
    draws a key pair (from the OS) and the pair's seed is HKDF of their agreement."""
    pairs = [KeyPair.generate() for _ in range(n)]
    return {(a, b): agree(pairs[a].private, pairs[b].public, MASK, round_id, (a, b))
            for a in range(n) for b in range(a + 1, n)}


def _sub(seed: bytes, label: bytes) -> bytes:
    """A 16-byte seed derived from ``seed`` for one purpose (SHA-256, truncated)."""
    return hashlib.sha256(seed + label).digest()[:16]


def _pair_mask(seed: bytes, size: int, q: float, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The coordinates a pair masks (sorted, distinct) and the mask values there."""
    state = np.frombuffer(expand_seed(seed, (2,), np.uint64).tobytes(), np.uint64)
    count = int(np.random.default_rng(state).binomial(size, q))
    words = expand_seed(_sub(seed, b"pos"), (max(count, 1) * 2,), np.uint64)
    pos = np.unique(words % np.uint64(size)).astype(np.int64)[:count]
    vals = expand_seed(_sub(seed, b"val"), (pos.size,), dtype)
    return pos, vals


@dataclass
class SecAggMaskRound:
    """One round of SecAggMask for ``n`` users over vectors of ``size`` ring elements (the
    flattened ``m x w`` sparse gradient) plus ``dense_size``."""

    n: int
    size: int
    dense_size: int = 0
    mask_rate: float = 0.6
    ring_bits: int = 32

    def __post_init__(self) -> None:
        self.q = mask_probability(self.mask_rate, self.n)
        self.dtype = np.dtype(np.uint32 if self.ring_bits == 32 else np.uint64)
        self._seeds = _pair_seeds(self.n)

    def upload(self, user: int, grad: np.ndarray, dense: np.ndarray) -> bytes:
        """User ``user``'s message: bitmap, values (masked or plain), masked dense."""
        if grad.shape != (self.size,) or dense.shape != (self.dense_size,):
            raise InvalidParameters("grad/dense have the wrong shape")
        vec = grad.astype(self.dtype).copy()
        dmask = np.zeros(self.dense_size, self.dtype)
        covered = np.zeros(self.size, bool)
        for (a, b), seed in self._seeds.items():
            if user not in (a, b):
                continue
            pos, vals = _pair_mask(seed, self.size, self.q, self.dtype)
            dv = expand_seed(_sub(seed, b"dense"), (self.dense_size,), self.dtype)
            if user == a:
                vec[pos] += vals
                dmask += dv
            else:
                vec[pos] -= vals
                dmask -= dv
            covered[pos] = True
        sent = covered | (grad != 0)
        return np.packbits(sent).tobytes() + vec[sent].astype(self.dtype.newbyteorder("<")).tobytes() + (
            (dense.astype(self.dtype) + dmask).astype(self.dtype.newbyteorder("<")).tobytes()
        )

    def aggregate(self, messages: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """The server's sum (masks cancel when every user of the round uploaded)."""
        total = np.zeros(self.size, self.dtype)
        dense = np.zeros(self.dense_size, self.dtype)
        nbits = -(-self.size // 8)
        for msg in messages:
            sent = np.unpackbits(np.frombuffer(msg, np.uint8, nbits))[: self.size].astype(bool)
            k = int(sent.sum())
            total[sent] += np.frombuffer(msg, self.dtype.newbyteorder("<"), k, nbits)
            dense += np.frombuffer(msg, self.dtype.newbyteorder("<"), self.dense_size, nbits + k * self.dtype.itemsize)
        return total, dense


@dataclass
class TopkSecAggRound:
    """One round of TopkSecAgg for ``n`` users, ``m`` rows of width ``w``."""

    n: int
    m: int
    w: int
    dense_size: int = 0
    mu: float = 0.1
    ring_bits: int = 32

    def __post_init__(self) -> None:
        self.dtype = np.dtype(np.uint32 if self.ring_bits == 32 else np.uint64)
        self._seeds = _pair_seeds(self.n)
        self._sets: dict[int, np.ndarray] = {}
        self.union: np.ndarray | None = None

    def index_message(self, user: int, rows: np.ndarray, rng: np.random.Generator) -> bytes:
        """Phase 1: the user's non-zero rows plus ``ceil(mu k)`` random other rows (uint32)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        extra = math.ceil(self.mu * rows.size)
        others = np.setdiff1d(np.arange(self.m), rows)
        fake = rng.choice(others, size=min(extra, others.size), replace=False)
        idx = np.sort(np.concatenate([rows, fake])).astype("<u4")
        self._sets[user] = idx.astype(np.int64)
        return idx.tobytes()

    def publish_union(self) -> bytes:
        """Server: the union of the round's index sets (sent to every user)."""
        self.union = np.unique(np.concatenate(list(self._sets.values())))
        return self.union.astype("<u4").tobytes()

    def _published_union(self) -> np.ndarray:
        if self.union is None:
            raise ProtocolError("phase 2 before publish_union")
        return self.union

    def value_message(self, user: int, grad_rows: np.ndarray, dense: np.ndarray) -> bytes:
        """Phase 2: pairwise-masked values of every union row (``grad_rows`` ring (m, w))."""
        u = self._published_union()
        vals = grad_rows[u].astype(self.dtype).reshape(-1).copy()
        d = dense.astype(self.dtype).copy()
        for (a, b), seed in self._seeds.items():
            if user not in (a, b):
                continue
            mv = expand_seed(seed, (vals.size + self.dense_size,), self.dtype)
            if user == a:
                vals += mv[: vals.size]
                d += mv[vals.size :]
            else:
                vals -= mv[: vals.size]
                d -= mv[vals.size :]
        return vals.astype(self.dtype.newbyteorder("<")).tobytes() + d.astype(self.dtype.newbyteorder("<")).tobytes()

    def aggregate(self, messages: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        u = self._published_union()
        total = np.zeros((self.m, self.w), self.dtype)
        dense = np.zeros(self.dense_size, self.dtype)
        for msg in messages:
            total[u] += np.frombuffer(msg, self.dtype.newbyteorder("<"), u.size * self.w).reshape(-1, self.w)
            dense += np.frombuffer(msg, self.dtype.newbyteorder("<"), self.dense_size,
                                   u.size * self.w * self.dtype.itemsize)
        return total, dense


class CkksAggregator:
    """CKKS encryption of float vectors and server-side ciphertext addition (TenSEAL).

    Parameters: ``poly_modulus_degree`` 8192 (4096 slots per ciphertext), coefficient moduli
    ``[60, 40, 40, 60]`` bits, global scale ``2^40`` -- TenSEAL's standard 128-bit-secure CKKS
    setting for additions.

    Raises
    ------
    ImportError: TenSEAL is not installed (``pip install tenseal``).
    """

    def __init__(self, poly_modulus_degree: int = 8192) -> None:
        import tenseal as ts

        self.ts = ts
        self.ctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=poly_modulus_degree,
                              coeff_mod_bit_sizes=[60, 40, 40, 60])
        self.ctx.global_scale = 2**40
        self.slots = poly_modulus_degree // 2
        self.public = ts.context_from(self.ctx.serialize(save_secret_key=False))

    def encrypt(self, vec: np.ndarray) -> list[bytes]:
        """User side: serialized ciphertexts of ``vec`` (float), ``ceil(len / slots)`` of them."""
        v = np.asarray(vec, dtype=np.float64)
        return [self.ts.ckks_vector(self.public, v[i : i + self.slots].tolist()).serialize()
                for i in range(0, max(v.size, 1), self.slots)]

    def aggregate(self, users: list[list[bytes]]) -> tuple[list[bytes], float]:
        """Server side: deserialize and add every user's ciphertexts; returns the serialized
        sums and the server's seconds (deserialization + additions + serialization)."""
        t0 = time.perf_counter()
        acc = [self.ts.ckks_vector_from(self.public, c) for c in users[0]]
        for cts in users[1:]:
            for i, c in enumerate(cts):
                acc[i] += self.ts.ckks_vector_from(self.public, c)
        out = [a.serialize() for a in acc]
        return out, time.perf_counter() - t0

    def decrypt(self, cts: list[bytes], size: int) -> np.ndarray:
        """Key holder: the decrypted sum (float64, ``size`` values)."""
        vals: list[float] = []
        for c in cts:
            vals.extend(self.ts.ckks_vector_from(self.ctx, c).decrypt())
        return np.asarray(vals[:size])
