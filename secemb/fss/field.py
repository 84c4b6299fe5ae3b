"""Arithmetic in the prime field ``F_p``, ``p = 2^61 - 1``, over numpy arrays (hazmat layer).

A field element is a ``uint64`` in ``[0, p)``; every function here takes and returns such arrays
(or numpy scalars), broadcasting like numpy, and never loops over elements in Python (but
:func:`lagrange_coefficients`, over the nodes, for a few points).  Inputs
outside ``[0, p)`` are a caller mistake the arithmetic does not check (:func:`from_canonical_bytes`
is the check for untrusted bytes).

``p`` is a Mersenne prime, so ``2^61 = 1 (mod p)``: a 64-bit value ``x`` reduces as
``(x & p) + (x >> 61)``.  :func:`mul` splits each factor into 32-bit limbs (the high limb has 29
bits), so every partial product fits a ``uint64``:
``a * b = a1*b1 * 2^64 + (a1*b0 + a0*b1) * 2^32 + a0*b0`` with ``2^64 = 8`` and
``2^32 * (mh * 2^29 + ml) = mh + ml * 2^32 (mod p)``.

Uniform elements come from 128-bit strings reduced mod ``p`` (:func:`from_uniform_bytes`): the
result's statistical distance from uniform is below ``p / 2^128 < 2^-67`` per element, and no
value is more likely than ``(1 + 2^-67) / p``.

Polynomials are kept by their values at the integer nodes ``0, 1, ..., n - 1``;
:func:`lagrange_coefficients` gives the linear map from those values to the value at any other
point (barycentric form), which is all the fully linear proof of :mod:`secemb.fss.rangeproof` needs.

>>> int(mul(np.uint64(P - 1), np.uint64(P - 1)))  # (-1) * (-1)
1
>>> int(mul(np.uint64(3), inv(np.uint64(3))))
1
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from typing import cast

import numpy as np
import numpy.typing as npt

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import kernels
from secemb.fss.hashing import sha256_many
from secemb.randomness import DRBG_DOMAIN, SEED_BYTES, drbg_key, expand_seed

__all__ = [
    "P",
    "ELEMENT_BYTES",
    "add",
    "sub",
    "neg",
    "mul",
    "reduce64",
    "sum_mod",
    "dot",
    "matmul",
    "inv",
    "from_uniform_bytes",
    "expand",
    "expand_many",
    "stream_words",
    "xof",
    "to_bytes",
    "from_canonical_bytes",
    "message_nbytes",
    "lagrange_coefficients",
    "barycentric",
]

#: The field's modulus, the Mersenne prime 2^61 - 1
P = (1 << 61) - 1
#: Bytes of one element on the wire: a little-endian uint64 (its value < P)
ELEMENT_BYTES = 8

_P = np.uint64(P)
_S61 = np.uint64(61)
_S32 = np.uint64(32)
_S29 = np.uint64(29)
_S3 = np.uint64(3)
_LO32 = np.uint64(0xFFFFFFFF)
_LO29 = np.uint64((1 << 29) - 1)


def _u64(x: npt.ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=np.uint64)


def reduce64(x: npt.ArrayLike) -> np.ndarray:
    """Any ``uint64`` values, reduced mod ``p`` into ``[0, p)``."""
    x = _u64(x)
    y = (x & _P) + (x >> _S61)  # < 2^61 + 8
    return y - _P * (y >= _P)


def add(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
    """``a + b mod p`` elementwise (broadcasting)."""
    s = _u64(a) + _u64(b)  # < 2^62
    return s - _P * (s >= _P)


def neg(a: npt.ArrayLike) -> np.ndarray:
    """``-a mod p`` elementwise."""
    a = _u64(a)
    return np.where(a == 0, a, _P - a)


def sub(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
    """``a - b mod p`` elementwise (broadcasting)."""
    return add(a, neg(b))


def mul(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
    """``a * b mod p`` elementwise (broadcasting), through 32-bit limbs (see the module docstring)."""
    return reduce64(_mul_lazy(a, b))


def _mul_lazy(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
    """``a * b`` as a ``uint64`` below ``2^63`` congruent to it mod ``p`` (not reduced)."""
    a = _u64(a)
    b = _u64(b)
    a0, a1 = a & _LO32, a >> _S32
    b0, b1 = b & _LO32, b >> _S32
    lo = a0 * b0  # < 2^64
    mid = a0 * b1 + a1 * b0  # < 2^62
    hi = a1 * b1  # < 2^58
    return (hi << _S3) + (mid >> _S29) + ((mid & _LO29) << _S32) + (lo >> _S61) + (lo & _P)  # < 2^63


def sum_mod(x: npt.ArrayLike, axis: int | tuple[int, ...] | None = None) -> np.ndarray:
    """The sum mod ``p`` of ``x`` along ``axis`` (all axes when None), for any ``uint64`` values
    (field elements or not) and fewer than 2^32 terms.

    The low and the high 32 bits of the values are summed apart in ``uint64`` (exact for fewer
    than 2^32 terms) and recombined."""
    x = _u64(x)
    lo = np.sum(x & _LO32, axis=axis, dtype=np.uint64)
    hi = np.sum(x >> _S32, axis=axis, dtype=np.uint64)
    return add(mul(reduce64(hi), np.uint64(1 << 32)), reduce64(lo))


def dot(a: npt.ArrayLike, b: npt.ArrayLike, axis: int = -1) -> np.ndarray:
    """``sum(a * b)`` mod ``p`` along ``axis`` of the broadcast product (a batched inner product;
    :func:`matmul` is the faster route to matrix products)."""
    return sum_mod(_mul_lazy(a, b), axis=axis)


_WIDE_BITS = 32  # the larger operand of matmul: two limbs, 32 and 29 bits
_MATMUL_K = 1 << 11  # inner pieces of matmul: the narrow limbs keep at least 10 bits
# inner lengths matmul multiplies elementwise (mul, add): a limb split and BLAS calls for one or two terms cost
# 2 to 8 times more (range proof wire seeds: (133, 2) @ (2, 34) 0.22 -> 0.08 ms, (2, 2) @ (100, 2, 34) 0.90 ->
# 0.11 ms; one run, under load)
_DIRECT_K = 2
_MASK61 = np.uint64(P)
_ZERO = np.zeros((), dtype=np.uint64)
# OpenBLAS runs a product on one thread up to these sizes (interface/gemm.c: M N K <= 65536 * 4;
# interface/gemv.c: M N < 2304 * 4); matmul keeps every BLAS call within them
_GEMM_MACS = 1 << 18
_GEMV_MACS = 2304 * 4 - 1


def matmul(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
    """The matrix product ``a @ b`` mod ``p`` of field elements, with numpy's ``matmul`` broadcasting
    (``(..., m, k) @ (..., k, n)``).

    The operand with more elements is split into two limbs (its low 32 and high 29 bits), the other
    into ``w``-bit limbs with ``k' 2^(32 + w) <= 2^53`` for the inner length ``k'`` (``w = 21 -
    ceil(log2 k')``; longer inner dimensions are cut into pieces of ``2^11``, so ``w >= 10``), as
    many as its largest element needs (at most 7; one for bits).  All limb products of one wide limb
    go through float64 ``matmul`` (BLAS), exact because every sum stays below ``2^53``; each
    product, times its weight ``2^(32 i + w j)`` (a rotation of 61 bits, since ``2^61 = 1 mod p``),
    is summed into the result.

    An inner length of one or two is multiplied elementwise instead (:func:`mul`, :func:`add`).

    Each BLAS call is kept small enough that OpenBLAS runs it on the calling thread (the wide
    operand's columns are cut to fit): under load, a product that woke BLAS's thread pool took
    10 to 100 times its single-thread CPU (one run, 2 shared cores).  Parallel work belongs to the
    caller (processes, batches)."""
    a = _u64(a)
    b = _u64(b)
    if a.ndim < 2 or b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise InvalidParameters(f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError as exc:
        raise InvalidParameters(f"matmul: batch dimensions do not broadcast: {a.shape} @ {b.shape}") from exc
    k = a.shape[-1]
    if 1 <= k <= _DIRECT_K:  # so few terms: elementwise products cost less than splitting into limbs
        total = mul(a[..., :, 0, None], b[..., 0, None, :])
        for j in range(1, k):
            total = add(total, mul(a[..., :, j, None], b[..., j, None, :]))
        return total
    total = _ZERO
    for lo in range(0, max(k, 1), _MATMUL_K):
        total = add(total, _matmul_piece(a[..., lo : lo + _MATMUL_K], b[..., lo : lo + _MATMUL_K, :]))
    return total


def _matmul_piece(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b mod p`` for an inner length ``k`` of at most ``2^11`` (:func:`matmul`), with the wide
    operand on the right (``a @ b = (b^T a^T)^T`` when ``a`` is the larger)."""
    if a.size > b.size:
        return np.swapaxes(_matmul_piece(np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2)), -1, -2)
    k, m, n = a.shape[-1], a.shape[-2], b.shape[-1]
    w = 21 - max(k - 1, 0).bit_length()
    count = max(1, -(-int(a.max(initial=0)).bit_length() // w))  # as many limbs as a's largest element needs
    mask = np.uint64((1 << w) - 1)
    # b's low and high 32 bits side by side in its last axis (a little-endian view): (..., k, 2n)
    halves = np.ascontiguousarray(b, dtype="<u8").view("<u4").astype(np.float64)
    limbs = [((a >> np.uint64(w * j)) & mask).astype(np.float64) for j in range(count)]
    lhs = np.concatenate(limbs, axis=-2)  # (..., count m, k)
    cols = halves.shape[-1]
    step = max(1, (_GEMV_MACS if lhs.shape[-2] == 1 else _GEMM_MACS) // max(1, lhs.shape[-2] * k))
    if step >= cols:
        prods = np.matmul(lhs, halves)  # (..., count m, 2n)
    else:
        prods = np.concatenate([np.matmul(lhs, halves[..., lo : lo + step]) for lo in range(0, cols, step)], axis=-1)
    prods = prods.reshape(*prods.shape[:-2], count, m, n, 2)  # (..., limb, m, n, half)
    limb_shifts = np.uint64(w) * np.arange(count, dtype=np.uint64)[:, None, None, None]
    r = (limb_shifts + np.array([0, _WIDE_BITS], dtype=np.uint64)) % np.uint64(61)
    # each product (exact, below 2^53) times 2^(w limb + 32 half) mod p: a rotation of 61 bits, below p
    y = prods.astype(np.uint64)
    rotated = y << r
    rotated &= _MASK61
    y >>= np.uint64(61) - r
    rotated |= y
    sums = reduce64(np.sum(rotated, axis=-4, dtype=np.uint64))  # at most 7 terms below 2^61 before reducing
    return add(sums[..., 0], sums[..., 1])


def _pow_const(a: np.ndarray, e: int) -> np.ndarray:
    result = np.ones_like(a)
    base = a
    while e:
        if e & 1:
            result = mul(result, base)
        e >>= 1
        if e:
            base = mul(base, base)
    return result


def inv(a: npt.ArrayLike) -> np.ndarray:
    """``a^-1 mod p`` elementwise, by Fermat (``a^(p-2)``).

    Raises
    ------
    InvalidParameters
        If any element is 0 (it has no inverse)."""
    a = _u64(a)
    if np.any(a == 0):
        raise InvalidParameters("inv: 0 has no inverse in F_p")
    return _pow_const(a, P - 2)


def from_uniform_bytes(data: bytes | np.ndarray, count: int) -> np.ndarray:
    """``count`` field elements from ``16 * count`` uniform bytes: each 16-byte little-endian
    integer reduced mod ``p`` (distance from uniform below 2^-67 per element, module docstring).

    Raises
    ------
    InvalidParameters
        If ``data`` does not hold exactly ``16 * count`` bytes."""
    if isinstance(data, (bytes, bytearray)):
        if len(data) != 16 * count:
            raise InvalidParameters(f"from_uniform_bytes: need {16 * count} bytes, got {len(data)}")
        words = np.frombuffer(data, dtype="<u8").reshape(count, 2)
    elif isinstance(data, np.ndarray) and data.dtype == np.uint64 and data.size == 2 * count:
        words = data.reshape(count, 2)
    else:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise InvalidParameters(f"from_uniform_bytes: need {2 * count} uint64 words, got {got}")
    lo = reduce64(words[:, 0])
    hi = reduce64(words[:, 1])
    # hi * 2^64 = hi * 8 (mod p): a left rotation by 3 of a 61-bit value
    hi8 = ((hi << _S3) & _P) | (hi >> np.uint64(58))
    return add(lo, hi8)


def expand(seed: bytes, count: int) -> np.ndarray:
    """The ``count`` pseudorandom field elements a 16-byte secret ``seed`` stands for: the AES-CTR
    stream of :func:`secemb.randomness.expand_seed` read as little-endian 64-bit words, each
    shifted right by 3 (61 uniform bits), the value ``p`` skipped (probability ``2^-61`` a word), the
    first ``count`` kept: exactly uniform elements if the stream is uniform.

    Raises
    ------
    InvalidParameters
        If the seed is not 16 bytes or ``count`` is negative."""
    if len(seed) != SEED_BYTES:
        raise InvalidParameters(f"seed must be {SEED_BYTES} bytes, got {len(seed)}")
    if count < 0:
        raise InvalidParameters(f"count must be non-negative, got {count}")
    words = count + 2
    while True:
        y = expand_seed(bytes(seed), (words,), np.dtype("<u8")).astype(np.uint64) >> _S3
        kept = y[y != _P]
        if kept.size >= count:
            return kept[:count]
        words *= 2  # a longer prefix of the same stream


def expand_many(seeds: Sequence[bytes] | np.ndarray, count: int) -> np.ndarray:
    """:func:`expand` of each 16-byte secret seed, as one batch: ``uint64 (len(seeds), count)``,
    row ``i`` equal to ``expand(seeds[i], count)``.  Each seed's stream is encrypted at ``count``
    words straight into its row (:func:`stream_words`), and the shift and the search for ``p`` run
    once over the whole batch (one compiled pass with the kernels,
    :func:`secemb.fss._rangeproof_kernels.top_bits`): only the key set-up stays per seed.  A row whose first ``count``
    words hold ``p`` (probability about ``count 2^-61``) is made again by :func:`expand`, the
    specification, which skips it.

    ``seeds`` may also be their rows, uint8 (n, 16) (:func:`stream_words`).

    Raises
    ------
    InvalidParameters
        If a seed is not 16 bytes or ``count`` is negative (before any seed is expanded)."""
    rows = _seed_rows(seeds)
    if count < 0:
        raise InvalidParameters(f"count must be non-negative, got {count}")
    out = stream_words(rows, count)
    if kernels.compiled():  # the shift and the search for p in one compiled pass
        from secemb.fss._rangeproof_kernels import top_bits

        held = np.empty(len(out), bool)
        top_bits(out, held)
    else:
        out >>= _S3
        held = np.any(out == _P, axis=1)
    for i in np.flatnonzero(held).tolist():
        out[i] = expand(rows[i].tobytes(), count)
    return out


#: seeds from which :func:`stream_words` hashes the keys in one batch: one ``sha256_many`` call's
#: overhead is about three hashlib calls' (the whole call, session 30: 20 seeds 48 -> 31 us, 4 seeds
#: 13.0 -> 12.8 us, 1 seed 6.0 -> 9.2 us)
_BATCH_KEYS = 4


def stream_words(seeds: Sequence[bytes] | np.ndarray, count: int) -> np.ndarray:
    """``uint64 (len(seeds), count)``: the first ``count`` little-endian 64-bit words of each 16-byte
    seed's :func:`secemb.randomness.expand_seed` stream, each written into its row of one buffer:
    with the compiled kernels by one AES-NI pass over all the seeds' AES-256-CTR streams
    (:func:`secemb.fss._rangeproof_kernels.ctr_streams`) under their
    :func:`secemb.randomness.drbg_key` keys (hashed in one :func:`secemb.fss.hashing.sha256_many`
    call from :data:`_BATCH_KEYS` seeds on, one hashlib call a seed below), otherwise by
    ``expand_seed`` a seed (the reference).  The same words either way
    (``tests/fss/test_s28_bound_intake.py``).  ``seeds`` may also be their rows, uint8 (n, 16) (a
    batch of seeds as another kernel wrote them: no bytes objects are made to be joined again).

    Raises
    ------
    InvalidParameters
        If a seed is not 16 bytes (on either backend, before any stream is made)."""
    rows = _seed_rows(seeds)
    if not kernels.compiled():
        out = np.empty((len(rows), count), np.uint64)
        for row, seed in zip(out, rows, strict=True):
            row[:] = expand_seed(seed.tobytes(), (count,), np.dtype("<u8"))
        return out
    from secemb.fss._rangeproof_kernels import CTR_BLOCKS, ctr_streams

    size = ELEMENT_BYTES * count
    span = 16 * CTR_BLOCKS  # a row's last pass may run past it (into the next row, written after)
    buf = np.empty(len(rows) * size + span, np.uint8)
    if len(rows) >= _BATCH_KEYS:
        keys = sha256_many(DRBG_DOMAIN, rows)
    else:
        keys = np.frombuffer(b"".join(drbg_key(seed.tobytes()) for seed in rows), np.uint8).reshape(len(rows), 32)
    ctr_streams(keys, buf, size, size)
    return buf[: len(rows) * size].view("<u8").reshape(len(rows), count).astype(np.uint64, copy=False)


def _check_seeds(seeds: Sequence[bytes]) -> None:
    """Refuse (``InvalidParameters``) seeds that are not all 16 bytes (their lengths one C-level map)."""
    if set(map(len, seeds)) - {SEED_BYTES}:
        raise InvalidParameters(f"seed must be {SEED_BYTES} bytes, got {[len(seed) for seed in seeds]}")


def _seed_rows(seeds: Sequence[bytes] | np.ndarray) -> np.ndarray:
    """16-byte ``seeds`` (bytes each, or uint8 (n, 16) rows) as the rows of a C-contiguous uint8 (n, 16)
    array, refused (``InvalidParameters``) if one is not 16 bytes."""
    if isinstance(seeds, np.ndarray):
        if seeds.dtype != np.uint8 or seeds.ndim != 2 or seeds.shape[1] != SEED_BYTES:
            raise InvalidParameters(f"seed rows must be uint8 (n, {SEED_BYTES}), got {seeds.dtype} {seeds.shape}")
        return np.ascontiguousarray(seeds)
    _check_seeds(seeds)
    return np.frombuffer(b"".join(seeds), np.uint8).reshape(len(seeds), SEED_BYTES)


def xof(data: bytes, count: int) -> np.ndarray:
    """``count`` field elements derived from public ``data`` by SHAKE-128 (an extendable-output
    function, modelled as a random oracle), 16 bytes an element, reduced mod ``p``."""
    return from_uniform_bytes(hashlib.shake_128(data).digest(16 * count), count)


def to_bytes(x: np.ndarray) -> bytes:
    """Field elements as their wire bytes: little-endian ``uint64``, ``ELEMENT_BYTES`` each, in
    C order."""
    return np.ascontiguousarray(x, dtype="<u8").tobytes()


def message_nbytes(data: object) -> int | None:
    """The length in bytes of a bytes-like message of field elements (``bytes``, ``bytearray`` or a
    C-contiguous ``memoryview``, which counts bytes, not items), or None for anything else: a caller
    refuses a message whose length is not the one it expects, so a strided view (which joins and
    ``np.frombuffer`` cannot read) is refused as a message, never a TypeError (finding S33-R2)."""
    if isinstance(data, memoryview):
        return data.nbytes if data.c_contiguous else None
    return len(data) if isinstance(data, (bytes, bytearray)) else None


def batch_nbytes(msgs: Sequence[object]) -> int | None:
    """The one length of a batch of messages that are all ``bytes`` of one length (the usual batch a
    server takes in), found by C-level maps over the batch rather than a :func:`message_nbytes` call a
    message; None otherwise (an empty batch, another type among them, or lengths that differ), where a
    caller checks each message with :func:`message_nbytes` (whose rule it does not widen)."""
    if not msgs or not set(map(type, msgs)) <= {bytes}:
        return None
    lengths = set(map(len, cast("Sequence[bytes]", msgs)))
    return lengths.pop() if len(lengths) == 1 else None


def from_canonical_bytes(data: bytes | memoryview, count: int, what: str = "field elements") -> np.ndarray:
    """Parse ``count`` field elements from untrusted wire bytes (the inverse of :func:`to_bytes`).

    Raises
    ------
    InvalidMessage
        If ``data`` is not ``count * ELEMENT_BYTES`` bytes long, or an element is not below ``p``
        (each element has exactly one encoding)."""
    size = memoryview(data).nbytes  # bytes, not items: a view of words is measured in bytes too
    if size != count * ELEMENT_BYTES:
        raise InvalidMessage(f"{what}: expected {count * ELEMENT_BYTES} bytes, got {size}")
    x = np.frombuffer(data, dtype="<u8").astype(np.uint64)
    if np.any(x >= _P):
        raise InvalidMessage(f"{what}: an element is not below p = 2^61 - 1")
    return x


@cache
def barycentric(n: int) -> np.ndarray:
    """Barycentric weights ``w_j = 1 / prod_{m != j} (j - m) = (-1)^(n-1-j) / (j! (n-1-j)!)`` of the
    nodes ``0..n-1`` (computed with Python ints, once per ``n``)."""
    fact = [1] * n
    for j in range(1, n):
        fact[j] = fact[j - 1] * j % P
    inv_fact = [pow(f, P - 2, P) for f in fact]
    w = np.array([(-1) ** (n - 1 - j) * inv_fact[j] * inv_fact[n - 1 - j] % P for j in range(n)], dtype=np.uint64)
    w.setflags(write=False)
    return w


def lagrange_coefficients(n: int, x: npt.ArrayLike) -> np.ndarray:
    """The coefficients ``L_j(x)``, ``j = 0..n-1``, of the polynomial of degree below ``n`` through
    values at the nodes ``0..n-1``: its value at ``x`` is ``dot(L, values)``.

    Computed exactly, ``O(n)`` operations a point (prefix and suffix products of ``x - m``, no
    inversion): with Python ints, or in the compiled loop
    (:func:`secemb.fss._rangeproof_kernels.lagrange_rows`) when the kernels are on
    (:func:`secemb.fss.kernels.compiled`); meant for a few points, such as a batch's query.

    Parameters
    ----------
    n:
        Number of nodes (at least 1).
    x:
        Field elements, any shape, none of them a node (``x >= n``).

    Returns
    -------
    numpy.ndarray
        ``uint64``, shape ``x.shape + (n,)``: ``L_j(x) = w_j * prod_(m != j) (x - m)`` with the
        barycentric weights ``w_j``.

    Raises
    ------
    InvalidParameters
        If ``n < 1`` or some ``x`` is a node."""
    if n < 1:
        raise InvalidParameters(f"lagrange_coefficients: need at least one node, got n = {n}")
    x = _u64(x)
    if np.any(x < np.uint64(n)):
        raise InvalidParameters(f"lagrange_coefficients: x must avoid the nodes 0..{n - 1}")
    if kernels.compiled():
        from secemb.fss._rangeproof_kernels import lagrange_rows

        rows = np.empty((x.size, n), dtype=np.uint64)
        lagrange_rows(x.reshape(-1), barycentric(n), rows)
        return rows.reshape(*x.shape, n)
    before = np.empty((x.size, n), dtype=np.uint64)  # prod_{m < j} (x - m)
    after = np.empty((x.size, n), dtype=np.uint64)  # prod_{m > j} (x - m)
    for row, point in enumerate(x.reshape(-1).tolist()):
        diff = [(point - m) % P for m in range(n)]
        products = [1] * n
        for j in range(1, n):
            products[j] = products[j - 1] * diff[j - 1] % P
        before[row] = products
        products[n - 1] = 1
        for j in range(n - 2, -1, -1):
            products[j] = products[j + 1] * diff[j + 1] % P
        after[row] = products
    out = mul(mul(before, after), barycentric(n))
    return out.reshape(*x.shape, n)
