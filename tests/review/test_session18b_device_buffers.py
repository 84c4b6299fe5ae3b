"""Review (session 18b) of the device side's batching (protocols/secemb/user.py): the upload's
correction words written over the batch's concatenation of the rows
(``fss.convert_gen(..., overwrite_betas=True)``) and the requests written as rows of one array
per server (``DPFKeys.to_rows``, ``wire.frame_rows``, ``_request_rows``, ``_relay_rows``).

* The caller's gradient rows are never written: one user's rows, or every user's rows as
  views of one array the caller keeps (the overwrite may only hit the batch's own copy), and
  the messages equal those of each user's own upload.
* Each user's secrets are its own: after a batch of requests each user's key state, slots and
  unmask words are arrays that own their memory (no view of the batch's arrays, which would
  keep the others' secrets reachable from it), its relay seeds and MAC key its own bytes, and
  no two users' secrets share memory.
* ``convert_gen(overwrite_betas=True)`` writes only into the array it is given: a slice of a
  caller's larger array is written in that slice alone.

Regression coverage (passes on the code reviewed)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.randomness import CtrDrbg

from round_setup import begin

M, W, P, MP, USERS = 29, 3, 7, 4, 4


def _users(relay: bool):  # noqa: ANN202 - test helper
    """A round's users after one batch of requests (the same every call; each given a reply's
    sketch seed), and the config."""
    proto, rc, _, _, _, _ = begin(layout="cuckoo", relay=relay, round_id=0, num_items=M, width=W, dense_size=P,
                                  m_prime=MP, seed=9)
    users, idx = [], []
    for u in range(USERS):
        users.append(proto.make_user(rc, _rng=CtrDrbg(bytes([u + 1]) * 16)))
        rng = np.random.default_rng(u)
        idx.append(rc.cuckoo().assign(rng.choice(M, size=MP, replace=False), rng)[0])
    got = type(users[0]).retrieval_requests(users, idx, _rng=CtrDrbg(b"\x05" * 16))
    assert all(isinstance(g, tuple) for g in got)
    for user in users:  # the sketch seed a retrieval reply would carry (verified uploads: no upload before it)
        user._sketch_seed = bytes(16)
    return rc, users


def _secrets(user) -> list[np.ndarray]:  # noqa: ANN001
    st = user._state
    arrays = [st.leaf0, st.leaf1, user._real, user._items, user._unmask]
    if user._seeds is not None:
        arrays += [np.frombuffer(b, np.uint8) for b in (*user._seeds, user._mac_key)]
    return arrays


@pytest.mark.parametrize("relay", [False, True])
def test_each_user_s_secrets_share_no_memory_with_another_s(relay: bool) -> None:
    _, users = _users(relay)
    for u in users:  # its own arrays, no view of a batch array (a disjoint view shares no bytes, yet
        # keeps the whole batch -- the others' secrets -- reachable from this user)
        assert all(x.flags.owndata for x in _secrets(u)[:5])
        assert u._seeds is None or all(type(b) is bytes for b in (*u._seeds, u._mac_key))
    held = [(i, x) for i, u in enumerate(users) for x in _secrets(u)]
    for a, (i, x) in enumerate(held):
        for j, y in held[a + 1 :]:
            assert not np.shares_memory(x, y), (i, j)


@pytest.mark.parametrize("relay", [False, True])
def test_a_batch_upload_never_writes_the_caller_s_rows(relay: bool) -> None:
    rc, users = _users(relay)
    rng = np.random.default_rng(7)
    kept = rng.integers(0, 2**31, (USERS * rc.slots, rc.width)).astype(rc.dtype)  # the caller's one array
    for j, u in enumerate(users):
        kept[j * rc.slots : (j + 1) * rc.slots][~np.asarray(u._real)] = 0
    before = kept.copy()
    grads = [(kept[j * rc.slots : (j + 1) * rc.slots], np.full(P, j, rc.dtype)) for j in range(USERS)]
    batch = type(users[0]).uploads(users, grads)
    assert np.array_equal(kept, before)
    _, alone = _users(relay)  # the same users again: each uploads alone
    for j, u in enumerate(alone):
        rows = kept[j * rc.slots : (j + 1) * rc.slots]
        assert u.upload(rows, grads[j][1]) == batch[j]
    assert np.array_equal(kept, before)


def test_convert_gen_overwrites_only_the_slice_it_is_given() -> None:
    alphas = np.array([3, 17, 8])
    _, _, state = fss.gen_path(alphas, 32, _rng=CtrDrbg(b"\x01" * 16))
    outer = np.arange(5 * 2, dtype=np.uint32).reshape(5, 2) * np.uint32(77)
    before = outer.copy()
    want = fss.convert_gen(state, outer[1:4].copy(), ring_bits=32)
    got = fss.convert_gen(state, outer[1:4], ring_bits=32, overwrite_betas=True)
    assert np.array_equal(got, want) and np.shares_memory(got, outer)
    assert np.array_equal(outer[[0, 4]], before[[0, 4]]) and np.array_equal(outer[1:4], want)
