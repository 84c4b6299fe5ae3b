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

import functools
import math
from collections.abc import Iterable, Sequence

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.randomness import RandomBytes, system_rng

__all__ = ["PRIME", "SHARE_BYTES", "PointSet", "Points", "ShareCheck", "split", "combine", "combine_robust",
           "lagrange_at_zero", "openings_leaving_one_out"]

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


@functools.cache
def _inverse_factorials(size: int) -> tuple[int, ...]:
    """``1 / k!`` in the field for ``k`` in ``[0, size]`` (one inversion; cached, so callers
    round ``size`` up to a power of two)."""
    fact = 1
    for k in range(2, size + 1):
        fact = fact * k % PRIME
    inv = [0] * (size + 1)
    inv[size] = pow(fact, -1, PRIME)
    for k in range(size, 0, -1):
        inv[k - 1] = inv[k] * k % PRIME
    return tuple(inv)


def _inverses(values: Sequence[int]) -> list[int]:
    """``1 / v`` in the field for each of the non-zero ``values``, with one inversion (Montgomery's
    trick: the running products inverted once, then taken apart from the end)."""
    before, acc = [], 1
    for v in values:
        before.append(acc)
        acc = acc * v % PRIME
    inv = pow(acc, -1, PRIME)
    out = [0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        out[i] = inv * before[i] % PRIME
        inv = inv * values[i] % PRIME
    return out


def _weights(xs: Sequence[int]) -> list[int]:
    """The barycentric weights ``w_i = 1 / prod_{j != i} (x_i - x_j)`` of the distinct points ``xs``.

    :class:`Points` carry theirs (from their :class:`PointSet`).  A round's points are client ids
    plus one, and a set of holders lacks few of them: where ``N = max(xs) < 2 len(xs)``, the
    product over every other point of ``1 .. N`` is ``(-1)^(N - x_i) (x_i - 1)! (N - x_i)!``, so
    ``w_i`` is the inverse of that (cached inverse factorials) times ``prod_g (x_i - g)`` over the
    ``k = N - len(xs)`` gaps ``g`` of ``1 .. N`` not in ``xs`` (small integers): ``O(m k)`` products
    and no inversion for ``m`` points (finding C2, session 24: one ``O(m^2)`` set of weights per
    holder set made many holder sets cost ``O(n^3)``).  Other points: the products themselves,
    ``O(m^2)`` (of integers below ``2^32`` for client ids, multiplied before they are reduced), and
    one inversion for all (:func:`_inverses`)."""
    if isinstance(xs, Points):
        return list(xs.weights)
    if not xs:
        return []
    top = max(xs)
    if top < 2 * len(xs):
        inv = _inverse_factorials(1 << top.bit_length())
        gaps = sorted(set(range(1, top + 1)).difference(xs))
        weights = []
        for x in xs:
            num = -1 if (top - x) & 1 else 1
            for g in gaps:
                num *= x - g
            weights.append(num * inv[x - 1] % PRIME * inv[top - x] % PRIME)
        return weights
    return _inverses([math.prod([xi - xj for xj in xs if xj != xi]) % PRIME for xi in xs])


class Points(tuple[int, ...]):
    """Distinct share points (a tuple of them, in the order given) with their barycentric weights
    (:attr:`weights`, in the same order), made by :meth:`PointSet.subset` or :meth:`subset`:
    :class:`ShareCheck`, and :func:`lagrange_at_zero` take these weights instead of computing
    them.  A slice or any other tuple made from it is a plain tuple (its weights are not these)."""

    weights: tuple[int, ...]
    _weight: dict[int, int]

    def __new__(cls, xs: Iterable[int], weights: Iterable[int]) -> Points:
        self = super().__new__(cls, xs)
        self.weights = tuple(weights)
        if len(self.weights) != len(self):
            raise InvalidParameters(f"need one weight per point ({len(self)}), got {len(self.weights)}")
        self._weight = dict(zip(self, self.weights, strict=True))
        return self

    def subset(self, xs: Sequence[int]) -> Points:
        """The points ``xs`` (distinct points of these, in any order) with their weights, from these:
        for a subset ``S`` missing ``k`` of these points ``W_x prod_g (x - g)`` over the missing
        ``g`` (the factors of the other points cancel): ``O(|S| k)`` products and no inversion, so a
        subset leaving one point out costs ``O(|S|)`` (session 26).  A subset missing more points
        than it holds takes its own weights (:func:`_weights`), which is then cheaper.

        Raises
        ------
        InvalidParameters: a point repeated or not of these.
        """
        chosen = set(xs)
        if len(chosen) != len(xs) or not chosen <= self._weight.keys():
            raise InvalidParameters("a subset's points must be distinct points of its set")
        missing = [g for g in self if g not in chosen]
        if len(missing) >= len(xs):
            return Points(xs, _weights(xs))
        return Points(xs, [self._weight[x] * math.prod([x - g for g in missing]) % PRIME for x in xs])


class PointSet:
    """A round's share points (distinct, in ``[1, p)``: the ids plus one of the clients whose shares
    it opens) with their barycentric weights ``W_x = 1 / prod_{y != x} (x - y)`` over the set,
    computed once (:func:`_weights`: ``O(n^2)`` products of small integers and one inversion; from
    the inverse factorials where the largest point is below twice their number).

    The weights of a subset ``S`` missing ``k`` of the points are ``W_x prod_g (x - g)`` over the
    missing ``g`` (:meth:`Points.subset`): ``O(|S| k)`` products and no inversion per holder set,
    whatever the ids (finding F1, session 25: SFSL's secure aggregations use the devices' user
    ids, a sparse sample of the dataset's, so each holder set took ``O(m^2)`` products and ``m``
    inversions and the C2 plan cost what it cost before the C2 fix).  Each subset's
    :func:`lagrange_at_zero` is computed once (:meth:`lagrange_at_zero`), from the weights of a
    subset holding it where the caller has one (session 26: the first ``threshold`` holders of a
    holder set from the set's, ``O(t (m - t))``, not ``O(t (n - t))`` from the round's).

    Raises
    ------
    InvalidParameters: points not distinct non-zero field elements.
    """

    def __init__(self, points: Sequence[int]) -> None:
        _check_points(points)
        #: the set's points with their weights
        self.points = Points(points, _weights(points))
        self._lagrange: dict[tuple[int, ...], list[int]] = {}

    def subset(self, xs: Sequence[int]) -> Points:
        """The points ``xs`` (distinct points of this set, in any order) with their weights
        (:meth:`Points.subset`).

        Raises
        ------
        InvalidParameters: a point repeated or not of this set.
        """
        return self.points.subset(xs)

    def lagrange_at_zero(self, xs: Sequence[int], within: Points | None = None) -> list[int]:
        """:func:`lagrange_at_zero` of the subset ``xs``, computed once per subset (in its order)
        and shared: do not modify the list.  Its weights come from ``within`` (a subset of this
        set holding ``xs``: :meth:`subset`'s) where given, else from the set's.

        Raises
        ------
        InvalidParameters: a point repeated or not of ``within`` (of this set).
        """
        key = tuple(xs)
        if key not in self._lagrange:
            self._lagrange[key] = lagrange_at_zero((self.points if within is None else within).subset(key))
        return self._lagrange[key]


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
    degree below ``len(xs)``; compute once, use for every secret shared at the same points.

    ``l_i = prod_{j != i} x_j / (x_j - x_i) = (-1)^(m-1) w_i prod_{j != i} x_j`` with the weights
    ``w_i`` of :func:`_weights` (``m = len(xs)``; :class:`Points` carry theirs); the products
    without ``x_i`` come from running products from either end, so no point is inverted."""
    _check_points(xs)
    w = _weights(xs)
    sign = 1 if len(xs) % 2 else -1
    before, acc = [], 1
    for x in xs:
        before.append(acc)
        acc = acc * x % PRIME
    coeffs, after = [0] * len(xs), 1
    for i in range(len(xs) - 1, -1, -1):
        coeffs[i] = sign * w[i] * before[i] % PRIME * after % PRIME
        after = after * xs[i] % PRIME
    return coeffs


def openings_leaving_one_out(xs: Sequence[int], columns: Sequence[Sequence[int]]) -> list[list[int]]:
    """``out[i][k]``: the secret opened from the shares ``columns[k]`` (one per point of ``xs``, in
    order) of every point but ``xs[i]`` -- each of the ``m = len(xs)`` leave-one-out subsets'
    opening at 0, for polynomials of degree below ``m - 1``.

    With ``l_j`` the coefficients of all ``m`` points (:func:`lagrange_at_zero`; :class:`Points`
    carry their weights), those without point ``i`` are ``l_j (x_i - x_j) / x_i``, so the opening
    without share ``i`` is ``A - B / x_i`` where ``A = sum_j l_j y_j`` and ``B = sum_j l_j x_j y_j``
    (the terms ``j = i`` cancel): ``O(m)`` a secret and one inversion for all the points
    (:func:`_inverses`), not a set of coefficients a subset (``O(m^2)``; finding C1, session 24, and
    session 26).

    Raises
    ------
    InvalidParameters: points not distinct non-zero field elements, or a column not one share per point.
    """
    lam = lagrange_at_zero(xs)
    if any(len(col) != len(xs) for col in columns):
        raise InvalidParameters(f"need one share per point ({len(xs)}) in every column")
    inv = _inverses(xs)
    sums = [(sum(lv * y for lv, y in zip(lam, col, strict=True)) % PRIME,
             sum(lv * x * y for lv, x, y in zip(lam, xs, col, strict=True)) % PRIME) for col in columns]
    return [[(whole - tilted * vi) % PRIME for whole, tilted in sums] for vi in inv]


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


class ShareCheck:
    """A test that shares held at the points ``xs`` lie on one polynomial of degree below
    ``threshold`` (so any ``threshold`` of them give the same secret), with one dot product per
    shared secret.

    The shares ``y_i`` of such a polynomial ``f`` satisfy ``sum_i w_i r(x_i) y_i = 0`` for every
    polynomial ``r`` of degree below ``m - threshold`` (``m = len(xs)``), where
    ``w_i = 1 / prod_{j != i} (x_i - x_j)``: ``r f`` has degree below ``m - 1``, and
    ``sum_i w_i g(x_i)`` is the coefficient of ``x^(m-1)`` of the polynomial interpolating ``g``
    at the ``m`` points.  These vectors ``(w_i r(x_i))`` span the dual of the shares' code, so for
    shares that do not lie on one such polynomial ``L(r) = sum_i w_i r(x_i) y_i`` is a non-zero
    linear form on the polynomials of degree below ``d = m - threshold``.  The check takes
    ``r = (x - a)^(d-1)`` for a uniform field element ``a``: ``L(r) = sum_k C(d-1, k) (-a)^(d-1-k)
    L(x^k)`` is then a non-zero polynomial in ``a`` of degree below ``d`` (some ``L(x^k)`` with
    ``k < d`` is not 0, and no binomial coefficient below ``p`` vanishes), zero for at most
    ``d - 1`` of the ``p`` values of ``a``: wrong shares pass with probability at most
    ``(d - 1) / p``.  ``a`` is drawn here, after the shares are fixed (from
    :func:`secemb.randomness.system_rng` unless a test injects ``_rng``), so whoever chose the
    shares cannot aim at it.  The weights are those :class:`Points` carry (``O(m k)`` for a
    holder set missing ``k`` of its round's points: :meth:`PointSet.subset`), else
    :func:`_weights`'s (the same for ``m`` of the points ``1 .. N``), and ``r(x_i)`` is one power
    each, so a check of a holder set costs ``O(m (k + log m))``, not ``O(m^2)`` (finding C2,
    session 24; F1, session 25).  With ``m <= threshold`` there is nothing to check: every set of
    shares lies on such a polynomial.
    """

    def __init__(self, xs: Sequence[int], threshold: int, *, _rng: RandomBytes | None = None) -> None:
        _check_points(xs)
        if threshold < 1:
            raise InvalidParameters(f"threshold must be >= 1, got {threshold}")
        m = len(xs)
        self.points = list(xs)
        self._coeffs: list[int] | None = None
        if m <= threshold:
            return
        a = _uniform(system_rng if _rng is None else _rng)
        degree = m - threshold - 1
        self._coeffs = [w * pow(x - a, degree, PRIME) % PRIME for w, x in zip(_weights(xs), xs, strict=True)]

    def consistent(self, shares: Sequence[int]) -> bool:
        """Whether ``shares`` (one per point, in order) lie on one polynomial of degree below the
        threshold (up to the ``(m - threshold - 1) / p`` chance above)."""
        if len(shares) != len(self.points):
            raise InvalidParameters(f"need one share per point ({len(self.points)}), got {len(shares)}")
        if self._coeffs is None:
            return True
        return sum(c * y for c, y in zip(self._coeffs, shares, strict=True)) % PRIME == 0


def combine_robust(xs: Sequence[int], shares: Sequence[Sequence[int]], threshold: int, *,
                   within: PointSet | None = None, _rng: RandomBytes | None = None) -> tuple[list[int], int | None]:
    """Secrets from redundant shares, with at most one party's shares wrong: ``shares[i][k]`` is
    party ``i``'s (at point ``xs[i]``) share of secret ``k``.

    Returns ``(secrets, bad)``: ``bad`` is ``None`` when every party's shares lie on the secrets'
    polynomials (:class:`ShareCheck`), else the index of the one party whose shares do not (found
    by leaving each party out in turn; needs ``len(xs) >= threshold + 2``), and the secrets are
    then reconstructed without it.  With ``len(xs) == threshold`` nothing can be checked.  The
    weights of ``xs`` come from ``within`` (the round's points, ``xs`` some of them; by default a
    :class:`PointSet` of ``xs``), those of each subset tried and of the reconstruction's from
    those of ``xs`` (:meth:`Points.subset`): a leave-one-out subset's cost ``O(m)`` products, not
    ``O(m k)`` for ``xs`` missing ``k`` of the round's points (session 26), nor ``O(m^2)``.

    Raises
    ------
    InvalidMessage: fewer than ``threshold`` parties, a share outside the field, or shares that
        are inconsistent and not explained by one party (more than one party's shares wrong, or
        too few parties to tell which).
    InvalidParameters: ``xs`` not distinct points of ``within``.
    """
    m = len(xs)
    if m < threshold:
        raise InvalidMessage(f"need {threshold} shares to reconstruct, got {m}")
    if any(len(row) != len(shares[0]) for row in shares) or len(shares) != m:
        raise InvalidParameters("need one row of shares per point, every row as long")
    if any(not 0 <= y < PRIME for row in shares for y in row):
        raise InvalidMessage("share is not a field element")
    columns = list(zip(*shares, strict=True)) if shares else []
    points = PointSet(xs) if within is None else within
    held = points.subset(xs)
    check = ShareCheck(held, threshold, _rng=_rng)
    wrong = [k for k, col in enumerate(columns) if not check.consistent(col)]
    bad: int | None = None
    if wrong:
        if m < threshold + 2:
            raise InvalidMessage(f"the shares of {len(wrong)} secrets do not agree, and {m} parties are too few "
                                 f"to tell whose are wrong (threshold {threshold})")
        for i in range(m):
            rest = [x for j, x in enumerate(xs) if j != i]
            sub = ShareCheck(held.subset(rest), threshold, _rng=_rng)
            if all(sub.consistent([y for j, y in enumerate(columns[k]) if j != i]) for k in wrong):
                bad = i
                break
        if bad is None:
            raise InvalidMessage(f"the shares of {len(wrong)} secrets do not agree, and leaving out any one party "
                                 "does not mend them: more than one party sent wrong shares")
    keep = [j for j in range(m) if j != bad][:threshold]
    lam = points.lagrange_at_zero([xs[j] for j in keep], within=held)
    return [sum(lv * col[j] for lv, j in zip(lam, keep, strict=True)) % PRIME for col in columns], bad
