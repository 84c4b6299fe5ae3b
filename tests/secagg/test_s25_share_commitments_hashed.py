"""Session 25 (helper B, issue 34): a signed round's :meth:`SecAggServer.result` checks every unmask
share (about ``n^2``) against its dealer's commitment; it now hashes them in one loop over a SHA-256
state that has taken their common prefix instead of one :func:`share_commitment` call each.  The
test holds the lies it finds to :func:`share_commitment` called once per share (whose layout
tests/review/test_session24_redteam_commitments.py checks against hashlib)."""

from __future__ import annotations

import copy

import numpy as np
from secagg_rounds import drawn, move_unmask_share

from secemb.secagg import SecAggConfig
from secemb.secagg.client import share_commitment


def test_the_lies_found_are_those_share_commitment_finds_one_by_one() -> None:
    """Twelve clients, threshold 7, clients 10 and 11 dropped (their mask keys' shares are in the
    unmask messages): client 2 moves its share of client 10's key, client 4 its share of client 6's
    seed, client 5 both one of client 11's key and one of client 0's seed.  The server's lies are
    those :func:`share_commitment` finds called once per share against the dealt commitments,
    each holder's first; ``result()`` names exactly those holders for exactly those shares, and
    the sum from the seven honest holders' shares is numpy's."""
    cfg = SecAggConfig(length=6, threshold=7, width=2, round_id=25, signed=True)
    rnd = drawn(cfg, 12, 5)
    moves = {2: [(0, 10)], 4: [(1, 6)], 5: [(0, 11), (1, 0)]}

    def lie(u: int, msg: bytes) -> bytes:
        for which, owner in moves.get(u, []):
            msg = move_unmask_share(msg, which, owner, 1)
        return msg

    rnd.play(dropped=(10, 11), unmask=lie)
    server = rnd.server
    want: dict[int, tuple[int, int]] = {}
    for h in sorted(server._unmask):
        for which in (0, 1):
            for v, y in server._unmask[h][which].items():
                if share_commitment(cfg, v, h, which, y) != server._dealt[v][h][16 * which :][:16]:
                    want.setdefault(h, (v, which))
    assert want == {2: (10, 0), 4: (6, 1), 5: (11, 0)}
    probe = copy.deepcopy(server)
    probe.u4 = sorted(probe._unmask)
    assert probe._lies() == want
    assert np.array_equal(server.result(), rnd.want())
    assert server.cheaters == [2, 4, 5]
    for h, (v, which) in want.items():
        kind = ("mask key", "self-mask seed")[which]
        assert server.cheated[h].startswith(f"sent a share of the {kind} of client {v} other than the one client {v} "
                                            "dealt it")
