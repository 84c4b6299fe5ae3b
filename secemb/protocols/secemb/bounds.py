"""Bounded payloads (issue 34 (b); docs/security.md, "Bounded payloads: the design study", its
fourth row): a device proves that its upload -- the payloads of its aggregation keys and its
dense gradient -- is small, so that the sum of a round's uploads cannot wrap.  Behind the
protocol option ``bound`` (off by default; it needs verified uploads, ``verify=True``, and the
32-bit ring).  What the roles share lives here: the parameters, the honest device's clipping,
the proof's context and the projected vectors.

The protocol, per device and round
----------------------------------
``L = S w + P`` coordinates: ``S`` slots (keys) of width ``w`` and ``P`` dense values.

* Parameters (:func:`bound_params`): ``rows = 40`` projections; ``t = floor(log2((2^(k-1) - 1)
  / n))`` with ``n`` the round's users (as :meth:`~secemb.ring.FixedPoint.clip_bound` takes
  it), so that ``n`` values in ``[-2^(t-1), 2^(t-1))`` never wrap; ``T = 2^(t-1)``.  An honest
  device clips its whole upload (rows and dense, real units) to the L2 norm ``C2 = T / (9 2^f)``
  before encoding (:func:`clip_upload`; scaled down only when over).  A projection row has
  independent entries -1, 0, +1, so by Hoeffding an honest projection reaches ``T`` in absolute
  value with probability at most ``2 e^(-T^2 / (2 ||x||^2)) = 2 e^-40.5`` (the encoding's
  rounding adds at most ``sqrt(L) / 2`` ring units to ``||x||``, far below ``T / 9``): an honest
  device fails with probability at most ``2 * 40 * e^-40.5``.
* Retrieval: the 16-byte seed ``sigma`` a device of verified uploads appends to its request to
  server 1 (relay or not: server 1 always gets a direct request) is also the range proof's
  ``seed_1`` (server 1's witness and proof shares), in streams of their own, apart from the
  sketch proof's (:mod:`secemb.fss.sketchproof`).
* Upload: unchanged.  Server 0 then draws a 16-byte challenge ``c`` for each batch of uploads it
  absorbs (one ``c`` per :meth:`handle_upload_many` call, shared by the batch's devices) and
  hands it to each device (:meth:`SecEmbServer.challenge`).
* Proof (:meth:`SecEmbUser.bound_proof`): the device computes its party-0 keys' payload shares
  ``S_0`` (:func:`~secemb.fss.fused.payload_sums_of`, :func:`~secemb.fss.fused.payload_shares`)
  and ``S_1 = beta - S_0`` (``beta``: the rows it uploaded), its two dense shares ``d_b``, the
  vectors ``x_b = S_b || d_b`` (ring (L,), :func:`upload_vector`), ``a = project(c, x_0)``,
  ``b = project(c, x_1)`` (:func:`projected`) and proves with
  :func:`~secemb.fss.rangeproof.prove` under the context :func:`context` (round, ``c`` and the
  device's key digest ``K``, which binds the device) and ``seed_1 = sigma``.  Only ``msg0`` is
  sent, to server 0 (a ``proof`` message); server 1 has ``sigma`` and gets ``part_0`` from
  server 0 (:func:`~secemb.fss.rangeproof.hint_of`).
* Server 0 (:meth:`SecEmbServer.handle_proof_many`) keeps each device's ``msg0`` (a wrong
  length or round, a device that did not upload, a second proof: refused, nothing kept).
* Verification, before the round closes: server 0 draws a query seed ``q`` once the proofs are
  in and sends server 1, per device, ``c``, ``part_0`` and the proof's ``part_1`` (which server 1
  checks against ``sigma``: it binds ``c``), and ``q``
  (:meth:`SecEmbServer.bound_request`); server 1 computes its ``S_1`` from its keys and the
  correction words it absorbed, its dense share, ``b = project(c, x_1)`` and its verifier
  messages (:meth:`SecEmbServer.bound_answer`); server 0 computes its own and
  :func:`~secemb.fss.rangeproof.decide` names the devices that fail
  (:meth:`SecEmbServer.bound_rejected`): they are left out exactly like a digest mismatch (like
  a dropout), and so is a device that uploaded but sent no proof.

Each server's payload shares come from the payload sums its retrieval's walk keeps
(``retrieve_and_prepare(..., payload_sums=True)`` and its bucket form, through
:func:`secemb.fss.tasks.evaluate_task`, which writes them into the batch's arrays), with the
correction words it absorbed; where that walk keeps none (the gpu backend's), or the server
dropped them after the check, from a walk of the absorbed keys at verification
(:func:`payload_sums`).  They are projected as they are computed (:func:`projected_shares`): no
server forms ``x_b``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from secemb.errors import InvalidParameters, check_int
from secemb.fss import fused
from secemb.fss.keys import PathKeys
from secemb.fss.projections import project_affine, project_each
from secemb.fss.rangeproof import RangeParams
from secemb.privacy.noise import ClipSpec
from secemb.protocols.base import BOUND_CHALLENGE_BYTES, RoundConfig
from secemb.protocols.secemb.sizes import DENSE_COMMIT_BYTES, U64
from secemb.randomness import SEED_BYTES
from secemb.ring import FixedPoint

__all__ = ["BOUND_RING_BITS", "CHALLENGE_BYTES", "QUERY_BYTES", "ROWS", "bound_bits", "bound_params",
           "check_bound_ring", "clip_norm", "clip_upload", "context", "dense_commitment", "payload_share",
           "payload_sums", "projected", "projected_shares", "upload_vector"]

#: projections a device proves in range (lambda)
ROWS = 40
#: server 0's projection challenge (the projections' seed, :data:`~secemb.randomness.SEED_BYTES`
#: long): the length the API fixes for every bound prover's challenge, which the device checks
#: (:data:`~secemb.protocols.base.BOUND_CHALLENGE_BYTES`)
CHALLENGE_BYTES = BOUND_CHALLENGE_BYTES
#: server 0's query seed of the range proof's verification (drawn once the proofs are in)
QUERY_BYTES = SEED_BYTES
#: ring of the bound (the range proof's relation must not wrap mod p: 32-bit ring shares)
BOUND_RING_BITS = 32
_CONTEXT_DOMAIN = b"secemb-bound-proof"
_DENSE_DOMAIN = b"secemb-bound-dense"


def bound_bits(ring_bits: int, users: int) -> int:
    """``t = floor(log2((2^(k-1) - 1) / n))``: ``n = users`` values in ``[-2^(t-1), 2^(t-1))``
    sum without wrapping in ``Z_2^k``.

    Raises
    ------
    InvalidParameters: ``users`` is not an int >= 1, or ``t`` is outside ``[2, k - 2]``.
    """
    users = check_int("users", users, low=1)
    t = (((1 << (ring_bits - 1)) - 1) // users).bit_length() - 1  # floor(log2(floor(x))) = floor(log2(x))
    if not 2 <= t <= ring_bits - 2:
        raise InvalidParameters(f"{users} users leave no bound in Z_2^{ring_bits} (t = {t})")
    return t


def bound_params(config: RoundConfig, users: int) -> RangeParams:
    """The range proof's parameters of a round of ``users`` users: :data:`ROWS` values of
    ``t = bound_bits(config.ring_bits, users)`` bits.

    Raises
    ------
    InvalidParameters: as :func:`check_bound_ring`.
    """
    return RangeParams(ROWS, check_bound_ring(config.ring_bits, users), config.ring_bits)


def check_bound_ring(ring_bits: int, users: int) -> int:
    """``t = bound_bits(ring_bits, users)`` of bounded payloads on the ``ring_bits``-bit ring.

    Raises
    ------
    InvalidParameters: the ring is not the :data:`BOUND_RING_BITS`-bit ring, or :func:`bound_bits`
        refuses.
    """
    if ring_bits != BOUND_RING_BITS:
        raise InvalidParameters(f"bounded payloads need the {BOUND_RING_BITS}-bit ring, got {ring_bits}")
    return bound_bits(ring_bits, users)


def clip_norm(fp: FixedPoint, users: int) -> float:
    """``C2 = T / (9 2^f)``, ``T = 2^(t-1)``: the L2 norm (real units) an honest device clips its
    whole upload to."""
    return float(1 << (bound_bits(fp.ring_bits, users) - 1)) / (9.0 * 2.0**fp.frac_bits)


def clip_upload(fp: FixedPoint, users: int, rows: np.ndarray, dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, dense)`` (real units) scaled together by ``min(1, C2 / ||(rows, dense)||_2)``
    (:func:`clip_norm`, :meth:`~secemb.privacy.noise.ClipSpec.clip`): what an honest device
    encodes when bounds are on."""
    return ClipSpec(clip_norm(fp, users)).clip(rows, dense)


