"""The sketch check of a point function, with the challenge drawn at retrieval (issue 34 (a)).

Hazmat layer; it knows nothing of protocols.  A server walks every key of a device to all its
leaves anyway (:func:`secemb.fss.fused.retrieve_and_prepare`); this module turns those leaf words
into three field elements per key, at one AES block per leaf and no second walk.  The
difference of the two servers' triples is the key's sketch ``x_k``; for an honest pair of keys
(leaf words that differ at one position at most) it satisfies ``A^2 = B C``, which the device
proves without revealing ``x_k`` (:mod:`secemb.fss.sketchproof`).  docs/security.md, "A sound
sketch with the challenge drawn at retrieval", gives the construction and its argument.

Field ``F_p``, ``p = 2^61 - 1`` (:data:`secemb.fss.field.P`).  Per device, a 16-byte secret seed
``c_u`` (:data:`SKETCH_SEED_BYTES`, drawn by the servers after the device's keys are fixed) is
expanded (:func:`expand`) as ``SHAKE-128(b"secemb-sketch-expand" || c_u)``, 32 bytes: the first 16
are the AES-128 key ``k_u``, the next 16 the coefficients' stream seed ``s_r``.  The coefficient of
padded domain position ``x < mp`` is block ``x`` of ``s_r``'s AES-256-CTR stream
(:func:`secemb.randomness.expand_seed`'s: key ``SHA-256(b"secemb.CtrDrbg" || s_r)``, the counter
block ``x`` as a big-endian 128-bit integer) read as a little-endian 128-bit integer reduced mod
``p`` (within ``2^-67`` of uniform, :func:`secemb.fss.field.from_uniform_bytes`)::

    r_x = int.from_bytes(AES-256_{SHA-256(b"secemb.CtrDrbg" || s_r)}(x.to_bytes(16, "big")), "little") mod p

so a server expands all ``mp`` positions as one CTR stream and the device computes ``r_x`` at its
own points only (random access).  For a leaf word ``w`` (uint64 (2,), word 0 first:
the 16 little-endian bytes AES sees) the leaf hash is the keyed Matyas-Meyer-Oseas block read as
a little-endian 128-bit integer mod ``p``::

    z(w) = int.from_bytes(AES_{k_u}(w) XOR w, "little") mod p

and per key ``k`` (of device ``k // per_user``) and server ``b``, over the key's padded
positions ``x`` with leaf words ``w_b(x)``::

    A_b = sum_x r_x z(w_b(x)),  B_b = sum_x r_x^2 z(w_b(x)),  C_b = sum_x z(w_b(x))   (mod p)

(:class:`SketchCheck`).  Server 0's share of ``x_k`` is ``(A_0, B_0, C_0)``, server 1's
``-(A_1, B_1, C_1)`` (:func:`server_inputs`); their sum is ``x_k``.  Off the key's point the two
leaf words are equal and cancel; an honest key leaves ``x_k = (r_a z, r_a^2 z, z)`` with
``z = z(w_0(alpha)) - z(w_1(alpha))``, which the device computes from its own two leaf words at
``alpha`` (:func:`device_inputs`).  Where the leaf words differ at several positions,
``A^2 - B C = -sum_{x<y} z_x z_y (r_x - r_y)^2``, a non-zero polynomial of degree 2 in ``r`` once
two of the differences ``z_x`` are non-zero (``k_u``, unknown to the device when it fixes its
leaves, makes a zero difference a ``1 / p`` event), so ``A^2 = B C`` with probability at most
``2 / p`` over ``r``; docs/security.md counts the whole bound.

The numpy reference runs AES through OpenSSL (``cryptography``), one ECB call per device and leaf
group, and the arithmetic through :mod:`secemb.fss.field`; with the compiled kernels
(:func:`secemb.fss.kernels.compiled`) one numba loop computes the keyed MMO blocks on AES-NI with
each device's round keys and sums the products (:data:`secemb.fss._sketch_kernels.sketch_accumulate`:
in vector registers with AVX-512 IFMA where the CPU has it, else as 128-bit scalar products),
equal bit for bit (``tests/fss/test_s29_sketch.py``); the device's :func:`device_inputs` hashes its
leaves and draws and reduces only its ``K`` coefficients in one compiled call on AES-NI
(:func:`secemb.fss._sketch_device_kernels.device_inputs_core`, ``tests/fss/test_s29_sketch_device.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from types import ModuleType

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secemb import randomness
from secemb.errors import InvalidParameters
from secemb.fss import field, kernels
from secemb.fss.hashing import sha256_many, shake128_many
from secemb.randomness import DRBG_DOMAIN  # drbg_key's prefix: a batch's AES-256 keys hashed in one sha256_many call

__all__ = ["SKETCH_SEED_BYTES", "SKETCH_WORDS", "EXPAND_TAG", "Expanded", "expand", "leaf_hashes",
           "SketchCheck", "device_inputs", "device_inputs_many", "server_inputs", "server_inputs_many"]

#: bytes of a device's sketch seed ``c_u``
SKETCH_SEED_BYTES = 16
#: field elements of a key's sketch: ``(A, B, C)``
SKETCH_WORDS = 3
#: the domain separation of the seed's expansion (SHAKE-128 input prefix)
EXPAND_TAG = b"secemb-sketch-expand"
_AES_KEY_BYTES = 16


@dataclass(frozen=True, eq=False)
class Expanded:
    """The expanded sketch seeds of ``n`` devices (:func:`expand`), read-only.

    Attributes
    ----------
    keys: uint8 (n, 16), each device's AES-128 key ``k_u``.
    r: uint64 (n, mp), each device's ``r_x`` in ``[0, p)``.
    r2: uint64 (n, mp), ``r_x^2 mod p``.
    """

    keys: np.ndarray
    r: np.ndarray
    r2: np.ndarray

    def __post_init__(self) -> None:
        """Refuse arrays the compiled kernel would misread (it reads the keys' bytes by address and sums
        products of ``r``, ``r2`` below ``p``): InvalidParameters."""
        k, r, r2 = self.keys, self.r, self.r2
        if k.ndim != 2 or k.shape[1] != _AES_KEY_BYTES or k.dtype != np.uint8 or not k.flags.c_contiguous or (
                r.ndim != 2 or r.shape[0] != k.shape[0] or r.shape[1] < 1 or r2.shape != r.shape) or (
                r.dtype != np.uint64 or r2.dtype != np.uint64 or (r.size and max(r.max(), r2.max()) >= field.P)):
            raise InvalidParameters(f"expanded seeds must be keys uint8 (n, {_AES_KEY_BYTES}) C-contiguous and r, r2 "
                                    f"uint64 (n, mp >= 1) below p, got {k.dtype} {k.shape}, {r.dtype} {r.shape}, "
                                    f"{r2.dtype} {r2.shape}")

    @property
    def devices(self) -> int:
        """``n``."""
        return self.r.shape[0]

    @property
    def size(self) -> int:
        """``mp``, the padded domain the positions run over."""
        return self.r.shape[1]

    @cached_property
    def round_keys(self) -> np.ndarray:
        """The AES-128 round keys of :attr:`keys` as the compiled kernel reads them: uint64
        (n, 11, 2W) (:mod:`secemb.fss._aesni`'s layout), read-only; computed on first use (only
        the compiled path uses them), or set by :func:`expand`'s compiled path with the rest."""
        out = np.empty((self.devices, 11, 2 * _compiled_sketch().LANES), np.uint64)
        _compiled_sketch().sketch_schedules(self.keys, out)
        out.flags.writeable = False
        return out


