"""Protocol.max_message_bytes: every registered protocol's real messages of a small round fit
the bound it declares, and the bound is tight (exact for fixed-size messages, never more than
twice the real size plus a header); kinds it does not send are bounded by 0."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.protocols import available_protocols, get_protocol
from secemb.protocols.base import BOUNDED_KINDS
from secemb.protocols.wire import HEADER_BYTES
from secemb.randomness import CtrDrbg

M, W, P, M_PRIME, USERS = 40, 5, 3, 6, 3
#: protocol-specific options a small round needs (CoLR's rank must fit the row width)
OPTIONS = {name: {"rank": 2} for name in ("quant8", "ternary", "svd", "colr")}


def _variants() -> list[tuple[str, dict]]:
    out = []
    for name in available_protocols(2):  # the two-server protocols (message_body_bytes)
        proto = get_protocol(name, **OPTIONS.get(name, {}))
        caps = proto.capabilities
        for layout in caps.layouts:
            for relay in (False, True) if caps.relay else (False,):
                out.append((name, {**OPTIONS.get(name, {}), "layout": layout, "relay": relay}))
    return out


VARIANTS = _variants()


def _round(name: str, opts: dict) -> tuple[object, object, dict[tuple[str, int], list[int]]]:
    """One round of USERS users through the roles; lengths of the messages each server
    received (and of server 1's relay answers and aggregate share), by (kind, header party)."""
    proto = get_protocol(name, **opts)
    rc = proto.round_config(1, M, W, P, M_PRIME)
    rng = np.random.default_rng(0)
    table = rng.integers(0, 2**32, (M, W), dtype=np.uint64).astype(rc.dtype)
    s0, s1 = proto.make_server(0), proto.make_server(1)
    s0.begin_round(rc, table)
    s1.begin_round(rc, table.copy())
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    for u in range(USERS):
        user = proto.make_user(rc, _rng=CtrDrbg(bytes([u]) * 16))
        if rc.layout == "full":
            idx = rng.choice(M, size=rc.slots, replace=False)
        else:  # one slot per bucket, -1 where empty
            idx = rc.cuckoo().assign(rng.choice(M, size=M_PRIME, replace=False), rng)[0]
        q0, q1 = user.retrieval_request(idx)
        seen["retrieval_request", 0].append(len(q0))
        seen["retrieval_request", 1].append(len(q1))
        if proto.relay:
            assert s1.handle_retrieval(u, q1) is None
            fwd = s0.handle_retrieval(u, q0)
            seen["relay_keys", 1].append(len(fwd))
            answer = s1.relay_retrieval(u, fwd)
            seen["relay_answer", 1].append(len(answer))
            r0, r1 = s0.complete_retrieval(u, answer), None
        else:
            r0, r1 = s0.handle_retrieval(u, q0), s1.handle_retrieval(u, q1)
        rows = user.retrieval_result(r0, r1)
        grads = np.zeros_like(rows)
        grads[idx >= 0] = rng.integers(0, 2**16, grads[idx >= 0].shape).astype(rc.dtype)
        up0, up1 = user.upload(grads, rng.integers(0, 2**16, P).astype(rc.dtype))
        seen["upload", 0].append(len(up0))
        fwd = s0.handle_upload(u, up0)
        if up1 is not None:
            seen["upload", 1].append(len(up1))
            s1.handle_upload(u, up1)
        if fwd is not None:
            seen["relay_upload", 1].append(len(fwd))
            s1.relay_upload(u, fwd)
    share = s1.aggregate_share()
    seen["aggregate_share", 1].append(len(share))
    s0.combine(share)  # the share is a real one
    return proto, rc, seen


@pytest.mark.parametrize("name,opts", VARIANTS, ids=[f"{n}-{o['layout']}{'-relay' if o['relay'] else ''}" for n, o in VARIANTS])
def test_real_messages_fit_the_declared_bound_and_the_bound_is_tight(name, opts):
    proto, rc, seen = _round(name, opts)
    for kind in BOUNDED_KINDS:
        for party in (0, 1):
            bound = proto.max_message_bytes(kind, rc, party=party, num_users=USERS)
            sizes = seen.get((kind, party), [])
            if not sizes:
                # server 0's aggregate share is never sent, but is a real message too
                assert bound == 0 or (kind, party) == ("aggregate_share", 0), (kind, party, bound)
                continue
            assert max(sizes) <= bound, (kind, party, sizes, bound)
            assert bound < 2 * min(sizes) + HEADER_BYTES, (kind, party, sizes, bound)


@pytest.mark.parametrize("name,opts", VARIANTS, ids=[f"{n}-{o['layout']}{'-relay' if o['relay'] else ''}" for n, o in VARIANTS])
def test_fixed_size_messages_are_bounded_exactly(name, opts):
    proto, rc, seen = _round(name, opts)
    for (kind, party), sizes in seen.items():
        exact = proto.max_message_bytes(kind, rc, party=party, num_users=USERS)
        assert set(sizes) == {exact}, (kind, party, sizes, exact)
    # an aggregate share names the users it covers (all but plaintext's): more users, more bytes
    share = proto.max_message_bytes("aggregate_share", rc, party=1, num_users=USERS)
    grown = proto.max_message_bytes("aggregate_share", rc, party=1, num_users=USERS + 1)
    assert grown == share if name == "plaintext" else grown >= share + 8


def test_bad_arguments_are_refused():
    proto = get_protocol("secemb")
    rc = proto.round_config(0, M, W, P, M_PRIME)
    with pytest.raises(InvalidParameters, match="kind must be one of"):
        proto.max_message_bytes("retrieval_reply", rc, party=0, num_users=1)
    with pytest.raises(InvalidParameters, match="party must be 0 or 1, got 2"):
        proto.max_message_bytes("upload", rc, party=2, num_users=1)
    with pytest.raises(InvalidParameters, match="num_users must be an int >= 0, got -1"):
        proto.max_message_bytes("aggregate_share", rc, party=1, num_users=-1)
