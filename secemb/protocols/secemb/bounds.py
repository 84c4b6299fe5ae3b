"""Bounded payloads (issue 34 (b); docs/security.md, "Bounded payloads: the design study", its
fourth row): a device proves that its upload -- the payloads of its aggregation keys and its
dense gradient -- is small, so that the sum of a round's uploads cannot wrap.  Behind the
protocol option ``bound`` (off by default; it needs verified uploads, ``verify=True``, and the
32-bit ring).  What the roles share lives here: the parameters, the honest device's clipping,
the proof's context and the projected vectors.

The protocol, per device and round
----------------------------------
The proven vector ``x`` holds what the device adds to the aggregate and its ``P`` dense values.
Cuckoo layout: ``L = S w + P`` coordinates, each of its ``S`` keys' payload (``w`` wide; an item
sits in up to :data:`~secemb.fss.cuckoo.NUM_HASHES` buckets, so up to that many of them add into
one row).  Full layout: ``L = m w + P``, what its keys add to each of the ``m`` table rows
(:func:`contribution`; keys that share a point add together there, session 31).

* Parameters (:func:`bound_params`): ``rows = 40`` projections; ``t = floor(log2((2^(k-1) - 1)
  / (n h)))`` with ``n`` the round's users and ``h`` the layout's :func:`multiplicity` (3 cuckoo,
  1 full; :func:`layout_bits`), so that the ``n h`` proven values a row of the aggregate receives,
  each in ``(-2^t, 2^t)``, never wrap; ``T = 2^(t-1)``.  An honest device clips its whole upload
  (rows and dense, real units) to the L2 norm ``C2 = T / (c 2^f)``, ``c =``
  :data:`CLIP_MARGIN` ``= sqrt(40.5)``, before encoding (:func:`clip_upload`; scaled down only
  when over).  A projection's entries are sub-Gaussian with variance proxy 1/2, so an honest
  projection reaches ``T`` in absolute value with probability at most ``2 e^(-T^2 / ||x||^2) =
  2 e^-40.5`` (the encoding's rounding adds at most ``sqrt(N) / 2`` ring units to ``||x||``, ``N``
  the coordinates the device fills -- a zero encodes exactly -- at most ``S w + P``; far below
  ``T / c``): an honest device fails with probability at most ``2 * 40 * e^-40.5``.
* Retrieval: the 16-byte seed ``sigma`` a device of verified uploads appends to its request to
  server 1 (relay or not: server 1 always gets a direct request) is also the range proof's
  ``seed_1`` (server 1's witness and proof shares), in streams of their own, apart from the
  sketch proof's (:mod:`secemb.fss.sketchproof`).
* Upload: unchanged.  Cuckoo layout: server 0 then draws a 16-byte challenge ``c`` for each batch
  of uploads it absorbs (one ``c`` per :meth:`handle_upload_many` call, shared by the batch's
  devices).  Full layout: each device's ``c = c_u`` is derived by both servers at its retrieval
  (:func:`~secemb.protocols.secemb.checks.bound_challenges`).  Either way server 0 hands it to the
  device only once its upload is absorbed (:meth:`SecEmbServer.challenge`).
* Proof (:meth:`SecEmbUser.bound_proof`): the device computes its party-0 keys' payload shares
  ``S_0`` (:func:`~secemb.fss.fused.payload_sums_of`, :func:`~secemb.fss.fused.payload_shares`)
  and ``S_1 = beta - S_0`` (``beta``: the rows it uploaded) -- in the full layout its share of
  the per-row contribution (:func:`contribution`) and ``S_1 = v - S_0`` (``v``: its rows added at
  its keys' points) -- its two dense shares ``d_b``, the
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
  checks against ``sigma``: it binds ``c``; full layout: and against its own ``c_u``), and ``q``
  (:meth:`SecEmbServer.bound_request`); server 1 computes its ``S_1`` from its keys and the
  correction words it absorbed, its dense share, ``b = project(c, x_1)`` and its verifier
  messages (:meth:`SecEmbServer.bound_answer`); server 0 computes its own and
  :func:`~secemb.fss.rangeproof.decide` names the devices that fail
  (:meth:`SecEmbServer.bound_rejected`): they are left out exactly like a digest mismatch (like
  a dropout), and so is a device that uploaded but sent no proof.

Full layout: each server projects its per-row share in parts, under the device's ``c_u``: its
folded part in the retrieval's walk (:func:`secemb.fss.tasks.evaluate_projected_task`), its
correction words' part and dense share at intake; it keeps the sum, :data:`ROWS` words a device,
and walks nothing at verification (where the retrieval's walk kept nothing, the gpu backend's, it
walks the device's keys then: :func:`contribution`; docs/security.md, "The challenge is derived,
per device").  Cuckoo layout: each server's payload shares come from the payload
sums its retrieval's walk keeps
(``retrieve_and_prepare(..., payload_sums=True)`` and its bucket form, through
:func:`secemb.fss.tasks.evaluate_task`, which writes them into the batch's arrays), with the
correction words it absorbed; where that walk keeps none (the gpu backend's), or the server
dropped them after the check, from a walk of the absorbed keys at verification
(:func:`payload_sums`).  They are projected as they are computed (:func:`projected_shares`): no
server forms ``x_b``.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence

import numpy as np

from secemb.errors import InvalidParameters, check_int
from secemb.fss import fused
from secemb.fss.cuckoo import NUM_HASHES
from secemb.fss.keys import PathKeys
from secemb.fss.projections import project_each, project_own_affine
from secemb.fss.rangeproof import RangeParams
from secemb.privacy.noise import ClipSpec
from secemb.protocols.base import BOUND_CHALLENGE_BYTES, RoundConfig
from secemb.protocols.secemb.sizes import DENSE_COMMIT_BYTES, U64
from secemb.randomness import SEED_BYTES
from secemb.ring import FixedPoint

__all__ = ["BOUND_RING_BITS", "CHALLENGE_BYTES", "CLIP_MARGIN", "QUERY_BYTES", "ROWS", "bound_bits", "bound_params",
           "check_bound_ring", "clip_norm", "clip_upload", "context", "contexts", "contribution", "dense_commitment",
           "layout_bits", "multiplicity", "payload_share", "payload_sums", "projected", "projected_shares",
           "upload_vector"]

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
#: ``c`` of the honest clip ``C2 = T / (c 2^f)`` (:func:`clip_norm`): ``c = sqrt(40.5)``.  A
#: projection entry ``r = (e_1 + e_2) / 2`` (``e_i`` independent signs: -1, 0, +1 with probabilities
#: 1/4, 1/2, 1/4) has ``E exp(s r) = cosh(s / 2)^2 <= exp(s^2 / 4)``: sub-Gaussian with variance proxy
#: 1/2.  So ``<r, x>`` has ``E exp(s <r, x>) <= exp(s^2 ||x||^2 / 4)`` and, by Chernoff at
#: ``s = 2 T / ||x||^2``, ``P(|<r, x>| >= T) <= 2 exp(-T^2 / ||x||^2)``: ``2 e^(-c^2) = 2 e^-40.5`` for
#: ``||x||_2 <= T / c`` (Hoeffding's ``2 exp(-T^2 / (2 ||x||^2))`` for entries in ``[-1, 1]`` needed
#: ``c = 9`` for the same), ``2 ROWS e^-40.5 < 2^-52`` a device over the :data:`ROWS` projections
#: (the encoding's rounding, at most ``sqrt(N) / 2`` ring units on ``||x||`` for ``N`` filled
#: coordinates, moves the exponent by less than 0.1 % at the sizes of docs/security.md).
CLIP_MARGIN = math.sqrt(40.5)
_MULTIPLICITY = {"cuckoo": NUM_HASHES, "full": 1}
_CONTEXT_DOMAIN = b"secemb-bound-proof"
_DENSE_DOMAIN = b"secemb-bound-dense"


def bound_bits(ring_bits: int, values: int) -> int:
    """``t = floor(log2((2^(k-1) - 1) / N))``: ``N = values`` values in ``(-2^t, 2^t)`` sum without
    wrapping in ``Z_2^k``.

    Raises
    ------
    InvalidParameters: ``values`` is not an int >= 1, or ``t`` is outside ``[2, k - 2]``.
    """
    values = check_int("values", values, low=1)
    t = (((1 << (ring_bits - 1)) - 1) // values).bit_length() - 1  # floor(log2(floor(x))) = floor(log2(x))
    if not 2 <= t <= ring_bits - 2:
        raise InvalidParameters(f"{values} values leave no bound in Z_2^{ring_bits} (t = {t})")
    return t


def multiplicity(layout: str) -> int:
    """``h``: how many coordinates of a device's proven vector ``x`` add into one coordinate of
    the aggregate.  Cuckoo: :data:`~secemb.fss.cuckoo.NUM_HASHES`, since an item sits in up to that
    many buckets and a device may give the item's point to its key of each (an honest device uses
    one); ``x`` holds each key's payload.  Full: 1, since ``x`` holds the device's contribution to
    each table row itself (:func:`contribution`), whatever its keys' points.

    Raises
    ------
    InvalidParameters: an unknown layout.
    """
    if layout not in _MULTIPLICITY:
        raise InvalidParameters(f"unknown layout {layout!r}")
    return _MULTIPLICITY[layout]


def layout_bits(ring_bits: int, users: int, *, layout: str) -> int:
    """``t = bound_bits(ring_bits, users * h)`` (``h = multiplicity(layout)``): a round of ``users``
    devices adds at most ``users * h`` proven coordinates, each below ``2^t`` in absolute value,
    into one coordinate of the aggregate, so ``n h 2^t <= 2^(k-1) - 1`` keeps it from wrapping.

    Raises
    ------
    InvalidParameters: ``users`` is not an int >= 1, an unknown layout, or no ``t`` in ``[2, k - 2]``.
    """
    users, h = check_int("users", users, low=1), multiplicity(layout)
    try:
        return bound_bits(ring_bits, users * h)
    except InvalidParameters:
        raise InvalidParameters(f"{users} users of the {layout} layout ({h} proven values a row each) leave no "
                                f"bound in Z_2^{ring_bits}") from None


def bound_params(config: RoundConfig, users: int) -> RangeParams:
    """The range proof's parameters of a round of ``users`` users: :data:`ROWS` values of
    ``t = layout_bits(config.ring_bits, users, layout=config.layout)`` bits.

    Raises
    ------
    InvalidParameters: as :func:`check_bound_ring`.
    """
    return _range_params(ROWS, check_bound_ring(config.ring_bits, users, layout=config.layout), config.ring_bits)


#: one :class:`~secemb.fss.rangeproof.RangeParams` of each shape a process uses (its sizes, cached properties,
#: computed once, not in every round's new instance: a dozen of them a check)
_range_params = functools.lru_cache(maxsize=32)(RangeParams)


def check_bound_ring(ring_bits: int, users: int, *, layout: str) -> int:
    """``t = layout_bits(ring_bits, users, layout=layout)`` of bounded payloads on the
    ``ring_bits``-bit ring.

    Raises
    ------
    InvalidParameters: the ring is not the :data:`BOUND_RING_BITS`-bit ring, or :func:`layout_bits`
        refuses.
    """
    if ring_bits != BOUND_RING_BITS:
        raise InvalidParameters(f"bounded payloads need the {BOUND_RING_BITS}-bit ring, got {ring_bits}")
    return layout_bits(ring_bits, users, layout=layout)


def clip_norm(fp: FixedPoint, users: int, *, layout: str) -> float:
    """``C2 = T / (c 2^f)``, ``T = 2^(t-1)`` with ``t = layout_bits(fp.ring_bits, users,
    layout=layout)`` and ``c`` :data:`CLIP_MARGIN`: the L2 norm (real units) an honest device clips
    its whole upload to."""
    t = layout_bits(fp.ring_bits, users, layout=layout)
    return float(1 << (t - 1)) / (CLIP_MARGIN * 2.0**fp.frac_bits)


def clip_upload(fp: FixedPoint, users: int, rows: np.ndarray, dense: np.ndarray, *,
                layout: str) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, dense)`` (real units) scaled together by ``min(1, C2 / ||(rows, dense)||_2)``
    (:func:`clip_norm`, :meth:`~secemb.privacy.noise.ClipSpec.clip`): what an honest device
    encodes when bounds are on."""
    return ClipSpec(clip_norm(fp, users, layout=layout)).clip(rows, dense)