def expand(seeds: Sequence[bytes], mp: int) -> Expanded:
    """The AES keys and coefficients ``r`` of ``n`` devices' sketch seeds over ``mp`` padded
    positions: ``SHAKE-128(EXPAND_TAG || c_u)``, 16 bytes the key ``k_u`` and 16 the stream seed
    ``s_r``, then ``r_x`` block ``x`` of ``s_r``'s AES-256-CTR stream mod ``p`` (module docstring);
    the seeds' SHAKE in one batch (:func:`secemb.fss.hashing.shake128_many`: the Keccak kernel with
    the compiled kernels).  The reference: the streams :func:`secemb.fss.field.stream_words` of the
    rows' ``s_r``, their elements :func:`secemb.fss.field.from_uniform_bytes` and ``r^2``
    :func:`secemb.fss.field.mul`.  With the compiled kernels the streams' AES-256 keys are one
    SHA-256 batch and the streams, their reduction, ``r^2`` and the keys' AES-128 schedules
    (:attr:`Expanded.round_keys`) one compiled call (:func:`_expand_compiled`; session 34: one
    call where stream_words, the coefficients' loop and the schedules were three, with their
    buffers), the same elements (``tests/fss/test_s34_expand_fused.py``).

    Raises
    ------
    InvalidParameters: a seed that is not :data:`SKETCH_SEED_BYTES` bytes, or ``mp < 1``.
    """
    _check_seeds(seeds, mp)
    n = len(seeds)
    blob = _expand_rows(seeds)  # k_u || s_r a device
    keys = np.ascontiguousarray(blob[:, :_AES_KEY_BYTES])
    if kernels.compiled() and n:  # the streams, their field elements and the keys' schedules in one call
        return _expand_compiled(blob, keys, mp)
    words = field.stream_words(blob[:, _AES_KEY_BYTES:], 2 * mp)  # (n, 2 mp): r_x's lo, hi at 2x, 2x + 1
    r = field.from_uniform_bytes(words, n * mp).reshape(n, mp)
    r2 = field.mul(r, r)
    for a in (keys, r, r2):
        a.flags.writeable = False
    return Expanded(keys, r, r2)


