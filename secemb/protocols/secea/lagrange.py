"""Lagrange coding for SecEA (paper Eqs. 6, 9-10, 12, 14-15): the public coefficient matrices.

A polynomial of degree < ``len(xs)`` is fixed by its values at the distinct points ``xs``; its
value at ``t`` is ``sum_i f(xs[i]) * l_i(t)`` with the Lagrange basis ``l_i``.  Every SecEA step is
a product of such a coefficient matrix with field arrays:

* sharing (Eq. 6-7): ``phi(alpha_v) = sum_k phi(beta_k) l_k(alpha_v)`` over ``beta_1..beta_{K+T}``;
* queries (Eq. 9-11): the same basis applied to the query values at the betas;
* the server's noise polynomial (Eq. 12): zero at ``beta_1..beta_K`` and random at
  ``alpha_1..alpha_{K~}``, evaluated at every ``alpha_v``;
* decoding (Eq. 14-15): the answers at the alphas that arrived, interpolated at ``beta_k``.

The matrices are small (at most N x (K+T) or K x N) and computed exactly with Python integers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from secemb.errors import InvalidParameters
from secemb.protocols.secea.field import P

__all__ = ["basis_matrix"]


def basis_matrix(xs: Sequence[int], ts: Sequence[int]) -> np.ndarray:
    """Lagrange coefficients ``C[j, i] = l_i(ts[j]) mod p`` for the nodes ``xs``.

    Parameters
    ----------
    xs:
        Distinct interpolation nodes in ``[0, p)``.
    ts:
        Evaluation points in ``[0, p)``.

    Returns
    -------
    numpy.ndarray
        ``uint64``, shape ``(len(ts), len(xs))``, values in ``[0, p)``: for values ``f`` at
        ``xs`` (shape ``(len(xs), ...)``), ``C @ f`` are the values at ``ts``.

    Raises
    ------
    InvalidParameters
        If the nodes are not distinct modulo p.
    """
    nodes = [int(x) % P for x in xs]
    if len(set(nodes)) != len(nodes):
        raise InvalidParameters(f"interpolation nodes must be distinct mod p, got {list(xs)}")
    out = np.empty((len(ts), len(nodes)), dtype=np.uint64)
    for j, t in enumerate(ts):
        t = int(t) % P
        for i, xi in enumerate(nodes):
            num, den = 1, 1
            for k, xk in enumerate(nodes):
                if k != i:
                    num = num * (t - xk) % P
                    den = den * (xi - xk) % P
            out[j, i] = num * pow(den, P - 2, P) % P
    return out