def context(round_id: int, challenge: bytes, key_digest: bytes) -> bytes:
    """The proof's context: ``b"secemb-bound-proof" || u64 round_id || c || K`` with ``c`` the
    challenge and ``K`` the device's key digest (:func:`~secemb.protocols.secemb.checks.key_digests`:
    both servers hold it, and it differs between devices)."""
    return _CONTEXT_DOMAIN + U64.pack(round_id) + bytes(challenge) + bytes(key_digest)


def dense_commitment(round_id: int, sigma: bytes, dense1: np.ndarray) -> bytes:
    """``SHA-256(b"secemb-bound-dense" || u64 round_id || sigma || d_1)``: without relay, the
    device's commitment to its server-1 dense share ``d_1`` (ring (P,), little-endian words),
    appended to its upload to server 0 so that the share is fixed before server 0's challenge:
    the two servers' upload digests cover it (server 1 computes it from the share it got and the
    ``sigma`` of the device's request).  ``sigma`` is secret from server 0, so the commitment
    tells server 0 nothing about ``d_1`` (a short dense gradient could otherwise be guessed from
    its hash and server 0's own share)."""
    h = hashlib.sha256(_DENSE_DOMAIN + U64.pack(round_id) + bytes(sigma))
    h.update(np.ascontiguousarray(dense1, dense1.dtype.newbyteorder("<")).data)
    return h.digest()[:DENSE_COMMIT_BYTES]