def _expand_compiled(blob: np.ndarray, keys: np.ndarray, mp: int) -> Expanded:
    """:func:`expand` of checked seeds (``n >= 1``) with the compiled kernels, from their SHAKE rows
    ``blob`` (uint8 (n, 32), ``k_u || s_r``) and keys ``keys`` (its first 16 bytes a row, C-contiguous):
    the coefficients' AES-256 keys one :func:`~secemb.fss.hashing.sha256_many` batch (as
    :func:`secemb.fss.field.stream_words` hashes them), then their CTR streams, ``r``, ``r^2`` and
    the round keys of :attr:`Expanded.round_keys` in one compiled call
    (:func:`secemb.fss._sketch_device_kernels.expand_core`): the same elements as the reference."""
    n = len(blob)
    ctr_keys = sha256_many(DRBG_DOMAIN, blob[:, _AES_KEY_BYTES:])  # randomness.drbg_key of each s_r
    r, r2 = np.empty((n, mp), np.uint64), np.empty((n, mp), np.uint64)
    rks = np.empty((n, 11, 2 * _compiled_sketch().LANES), np.uint64)
    _device_kernels().expand_core(np.ascontiguousarray(blob), ctr_keys, r, r2, rks)
    for a in (keys, r, r2, rks):
        a.flags.writeable = False
    out = Expanded(keys, r, r2)
    out.__dict__["round_keys"] = rks  # the cached property's value, computed with the rest (as round_keys would)
    return out


def _check_seeds(seeds: Sequence[bytes], mp: int) -> None:
    """Refuse seeds that are not bytes (or bytearray) of :data:`SKETCH_SEED_BYTES`, or ``mp < 1``:
    InvalidParameters."""
    if any(not isinstance(seed, (bytes, bytearray)) or len(seed) != SKETCH_SEED_BYTES for seed in seeds):
        got = [len(s) if isinstance(s, (bytes, bytearray)) else type(s).__name__ for s in seeds]
        raise InvalidParameters(f"sketch seeds must be {SKETCH_SEED_BYTES} bytes, got {got}")
    if mp < 1:
        raise InvalidParameters(f"mp must be >= 1, got {mp}")


def _expand_rows(seeds: Sequence[bytes]) -> np.ndarray:
    """The seeds' ``SHAKE-128(EXPAND_TAG || c_u)``, 32 bytes each: uint8 (n, 32), row ``i`` the AES
    key ``k_u`` (its first 16 bytes) and the coefficients' stream seed ``s_r`` (the next 16) of
    ``seeds[i]``; one :func:`~secemb.fss.hashing.shake128_many` batch (checked seeds)."""
    rows = np.frombuffer(b"".join(bytes(seed) for seed in seeds), np.uint8).reshape(len(seeds), SKETCH_SEED_BYTES)
    return shake128_many(EXPAND_TAG, rows, _AES_KEY_BYTES + randomness.SEED_BYTES)


