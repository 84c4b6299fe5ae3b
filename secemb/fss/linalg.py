"""Exact matrix products in ``Z_{2^k}`` through float64 BLAS.

numpy's integer matmul does not use BLAS.  Splitting both operands into 16-bit limbs makes
every partial product < 2^32; float64 sums stay exact below 2^53, so the inner dimension is
processed in slices short enough that no partial sum reaches 2^53.  Limb products whose
weight is ``>= 2^k`` vanish modulo ``2^k`` and are skipped.

That float path is the reference.  With the compiled kernels (:mod:`secemb.fss.kernels`) a
product of one matrix or one stack of matrices by another runs as a numba loop in the ring's
own wrapping integer arithmetic instead, which gives the same bits
(``tests/fss/test_fss_linalg.py``) without limbs.
"""

from __future__ import annotations

import math

import numpy as np

from secemb.errors import InvalidParameters
from secemb.fss import kernels

__all__ = ["LimbMatrix", "ring_matmul"]

_LIMB = 16
_MASK = np.uint64(0xFFFF)


def _limbs(x: np.ndarray, count: int) -> list[np.ndarray]:
    """16-bit limbs of ``x`` as float64, least significant first."""
    if x.dtype == np.uint32 and count == 2:  # no 64-bit temporaries
        return [(x & np.uint32(0xFFFF)).astype(np.float64), (x >> np.uint32(16)).astype(np.float64)]
    x64 = x.astype(np.uint64, copy=False)
    return [((x64 >> np.uint64(_LIMB * i)) & _MASK).astype(np.float64) for i in range(count)]


