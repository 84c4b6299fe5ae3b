"""SHA-256 over the SHA-NI instructions as a numba kernel (internal): many messages of one length
that share a prefix, hashed without the GIL, so a backend's threads share them (the servers' row
tags, :func:`secemb.protocols.secemb.checks.row_tags`, and the parties' key digests,
:func:`~secemb.protocols.secemb.checks.key_digests`), and HMAC-SHA256 of a batch's rows on top of it
(:func:`hmac_sha256_many`: the servers' sketch seeds under the round secret, server 1's seed tags
under each device's key; session 34).

Hazmat layer, imported only where :func:`secemb.fss.kernels.sha_compiled` says the kernel runs
(numba, and a CPU with SHA-NI), by :func:`secemb.fss.hashing.sha256_many`, which keeps
:mod:`hashlib` as the reference; ``tests/fss/test_fss_hashing.py`` checks the kernel against it.
The compression function follows Intel's SHA extensions reference: the state in two vectors
(``ABEF``, ``CDGH``), four rounds per pair of ``SHA256RNDS2`` and the message schedule by
``SHA256MSG1`` / ``SHA256MSG2``, two messages' compressions interleaved (:data:`LANES`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from secemb.fss.kernels import read_only

__all__ = ["hmac_sha256_many", "sha256_many"]

_I32 = ir.IntType(32)
_V4 = ir.VectorType(_I32, 4)

#: the 64 round constants of SHA-256 (FIPS 180-4, 4.2.2)
_K = [
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
]
#: the initial hash value H(0) (FIPS 180-4, 5.3.3)
_H0 = np.array([0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19],
               np.uint32)


def _shuffle(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, idx: list[int]) -> ir.Value:
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, len(idx)), idx))


def _pshufd(builder: ir.IRBuilder, a: ir.Value, imm: int) -> ir.Value:
    return _shuffle(builder, a, a, [(imm >> (2 * i)) & 3 for i in range(4)])


#: messages hashed side by side: SHA256RNDS2's latency, not its throughput, bounds one message's
#: compression, so two independent ones interleaved keep the unit busier (a 100 x 295 KB batch: 1.5x
#: hashlib, 1.7x one message at a time; more lanes gained nothing measurable on this Xeon)
LANES = 2


@intrinsic
def _compress(typingctx, states, blocks):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """SHA-256's compression of :data:`LANES` independent messages, interleaved: lane ``l``'s
    64-byte block at the address ``blocks[l]`` (``blocks``: the address of LANES uintp) into its
    state, the 8 native uint32 words ``a..h`` at ``states + 32 l``, in place.

    It starts with ``VZEROUPPER``: the SHA instructions have only legacy-SSE encodings, and LLVM
    does not clear the vector registers' upper halves before them (only at calls and returns), so
    after any 256- or 512-bit instruction of the caller (a vectorised copy) each transition between
    them and the VEX-encoded adds and shuffles around them stalled (~5 us a block, 100x, measured)."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        i64 = ir.IntType(64)
        fn2 = ir.FunctionType(_V4, [_V4, _V4])
        rnds2 = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V4, [_V4, _V4, _V4]),
                                               "llvm.x86.sha256rnds2")
        msg1 = cgutils.get_or_insert_function(builder.module, fn2, "llvm.x86.sha256msg1")
        msg2 = cgutils.get_or_insert_function(builder.module, fn2, "llvm.x86.sha256msg2")
        bswap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V4, [_V4]), "llvm.bswap.v4i32")
        vzeroupper = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                    "llvm.x86.avx.vzeroupper")
        builder.call(vzeroupper, [])
        lanes = range(LANES)
        sps = [builder.inttoptr(builder.add(args[0], ir.Constant(i64, 32 * lane)), _V4.as_pointer()) for lane in lanes]
        addresses = builder.inttoptr(args[1], i64.as_pointer())
        bps = [builder.inttoptr(builder.load(builder.gep(addresses, [ir.Constant(i64, lane)])), _V4.as_pointer())
               for lane in lanes]
        s0: list[ir.Value] = []
        s1: list[ir.Value] = []
        for sp in sps:
            tmp = _pshufd(builder, builder.load(sp, align=1), 0xB1)  # (b, a, d, c)
            hgfe = _pshufd(builder, builder.load(builder.gep(sp, [ir.Constant(i64, 1)]), align=1), 0x1B)  # (h, g, f, e)
            s0.append(_shuffle(builder, hgfe, tmp, [2, 3, 4, 5]))  # ABEF = (f, e, b, a)
            s1.append(_shuffle(builder, hgfe, tmp, [0, 1, 6, 7]))  # CDGH = (h, g, d, c)
        save0, save1 = list(s0), list(s1)
        w: list[list[ir.Value]] = [[] for _ in lanes]
        for g in range(16):  # four rounds a step, the lanes' steps interleaved
            for lane in lanes:
                ws = w[lane]
                if g < 4:
                    ws.append(builder.call(bswap, [builder.load(builder.gep(bps[lane], [ir.Constant(i64, g)]),
                                                                align=1)]))
                else:
                    x = builder.call(msg1, [ws[g - 4], ws[g - 3]])
                    x = builder.add(x, _shuffle(builder, ws[g - 2], ws[g - 1], [1, 2, 3, 4]))
                    ws.append(builder.call(msg2, [x, ws[g - 1]]))
                m = builder.add(ws[g], ir.Constant(_V4, _K[4 * g : 4 * g + 4]))
                s1[lane] = builder.call(rnds2, [s1[lane], s0[lane], m])
                s0[lane] = builder.call(rnds2, [s0[lane], s1[lane], _pshufd(builder, m, 0x0E)])
        for lane, sp in enumerate(sps):
            tmp = _pshufd(builder, builder.add(s0[lane], save0[lane]), 0x1B)  # (a, b, e, f)
            ghcd = _pshufd(builder, builder.add(s1[lane], save1[lane]), 0xB1)  # (g, h, c, d)
            builder.store(_shuffle(builder, tmp, ghcd, [0, 1, 6, 7]), sp, align=1)  # (a, b, c, d)
            builder.store(_shuffle(builder, tmp, ghcd, [2, 3, 4, 5]), builder.gep(sp, [ir.Constant(i64, 1)]),
                          align=1)  # (e, f, g, h)

    return types.void(types.uintp, types.uintp), codegen


