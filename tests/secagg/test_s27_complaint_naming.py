"""Complaints that leave a secret short name its owner (session 27, helper H; red team G's S27-G2).

A client of U4 that sends no share of a peer's secret complains about it (``SecAggServer.complaints``:
the peer's encrypted shares to it did not open).  Where U4 (less the holders found lying) has at
least ``threshold`` clients and a secret still has fewer than ``threshold`` shares, the complaints
alone left it short: the abort names its owner in ``aborting_dropouts`` (the list ``secemb serve``
counts at its door).  Otherwise -- enough shares, or too few clients to reach ``threshold`` even
without the complaints -- nobody is named for complaints.

The server sees a complaint only as an unmask message without the peer's share: an owner that
spoiled its ciphertexts (``deal``), a server that altered them on the way (``relay``) and a
colluding client that leaves the share out give the same bytes.  The relayed flips below therefore
stand for colluders' false complaints too: how many it takes to name an honest owner is the bound
docs/secagg.md states ("Shares that do not open"), more than ``|U4| - threshold``.  Expected sums are
numpy's (:meth:`Round.want`), expected names the clients the test chose, never the code's.
"""

from __future__ import annotations

import numpy as np
import pytest
from secagg_rounds import Hook, Round, drawn, move_unmask_share
from share_records import flip_tag

from secemb.secagg import SecAggAborted, SecAggConfig, default_threshold

# (signed, sparse): an unsigned dense round, a signed dense one, a signed sparse one (SFSL's)
KINDS = [(False, False), (True, False), (True, True)]
KIND_IDS = ["unsigned", "signed", "signed-sparse"]


def _round(n: int, kind: tuple[bool, bool], threshold: int | None = None) -> Round:
    signed, sparse = kind
    t = default_threshold(n) if threshold is None else threshold
    cfg = SecAggConfig(length=6, threshold=t, width=2, round_id=27, signed=signed, sparse=sparse)
    return drawn(cfg, n, 2700 + n)


def _spoiled(rnd: Round, owner: int, peers: list[int], *, by: str) -> dict[str, Hook]:
    """The hooks of :meth:`Round.play` under which ``owner``'s encrypted shares to each of ``peers``
    do not open: flipped by ``owner`` in its shares message (``by="deal"``) or on the way, in
    each peer's relayed message (``by="relay"``: a server's doing, or the same complaints as
    colluding peers' false ones)."""
    signed = rnd.cfg.signed
    if by == "deal":
        def deal(u: int, msg: bytes) -> bytes:
            for v in peers if u == owner else ():
                msg = flip_tag(msg, v, signed)
            return msg
        return {"deal": deal}
    return {"relay": lambda u, msg: flip_tag(msg, owner, signed) if u in peers else msg}


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_an_honest_round_names_nobody_and_its_sum_is_exact(kind: tuple[bool, bool]) -> None:
    for dropped in ((), (4,)):
        rnd = _round(5, kind)
        rnd.play(dropped=dropped)
        assert np.array_equal(rnd.server.result(), rnd.want())
        assert (rnd.server.aborting_dropouts, rnd.server.complaints, rnd.server.cheaters) == ([], {}, [])


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("n", [4, 5, 6, 7])
@pytest.mark.parametrize("owner_drops", [False, True], ids=["seed", "mask-key"])
def test_at_most_u4_minus_threshold_complaints_name_nobody_and_the_round_commits(
        kind: tuple[bool, bool], n: int, owner_drops: bool) -> None:
    """Client 0's shares do not open for ``|U4| - threshold`` peers (the last ones; U4 is every
    client, less client 0 where it drops after its shares): its secret (its seed, or its mask key
    where it dropped) keeps exactly ``threshold`` shares, the sum is exact and nobody is named;
    the complaints are recorded for the operator."""
    rnd = _round(n, kind)
    u4 = n - 1 if owner_drops else n
    peers = list(range(n - (u4 - rnd.cfg.threshold), n))
    rnd.play(**_spoiled(rnd, 0, peers, by="relay"), dropped=(0,) if owner_drops else ())
    assert np.array_equal(rnd.server.result(), rnd.want())
    assert rnd.server.aborting_dropouts == [] and rnd.server.cheaters == []
    assert rnd.server.complaints == {v: [0] for v in peers}


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("n", [4, 5, 6, 7])
@pytest.mark.parametrize("owner_drops", [False, True], ids=["seed", "mask-key"])
@pytest.mark.parametrize("by", ["deal", "relay"])
def test_one_complaint_more_aborts_naming_the_owner(kind: tuple[bool, bool], n: int, owner_drops: bool,
                                                     by: str) -> None:
    """The same with ``|U4| - threshold + 1`` peers: the secret has ``threshold - 1`` shares and
    the abort names client 0 -- a spoiling owner (``deal``, S27-G2) as well as an honest one whose
    ciphertexts the server altered or whose peers complained falsely (``relay``): the bound.  With
    every client in U4 that is ``n - threshold + 1`` complainers, ``threshold`` for odd ``n`` (more
    colluders than the model allows) and ``threshold - 1`` for even ``n`` (within it)."""
    rnd = _round(n, kind)
    t = rnd.cfg.threshold
    u4 = n - 1 if owner_drops else n
    peers = list(range(n - (u4 - t + 1), n))
    if not owner_drops:  # the docstring's count, from n alone
        assert len(peers) == (t if n % 2 == 1 else t - 1)
    rnd.play(**_spoiled(rnd, 0, peers, by=by), dropped=(0,) if owner_drops else ())
    secret = "mask key" if owner_drops else "self-mask seed"
    reason = (rf"Unmasking: {t - 1} shares of the {secret} of client 0, threshold {t} \(the other {len(peers)} "
              r"unmask messages leave it out: .*\); clients \[0\] named \(the complaints against them")
    for _ in range(2):  # and every later call raises the same, with the same names
        with pytest.raises(SecAggAborted, match=reason) as aborted:
            rnd.server.result()
        assert aborted.value.aborting_dropouts == (0,)
    assert rnd.server.aborting_dropouts == [0] and rnd.server.cheaters == []
    assert rnd.server.complaints == {v: [0] for v in peers}


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_two_spoiling_owners_are_both_named(kind: tuple[bool, bool]) -> None:
    """Seven clients (threshold 4): clients 0 and 1 each spoil their shares to clients 3-6 (more
    than ``|U4| - threshold`` = 3): both seeds are short and the abort names both, not only the
    first short secret's owner."""
    rnd = _round(7, kind)
    signed = rnd.cfg.signed
    rnd.play(deal=lambda u, msg: _flip_all(msg, [3, 4, 5, 6], signed) if u in (0, 1) else msg)
    with pytest.raises(SecAggAborted, match=r"3 shares of the self-mask seed of client 0, threshold 4 .*; 1 more "
                                            r"secret\(s\) short; clients \[0, 1\] named") as aborted:
        rnd.server.result()
    assert aborted.value.aborting_dropouts == (0, 1)
    assert rnd.server.complaints == {v: [0, 1] for v in (3, 4, 5, 6)}


