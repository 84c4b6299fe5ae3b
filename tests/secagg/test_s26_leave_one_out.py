"""Session 26 (helper D, issue 37): subsets' weights from a subset's, and the leave-one-out openings
from one set of coefficients.

Session 25 took every holder set's weights from the round's (:class:`~secemb.secagg.shamir.PointSet`:
``O(m k)`` for a set of ``m`` missing ``k`` of the round's points).  Three costs were left: a holder
set's first ``threshold`` points (the opening's coefficients) took theirs from the round's too, a
second ``O(t (n - t))`` set a holder set (red team K's worst plan, half the round colluding, makes
``~n`` holder sets with their first ``t`` points all different); each leave-one-out check of
:func:`~secemb.secagg.shamir.combine_robust` took ``O(m (k + 1))``; and the unsigned server's
``_one_spare`` opened each of its ``t + 1`` subsets with :func:`~secemb.secagg.shamir.combine`,
computing each subset's weights alone (``O(t^2)`` a subset, ``O(t^3)`` in all).  Now a subset's
weights come from a subset holding it (:meth:`Points.subset`), and the openings leaving one share
out come from one set of coefficients (:func:`~secemb.secagg.shamir.openings_leaving_one_out`).

The tests hold them to tests/shamir_textbook.py (every product and inversion written out there),
count the products :mod:`secemb.secagg.shamir` multiplies (bounds that the old code exceeds), and
play rounds whose sums are numpy's.  Point sets, polynomials and shares are test data from
:mod:`random` (public, not secrets).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from types import SimpleNamespace

import numpy as np
import pytest
import shamir_textbook as textbook
from secagg_rounds import Round, move_unmask_share
from share_records import flip_tag

from secemb.errors import InvalidParameters
from secemb.secagg import SecAggConfig, shamir
from secemb.secagg.shamir import PRIME, PointSet, Points, combine_robust, lagrange_at_zero, openings_leaving_one_out

_GEN = random.Random(2635)


def _points(n: int) -> list[int]:
    """``n`` distinct points: client ids plus one drawn from ``0 .. 10 n`` or ``0 .. 2^32 - 1`` (a
    sparse round), or ``1 .. n`` (ids ``0 .. n - 1``), shuffled (a round's U4 is in arrival order)."""
    top = _GEN.choice([10 * n, 2**32, n])
    points = [u + 1 for u in _GEN.sample(range(top), n)]
    _GEN.shuffle(points)
    return points


class _Products:
    """Counts the factors :mod:`secemb.secagg.shamir` passes to ``math.prod`` (the subsets'
    products, and the products path of the weights of a set alone)."""

    def __init__(self) -> None:
        self.factors = 0

    def prod(self, values: Iterable[int]) -> int:
        values = list(values)
        self.factors += len(values)
        return math.prod(values)


@pytest.fixture
def products(monkeypatch: pytest.MonkeyPatch) -> _Products:
    counter = _Products()
    monkeypatch.setattr(shamir, "math", SimpleNamespace(prod=counter.prod))
    return counter


# ------------------------------------------------------------------ weights from a subset's

@pytest.mark.parametrize("n", [2, 9, 40, 130])
def test_a_subsets_weights_from_a_subsets_are_the_textbooks(n: int) -> None:
    """Chains of subsets of random rounds -- the round, a holder set missing some points, that set
    less one point, its first points -- each from the one before (:meth:`Points.subset`, both of
    its paths: from the weights while the subset misses fewer points than it holds, else its own),
    in a shuffled order: the weights are the textbook's."""
    for _ in range(6):
        base = _points(n)
        chain = PointSet(base).points
        assert list(chain.weights) == textbook.weights(base)
        for size in sorted({_GEN.randrange(1, n + 1), max(1, n - 1), _GEN.randrange(1, n + 1)}, reverse=True):
            xs = _GEN.sample(list(chain), min(size, len(chain)))
            got = chain.subset(xs)
            assert isinstance(got, Points) and tuple(got) == tuple(xs)
            assert list(got.weights) == textbook.weights(xs), (base, xs)
            chain = got


def test_a_subset_of_points_outside_the_subset_or_repeated_is_refused() -> None:
    base = [5, 900, 17, 2**32, 44]
    held = PointSet(base).subset([900, 17, 44])
    for bad in ([900, 5], [17, 17], [2**32]):
        with pytest.raises(InvalidParameters, match="distinct points of its set"):
            held.subset(bad)
    with pytest.raises(InvalidParameters, match="distinct points of its set"):
        PointSet(base).lagrange_at_zero([900, 5], within=held)


def test_the_first_threshold_coefficients_from_the_holder_sets_weights_are_exact_and_cheap(
        products: _Products) -> None:
    """A sparse round of 200 points, threshold 101, holder sets of 103 (K's worst plan's shape): the
    coefficients of a set's first 101 points from the set's weights are the textbook's and cost
    ``t (m - t)`` = 202 products; from the round's they cost ``t (n - t)`` = 9,999 (session 25's
    path, which the server took for every holder set)."""
    base = [u + 1 for u in _GEN.sample(range(2000), 200)]
    points, t = PointSet(base), 101
    for _ in range(3):
        xs = points.subset(_GEN.sample(base, 103))
        products.factors = 0
        lam = points.lagrange_at_zero(xs[:t], within=xs)
        assert products.factors == t * 2
        assert lam == textbook.lagrange_at_zero(list(xs[:t]))
        assert points.lagrange_at_zero(xs[:t]) is lam  # computed once a subset
        f = [_GEN.randrange(PRIME) for _ in range(t)]
        assert sum(lv * textbook.poly_at(f, x) for lv, x in zip(lam, xs[:t], strict=True)) % PRIME == f[0]
    xs, fresh = points.subset(_GEN.sample(base, 103)), PointSet(base)
    products.factors = 0
    fresh.lagrange_at_zero(xs[:t])
    assert products.factors == t * (200 - t)


# ------------------------------------------------------------------ leave-one-out openings

@pytest.mark.parametrize("m", [1, 2, 3, 12, 60])
def test_each_leave_one_out_opening_is_the_textbook_opening_of_its_subset(m: int) -> None:
    """Random point sets (as :class:`Points` and as plain lists), three columns: shares of random
    polynomials of degree below ``m - 1`` (each opening is the secret), arbitrary field elements,
    and the first with one share moved (each opening is still Lagrange's formula over its
    subset): ``out[i][k]`` is the textbook's opening of column ``k`` without point ``i``."""
    xs = _points(m)
    polys = [[_GEN.randrange(PRIME) for _ in range(max(m - 1, 1))] for _ in range(2)]
    honest = [[textbook.poly_at(f, x) for x in xs] for f in polys]
    moved = list(honest[0])
    moved[_GEN.randrange(m)] += 1
    columns = [*honest, [_GEN.randrange(PRIME) for _ in xs], [y % PRIME for y in moved]]
    for given in (xs, PointSet(xs).points):
        out = openings_leaving_one_out(given, columns)
        assert len(out) == m and all(len(row) == len(columns) for row in out)
        for i in range(m):
            rest = [x for j, x in enumerate(xs) if j != i]
            lam = textbook.lagrange_at_zero(rest)
            for k, col in enumerate(columns):
                rest_ys = [y for j, y in enumerate(col) if j != i]
                assert out[i][k] == sum(lv * y for lv, y in zip(lam, rest_ys, strict=True)) % PRIME, (i, k)
            if m > 1:
                assert out[i][: len(polys)] == [f[0] for f in polys]


def test_leave_one_out_openings_refuse_bad_arguments() -> None:
    with pytest.raises(InvalidParameters, match="one share per point"):
        openings_leaving_one_out([1, 2, 3], [[1, 2]])
    with pytest.raises(InvalidParameters, match="distinct"):
        openings_leaving_one_out([1, 2, 2], [[1, 2, 3]])
    with pytest.raises(InvalidParameters, match=r"\[1, p\)"):
        openings_leaving_one_out([0, 2], [[1, 2]])


def test_combine_robusts_leave_one_out_checks_take_their_weights_from_the_holder_sets(products: _Products) -> None:
    """Shares of two secrets at 60 of a sparse round's 80 points, threshold 20, the last party's share
    of one moved (the search tries every other party first): the party and the secrets are
    found as by the textbook, and the products stay within ``3 m (m + k)`` = 14,400 (each subset
    from the round's weights: ``m^2 (k + 1)`` = 75,600)."""
    base = [u + 1 for u in _GEN.sample(range(800), 80)]
    xs, t = base[10:70], 20
    polys = [[_GEN.randrange(PRIME) for _ in range(t)] for _ in range(2)]
    shares = [[textbook.poly_at(f, x) for f in polys] for x in xs]
    shares[59][1] = (shares[59][1] + 5) % PRIME
    within = PointSet(base)
    products.factors = 0
    assert combine_robust(xs, shares, t, within=within) == ([f[0] for f in polys], 59)
    assert products.factors <= 3 * 60 * (60 + 20), products.factors
    assert not textbook.on_one_polynomial(xs, t, [row[1] for row in shares])
    assert textbook.on_one_polynomial(xs[:59], t, [row[1] for row in shares[:59]])


# ------------------------------------------------------------------ rounds

@pytest.mark.parametrize("ids", ["sparse", "dense"])
def test_an_unsigned_holder_set_with_one_spare_share_opens_from_one_set_of_coefficients(ids: str) -> None:
    """Twelve clients (ids sparse up to ``2^32 - 2``, or ``0 .. 11``), threshold 6; the last drops
    after ShareKeys with its ciphertexts to four clients spoiled, so seven hold its mask key (one
    spare share); the third moves its share of that key.  Of the seven 6-subsets only the one
    without it opens a key matching the public key: the sum is numpy's and that client is named.
    No weights are computed alone but U4's (before, each subset's: seven more sets)."""
    cids = sorted(_GEN.sample(range(2**32 - 1), 12)) if ids == "sparse" else list(range(12))
    g = np.random.default_rng(11)  # test inputs, not secrets
    cfg = SecAggConfig(length=3, threshold=6, width=2, round_id=7, signed=False)
    rnd = Round(cfg, {u: g.integers(0, 2**32, (3, 2), dtype=np.uint64).astype(np.uint32) for u in cids})
    gone, liar, spoiled = cids[-1], cids[2], cids[5:9]

    def deal(u: int, msg: bytes) -> bytes:
        for r in spoiled if u == gone else ():
            msg = flip_tag(msg, r, False)
        return msg

    rnd.play(deal=deal, unmask=lambda u, msg: move_unmask_share(msg, 0, gone, 1 << 90) if u == liar else msg,
             dropped=(gone,))
    total, alone = rnd.result_recording_weights()
    assert np.array_equal(total, rnd.want())
    assert rnd.server.cheaters == [liar]
    assert rnd.server.complaints == {r: [gone] for r in spoiled}
    assert alone == [tuple(u + 1 for u in rnd.server.u4)]


def test_lagrange_at_zero_of_points_uses_their_weights() -> None:
    """:func:`lagrange_at_zero` of a :class:`Points` (a subset's, from a subset's) is the textbook's."""
    base = _points(30)
    held = PointSet(base).subset(base[3:28]).subset(base[3:20])
    assert lagrange_at_zero(held) == textbook.lagrange_at_zero(base[3:20])