@intrinsic
def _copy(typingctx, dst, src, count):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """Copy ``count`` bytes from the address ``src`` to the address ``dst``."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        i8p = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(args[0], i8p), builder.inttoptr(args[1], i8p), args[2], 1)

    return types.void(types.uintp, types.uintp, types.int64), codegen


@njit(cache=True, nogil=True)
def _sha_rows(prefix: np.ndarray, base: int, stride: int, n: int, length: int, h0: np.ndarray,
              out: np.ndarray) -> None:  # pragma: no cover
    """``out[i]`` = the state words of ``SHA-256(prefix || row i)``, row ``i`` the ``length`` bytes
    at the address ``base + i stride`` (the caller keeps them alive and checked their extent).

    The messages go :data:`LANES` at a time.  A message's blocks that lie wholly in its row are
    read where they are; the others -- the first blocks, which hold the prefix, and the last,
    which hold the padding (FIPS 180-4, 5.1.1) -- from a small buffer per lane whose prefix and
    padding are written once, only the row's bytes in them copied for each message."""
    p = prefix.shape[0]
    size = p + length
    blocks = (size + 9 + 63) // 64
    head = (p + 63) // 64  # blocks [0, head) hold prefix bytes
    tail = max(head, size // 64)  # blocks [tail, blocks) reach past the row's end
    # a lane's buffer: blocks [0, head) then [tail, blocks), consecutive where tail == head
    span = 64 * (head + blocks - tail)
    buf = np.zeros((LANES, span), np.uint8)
    for lane in range(LANES):
        buf[lane, :p] = prefix
        buf[lane, size - 64 * (tail - head)] = 0x80
        for k in range(8):
            buf[lane, span - 1 - k] = ((8 * size) >> (8 * k)) & 0xFF
    first = min(64 * head, size) - p  # the row's bytes in the head blocks
    late = max(64 * tail, p)  # where in the message the tail blocks' row bytes start
    states = np.empty((LANES, 8), np.uint32)
    addresses = np.empty(LANES, np.uintp)
    rows = np.empty(LANES, np.int64)
    at = np.uintp(buf.ctypes.data)
    for i in range(0, n, LANES):
        for lane in range(LANES):
            rows[lane] = row = base + min(i + lane, n - 1) * stride  # a short last group repeats its last row
            mine = at + np.uintp(lane * span)
            if first > 0:
                _copy(mine + np.uintp(p), np.uintp(row), first)  # type: ignore[call-arg]  # numba's stub keeps typingctx
            if size > late:
                _copy(mine + np.uintp(64 * head + late - 64 * tail), np.uintp(row + late - p), size - late)  # type: ignore[call-arg]
            states[lane] = h0
        for b in range(blocks):
            for lane in range(LANES):
                if b < head:
                    addresses[lane] = at + np.uintp(lane * span + 64 * b)
                elif b >= tail:
                    addresses[lane] = at + np.uintp(lane * span + 64 * (head + b - tail))
                else:
                    addresses[lane] = np.uintp(rows[lane] + 64 * b - p)
            _compress(states.ctypes.data, addresses.ctypes.data)  # type: ignore[call-arg]
        for lane in range(min(LANES, n - i)):
            out[i + lane] = states[lane]


def sha256_many(prefix: bytes, suffixes: np.ndarray) -> np.ndarray:
    """``SHA-256(prefix || suffixes[i])`` of every row of ``suffixes`` (uint8 (n, L), checked by
    the caller, :func:`secemb.fss.hashing.sha256_many`), as uint8 (n, 32) (the digest: the state
    words big-endian).  The kernel reads the rows by address: rows whose bytes are not
    consecutive (a column stride other than 1) are copied into an array whose are first."""
    if suffixes.shape[1] > 1 and suffixes.strides[1] != 1:
        suffixes = np.ascontiguousarray(suffixes)
    n, length = suffixes.shape
    out = np.empty((n, 8), np.uint32)
    _sha_rows(np.frombuffer(prefix, np.uint8), suffixes.ctypes.data, suffixes.strides[0], n, length, _H0, out)
    return out.astype(">u4").view(np.uint8).reshape(-1, 32)


@njit(cache=True, nogil=True)
def _big_endian(states: np.ndarray, out: np.ndarray, at: int) -> None:  # pragma: no cover
    """Row ``i``'s state words (``states`` uint32 (n, 8)), big-endian: the digest, into bytes
    ``[at, at + 32)`` of row ``i`` of ``out`` (uint8 (n, >= at + 32))."""
    for i in range(states.shape[0]):
        for j in range(8):
            w = states[i, j]
            for b in range(4):
                out[i, at + 4 * j + b] = (w >> np.uint32(24 - 8 * b)) & np.uint32(0xFF)


@njit(cache=True, nogil=True)
def _hmac_rows(keys: np.ndarray, head: np.ndarray, tails: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[i]`` = ``HMAC-SHA256(key_i, head || tails[i])`` (RFC 2104, the key zero-padded to the
    64-byte block), ``key_i`` row ``i`` of ``keys`` (uint8 (n, k), ``k <= 64``) or its only row
    (uint8 (1, k): one key for every row); ``tails`` uint8 (n, L) C-contiguous, ``out`` uint8 (n, 32).
    One key: its padded block and ``head`` are the inner hashes' shared prefix (:func:`_sha_rows`
    hashes it with each row where it lies) and the padded outer block the outer hashes'; a key a
    row: each row's whole inner and outer message written into a buffer of its own first."""
    n, length = tails.shape
    k, h = keys.shape[1], head.shape[0]
    states = np.empty((n, 8), np.uint32)
    if keys.shape[0] == 1:
        prefix = np.zeros(64 + h, np.uint8)
        prefix[:k] = keys[0]
        prefix[:64] ^= np.uint8(0x36)
        prefix[64:] = head
        _sha_rows(prefix, tails.ctypes.data, tails.strides[0], n, length, _H0, states)
        inner = np.empty((n, 32), np.uint8)
        _big_endian(states, inner, 0)
        prefix = np.zeros(64, np.uint8)
        prefix[:k] = keys[0]
        prefix ^= np.uint8(0x5C)
        _sha_rows(prefix, inner.ctypes.data, 32, n, 32, _H0, states)
    else:
        size = 64 + h + length
        rows = np.zeros((n, size), np.uint8)
        outer = np.zeros((n, 96), np.uint8)
        for i in range(n):
            rows[i, :k] = keys[i]
            rows[i, :64] ^= np.uint8(0x36)
            rows[i, 64 : 64 + h] = head
            rows[i, 64 + h :] = tails[i]
            outer[i, :k] = keys[i]
            outer[i, :64] ^= np.uint8(0x5C)
        none = np.empty(0, np.uint8)
        _sha_rows(none, rows.ctypes.data, size, n, size, _H0, states)
        _big_endian(states, outer, 64)
        _sha_rows(none, outer.ctypes.data, 96, n, 96, _H0, states)
    _big_endian(states, out, 0)


def hmac_sha256_many(keys: np.ndarray, head: bytes, tails: np.ndarray) -> np.ndarray:
    """``HMAC-SHA256(keys[i], head || tails[i])`` (``keys`` uint8 (n, k) or (1, k), ``k <= 64``, and
    ``tails`` uint8 (n, L), checked by the caller, :func:`secemb.fss.hashing.hmac_sha256_many`) as
    uint8 (n, 32): one kernel call."""
    out = np.empty((tails.shape[0], 32), np.uint8)
    if tails.shape[0]:
        _hmac_rows(read_only(keys), np.frombuffer(head, np.uint8), read_only(tails), out)
    return out
