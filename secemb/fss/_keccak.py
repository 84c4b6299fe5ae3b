"""SHAKE-128 of many messages of one length as a numba kernel (internal): the Keccak-f[1600]
permutation (FIPS 202) of :data:`LANES` messages at once, each of the 25 lanes of their states one
vector of :data:`LANES` 64-bit words (LLVM IR through a numba intrinsic, fully unrolled: on
AVX-512 one ``zmm`` register a lane, the rotations ``vprolq``), so that one permutation's
instructions serve :data:`LANES` messages.

Hazmat layer, imported only where :func:`secemb.fss.kernels.compiled` says the kernels run, by
:func:`secemb.fss.hashing.shake128_many`, which keeps :mod:`hashlib` as the reference
(``tests/fss/test_s32_check_glue.py`` checks the kernel against it).  Its inputs are public (the
verifiers' coefficients and query points of :mod:`secemb.fss.rangeproof` and
:mod:`secemb.fss.sketchproof`); its time depends only on the shapes.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from secemb.fss.kernels import read_only

__all__ = ["LANES", "RATE", "shake128_rows"]

#: messages a permutation call takes (a short last group repeats its last message)
LANES = 8
#: bytes of SHAKE-128's rate (FIPS 202, 6.2: capacity 256 bits of the 1600)
RATE = 168
_RATE_WORDS = RATE // 8

#: the round constants of the iota step (FIPS 202, 3.2.5)
_RC = (
    0x0000000000000001, 0x0000000000008082, 0x800000000000808A, 0x8000000080008000,
    0x000000000000808B, 0x0000000080000001, 0x8000000080008081, 0x8000000000008009,
    0x000000000000008A, 0x0000000000000088, 0x0000000080008009, 0x000000008000000A,
    0x000000008000808B, 0x800000000000008B, 0x8000000000008089, 0x8000000000008003,
    0x8000000000008002, 0x8000000000000080, 0x000000000000800A, 0x800000008000000A,
    0x8000000080008081, 0x8000000000008080, 0x0000000080000001, 0x8000000080008008,
)


def _rho_pi() -> tuple[list[int], list[int]]:
    """For each lane ``i = x + 5 y``: the rotation of the rho step (FIPS 202, 3.2.2) and the lane
    the pi step moves it to (3.2.3: ``A'[x, y] = A[x + 3y, x]``, so lane ``(x, y)`` goes to
    ``(y, 2x + 3y)``)."""
    rot = [0] * 25
    x, y = 1, 0
    for t in range(24):
        rot[x + 5 * y] = ((t + 1) * (t + 2) // 2) % 64
        x, y = y, (2 * x + 3 * y) % 5
    dest = [0] * 25
    for i in range(25):
        x, y = i % 5, i // 5
        dest[i] = y + 5 * ((2 * x + 3 * y) % 5)
    return rot, dest


_ROT, _DEST = _rho_pi()
_I64 = ir.IntType(64)
_VEC = ir.VectorType(_I64, LANES)


def _splat(value: int) -> ir.Constant:
    return ir.Constant(_VEC, [ir.Constant(_I64, value)] * LANES)


@intrinsic
def _permute(typingctx, state):  # noqa: ANN001, ANN201 - numba intrinsic protocol
    """Keccak-f[1600] of :data:`LANES` states in place at the address ``state``: 25 lanes of
    :data:`LANES` words each (lane ``x + 5 y`` of message ``m`` at word ``LANES (x + 5 y) + m``)."""
    sig = types.void(types.uintp)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        fshl = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3),
                                              f"llvm.fshl.v{LANES}i64")
        ptr = builder.inttoptr(args[0], _VEC.as_pointer())
        at = [builder.gep(ptr, [ir.Constant(_I64, i)]) for i in range(25)]
        a = [builder.load(p, align=8) for p in at]
        ones = _splat(-1)

        def rotl(v: ir.Value, r: int) -> ir.Value:
            return builder.call(fshl, [v, v, _splat(r)]) if r else v

        for rc in _RC:
            c = [builder.xor(builder.xor(builder.xor(builder.xor(a[x], a[x + 5]), a[x + 10]), a[x + 15]), a[x + 20])
                 for x in range(5)]  # theta
            d = [builder.xor(c[(x + 4) % 5], rotl(c[(x + 1) % 5], 1)) for x in range(5)]
            a = [builder.xor(a[i], d[i % 5]) for i in range(25)]
            b: list[ir.Value] = [a[0]] * 25  # rho and pi
            for i in range(25):
                b[_DEST[i]] = rotl(a[i], _ROT[i])
            row = [i - i % 5 for i in range(25)]  # chi: a = b ^ (~b[x + 1] & b[x + 2]) along each row
            a = [builder.xor(b[i], builder.and_(builder.xor(b[row[i] + (i + 1) % 5], ones), b[row[i] + (i + 2) % 5]))
                 for i in range(25)]
            a[0] = builder.xor(a[0], _splat(rc))  # iota
        for p, v in zip(at, a, strict=True):
            builder.store(v, p, align=8)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def _shake_rows(prefix, rows, out):  # noqa: ANN001, ANN201
    """``out`` (uint64 (n, W)) set to the first ``W`` little-endian words of ``SHAKE-128(prefix ||
    rows[i])`` for each row of ``rows`` (uint8 (n, L); ``prefix`` uint8): :data:`LANES` messages a
    group, each padded (FIPS 202, B.2: ``0x1F``, zeros, ``0x80``) into its lane's blocks, the blocks
    of the rate absorbed, then as many permutations as ``W`` words take."""
    n, length = rows.shape
    size = prefix.size + length
    words = (size // RATE + 1) * _RATE_WORDS  # the padding takes at least one byte
    width = out.shape[1]
    padded = np.zeros((LANES, 8 * words), np.uint8)
    blocks = padded.view(np.uint64)  # little-endian words (x86: the kernels' hosts)
    state = np.empty((25, LANES), np.uint64)
    for m in range(LANES):
        padded[m, : prefix.size] = prefix
        padded[m, size] = 0x1F
        padded[m, 8 * words - 1] |= 0x80
    for first in range(0, n, LANES):
        for m in range(LANES):  # a short last group repeats its last message
            padded[m, prefix.size : size] = rows[min(first + m, n - 1)]
        state[:] = 0
        for at in range(0, words, _RATE_WORDS):
            for i in range(_RATE_WORDS):
                for m in range(LANES):
                    state[i, m] ^= blocks[m, at + i]
            _permute(state.ctypes.data)  # type: ignore[call-arg]  # numba's stub keeps typingctx
        for at in range(0, width, _RATE_WORDS):
            if at:
                _permute(state.ctypes.data)  # type: ignore[call-arg]  # numba's stub keeps typingctx
            for i in range(min(_RATE_WORDS, width - at)):
                for m in range(min(LANES, n - first)):
                    out[first + m, at + i] = state[i, m]


def shake128_rows(prefix: bytes, rows: np.ndarray, nbytes: int) -> np.ndarray:
    """``SHAKE-128(prefix || rows[i])``'s first ``nbytes`` bytes for every row of ``rows`` (uint8
    (n, L), checked by the caller, :func:`secemb.fss.hashing.shake128_many`), as uint8 (n, nbytes):
    one kernel call."""
    out = np.empty((rows.shape[0], -(-nbytes // 8)), "<u8")
    _shake_rows(np.frombuffer(prefix, np.uint8), read_only(rows), out)
    return out.view(np.uint8)[:, :nbytes]
