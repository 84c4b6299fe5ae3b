"""Issue 37: a server role absorbs a batch of uploads (``handle_upload_many``; with relay, server
1's ``relay_upload_many`` and server 0's ``complete_retrieval_many``) with the same result as one
by one -- the same forwards, replies and aggregate, byte for byte -- and a bad item of a batch
refuses only itself: a malformed upload, a user listed twice, a user that did not retrieve, a
forward whose MAC fails.  The batched SecEmb servers work in ranges of users on the backend's
threads (two workers here, so a batch is split)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, ProtocolError, RelayTampered
from secemb.protocols.backends import ThreadBackend
from secemb.protocols.placement import place
from secemb.randomness import CtrDrbg

from round_setup import begin

M, W, P, MP, USERS = 29, 3, 7, 4, 5


def _retrieved(relay: bool, layout: str, batched: bool):
    """Both servers after every user retrieved (the same users, keys and table whatever
    ``batched``), each user's uploads ``(to server 0, to server 1)`` and replies to server 0."""
    proto, rc, _, _, s0, s1 = begin(layout=layout, relay=relay, round_id=0, num_items=M, width=W, dense_size=P,
                                    m_prime=MP, seed=3, backend=ThreadBackend(2))
    users = [proto.make_user(rc, _rng=CtrDrbg(bytes([u + 1]) * 16)) for u in range(USERS)]
    reqs, real = [], []
    for u, user in enumerate(users):
        items = np.sort(np.random.default_rng(10 + u).choice(M, MP, replace=False))
        placed = place(rc, items, np.random.default_rng(40 + u))
        reqs.append(user.retrieval_request(placed.indices))
        real.append(placed.real_pos)
    a1 = s1.handle_retrieval_many([(u, q[1]) for u, q in enumerate(reqs)])
    a0 = s0.handle_retrieval_many([(u, q[0]) for u, q in enumerate(reqs)])
    if relay:
        masked = s1.relay_retrieval_many(list(enumerate(a0)))
        if batched:
            a0 = s0.complete_retrieval_many(list(enumerate(masked)))
        else:
            a0 = [s0.complete_retrieval(u, m) for u, m in enumerate(masked)]
    ups = []
    for u, user in enumerate(users):
        rows = user.retrieval_result(a0[u], a1[u])
        grads = np.zeros_like(rows)
        grads[real[u]] = np.random.default_rng(20 + u).integers(0, 2**32, grads[real[u]].shape, dtype=np.uint64)
        dense = np.random.default_rng(30 + u).integers(0, 2**32, P, dtype=np.uint64).astype(np.uint32)
        ups.append(user.upload(grads, dense))
    return s0, s1, ups, a0


def _upload_one_by_one(s0, s1, ups, relay: bool) -> list[bytes | None]:
    fwds = []
    for u, (up0, up1) in enumerate(ups):
        fwds.append(s0.handle_upload(u, up0))
        if relay:
            s1.relay_upload(u, fwds[-1])
        else:
            s1.handle_upload(u, up1)
    return fwds