def _flip_all(msg: bytes, peers: list[int], signed: bool) -> bytes:
    for v in peers:
        msg = flip_tag(msg, v, signed)
    return msg


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_complaints_in_a_round_aborting_for_too_few_unmask_messages_name_nobody(kind: tuple[bool, bool]) -> None:
    """Five clients (threshold 3): client 1 complains about client 0, and clients 2-4 send no unmask
    message: U4 is two clients, the round aborts for the threshold as before, nobody named."""
    rnd = _round(5, kind)
    rnd.play(**_spoiled(rnd, 0, [1], by="relay"), silent=(2, 3, 4))
    with pytest.raises(SecAggAborted, match="Unmasking: 2 clients left, threshold 3") as aborted:
        rnd.server.result()
    assert aborted.value.aborting_dropouts == () and rnd.server.aborting_dropouts == []
    assert rnd.server.complaints == {1: [0]}


@pytest.mark.parametrize("sparse", [False, True], ids=["signed", "signed-sparse"])
def test_a_complaint_where_the_holders_found_lying_left_too_few_names_nobody_but_the_liars(sparse: bool) -> None:
    """Seven clients (threshold 4), signed: clients 3 and 4 send no unmask message, clients 5 and 6
    lie about their share of client 2's seed (named, all their shares left out): three honest
    clients of U4 are left, below the threshold with or without client 1's complaint about client
    0.  The round aborts as before ("besides those of clients [5, 6] (found lying)"), the liars are
    the cheaters, and client 0 is not named for the complaint."""
    rnd = _round(7, (True, sparse))
    lie: Hook = lambda u, msg: move_unmask_share(msg, 1, 2, 1) if u in (5, 6) else msg  # noqa: E731
    rnd.play(**_spoiled(rnd, 0, [1], by="relay"), unmask=lie, silent=(3, 4))
    with pytest.raises(SecAggAborted, match=r"besides those of clients \[5, 6\] \(found lying\), threshold 4") as out:
        rnd.server.result()
    assert out.value.aborting_dropouts == () and rnd.server.aborting_dropouts == []
    assert rnd.server.cheaters == [5, 6] and rnd.server.complaints == {1: [0]}
