"""A zero-knowledge range proof on ring shares, checked by two servers (hazmat layer; issue 34 (b)).

The statement, per device
-------------------------
Server 0 holds ``a_i``, server 1 holds ``b_i`` (``i < rows``), ring shares in ``[0, 2^k)`` of
``v_i = a_i + b_i mod 2^k``.  The device (which made both shares) proves, revealing nothing else,
that every ``signed(v_i)`` lies in ``[-2^(t-1), 2^(t-1))`` (``t = bits``).

Witness
-------
Base-4 digits.  Let ``m = ceil(t/2)`` and ``f = 2^(2m - t)`` (1 for even ``t``, 2 for odd), so
that ``f 2^t = 4^m``.  Per row, the ``m`` base-4 digits of ``y_i = f u_i``, ``u_i = signed(v_i) +
2^(t-1)`` in ``[0, 2^t)``, and the wrap ``w_i``: over the integers ``a_i + b_i = u_i - 2^(t-1) +
2^k w_i``.  (``a_i + b_i`` lies in ``[0, 2^(k+1) - 2]`` and ``signed(v_i)`` in ``[-2^(t-1),
2^(t-1))``, so their difference, a multiple of ``2^k``, is ``0``, ``2^k`` or ``2^(k+1)``: the
honest ``w_i`` is 0, 1 or 2.)  The witness check asks every entry, digits and wrap alike, to be in
``{0, 1, 2, 3}``, and the ring relation (below) asks, for every row,

    ``f (a_i + b_i) + 2^(2m-1) - f 2^k w_i - sum_j 4^j d_ij = 0``

(``f 2^(t-1) = 2^(2m-1)``).  Conversely, if every entry is in ``{0, 1, 2, 3}`` and the relation
holds over the integers, ``y_i = sum_j 4^j d_ij`` lies in ``[0, 4^m) = [0, f 2^t)`` and equals ``f``
times the integer ``u_i = a_i + b_i + 2^(t-1) - 2^k w_i``, so ``u_i`` is in ``[0, 2^t)`` and
``v_i = u_i - 2^(t-1) mod 2^k``: the statement, exactly (for odd ``t`` the relation makes ``y_i``
even, which is what keeps the range at ``2^t`` values and not ``4^m``).  A wrap of 3 never
satisfies it: ``u_i = a_i + b_i + 2^(t-1) - 3 * 2^k <= 2^(t-1) - 2^k - 2 < 0``, but ``y_i >= 0``;
so ``{0, 1, 2, 3}`` costs the wrap nothing.  The relation holds over the integers if and only if it
holds mod ``p = 2^61 - 1`` (:mod:`secemb.fss.field`): with ``k <= 58``, ``t <= k - 2`` and
entries in ``{0, 1, 2, 3}`` its left side lies in ``(-3 * 2^59 - 2^57, 2^60 + 2^56]``, inside
``(-p, p)``.  The witness is ``N = rows * (m + 1)`` elements of ``F_p``, row ``i`` at
``[i*(m+1), (i+1)*(m+1))``: the digits, low first, then ``w_i``.

Shares and messages
-------------------
The device shares the witness ``X`` and the proof ``pi`` additively in ``F_p``: server 1's shares
are expanded from a fresh 16-byte seed (:func:`secemb.fss.field.expand`, AES-CTR, 61 bits a
64-bit word, the value ``p`` skipped: uniform), server 0 gets ``X - X_1`` and ``pi - pi_1``.
Each element is 8 bytes, little-endian, below ``p``.  Byte layouts (no header: the protocol
message that carries them has one):

* to server 0: ``blind_0`` (16) || ``part_1`` (32) || ``X_0`` (``8 N``) || ``pi_0`` (``8 |pi|``);
* to server 1: ``seed_1`` (16) || ``part_0`` (32).

Fully linear proof (Boneh, Boyle, Corrigan-Gibbs, Gilboa, Ishai, CRYPTO 2019)
----------------------------------------------------------------------------
*Digits.*  Lay the witness out as a ``(M/2) x c`` matrix, element ``e = k c + i`` at ``[k, i]``
(zeros after ``N``), and let ``D[k, i] = x_e (x_e - 1) (x_e - 2) (x_e - 3)``.  With coefficients
``r, r'`` in ``F_p^(M/2)`` and ``s, s'`` in ``F_p^c`` from the joint randomness, every entry is in
``{0, 1, 2, 3}`` if ``C_A = r^T D s`` and ``C_B = r'^T D s'`` are both zero.  The ``2N`` products go
through a gadget ``G(y_0 .. y_(L-1)) = sum_j y_2j P(y_2j+1)``, ``P(y) = y (y - 1) (y - 2)`` (``c``
products of degree 4, ``L = 2c`` wires; ``c`` is :attr:`RangeParams.chunk`), called ``M = 2 ceil(N
/ c)`` times: call ``k + 1`` (``k < M/2``) takes the pairs ``(s_i x_e, x_e - 1)`` of row ``k``, whose
products are ``s_i x_e (x_e - 1) (x_e - 2) (x_e - 3)``, call ``M/2 + k + 1`` the pairs ``(s'_i x_e,
x_e - 1)`` (zero pairs pad the last row; ``0 P(0) = 0``).  Wire ``j``'s polynomial ``f_j`` has degree
``M + 1``: its values at the nodes ``1..M`` are the calls' inputs, at the nodes ``0`` and ``M + 1``
two uniformly random seeds the prover picks.  The proof is the ``2L`` seeds and the gadget
polynomial ``g = G(f_0, .., f_(L-1))`` (degree ``4M + 4``) as its values at the nodes
``0..4M+4``; ``g(1..M)`` are then the calls' outputs, so ``C_A = sum_k r_k g(k + 1)`` and
``C_B = sum_k r'_k g(M/2 + k + 1)`` are linear in the proof.  (The coefficients of the element
``e`` are ``r_k s_i`` and ``r'_k s'_i``: rank one, so that the wires carry only ``s`` and the
verifiers evaluate every device's wires with the same matrix, below.)

*Ring relation.*  Server ``b`` lifts its ring share ``r_bi`` (``a_i`` or ``b_i``) into ``F_p`` and
forms its share of ``e_i = f (r_0i + r_1i) - f 2^k w_i - sum_j 4^j d_ij + 2^(2m-1)`` (server 0
adds the constant); an honest witness makes every ``e_i`` zero.

*Queries.*  From the verifiers' query randomness (a seed drawn afresh for each batch after all
its proofs are fixed, so no device knows it) come two distinct points ``rho_1, rho_2`` outside
the nodes ``0..4M+4`` and uniform ``delta``, ``rho'_i``, the same for every device of the batch.
Server ``b``'s verifier message is its shares of ``z = C_A + delta C_B + sum_i rho'_i e_i``, of
``f_j(rho_q)`` for every wire and of ``g(rho_q)`` (``q = 1, 2``: Lagrange interpolation, linear in
the shares), and the joint randomness ``jr`` it used.  :func:`decide` adds the two messages and
accepts iff ``z = 0``, ``G(f(rho_q)) = g(rho_q)`` for both points, and both servers used the same
``jr`` (which binds the context and both parts).

Sharing the query across the batch costs no soundness: the bound below is per device, over query
randomness drawn after that device's proof is fixed, whatever the other devices sent; points
derived per device from the contexts (as an earlier version did) would only make the events of
different devices independent, which no claim uses.  It lets the verifiers evaluate the wires as
shared Lagrange rows times the batch's witness matrix, one matrix product for all devices:
``f_2i(rho_q) = s_i (l_A x)_i + s'_i (l_B x)_i + (seed terms)`` and ``f_2i+1(rho_q) = ((l_A + l_B)
x)_i - (server 0: the row sums over the real elements) + (seed terms)``, where ``l_A, l_B`` are
``rho_q``'s Lagrange row at the nodes of the two halves.  A reused or early-known query seed
voids the soundness bound: the protocol draws one per batch, after the proofs.

Joint randomness (Fiat-Shamir, as Prio3's)
------------------------------------------
``part_0 = SHA-256(domain || 0 || context || blind_0 || X_0)``, ``part_1 = SHA-256(domain || 1 ||
context || seed_1)`` (the seed fixes ``X_1``), ``jr = SHA-256(domain || context || part_0 ||
part_1)``, and ``r || r' || s || s' = SHAKE-128(domain || jr)``, each the top 60 bits of a
64-bit word (uniform in ``[0, 2^60)``).  The device sends each server the other's part; each
server recomputes its own, and :func:`decide` compares the ``jr`` the two servers used (equal
``jr`` means equal contexts and parts, by SHA-256's collision resistance), so both used the
``jr`` their shares fix.  ``blind_0`` is 16 secret random bytes, without which server 1 could test
a guessed witness against ``part_0``.

Soundness
---------
Against the verifiers' randomness (a device cannot grind it), for any shares and proof: if ``g``
is not ``G(f)``, both ``rho_q`` are roots of a non-zero polynomial of degree at most ``4M + 4``
(``G`` has degree 4, each ``f_j`` degree ``M + 1``): probability below ``((4M + 4) / (p - 4M -
5))^2`` (below 2^-107 at ``M = 34``, the default's; below 2^-61 for any ``M < 2^28``).  If ``g = G(f)``,
``C_A, C_B`` are the true sums; ``z`` is an affine function of the uniform ``(delta, rho')``,
zero with probability at most ``(1 + 2^-67) / p`` unless ``C_B = 0``, every ``e_i = 0`` and
``C_A = 0``.  So a device passes a false statement with probability below ``2^-60`` per attempt,
plus the probability that ``C_A = C_B = 0`` for a witness with an entry outside ``{0, 1, 2,
3}``, ``D != 0``:
by Schwartz-Zippel over coefficients uniform in ``[0, 2^60)``, ``D s = 0`` with probability at
most ``2^-60`` and, if not, ``r^T (D s) = 0`` with probability at most ``2^-60``, so ``C_A = 0``
with probability at most ``2^-59``; ``(r', s')`` are independent of ``(r, s)``, so both vanish
with probability at most ``2^-118``.  That last event is the one a device can try to hit offline
by varying its shares (each try is a hash evaluation, since ``jr`` is a random oracle of the
shares the parts bind, by SHA-256's collision resistance): ``Q`` tries succeed with probability
at most ``Q * 2^-118``, so about ``2^-97`` even after ``2^21`` tries per submission (and below
``2^-60`` up to ``2^58`` tries).  (With every entry in ``{0, 1, 2, 3}`` and every ``e_i = 0``, the
statement is true: see the Witness section.)

Zero knowledge
--------------
Against one honest-but-curious server, for an honest device: its shares are uniform (the other
share is a fresh seed's pseudorandom expansion, or the witness minus one), its hint is a hash of
16 secret random bytes and so uniform, and of the other server's verifier message, the ``z``
share is minus its own (``z = 0``), the ``jr`` equals its own, and the opened
``(f_j(rho_1), f_j(rho_2))`` are uniform in ``F_p^2``: the degree-``M + 1`` polynomials through
the fixed call values are ``h + V * (a + a' X)`` with ``V(X) = prod_(k=1..M) (X - k)`` and
``(a, a')`` in one-to-one correspondence with the two uniform seeds, and ``V(rho_q) != 0`` and
``rho_1 != rho_2``; ``g(rho_q) = G(f(rho_q))`` is determined by them.  A simulator that draws
those values uniformly produces the same view, so a server learns only that the proof passed.
A server that deviates from :func:`verifier_messages` is outside this argument (as in Prio).
The argument covers one verification of a proof: the other server's messages for it under a
second query seed give each wire polynomial two more values, more than its two random seeds
mask, and reveal linear relations of the witness (all of it at small sizes:
``tests/review/test_session19_rangeproof.py``).  A server answers each proof once.

Costs
-----
Sizes are in :class:`RangeParams`.  The servers' work is vectorized over the devices and the
witness: the query is computed once a batch, the wires of all devices come from shared Lagrange rows
times the batch's witness shares (the prover extends its wires to the nodes ``M+2..4M+4`` the same
way, ``O(M N)`` multiply-adds), and what is per device is ``O(c + M)`` field operations besides.
With the compiled kernels (:func:`secemb.fss.kernels.compiled`) that is one call a batch,
:func:`secemb.fss._rangeproof_kernels.verifier_batch`, which forms the query's maps from its
randomness (:func:`_draw`; :func:`secemb.fss._rangeproof_kernels.query_core`) and makes one pass
over the devices, the innermost loop (:func:`secemb.fss._rangeproof_kernels.verifier_core`: ``O(N +
L + M)`` multiply-adds a device and query point); otherwise the query's maps in numpy
(:func:`_query`) and one matrix product (:func:`secemb.fss.field.matmul`, float64 BLAS in limbs) for
all devices, the same field elements.  Per device it makes O(1) hashes, each kind one
:func:`secemb.fss.hashing.sha256_many` batch where the devices' contexts are of one length (else one
hashlib call a device): the own part, unless the caller has it already (:func:`own_parts`, as
:func:`hints_of` and :func:`seed_parts` hash a batch's parts), and ``jr`` (:func:`_joints`); and
SHAKE-128 for the ``2 (M/2 + c)`` coefficients (one :func:`secemb.fss.hashing.shake128_many`
batch: the Keccak kernel, eight devices a permutation, where the compiled kernels run); at server 1, one
AES-CTR expansion (:func:`parse`: a batch's seeds in one :func:`secemb.fss.field.expand_many`
call).  Server 0 parses a batch's messages and hashes its parts once for its request and its
verdicts (:meth:`secemb.protocols.secemb.server.SecEmbServer.bound_request`), and checks a batch's
elements at intake in one read (:func:`well_formed`).  On the calls of a captured ``bench robust``
bounded round (ML-100K cuckoo, 20 devices, 300 repeats, 3 alternating processes of each tree;
session 32, helper G, 2 shared cores under load 6.5): :func:`verifier_messages` 209 against 271 us
(minimum; medians 228 against 295) at server 0 and 211 against 268 at server 1, :func:`parse` 22-24
against 39-41 at server 0 (its elements read in place) and 67 against 76 at server 1.

At ``rows = 40``, ``t = 26`` (or 25): ``m = 13``, ``N = 560``, ``c = 33``, ``L = 66``, ``M = 34``, a
proof of ``4c + 4M + 5 = 273`` elements (device message to server 0: 6,712 bytes; the
bits-and-two-wrap-bits proof of an earlier version, ``N = 1,120``, took 11,688), verifier messages
of 1,112 bytes a device.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import cast
from functools import cache, cached_property

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, check_int
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss.hashing import row_bytes, sha256_many, shake128_many
from secemb.randomness import SEED_BYTES, RandomBytes, system_rng

__all__ = [
    "PART_BYTES",
    "RangeParams",
    "ProofShares",
    "PreparedVerifier",
    "prepare_verifier",
    "prove",
    "hint_of",
    "hints_of",
    "seed_part",
    "seed_parts",
    "parse",
    "parse_taken",
    "own_parts",
    "own_part_rows",
    "seed_part_rows",
    "well_formed",
    "check_message",
    "verifier_messages",
    "parse_verifier_messages",
    "decide",
]

#: Bytes of a joint-randomness part (a SHA-256 digest)
PART_BYTES = 32
_JOINT_WORDS = PART_BYTES // 8
_DOMAIN = b"secemb/fss/rangeproof/v1/"
_P = np.uint64(F.P)
#: the prefix of each device's coefficients' SHAKE-128 input (:func:`_coefficients`), and as uint8 (read-only)
_COEFFICIENT_PREFIX = _DOMAIN + b"coefficients"
_COEFFICIENT_ROW = np.frombuffer(_COEFFICIENT_PREFIX, np.uint8)
# words before the elements of a message to server 0: blind_0 and part_1
_HEAD_WORDS = (SEED_BYTES + PART_BYTES) // 8
# devices per block in verifier_messages: bounds its temporaries (at rows 40, t 26 a block's largest is
# about 1 MiB; at 128 devices they were mapped afresh each block, 2,000 page faults a call of 100 devices)
_VERIFIER_BLOCK = 64


@dataclass(frozen=True)
class RangeParams:
    """Parameters of the range proof: ``rows`` values, each proven in ``[-2^(bits-1), 2^(bits-1))``
    as a signed value of the ring ``Z_2^ring_bits``.  The sizes derived from them (``N``, ``c``,
    the message lengths, ...) are computed once an instance (``cached_property``: the fields are
    frozen), since every message check reads several of them.

    Raises
    ------
    InvalidParameters
        Unless ``rows >= 1``, ``4 <= ring_bits <= 58`` (the relation must not wrap mod ``p``) and
        ``2 <= bits <= ring_bits - 2``.
    """

    rows: int
    bits: int
    ring_bits: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "ring_bits", check_int("ring_bits", self.ring_bits, low=4, high=58))
        object.__setattr__(self, "rows", check_int("rows", self.rows, low=1))
        object.__setattr__(self, "bits", check_int("bits", self.bits, low=2, high=self.ring_bits - 2))

    @cached_property
    def digits(self) -> int:
        """Base-4 digits a row, ``m = ceil(bits / 2)``."""
        return (self.bits + 1) // 2

    @cached_property
    def witness_length(self) -> int:
        """``N = rows * (m + 1)`` field elements: ``m`` digits and the wrap a row."""
        return self.rows * (self.digits + 1)

    @cached_property
    def chunk(self) -> int:
        """Products per gadget call ``c``: the least ``c`` that minimizes the proof length ``4c + 8
        ceil(N / c) + 5``, the device's upload (about ``sqrt(2N)``; the verifier message, ``4c + 7``
        words between the servers, grows with it)."""
        return _chunk(self.witness_length)

    @cached_property
    def half_calls(self) -> int:
        """Gadget calls per coefficient vector, ``ceil(N / c)``."""
        return -(-self.witness_length // self.chunk)

    @cached_property
    def calls(self) -> int:
        """Gadget calls ``M`` (both halves)."""
        return 2 * self.half_calls

    @cached_property
    def wires(self) -> int:
        """Gadget inputs ``L = 2c``."""
        return 2 * self.chunk

    @cached_property
    def gadget_nodes(self) -> int:
        """Values of the gadget polynomial (degree ``4M + 4``) in the proof: ``4M + 5`` (nodes ``0..4M+4``)."""
        return 4 * self.calls + 5

    @cached_property
    def proof_length(self) -> int:
        """Field elements of the proof: ``2L`` wire seeds and the gadget polynomial's values."""
        return 2 * self.wires + self.gadget_nodes

    def message_bytes(self, party: int) -> int:
        """Bytes of the device's message to server ``party`` (0: explicit shares, 1: a seed)."""
        if party == 0:
            return self._explicit_bytes
        if party == 1:
            return SEED_BYTES + PART_BYTES
        raise InvalidParameters(f"party must be 0 or 1, got {party!r}")

    @cached_property
    def _explicit_bytes(self) -> int:
        """:meth:`message_bytes` of server 0: the seed, the part and the ``N + proof_length`` elements."""
        return SEED_BYTES + PART_BYTES + F.ELEMENT_BYTES * (self.witness_length + self.proof_length)

    @cached_property
    def opened_length(self) -> int:
        """Field elements at the head of a verifier message: ``2L + 3`` (``z``, then per query point
        the ``L`` wire values and the gadget value)."""
        return 2 * self.wires + 3

    @cached_property
    def verifier_length(self) -> int:
        """``uint64`` words of a verifier message: the :attr:`opened_length` field elements and the
        joint randomness used (``4`` words)."""
        return self.opened_length + _JOINT_WORDS

    @cached_property
    def verifier_bytes(self) -> int:
        """Bytes of one device's verifier message, 8 per word."""
        return 8 * self.verifier_length


