"""Random ternary projections of ring-share vectors: ``<r_i, x> mod 2^k`` (issue 34 (b)).

Hazmat layer.  Each server holds, per device, a share ``x`` in ``Z_{2^k}^L`` (the device's key
payload sums and dense share; ``k`` = 32 as ``uint32`` or 64 as ``uint64``).  The bound check of
``docs/security.md`` ("The fourth row") needs ``lambda`` projections ``<r_i, x> mod 2^k`` whose
rows ``r_i`` have independent entries -1, 0, +1 with probabilities 1/4, 1/2, 1/4, expanded from a
public 16-byte seed.  The device computes the same projections of both servers' shares, so the
expansion below is the specification; every party must implement it bit for bit.

**Expansion of a seed** (:func:`ternary_rows`).  The row key is
``K = SHA-256(b"secemb/fss/projections" || seed)[:16]``.  The stream is AES-128 in counter mode
under ``K`` (NIST SP 800-38A): block ``j`` is ``AES_K(j)`` with ``j`` the 128-bit big-endian
counter block starting at 0 (what ``cryptography``'s ``modes.CTR(bytes(16))`` gives; here it is
computed as ECB over the counter blocks, which OpenSSL runs several times faster).  A
``rows x length`` matrix takes the stream's first ``rows * B`` bytes, ``B = ceil(length / 4)``:
row ``i`` is bytes ``[i B, (i + 1) B)``, four entries a byte, least significant bits first.
Entry ``(i, j)`` reads byte ``v = stream[i B + j // 4]`` and is ``a - b`` with
``a = (v >> 2 (j mod 4)) & 1`` and ``b = (v >> (2 (j mod 4) + 1)) & 1``; a row's last byte has
``4 B - length`` unused entries (each row starts on a byte, so the compiled loop reads whole bytes).

**Exactness of the float path** (:func:`project`).  The rows are a float64 matrix and ``x`` is
split into 32-bit limbs (one for ``uint32``, two for ``uint64``), each exactly a float64.  The
inner dimension is summed in slices of at most ``2^21`` coordinates: every term is an integer
of magnitude at most ``2^32 - 1`` (an entry is -1, 0 or 1), so every partial sum, in whatever
order or blocking BLAS uses, is an integer of magnitude at most ``2^21 (2^32 - 1) < 2^53`` and
therefore exact in float64.  Each slice's limb product is converted to ``int64`` exactly and
added, shifted by its limb weight, in ``uint64`` with wraparound (correct modulo ``2^64``, hence
modulo ``2^k``).  :func:`project_reference` computes the same in the ring's own integer
arithmetic; the two agree bit for bit (``tests/fss/test_projections.py``).
"""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Iterator, Sequence

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.hashing import bytes_rows

__all__ = ["SEED_BYTES", "DOMAIN", "row_key", "ternary_rows", "project", "project_reference", "project_each",
           "project_affine", "project_own_affine", "AffinePart"]

#: Bytes of a projection seed
SEED_BYTES = 16
#: Domain-separation prefix of the row key: ``K = SHA-256(DOMAIN || seed)[:16]``
DOMAIN = b"secemb/fss/projections"

_LIMB_BITS = 32
#: Coordinates per float64 slice: ``2^21 * (2^32 - 1) < 2^53`` keeps every partial sum exact
_SLICE = 1 << 21
#: Bound on the entries of one temporary (float64 limbs, a chunk's rows or stream): 2^20 (8 MiB of float64,
#: 256 KiB of stream): small enough that the allocator reuses them rather than mapping fresh pages each call
_TEMP_ENTRIES = 1 << 20


def row_key(seed: bytes) -> bytes:
    """The AES-128 key that ``seed`` expands under: ``SHA-256(DOMAIN || seed)[:16]``.

    Raises
    ------
    InvalidParameters
        if ``seed`` is not :data:`SEED_BYTES` bytes.
    """
    return hashlib.sha256(DOMAIN + _checked_seed(seed)).digest()[:16]


def _checked_seed(seed: bytes) -> bytes:
    """``seed`` as bytes, refusing (:class:`InvalidParameters`) anything but :data:`SEED_BYTES` bytes."""
    if not isinstance(seed, bytes | bytearray) or len(seed) != SEED_BYTES:
        raise InvalidParameters(f"a projection seed must be {SEED_BYTES} bytes, got {seed!r:.60}")
    return bytes(seed)


