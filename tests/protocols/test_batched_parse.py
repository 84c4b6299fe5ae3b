"""Issue 37: a server parses a batch's retrieval requests in ranges on the backend's threads
into one key batch and evaluates it without concatenating the users' keys again (a view of
it where the evaluated users are consecutive, a copy otherwise).  A refused request in the
batch -- first, in the middle -- changes no other user's reply: the replies (and, with relay,
server 1's masked answers) are those of a batch without it, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage
from secemb.protocols.backends import ThreadBackend
from secemb.protocols.placement import place
from secemb.randomness import CtrDrbg

from round_setup import begin

M, W, P, MP, USERS = 29, 3, 2, 4, 5


def _servers(relay: bool, layout: str):
    proto, rc, _, _, s0, s1 = begin(layout=layout, relay=relay, round_id=0, num_items=M, width=W, dense_size=P,
                                    m_prime=MP, seed=3, backend=ThreadBackend(2))
    reqs = []
    for u in range(USERS):
        user = proto.make_user(rc, _rng=CtrDrbg(bytes([u + 1]) * 16))
        items = np.sort(np.random.default_rng(10 + u).choice(M, MP, replace=False))
        reqs.append(user.retrieval_request(place(rc, items, np.random.default_rng(40 + u)).indices))
    return s0, s1, reqs


def _replies(relay: bool, layout: str, bad: int | None) -> dict[int, bytes | Exception]:
    """Every user's reply(ies) from a round in which user ``bad`` (if any) sends a malformed
    request to server 0 (relay: the users' roots reach server 1 first, as always)."""
    s0, s1, reqs = _servers(relay, layout)
    a1 = s1.handle_retrieval_many([(u, q[1]) for u, q in enumerate(reqs)])
    batch = [(u, q[0][:-1] if u == bad else q[0]) for u, q in enumerate(reqs)]
    a0 = s0.handle_retrieval_many(batch)
    if not relay:
        return {u: a if isinstance(a, Exception) else a + (a1[u] or b"") for u, a in enumerate(a0)}
    good = [u for u in range(USERS) if not isinstance(a0[u], Exception)]
    masked = s1.relay_retrieval_many([(u, a0[u]) for u in good])
    done = s0.complete_retrieval_many(list(zip(good, masked, strict=True)))
    return {u: a0[u] if u not in good else done[good.index(u)] for u in range(USERS)}


@pytest.mark.parametrize(("relay", "layout"), [(True, "cuckoo"), (False, "cuckoo"), (False, "full")])
@pytest.mark.parametrize("bad", [0, 2])
def test_a_refused_request_changes_no_other_reply(relay: bool, layout: str, bad: int) -> None:
    whole = _replies(relay, layout, None)
    with_bad = _replies(relay, layout, bad)
    assert isinstance(with_bad.pop(bad), InvalidMessage)
    assert all(isinstance(r, bytes) for r in whole.values())
    assert with_bad == {u: r for u, r in whole.items() if u != bad}


def test_server_1_refuses_only_the_request_whose_root_bit_is_wrong() -> None:
    s0, s1, reqs = _servers(True, "cuckoo")
    bad = bytearray(reqs[2][1])
    bad[32 + 16] ^= 1  # the second root's control bit (after the 32-byte header): not server 1's
    batch = [(u, bytes(bad) if u == 2 else q[1]) for u, q in enumerate(reqs)]
    batch.append((0, reqs[0][1]))  # user 0 again: refused as one that already retrieved
    out = s1.handle_retrieval_many(batch)
    assert isinstance(out[2], InvalidMessage) and "root control bits" in str(out[2])
    assert "already retrieved" in str(out[-1])
    assert [o for u, o in enumerate(out[:-1]) if u != 2] == [None] * (USERS - 1)
    assert s1.handle_retrieval_many([(2, reqs[2][1])]) == [None]  # its refusal changed nothing
    fwd = s0.handle_retrieval_many([(u, q[0]) for u, q in enumerate(reqs)])
    assert all(isinstance(a, bytes) for a in s1.relay_retrieval_many(list(enumerate(fwd))))
