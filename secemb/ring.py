"""Fixed-point arithmetic in the ring Z_{2^k} (hazmat layer).

Ring elements are numpy unsigned integers (``uint32`` for k = 32, ``uint64`` for k = 64) and
ring arithmetic is numpy's natural wraparound.  Real numbers enter the ring through
:meth:`FixedPoint.encode` -- ``x`` becomes ``round(x * 2^f)`` in two's complement mod 2^k --
and leave through :meth:`FixedPoint.decode`, which reads the element as a signed integer and
divides by ``2^f``.

Sums of encodings decode correctly as long as the true signed sum stays in
``[-(2^{k-1} - 1), 2^{k-1} - 1]``.  When ``n`` parties each contribute one value,
:meth:`FixedPoint.clip_bound` gives the per-party bound ``R_u`` (SecEmb, Appendix L.2) and
:meth:`FixedPoint.encode_clipped` clips to it, so the sum of ``n`` such encodings never wraps.

This module is a low-level building block: it validates its arguments but knows nothing of
protocols, parties or trust.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from secemb.errors import InvalidParameters

__all__ = ["FixedPoint"]

_RING_DTYPES: dict[int, np.dtype] = {32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}
_SIGNED_DTYPES: dict[int, np.dtype] = {32: np.dtype(np.int32), 64: np.dtype(np.int64)}


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class FixedPoint:
    """Fixed-point encoding of real numbers into Z_{2^k} with ``f`` fractional bits.

    Parameters
    ----------
    ring_bits:
        ``k``, the ring is Z_{2^k}; 32 (numpy ``uint32``) or 64 (``uint64``).
    frac_bits:
        ``f``, the number of fractional bits; ``0 <= f < k - 1``.  The resolution is
        ``2^-f`` and the largest encodable magnitude is ``(2^{k-1} - 1) / 2^f``.

    Raises
    ------
    InvalidParameters
        If ``ring_bits`` is not 32 or 64, or ``frac_bits`` is not an integer in ``[0, k - 1)``.

    Examples
    --------
    >>> fp = FixedPoint(ring_bits=32, frac_bits=16)
    >>> fp.encode([1.0, -1.0])
    array([     65536, 4294901760], dtype=uint32)
    >>> fp.decode(fp.encode([1.5, -0.25]))
    array([ 1.5 , -0.25])
    """

    ring_bits: int = 32
    frac_bits: int = 16

    def __post_init__(self) -> None:
        if not _is_int(self.ring_bits) or self.ring_bits not in _RING_DTYPES:
            raise InvalidParameters(f"ring_bits must be 32 or 64, got {self.ring_bits!r}")
        if not _is_int(self.frac_bits) or not 0 <= self.frac_bits < self.ring_bits - 1:
            raise InvalidParameters(
                f"frac_bits must be an integer in [0, {self.ring_bits - 1}) for "
                f"ring_bits={self.ring_bits}, got {self.frac_bits!r}"
            )

    # ------------------------------------------------------------------ properties

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of ring elements: ``uint32`` for k = 32, ``uint64`` for k = 64."""
        return _RING_DTYPES[self.ring_bits]

    @property
    def _max_int(self) -> int:
        """Largest positive signed ring value, ``2^{k-1} - 1``."""
        return (1 << (self.ring_bits - 1)) - 1

    @property
    def _max_abs(self) -> float:
        """Largest magnitude on the fixed-point grid that encodes, ``(2^{k-1} - 1) / 2^f``."""
        return _float_floor(self._max_int) / 2.0**self.frac_bits

    # ------------------------------------------------------------------ encode / decode

    def encode(self, x: Any) -> np.ndarray:
        """Encode real numbers as ring elements.

        Each value becomes ``rint(x * 2^f)`` (round half to even) reduced mod 2^k in two's
        complement, so negative values map to the upper half of the ring.

        Parameters
        ----------
        x:
            Array-like of real numbers, any shape; converted to float64.

        Returns
        -------
        numpy.ndarray
            Same shape as ``x``, dtype :attr:`dtype`, elements of Z_{2^k}.

        Raises
        ------
        InvalidParameters
            If any value is NaN or infinite, or if any ``|rint(x * 2^f)| >= 2^{k-1}`` (the
            message names the largest ``|x|`` allowed and the largest received).
        """
        xf = np.asarray(x, dtype=np.float64)
        return self._encode_float(xf)

    def _encode_float(self, xf: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(xf)):
            bad = xf[~np.isfinite(xf)]
            raise InvalidParameters(
                f"fixed-point encode needs finite values; got {bad.size} non-finite "
                f"value(s), first {float(bad.flat[0])!r}"
            )
        with np.errstate(over="ignore"):
            scaled = self._scaled(xf)
        # |rint(x 2^f)| >= 2^{k-1} does not fit (2^{k-1} is exactly representable).
        limit = math.ldexp(1.0, self.ring_bits - 1)
        if scaled.size and max(float(scaled.max()), -float(scaled.min())) >= limit:
            largest = float(np.max(np.abs(xf)))
            raise InvalidParameters(
                f"fixed-point encode (ring_bits={self.ring_bits}, frac_bits={self.frac_bits}) "
                f"needs |x| <= {self._max_abs!r} (= (2^{self.ring_bits - 1} - 1) / "
                f"2^{self.frac_bits}); largest |x| received: {largest!r}"
            )
        return self._wrap(scaled)

    def _scaled(self, xf: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``rint(x * 2^f)`` in ``out`` (may be ``xf`` itself), by default a new float64 array.
        Multiplying by a power of two is exact (overflow gives inf, as ``ldexp`` does), and
        several times faster than ``np.ldexp``."""
        scaled = np.multiply(xf, 2.0**self.frac_bits, out=np.empty(xf.shape) if out is None else out)
        return np.rint(scaled, out=scaled)

    def _wrap(self, scaled: np.ndarray) -> np.ndarray:
        """Integer-valued float64 with ``|v| < 2^{k-1}`` -> ring elements (two's complement).
        Consumes ``scaled`` (a temporary of the caller's): for k = 64 the cast is done in its
        buffer (a dense gradient can be ~1 GB; a second buffer costs its page faults)."""
        # Every |scaled| < 2^{k-1} is an integer-valued float64, so the cast to the signed
        # k-bit integer is exact, and viewing it unsigned is two's complement mod 2^k.
        if self.ring_bits == 64:
            # element by element over one buffer (each value read before its own 8 bytes are
            # written; numpy's copy does so without a temporary for this exact overlap)
            ints = scaled.view(np.int64)
            np.copyto(ints, scaled, casting="unsafe")
            return ints.view(np.uint64)
        return scaled.astype(np.int32).view(np.uint32)

    def decode(self, u: np.ndarray) -> np.ndarray:
        """Decode ring elements to real numbers.

        Each element is read as a signed k-bit integer (two's complement) and divided by
        ``2^f``.  For k = 32 the result is exact; for k = 64 the signed integer is rounded to
        float64 (53-bit mantissa) before the exact division by ``2^f``.

        Parameters
        ----------
        u:
            numpy array (or numpy scalar) of dtype :attr:`dtype`, any shape, elements of
            Z_{2^k}.

        Returns
        -------
        numpy.ndarray
            Same shape as ``u``, dtype float64.

        Raises
        ------
        TypeError
            If ``u`` is not a numpy array or scalar of dtype :attr:`dtype`.
        """
        if isinstance(u, np.generic):
            u = np.asarray(u)
        if not isinstance(u, np.ndarray) or u.dtype != self.dtype:
            got = u.dtype if isinstance(u, np.ndarray) else type(u).__name__
            raise TypeError(
                f"fixed-point decode (ring_bits={self.ring_bits}) needs a numpy array of "
                f"dtype {self.dtype}, got {got}"
            )
        out = np.asarray(u.view(_SIGNED_DTYPES[self.ring_bits]).astype(np.float64))
        out *= 2.0**-self.frac_bits  # exact: a power of two, and every non-zero |value| >= 2^-f
        return out

    # ------------------------------------------------------------------ clipping

    def clip_bound(self, n_parties: int) -> float:
        """Per-party bound ``R_u`` such that ``n_parties`` clipped values never wrap.

        SecEmb (Appendix L.2) sets ``R_u = (2^{k-1} - 1) / (n_parties * 2^f)``.  This method
        returns that value rounded *down* to the fixed-point grid (and to a float64), that is
        ``floor((2^{k-1} - 1) / n_parties) / 2^f``, which is less than ``2^-f`` below the
        paper's value (plus float64 rounding for k = 64).  Rounding down makes the guarantee
        exact: ``|x| <= R_u`` implies ``|rint(x * 2^f)| <= floor((2^{k-1} - 1) / n)``, so the
        sum of ``n_parties`` such encodings has magnitude at most ``2^{k-1} - 1``.

        Parameters
        ----------
        n_parties:
            Number of values that will be summed (users per round), ``>= 1``.

        Returns
        -------
        float
            ``R_u``, positive.

        Raises
        ------
        InvalidParameters
            If ``n_parties`` is not an integer ``>= 1``.
        """
        if not _is_int(n_parties) or n_parties < 1:
            raise InvalidParameters(f"n_parties must be an integer >= 1, got {n_parties!r}")
        per_party = self._max_int // int(n_parties)
        return _float_floor(per_party) / 2.0**self.frac_bits

    def encode_clipped(self, x: Any, n_parties: int) -> np.ndarray:
        """Clip to ``[-R_u, R_u]`` with ``R_u = clip_bound(n_parties)``, then encode.

        The sum (in the ring) of ``n_parties`` outputs of this method, of the same shape,
        decodes to the true sum of the clipped, rounded values: it never wraps.

        Parameters
        ----------
        x:
            Array-like of real numbers, any shape; converted to float64.
        n_parties:
            Number of encodings that will be summed, ``>= 1``.

        Returns
        -------
        numpy.ndarray
            Same shape as ``x``, dtype :attr:`dtype`, elements of Z_{2^k}.

        Raises
        ------
        InvalidParameters
            If ``n_parties`` is not an integer ``>= 1``, or any value of ``x`` is NaN or
            infinite (non-finite values are rejected, not clipped, since they signal a bug).
        """
        bound = self.clip_bound(n_parties)
        xf = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(xf)):
            return self._encode_float(xf)  # raises with the standard message
        clipped = np.clip(xf, -bound, bound, out=np.empty(xf.shape))
        # |x| <= R_u <= the largest encodable magnitude: no range check needed; scaled and cast
        # in the clipped buffer (one buffer, not three, for a dense gradient)
        return self._wrap(self._scaled(clipped, out=clipped))


def _float_floor(n: int) -> float:
    """The largest float64 that is ``<= n`` (exact for ``|n| <= 2^53``)."""
    f = float(n)
    if int(f) > n:
        f = math.nextafter(f, -math.inf)
    return f
