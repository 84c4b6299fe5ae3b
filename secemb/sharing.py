"""Two-party additive secret sharing in Z_{2^k} (hazmat layer).

A ring array ``x`` (numpy ``uint32`` or ``uint64``) is split into ``s0`` uniform at random and
``s1 = x - s0 mod 2^k``.  Either share alone is uniformly distributed and independent of
``x``; ``s0 + s1 mod 2^k`` gives ``x`` back.  Shares of different values add up to shares of
the sum, which is what secure aggregation uses.

Randomness comes from :func:`secemb.randomness.system_rng` (``os.urandom``) unless a test
injects a deterministic source through the private keyword ``_rng``.  numpy's random
generators are never used here.
"""

from __future__ import annotations

import numpy as np

from secemb.errors import InvalidParameters
from secemb.randomness import RandomBytes, random_words, system_rng

__all__ = ["share", "reconstruct"]

_RING_DTYPES = (np.dtype(np.uint32), np.dtype(np.uint64))


def _check_ring_array(name: str, a: object) -> np.ndarray:
    if isinstance(a, np.generic):
        a = np.asarray(a)
    if not isinstance(a, np.ndarray) or a.dtype not in _RING_DTYPES:
        got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
        raise TypeError(
            f"{name} must be a numpy array of dtype uint32 or uint64 (native byte order), "
            f"got {got}"
        )
    return a


def share(x: np.ndarray, *, _rng: RandomBytes | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Split a ring array into two additive shares.

    Parameters
    ----------
    x:
        numpy array (or numpy scalar) of dtype ``uint32`` (Z_{2^32}) or ``uint64``
        (Z_{2^64}), any shape.
    _rng:
        Private test hook: a callable ``rng(n) -> bytes``.  Defaults to ``os.urandom``.
        Use only for test vectors and reproducible experiments.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``(s0, s1)``, each of ``x``'s shape and dtype: ``s0`` uniform in the ring (party 0's
        share), ``s1 = x - s0 mod 2^k`` (party 1's share).

    Raises
    ------
    TypeError
        If ``x`` is not a numpy array or scalar of dtype ``uint32`` or ``uint64``.
    """
    x = _check_ring_array("x", x)
    rng = system_rng if _rng is None else _rng
    s0 = random_words(rng, x.shape, x.dtype)
    s1 = np.subtract(x, s0, out=np.empty(x.shape, dtype=x.dtype))
    return s0, s1


def reconstruct(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    """Recombine two additive shares: ``(s0 + s1) mod 2^k``.

    Parameters
    ----------
    s0, s1:
        numpy arrays (or numpy scalars) of the same shape and the same dtype, ``uint32`` or
        ``uint64``.

    Returns
    -------
    numpy.ndarray
        The shared value, same shape and dtype as the shares.

    Raises
    ------
    TypeError
        If a share is not a numpy array or scalar of dtype ``uint32`` or ``uint64``.
    InvalidParameters
        If the shares' dtypes or shapes differ.
    """
    s0 = _check_ring_array("s0", s0)
    s1 = _check_ring_array("s1", s1)
    if s0.dtype != s1.dtype:
        raise InvalidParameters(f"share dtypes differ: s0 is {s0.dtype}, s1 is {s1.dtype}")
    if s0.shape != s1.shape:
        raise InvalidParameters(f"share shapes differ: s0 is {s0.shape}, s1 is {s1.shape}")
    return np.add(s0, s1, out=np.empty(s0.shape, dtype=s0.dtype))
