"""γ-level stochastic quantization and the weighted, count-normalized aggregate of SFSL
(Algorithm 1, lines 7-9 of secure-federated-submodel-learning.txt).

A client clips each update value to the public range ``[-bound, bound]``, maps it onto the
``levels`` points ``0 .. levels-1`` of that range and rounds stochastically (unbiased inside
the range): ``z in {0, ..., levels-1}``, uint32.  It then submits ``(v * z, v)`` per row, ``v``
its weight (the number of its samples touching the row; the sample count for the dense
layers), to the secure sum in Z_2^32.  The server recovers the weighted mean
``sum(v z) / sum(v)`` and maps it back: ``mean = zbar / (levels-1) * 2 bound - bound``.

No wrap-around: with at most ``clients`` contributors and ``v <= max_weight(clients, levels)``
the sums stay below 2^32; a client clips its weights to that public cap.  The paper writes
both "{0 ... 2^γ - 1}" and "γ = 2^15"; we take γ as the number of levels, 2^15 (15-bit
values), which leaves 17 bits for the weights (docs/sfsl.md).

The rounding coins are training randomness (numpy Generator): the quantized values are masked
by the secure aggregation, so nobody but the client sees them.
"""

from __future__ import annotations

import numpy as np

from secemb.errors import InvalidParameters, check_float, check_int

__all__ = ["DEFAULT_LEVELS", "dequantize_mean", "max_weight", "quantize"]

#: γ of the paper's evaluation
DEFAULT_LEVELS = 1 << 15


def _check(bound: float, levels: int) -> None:
    check_float("bound", bound, above=0)
    check_int("levels", levels, low=2, high=1 << 31)


def max_weight(clients: int, levels: int = DEFAULT_LEVELS) -> int:
    """The largest per-client weight ``v`` for which ``clients * v * (levels-1) < 2^32``.

    Raises
    ------
    InvalidParameters
        No weight >= 1 fits (too many clients for ``levels``).
    """
    cap = ((1 << 32) - 1) // (max(1, clients) * (levels - 1))
    if cap < 1:
        raise InvalidParameters(f"{clients} clients with {levels} levels can overflow Z_2^32")
    return int(cap)


def quantize(values: np.ndarray, bound: float, levels: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """``(z, clipped)``: ``z`` uint32 of ``values``' shape in ``[0, levels)``, and the share of
    values that were clipped to ``[-bound, bound]`` (a diagnostic kept by the client)."""
    _check(bound, levels)
    x = np.asarray(values, dtype=np.float64)
    clipped = float(np.mean(np.abs(x) > bound)) if x.size else 0.0
    scaled = (np.clip(x, -bound, bound) + bound) * ((levels - 1) / (2.0 * bound))
    low = np.floor(scaled)
    up = rng.random(x.shape) < (scaled - low)
    z = np.minimum(low + up, levels - 1)
    return z.astype(np.uint32), clipped


def dequantize_mean(weighted_sum: np.ndarray, weight_sum: np.ndarray, bound: float, levels: int) -> np.ndarray:
    """The weighted mean update per row: float64 of ``weighted_sum``'s shape.

    ``weighted_sum`` uint32 (k, w) is ``sum_i v_i z_i`` per row, ``weight_sum`` uint32 (k,) is
    ``sum_i v_i``; rows with ``weight_sum == 0`` (nobody touched them) get 0.
    """
    _check(bound, levels)
    s = np.asarray(weighted_sum, dtype=np.float64)
    v = np.asarray(weight_sum, dtype=np.float64).reshape(s.shape[0], *([1] * (s.ndim - 1)))
    zbar = np.divide(s, v, out=np.zeros_like(s), where=v > 0)
    return np.where(v > 0, zbar * (2.0 * bound / (levels - 1)) - bound, 0.0)