class LimbMatrix:
    """A right operand of :func:`ring_matmul` prepared once for a table multiplied by many
    left operands (a server's table, once per round): the ring array, and its float64 limbs
    for the reference path, computed on first use.

    Parameters
    ----------
    b: ring array (..., M, D), uint32 for ``ring_bits`` 32, uint64 for 64.
    ring_bits: 32 or 64.
    index: ``None``, or int (..., M): the matrix is then ``b[index]`` of the rows of a 2-D ``b``
        (``-1`` gives a zero row; :meth:`gather`), formed only where it is read (the reference's
        :attr:`ring` and :attr:`limbs`); the compiled product reads the rows through the index.

    Raises
    ------
    InvalidParameters: unsupported ``ring_bits``, ``b`` of fewer than 2 dimensions (2 with an
        index), or an index that is not integers in ``[-1, N)`` for ``N`` rows.
    """

    def __init__(self, b: np.ndarray, ring_bits: int, index: np.ndarray | None = None) -> None:
        if ring_bits not in (32, 64):
            raise InvalidParameters(f"ring_bits must be 32 or 64, got {ring_bits}")
        if b.ndim < 2 or (index is not None and b.ndim != 2):
            raise InvalidParameters(f"a matrix needs 2 or more dimensions (rows to gather: 2), got shape {b.shape}")
        if index is not None:
            # the matrix's own copy, checked: the compiled product reads rows through it unchecked, so
            # a caller's array changed after the check must not reach it (red team P's S27-P3)
            index = np.array(index)
            if index.dtype.kind not in "iu" or index.ndim < 1 or (
                    index.size and (int(index.min()) < -1 or int(index.max()) >= b.shape[0])):
                raise InvalidParameters(f"a gather index must be integers in [-1, {b.shape[0]}), got {index.dtype} "
                                        f"{index.shape}")
            index = index.astype(np.int64, copy=False)
        #: the rows a gathered matrix reads (``b``), and its index (int64); ``None`` for a plain one
        self.rows: np.ndarray | None = None if index is None else b
        self.index: np.ndarray | None = index
        self._ring = b if index is None else None
        self.shape = b.shape if index is None else index.shape + b.shape[1:]
        self.ndim = len(self.shape)
        self.dtype = b.dtype
        self.ring_bits = ring_bits
        self._limbs: list[np.ndarray] | None = None

    @property
    def ring(self) -> np.ndarray:
        """The ring array (..., M, D) (a gathered matrix's rows are gathered on first use)."""
        if self._ring is None:
            assert self.rows is not None and self.index is not None  # a gathered matrix: __init__ set both
            missing = self.index < 0
            got = self.rows[np.where(missing, 0, self.index)]
            got[missing] = 0
            self._ring = got
        return self._ring

    @property
    def limbs(self) -> list[np.ndarray]:
        """The 16-bit limbs of the ring array as float64, least significant first."""
        if self._limbs is None:
            self._limbs = _limbs(self.ring, self.ring_bits // _LIMB)
        return self._limbs

    def gather(self, index: np.ndarray) -> LimbMatrix:
        """The limb matrix of ``b[index]`` (rows of a 2-D ``b``; ``-1`` gives a zero row):
        for a table laid out in buckets.  Nothing is copied: the compiled product reads the
        rows through the index; the reference gathers them when it reads them.

        Raises
        ------
        InvalidParameters: this matrix is not 2-D, or ``index`` is not integers in ``[-1, N)``.
        """
        if self.ndim != 2:
            raise InvalidParameters("gather needs a 2-D limb matrix")
        return LimbMatrix(self.ring, self.ring_bits, index)


def _compiled_matmul(a: np.ndarray, b: np.ndarray | LimbMatrix, dtype: type[np.unsignedinteger],
                     cols: np.ndarray | None, out: np.ndarray | None) -> np.ndarray | None:
    """``a @ b`` through the numba kernel, written to ``out`` (checked by :func:`ring_matmul`) or
    a new array, or ``None`` where the kernel does not apply (broadcast batch shapes, signed or
    mismatched operands).  A gathered :class:`LimbMatrix` is read through its index; any other
    right operand through the index of its own rows."""
    if a.dtype.kind != "u" or b.dtype != dtype or a.ndim != b.ndim or a.ndim not in (2, 3):
        return None
    if a.ndim == 3 and a.shape[0] != b.shape[0]:
        return None
    from secemb.fss._numba_kernels import ring_matmul as kernel

    groups, m = (a.shape[0] if a.ndim == 3 else 1), a.shape[-1]
    a3 = np.ascontiguousarray(a).reshape((groups,) + a.shape[-2:])
    # the rows read-only whether published (read-only) or gathered (writeable): one compiled signature (session 37)
    if isinstance(b, LimbMatrix) and b.rows is not None and b.index is not None:
        rows, index = kernels.read_only(b.rows), np.ascontiguousarray(b.index).reshape(groups, m)
    else:
        rows = kernels.read_only(
            np.ascontiguousarray(b.ring if isinstance(b, LimbMatrix) else b).reshape(groups * m, b.shape[-1]))
        index = np.arange(groups * m, dtype=np.int64).reshape(groups, m)
    if out is None:
        out = np.empty(a.shape[:-1] + b.shape[-1:], dtype)
    kernel(a3, rows, index, out if a.ndim == 3 else out[None],
           np.full(groups, m, np.int64) if cols is None else cols)
    return out


def ring_matmul(a: np.ndarray, b: np.ndarray | LimbMatrix, ring_bits: int, *, a_bits: int | None = None,
                cols: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` modulo ``2^ring_bits``, exactly.

    Parameters
    ----------
    a: unsigned integer array (..., K, M) with values < 2^ring_bits (or < 2^a_bits if given).
    b: unsigned integer array (..., M, D) with values < 2^ring_bits; leading batch
       dimensions broadcast as in :func:`numpy.matmul`.
    ring_bits: 32 or 64.
    a_bits: optional bound on the bit length of ``a``'s entries (1 for a 0/1 matrix).
    cols: optional int (G,) for 3-D operands (G, K, M) and (G, M, D): group ``g`` multiplies
       only its first ``cols[g]`` columns of ``a`` and rows of ``b`` (the others count as
       zero; the compiled kernel skips them).
    out: optional writeable ring array (..., K, D) of the result's shape and dtype, any strides
       (e.g. a transposed view of the array the product's rows belong in), not sharing memory
       with ``a`` or ``b`` (a gathered ``b``'s rows or index: S27-P1): the product is written
       there (by the compiled kernel directly, by the reference through a copy) and ``out``
       returned.

    Returns
    -------
    ndarray (..., K, D) of uint32 (ring_bits 32) or uint64.

    Raises
    ------
    InvalidParameters: unsupported ``ring_bits``, shapes that do not multiply, bad ``cols``, or
        an ``out`` that is not such an array.
    """
    if ring_bits not in (32, 64):
        raise InvalidParameters(f"ring_bits must be 32 or 64, got {ring_bits}")
    if isinstance(b, LimbMatrix) and b.ring_bits != ring_bits:
        raise InvalidParameters(f"the limb matrix is for ring_bits {b.ring_bits}, not {ring_bits}")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise InvalidParameters(f"cannot multiply shapes {a.shape} and {b.shape}")
    dtype = np.uint32 if ring_bits == 32 else np.uint64
    if cols is not None:
        cols = np.array(cols, np.int64)  # a copy: the kernel reads it again after writing out (S27-P2)
        if a.ndim != 3 or b.ndim != 3 or cols.shape != (a.shape[0],) or np.any((cols < 0) | (cols > a.shape[-1])):
            raise InvalidParameters(f"cols must be ({a.shape[0]},) in [0, {a.shape[-1]}] for 3-D operands")
    if out is not None:
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        right = (b.ring if b.rows is None else b.rows) if isinstance(b, LimbMatrix) else b
        if (not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype or not out.flags.writeable
                or np.may_share_memory(out, a) or np.may_share_memory(out, right)
                or (isinstance(b, LimbMatrix) and b.index is not None and np.may_share_memory(out, b.index))):
            raise InvalidParameters(f"out must be a writeable {np.dtype(dtype)} array of shape {shape} sharing no "
                                    f"memory with the operands, got {getattr(out, 'dtype', None)} "
                                    f"{getattr(out, 'shape', None)}")
    if kernels.compiled():
        got = _compiled_matmul(a, b, dtype, cols, out)
        if got is not None:
            return got
    if out is not None:
        out[...] = ring_matmul(a, b, ring_bits, a_bits=a_bits, cols=cols)
        return out
    if cols is not None:
        a = a * (np.arange(a.shape[-1]) < cols[:, None])[:, None, :].astype(a.dtype)
    la = -(-(a_bits or ring_bits) // _LIMB)
    lb = ring_bits // _LIMB
    # per-term bound 2^(16 + min(16, a_bits)); at most min(la, lb) terms share a weight
    term_bits = _LIMB + min(_LIMB, a_bits or _LIMB)
    terms = min(la, lb)
    # inner slices short enough for exact float64 sums and for limb temporaries of at most
    # 2^23 float64 (64 MiB) per operand
    batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    widest = max(1, la * batch * a.shape[-2], lb * batch * b.shape[-1])
    step = max(1, min((1 << 52) // (terms << term_bits), (1 << 23) // widest))
    # if every weighted partial sum of the whole product stays below 2^53, combine in float64
    # and convert once (a 0/1 matrix times a 32-bit one: P0 + 2^16 P1 < 2^(33 + log2 M))
    weights = [(s, sum(1 for i in range(la) if 0 <= s - i < lb)) for s in range(ring_bits // _LIMB)]
    bound = sum(n * a.shape[-1] * (1 << (term_bits + _LIMB * s)) for s, n in weights if n)
    if bound < 1 << 53 and a.shape[-1] <= step:
        al = _limbs(a, la)
        bl = b.limbs if isinstance(b, LimbMatrix) else _limbs(b, lb)
        total = None
        for s, _ in weights:
            for i in range(min(s + 1, la)):
                if s - i < lb:
                    prod = al[i] @ bl[s - i]
                    if s:
                        prod *= float(1 << (_LIMB * s))
                    total = prod if total is None else total + prod
        assert total is not None  # s = 0, i = 0 always contributes
        return total.astype(np.uint64).astype(dtype)
    acc = None
    for lo in range(0, a.shape[-1], step):
        hi = min(lo + step, a.shape[-1])
        al = _limbs(a[..., lo:hi], la)
        bl = [x[..., lo:hi, :] for x in b.limbs] if isinstance(b, LimbMatrix) else _limbs(b[..., lo:hi, :], lb)
        for s in range(ring_bits // _LIMB):
            part = None
            for i in range(min(s + 1, la)):
                j = s - i
                if j >= lb:
                    continue
                prod = al[i] @ bl[j]
                part = prod if part is None else part + prod
            if part is not None:
                with np.errstate(over="ignore"):
                    term = part.astype(np.uint64) << np.uint64(_LIMB * s)
                    acc = term if acc is None else acc + term
    if acc is None:  # empty inner dimension
        acc = np.zeros(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), np.uint64)
    return acc.astype(dtype)
