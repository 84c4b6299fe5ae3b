"""Issue 34, session 34 (helper P): server 0's bound proof intake takes a batch whose every item
passes in one pass over the batch (:meth:`SecEmbServer._proof_bodies`), and a batch's spilled dense
shares come back as one array (:meth:`SpilledShares.get_many`).

The references are the per-item paths they stand for: the bodies kept are each message's body (what
the per-item path keeps); a batch with any refused item takes the per-item path, whose errors and
kept proofs are those of handling each message in turn; ``get_many`` equals ``get`` of each key."""

from __future__ import annotations

import numpy as np
import pytest
from test_bounded_payloads import Round

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.framing import HEADER_BYTES
from secemb.fss import rangeproof
from secemb.protocols.secemb import server as server_module
from secemb.protocols.secemb.server import NAME
from secemb.protocols.spill import SpilledShares
from secemb.protocols.wire import frame


def _uploaded(n: int) -> tuple[Round, list[int], list[bytes]]:
    """A cuckoo round (relay) in which devices ``0..n-1`` uploaded, and each one's proof (not sent)."""
    rnd = Round("cuckoo", True)
    users = list(range(n))
    for uid in users:
        rnd.retrieve(uid)
        rnd.upload(uid, *rnd.honest_upload(uid))
    return rnd, users, [rnd.users[u].bound_proof(rnd.s0.challenge(u)) for u in users]


def test_a_batch_of_good_proofs_is_kept_whole_without_the_per_item_path(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd, users, proofs = _uploaded(5)

    def per_item(*args: object) -> None:
        raise AssertionError("a batch whose every item passes is taken in one pass")

    monkeypatch.setattr(server_module, "sift", per_item)
    order = [3, 0, 4, 1, 2]
    assert rnd.s0.handle_proof_many([(u, proofs[u]) for u in order]) == [None] * 5
    assert rnd.s0._proofs == {u: proofs[u][HEADER_BYTES:] for u in users}  # each message's body, as bytes
    assert all(type(b) is bytes for b in rnd.s0._proofs.values())
    monkeypatch.undo()
    rnd.close_exact(set())


def _bad_items(rnd: Round, proofs: list[bytes]) -> list[tuple[object, object]]:
    """Items a batch must refuse, each on its own: a user that did not upload, an id out of range or
    not an int, a truncated message, one of another round, one with an element of 2^64 - 1, text."""
    good = proofs[2]
    elem = HEADER_BYTES + rangeproof.SEED_BYTES + rangeproof.PART_BYTES
    return [(99, good), (2**64, good), (True, good), (2, good[:-1]),
            (2, frame(NAME, "bound_proof", 0, rnd.cfg.round_id + 1, good[HEADER_BYTES:])),
            (2, good[:elem] + (2**64 - 1).to_bytes(8, "little") + good[elem + 8 :]), (2, "text")]


@pytest.mark.parametrize("bad", range(7))
def test_a_batch_with_a_refused_item_is_the_per_item_path(bad: int) -> None:
    """The batch [0, bad item, 1, 0 again]: devices 0 and 1 kept, the bad item refused with the error
    handling it alone gives (type and text), the repeated device refused as a second proof; the same
    outcome as the one-at-a-time path on a twin round."""
    rnd, users, proofs = _uploaded(3)
    item = _bad_items(rnd, proofs)[bad]
    with pytest.raises((InvalidMessage, InvalidParameters, ProtocolError)) as alone:
        rnd.s0.handle_proof(*item)  # type: ignore[arg-type]
    assert rnd.s0._proofs == {}  # refused: nothing kept
    got = rnd.s0.handle_proof_many([(0, proofs[0]), item, (1, proofs[1]), (0, proofs[0])])  # type: ignore[list-item]
    assert got[0] is None and got[2] is None
    assert type(got[1]) is type(alone.value) and str(got[1]) == str(alone.value)
    assert isinstance(got[3], ProtocolError) and "already sent its bound proof" in str(got[3])
    assert rnd.s0._proofs == {0: proofs[0][HEADER_BYTES:], 1: proofs[1][HEADER_BYTES:]}


def test_a_batch_after_kept_proofs_refuses_the_kept_users_again() -> None:
    rnd, users, proofs = _uploaded(3)
    assert rnd.s0.handle_proof_many([(0, proofs[0])]) == [None]
    got = rnd.s0.handle_proof_many([(1, proofs[1]), (0, proofs[0]), (2, proofs[2])])
    assert got[0] is None and got[2] is None and isinstance(got[1], ProtocolError)
    assert sorted(rnd.s0._proofs) == users


def test_server_0s_dense_shares_of_a_batch_are_each_users_share() -> None:
    rnd, users, _ = _uploaded(4)
    order = [2, 0, 3, 1, 2]
    shares = rnd.s0._dense_shares(order)
    assert len(shares) == len(order)
    for u, share in zip(order, shares, strict=True):
        np.testing.assert_array_equal(share, rnd.s0._spilled.get(u))  # the per-user read
        np.testing.assert_array_equal(share + rnd.s1._dense_share(u), rnd.honest_upload(u)[1])
    assert rnd.s0._dense_shares([]) == []


def test_get_many_is_get_of_each_key() -> None:
    spill = SpilledShares()
    small = {k: np.arange(7, dtype=np.uint32) * (k + 1) for k in range(6)}
    spill.put_many(list(small.items()))  # joined, end to end in the file
    big = np.zeros(300_000, np.uint32)  # over the join size: written without its zero blocks
    big[5] = 1
    big[-1] = 7
    spill.put(10, big)
    spill.put(11, np.full(300_000, 3, np.uint32))
    spill.put(3, np.full(7, 9, np.uint32))  # a later put of key 3, elsewhere in the file
    for keys in ([0, 1, 2], [4, 3, 5, 0], [2, 2], [5], []):
        got = spill.get_many(keys, np.dtype(np.uint32), (7,))
        assert got.shape == (len(keys), 7) and got.dtype == np.uint32
        for row, k in zip(got, keys, strict=True):
            np.testing.assert_array_equal(row, spill.get(k))
    np.testing.assert_array_equal(spill.get(3), np.full(7, 9, np.uint32))
    got = spill.get_many([11, 10, 11], np.dtype(np.uint32), (300_000,))
    np.testing.assert_array_equal(got[0], np.full(300_000, 3, np.uint32))
    np.testing.assert_array_equal(got[1], big)
    np.testing.assert_array_equal(got[2], got[0])
    with pytest.raises(KeyError):
        spill.get_many([0, 42], np.dtype(np.uint32), (7,))
    for dtype, shape in ((np.uint64, (7,)), (np.uint32, (6,)), (np.uint32, (7, 1))):
        with pytest.raises(ValueError, match="not all"):
            spill.get_many([0, 1], np.dtype(dtype), shape)
    spill.close()
