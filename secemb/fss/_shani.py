"""SHA-256 over the SHA-NI instructions as a numba kernel (internal): many short messages of one
length hashed without the GIL, so a backend's threads share them (the servers' row tags,
:func:`secemb.protocols.secemb.checks.row_tags`).

Hazmat layer, imported only where :func:`secemb.fss.kernels.sha_compiled` says the kernel runs
(numba, and a CPU with SHA-NI), by :func:`secemb.fss.hashing.sha256_many`, which keeps
:mod:`hashlib` as the reference; ``tests/fss/test_fss_hashing.py`` checks the kernel against it.
The compression function follows Intel's SHA extensions reference: the state in two vectors
(``ABEF``, ``CDGH``), four rounds per pair of ``SHA256RNDS2`` and the message schedule by
``SHA256MSG1`` / ``SHA256MSG2``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["sha256_many"]

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


@intrinsic
def _compress(typingctx, state, block):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """SHA-256's compression of the 64-byte ``block`` (address) into ``state`` (address of 8
    native uint32 words ``a..h``), in place."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        fn2 = ir.FunctionType(_V4, [_V4, _V4])
        rnds2 = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V4, [_V4, _V4, _V4]),
                                               "llvm.x86.sha256rnds2")
        msg1 = cgutils.get_or_insert_function(builder.module, fn2, "llvm.x86.sha256msg1")
        msg2 = cgutils.get_or_insert_function(builder.module, fn2, "llvm.x86.sha256msg2")
        bswap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V4, [_V4]), "llvm.bswap.v4i32")
        sp = builder.inttoptr(args[0], _V4.as_pointer())
        bp = builder.inttoptr(args[1], _V4.as_pointer())
        abcd = builder.load(sp, align=1)
        efgh = builder.load(builder.gep(sp, [ir.Constant(ir.IntType(64), 1)]), align=1)
        tmp = _pshufd(builder, abcd, 0xB1)  # (b, a, d, c)
        s1 = _pshufd(builder, efgh, 0x1B)  # (h, g, f, e)
        s0 = _shuffle(builder, s1, tmp, [2, 3, 4, 5])  # ABEF = (f, e, b, a)
        s1 = _shuffle(builder, s1, tmp, [0, 1, 6, 7])  # CDGH = (h, g, d, c)
        save0, save1 = s0, s1
        w: list[ir.Value] = []
        for g in range(16):
            if g < 4:
                w.append(builder.call(bswap, [builder.load(builder.gep(bp, [ir.Constant(ir.IntType(64), g)]),
                                                           align=1)]))
            else:
                x = builder.call(msg1, [w[g - 4], w[g - 3]])
                x = builder.add(x, _shuffle(builder, w[g - 2], w[g - 1], [1, 2, 3, 4]))
                w.append(builder.call(msg2, [x, w[g - 1]]))
            m = builder.add(w[g], ir.Constant(_V4, _K[4 * g : 4 * g + 4]))
            s1 = builder.call(rnds2, [s1, s0, m])
            s0 = builder.call(rnds2, [s0, s1, _pshufd(builder, m, 0x0E)])
        s0 = builder.add(s0, save0)
        s1 = builder.add(s1, save1)
        tmp = _pshufd(builder, s0, 0x1B)  # (a, b, e, f)
        s1 = _pshufd(builder, s1, 0xB1)  # (g, h, c, d)
        builder.store(_shuffle(builder, tmp, s1, [0, 1, 6, 7]), sp, align=1)  # (a, b, c, d)
        builder.store(_shuffle(builder, tmp, s1, [2, 3, 4, 5]), builder.gep(sp, [ir.Constant(ir.IntType(64), 1)]),
                      align=1)  # (e, f, g, h)

    return types.void(types.uintp, types.uintp), codegen


@njit(cache=True, nogil=True)
def _sha_rows(prefix: np.ndarray, suffixes: np.ndarray, h0: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[i]`` = the state words of ``SHA-256(prefix || suffixes[i])``: each message padded
    in one small buffer (FIPS 180-4, 5.1.1) whose prefix and padding are written once."""
    n, p = suffixes.shape[0], prefix.shape[0]
    size = p + suffixes.shape[1]
    padded = (size + 9 + 63) // 64 * 64
    buf = np.zeros(padded, np.uint8)
    buf[:p] = prefix
    buf[size] = 0x80
    for k in range(8):
        buf[padded - 1 - k] = ((8 * size) >> (8 * k)) & 0xFF
    state = np.empty(8, np.uint32)
    for i in range(n):
        buf[p:size] = suffixes[i]
        state[:] = h0
        for b in range(padded // 64):
            _compress(state.ctypes.data, buf.ctypes.data + 64 * b)  # type: ignore[call-arg]  # numba's stub keeps typingctx
        out[i] = state


def sha256_many(prefix: bytes, suffixes: np.ndarray) -> np.ndarray:
    """``SHA-256(prefix || suffixes[i])`` of every row of ``suffixes`` (uint8 (n, L)), as uint8
    (n, 32) (the digest: the state words big-endian)."""
    out = np.empty((suffixes.shape[0], 8), np.uint32)
    _sha_rows(np.frombuffer(prefix, np.uint8), suffixes, _H0, out)
    return out.astype(">u4").view(np.uint8).reshape(-1, 32)
