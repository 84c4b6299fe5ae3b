"""Session 25 (helper I, issue 34): finding F1 of the session 25 red team -- C2's fix took its fast
path only for holder sets within ``1 .. N`` with ``N < 2m`` (ids ``0 .. n - 1``); SFSL's secure
aggregations use the devices' user ids (a sparse sample), so each holder set of such a round took
``O(m^2)`` products and ``m`` inversions again.

:class:`secemb.secagg.shamir.PointSet` takes the weights of a round's points once (one inversion
for all: :func:`~secemb.secagg.shamir._inverses`), a holder set's from them times a product over the
points it misses; :class:`~secemb.secagg.shamir.Points` carry them into
:class:`~secemb.secagg.shamir.ShareCheck` and :func:`~secemb.secagg.shamir.lagrange_at_zero`, and
the server takes every holder set's from U4's.  The tests hold them to references written here
(the textbook weights, Lagrange's formula, exact interpolation) and to ``shamir._weights`` of the
set alone; the round tests to numpy's sums.  Point sets and polynomials are test data from
:mod:`random` (public, not secrets).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import shamir_textbook as textbook
from secagg_rounds import Round, move_unmask_share
from share_records import omit_seeds

from secemb.errors import InvalidParameters
from secemb.secagg import SecAggConfig, shamir
from secemb.secagg.shamir import PRIME, PointSet, Points, ShareCheck, combine_robust, lagrange_at_zero

_GEN = random.Random(2534)


def _sparse_round_points(n: int) -> list[int]:
    """``n`` client ids plus one, drawn from ``0 .. 2^32 - 1`` or from ``0 .. 10 n`` (an SFSL round's
    users out of a dataset's), in a shuffled order (a round's U4 is in arrival order)."""
    top = _GEN.choice([10 * n, 2**32])
    points = [u + 1 for u in _GEN.sample(range(top), n)]
    _GEN.shuffle(points)
    return points


@pytest.mark.parametrize("n", [1, 2, 7, 40, 120])
def test_a_subsets_weights_from_the_base_are_those_of_the_set_alone(n: int) -> None:
    """Random sparse rounds and random subsets, missing from none to all but one of the points (both
    of :meth:`PointSet.subset`'s paths: from the base while it misses fewer points than it holds,
    else its own weights), in a shuffled order: the weights equal ``shamir._weights`` of the subset
    alone and the textbook's; a round of ids ``0 .. n - 1`` (the factorials' base) too."""
    for base in (_sparse_round_points(n), _sparse_round_points(n), list(range(1, n + 1))):
        points = PointSet(base)
        for _ in range(8):
            xs = _GEN.sample(base, _GEN.randrange(1, n + 1))
            got = points.subset(xs)
            assert isinstance(got, Points) and tuple(got) == tuple(xs)
            assert list(got.weights) == shamir._weights(list(xs)) == textbook.weights(xs), (base, xs)


def test_the_coefficients_and_the_check_from_the_base_are_exact() -> None:
    """A sparse round of 60 points, threshold 21, subsets missing 0 to 12 points: ``lagrange_at_zero``
    of a subset (and of its first ``t`` points, through :meth:`PointSet.lagrange_at_zero`) is the
    textbook's and opens the secret; the check on the subset's :class:`Points` passes honest shares
    and refuses one moved share and a shift of degree exactly ``t``."""
    base = _sparse_round_points(60)
    points, t = PointSet(base), 21
    for missing in range(13):
        xs = [x for x in base if x not in set(_GEN.sample(base, missing))]
        sub = points.subset(xs)
        assert lagrange_at_zero(sub) == textbook.lagrange_at_zero(xs)
        lam = points.lagrange_at_zero(xs[:t])
        assert lam == textbook.lagrange_at_zero(xs[:t])
        f = [_GEN.randrange(PRIME) for _ in range(t)]
        ys = [textbook.poly_at(f, x) for x in xs]
        assert sum(lv * y for lv, y in zip(lam, ys[:t], strict=True)) % PRIME == f[0]
        moved = list(ys)
        i = _GEN.randrange(len(xs))
        moved[i] = (moved[i] + 1) % PRIME
        shift = [_GEN.randrange(PRIME) for _ in range(t)] + [_GEN.randrange(1, PRIME)]
        shifted = [(y + textbook.poly_at(shift, x)) % PRIME for x, y in zip(xs, ys, strict=True)]
        check = ShareCheck(sub, t)
        assert check.consistent(ys)
        assert not check.consistent(moved) and not check.consistent(shifted)


def test_a_slice_of_points_carries_no_weights() -> None:
    """A slice (or any tuple made) of :class:`Points` is a plain tuple: its coefficients are its own
    (were the set's weights carried into the slice, the coefficients of the first ``t`` would be
    wrong)."""
    base = _sparse_round_points(30)
    sub = PointSet(base).subset(base[:25])
    head = sub[:10]
    assert type(head) is tuple and type(sub + sub[:0]) is tuple
    assert lagrange_at_zero(head) == textbook.lagrange_at_zero(list(head))


def test_a_subset_of_points_outside_the_set_or_repeated_is_refused() -> None:
    base = [5, 900, 17, 2**32]
    points = PointSet(base)
    for bad in ([5, 6], [5, 5, 17], [2**32 + 1]):
        with pytest.raises(InvalidParameters, match="distinct points of its set"):
            points.subset(bad)
    for bad_base in ([1, 1], [0, 3], [PRIME]):
        with pytest.raises(InvalidParameters):
            PointSet(bad_base)
    with pytest.raises(InvalidParameters, match="one weight per point"):
        Points([1, 2], [1])


def test_holder_sets_of_a_sparse_round_cost_one_inversion_in_all() -> None:
    """200 sparse points, 30 holder sets each missing 1 to 9 of them: the set's weights take one
    inversion (the old weights took one per point of every holder set: ~5,700), the holder sets'
    checks and coefficients none."""
    base = _sparse_round_points(200)
    inversions = [0]

    def counted(b: int, exp: int, mod: int | None = None) -> int:
        inversions[0] += exp == -1
        return pow(b, exp, mod)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shamir, "pow", counted, raising=False)
        points = PointSet(base)
        assert inversions[0] == 1
        for _ in range(30):
            gone = set(_GEN.sample(base, _GEN.randrange(1, 10)))
            xs = [x for x in base if x not in gone]
            ShareCheck(points.subset(xs), 101)
            points.lagrange_at_zero(xs[:101])
    assert inversions[0] == 1


def test_combine_robust_within_a_round_finds_the_wrong_party_as_alone() -> None:
    """Shares of three secrets at 40 of a sparse round's 50 points, threshold 15, one party's share of
    one secret moved: with the round's :class:`PointSet` (``within``) and without, the same party
    is found and the secrets are the dealt ones; a party outside ``within`` is refused."""
    base = _sparse_round_points(50)
    xs, t = base[:40], 15
    polys = [[_GEN.randrange(PRIME) for _ in range(t)] for _ in range(3)]
    shares = [[textbook.poly_at(f, x) for f in polys] for x in xs]
    shares[23][1] = (shares[23][1] + 7) % PRIME
    for within in (PointSet(base), None):
        assert combine_robust(xs, shares, t, within=within) == ([f[0] for f in polys], 23)
    with pytest.raises(InvalidParameters):
        combine_robust(xs, shares, t, within=PointSet(base[1:]))


# ------------------------------------------------------------------ rounds with sparse ids

@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_a_sparse_round_under_the_c2_plan_with_a_wrong_holder_sums_exactly_and_names_it(signed: bool) -> None:
    """20 clients with ids drawn from ``0 .. 2^32 - 2``, threshold 11, the last four omitting seeds
    in different patterns and one client sending a moved share of another's seed: the sum is
    numpy's and that client is named (signed: its share does not match the commitment, all its
    shares left out; unsigned: the leave-one-out search within U4's points finds it); every
    holder set's weights come from U4's (``PointSet.subset``), none computed alone."""
    ids = sorted(_GEN.sample(range(2**32 - 1), 20))
    g = np.random.default_rng(7)  # test inputs, not secrets
    cfg = SecAggConfig(length=3, threshold=11, width=2, round_id=5, signed=signed)
    rnd = Round(cfg, {u: g.integers(0, 2**32, (3, 2), dtype=np.uint64).astype(np.uint32) for u in ids})
    liar, victim = ids[2], ids[9]
    plan = omit_seeds(ids, 4)
    rnd.play(unmask=lambda u, msg: move_unmask_share(plan(u, msg), 1, victim, 1) if u == liar else plan(u, msg))
    total, alone = rnd.result_recording_weights()
    assert np.array_equal(total, rnd.want())
    assert rnd.server.cheaters == [liar]
    assert alone == [tuple(u + 1 for u in rnd.server.u4)]
