"""The sketch check's proof: every key's sketch has ``A_k^2 = B_k C_k`` (hazmat layer; issue 34 (a)).

The statement, per device and round
-----------------------------------
For each of its ``K`` keys the servers hold additive shares in ``F_p`` (``p = 2^61 - 1``,
:mod:`secemb.fss.field`) of ``x_k = (A_k, B_k, C_k)``: server 0 its own sketch ``(A_0, B_0, C_0)``,
server 1 minus its own, ``(-A_1, -B_1, -C_1)`` (the sketches are :mod:`secemb.fss.sketch`'s, under
the device's 16-byte seed ``c_u``).  A key whose two leaf words differ at one position at most has
``x_k = (r z, r^2 z, z)`` and so ``A_k^2 = B_k C_k``; the device, which knows ``x`` (it holds both
leaf words where they differ), proves that this holds for every key, revealing nothing else.  ``x``
itself is never sent (it would reveal the position, ``r = A / C``): the servers' shares are their
own sketches.

Fully linear proof (Boneh, Boyle, Corrigan-Gibbs, Gilboa, Ishai, CRYPTO 2019), as
:mod:`secemb.fss.rangeproof`'s with a degree-2 gadget
-------------------------------------------------------------------------------------------------
Keys are laid out ``M = ceil(K / c)`` calls of ``c`` slots (:attr:`SketchParams.chunk`), key ``k =
j c + i`` in slot ``i`` of call ``j`` (zero keys pad the last call).  The gadget takes the ``L = 3c``
wires ``(A, B, C)`` of a call's keys, ``G_s(y) = sum_i s_i (y_3i^2 - y_3i+1 y_3i+2)``, and the
circuit is ``sum_j r_j G_s(call j)``, zero for an honest device (a padding key adds ``0^2 - 0 0 =
0``).  The coefficients ``r`` (``M``) and ``s`` (``c``) are uniform field elements from the seed:
``SHAKE-128(domain || "coefficients" || c_u)``, 16 bytes an element reduced mod ``p``
(:func:`secemb.fss.field.xof`).  They need no Fiat-Shamir: ``c_u`` is drawn by the servers after the
device's leaf words are fixed, and the sketches use other outputs of it (``r_x`` and the AES key:
:mod:`secemb.fss.sketch`'s ``SHAKE-128(b"secemb-sketch-expand" || c_u)``, a different prefix), so
``(r, s)`` are independent of every ``A_k^2 - B_k C_k``.

Wire ``j``'s polynomial ``f_j`` has degree ``M + 1``: its values at the nodes ``1..M`` are the calls'
inputs, at the nodes ``0`` and ``M + 1`` two uniformly random seeds the prover picks.  The proof is
the ``2L`` seeds (those of node 0, then those of node ``M + 1``) and the gadget polynomial ``g =
G_s(f_0, .., f_(L-1))`` (degree ``2M + 2``) as its values at the nodes ``0..2M+2``: ``6c + 2M + 3``
elements (:attr:`SketchParams.proof_length`).  ``g(1..M)`` are the calls' outputs, so the circuit's
output ``z = sum_j r_j g(j + 1)`` is linear in the proof.

Shares and messages
-------------------
The device shares the proof ``pi`` additively: server 1's share is the expansion of a 16-byte
secret ``sigma`` the device sends server 1 (:func:`server1_shares`), server 0's is ``pi0 = pi -
share_1``, sent as ``8 |pi|`` bytes, little-endian elements below ``p`` (:func:`prove`,
:func:`parse`).  With the range proof (``bound``) the device sends server 1 one seed for both
proofs: the range proof expands ``sigma`` itself (:func:`secemb.fss.field.expand`), this proof
expands ``SHA-256(domain || "share" || sigma)[:16]`` (:func:`share_seed`), an independent stream of
the same secret (SHA-256 as a random oracle).

Queries and decision
--------------------
Each device is queried at two distinct points ``rho_1, rho_2`` outside the nodes ``0..2M+2``, from
SHAKE-128 of its 16-byte query seed ``q`` (as :func:`secemb.fss.rangeproof`'s ``_query``; the
protocol derives ``q`` from a round secret the device never sees, so it is unpredictable to the
device and fixed independently of its proof).  Server ``b``'s verifier message for a device is its
shares of ``z``, then for each point the ``L`` wire values ``f_j(rho_q)`` and ``g(rho_q)`` (Lagrange
interpolation: linear in the shares): ``2L + 3`` elements (:func:`verifier_messages`).  Both shares
are computed the same way (the circuit has no constant term).  :func:`decide` adds the two messages
and accepts iff ``z = 0`` and ``G_s(f(rho_q)) = g(rho_q)`` at both points.  The messages travel as
``8 (2L + 3)`` bytes a device (:func:`encode_verifier_messages`); a device server 1 refuses to answer
(its binding ``tau`` did not match) is sent as the same number of ``0xff`` bytes, which no answer
can be (each word would be ``2^64 - 1 >= p``), and :func:`parse_verifier_messages` reports it.

Soundness (both servers honest)
-------------------------------
Fix the shares of ``x`` and the proof (both are fixed before ``q`` is known).  If ``g`` is not
``G_s(f)``, both ``rho_q`` are roots of a non-zero polynomial of degree at most ``2M + 2``:
probability below ``((2M + 2) / (p - 2M - 3))^2`` (below ``2^-110`` at ``M = 28``).  If ``g =
G_s(f)``, ``z = sum_j r_j sum_i s_i (A_ji^2 - B_ji C_ji)``; if some ``A^2 != BC``, by Schwartz-Zippel
over ``(r, s)`` (independent of ``x``, above) ``z = 0`` with probability at most ``2/p``.
docs/security.md ("A sound sketch with the challenge drawn at retrieval") adds the sketch's own
errors: at most ``6/p + 2^-110`` a device and round.

Zero knowledge
--------------
Against one honest-but-curious server, for an honest device: its proof share is uniform (a fresh
seed's expansion, or ``pi`` minus one), its input share is its own sketch, and of the other
server's verifier message the ``z`` share is minus its own (``z = 0``), the opened ``f_j(rho_q)``
are uniform (each wire has two random seeds and ``rho_q`` are not nodes:
:mod:`secemb.fss.rangeproof`'s argument) and ``g(rho_q) = G_s(f(rho_q))`` is determined by them.
The argument covers one verification of a proof: a second query seed's answer gives each wire
polynomial two more values, more than its seeds mask, and reveals ``x``.  A server answers each
proof once.  ``x`` enters only the masked wires (no unmasked relation share, as the range proof's
``e``), so server 1's messages under two query seeds of the same proof differ only in the masked
values and in ``g(rho_q)``; ``z`` does not depend on ``q``.

Costs
-----
At ``K = 250`` (ML-100K, cuckoo): ``c = 9``, ``M = 28``, a proof of 113 elements (904 bytes to
server 0), verifier messages of 57 elements (456 bytes) a device.  At ``K = 200`` (full layout):
``c = 8``, ``M = 25``, 101 elements (808 bytes), 51 (408 bytes).  The prover extends its wires
to the nodes ``M+2..2M+2``: in the numpy reference by one ``(M + 1) x (M + 2)`` by ``(M + 2) x L``
product, with the compiled kernels by finite differences, additions only, in one call that also
checks ``A^2 = B C``, reduces the seeds and subtracts server 1's stream
(:func:`secemb.fss._sketchproof_kernels.prove_core`; the same bytes); the verifiers
compute per device two Lagrange rows over the wire nodes and two over the gadget nodes (its own
points) and ``O((M + 2) L)`` multiply-adds.  With the compiled kernels
(:func:`secemb.fss.kernels.compiled`) those run in one pass over the batch
(:func:`secemb.fss._sketchproof_kernels.messages_core`, :func:`~secemb.fss._sketchproof_kernels.decide_core`),
otherwise as numpy's batched products (the reference), the same field elements.  At ``K = 250``
and 20 devices, both servers' messages and the decision (parsing, server 1's expansion, the wire
bytes included) took about 0.8-0.9 ms with the compiled pass against 1.6-1.7 ms with the numpy
arithmetic, whose products alone took 0.7-1.2 ms against 0.1 ms; :func:`prove` (the coefficients'
SHAKE, the seeds' draw and server 1's expansion included) 0.04 ms a device compiled against
0.42-0.46 ms with the numpy arithmetic (rounds alternated in one run; session 29, helper B, 2 cores
under load).  A simulated round's devices prove as one batch (:func:`prove_many`, their inputs
:func:`secemb.fss.sketch.device_inputs_many`): at ``K = 250`` and 94 devices 15.7 us a device
against 24.8 us for ``prove`` one by one, 7.3 against 20.0 us for the inputs (medians of 15
alternated rounds, thread CPU; session 30, helper G, load 5 on 2 cores).  The servers' steps
then ran per device in Python (a SketchParams built, an HMAC, a SHA-256, a message check each);
they now run a batch at a time (:func:`well_formed` at intake, :func:`server1_shares`' two hash
batches and one stream pass, :func:`verify` drawing the
coefficients once, the Lagrange rows in one compiled pass): in ``bench robust``'s checked rounds
(ML-100K cuckoo with relay, 20 devices; thread CPU, medians of 15 rounds, 3 alternating runs of
each tree, under load 4-5) server 0's intake 1.05-1.10 -> 0.61-0.74 ms (0.6-0.7 ms without the
check), ``verify_answer`` 0.79-0.89 -> 0.64-0.71 ms, ``verify_rejected`` 0.67-0.73 -> 0.43-0.50 ms;
what was left was mostly each device's SHAKE-128 calls (coefficients, query points), server 1's
stream and the servers' input shares.  Since session 32 the SHAKE-128 outputs of a batch are one
:func:`secemb.fss.hashing.shake128_many` call (the Keccak kernel, eight devices a permutation), the
query points are reduced in one compiled pass (:func:`secemb.fss._sketchproof_kernels.query_points`),
the Lagrange rows take the points as their innermost loop, and server 1's stream is shifted and
searched for ``p`` in one pass: on the calls of a captured ``bench robust`` bounded round (20
devices, 300 repeats, 3 alternating processes of each tree; helper G, 2 shared cores under load 6.5)
:func:`verifier_messages` 113 against 190 us (minimum; medians 120 against 211), :func:`verify` 120
against 199 (128 against 210), :func:`server1_shares` 33 against 48.  Since session 33 each of
:func:`verifier_messages` and :func:`verify` is one compiled call after the two SHAKE-128 batches
(:func:`secemb.fss._sketchproof_kernels.verifier_core`, :func:`~secemb.fss._sketchproof_kernels.verify_core`:
the coefficients' reduction, the points, the Lagrange rows, the messages and the decision, the same
kernels in the same order), the other server's messages are read in one pass
(:func:`~secemb.fss._sketchproof_kernels.verifier_words`), :func:`parse` joins a well-sized batch
once and the servers' input shares are stacked, checked and negated in one pass
(:func:`secemb.fss.sketch.server_inputs_many`): on a captured ``bench robust`` bounded round (20
devices, caches flushed before each call, 400 calls of each tree alternated in one process; helper
Q, 2 shared cores under load 9-10) the server's ``verify_answer`` 0.926 and ``verify_rejected``
0.825 of the session-32 code's thread CPU (medians of the paired ratios).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, check_int
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss.hashing import row_bytes, sha256_many, shake128_many
from secemb.fss.sketch import SKETCH_SEED_BYTES  # c_u's length, and the query seed q's (HMAC-SHA256 cut to it)
from secemb.randomness import DRBG_DOMAIN, SEED_BYTES, RandomBytes, drbg_key, system_rng

__all__ = [
    "SketchParams",
    "share_seed",
    "prove",
    "prove_many",
    "check_message",
    "well_formed",
    "parse",
    "server1_shares",
    "verifier_messages",
    "encode_verifier_messages",
    "parse_verifier_messages",
    "decide",
    "verify",
]

_DOMAIN = b"secemb/fss/sketchproof/v1/"
_P = np.uint64(F.P)
#: ``n`` 16-byte seeds (sketch seeds, query seeds, ``sigma``): ``bytes``, or their rows uint8 (n, 16)
#: (a server's own batch, read as they are)
Seeds = Sequence[bytes] | np.ndarray
_REFUSED = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
#: the prefix of :func:`share_seed`'s hash
_SHARE_DOMAIN = _DOMAIN + b"share"


@dataclass(frozen=True)
class SketchParams:
    """Sizes of the proof for ``keys`` keys a device (module docstring).  The sizes are plain
    properties of one cached computation a ``keys`` (:func:`_sizes`): servers build the parameters
    of a round's config once a call or message, so building and reading them costs no lock and no
    arithmetic.

    Raises
    ------
    InvalidParameters
        If ``keys`` is not a positive int.
    """

    keys: int

    def __post_init__(self) -> None:
        check_int("keys", self.keys, low=1)

    @property
    def chunk(self) -> int:
        """Keys per gadget call ``c``: the least ``c`` that minimizes the proof length ``6c + 2
        ceil(K / c) + 3`` (about ``sqrt(K / 3)``)."""
        return _sizes(self.keys)[0]

    @property
    def calls(self) -> int:
        """Gadget calls ``M = ceil(K / c)``."""
        return _sizes(self.keys)[1]

    @property
    def wires(self) -> int:
        """Gadget inputs ``L = 3c``: ``(A, B, C)`` of each slot's key."""
        return 3 * _sizes(self.keys)[0]

    @property
    def gadget_nodes(self) -> int:
        """Values of the gadget polynomial (degree ``2M + 2``) in the proof: ``2M + 3``."""
        return 2 * _sizes(self.keys)[1] + 3

    @property
    def proof_length(self) -> int:
        """Field elements of the proof: ``2L`` wire seeds and the gadget polynomial's values."""
        return 2 * self.wires + self.gadget_nodes

    @property
    def proof_bytes(self) -> int:
        """Bytes of server 0's proof share ``pi0`` (the device's message), 8 an element."""
        return F.ELEMENT_BYTES * self.proof_length

    @property
    def verifier_length(self) -> int:
        """Field elements of a verifier message: ``2L + 3`` (``z``, then per query point the ``L``
        wire values and the gadget value)."""
        return 2 * self.wires + 3

    @property
    def verifier_bytes(self) -> int:
        """Bytes of one device's verifier message, 8 an element."""
        return F.ELEMENT_BYTES * self.verifier_length