def leaf_hashes(key: bytes, words: np.ndarray) -> np.ndarray:
    """``z(w) = int.from_bytes(AES_key(w) XOR w, "little") mod p`` of leaf words uint64 (N, 2)
    (word 0 the low 64 bits) under the 16-byte AES key ``key``: uint64 (N,) in ``[0, p)``.  One
    OpenSSL ECB call (the reference; the device's own computation)."""
    if len(key) != _AES_KEY_BYTES:
        raise InvalidParameters(f"key must be {_AES_KEY_BYTES} bytes, got {len(key)}")
    if words.ndim != 2 or words.shape[1] != 2 or words.dtype != np.uint64:
        raise InvalidParameters(f"leaf words must be uint64 (N, 2), got {words.dtype} {words.shape}")
    w = np.ascontiguousarray(words, "<u8")
    enc = Cipher(algorithms.AES(bytes(key)), modes.ECB()).encryptor()
    y = np.frombuffer(enc.update(w.tobytes()) + enc.finalize(), "<u8").reshape(-1, 2) ^ w
    return field.from_uniform_bytes(y.astype(np.uint64), len(w))


@cache
def _compiled_sketch() -> ModuleType:
    """The compiled sketch's module (:mod:`secemb.fss._sketch_kernels`), imported once a process.
    :meth:`SketchCheck.add` takes the loop from the module at each call, so a timing wrapper
    installed as the module's attribute (``bench overhead``'s kernel clock) sees every call."""
    from secemb.fss import _sketch_kernels

    return _sketch_kernels


