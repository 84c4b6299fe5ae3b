"""Session 32, helper U: the bound's bookkeeping at a server -- a batch's spilled dense shares read
back together (:meth:`SpilledShares.get_many`, one read a run of small shares), the proof contexts
of a batch made together (:func:`bounds.contexts`).  Expected values are written out here (the
arrays put, the context's bytes as its docstring defines them), not computed by the code under
test."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from secemb.protocols.secemb.bounds import context, contexts
from secemb.protocols.spill import _BLOCK_BYTES, _JOIN_BYTES, SpilledShares


class _CountingFile:
    """A raw file that counts its ``readinto`` calls."""

    def __init__(self, raw) -> None:  # noqa: ANN001 - the spill's raw file
        self.raw, self.reads = raw, 0

    def readinto(self, b) -> int:  # noqa: ANN001
        self.reads += 1
        return self.raw.readinto(b)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.raw, name)


def _arrays() -> dict[int, np.ndarray]:
    rng = np.random.default_rng(5)
    out: dict[int, np.ndarray] = {u: rng.integers(0, 2**32, 1 + u % 3, dtype=np.uint64).astype(np.uint32)
                                  for u in range(20)}
    out[20] = rng.integers(0, 2**63, (2, 3), dtype=np.uint64)  # another dtype and shape, 8-byte words
    out[21] = np.zeros(0, np.uint32)  # empty
    return out


def test_get_many_gives_each_kept_array_in_order_as_a_new_array():
    spill = SpilledShares()
    kept = _arrays()
    spill.put_many(list(kept.items()))
    big = np.zeros(2 * _BLOCK_BYTES + 100, np.uint8)  # written without its zero blocks: read back as get does
    big[_BLOCK_BYTES + 3] = 7
    big[-1] = 9
    spill.put(99, big)
    keys = [3, 20, 0, 99, 21, 19, 3, 7]  # out of file order, a repeat, the large one, the empty one
    got = spill.get_many(keys)
    for k, a in zip(keys, got, strict=True):
        want = big if k == 99 else kept[k]
        assert a.dtype == want.dtype and a.shape == want.shape and np.array_equal(a, want)
        assert a.flags.owndata and a.flags.aligned and a.flags.writeable
    got[0][...] = 0  # a new array: neither the other copy of key 3 nor the spill changes
    assert np.array_equal(got[6], kept[3]) and np.array_equal(spill.get(3), kept[3])
    assert spill.get_many([]) == []
    with pytest.raises(KeyError):
        spill.get_many([0, 1234])
    spill.close()


def test_get_many_reads_a_batch_of_small_shares_with_one_read():
    spill = SpilledShares()
    kept = {u: np.full(1, u, np.uint32) for u in range(20)}  # a round's dense shares (P = 1), spilled together
    spill.put_many(list(kept.items()))
    counting = _CountingFile(spill._file)
    spill._file = counting
    got = spill.get_many(list(range(20)))
    assert [int(a[0]) for a in got] == list(range(20))
    assert counting.reads == 1  # one read, not one a device (get: 20)
    counting.reads = 0
    spill.get_many([0, 2, 4])  # not back to back in the file: a read a run
    assert counting.reads == 3
    spill._file = counting.raw
    spill.close()


def test_get_many_reads_runs_of_at_most_about_the_join_size():
    spill = SpilledShares()
    share = _JOIN_BYTES // 4 // 3  # three shares fill a run; a fourth starts another
    kept = {u: np.full(share, u + 1, np.uint32) for u in range(5)}
    spill.put_many(list(kept.items()))
    counting = _CountingFile(spill._file)
    spill._file = counting
    got = spill.get_many(list(range(5)))
    assert all(np.array_equal(got[u], kept[u]) for u in range(5))
    assert counting.reads == 2
    spill._file = counting.raw
    spill.close()


def test_contexts_are_each_devices_context_bytes():
    challenges = [bytes([i]) * 16 for i in range(3)]
    digests = [bytes([0x40 + i]) * 32 for i in range(3)]
    want = [b"secemb-bound-proof" + struct.pack("<Q", 7) + c + k for c, k in zip(challenges, digests, strict=True)]
    assert contexts(7, challenges, digests) == want
    assert [context(7, c, k) for c, k in zip(challenges, digests, strict=True)] == want
    assert contexts(7, [], []) == []
    with pytest.raises(ValueError):
        contexts(7, challenges, digests[:2])