@cache
def _sizes(keys: int) -> tuple[int, int]:
    """``(c, M)`` of :class:`SketchParams` for ``K = keys`` (computed once a ``K``)."""
    chunk = _chunk(keys)
    return chunk, -(-keys // chunk)


def _chunk(keys: int) -> int:
    """:attr:`SketchParams.chunk` for ``K = keys``: ``h(c) = 6c + 2 ceil(K / c)`` exceeds ``6c``, and
    at ``c0 = isqrt(K) + 1`` it is below ``6 c0 + 2 c0 + 2``, so no ``c > 2 c0`` does better."""
    c0 = math.isqrt(keys) + 1
    return min(range(1, 2 * c0 + 1), key=lambda c: 6 * c + 2 * -(-keys // c))


def _seed(name: str, value: object, size: int = SKETCH_SEED_BYTES) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != size:
        raise InvalidParameters(f"{name} must be {size} bytes")
    return bytes(value)


def _seeds(name: str, values: Sequence[bytes], n: int, size: int = SKETCH_SEED_BYTES) -> list[bytes]:
    if len(values) != n:
        raise InvalidParameters(f"{name}: expected {n} seeds, got {len(values)}")
    if set(map(type, values)) <= {bytes} and set(map(len, values)) <= {size}:  # a server's own: as they are
        return list(values)
    return [_seed(f"{name}[{i}]", v, size) for i, v in enumerate(values)]


def _checked_rows(name: str, values: Seeds, n: int, size: int = SKETCH_SEED_BYTES) -> np.ndarray:
    """``n`` seeds of ``size`` bytes as the rows of uint8 (n, size), checked: rows given (a server's
    own, e.g. :func:`secemb.protocols.secemb.checks.query_seed_rows`) by their dtype and shape, as
    they are; ``bytes`` by :func:`_seeds` (its errors), then joined."""
    if isinstance(values, np.ndarray):
        if values.dtype != np.uint8 or values.shape != (n, size):
            raise InvalidParameters(f"{name}: expected {n} seeds as uint8 ({n}, {size}), got {values.dtype} "
                                    f"{values.shape}")
        return values
    return np.frombuffer(b"".join(_seeds(name, values, n, size)), np.uint8).reshape(n, size)


def share_seed(sigma: bytes) -> bytes:
    """The 16-byte seed whose expansion (:func:`secemb.fss.field.expand`) is server 1's proof share,
    for the device's secret ``sigma``: ``SHA-256(domain || "share" || sigma)[:16]``, so that the
    range proof's expansion of the same ``sigma`` is an independent stream.

    Raises
    ------
    InvalidParameters
        If ``sigma`` is not 16 bytes.
    """
    return hashlib.sha256(_SHARE_DOMAIN + _seed("sigma", sigma, SEED_BYTES)).digest()[:SEED_BYTES]


def _share_keys(sigma_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the devices' 16-byte ``sigma`` (the rows of uint8 (n, 16)): their :func:`share_seed`
    (uint8 (n, 16)) and those seeds' AES-256 stream keys (:func:`secemb.randomness.drbg_key`,
    uint8 (n, 32)), each one :func:`secemb.fss.hashing.sha256_many` batch: what :func:`prove_many`
    and :func:`server1_shares` key server 1's streams with."""
    seeds = np.ascontiguousarray(sha256_many(_SHARE_DOMAIN, sigma_rows)[:, :SEED_BYTES])
    return seeds, sha256_many(DRBG_DOMAIN, seeds)


def _coefficients(params: SketchParams, seeds: Seeds) -> tuple[np.ndarray, np.ndarray]:
    """``r`` ``uint64 (n, M)`` on the calls and ``s`` ``uint64 (n, c)`` on the slots, per device seed
    ``c_u``: uniform field elements, :func:`secemb.fss.field.xof` of ``domain || "coefficients" ||
    c_u`` (one SHAKE-128 call a device, reduced as one batch)."""
    m, width = params.calls, params.calls + params.chunk
    words = _coefficient_words(params, seeds)
    if kernels.compiled():  # the same elements in one compiled pass
        from secemb.fss._sketchproof_kernels import reduce_words

        out = np.empty((len(seeds), width), np.uint64)
        reduce_words(words.reshape(-1), out.reshape(-1))
    else:
        out = F.from_uniform_bytes(words.reshape(-1), len(seeds) * width).reshape(len(seeds), width)
    return out[:, :m], out[:, m:]


def _seed_rows(seeds: Seeds) -> np.ndarray:
    """The 16-byte seeds as the rows of uint8 (n, 16) (rows given: as they are)."""
    if isinstance(seeds, np.ndarray):
        return seeds
    return np.frombuffer(b"".join(seeds), np.uint8).reshape(len(seeds), SKETCH_SEED_BYTES)


def _coefficient_words(params: SketchParams, seeds: Seeds) -> np.ndarray:
    """``uint64 (n, 2 (M + c))``: per device seed, the ``16 (M + c)`` bytes of SHAKE-128 of ``domain ||
    "coefficients" || seed`` as little-endian words, whose 16-byte integers, reduced mod ``p``, are
    :func:`_coefficients`' ``r || s``; the devices' outputs one
    :func:`~secemb.fss.hashing.shake128_many` batch."""
    data = shake128_many(_DOMAIN + b"coefficients", _seed_rows(seeds), 16 * (params.calls + params.chunk))
    return data.view("<u8").astype(np.uint64, copy=False)


def _calls(params: SketchParams, x: np.ndarray) -> np.ndarray:
    """``uint64 (n, M, L)``: the sketch (shares) ``x`` ``(n, K, 3)`` as the calls' wires, zero keys
    after ``K``."""
    n = len(x)
    padded = np.zeros((n, params.calls * params.chunk, 3), np.uint64)
    padded[:, : params.keys] = x
    return padded.reshape(n, params.calls, params.wires)


def _gadget(wires: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``G_s`` along the last axis (length ``L = 3c``), ``s`` ``(..., c)`` broadcast against the slots."""
    y = wires.reshape(*wires.shape[:-1], wires.shape[-1] // 3, 3)
    terms = F.sub(F.mul(y[..., 0], y[..., 0]), F.mul(y[..., 1], y[..., 2]))
    return F.dot(s, terms)


@cache
def _extension(params: SketchParams) -> np.ndarray:
    """The prover's wire extension: Lagrange rows ``(M + 1, M + 2)`` of the nodes ``M+2..2M+2`` over
    the wire nodes ``0..M+1`` (read-only)."""
    n_wire = params.calls + 2
    rows = F.lagrange_coefficients(n_wire, np.arange(n_wire, params.gadget_nodes, dtype=np.uint64))
    rows.setflags(write=False)
    return rows


def _check_inputs(params: SketchParams, name: str, x: object, n: int | None) -> np.ndarray:
    """``x`` as ``uint64 (n, K, 3)`` (``(K, 3)`` when ``n`` is None) of field elements, or InvalidParameters."""
    shape = (params.keys, 3) if n is None else (n, params.keys, 3)
    if not isinstance(x, np.ndarray) or x.dtype != np.uint64 or x.shape != shape:
        got = f"{x.dtype} {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise InvalidParameters(f"{name} must be a uint64 array {shape}, got {got}")
    if x.size and x.max() >= _P:
        raise InvalidParameters(f"{name} must hold field elements (below p)")
    return x


def _prove_inputs(params: SketchParams, x: np.ndarray, seed: bytes, sigma: bytes, rng: RandomBytes) -> np.ndarray:
    """The proof (``uint64 (proof_length,)``, unshared) for any inputs ``x`` ``(K, 3)``: :func:`prove`
    without its statement check and its sharing (tests build cheating devices with it)."""
    big_l = params.wires
    _, s = _coefficients(params, [seed])
    seeds = F.from_uniform_bytes(rng(16 * 2 * big_l), 2 * big_l)
    nodes = np.concatenate([seeds[None, :big_l], _calls(params, x[None])[0], seeds[None, big_l:]])  # (M + 2, L)
    extended = F.matmul(_extension(params), nodes)  # the wires at the nodes M+2..2M+2
    g = _gadget(np.concatenate([nodes, extended]), s[0])  # (2M + 3,): the gadget polynomial at every node
    return np.concatenate([seeds, g])


def _share(params: SketchParams, proof: np.ndarray, sigma: bytes) -> bytes:
    """Server 0's share of ``proof`` as its wire bytes: ``proof`` minus server 1's expansion of ``sigma``."""
    return F.to_bytes(F.sub(proof, F.expand(share_seed(sigma), params.proof_length)))


def prove(params: SketchParams, x: np.ndarray, seed: bytes, sigma: bytes, *,
          _rng: RandomBytes = system_rng) -> bytes:
    """The device's proof that every key's ``x_k = (A, B, C)`` has ``A^2 = B C``: server 0's share
    ``pi0`` (``params.proof_bytes`` bytes); server 1's is the expansion of ``sigma``.

    Parameters
    ----------
    x:
        ``uint64 (K, 3)`` field elements: per key ``(A, B, C)``, the difference of the two servers'
        sketches (:mod:`secemb.fss.sketch`'s device inputs).
    seed:
        The device's 16-byte sketch seed ``c_u`` of the round (the coefficients come from it).
    sigma:
        The 16-byte secret the device sends server 1 (with ``bound``, the range proof's seed too:
        :func:`share_seed` keeps the streams apart).
    _rng:
        Source of the secret randomness (the wire seeds; tests only); :func:`os.urandom` by default.

    Raises
    ------
    InvalidParameters
        If ``x`` is not ``uint64 (K, 3)`` field elements, a seed is not 16 bytes, or some key has
        ``A^2 != B C`` (an honest device never proves a false statement).
    """
    x = _check_inputs(params, "x", x, None)
    seed, sigma = _seed("seed", seed), _seed("sigma", sigma, SEED_BYTES)
    if kernels.compiled():  # the same bytes as the numpy reference below in one compiled call
        pi0, bad = _prove_compiled(params, x, seed, sigma, _rng)
        _refuse_unequal(bad)
        return pi0
    return _prove_reference(params, x, seed, sigma, _rng)


def _prove_reference(params: SketchParams, x: np.ndarray, seed: bytes, sigma: bytes, rng: RandomBytes,
                     device: int | None = None) -> bytes:
    """:func:`prove` of checked arguments in numpy (the ``device``-th of :func:`prove_many`'s batch, if given)."""
    unequal = np.flatnonzero(F.mul(x[:, 0], x[:, 0]) != F.mul(x[:, 1], x[:, 2]))
    _refuse_unequal(int(unequal[0]) if unequal.size else -1, device)
    return _share(params, _prove_inputs(params, x, seed, sigma, rng), sigma)


def _refuse_unequal(key: int, device: int | None = None) -> None:
    """Raise InvalidParameters if ``key`` (the first key with ``A^2 != B C``, or -1) is one (of the
    ``device``-th device of a batch, if given)."""
    if key >= 0:
        which = f"key {key}" if device is None else f"device {device}'s key {key}"
        raise InvalidParameters(f"sketchproof: {which} has A^2 != B C; an honest device does not prove it")


def _prove_compiled(params: SketchParams, x: np.ndarray, seed: bytes, sigma: bytes,
                    rng: RandomBytes) -> tuple[bytes, int]:
    """``pi0`` (:func:`prove`'s bytes, whatever ``x``) and the first key with ``A^2 != B C`` (or -1),
    by :func:`secemb.fss._sketchproof_kernels.prove_core`: the coefficients' SHAKE output, the wire
    seeds' bytes (one ``rng`` call, as :func:`_prove_inputs`) and server 1's AES-CTR stream
    (:func:`secemb.fss._rangeproof_kernels.ctr_streams` under ``drbg_key(share_seed(sigma))``, the
    stream :func:`secemb.fss.field.expand` reads) go in raw (:func:`_prove_drawn`)."""
    coefficients = _coefficient_words(params, [seed])[0]
    wire_words = np.frombuffer(rng(16 * 2 * params.wires), "<u8")
    key = np.frombuffer(drbg_key(share_seed(sigma)), np.uint8).reshape(1, 32)
    return _prove_drawn(params, x, coefficients, wire_words, key, F.ELEMENT_BYTES * params.proof_length)


def _prove_drawn(params: SketchParams, x: np.ndarray, coefficients: np.ndarray, wire_words: np.ndarray,
                 key: np.ndarray, nbytes: int) -> tuple[bytes, int]:
    """:func:`_prove_compiled` of its drawn inputs (``key`` uint8 (1, 32) server 1's AES-256 key),
    server 1's stream drawn ``nbytes`` long first; a stream too short for the skipped words (each
    ``2^-61``) is drawn again twice as long, as ``expand`` does."""
    kernel, ctr = _prover_kernels()
    out = np.empty(params.proof_length, np.uint64)
    span = 16 * ctr.CTR_BLOCKS
    while True:
        buf = np.empty(-(-nbytes // span) * span, np.uint8)
        ctr.ctr_streams(key, buf, nbytes, nbytes)
        status = kernel.prove_core(np.ascontiguousarray(x), coefficients, wire_words, params.calls,
                                   buf[:nbytes].view(np.uint64), params.chunk, out)
        if status != kernel.SHORT:
            return out.tobytes(), status
        nbytes *= 2


@cache
def _prover_kernels() -> tuple[ModuleType, ModuleType]:
    """The compiled prover's modules, imported once a process, not once a proof:
    :mod:`secemb.fss._sketchproof_kernels` (``prove_core``, ``prove_many_core``, ``SHORT``) and
    :mod:`secemb.fss._rangeproof_kernels` (``ctr_streams``, ``CTR_BLOCKS``: server 1's stream); the
    functions are read from them at each call (a wrapper installed as a module's attribute, a
    timing clock's or a test's, sees them)."""
    from secemb.fss import _rangeproof_kernels, _sketchproof_kernels

    return _sketchproof_kernels, _rangeproof_kernels


def prove_many(params: SketchParams, xs: np.ndarray, seeds: Sequence[bytes], sigmas: Sequence[bytes],
               rngs: Sequence[RandomBytes]) -> list[bytes]:
    """:func:`prove` of ``n`` devices at once (a simulated round's batch): entry ``i`` is the bytes
    ``prove(params, xs[i], seeds[i], sigmas[i], _rng=rngs[i])`` returns, each device's wire seeds
    drawn from its own ``rngs[i]`` (one call each, in order).  With the compiled kernels the
    coefficients' SHAKE stays one call a device, server 1's AES-256 keys are two
    :func:`secemb.fss.hashing.sha256_many` batches, its streams one
    :func:`~secemb.fss._rangeproof_kernels.ctr_streams` pass and the proofs one
    :func:`~secemb.fss._sketchproof_kernels.prove_many_core` call (a device whose stream holds
    ``p`` too often, probability about ``2^-54``, is proved again alone on a longer stream);
    otherwise :func:`prove` device by device (the numpy reference).

    Parameters
    ----------
    xs:
        ``uint64 (n, K, 3)`` field elements: device ``i``'s sketch inputs (:func:`prove`'s ``x``).
    seeds, sigmas:
        The ``n`` devices' 16-byte sketch seeds ``c_u`` and secrets ``sigma``.
    rngs:
        The ``n`` devices' sources of secret randomness (:func:`os.urandom`-backed for a real device).

    Raises
    ------
    InvalidParameters
        If ``xs`` is not ``uint64 (n, K, 3)`` field elements for ``n`` seeds, secrets and sources, a
        seed is not 16 bytes, or some device's key has ``A^2 != B C`` (the error names the first
        such device and key).
    """
    n = len(seeds)
    xs = _check_inputs(params, "xs", xs, n)
    if len(sigmas) != n or len(rngs) != n:
        raise InvalidParameters(f"prove_many: {n} seeds, {len(sigmas)} sigmas and {len(rngs)} sources")
    seeds = _seeds("seeds", seeds, n)
    sigma_rows = b"".join(_seed(f"sigmas[{i}]", s, SEED_BYTES) for i, s in enumerate(sigmas))
    if not kernels.compiled() or not n:  # the numpy reference: device by device
        return [_prove_reference(params, x, seed, bytes(sigma), rng, i)
                for i, (x, seed, sigma, rng) in enumerate(zip(xs, seeds, sigmas, rngs, strict=True))]
    kernel, ctr = _prover_kernels()
    coefficients = _coefficient_words(params, seeds)
    wire_words = np.frombuffer(b"".join(rng(16 * 2 * params.wires) for rng in rngs), "<u8").reshape(n, 4 * params.wires)
    _, keys = _share_keys(np.frombuffer(sigma_rows, np.uint8).reshape(n, SEED_BYTES))  # drbg_key(share_seed(sigma))
    nbytes = F.ELEMENT_BYTES * params.proof_length
    buf = np.empty(n * nbytes + 16 * ctr.CTR_BLOCKS, np.uint8)  # a row's last pass may run into the next
    ctr.ctr_streams(keys, buf, nbytes, nbytes)
    out = np.empty((n, params.proof_length), np.uint64)
    status = np.empty(n, np.int64)
    kernel.prove_many_core(np.ascontiguousarray(xs), coefficients, wire_words, params.calls,
                           buf[: n * nbytes].view(np.uint64).reshape(n, params.proof_length), params.chunk, out, status)
    proofs = [row.tobytes() for row in out]
    for i in np.flatnonzero(status != -1).tolist():
        if status[i] == kernel.SHORT:  # the same wire words, server 1's stream drawn longer
            proofs[i], status[i] = _prove_drawn(params, xs[i], coefficients[i], wire_words[i], keys[i : i + 1],
                                                2 * nbytes)
        _refuse_unequal(int(status[i]), i)
    return proofs


def check_message(params: SketchParams, msg: object, index: int | None = None) -> None:
    """Refuse a device's proof share ``pi0`` (untrusted bytes; the ``index``-th of a batch, if given)
    that is not ``params.proof_bytes`` bytes of field elements below ``p``: one message at a time,
    as server 0 takes it in.

    Raises
    ------
    InvalidMessage
        If the message is malformed (the error names what came instead).
    """
    which = "" if index is None else f" {index}"
    size = F.message_nbytes(msg)
    if size != params.proof_bytes:
        got = type(msg).__name__ if size is None else f"{size} bytes"
        raise InvalidMessage(f"sketch proof{which}: expected {params.proof_bytes} bytes, got {got}")
    words = np.frombuffer(msg, dtype="<u8")  # type: ignore[call-overload]  # bytes-like, checked above
    if words.max() >= _P:
        raise InvalidMessage(f"sketch proof{which}: an element is not below p")


def well_formed(params: SketchParams, msgs: Sequence[bytes | memoryview]) -> np.ndarray:
    """``bool (n,)``: which of the ``n`` untrusted messages :func:`check_message` takes
    (``params.proof_bytes`` bytes of field elements below ``p``), read as one buffer: a batch's
    intake checks its messages in one pass, then names a refused one's fault with
    :func:`check_message`."""
    size = params.proof_bytes
    sized = list(range(len(msgs))) if F.batch_nbytes(msgs) == size else \
        [i for i, m in enumerate(msgs) if F.message_nbytes(m) == size]
    words = np.frombuffer(b"".join([msgs[i] for i in sized]), dtype="<u8").reshape(len(sized), params.proof_length)
    out = np.zeros(len(msgs), bool)
    out[sized] = words.max(axis=1, initial=0) < _P
    return out


def parse(params: SketchParams, msgs: Sequence[bytes | memoryview]) -> np.ndarray:
    """Server 0's proof shares, ``uint64 (n, proof_length)``, from the ``n`` devices' ``pi0``
    (untrusted bytes-like messages), checked and read as one buffer.

    Raises
    ------
    InvalidMessage
        If a message is not ``params.proof_bytes`` bytes or holds an element not below ``p``; the
        error names the first bad message's index (:func:`check_message`'s errors).
    """
    size = params.proof_bytes
    sized = F.batch_nbytes(msgs) == size or all(F.message_nbytes(m) == size for m in msgs)
    if sized:  # the usual batch: one join and one maximum
        words = np.frombuffer(b"".join(msgs), dtype="<u8").reshape(len(msgs), params.proof_length)
        if not words.size or words.max() < _P:
            return words.astype(np.uint64)
    bad = int(np.flatnonzero(~well_formed(params, msgs))[0])
    check_message(params, msgs[bad], bad)  # raises (it refuses what well_formed does): the first bad one's fault
    raise InvalidMessage(f"sketch proof {bad}: malformed")  # whatever check_message becomes, never the words


def server1_shares(params: SketchParams, sigmas: Seeds) -> np.ndarray:
    """Server 1's proof shares, ``uint64 (n, proof_length)``, expanded from the ``n`` devices' 16-byte
    ``sigma`` (``bytes``, or their rows uint8 (n, 16)): row ``i`` is :func:`secemb.fss.field.expand`
    of :func:`share_seed` of ``sigmas[i]``.
    With the compiled kernels the share seeds and their AES-256 keys
    (:func:`secemb.randomness.drbg_key`) are two :func:`secemb.fss.hashing.sha256_many` batches and
    the streams one :func:`secemb.fss._rangeproof_kernels.ctr_streams` pass (a row whose first
    words hold ``p``, probability about ``2^-54``, is made again by ``expand``, which skips it);
    otherwise :func:`secemb.fss.field.expand_many` of the share seeds.

    Raises
    ------
    InvalidParameters
        If a ``sigma`` is not 16 bytes (the caller checks the device's bytes at intake).
    """
    n, count = len(sigmas), params.proof_length
    digests, keys = _share_keys(_checked_rows("sigma", sigmas, n, SEED_BYTES))
    if not kernels.compiled():
        return F.expand_many(row_bytes(digests), count)
    from secemb.fss._rangeproof_kernels import CTR_BLOCKS, ctr_streams, top_bits

    size = F.ELEMENT_BYTES * count
    buf = np.empty(n * size + 16 * CTR_BLOCKS, np.uint8)  # a row's last pass may run past it (into the next row)
    ctr_streams(keys, buf, size, size)
    out = buf[: n * size].view("<u8").reshape(n, count).astype(np.uint64, copy=False)
    held = np.empty(n, bool)
    top_bits(out, held)  # the top 61 bits of each word, as expand reads them, and the rows that hold p
    for i in np.flatnonzero(held).tolist():
        out[i] = F.expand(digests[i].tobytes(), count)
    return out


def _query_words(queries: Seeds) -> np.ndarray:
    """``uint64 (n, 4)``: each device's 32 bytes of SHAKE-128 of ``domain || "query" || q`` as
    little-endian words (the devices' outputs, one :func:`~secemb.fss.hashing.shake128_many` batch),
    from which its two query points are reduced (:func:`_points`)."""
    return shake128_many(_DOMAIN + b"query", _seed_rows(queries), 32).view("<u8").astype(np.uint64, copy=False)


def _points(params: SketchParams, queries: Seeds) -> np.ndarray:
    """``uint64 (n, 2)``: each device's two query points, distinct and outside the nodes
    ``0..2M+2``, from SHAKE-128 of its query seed (as :func:`secemb.fss.rangeproof`'s query), in
    Python integers: the reference of the compiled verifier's
    (:func:`secemb.fss._sketchproof_kernels.query_points`)."""
    d = params.gadget_nodes
    m1, m2 = F.P - d, F.P - d - 1
    points: list[int] = []
    for w0, w1, w2, w3 in _query_words(queries).tolist():
        h1 = (w1 << 64 | w0) % m1
        h2 = (w3 << 64 | w2) % m2
        points += (d + h1, d + (h1 + 1 + h2) % m1)  # any non-node value but rho_1
    return np.array(points, np.uint64).reshape(len(queries), 2)


def verifier_messages(params: SketchParams, x: np.ndarray, proofs: np.ndarray, seeds: Seeds,
                      queries: Seeds) -> np.ndarray:
    """One server's verifier messages for ``n`` devices, to exchange with the other server and pass
    to :func:`decide` (server 0 and server 1 compute them the same way, each on its own shares).

    Parameters
    ----------
    x:
        ``uint64 (n, K, 3)``: this server's shares of the devices' ``x`` (server 0: its sketches
        ``(A_0, B_0, C_0)``; server 1: minus its own, ``(-A_1, -B_1, -C_1)`` mod ``p``).
    proofs:
        ``uint64 (n, proof_length)``: this server's proof shares (:func:`parse` at server 0,
        :func:`server1_shares` at server 1).
    seeds:
        The ``n`` devices' 16-byte sketch seeds ``c_u`` (``bytes``, or the rows of uint8 (n, 16)).
    queries:
        The ``n`` devices' 16-byte query seeds ``q`` (both servers hold them; no device may know
        its own before its proof is fixed), as ``seeds``.  A server answers each proof under one query seed only
        (module docstring, Zero knowledge).

    Returns
    -------
    numpy.ndarray
        ``uint64 (n, params.verifier_length)``: ``z``'s share, then for each of the two points the
        ``L`` wire shares and the gadget share.

    Raises
    ------
    InvalidParameters
        If an argument does not match ``params`` or the ``n`` devices.
    """
    x, proofs, seeds, queries = _check_verifier(params, x, proofs, seeds, queries)
    out = np.empty((len(seeds), params.verifier_length), np.uint64)
    if kernels.compiled():  # the same field elements as the numpy reference in one compiled call
        from secemb.fss._sketchproof_kernels import verifier_core

        verifier_core(*_drawn(params, x, proofs, seeds, queries), params.chunk, out)
        return out
    r, _ = _coefficients(params, seeds)
    _messages(params, x, proofs, r, queries, out)
    return out


def _check_verifier(params: SketchParams, x: object, proofs: object, seeds: Seeds,
                    queries: Seeds) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`verifier_messages`' arguments checked (its errors), the seeds as rows uint8 (n, 16)."""
    n = len(seeds)
    x = _check_inputs(params, "x", x, n)
    if (not isinstance(proofs, np.ndarray) or proofs.dtype != np.uint64
            or proofs.shape != (n, params.proof_length)):
        got = f"{proofs.dtype} {proofs.shape}" if isinstance(proofs, np.ndarray) else type(proofs).__name__
        raise InvalidParameters(f"proofs must be a uint64 array ({n}, {params.proof_length}), got {got}")
    if proofs.size and proofs.max() >= _P:
        raise InvalidParameters("proofs must hold field elements (below p)")
    return x, proofs, _checked_rows("seeds", seeds, n), _checked_rows("queries", queries, n)


def _drawn(params: SketchParams, x: np.ndarray, proofs: np.ndarray, seeds: Seeds,
           queries: Seeds) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The compiled verifier's arguments (:func:`secemb.fss._sketchproof_kernels.verifier_core`,
    :func:`~secemb.fss._sketchproof_kernels.verify_core`) before ``chunk``, of checked ones: the
    shares C-contiguous, the devices' coefficient words (:func:`_coefficient_words`) and query
    words (:func:`_query_words`), the barycentric weights of the wire and the gadget nodes."""
    return (np.ascontiguousarray(x), np.ascontiguousarray(proofs), _coefficient_words(params, seeds),
            _query_words(queries), F.barycentric(params.calls + 2), F.barycentric(params.gadget_nodes))


def _messages(params: SketchParams, x: np.ndarray, proofs: np.ndarray, r: np.ndarray, queries: Seeds,
              out: np.ndarray) -> None:
    """:func:`verifier_messages` of checked arguments in numpy (the reference), the calls'
    coefficients ``r`` ``(n, M)`` given, into ``out`` ``(n, 2L + 3)``."""
    points = _points(params, queries)
    wire_rows = F.lagrange_coefficients(params.calls + 2, points)  # (n, 2, M + 2)
    gadget_rows = F.lagrange_coefficients(params.gadget_nodes, points)  # (n, 2, 2M + 3)
    _messages_reference(params, x, proofs, r, wire_rows, gadget_rows, out)


def _messages_reference(params: SketchParams, x: np.ndarray, proofs: np.ndarray, r: np.ndarray,
                        wire_rows: np.ndarray, gadget_rows: np.ndarray, out: np.ndarray) -> None:
    """The verifier messages in numpy (batched matrix products over the devices), the reference of
    :func:`secemb.fss._sketchproof_kernels.messages_core`: shares ``x`` ``(n, K, 3)``, ``proofs``
    ``(n, proof_length)``, ``r`` ``(n, M)``, the devices' Lagrange rows over the wire nodes
    ``(n, 2, M + 2)`` and the gadget nodes ``(n, 2, 2M + 3)``; ``out`` ``(n, 2L + 3)``."""
    n, m, big_l = len(x), params.calls, params.wires
    nodes = np.empty((n, m + 2, big_l), np.uint64)  # every wire at every wire node
    nodes[:, 0], nodes[:, m + 1] = proofs[:, :big_l], proofs[:, big_l : 2 * big_l]  # the seeds at 0 and M + 1
    nodes[:, 1 : m + 1] = _calls(params, x)
    g = proofs[:, 2 * big_l :]
    out[:, 0] = F.dot(r, g[:, 1 : m + 1])
    opened = out[:, 1:].reshape(n, 2, big_l + 1)
    opened[:, :, :big_l] = F.matmul(wire_rows, nodes)
    opened[:, :, big_l] = F.dot(gadget_rows, g[:, None, :])


def encode_verifier_messages(params: SketchParams, v: np.ndarray, refused: np.ndarray | None = None) -> bytes:
    """The wire bytes of ``n`` verifier messages (``params.verifier_bytes`` a device, little-endian
    elements), a refused device's (``refused[i]`` True: server 1 does not answer its proof) as
    ``0xff`` bytes.

    Raises
    ------
    InvalidParameters
        If ``v`` is not ``uint64 (n, verifier_length)`` field elements or ``refused`` not ``bool (n,)``.
    """
    if not isinstance(v, np.ndarray) or v.dtype != np.uint64 or v.ndim != 2 or v.shape[1] != params.verifier_length:
        raise InvalidParameters(f"v must be a uint64 array (n, {params.verifier_length})")
    if v.size and v.max() >= _P:
        raise InvalidParameters("v must hold field elements (below p)")
    if refused is None:
        return F.to_bytes(v)
    if not isinstance(refused, np.ndarray) or refused.dtype != np.bool_ or refused.shape != (len(v),):
        raise InvalidParameters(f"refused must be a bool array ({len(v)},)")
    return F.to_bytes(np.where(refused[:, None], _REFUSED, v) if refused.any() else v)


def parse_verifier_messages(params: SketchParams, data: bytes, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The other server's verifier messages for ``n`` devices from their wire bytes
    (:func:`encode_verifier_messages`).

    Returns
    -------
    tuple of numpy.ndarray
        ``uint64 (n, verifier_length)`` (a refused device's row zero) and ``bool (n,)``: which
        devices the other server refused (they fail, whatever :func:`decide` says of their row).

    Raises
    ------
    InvalidMessage
        If ``data`` is not ``n * params.verifier_bytes`` bytes, or a device's message is neither
        field elements below ``p`` nor all ``0xff`` bytes.
    """
    n = check_int("n", n, low=0)
    size = F.message_nbytes(data)
    if size != n * params.verifier_bytes:
        got = type(data).__name__ if size is None else f"{size} bytes"
        raise InvalidMessage(f"sketch verifier messages: expected {n * params.verifier_bytes} bytes ({n} devices), "
                             f"got {got}")
    words = np.frombuffer(data, dtype="<u8").reshape(n, params.verifier_length)
    if kernels.compiled():  # the same rows, marks and first bad row as the numpy below in one pass
        from secemb.fss._sketchproof_kernels import verifier_words

        v, refused = np.empty((n, params.verifier_length), np.uint64), np.empty(n, bool)
        first = verifier_words(words, v, refused)
    else:
        v = words.astype(np.uint64)
        refused = np.all(v == _REFUSED, axis=1)
        v[refused] = 0
        bad = np.flatnonzero(np.any(v >= _P, axis=1))
        first = int(bad[0]) if bad.size else -1
    if first >= 0:
        raise InvalidMessage(f"sketch verifier message {first}: an element is not below p")
    return v, refused


def decide(params: SketchParams, v0: np.ndarray, v1: np.ndarray, seeds: Seeds) -> np.ndarray:
    """Whether each device's proof passes, from both servers' verifier messages and the devices'
    sketch seeds ``c_u`` (the gadget's ``s`` comes from them).

    Returns
    -------
    numpy.ndarray
        ``bool (n,)``: True where ``z = 0`` and the gadget matches at both points.

    Raises
    ------
    InvalidMessage
        If the arrays are not ``uint64 (n, params.verifier_length)`` of the same ``n``, or hold an
        element not below ``p`` (a malformed message from the other server).
    InvalidParameters
        If ``seeds`` are not ``n`` 16-byte seeds.
    """
    _check_messages(params, (("v0", v0), ("v1", v1)))
    if v0.shape != v1.shape:
        raise InvalidMessage(f"verifier messages for different batches: {v0.shape} and {v1.shape}")
    _, s = _coefficients(params, _checked_rows("seeds", seeds, len(v0)))
    return _decide(params, v0, v1, s)


def verify(params: SketchParams, x: np.ndarray, proofs: np.ndarray, seeds: Seeds,
           queries: Seeds, v1: np.ndarray) -> np.ndarray:
    """Server 0's whole check of ``n`` devices: ``decide(params, verifier_messages(params, x,
    proofs, seeds, queries), v1, seeds)``, each device's coefficients drawn once for both (its
    arguments and errors are theirs; ``v1`` the other server's messages, :func:`parse_verifier_messages`).

    Returns
    -------
    numpy.ndarray
        ``bool (n,)``: :func:`decide`'s verdicts.
    """
    x, proofs, seeds, queries = _check_verifier(params, x, proofs, seeds, queries)
    _check_messages(params, (("v1", v1),))
    if v1.shape[0] != len(seeds):
        raise InvalidMessage(f"verifier messages for {v1.shape[0]} devices, not {len(seeds)}")
    if kernels.compiled():  # the same verdicts as the numpy reference in one compiled call
        from secemb.fss._sketchproof_kernels import verify_core

        verdicts = np.empty(len(seeds), dtype=bool)
        # v1 read-only as it comes off the wire or not: one compiled signature (session 37)
        verify_core(*_drawn(params, x, proofs, seeds, queries), params.chunk, kernels.read_only(v1), verdicts)
        return verdicts
    r, s = _coefficients(params, seeds)
    v0 = np.empty((len(seeds), params.verifier_length), np.uint64)
    _messages(params, x, proofs, r, queries, v0)
    return _decide(params, v0, v1, s)


def _check_messages(params: SketchParams, named: tuple[tuple[str, object], ...]) -> None:
    """Refuse (InvalidMessage) a verifier message array that is not ``uint64 (n, verifier_length)``
    field elements."""
    width = params.verifier_length
    for name, v in named:
        if not isinstance(v, np.ndarray) or v.dtype != np.uint64 or v.ndim != 2 or v.shape[1] != width:
            raise InvalidMessage(f"{name} must be a uint64 array (n, {width})")
        if v.size and v.max() >= _P:
            raise InvalidMessage(f"{name}: a field element is not below p")


def _decide(params: SketchParams, v0: np.ndarray, v1: np.ndarray, s: np.ndarray) -> np.ndarray:
    """:func:`decide` of checked messages, the slots' coefficients ``s`` ``(n, c)`` given."""
    if kernels.compiled():  # the same verdicts as the numpy below in one compiled pass
        from secemb.fss._sketchproof_kernels import decide_core

        verdicts = np.empty(len(v0), dtype=bool)
        # what it reads C-contiguous and read-only (a message off the wire is read-only, the slots' coefficients a
        # strided view): one compiled signature (session 37)
        ro = kernels.read_only
        decide_core(ro(v0), ro(v1), ro(s), params.chunk, verdicts)
        return verdicts
    total = F.add(v0, v1)
    opened = total[:, 1:].reshape(len(total), 2, params.wires + 1)
    ok = total[:, 0] == 0
    ok &= np.all(_gadget(opened[:, :, :-1], s[:, None, :]) == opened[:, :, -1], axis=1)
    return ok