class SketchCheck:
    """The sketch values ``(A, B, C)`` of ``K`` keys, accumulated over the leaf groups of one
    server's walk.

    Parameters
    ----------
    expanded: the ``n`` devices' expanded seeds (:func:`expand`) over the walk's padded
        domain ``mp``; key ``k`` belongs to device ``k // per_user``.
    per_user: keys per device (``K = n per_user``).

    :meth:`add` takes the groups of :func:`secemb.fss.tree.leaf_groups` (row ``key F + f``
    holds positions ``[f 2^s, (f + 1) 2^s)``: the walk's leaf groups, :func:`secemb.fss.fused.retrieve_and_prepare`);
    :attr:`values` is uint64 (K, 3), ``(A_b, B_b, C_b)`` mod ``p`` in ``[0, p)`` of this server's
    leaves (its share of ``x_k`` is :func:`server_inputs` of them).

    Raises
    ------
    InvalidParameters: ``per_user < 1`` or ``expanded`` not an :class:`Expanded`.
    """

    def __init__(self, expanded: Expanded, per_user: int) -> None:
        if not isinstance(expanded, Expanded) or per_user < 1:
            raise InvalidParameters(f"need expanded seeds (secemb.fss.sketch.expand) and per_user >= 1, got "
                                    f"{type(expanded).__name__} and per_user={per_user}")
        self.expanded, self.per_user = expanded, per_user
        self.values = np.zeros((expanded.devices * per_user, SKETCH_WORDS), np.uint64)

    def add(self, r0: int, r1: int, leaves: np.ndarray) -> None:
        """Fold in rows ``[r0, r1)`` of the walk, leaf words uint64 (r1 - r0, 2^s, 2).

        Raises
        ------
        InvalidParameters: ``leaves`` of another dtype than native-order uint64 (the compiled
            kernel reads 16 bytes a leaf by address) or of another shape, or rows that are not rows
            of these keys' walk (the kernel indexes the devices' keys and coefficients by them,
            unchecked).
        """
        mp, keys = self.expanded.size, len(self.values)
        width = leaves.shape[1] if leaves.ndim == 3 else 0
        frontier = mp // width if width else 0
        if leaves.dtype != np.uint64 or leaves.shape != (r1 - r0, width, 2) or not (
                frontier and 0 <= r0 <= r1 <= keys * frontier):
            raise InvalidParameters(f"leaves of rows [{r0}, {r1}) of a walk of {keys} keys over {mp} "
                                    f"positions must be uint64 ({r1 - r0}, 2^s <= {mp}, 2), got {leaves.dtype} "
                                    f"{leaves.shape}")
        if r0 == r1:
            return
        ex = self.expanded
        if kernels.compiled():  # what it reads C-contiguous and read-only: one compiled signature (session 37)
            ro = kernels.read_only
            _compiled_sketch().sketch_accumulate(ro(leaves), r0, frontier, self.per_user, ro(ex.round_keys),
                                                 ro(ex.r), ro(ex.r2), self.values)
            return
        # the reference: each device's leaves of the group in one ECB call, the sums by key over
        # whole keys' positions (the group's rows placed among zeros: z = 0 adds nothing)
        span = frontier * width  # positions of a key the walk covers
        rows_per_device = frontier * self.per_user
        z = np.empty((r1 - r0) * width, np.uint64)
        flat = leaves.reshape(-1, 2)
        for u in range(r0 // rows_per_device, (r1 - 1) // rows_per_device + 1):
            a, b = max(r0, u * rows_per_device) - r0, min(r1, (u + 1) * rows_per_device) - r0
            z[a * width : b * width] = leaf_hashes(ex.keys[u].tobytes(), flat[a * width : b * width])
        k0, k1 = r0 // frontier, -(-r1 // frontier)
        padded = np.zeros((k1 - k0) * span, np.uint64)
        padded[r0 * width - k0 * span : r1 * width - k0 * span] = z
        zk = padded.reshape(k1 - k0, span)
        dev = np.arange(k0, k1) // self.per_user
        sums = np.stack([field.dot(ex.r[dev, :span], zk), field.dot(ex.r2[dev, :span], zk),
                         field.sum_mod(zk, axis=1)], axis=1)
        self.values[k0:k1] = field.add(self.values[k0:k1], sums)


def device_inputs(seed: bytes, mp: int, alphas: np.ndarray, leaf0: np.ndarray, leaf1: np.ndarray) -> np.ndarray:
    """A device's sketches ``x_k = (r_a z, r_a^2 z, z)``, ``z = z(leaf0[k]) - z(leaf1[k])`` mod
    ``p``: uint64 (K, 3), for its sketch seed ``seed`` (``c_u``), the walk's padded domain ``mp``,
    its keys' points ``alphas`` int (K,) and both parties' leaf words at them, uint64 (K, 2) each
    (:class:`secemb.fss.dpf.GenState`'s ``leaf0``, ``leaf1``).  It equals the sum of the two
    servers' :func:`server_inputs` for honest keys.

    Every key has a point: :func:`secemb.fss.dpf.gen_path` makes the two parties' control bits
    differ at ``alpha`` whatever the payload, and a key of an empty cuckoo bucket is a key with
    point 0 and payload 0 (``secemb/protocols/secemb/user.py``), so its sketch is not zero either.
    There is no "no point" marker: a point outside ``[0, mp)`` is refused.

    Raises
    ------
    InvalidParameters: a seed of another length, ``mp < 1``, leaf words not uint64 (K, 2), or a
        point outside ``[0, mp)``.
    """
    alphas = _device_points([seed], mp, alphas, leaf0, leaf1, many=False)
    # the compiled call gives the same field elements as the numpy reference
    if kernels.compiled():
        return _device_inputs_compiled([seed], mp, alphas[None], leaf0[None], leaf1[None])[0]
    return _device_inputs_reference(seed, mp, alphas, leaf0, leaf1)


def device_inputs_many(seeds: Sequence[bytes], mp: int, alphas: np.ndarray, leaf0: np.ndarray,
                       leaf1: np.ndarray) -> np.ndarray:
    """:func:`device_inputs` of ``n`` devices at once (a simulated round's batch): uint64 (n, K, 3),
    row ``i`` device ``i``'s sketches for its seed ``seeds[i]``, points ``alphas[i]`` (int (n, K))
    and leaf words ``leaf0[i]``, ``leaf1[i]`` (uint64 (n, K, 2) each), the same elements as
    ``device_inputs(seeds[i], mp, alphas[i], leaf0[i], leaf1[i])``.  With the compiled kernels one
    SHAKE-128 batch, its coefficients' AES-256 keys one SHA-256 batch and the sketches one
    compiled call (:func:`secemb.fss._sketch_device_kernels.device_inputs_many_core`); otherwise
    the numpy reference device by device.

    Raises
    ------
    InvalidParameters: as :func:`device_inputs`, or the arrays do not hold ``n = len(seeds)``
        devices.
    """
    alphas = _device_points(seeds, mp, alphas, leaf0, leaf1, many=True)
    if kernels.compiled():
        return _device_inputs_compiled(seeds, mp, alphas, leaf0, leaf1)
    out = np.empty((len(seeds), alphas.shape[1], SKETCH_WORDS), np.uint64)
    for i, seed in enumerate(seeds):
        out[i] = _device_inputs_reference(seed, mp, alphas[i], leaf0[i], leaf1[i])
    return out


def _device_points(seeds: Sequence[bytes], mp: int, alphas: np.ndarray, leaf0: np.ndarray, leaf1: np.ndarray, *,
                   many: bool) -> np.ndarray:
    """The checked points of :func:`device_inputs` (``many`` False: one device, points (K,)) or
    :func:`device_inputs_many` (points (n, K), ``n = len(seeds)``) as int64, or their
    InvalidParameters."""
    alphas = np.asarray(alphas)
    lead = (len(seeds),) if many else ()
    if alphas.ndim != len(lead) + 1 or alphas.shape[:-1] != lead or (
            alphas.size and not np.issubdtype(alphas.dtype, np.integer)):
        want = f"({len(seeds)}, K)" if many else "(K,)"
        raise InvalidParameters(f"points must be integers {want}, got {alphas.dtype} {alphas.shape}")
    for name, leaf in (("leaf0", leaf0), ("leaf1", leaf1)):
        if not isinstance(leaf, np.ndarray) or leaf.shape != (*alphas.shape, 2) or leaf.dtype != np.uint64:
            raise InvalidParameters(f"{name} must be uint64 {(*alphas.shape, 2)} for points {alphas.shape}, got "
                                    f"{getattr(leaf, 'dtype', type(leaf).__name__)} {getattr(leaf, 'shape', '')}")
    _check_seeds(seeds, mp)
    if alphas.size and (alphas.min() < 0 or alphas.max() >= mp):
        raise InvalidParameters(f"points must be in [0, {mp}), got [{alphas.min()}, {alphas.max()}]")
    return alphas.astype(np.int64)


def _device_inputs_reference(seed: bytes, mp: int, alphas: np.ndarray, leaf0: np.ndarray,
                             leaf1: np.ndarray) -> np.ndarray:
    """:func:`device_inputs` of checked arguments (points int64) in numpy: the whole expansion
    (:func:`expand`), one OpenSSL call a leaf array, :mod:`secemb.fss.field`'s arithmetic."""
    ex = expand([seed], mp)
    key = ex.keys[0].tobytes()
    z = field.sub(leaf_hashes(key, leaf0), leaf_hashes(key, leaf1))
    return np.stack([field.mul(ex.r[0, alphas], z), field.mul(ex.r2[0, alphas], z), z], axis=1)


def _device_inputs_compiled(seeds: Sequence[bytes], mp: int, alphas: np.ndarray, leaf0: np.ndarray,
                            leaf1: np.ndarray) -> np.ndarray:
    """:func:`device_inputs_many` of checked arguments (points int64 (n, K)) in one compiled call
    after the seeds' SHAKE batch and the coefficients' AES-256 keys
    (:func:`secemb.fss._sketch_device_kernels.device_inputs_many_core`: each device's leaf arrays'
    keyed MMO blocks and its coefficients' CTR blocks at its ``K`` points on AES-NI, no cipher
    object)."""
    rows = _expand_rows(seeds)  # k_u || s_r a device
    ctr_keys = sha256_many(DRBG_DOMAIN, rows[:, _AES_KEY_BYTES:])  # randomness.drbg_key of each s_r
    out = np.empty((*alphas.shape, SKETCH_WORDS), np.uint64)
    # strided leaf arrays copied C-contiguous (a device's own are): one compiled signature (session 37)
    _device_kernels().device_inputs_many_core(np.ascontiguousarray(rows[:, :_AES_KEY_BYTES]), ctr_keys, alphas,
                                              np.ascontiguousarray(leaf0), np.ascontiguousarray(leaf1), out)
    return out


@cache
def _device_kernels() -> ModuleType:
    """The device's compiled sketch module (:mod:`secemb.fss._sketch_device_kernels`), imported
    once a process; its loop read from it at each call."""
    from secemb.fss import _sketch_device_kernels

    return _sketch_device_kernels


def server_inputs(values: np.ndarray, party: int) -> np.ndarray:
    """Server ``party``'s share of the keys' sketches from its :attr:`SketchCheck.values`
    uint64 (K, 3): server 0's are the values, server 1's their negation mod ``p``; the two shares
    add up to ``x_k`` (uint64 (K, 3), a new array).

    Raises
    ------
    InvalidParameters: ``party`` not 0 or 1, or ``values`` not uint64 (K, 3) in ``[0, p)``.
    """
    if not isinstance(values, np.ndarray) or values.ndim != 2:
        raise InvalidParameters(f"values must be uint64 (K, {SKETCH_WORDS}) below p, got "
                                f"{getattr(values, 'dtype', type(values).__name__)} {getattr(values, 'shape', '')}")
    return _shares(values.copy(), party)


def server_inputs_many(values: Sequence[np.ndarray], party: int) -> np.ndarray:
    """:func:`server_inputs` of ``n`` devices' values (uint64 (K, 3) each, one ``K``; another byte
    order is read by value) as one array uint64 (n, K, 3): the values stacked (one copy), then
    checked and (server 1) negated in place, not a new array each step.  The usual batch -- native
    uint64 arrays of one shape, as a server's walk leaves them -- is checked by its distinct
    (type, shape, dtype), one for the batch, and stacked in one :func:`numpy.array` call; any other
    is checked array by array.

    Raises
    ------
    InvalidParameters: ``party`` not 0 or 1, or the values not ``n >= 1`` unsigned 64-bit (K, 3)
        arrays of one shape in ``[0, p)``.
    """
    try:
        kinds = {(type(v), v.shape, v.dtype) for v in values}
    except AttributeError:  # not an array: refused below
        kinds = set()
    if len(kinds) == 1:
        ((kind, shape, dtype),) = kinds
        if issubclass(kind, np.ndarray) and len(shape) == 2 and dtype == np.uint64:
            return _shares(np.array(values, np.uint64), party)  # one copy of the one shape
    if len(values) == 0 or any(not isinstance(v, np.ndarray) or v.ndim != 2 or v.dtype.kind != "u"
                               or v.dtype.itemsize != 8 for v in values):  # S33-R1, S33-R3: each array's own dtype
        raise InvalidParameters(f"values must be n >= 1 uint64 (K, {SKETCH_WORDS}) arrays below p")
    try:
        stacked = np.stack(values)
    except ValueError as exc:  # arrays of different shapes
        raise InvalidParameters(f"values must be uint64 (K, {SKETCH_WORDS}) arrays of one shape: {exc}") from None
    return _shares(stacked, party)


def _shares(x: np.ndarray, party: int) -> np.ndarray:
    """Server ``party``'s shares of the sketch values ``x`` (uint64 (..., 3), an array of the
    caller's to overwrite), checked: ``x`` itself (server 0), or negated mod ``p`` in place
    (server 1; the elements :func:`secemb.fss.field.neg` gives); or InvalidParameters."""
    if party not in (0, 1):
        raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
    fits = x.shape[-1] == SKETCH_WORDS and x.dtype == np.uint64
    if fits and kernels.compiled():  # the check and the negation in one compiled pass (the same elements)
        fits = bool(_compiled_sketch().shares_core(x.reshape(-1, copy=False), party == 1))  # a view: negated in place
    elif fits:
        fits = not x.size or x.max() < field.P
        if fits and party:
            np.subtract(np.uint64(field.P), x, out=x, where=x != 0)  # -v = p - v, and -0 = 0
    if not fits:
        raise InvalidParameters(f"values must be uint64 (K, {SKETCH_WORDS}) below p, got {x.dtype} "
                                f"{x.shape[1:] if x.ndim == 3 else x.shape}")
    return x
