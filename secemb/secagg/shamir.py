"""Shamir t-of-n secret sharing over the prime field GF(p), p = 2^256 + 297 (hazmat layer).

The field is the smallest prime above 2^256, so every 32-byte secret (an X25519 private key)
and every 16-byte seed is a field element without reduction; a share is one field element,
:data:`SHARE_BYTES` = 33 bytes little-endian.  A secret ``s`` is hidden in a random polynomial
``f(x) = s + a_1 x + ... + a_{t-1} x^{t-1}`` with uniform coefficients; the share of the party
at point ``x`` (a non-zero integer below ``p``) is ``f(x)``.  Any ``t`` shares give ``s`` back by
Lagrange interpolation at 0; ``t - 1`` shares are independent of ``s``.

The arithmetic is on Python integers: a round shares two secrets per client among at most a few
hundred parties, which takes milliseconds.  Randomness comes from :func:`secemb.randomness.system_rng`
unless a test injects ``_rng``.
"""

from __future__ import annotations

from collections.abc import Sequence

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.randomness import RandomBytes, system_rng

__all__ = ["PRIME", "SHARE_BYTES", "split", "combine", "lagrange_at_zero"]

#: The field modulus: the smallest prime above 2^256 (checked by the tests with sympy).
PRIME = (1 << 256) + 297
#: Bytes of one share (a field element, little-endian).
SHARE_BYTES = 33


def _uniform(rng: RandomBytes) -> int:
    """A uniform field element by rejection: 257-bit candidates, accepted below ``PRIME``."""
    while True:
        v = int.from_bytes(rng(SHARE_BYTES), "little") & ((1 << 257) - 1)
        if v < PRIME:
            return v


def _check_points(xs: Sequence[int]) -> None:
    if len(set(xs)) != len(xs):
        raise InvalidParameters("share points must be distinct")
    for x in xs:
        if not 0 < x < PRIME:
            raise InvalidParameters(f"share points must be in [1, p), got {x}")


def split(
    secrets: Sequence[int], threshold: int, xs: Sequence[int], *, _rng: RandomBytes | None = None
) -> list[list[int]]:
    """Share each of ``secrets`` (ints in ``[0, p)``) ``threshold``-of-``len(xs)``.

    Returns ``shares[i][k]``: the share of ``secrets[k]`` for the party at point ``xs[i]``.

    Raises
    ------
    InvalidParameters: a secret outside the field, ``threshold`` not in ``[1, len(xs)]``, or
        points not distinct non-zero field elements.
    """
    rng = system_rng if _rng is None else _rng
    if not 1 <= threshold <= len(xs):
        raise InvalidParameters(f"threshold must be in [1, {len(xs)}] (the number of parties), got {threshold}")
    _check_points(xs)
    for s in secrets:
        if not 0 <= s < PRIME:
            raise InvalidParameters("secret is not a field element")
    polys = [[s] + [_uniform(rng) for _ in range(threshold - 1)] for s in secrets]
    out = []
    for x in xs:
        row = []
        for coeffs in polys:
            acc = 0
            for c in reversed(coeffs):  # Horner
                acc = (acc * x + c) % PRIME
            row.append(acc)
        out.append(row)
    return out


def lagrange_at_zero(xs: Sequence[int]) -> list[int]:
    """The coefficients ``l_i`` with ``f(0) = sum_i l_i f(xs[i])`` for every polynomial of
    degree below ``len(xs)``; compute once, use for every secret shared at the same points."""
    _check_points(xs)
    coeffs = []
    for i, xi in enumerate(xs):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                num = num * xj % PRIME
                den = den * (xj - xi) % PRIME
        coeffs.append(num * pow(den, -1, PRIME) % PRIME)
    return coeffs


def combine(xs: Sequence[int], shares: Sequence[int], threshold: int) -> int:
    """The secret from the shares ``shares[i]`` held at points ``xs[i]``; the first
    ``threshold`` are used.

    Raises
    ------
    InvalidMessage: fewer than ``threshold`` shares, or a share outside the field.
    """
    if len(xs) != len(shares):
        raise InvalidParameters("need one point per share")
    if len(shares) < threshold:
        raise InvalidMessage(f"need {threshold} shares to reconstruct, got {len(shares)}")
    if any(not 0 <= y < PRIME for y in shares):
        raise InvalidMessage("share is not a field element")
    lam = lagrange_at_zero(xs[:threshold])
    return sum(lv * y for lv, y in zip(lam, shares[:threshold], strict=True)) % PRIME
