"""Session 22 (finding F3 of the red team): redundant Shamir shares are checked, and one party's
wrong shares are found and left out (:class:`secemb.secagg.shamir.ShareCheck`,
:func:`secemb.secagg.shamir.combine_robust`; the server's use of it:
``tests/secagg/test_secagg_active.py::test_the_server_finds_and_leaves_out_one_clients_wrong_unmask_share``).
Shares are made here by evaluating polynomials written out in the test, not by the code under test."""

from __future__ import annotations

import random


import pytest

from secemb.errors import InvalidMessage
from secemb.randomness import CtrDrbg
from secemb.secagg.shamir import PRIME, ShareCheck, combine_robust, lagrange_at_zero

_GEN = random.Random(22)  # the test's polynomials (public test data, not secrets)


def _shares(secrets: list[int], threshold: int, xs: list[int]) -> list[list[int]]:
    """``out[i][k] = f_k(xs[i])`` for ``f_k(x) = secrets[k] + a_1 x + ... + a_{t-1} x^{t-1}``."""
    polys = [[s] + [_GEN.randrange(PRIME) for _ in range(threshold - 1)] for s in secrets]
    return [[sum(c * pow(x, e, PRIME) for e, c in enumerate(poly)) % PRIME for poly in polys] for x in xs]


SECRETS = [7, 2**128 - 1, 123456789, 0]


@pytest.mark.parametrize(("t", "m"), [(2, 3), (3, 5), (6, 11), (51, 100)])
def test_honest_shares_pass_and_give_the_secrets(t: int, m: int) -> None:
    xs = list(range(1, m + 1))
    sh = _shares(SECRETS, t, xs)
    for seed in (b"a", b"b"):
        check = ShareCheck(xs, t, _rng=CtrDrbg(seed))
        assert all(check.consistent([row[k] for row in sh]) for k in range(len(SECRETS)))
    assert combine_robust(xs, sh, t) == (SECRETS, None)


@pytest.mark.parametrize("culprit", [0, 3, 6])
def test_one_partys_crafted_share_is_found_and_left_out(culprit: int) -> None:
    """The red team's attack: a share shifted so that the first ``t`` shares reconstruct the
    secret plus 1 (in range, so no range check sees it)."""
    t, xs = 4, [1, 2, 3, 4, 5, 6, 7]
    sh = _shares(SECRETS, t, xs)
    first = xs[:t]
    if culprit < t:  # shift its share by 1 / lambda_culprit: the first-t reconstruction moves by 1
        lam = lagrange_at_zero(first)[culprit]
        sh[culprit][1] = (sh[culprit][1] + pow(lam, -1, PRIME)) % PRIME
        naive = sum(lv * sh[j][1] for j, lv in enumerate(lagrange_at_zero(first))) % PRIME
        assert naive == SECRETS[1] + 1  # what the unchecked server opened: in range, no range check sees it
    else:
        sh[culprit][2] = (sh[culprit][2] + 5) % PRIME
    check = ShareCheck(xs, t)
    assert not all(check.consistent([row[k] for row in sh]) for k in range(len(SECRETS)))
    assert combine_robust(xs, sh, t) == (SECRETS, culprit)


def test_two_wrong_parties_are_refused_not_mended() -> None:
    t, xs = 3, [1, 2, 3, 4, 5, 6]
    sh = _shares(SECRETS, t, xs)
    sh[1][0] = (sh[1][0] + 1) % PRIME
    sh[4][3] = (sh[4][3] + 1) % PRIME
    with pytest.raises(InvalidMessage, match="more than one party"):
        combine_robust(xs, sh, t)


def test_one_spare_share_detects_but_cannot_tell_whose() -> None:
    t, xs = 3, [1, 2, 3, 4]
    sh = _shares(SECRETS, t, xs)
    sh[2][0] = (sh[2][0] + 1) % PRIME
    with pytest.raises(InvalidMessage, match="too few"):
        combine_robust(xs, sh, t)


def test_without_a_spare_share_nothing_is_checked() -> None:
    """The documented limit: exactly ``t`` shares lie on some polynomial of degree below ``t``."""
    t, xs = 3, [2, 5, 9]
    sh = _shares(SECRETS, t, xs)
    sh[0][0] = (sh[0][0] + 1) % PRIME
    assert ShareCheck(xs, t).consistent([row[0] for row in sh])
    secrets, bad = combine_robust(xs, sh, t)
    assert bad is None and secrets[0] != SECRETS[0] and secrets[1:] == SECRETS[1:]