@pytest.mark.parametrize(("relay", "layout"), [(True, "cuckoo"), (False, "cuckoo"), (False, "full")])
def test_a_batch_gives_the_bytes_of_one_by_one(relay: bool, layout: str) -> None:
    s0, s1, ups, replies = _retrieved(relay, layout, batched=False)
    fwds = _upload_one_by_one(s0, s1, ups, relay)
    b0, b1, ups_b, replies_b = _retrieved(relay, layout, batched=True)
    assert replies_b == replies  # complete_retrieval_many: the same replies
    fwds_b = b0.handle_upload_many([(u, up[0]) for u, up in enumerate(ups_b)])
    if relay:
        assert b1.relay_upload_many(list(enumerate(fwds_b))) == [None] * USERS
    else:
        assert b1.handle_upload_many([(u, up[1]) for u, up in enumerate(ups_b)]) == [None] * USERS
    assert fwds_b == fwds  # the same forwards (None without relay)
    include = [0, 2, 3, 4]  # user 1 left out at the close: its dense share comes back out
    assert b1.aggregate_share(include) == s1.aggregate_share(include)
    got, want = b0.combine(b1.aggregate_share(include), include), s0.combine(s1.aggregate_share(include), include)
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("relay", [True, False])
def test_a_bad_item_refuses_only_itself(relay: bool) -> None:
    s0, s1, ups, _ = _retrieved(relay, "cuckoo", batched=True)
    broken = bytearray(ups[1][0])
    broken[-1] ^= 1  # the body's length stays right, the round id in the header is wrong
    broken[20:28] = (99).to_bytes(8, "little")
    batch = [(0, ups[0][0]), (1, bytes(broken)), (2, ups[2][0]), (2, ups[2][0]), (77, ups[3][0]), (3, ups[3][0][:-1])]
    out = s0.handle_upload_many(batch)
    assert isinstance(out[1], InvalidMessage) and isinstance(out[5], InvalidMessage)
    assert isinstance(out[3], ProtocolError) and "already uploaded" in str(out[3])  # user 2 listed twice
    assert isinstance(out[4], ProtocolError) and "without retrieving" in str(out[4])
    assert s0.included_users() == [0, 2]
    # the refused users changed nothing: their good uploads are taken afterwards
    again = s0.handle_upload_many([(1, ups[1][0]), (3, ups[3][0]), (4, ups[4][0])])
    assert s0.included_users() == [0, 1, 2, 3, 4]
    if relay:
        fwds = {0: out[0], 2: out[2], 1: again[0], 3: again[1], 4: again[2]}
        tampered = bytearray(fwds[3])
        tampered[-40] ^= 1  # a correction word altered: the device's MAC fails
        got = s1.relay_upload_many([(0, fwds[0]), (3, bytes(tampered)), (2, fwds[2]), (0, fwds[0])])
        assert got[0] is None and got[2] is None
        assert isinstance(got[1], RelayTampered) and isinstance(got[3], ProtocolError)
        assert s1.included_users() == [0, 2]
        assert s1.relay_upload_many([(3, fwds[3]), (1, fwds[1]), (4, fwds[4])]) == [None] * 3
        assert s1.included_users() == [0, 1, 2, 3, 4]
        with pytest.raises(ProtocolError, match="upload to server 0 only"):
            s1.handle_upload(5, ups[0][0])
    include = list(range(USERS))
    ref0, ref1, ups_r, _ = _retrieved(relay, "cuckoo", batched=False)
    _upload_one_by_one(ref0, ref1, ups_r, relay)
    if not relay:
        s1.handle_upload_many([(u, up[1]) for u, up in enumerate(ups)])
    assert s1.aggregate_share(include) == ref1.aggregate_share(include)


class _FailingFile:
    """A spill file whose ``fail_at``-th write (counting from 1) fails, like a full disk."""

    def __init__(self, inner, fail_at: int) -> None:
        self.inner, self.fail_at, self.writes = inner, fail_at, 0

    def write(self, data):
        self.writes += 1
        if self.writes == self.fail_at:
            raise OSError("disk full")
        return self.inner.write(data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_spill_that_fails_absorbs_nothing() -> None:
    s0, _, ups, _ = _retrieved(False, "cuckoo", batched=True)
    spilled = s0._spilled
    spilled.put(999, np.zeros(1, np.uint32))  # creates the file
    real = spilled._file
    spilled._file = _FailingFile(real, fail_at=1)  # the batch's shares (small: written together) cannot be
    with pytest.raises(OSError, match="disk full"):
        s0.handle_upload_many([(u, up[0]) for u, up in enumerate(ups)])
    assert s0.included_users() == [] and len(spilled) == 1  # nothing of the batch absorbed or recorded
    spilled._file = real
    assert s0.handle_upload_many([(u, up[0]) for u, up in enumerate(ups)]) == [None] * USERS
    assert s0.included_users() == list(range(USERS))


def test_put_many_joins_small_arrays_writes_large_ones_alone_and_is_all_or_nothing() -> None:
    from secemb.protocols.spill import _JOIN_BYTES, SpilledShares

    rng = np.random.default_rng(5)
    small = [rng.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32) for _ in range(3)]
    big = rng.integers(0, 2**63, _JOIN_BYTES // 8 + 3, dtype=np.uint64)  # over the bound: written alone
    items = [(1, small[0]), (2, big), (3, small[1]), (4, small[2].reshape(10, 100))]
    spill = SpilledShares()
    spill.put(0, small[2])
    real = spill._file
    spill._file = _FailingFile(real, fail_at=2)  # writes: small[0]; big (fails)
    with pytest.raises(OSError, match="disk full"):
        spill.put_many(items)
    assert len(spill) == 1 and np.array_equal(spill.get(0), small[2])  # nothing of the batch kept
    spill._file = _FailingFile(real, fail_at=0)  # no failure; count the writes
    spill.put_many(items)
    assert spill._file.writes == 3  # small[0] alone (the big one follows), the big one, small[1] + small[2]
    for key, array in [(0, small[2])] + items:
        got = spill.get(key)
        assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array)
