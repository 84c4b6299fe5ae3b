"""Shamir's formulas written out, for the tests of secemb.secagg.shamir (B's, I's and the red team's
of session 25): every product and inversion done here, none taken from the code under test.  A
module of its own in tests/, imported by name, as staged_round is."""

from __future__ import annotations

from secemb.secagg.shamir import PRIME


def poly_at(coeffs: list[int], x: int) -> int:
    """``sum_e coeffs[e] x^e`` in the field."""
    return sum(c * pow(x, e, PRIME) for e, c in enumerate(coeffs)) % PRIME


def weights(xs: list[int]) -> list[int]:
    """``w_i = 1 / prod_{j != i} (x_i - x_j)``."""
    out = []
    for i, xi in enumerate(xs):
        den = 1
        for j, xj in enumerate(xs):
            if j != i:
                den = den * (xi - xj) % PRIME
        out.append(pow(den, -1, PRIME))
    return out


def lagrange_at_zero(xs: list[int]) -> list[int]:
    """``l_i = prod_{j != i} x_j / (x_j - x_i)``."""
    out = []
    for i, xi in enumerate(xs):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                num, den = num * xj % PRIME, den * (xj - xi) % PRIME
        out.append(num * pow(den, -1, PRIME) % PRIME)
    return out


def on_one_polynomial(xs: list[int], t: int, ys: list[int]) -> bool:
    """The truth, by exact interpolation: the polynomial through the first ``t`` shares (Lagrange's
    formula) takes every other share's value."""
    def at(x: int) -> int:
        total = 0
        for i, xi in enumerate(xs[:t]):
            num, den = 1, 1
            for j, xj in enumerate(xs[:t]):
                if j != i:
                    num, den = num * (x - xj) % PRIME, den * (xi - xj) % PRIME
            total += ys[i] * num * pow(den, -1, PRIME)
        return total % PRIME

    return all(at(x) == y for x, y in zip(xs[t:], ys[t:], strict=True))