def context(round_id: int, challenge: bytes, key_digest: bytes) -> bytes:
    """The proof's context: ``b"secemb-bound-proof" || u64 round_id || c || K`` with ``c`` the
    challenge and ``K`` the device's key digest (:func:`~secemb.protocols.secemb.checks.key_digests`:
    both servers hold it, and it differs between devices)."""
    return contexts(round_id, [challenge], [key_digest])[0]


def contexts(round_id: int, challenges: Sequence[bytes], key_digests: Sequence[bytes]) -> list[bytes]:
    """:func:`context` of each device of a round, ``challenges[i]`` and ``key_digests[i]`` in order
    (a server's batch: the head ``b"secemb-bound-proof" || u64 round_id`` made once)."""
    head = _CONTEXT_DOMAIN + U64.pack(round_id)
    return [head + bytes(c) + bytes(k) for c, k in zip(challenges, key_digests, strict=True)]


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


def contribution(config: RoundConfig, party: int, path: PathKeys, cw: np.ndarray) -> np.ndarray:
    """Full layout: party ``party``'s share of one device's contribution to the aggregate, ring
    (m, w): its keys' aggregation outputs summed per table row (keys that share a point add
    together there), :meth:`~secemb.fss.fused.PreparedAggregation.apply` of
    :func:`~secemb.fss.fused.aggregation_of` of its ``S`` path keys ``path`` with its aggregation
    correction words ``cw`` (ring (S, w)).

    Raises
    ------
    InvalidParameters: the cuckoo layout (whose proven vector is per key, :func:`payload_share`).
    """
    if config.layout != "full":
        raise InvalidParameters("a contribution per row is the full layout's proven vector")
    return fused.aggregation_of(path, party, config.width, ring_bits=config.ring_bits).apply(cw)


def upload_vector(payload: np.ndarray, dense: np.ndarray) -> np.ndarray:
    """``x_b = S_b || d_b`` of devices: their payload shares (ring (n, S, w): cuckoo, per key) or
    contribution shares (ring (n, m, w): full, per row, :func:`contribution`) flattened and their
    dense shares (ring (n, P)), ring (n, S w + P) or (n, m w + P)."""
    n = payload.shape[0]
    return np.concatenate([payload.reshape(n, math.prod(payload.shape[1:])),
                           dense.reshape(n, math.prod(dense.shape[1:]))], axis=1)


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
    (:func:`~secemb.fss.projections.project_affine`); ring (n, ROWS), the same elements.  The arrays are the
    server's own (its walk's sums, the correction words it absorbed, its dense shares: the round fixes their
    dtypes and shapes), so they go to :func:`~secemb.fss.projections.project_own_affine`, which does not check
    them again in Python (its compiled kernel refuses shapes that do not match)."""
    parts = [(s.key_conv, s.t_count, cw, d) for s, cw, d in zip(sums, cws, dense, strict=True)]
    return project_own_affine(challenges, check_int("party", party, low=0, high=1) == 1, parts, ROWS)