def payload_sums(config: RoundConfig, party: int, path: PathKeys) -> fused.PayloadSums:
    """Party ``party``'s :class:`~secemb.fss.fused.PayloadSums` of one or more devices' keys from a
    walk of ``path`` (its ``K`` path keys, device by device, the cuckoo layout's ``B`` a device):
    :func:`~secemb.fss.fused.payload_sums_of` in the round's layout."""
    sizes = None if config.layout == "full" else np.diff(config.cuckoo().indptr)
    return fused.payload_sums_of(path, party, config.width, ring_bits=config.ring_bits, sizes=sizes)


def payload_share(config: RoundConfig, party: int, path: PathKeys, cw: np.ndarray) -> np.ndarray:
    """Party ``party``'s shares of the payloads of one or more devices' keys, ring (K, w):
    :func:`~secemb.fss.fused.payload_shares` of :func:`payload_sums` of ``path`` with the
    aggregation correction words ``cw`` (ring (K, w))."""
    sums = payload_sums(config, party, path)
    return fused.payload_shares(party, sums.key_conv, sums.t_count, cw)


def upload_vector(payload: np.ndarray, dense: np.ndarray) -> np.ndarray:
    """``x_b = S_b || d_b`` of devices: their payload shares (ring (n, S, w)) flattened and
    their dense shares (ring (n, P)), ring (n, S w + P)."""
    n = payload.shape[0]
    return np.concatenate([payload.reshape(n, -1), dense.reshape(n, -1)], axis=1)


def projected(challenges: Sequence[bytes], x: np.ndarray) -> np.ndarray:
    """The :data:`ROWS` projections of each row of ``x`` (ring (n, L)) under its challenge's rows
    (``challenges``: n challenges, which may repeat), ring (n, ROWS): one
    :func:`~secemb.fss.projections.project_each` call (each distinct challenge expanded once)."""
    return project_each(challenges, x, ROWS)


def projected_shares(challenges: Sequence[bytes], party: int, sums: Sequence[fused.PayloadSums],
                     cws: Sequence[np.ndarray], dense: Sequence[np.ndarray]) -> np.ndarray:
    """:func:`projected` of server ``party``'s vectors ``x_b = S_b || d_b`` of n devices, given as
    each device's payload sums (``sums[d]``, :class:`~secemb.fss.fused.PayloadSums` of its ``S``
    keys), aggregation correction words (``cws[d]``, ring (S, w)) and dense share (``dense[d]``,
    ring (P,)), without forming them: ``S_b = (-1)^b (key_conv + t_count CW)``
    (:func:`~secemb.fss.fused.payload_shares`) projected as it is computed
    (:func:`~secemb.fss.projections.project_affine`); ring (n, ROWS), the same elements."""
    parts = [(s.key_conv, s.t_count, cw, d) for s, cw, d in zip(sums, cws, dense, strict=True)]
    return project_affine(challenges, check_int("party", party, low=0, high=1) == 1, parts, ROWS)
