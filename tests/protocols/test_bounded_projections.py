"""The servers' projections of the bound check (secemb/protocols/secemb/server.py,
``_bound_projections``): the two servers' projections of a device's vectors add up to the
projections of what it uploaded -- its rows and dense vector, projected here by
:func:`secemb.fss.projections.project_reference` (numpy's integer matmul on the reference
expansion, not the compiled loop the servers use) -- whether a server's payload shares come from
the payload sums its retrieval's walk kept, from a walk of the keys (sums dropped, as the gpu
backend's walk keeps none), or from both in one call.  In the full layout what it uploaded is
projected per table row (session 31): its rows placed at its slots' items, here by ``np.add.at``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_bounded_payloads import LAYOUTS, M, W, Round

from secemb.fss.projections import project_reference
from secemb.protocols.secemb.bounds import ROWS


@pytest.mark.parametrize(("layout", "relay"), LAYOUTS)
def test_the_two_servers_projections_add_up_to_the_uploads_projections(layout: str, relay: bool) -> None:
    rnd = Round(layout, relay)
    users = list(range(6))
    uploads = {}
    for uid in users:
        rnd.retrieve(uid)
        uploads[uid] = rnd.honest_upload(uid)
        rnd.upload(uid, *uploads[uid])
    challenges = [rnd.s0.challenge(u) for u in users]
    assert len(set(challenges)) == len(users)  # one handle_upload call each: a challenge each
    challenges[2] = challenges[4] = challenges[0]  # and some shared, as a batch's are
    if layout == "full":  # each table row's sum of the rows uploaded for it
        for u in users:
            placed = np.zeros((M, W), np.uint32)
            np.add.at(placed, rnd.slots[u], uploads[u][0])
            uploads[u] = (placed, uploads[u][1])
    expected = np.stack([project_reference(c, np.concatenate([rows.reshape(-1), dense])[None], ROWS)[0]
                         for c, (rows, dense) in (zip(challenges, (uploads[u] for u in users), strict=True))])
    kept = [s._bound_projections(users, challenges) for s in (rnd.s0, rnd.s1)]
    np.testing.assert_array_equal(kept[0] + kept[1], expected)
    for server, before in zip((rnd.s0, rnd.s1), kept, strict=True):
        for u in (1, 2, 5):  # walked here, the others from the kept sums, in one call
            server._absorbed[u] = dataclasses.replace(server._absorbed[u], sums=None)
        np.testing.assert_array_equal(server._bound_projections(users, challenges), before)
    assert rnd.s0._bound_projections([], []).shape == (0, ROWS)