@dataclass(frozen=True)
class ProofShares:
    """One server's parsed shares for ``n`` devices (from :func:`parse`).

    Attributes
    ----------
    party:
        0 or 1.
    keys:
        ``uint8 (n, 16)``: ``blind_0`` (party 0) or ``seed_1`` (party 1).
    hints:
        ``uint8 (n, 32)``: the other party's joint-randomness part, as the device sent it.
    inputs:
        ``uint64 (n, N)``: the witness shares (field elements).
    proofs:
        ``uint64 (n, proof_length)``: the proof shares (field elements).
    """

    party: int
    keys: np.ndarray
    hints: np.ndarray
    inputs: np.ndarray
    proofs: np.ndarray

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def rows(self, lo: int, hi: int) -> ProofShares:
        """The shares of devices ``lo .. hi - 1`` (views of these arrays)."""
        return ProofShares(self.party, self.keys[lo:hi], self.hints[lo:hi], self.inputs[lo:hi], self.proofs[lo:hi])


@cache
def _chunk(n: int) -> int:
    """:attr:`RangeParams.chunk` for ``N = n``.  The proof length is 4 times ``h(c) = c + 2 ceil(n/c)``
    plus 5; at ``c0 = isqrt(2n) + 1`` (``c0^2 > 2n``), ``h(c0) < c0 + 2 (n/c0 + 1) < 2 c0 + 2``, and
    ``h(c) > c``, so no ``c >= 2 c0 + 2`` does better than ``c0``."""
    c0 = math.isqrt(2 * n) + 1
    return min(range(1, 2 * c0 + 2), key=lambda c: c + 2 * -(-n // c))


@cache
def _kernels() -> ModuleType:
    """The compiled kernels' module (:mod:`secemb.fss._rangeproof_kernels`), imported on first use
    (numba loads only where the kernels run)."""
    from secemb.fss import _rangeproof_kernels

    return _rangeproof_kernels


def _holds_p_or_more(words: np.ndarray) -> bool:
    """Whether any of the uint64 ``words`` is not a field element (``p`` or more): one reduction,
    no temporary array."""
    return bool(words.size) and bool(words.max() >= _P)


def _context(context: bytes) -> bytes:
    """``context`` as bytes, refusing anything else (``bytes(5)`` would be five zero bytes)."""
    if not isinstance(context, (bytes, bytearray)):
        raise InvalidParameters(f"context must be bytes, got {type(context).__name__}")
    return bytes(context)


def _contexts(contexts: Sequence[bytes]) -> list[bytes]:
    """:func:`_context` of each of a batch's contexts: as they are where all are ``bytes`` (one
    C-level map over their types, not a call a device), else one at a time (its refusal)."""
    if set(map(type, contexts)) <= {bytes}:
        return list(contexts)
    return [_context(c) for c in contexts]


def _framed(*items: bytes) -> bytes:
    return b"".join([len(x).to_bytes(8, "little") + x for x in items])


def _part(party: int, context: bytes, key: bytes, inputs: bytes | np.ndarray) -> bytes:
    """``SHA-256(domain || part || framed(party, context, key, inputs))``: ``inputs`` as bytes, or as
    field elements hashed as their wire bytes without a copy."""
    h = hashlib.sha256(_DOMAIN + b"part" + _framed(bytes([party]), context, key))
    data = np.ascontiguousarray(inputs, dtype="<u8").data if isinstance(inputs, np.ndarray) else memoryview(inputs)
    h.update(data.nbytes.to_bytes(8, "little"))
    h.update(data)
    return h.digest()


def _joint(context: bytes, part0: bytes, part1: bytes) -> bytes:
    return hashlib.sha256(_DOMAIN + b"joint" + _framed(context, part0, part1)).digest()


def _context_rows(contexts: Sequence[bytes]) -> np.ndarray | None:
    """The contexts (bytes) as the rows of uint8 (n, C) where they are of one length ``C`` (a
    protocol's are), else ``None``."""
    if len(set(map(len, contexts))) != 1:
        return None
    return np.frombuffer(b"".join(contexts), np.uint8).reshape(len(contexts), -1)


def _framed_rows(*columns: np.ndarray) -> np.ndarray:
    """:func:`_framed` of each row's items, uint8 (n, sum of 8 + k): the items are the rows of
    uint8 (n, k) ``columns``, each framed by its length ``k`` (8 bytes little-endian)."""
    out = np.empty((columns[0].shape[0], sum(8 + c.shape[1] for c in columns)), np.uint8)
    at = 0
    for c in columns:
        out[:, at : at + 8] = np.frombuffer(c.shape[1].to_bytes(8, "little"), np.uint8)
        out[:, at + 8 : at + 8 + c.shape[1]] = c
        at += 8 + c.shape[1]
    return out



def _all_bytes_of(items: Sequence[object], size: int) -> bool:
    """Whether every item is ``bytes`` (or a subclass) of ``size`` bytes: C-level maps over a batch of
    exact ``bytes``, an ``isinstance`` an item otherwise."""
    if set(map(type, items)) <= {bytes}:
        return set(map(len, cast("Sequence[bytes]", items))) <= {size}
    return all(isinstance(x, bytes) and len(x) == size for x in items)


def _digest_rows(digests: list[bytes]) -> np.ndarray:
    """``n`` 32-byte digests as the rows of uint8 (n, 32)."""
    return np.frombuffer(b"".join(digests), np.uint8).reshape(len(digests), PART_BYTES)


def _parts(party: int, contexts: Sequence[bytes], keys: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """:func:`_part` of each device -- its context (bytes), key (row of uint8 (n, 16)) and inputs'
    bytes (row of uint8 (n, I)) -- as the rows of uint8 (n, 32): one
    :func:`~secemb.fss.hashing.sha256_many` batch where the contexts are of one length, else one hash
    a device; the same digests."""
    rows = _context_rows(contexts)
    if rows is None:
        return _digest_rows([_part(party, c, k.tobytes(), i.tobytes())
                             for c, k, i in zip(contexts, keys, inputs, strict=True)])
    return sha256_many(_DOMAIN + b"part" + _framed(bytes([party])), _framed_rows(rows, keys, inputs))


def _joints(contexts: Sequence[bytes], part0: np.ndarray, part1: np.ndarray) -> np.ndarray:
    """:func:`_joint` of each device -- its context (bytes) and parts (rows of uint8 (n, 32)) -- as the
    rows of uint8 (n, 32): one :func:`~secemb.fss.hashing.sha256_many` batch where the contexts are of
    one length, else one hash a device; the same digests."""
    rows = _context_rows(contexts)
    if rows is None:
        return _digest_rows([_joint(c, a.tobytes(), b.tobytes())
                             for c, a, b in zip(contexts, part0, part1, strict=True)])
    return sha256_many(_DOMAIN + b"joint", _framed_rows(rows, part0, part1))


def _coefficients(params: RangeParams, joints: Sequence[bytes] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The coefficients ``(r, r')`` on the gadget calls (``uint64 (n, 2, M/2)``) and ``(s, s')`` on
    the slots (``uint64 (n, 2, c)``) for each device's joint randomness ``jr`` (32 bytes each, or
    their rows uint8 (n, 32)): the element ``e = k c + i`` is weighted by ``r_k s_i`` in ``C_A`` and
    by ``r'_k s'_i`` in ``C_B``.  Each is uniform in ``[0, 2^60)`` (enough for the Schwartz-Zippel
    bound of the Soundness section): the top 60 bits of a little-endian word of ``SHAKE-128(domain ||
    jr)``, the devices' outputs one :func:`~secemb.fss.hashing.shake128_many` batch."""
    half, c = params.half_calls, params.chunk
    width = 2 * (half + c)
    rows = joints if isinstance(joints, np.ndarray) else \
        np.frombuffer(b"".join(joints), np.uint8).reshape(len(joints), PART_BYTES)
    words = shake128_many(_COEFFICIENT_PREFIX, rows, 8 * width).view("<u8").astype(np.uint64) >> np.uint64(4)
    return words[:, : 2 * half].reshape(-1, 2, half), words[:, 2 * half :].reshape(-1, 2, c)


@dataclass(frozen=True)
class _Query:
    """The batch's query as linear maps shared by every device (from :func:`_query`).

    ``wire_rows`` ``(2, M + 2)``: the Lagrange rows of ``rho_1, rho_2`` over the wire nodes and
    ``pads`` ``(2, c)`` their slot sums (:func:`_slot_sums`); ``gadget_columns`` ``(4M + 5, 2)``:
    the Lagrange columns of ``rho_q`` over the gadget nodes; ``delta``; ``witness_column``
    ``(N, 1)`` and ``ring_column`` ``(rows, 1)``: the weights of ``sum_i rho'_i e_i`` on the witness
    and the ring shares; ``constant``: its constant term, which server 0 adds."""

    wire_rows: np.ndarray
    pads: np.ndarray
    gadget_columns: np.ndarray
    delta: np.uint64
    witness_column: np.ndarray
    ring_column: np.ndarray
    constant: np.ndarray


@dataclass(frozen=True)
class _Draw:
    """A batch's query randomness from its seed (:func:`_draw`): the points ``rho_1, rho_2`` (uint64
    (2,)), ``delta``, and the ``rows`` 16-byte little-endian integers of ``rho'`` as their low and
    high words (uint64 (rows, 2)), which :func:`_query` and the compiled verifier reduce mod ``p``."""

    points: np.ndarray
    delta: np.uint64
    rho_words: np.ndarray


def _draw(params: RangeParams, query_seed: bytes) -> _Draw:
    """The batch's query randomness from SHAKE-128 of the query seed alone: the points ``rho_1,
    rho_2`` (distinct, outside the nodes ``0..4M+4``), ``delta`` and ``rho'_0 .. rho'_(rows-1)`` (each
    a 16-byte little-endian integer reduced mod ``p``, as :func:`secemb.fss.field.from_uniform_bytes`
    reduces it)."""
    d = params.gadget_nodes
    blob = hashlib.shake_128(_DOMAIN + b"query" + _framed(query_seed)).digest(16 * (3 + params.rows))
    h1 = int.from_bytes(blob[:16], "little") % (F.P - d)
    h2 = int.from_bytes(blob[16:32], "little") % (F.P - d - 1)
    points = np.array([d + h1, d + (h1 + 1 + h2) % (F.P - d)], dtype=np.uint64)  # any non-node value but rho_1
    rho_words = np.frombuffer(blob, "<u8", 2 * params.rows, 48).astype(np.uint64, copy=False).reshape(params.rows, 2)
    return _Draw(points, np.uint64(int.from_bytes(blob[32:48], "little") % F.P), rho_words)


def _query(params: RangeParams, query_seed: bytes) -> _Query:
    """The batch's query (:func:`_draw`) as the linear maps of :func:`_verify_reference`, in numpy: the
    reference of the query the compiled verifier forms
    (:func:`secemb.fss._rangeproof_kernels.verifier_batch`)."""
    draw = _draw(params, query_seed)
    f, place = _places(params)
    lag = F.lagrange_coefficients(params.calls + 2, draw.points)  # (2, M + 2)
    rho = F.from_uniform_bytes(draw.rho_words.astype("<u8").tobytes(), params.rows)
    return _Query(
        wire_rows=lag,
        pads=_slot_sums(params, lag),
        gadget_columns=F.lagrange_coefficients(params.gadget_nodes, draw.points).T,
        delta=draw.delta,
        witness_column=F.neg(F.mul(rho[:, None], place)).reshape(-1, 1),
        ring_column=F.mul(rho, np.uint64(f))[:, None],
        constant=F.mul(F.sum_mod(rho), np.uint64(1 << (2 * params.digits - 1))),
    )


@cache
def _places(params: RangeParams) -> tuple[int, np.ndarray]:
    """``f`` (1 for even ``t``, 2 for odd) and the weights of a row's witness elements in its
    relation, ``uint64 (m + 1,)`` (read-only): ``e_i = f (r_0i + r_1i) - sum_j 4^j d_ij - f 2^k w_i +
    2^(2m-1)`` (every weight below ``2^60 < p``)."""
    m = params.digits
    f = 1 << (2 * m - params.bits)
    place = np.array([1 << (2 * j) for j in range(m)] + [f << params.ring_bits], dtype=np.uint64)
    place.setflags(write=False)
    return f, place


def _slot_sums(params: RangeParams, rows: np.ndarray) -> np.ndarray:
    """``uint64 (Q, c)``: for Lagrange rows ``(Q, M + 2)`` over the wire nodes, per slot ``i`` the sum
    of the row over the calls (of both halves) where the slot holds a witness element: the weight
    of the ``-1`` of the right wires (zero at padding slots)."""
    half, c = params.half_calls, params.chunk
    both = F.add(rows[:, 1 : half + 1], rows[:, half + 1 : -1])  # (Q, M/2)
    real = np.arange(half * c).reshape(half, c) < params.witness_length  # (call, slot) holds an element
    return F.sum_mod(np.where(real[None], both[:, :, None], np.uint64(0)), axis=1)


@cache
def _extension(params: RangeParams) -> tuple[np.ndarray, np.ndarray]:
    """The prover's wire extension: the Lagrange rows ``(3M + 3, M + 2)`` of the nodes ``M+2..4M+4``
    over the wire nodes ``0..M+1``, and their slot sums (:func:`_slot_sums`)."""
    n_wire = params.calls + 2
    rows = F.lagrange_coefficients(n_wire, np.arange(n_wire, params.gadget_nodes, dtype=np.uint64))
    pads = _slot_sums(params, rows)
    rows.setflags(write=False)
    pads.setflags(write=False)
    return rows, pads


def _falling(y: np.ndarray) -> np.ndarray:
    """``P(y) = y (y - 1) (y - 2)`` elementwise: at ``y = x - 1``, ``(x - 1) (x - 2) (x - 3)``."""
    return F.mul(F.mul(y, F.sub(y, np.uint64(1))), F.sub(y, np.uint64(2)))


def _gadget(wires: np.ndarray) -> np.ndarray:
    """``G`` along the last axis (length ``L``): ``sum_j y_2j P(y_2j+1)``."""
    return F.dot(wires[..., 0::2], _falling(wires[..., 1::2]))


def _wires_at(
    params: RangeParams, rows: np.ndarray, pads: np.ndarray | None, x: np.ndarray, slots: np.ndarray, seeds: np.ndarray
) -> np.ndarray:
    """``uint64 (n, Q, L)``: every wire polynomial (or a share of it) at ``Q`` points, from their
    Lagrange rows ``(Q, M + 2)`` over the wire nodes and the rows' slot sums ``pads`` (``None`` for
    server 1's share, whose share of 1 is 0); witness shares ``x`` ``(n, N)``, slot coefficients
    ``(s, s')`` ``(n, 2, c)`` and wire seeds ``(n, 2L)``.

    Every call input is a witness element (times ``s_i`` or ``s'_i`` on the left wires), so the
    wires come from the rows' two halves times the witness matrix, one matrix product for all
    devices and points: ``f_2i = s_i (l_A x)_i + s'_i (l_B x)_i + (seed terms)`` and ``f_2i+1 =
    (l_A x)_i + (l_B x)_i - pads_i + (seed terms)``."""
    n, half, big_l = len(x), params.half_calls, params.wires
    q = len(rows)
    halves = F.matmul(np.concatenate([rows[:, 1 : half + 1], rows[:, half + 1 : -1]]), _padded(params, x))
    first, second = halves[:, :q], halves[:, q:]  # (n, Q, c)
    seeded = F.matmul(rows[:, [0, -1]], seeds.reshape(n, 2, big_l))  # (n, Q, L)
    out = np.empty((n, q, big_l), dtype=np.uint64)
    left = F.add(F.mul(slots[:, None, 0], first), F.mul(slots[:, None, 1], second))
    right = F.add(first, second)
    out[:, :, 0::2] = F.add(left, seeded[:, :, 0::2])
    out[:, :, 1::2] = F.add(F.sub(right, pads) if pads is not None else right, seeded[:, :, 1::2])
    return out


def _call_outputs(params: RangeParams, x: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """``uint64 (M,)``: the gadget's outputs at the calls ``1..M`` for the witness ``x`` ``(N,)`` and
    the slot coefficients ``(s, s')`` ``(2, c)``: ``sum_i s_i x_e (x_e - 1) (x_e - 2) (x_e - 3)`` over
    the row of the call (``s'`` in the second half; a padding slot's left wire is zero, so it adds 0)."""
    padded = _padded(params, x[None])[0]  # (M/2, c)
    return F.dot(F.mul(slots[:, None, :], padded), _falling(F.sub(padded, np.uint64(1)))).reshape(-1)


def _witness(params: RangeParams, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The honest witness (``uint64 (N,)``) for ring shares ``a``, ``b``; refuses a false statement."""
    k, t = params.ring_bits, params.bits
    arrays = []
    for name, arr in (("a", a), ("b", b)):
        arr = np.asarray(arr)
        if arr.shape != (params.rows,) or arr.dtype.kind not in "ui":
            raise InvalidParameters(
                f"{name} must be an integer array of shape ({params.rows},), got {arr.dtype} {arr.shape}"
            )
        if np.any(arr < 0) or np.any(arr.astype(np.uint64) >> np.uint64(k)):
            raise InvalidParameters(f"{name} must hold ring elements in [0, 2^{k})")
        arrays.append(arr.astype(np.int64))
    total = arrays[0] + arrays[1]  # < 2^59
    v = total & ((1 << k) - 1)
    signed = np.where(v >= 1 << (k - 1), v - (1 << k), v)
    u = signed + (1 << (t - 1))
    bad = np.flatnonzero((u < 0) | (u >= 1 << t))
    if bad.size:
        raise InvalidParameters(f"rangeproof: the value of row {int(bad[0])} is outside [-2^{t - 1}, 2^{t - 1}); "
                                "an honest device does not prove it")
    m = params.digits
    y = u << (2 * m - t)  # f u, in [0, 4^m)
    x = np.empty((params.rows, m + 1), dtype=np.uint64)
    x[:, :m] = (y[:, None] >> (2 * np.arange(m))) & 3
    x[:, m] = (total - signed) >> k  # the wrap: 0, 1 or 2
    return x.reshape(-1)


def _prove_witness(params: RangeParams, x: np.ndarray, context: bytes, rng: RandomBytes,
                   seed_1: bytes | None = None) -> tuple[bytes, bytes]:
    """Share and prove any witness ``x`` (``uint64 (N,)`` field elements): the prover of
    :func:`prove` without its statement check (tests build cheating devices with it)."""
    big_n, plen, big_l = params.witness_length, params.proof_length, params.wires
    if seed_1 is not None and (not isinstance(seed_1, bytes) or len(seed_1) != SEED_BYTES):
        raise InvalidParameters(f"seed_1 must be {SEED_BYTES} bytes")
    seed1 = rng(SEED_BYTES) if seed_1 is None else seed_1
    blind0 = rng(SEED_BYTES)
    share1 = F.expand(seed1, big_n + plen)
    x0 = F.sub(x, share1[:big_n])
    part0 = _part(0, context, blind0, F.to_bytes(x0))
    part1 = _part(1, context, seed1, b"")
    _, slots = _coefficients(params, [_joint(context, part0, part1)])
    seeds = F.from_uniform_bytes(rng(16 * 2 * big_l), 2 * big_l)
    rows, pads = _extension(params)
    extended = _wires_at(params, rows, pads, x[None], slots, seeds[None])[0]  # wires at the nodes M+2..4M+4
    # the gadget polynomial at the nodes 0..4M+4: the seeds' outputs, the calls' outputs, the extension's
    gadget = np.concatenate([_gadget(seeds[:big_l]).reshape(1), _call_outputs(params, x, slots[0]),
                             _gadget(seeds[big_l:]).reshape(1), _gadget(extended)])
    proof = np.concatenate([seeds, gadget])
    pi0 = F.sub(proof, share1[big_n:])
    msg0 = blind0 + part1 + F.to_bytes(x0) + F.to_bytes(pi0)
    msg1 = seed1 + part0
    return msg0, msg1


def prove(
    params: RangeParams, a: np.ndarray, b: np.ndarray, context: bytes, *, seed_1: bytes | None = None,
    _rng: RandomBytes = system_rng
) -> tuple[bytes, bytes]:
    """The device's proof that ``signed(a_i + b_i mod 2^k)`` lies in ``[-2^(t-1), 2^(t-1))`` for
    every row: the message to server 0 and the message to server 1 (layouts in the module
    docstring; ``params.message_bytes(party)`` long).

    Parameters
    ----------
    params:
        The proof's parameters.
    a, b:
        Integer arrays of shape ``(rows,)``: server 0's and server 1's ring shares, in ``[0, 2^k)``.
    context:
        Bytes both servers will pass to :func:`verifier_messages` for this device (the round, the
        user, the servers' projection challenge): the proof is bound to them.
    seed_1:
        Server 1's seed (16 secret random bytes), when the device gave it to server 1 before it
        proved (it is then ``msg1``'s head, and server 1 needs only ``part_0``: :func:`hint_of`);
        drawn here from ``_rng`` by default.
    _rng:
        Source of the secret randomness (tests only); :func:`os.urandom` by default.

    Raises
    ------
    InvalidParameters
        If ``a`` or ``b`` is malformed, or some row's value is out of range (an honest device
        never proves a false statement).
    """
    return _prove_witness(params, _witness(params, a, b), _context(context), _rng, seed_1)


def _check_size(params: RangeParams, party: int, msg: object, index: int | None = None) -> None:
    """Refuse a device's message to server ``party`` (the ``index``-th of a batch, if given) that is
    not bytes of ``params.message_bytes(party)`` (:class:`InvalidMessage`, naming what came instead)."""
    size = params.message_bytes(party)
    got_bytes = F.message_nbytes(msg)
    if got_bytes != size:
        got = type(msg).__name__ if got_bytes is None else f"{got_bytes} bytes"
        which = "" if index is None else f" {index}"
        raise InvalidMessage(f"range proof message{which} for server {party}: expected {size} bytes, got {got}")


def _check_sizes(params: RangeParams, party: int, msgs: Sequence[object]) -> None:
    """:func:`_check_size` of each message of a batch, naming the first bad one's index: one C-level
    look at a batch of ``bytes`` of the right length (:func:`~secemb.fss.field.batch_nbytes`), else
    message by message."""
    if F.batch_nbytes(msgs) != params.message_bytes(party):
        for i, m in enumerate(msgs):
            _check_size(params, party, m, i)


def hint_of(params: RangeParams, context: bytes, msg0: bytes) -> bytes:
    """``part_0`` of a device's message to server 0 (``params.message_bytes(0)`` bytes, as
    :func:`prove` writes it), as server 0 recomputes it: with the device's ``seed_1`` it makes
    server 1's message ``seed_1 || part_0`` where server 1 got the seed from the device earlier
    and server 0 hands it the part.  A wrong part only makes :func:`decide` reject.

    Raises
    ------
    InvalidMessage
        If ``msg0`` is not bytes of ``params.message_bytes(0)``.
    """
    _check_size(params, 0, msg0)
    data = bytes(msg0)
    inputs = data[SEED_BYTES + PART_BYTES : SEED_BYTES + PART_BYTES + F.ELEMENT_BYTES * params.witness_length]
    return _part(0, _context(context), data[:SEED_BYTES], inputs)


def hints_of(params: RangeParams, contexts: Sequence[bytes], msgs: Sequence[bytes]) -> list[bytes]:
    """:func:`hint_of` of each device's message to server 0 under its context, hashed as one batch
    where the contexts are of one length (:func:`_parts`); the same parts.

    Raises
    ------
    InvalidMessage
        If a message is not bytes of ``params.message_bytes(0)`` (the first bad one named).
    InvalidParameters
        If the contexts are not bytes, or not one a message.
    """
    ctxs = _contexts(contexts)
    if len(ctxs) != len(msgs):
        raise InvalidParameters(f"need one context a message: {len(msgs)} messages, {len(ctxs)} contexts")
    _check_sizes(params, 0, msgs)
    if not msgs:
        return []
    raw = np.frombuffer(b"".join(msgs), np.uint8).reshape(len(msgs), params.message_bytes(0))
    head, inputs = SEED_BYTES + PART_BYTES, F.ELEMENT_BYTES * params.witness_length
    return row_bytes(_parts(0, ctxs, raw[:, :SEED_BYTES], raw[:, head : head + inputs]))


def seed_part(context: bytes, seed_1: bytes) -> bytes:
    """``part_1`` of a proof under ``context`` with server 1's 16-byte seed ``seed_1``: the
    part the device puts in its message to server 0 (:func:`prove`), as server 1 recomputes
    it.  Server 1 compares it with the device's part that server 0 forwards: without ``seed_1``
    (secret from server 0) nobody else can make the part of another context, so a match binds
    the context server 0 names to the one the device proved under.

    Raises
    ------
    InvalidParameters
        If ``context`` is not bytes or ``seed_1`` is not 16 bytes.
    """
    if not isinstance(seed_1, bytes) or len(seed_1) != SEED_BYTES:
        raise InvalidParameters(f"seed_1 must be {SEED_BYTES} bytes")
    return _part(1, _context(context), seed_1, b"")


def seed_parts(contexts: Sequence[bytes], seeds: Sequence[bytes]) -> list[bytes]:
    """:func:`seed_part` of each device's context and 16-byte ``seed_1``, hashed as one batch where
    the contexts are of one length (:func:`_parts`); the same parts.

    Raises
    ------
    InvalidParameters
        If a context is not bytes, a seed not 16 bytes, or they are not as many.
    """
    return row_bytes(seed_part_rows(contexts, seeds))


def seed_part_rows(contexts: Sequence[bytes], seeds: Sequence[bytes]) -> np.ndarray:
    """:func:`seed_parts` as the rows of uint8 (n, 32) (as :func:`own_part_rows`).

    Raises
    ------
    InvalidParameters
        As :func:`seed_parts`.
    """
    ctxs = _contexts(contexts)
    if len(ctxs) != len(seeds) or not _all_bytes_of(seeds, SEED_BYTES):
        raise InvalidParameters(f"need one {SEED_BYTES}-byte seed_1 a context: {len(ctxs)} contexts")
    if not seeds:
        return np.empty((0, PART_BYTES), np.uint8)
    keys = np.frombuffer(b"".join(seeds), np.uint8).reshape(len(seeds), SEED_BYTES)
    return _parts(1, ctxs, keys, np.empty((len(seeds), 0), np.uint8))


def parse(params: RangeParams, party: int, msgs: Sequence[bytes] | np.ndarray) -> ProofShares:
    """Server ``party``'s shares from the devices' messages (untrusted bytes), expanding server 1's
    seeds.  ``msgs`` may also be the batch's messages as the rows of one uint8 (n, size) array (a
    server that holds them in columns: no bytes objects are made to be joined here).

    Raises
    ------
    InvalidMessage
        If a message is not bytes of ``params.message_bytes(party)`` (or the rows not uint8 (n,
        ``params.message_bytes(party)``)), or (party 0) one of its field elements is not below ``p``;
        the error names the first bad message's index.
    InvalidParameters
        If ``party`` is not 0 or 1.
    """
    size = params.message_bytes(party)
    n, big_n, plen = len(msgs), params.witness_length, params.proof_length
    if isinstance(msgs, np.ndarray):
        if msgs.dtype != np.uint8 or msgs.shape != (n, size):
            raise InvalidMessage(f"range proof messages for server {party}: expected uint8 rows ({n}, {size}), "
                                 f"got {msgs.dtype} {msgs.shape}")
        raw = np.array(msgs, order="C")  # writable, a copy of the caller's rows
    else:
        _check_sizes(params, party, msgs)
        raw = np.frombuffer(bytearray().join(msgs), dtype=np.uint8).reshape(n, size)  # writable
    if party == 1:  # the seeds expanded as one batch
        keys = raw[:, :SEED_BYTES].copy()
        shares = F.expand_many(keys, big_n + plen)
        return ProofShares(party, keys, raw[:, SEED_BYTES : SEED_BYTES + PART_BYTES].copy(), shares[:, :big_n],
                           shares[:, big_n:])
    bad = np.flatnonzero(raw.view("<u8")[:, _HEAD_WORDS:].max(axis=1, initial=0) >= _P)
    if bad.size:
        raise InvalidMessage(f"range proof message {int(bad[0])} for server 0: an element is not below p")
    return _server0_shares(params, raw)


def parse_taken(params: RangeParams, msgs: Sequence[bytes]) -> ProofShares:
    """Server 0's :func:`parse` of messages it took in and checked itself: each ``bytes`` of
    ``params.message_bytes(0)`` whose field elements are below ``p`` (what a server's intake keeps,
    :func:`well_formed` or :func:`check_message` of each), so that neither the sizes nor the elements are
    checked again (a pass over the batch's ~135 KB at 20 devices, in a bound check's flow).  The same shares
    as :func:`parse`.  Untrusted messages go to :func:`parse`.

    Raises
    ------
    ValueError
        If the messages do not join to ``n`` messages' bytes (numpy's reshape): nothing is read past them.
    """
    n, size = len(msgs), params.message_bytes(0)
    return _server0_shares(params, np.frombuffer(bytearray().join(msgs), dtype=np.uint8).reshape(n, size))


def _server0_shares(params: RangeParams, raw: np.ndarray) -> ProofShares:
    """Server 0's shares from its devices' messages as the rows of ``raw`` (uint8 (n, ``message_bytes(0)``),
    writable: the shares are views of it), their elements not checked: the keys and hints copied, the
    elements after each head (size and the head are whole words) a view."""
    shares = raw.view("<u8")[:, _HEAD_WORDS:].astype(np.uint64, copy=False)
    big_n = params.witness_length
    return ProofShares(0, raw[:, :SEED_BYTES].copy(), raw[:, SEED_BYTES : SEED_BYTES + PART_BYTES].copy(),
                       shares[:, :big_n], shares[:, big_n:])


def own_parts(params: RangeParams, shares: ProofShares, contexts: Sequence[bytes]) -> list[bytes]:
    """This server's own joint-randomness part of each of the ``n`` devices of its :func:`parse`
    result ``shares``, each under its context: server 0's :func:`hint_of` of the device's message
    (from its key and witness shares), server 1's :func:`seed_part` of its seed -- what
    :func:`verifier_messages` takes as ``parts``; hashed as one batch where the contexts are of one
    length (:func:`_parts`), the same bytes.

    Raises
    ------
    InvalidParameters
        If ``shares`` were not parsed under ``params``, or ``contexts`` are not ``n`` bytes objects.
    """
    return row_bytes(own_part_rows(params, shares, contexts))


def own_part_rows(params: RangeParams, shares: ProofShares, contexts: Sequence[bytes]) -> np.ndarray:
    """:func:`own_parts` as the rows of uint8 (n, 32) (what :func:`verifier_messages` also takes as
    ``parts``, and what a server writes into its messages: no ``n`` bytes objects made and joined again).

    Raises
    ------
    InvalidParameters
        As :func:`own_parts`.
    """
    n = len(shares)
    if shares.inputs.shape != (n, params.witness_length) or shares.keys.shape != (n, SEED_BYTES):
        raise InvalidParameters(f"shares of {n} devices were not parsed under {params}")
    if len(contexts) != n:
        raise InvalidParameters(f"need one context a device: {n} devices, {len(contexts)} contexts")
    if not n:
        return np.empty((0, PART_BYTES), np.uint8)
    return _parts(shares.party, _contexts(contexts), shares.keys, _hashed_inputs(shares))


def _hashed_inputs(shares: ProofShares) -> np.ndarray:
    """What a server's own part hashes after its key, a device a row of uint8 (n, I): server 0 its
    witness shares' wire bytes (little-endian words), server 1 nothing (its seed alone)."""
    if shares.party == 0:
        return shares.inputs.astype("<u8", copy=False).view(np.uint8)
    return np.empty((len(shares), 0), np.uint8)


def well_formed(params: RangeParams, msgs: Sequence[bytes | memoryview]) -> np.ndarray:
    """``bool (n,)``: which of the ``n`` untrusted messages to server 0 :func:`check_message` takes
    (``params.message_bytes(0)`` bytes whose field elements are below ``p``), read as one buffer: a
    batch's intake checks its messages in one pass, then names a refused one's fault with
    :func:`check_message`."""
    size = params.message_bytes(0)
    sized = list(range(len(msgs))) if F.batch_nbytes(msgs) == size else \
        [i for i, m in enumerate(msgs) if F.message_nbytes(m) == size]
    words = np.frombuffer(b"".join([msgs[i] for i in sized]), dtype="<u8").reshape(len(sized), size // 8)
    out = np.zeros(len(msgs), bool)
    out[sized] = words[:, _HEAD_WORDS:].max(axis=1, initial=0) < _P
    return out


def check_message(params: RangeParams, party: int, msg: bytes) -> None:
    """Refuse, as :func:`parse` would, a device's message to server ``party`` (untrusted bytes)
    that is not ``params.message_bytes(party)`` bytes or (party 0) holds a field element not below
    ``p``: one message at a time, as a server takes it in, without parsing it.

    Raises
    ------
    InvalidMessage
        If the message is malformed.
    InvalidParameters
        If ``party`` is not 0 or 1.
    """
    _check_size(params, party, msg)
    if party == 0 and _holds_p_or_more(np.frombuffer(msg, dtype="<u8", offset=SEED_BYTES + PART_BYTES)):
        raise InvalidMessage("range proof message for server 0: an element is not below p")


def verifier_messages(
    params: RangeParams,
    party: int,
    shares: ProofShares,
    ring_shares: np.ndarray,
    contexts: Sequence[bytes],
    query_seed: bytes,
    *,
    parts: Sequence[bytes] | np.ndarray | None = None,
) -> np.ndarray:
    """Server ``party``'s verifier messages for ``n`` devices, to exchange with the other server
    and pass to :func:`decide`: ``prepare_verifier(params, party, shares, contexts, query_seed,
    parts=parts).messages(ring_shares)`` (:func:`prepare_verifier`), the arguments checked in their order.

    Parameters
    ----------
    shares:
        This server's :func:`parse` result for the ``n`` devices.
    ring_shares:
        Integer array ``(n, rows)`` in ``[0, 2^k)``: this server's ring shares of the values.
    contexts:
        ``n`` bytes objects, each the context its device proved with.
    query_seed:
        At least 16 bytes both servers hold, drawn afresh for this batch after all its proofs are
        fixed (no device knows it before); every device of the call is queried at the points it
        gives (module docstring, Queries).
    parts:
        This server's own joint-randomness parts of the ``n`` devices, where it has them already:
        server 0's :func:`hint_of` of each device's message under its context (what it sent server
        1), server 1's :func:`seed_part` of each seed; each must be the part ``shares`` and
        ``contexts`` give, which the caller vouches for; ``n`` bytes objects of 32 bytes, or their rows
        uint8 (n, 32) (:func:`own_part_rows`, :func:`seed_part_rows`).  By default (None) computed here.

    Returns
    -------
    numpy.ndarray
        ``uint64 (n, params.verifier_length)``: ``z``'s share, then for each of the two points
        the ``L`` wire shares and the gadget share, then the joint randomness ``jr`` this server
        used (4 raw little-endian words).

    Raises
    ------
    InvalidParameters
        If an argument does not match ``params``, ``party`` or the ``n`` devices.
    """
    prepared, ring = _prepare(params, party, shares, ring_shares, contexts, query_seed, parts)
    return prepared._messages(cast("np.ndarray", ring))


def _checked_ring(params: RangeParams, n: int, ring_shares: np.ndarray) -> np.ndarray:
    """``ring_shares`` as an array, refused (:class:`InvalidParameters`) unless integer ``(n, rows)`` in
    ``[0, 2^k)``."""
    ring = np.asarray(ring_shares)
    if ring.shape != (n, params.rows) or ring.dtype.kind not in "ui":
        raise InvalidParameters(
            f"ring_shares must be an integer array ({n}, {params.rows}), got {ring.dtype} {ring.shape}"
        )
    # no temporary; a dtype of at most ring_bits bits holds no value past 2^ring_bits (a server's own uint32
    # projections on the 32-bit ring: no pass over them)
    if ring.size and (ring.dtype.kind == "i" and ring.min() < 0
                      or 8 * ring.dtype.itemsize > params.ring_bits and int(ring.max()) >> params.ring_bits):
        raise InvalidParameters(f"ring_shares must hold ring elements in [0, 2^{params.ring_bits})")
    return ring


@dataclass(frozen=True)
class PreparedVerifier:
    """Server ``party``'s verifier messages for ``n`` devices but for their ring shares
    (:func:`prepare_verifier`): its parsed ``shares``, the batch's query (its randomness,
    :func:`_draw`, for the compiled verifier; its maps, :func:`_query`, for numpy's), each
    device's joint randomness ``jr`` (uint8 (n, 32)), the messages' ``template`` (uint64 (n,
    verifier_length): each ``jr``'s 4 words after the opened part, which :meth:`messages` writes)
    and, for the compiled verifier, each block's arguments of
    :func:`secemb.fss._rangeproof_kernels.verifier_batch` but the ring shares and the block's rows
    of the messages (``(lo, hi, arguments)`` a block of :data:`_VERIFIER_BLOCK` devices; ``None``
    for numpy's): what is left after the ring shares is one compiled call a block."""

    params: RangeParams
    party: int
    shares: ProofShares
    query: _Draw | _Query
    joints: np.ndarray
    template: np.ndarray
    blocks: tuple[tuple[int, int, tuple], ...] | None

    def messages(self, ring_shares: np.ndarray) -> np.ndarray:
        """:func:`verifier_messages` of the prepared devices with their ``ring_shares`` (integer
        ``(n, rows)`` in ``[0, 2^k)``): the same words.

        Raises
        ------
        InvalidParameters
            If ``ring_shares`` are not ``n`` devices' ring elements.
        """
        return self._messages(_checked_ring(self.params, len(self.shares), ring_shares))

    def _messages(self, ring: np.ndarray) -> np.ndarray:
        """:meth:`messages` of checked ring shares, a new array (the template's copy): the devices in
        blocks of :data:`_VERIFIER_BLOCK`, each one call of the compiled verifier on its prepared
        arguments (its coefficients and the field part: :func:`secemb.fss._rangeproof_kernels.verifier_batch`)
        or numpy's (:func:`_coefficients`, :func:`_verify_reference` of the query's maps, :func:`_query`)."""
        out, ring = self.template.copy(), ring.astype(np.uint64)
        if self.blocks is not None:
            batch = _kernels().verifier_batch
            for lo, hi, arguments in self.blocks:
                batch(*arguments, ring[lo:hi], out[lo:hi])
            return out
        params, x, proofs = self.params, self.shares.inputs, self.shares.proofs
        for lo in range(0, len(out), _VERIFIER_BLOCK):
            hi = min(len(out), lo + _VERIFIER_BLOCK)
            calls, slots = _coefficients(params, self.joints[lo:hi])
            _verify_reference(params, self.party, x[lo:hi], proofs[lo:hi], calls, slots, ring[lo:hi],
                              cast("_Query", self.query), out[lo:hi])
        return out


def prepare_verifier(params: RangeParams, party: int, shares: ProofShares, contexts: Sequence[bytes],
                     query_seed: bytes, *, parts: Sequence[bytes] | np.ndarray | None = None) -> PreparedVerifier:
    """All of :func:`verifier_messages` that does not read the ring shares -- its checks of the
    other arguments (the same errors), the query drawn from ``query_seed`` and each device's joint
    randomness hashed (one batch) -- so that a server can do it before it computes the ring shares
    (its projections, whose passes over memory leave the Python steps' caches cold:
    :meth:`SecEmbServer._verifier_messages <secemb.protocols.secemb.server.SecEmbServer._verifier_messages>`);
    :meth:`PreparedVerifier.messages` gives the messages.  Arguments as :func:`verifier_messages`'.

    Raises
    ------
    InvalidParameters
        If an argument does not match ``params``, ``party`` or the ``n`` devices.
    """
    return _prepare(params, party, shares, None, contexts, query_seed, parts)[0]


def _prepare(params: RangeParams, party: int, shares: ProofShares, ring_shares: np.ndarray | None,
             contexts: Sequence[bytes], query_seed: bytes,
             parts: Sequence[bytes] | np.ndarray | None) -> tuple[PreparedVerifier, np.ndarray | None]:
    """:func:`prepare_verifier` and, unless ``None``, ``ring_shares`` checked (:func:`_checked_ring`) after
    the shares and before the contexts, as :func:`verifier_messages` checks them."""
    n = len(shares)
    if shares.party != party or party not in (0, 1):
        raise InvalidParameters(f"shares are server {shares.party}'s, not server {party!r}'s")
    if shares.inputs.shape[1:] != (params.witness_length,) or shares.proofs.shape[1:] != (params.proof_length,):
        raise InvalidParameters(f"shares were parsed under other parameters than {params}")
    if (shares.keys.shape, shares.hints.shape, len(shares.inputs), len(shares.proofs)) != (
            (n, SEED_BYTES), (n, PART_BYTES), n, n):  # the compiled verifier indexes every row by device, unchecked
        raise InvalidParameters(f"shares of {n} devices must have {n} rows of each field, got keys "
                                f"{shares.keys.shape}, hints {shares.hints.shape}, inputs {shares.inputs.shape}, "
                                f"proofs {shares.proofs.shape}")
    ring = None if ring_shares is None else _checked_ring(params, n, ring_shares)
    if len(contexts) != n or not (set(map(type, contexts)) <= {bytes, bytearray}
                                  or all(isinstance(c, (bytes, bytearray)) for c in contexts)):
        raise InvalidParameters(f"contexts must be {n} bytes objects")
    if not isinstance(query_seed, (bytes, bytearray)) or len(query_seed) < SEED_BYTES:
        raise InvalidParameters(f"query_seed must be at least {SEED_BYTES} bytes")
    if isinstance(parts, np.ndarray):
        if parts.dtype != np.uint8 or parts.shape != (n, PART_BYTES):
            raise InvalidParameters(f"parts as rows must be uint8 ({n}, {PART_BYTES}), got {parts.dtype} {parts.shape}")
    elif parts is not None and (len(parts) != n or not _all_bytes_of(parts, PART_BYTES)):
        raise InvalidParameters(f"parts must be {n} bytes objects of {PART_BYTES} bytes")
    # the compiled verifier forms the query's maps from its randomness in its call; numpy's are formed here
    query = _draw(params, bytes(query_seed)) if kernels.compiled() else _query(params, bytes(query_seed))
    template = np.empty((n, params.verifier_length), dtype=np.uint64)
    if not n:
        return PreparedVerifier(params, party, shares, query, np.empty((0, PART_BYTES), np.uint8), template,
                                None), ring
    own = _parts(party, contexts, shares.keys, _hashed_inputs(shares)) if parts is None else \
        parts if isinstance(parts, np.ndarray) else _digest_rows(list(parts))
    joints = _joints(contexts, *((own, shares.hints) if party == 0 else (shares.hints, own)))
    template[:, params.opened_length :] = joints.view("<u8")
    return PreparedVerifier(params, party, shares, query, joints, template, _blocks(params, party, shares, query,
                                                                                   joints)), ring


def _blocks(params: RangeParams, party: int, shares: ProofShares, query: _Draw | _Query,
            joints: np.ndarray) -> tuple[tuple[int, int, tuple], ...] | None:
    """:attr:`PreparedVerifier.blocks`: per block of :data:`_VERIFIER_BLOCK` devices ``(lo, hi, arguments)``,
    :func:`secemb.fss._rangeproof_kernels.verifier_batch`'s arguments before the ring shares and the
    messages -- the block's joint randomness (rows of uint8 (n, 32)) and shares (views of one array a
    device: the kernel reads each once, into its transposed copy), the query's randomness (:func:`_draw`)
    and the constants of the relation; ``None`` for numpy's query (:func:`_query`).  The joint randomness and the
    shares go C-contiguous and read-only, as a caller's may come (:func:`~secemb.fss.kernels.read_only`: one
    compiled signature; a strided view of the shares had compiled another, ~12 s of CPU cold, session 37)."""
    if not isinstance(query, _Draw):
        return None
    f, place = _places(params)
    shared = (query.points, F.barycentric(params.calls + 2), F.barycentric(params.gadget_nodes), query.rho_words,
              place, np.uint64(f), np.uint64(1 << (2 * params.digits - 1)), query.delta, party == 0)
    n = len(shares)
    spans = [(lo, min(n, lo + _VERIFIER_BLOCK)) for lo in range(0, n, _VERIFIER_BLOCK)]
    ro = kernels.read_only
    return tuple((lo, hi, (_COEFFICIENT_ROW, ro(joints[lo:hi]), *shared, ro(shares.inputs[lo:hi]),
                           ro(shares.proofs[lo:hi])))
                 for lo, hi in spans)


def _verify_reference(params: RangeParams, party: int, x: np.ndarray, proofs: np.ndarray, calls: np.ndarray,
                      slots: np.ndarray, ring: np.ndarray, query: _Query, msg: np.ndarray) -> None:
    """The field part of the verifier messages (``msg[:, :2L + 3]``) in numpy: matrix products
    over the block's devices (:func:`_wires_at`, :func:`secemb.fss.field.matmul`), the reference
    of :func:`secemb.fss._rangeproof_kernels.verifier_core`."""
    n, big_l, half = len(x), params.wires, params.half_calls
    opened = msg[:, 1 : params.opened_length].reshape(n, 2, big_l + 1)  # per point: the L wires, then the gadget
    pads = query.pads if party == 0 else None
    opened[:, :, :big_l] = _wires_at(params, query.wire_rows, pads, x, slots, proofs[:, : 2 * big_l])
    gvals = proofs[:, 2 * big_l :]
    opened[:, :, big_l] = F.matmul(gvals, query.gadget_columns)
    c_a = F.dot(calls[:, 0], gvals[:, 1 : half + 1])
    c_b = F.dot(calls[:, 1], gvals[:, half + 1 : params.calls + 1])
    e = F.add(F.matmul(x, query.witness_column)[:, 0], F.matmul(ring, query.ring_column)[:, 0])
    z = F.add(F.add(c_a, F.mul(query.delta, c_b)), e)
    msg[:, 0] = F.add(z, query.constant) if party == 0 else z


def _padded(params: RangeParams, x: np.ndarray) -> np.ndarray:
    """Witness shares ``(n, N)`` as ``(n, M/2, c)``: element ``e = k c + i`` at ``[k, i]``, zeros after ``N``."""
    out = np.zeros((len(x), params.half_calls * params.chunk), dtype=np.uint64)
    out[:, : params.witness_length] = x
    return out.reshape(len(x), params.half_calls, params.chunk)


def parse_verifier_messages(params: RangeParams, data: bytes | memoryview, n: int) -> np.ndarray:
    """The other server's verifier messages for ``n`` devices from their wire bytes (written by
    ``secemb.fss.field.to_bytes(v)``: ``params.verifier_bytes`` a device, little-endian words; bytes
    or a byte view of them), as a new array.

    Raises
    ------
    InvalidMessage
        If ``data`` is not ``n * params.verifier_bytes`` bytes, or a field element is not below ``p``.
    """
    n = check_int("n", n, low=0)
    got_bytes = F.message_nbytes(data)
    if got_bytes != n * params.verifier_bytes:
        got = type(data).__name__ if got_bytes is None else f"{got_bytes} bytes"
        raise InvalidMessage(f"verifier messages: expected {n * params.verifier_bytes} bytes ({n} devices), got {got}")
    v = np.frombuffer(data, dtype="<u8").astype(np.uint64).reshape(n, params.verifier_length)
    if _holds_p_or_more(v[:, : params.opened_length]):
        raise InvalidMessage("verifier messages: a field element is not below p")
    return v


def decide(params: RangeParams, v0: np.ndarray, v1: np.ndarray) -> np.ndarray:
    """Whether each device's proof passes, from both servers' verifier messages (both servers run
    it on the same two arrays and get the same answer).

    Returns
    -------
    numpy.ndarray
        ``bool (n,)``: True where ``z = 0``, the gadget matches at both points, and both servers
        used the same joint randomness ``jr``.

    Raises
    ------
    InvalidMessage
        If the arrays are not ``uint64 (n, params.verifier_length)`` of the same ``n``, or a field
        element is not below ``p`` (a malformed message from the other server).
    """
    width = params.verifier_length
    nf = 2 * params.wires + 3
    for name, v in (("v0", v0), ("v1", v1)):
        if not isinstance(v, np.ndarray) or v.dtype != np.uint64 or v.ndim != 2 or v.shape[1] != width:
            raise InvalidMessage(f"{name} must be a uint64 array (n, {width})")
    if kernels.compiled() and v0.shape == v1.shape:  # the same checks and verdicts as the numpy below, one call
        verdicts = np.empty(len(v0), dtype=bool)
        bad = _kernels().decide_core(np.ascontiguousarray(v0), np.ascontiguousarray(v1), params.wires, verdicts)
        if bad:
            raise InvalidMessage(f"{('v0', 'v1')[bad - 1]}: a field element is not below p")
        return verdicts
    for name, v in (("v0", v0), ("v1", v1)):
        if _holds_p_or_more(v[:, :nf]):
            raise InvalidMessage(f"{name}: a field element is not below p")
    if v0.shape != v1.shape:
        raise InvalidMessage(f"verifier messages for different batches: {v0.shape} and {v1.shape}")
    s = F.add(v0[:, :nf], v1[:, :nf])
    ok = s[:, 0] == 0
    big_l = params.wires
    for q in range(2):
        base = 1 + q * (big_l + 1)
        ok &= _gadget(s[:, base : base + big_l]) == s[:, base + big_l]
    ok &= np.all(v0[:, nf:] == v1[:, nf:], axis=1)
    return ok
