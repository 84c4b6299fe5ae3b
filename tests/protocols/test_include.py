"""A server role aggregates a subset of its uploaders (``include=``): the result equals, bit for
bit, that of a round in which only those users uploaded (the others retrieved and fell
silent) -- for every protocol the server runs.  This is what lets a server leave out a user
whose upload reached only one server without replaying the round."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import ProtocolError
from secemb.protocols import get_protocol
from secemb.protocols.placement import place
from secemb.randomness import CtrDrbg
from secemb.ring import FixedPoint

M, W, P, MP, USERS = 23, 3, 2, 4, 4

CASES = [
    ("secemb", {}),
    ("secemb", {"layout": "cuckoo"}),
    ("secemb", {"relay": True}),
    ("plaintext", {}),
    ("secfedrec", {}),
    ("secemb-init", {}),
    ("secemb-rowenc", {}),
    ("grec", {}),
    ("quant8", {}),
    ("ternary", {}),
    ("svd", {"rank": 2}),
    ("colr", {"rank": 2}),
]


def _round(name: str, opts: dict, uploaders: set[int], include: list[int] | None):
    """One round of USERS users (all retrieve, ``uploaders`` upload); server 1's share and
    server 0's combined sums over ``include``."""
    proto = get_protocol(name, **opts)
    rc = proto.round_config(0, M, W, P, MP)
    rng = np.random.default_rng(1)
    table = FixedPoint(32, 16).encode(rng.normal(0, 0.1, (M, W)))
    s0, s1 = proto.make_server(0), proto.make_server(1)
    for s in (s0, s1):
        s.begin_round(rc, table)
    for u in range(USERS):
        user = proto.make_user(rc, _rng=CtrDrbg(bytes([u + 1]) * 16))
        items = np.random.default_rng(10 + u).choice(M, MP, replace=False)
        slots = place(rc, np.sort(items), np.random.default_rng(40 + u)).indices
        q0, q1 = user.retrieval_request(slots)
        if proto.relay:
            assert s1.handle_retrieval(u, q1) is None
            rows = user.retrieval_result(s0.complete_retrieval(u, s1.relay_retrieval(u, s0.handle_retrieval(u, q0))), None)
        else:
            rows = user.retrieval_result(s0.handle_retrieval(u, q0), s1.handle_retrieval(u, q1))
        if u not in uploaders:
            continue
        grads = FixedPoint(32, 16).encode(np.random.default_rng(20 + u).normal(0, 0.01, rows.shape))
        grads[np.asarray(slots) < 0] = 0
        dense = FixedPoint(32, 16).encode(np.random.default_rng(30 + u).normal(0, 0.01, P))
        up0, up1 = user.upload(grads, dense)
        fwd = s0.handle_upload(u, up0)
        if proto.relay:
            s1.relay_upload(u, fwd)
        else:
            s1.handle_upload(u, up1)
    share = s1.aggregate_share(include=include)
    return share, s0.combine(share, include=include)


@pytest.mark.parametrize("name,opts", CASES, ids=[f"{n}-{'-'.join(map(str, o.values())) or 'full'}" for n, o in CASES])
def test_subset_aggregate_equals_a_round_where_only_the_subset_uploaded(name, opts):
    everyone = set(range(USERS))
    share, (sparse, dense) = _round(name, opts, everyone, [0, 2])
    ref_share, (ref_sparse, ref_dense) = _round(name, opts, {0, 2}, None)
    assert share == ref_share
    assert np.array_equal(sparse, ref_sparse) and np.array_equal(dense, ref_dense)
    # the left-out users did contribute: the aggregate over everyone differs
    _, (all_sparse, all_dense) = _round(name, opts, everyone, None)
    assert not (np.array_equal(all_sparse, sparse) and np.array_equal(all_dense, dense))


@pytest.mark.parametrize("name", ["secemb", "plaintext", "secfedrec", "secemb-rowenc"])
def test_include_of_a_user_that_did_not_upload_is_refused(name):
    with pytest.raises(ProtocolError, match=r"user\(s\) \[3\] did not upload"):
        _round(name, {}, {0, 1, 2}, [0, 3])