def _stream_bytes(rows: int, length: int) -> int:
    return rows * -(-length // 4)


@functools.lru_cache(maxsize=8)
def _counter_blocks(blocks: int) -> bytes:
    """The counter blocks ``0 .. blocks - 1`` (128-bit big-endian), ECB's input in :func:`_streams`:
    the same for every key, so made once for each of the few stream sizes a process uses."""
    counters = np.zeros((blocks, 2), ">u8")
    counters[:, 1] = np.arange(blocks, dtype=np.uint64)
    return counters.tobytes()


def _streams(keys: Sequence[bytes], nbytes: int) -> np.ndarray:
    """uint8 (len(keys), nbytes): the AES-128-CTR stream under each row key (module docstring): with
    the compiled kernels by AES-NI in one call (:func:`secemb.fss._projection_kernels.ctr_streams`, rows
    padded to whole passes), else by OpenSSL, one ECB call a key over the counter blocks; the same bytes
    (``tests/fss/test_s35_projection_streams.py``)."""
    if kernels.compiled():
        from secemb.fss._projection_kernels import CTR_BYTES, ctr_streams

        padded = np.empty((len(keys), -(-nbytes // CTR_BYTES) * CTR_BYTES), np.uint8)
        ctr_streams(bytes_rows(keys, 16), padded)
        return padded[:, :nbytes]
    blocks = -(-nbytes // 16)
    src = _counter_blocks(blocks)
    # update_into wants room for one block beyond its input
    out = np.empty((len(keys), blocks * 16 + 16), np.uint8)
    for i, key in enumerate(keys):
        if blocks:
            Cipher(algorithms.AES(key), modes.ECB()).encryptor().update_into(src, out[i].data)
    return out[:, :nbytes]


def _ternary(stream: np.ndarray, rows: int, length: int) -> np.ndarray:
    """int8 (c, rows, length) from streams uint8 (c, rows * ceil(length / 4)): entry ``a - b``."""
    per_row = stream.reshape(stream.shape[0], rows, -(-length // 4))
    bits = np.unpackbits(per_row, axis=-1, count=2 * length, bitorder="little")
    pairs = bits.reshape(stream.shape[0], rows, length, 2).view(np.int8)
    return pairs[..., 0] - pairs[..., 1]


def _check_rows(rows: int, length: int) -> None:
    for name, value in (("rows", rows), ("length", length)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise InvalidParameters(f"{name} must be a non-negative int, got {value!r}")


def _check_ring(x: np.ndarray) -> None:
    if not isinstance(x, np.ndarray) or x.dtype not in (np.uint32, np.uint64) or x.ndim != 2:
        shape = getattr(x, "shape", None)
        dtype = getattr(x, "dtype", type(x).__name__)
        raise InvalidParameters(f"x must be a 2-D uint32 or uint64 ring array (n, L), got {dtype} of shape {shape}")


def ternary_rows(seed: bytes, rows: int, length: int) -> np.ndarray:
    """The reference expansion of ``seed``: the ``rows x length`` ternary matrix.

    Parameters
    ----------
    seed: 16 bytes (public; a challenge drawn after the upload).
    rows, length: the matrix shape (``lambda`` and ``L``), non-negative.

    Returns
    -------
    int8 (rows, length) with entries -1, 0, +1 (probabilities 1/4, 1/2, 1/4), as the module
    docstring specifies.

    Raises
    ------
    InvalidParameters
        for a seed that is not 16 bytes or a negative or non-integer shape.
    """
    _check_rows(rows, length)
    return _ternary(_streams([row_key(seed)], _stream_bytes(rows, length)), rows, length)[0]


def _float_products(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x @ t.T mod 2^k`` for int8 ``t`` (rows, L) and ring ``x`` (n, L), through float64 BLAS
    (exactness: module docstring).  Returns the ring dtype (n, rows)."""
    n, length = x.shape
    acc = np.zeros((n, t.shape[0]), np.uint64)
    tf = t.astype(np.float64)
    limbs = x.dtype.itemsize * 8 // _LIMB_BITS
    step = min(_SLICE, max(1, _TEMP_ENTRIES // max(1, n)))
    with np.errstate(over="ignore"):
        for lo in range(0, length, step):
            xs = x[:, lo : lo + step]
            ts = tf[:, lo : lo + step].T
            for k in range(limbs):
                limb = xs if limbs == 1 else (xs >> np.uint64(_LIMB_BITS * k)) & np.uint64(0xFFFFFFFF)
                part = (limb.astype(np.float64) @ ts).astype(np.int64).view(np.uint64)
                acc += part << np.uint64(_LIMB_BITS * k)
    return acc.astype(x.dtype)


def _integer_products(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x @ t^T mod 2^k`` in the ring's integer arithmetic: int8 ``t`` (..., rows, L), ring
    ``x`` (..., n, L) -> ring (..., n, rows).  -1 becomes ``2^k - 1`` and numpy's unsigned
    matmul wraps."""
    return np.matmul(x, np.swapaxes(t, -1, -2).astype(x.dtype))


def project(seed: bytes, x: np.ndarray, rows: int = 40) -> np.ndarray:
    """The projections of every device's share on one seed's rows, through float64 BLAS.

    The bound check (:mod:`secemb.protocols.secemb.bounds`) uses :func:`project_each` instead: its
    compiled loop needs no BLAS, whose thread pool, woken by products of this size, took 10 to
    100 times the single-thread time under load (one device's (2, 16,251) projection: 46 ms
    against 0.25 ms, one run on 2 shared cores).

    Parameters
    ----------
    seed: 16 bytes, one for all devices.
    x: ring array (n, L), uint32 (``Z_{2^32}``) or uint64 (``Z_{2^64}``): one share per device.
    rows: ``lambda``, the number of projections.

    Returns
    -------
    ring array (n, rows) of ``x``'s dtype: ``out[d, i] = <r_i, x[d]> mod 2^k`` with
    ``r = ternary_rows(seed, rows, L)``.  Exact for any ``L`` (module docstring); equal to
    :func:`project_reference` bit for bit.

    Raises
    ------
    InvalidParameters
        for a bad seed, ``x`` that is not a 2-D uint32/uint64 array, or a negative ``rows``.
    """
    _check_ring(x)
    t = ternary_rows(seed, rows, x.shape[1])
    return _float_products(t, x)


def project_reference(seed: bytes, x: np.ndarray, rows: int = 40) -> np.ndarray:
    """:func:`project` in the ring's own integer arithmetic (numpy's unsigned matmul, which
    wraps): the reference the float path is checked against.  Same parameters and result."""
    _check_ring(x)
    t = ternary_rows(seed, rows, x.shape[1])
    return _integer_products(t, x)


def _seed_indices(seeds: Sequence[bytes] | np.ndarray, n: int) -> tuple[list[bytes], np.ndarray]:
    """n devices' seeds (bytes or uint8 (n, 16)), validated: the row keys of the distinct seeds
    (:func:`row_key`, each hashed once, in order of first use) and, per device, the index of its
    seed's key, intp (n,).  Seeds that are all ``bytes`` (a server's batch, which often shares one
    challenge) are grouped and looked up by C-level maps and each distinct one checked once, not
    one Python step a device; others one at a time (:func:`_checked_seed`'s refusal either way)."""
    if isinstance(seeds, np.ndarray):
        if seeds.dtype != np.uint8 or seeds.shape != (n, SEED_BYTES):
            raise InvalidParameters(f"seeds must be uint8 ({n}, {SEED_BYTES}), got {seeds.dtype} {seeds.shape}")
        listed: list[bytes] = [bytes(s) for s in np.ascontiguousarray(seeds)]
    else:
        listed = list(seeds)
        if len(listed) != n:
            raise InvalidParameters(f"need one seed per device: {n} devices, got {len(listed)} seeds")
    if set(map(type, listed)) <= {bytes}:  # hashable as they are: the distinct ones, in order of first use
        index = {seed: k for k, seed in enumerate(dict.fromkeys(listed))}
        keys = [row_key(seed) for seed in index]  # row_key checks each (the first bad one in device order)
        return keys, np.fromiter(map(index.__getitem__, listed), np.intp, n)
    firsts: dict[bytes, int] = {}
    which = np.empty(n, np.intp)
    for d, seed in enumerate(listed):
        which[d] = firsts.setdefault(_checked_seed(seed), len(firsts))
    return [row_key(seed) for seed in firsts], which


def _nothing_to_project(seeds: Sequence[bytes] | np.ndarray, n: int, rows: int, dtype: np.dtype) -> np.ndarray:
    """The answer to ``rows = 0`` or ``L = 0`` on every backend (finding S32-X3): zeros (n, rows) of
    ``dtype``, after the seeds are checked as a projection checks them."""
    _seed_indices(seeds, n)
    return np.zeros((n, rows), dtype)


def _chunks(seeds: Sequence[bytes] | np.ndarray, n: int, rows: int,
            length: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The devices grouped by seed, in chunks of distinct seeds (at most :data:`_TEMP_ENTRIES`
    matrix entries a chunk, or one seed): per chunk ``(stream, devices, which)``, its seeds'
    streams uint8 (s, rows * ceil(length / 4)) (:func:`_streams`, each seed expanded once), its
    devices intp (c,) and the index of each one's stream in ``stream`` intp (c,)."""
    keys, which = _seed_indices(seeds, n)
    nbytes = _stream_bytes(rows, length)
    if len(keys) == 1:  # one seed (a cuckoo batch's challenge): one chunk of every device, in order
        yield _streams(keys, nbytes), np.arange(n), which
        return
    order = np.argsort(which, kind="stable")  # the devices grouped by seed
    starts = np.searchsorted(which[order], np.arange(len(keys) + 1))  # seed s's devices: order[starts[s]:starts[s+1]]
    chunk = max(1, _TEMP_ENTRIES // max(1, rows * length))
    for lo in range(0, len(keys), chunk):
        hi = min(len(keys), lo + chunk)
        devices = order[starts[lo] : starts[hi]]
        yield _streams(keys[lo:hi], nbytes), devices, which[devices] - lo


def project_each(seeds: Sequence[bytes] | np.ndarray, x: np.ndarray, rows: int = 40) -> np.ndarray:
    """The projections of each device's share on its own seed's rows (a per-device challenge).

    Parameters
    ----------
    seeds: n seeds of 16 bytes, as a sequence of bytes or uint8 (n, 16); seed ``d`` is device ``d``'s.
        Devices may share a seed (one challenge for a batch): its rows are expanded once.
    x: ring array (n, L), uint32 or uint64.
    rows: ``lambda``.

    Returns
    -------
    ring array (n, rows) of ``x``'s dtype, row ``d`` equal to ``project(seeds[d], x[d:d+1], rows)[0]``.

    The distinct seeds go in chunks of at most :data:`_TEMP_ENTRIES` matrix entries (one seed a
    chunk where its rows are larger), each expanded once, with every device of the chunk's
    seeds.  Each seed's rows are expanded to int8 (a byte an entry) once and multiplied with its
    devices' shares: with the compiled kernels (:func:`secemb.fss.kernels.compiled`) by AMX tile
    products of the rows by the devices' byte planes where the CPU and Linux allow it, else by AVX-512
    VNNI byte dot products of the same planes where the CPU has them, else a numba
    loop in the ring's own wrapping words, four devices a pass on the same expanded rows (on a
    uint32 ring with AVX2, ``vpsignd`` for the products), both in
    :mod:`secemb.fss._projection_kernels` (:class:`~secemb.fss._projection_kernels.Products`),
    without BLAS (whose threads only cost here: a device's projections are a thin product);
    otherwise as one unsigned matmul (:func:`project_reference`'s arithmetic).

    Raises
    ------
    InvalidParameters
        for seeds of the wrong number or length, ``x`` that is not a 2-D uint32/uint64 array,
        or a negative ``rows``.
    """
    _check_ring(x)
    _check_rows(rows, x.shape[1])
    n, length = x.shape
    if rows == 0 or length == 0:
        return _nothing_to_project(seeds, n, rows, x.dtype)
    compiled = kernels.compiled()
    if compiled:
        from secemb.fss._projection_kernels import Products

        products, x = Products(x.dtype, rows, length), np.ascontiguousarray(x)
    acc = np.empty((n, rows), x.dtype)
    for stream, devices, which in _chunks(seeds, n, rows, length):
        for s in range(stream.shape[0]):
            some = devices[which == s]
            if compiled:
                products.expand(stream, s)
                products.project(x, some, acc, some)
            else:
                acc[some] = _integer_products(_ternary(stream[s : s + 1], rows, length)[0], x[some])
    return acc


#: one device's vector in affine form for :func:`project_affine`: ``(base, count, words, tail)``
AffinePart = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _affine_checked(parts: Sequence[AffinePart]) -> tuple[np.dtype, int]:
    """The ring dtype and the length ``L = S w + P`` of :func:`project_affine`'s ``parts``, validated: by
    C-level maps over the parts' arrays where every part is a tuple of four ``numpy.ndarray`` (a server's
    batch), else (or where those find a fault, to name it) one part at a time."""
    fast = _affine_uniform(parts)
    if fast is not None:
        return fast
    for got in parts:  # four isinstance calls, not a generator a part: this runs for every device of a check
        if not (isinstance(got, tuple) and len(got) == 4 and isinstance(got[0], np.ndarray)
                and isinstance(got[1], np.ndarray) and isinstance(got[2], np.ndarray)
                and isinstance(got[3], np.ndarray)):
            raise InvalidParameters("each part must be a tuple of four arrays (base, count, words, tail)")
    if not parts:
        return np.dtype(np.uint64), 0
    first, _, _, first_tail = parts[0]
    dtype, shape, size = first.dtype, first.shape, first_tail.shape
    if dtype not in (np.uint32, np.uint64) or first.ndim != 2 or first_tail.ndim != 1:
        raise InvalidParameters(f"base must be a uint32 or uint64 ring array (S, w) and tail (P,), got {dtype} "
                                f"{shape} and {first_tail.shape}")
    for base, count, words, tail in parts:
        if (base.dtype != dtype or words.dtype != dtype or tail.dtype != dtype or count.dtype.kind not in "ui"
                or base.shape != shape or words.shape != shape or count.shape != shape[:1] or tail.shape != size):
            raise InvalidParameters(f"a part does not match ({dtype} base and words {shape}, integer count "
                                    f"{shape[:1]}, {dtype} tail {size}): got {base.dtype} {base.shape}, "
                                    f"{count.dtype} {count.shape}, {words.dtype} {words.shape}, {tail.dtype} "
                                    f"{tail.shape}")
    return dtype, shape[0] * shape[1] + size[0]


def _affine_uniform(parts: Sequence[AffinePart]) -> tuple[np.dtype, int] | None:
    """:func:`_affine_checked`'s answer where every part is a tuple of four exact ``numpy.ndarray`` of
    the first part's dtype (uint32 or uint64) and shapes (base and words 2-D, count 1-D integer of
    their rows, tail 1-D), checked by a few C-level maps over all of them; else ``None``."""
    if not parts or set(map(type, parts)) != {tuple} or set(map(len, parts)) != {4}:
        return None
    bases, counts, words, tails = zip(*parts, strict=True)
    arrays = (*bases, *words, *tails)
    if set(map(type, arrays)) != {np.ndarray} or set(map(type, counts)) != {np.ndarray}:
        return None
    dtype, shape, size = bases[0].dtype, bases[0].shape, tails[0].shape
    if (dtype not in (np.uint32, np.uint64) or len(shape) != 2 or len(size) != 1
            or set(map(_DTYPE, arrays)) != {dtype} or {d.kind for d in set(map(_DTYPE, counts))} - {"u", "i"}
            or set(map(_SHAPE, bases + words)) != {shape} or set(map(_SHAPE, counts)) != {shape[:1]}
            or set(map(_SHAPE, tails)) != {size}):
        return None
    return dtype, shape[0] * shape[1] + size[0]


_DTYPE, _SHAPE = operator.attrgetter("dtype"), operator.attrgetter("shape")


def project_affine(seeds: Sequence[bytes] | np.ndarray, negate: bool, parts: Sequence[AffinePart],
                   rows: int = 40) -> np.ndarray:
    """:func:`project_each` of vectors given in affine form, without forming them: device ``d``'s
    ``parts[d] = (base, count, words, tail)`` stands for ``x_d = ((-1)^negate (base + count[:, None]
    * words)).ravel() || tail`` in the ring (a server's payload shares, :func:`secemb.fss.fused.payload_shares`,
    followed by its dense share).

    Parameters
    ----------
    seeds: n seeds, as for :func:`project_each`.
    negate: whether the affine part is negated (party 1's payload shares).
    parts: n tuples: ``base`` and ``words`` ring (S, w), ``count`` integer (S,), ``tail`` ring
        (P,), the same dtype (uint32 or uint64) and shapes for every device.
    rows: ``lambda``.

    Returns
    -------
    ring array (n, rows) of the parts' dtype, equal to ``project_each(seeds, x, rows)`` for ``x``
    the stacked vectors (bit for bit: ``tests/fss/test_s21_bound_speed.py``).  With the compiled
    kernels the vectors are computed a pass of the products' devices at a time (four, or two on a
    uint64 ring with AMX or VNNI) into a scratch and projected on their seed's rows, expanded once for all
    its devices (:mod:`secemb.fss._projection_kernels`: no (n, L) array); otherwise ``x`` is formed
    and projected as :func:`project_each` does.

    Raises
    ------
    InvalidParameters
        for seeds of the wrong number or length, parts that do not match, or a negative ``rows``.
    """
    dtype, length = _affine_checked(parts)
    return _project_affine(seeds, negate, parts, rows, dtype, length)


def project_own_affine(seeds: Sequence[bytes] | np.ndarray, negate: bool, parts: Sequence[AffinePart],
                       rows: int = 40) -> np.ndarray:
    """:func:`project_affine` of parts that the caller made from its own state -- a server's payload sums
    from its walk, the correction words it absorbed and its dense shares, whose dtypes and shapes its
    round fixes -- without :func:`_affine_checked`'s pass over the parts' arrays (~30 us for 20 devices
    warm, ~50-75 in a bound check's flow, session 39): the parts are taken as the first one's dtype and
    length.  Untrusted or caller-given parts go to :func:`project_affine`.  Nothing outside the arrays is
    read either way: the compiled :func:`~secemb.fss._projection_kernels.affine_vector` refuses
    (``ValueError``) a part whose shapes do not make the first part's length; without the compiled
    kernels, or where no kernel would run (no rows, or a first part of no length, ``L = 0``, so none would
    refuse the others; finding S39-R1), this is :func:`project_affine`, checks included.  The same elements as
    :func:`project_affine` (``tests/fss/test_s39_own_inputs.py``)."""
    if not kernels.compiled() or not parts or rows == 0 or (parts[0][0].size + parts[0][3].size) == 0:
        return project_affine(seeds, negate, parts, rows)  # no kernel would read (and refuse) the parts: checked here
    base, _, _, tail = parts[0]
    return _project_affine(seeds, negate, parts, rows, base.dtype, base.size + tail.size)


def _project_affine(seeds: Sequence[bytes] | np.ndarray, negate: bool, parts: Sequence[AffinePart], rows: int,
                    dtype: np.dtype, length: int) -> np.ndarray:
    """:func:`project_affine` of parts of ``dtype`` (uint32 or uint64) and vectors ``length`` long."""
    _check_rows(rows, length)
    n = len(parts)
    if rows == 0 or length == 0:
        return _nothing_to_project(seeds, n, rows, dtype)
    if not kernels.compiled():
        x = np.empty((n, length), dtype)
        for d, (base, count, words, tail) in enumerate(parts):
            sparse = x[d, : base.size].reshape(base.shape)
            np.multiply(count.astype(dtype)[:, None], words, out=sparse)
            sparse += base
            if negate:
                np.negative(sparse, out=sparse)
            x[d, base.size :] = tail
        return project_each(seeds, x, rows)
    from secemb.fss._projection_kernels import Products

    acc, products = np.empty((n, rows), dtype), Products(dtype, rows, length)
    xs, group, negate = np.empty((products.group, length), dtype), products.group, bool(negate)
    for stream, devices, which in _chunks(seeds, n, rows, length):
        for s in range(stream.shape[0]):
            # the seed's passes made before its kernels run (their memory traffic leaves Python's caches cold)
            some = devices[which == s]
            passes = [_pass(parts, some[lo : lo + group], group) for lo in range(0, some.size, group)]
            products.expand(stream, s)
            for got, to in passes:
                products.project_parts(got, negate, xs, acc, to)
    return acc


def _pass(parts: Sequence[AffinePart], to: np.ndarray, group: int) -> tuple[tuple[AffinePart, ...], np.ndarray]:
    """A pass of :func:`project_affine`'s compiled products: the parts of its devices ``to`` (intp, at most
    ``group``) as a tuple of ``group`` (a short pass repeats its last device, which is not read) and ``to``."""
    pick = to.tolist()
    return tuple(map(parts.__getitem__, pick + pick[-1:] * (group - len(pick)))), to
