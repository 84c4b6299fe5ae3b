"""Issue 37: a server parses a batch's requests in ranges (on several threads) into one key
batch (``DPFKeys.from_bytes_many(into=, blocks=)``), so the evaluation reads them without
concatenating them again.  Each input's keys land in its block (a view of the batch), equal to
what ``from_bytes`` gives alone; a block no input names is left as it was; the answers are the
same as without ``into``."""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidKey, InvalidParameters
from secemb.randomness import CtrDrbg

M, K, D = 300, 3, 2


def _keys(seed: int, ring_bits: int, party: int = 0) -> fss.DPFKeys:
    """Party ``party``'s keys of a batch fixed by ``seed`` (the same for both parties' calls)."""
    rng = np.random.default_rng(seed)
    dtype = np.uint32 if ring_bits == 32 else np.uint64
    betas = rng.integers(0, 2**32, (K, D), dtype=np.uint64).astype(dtype)
    return fss.gen(rng.integers(0, M, K), betas, M, ring_bits=ring_bits, _rng=CtrDrbg(seed))[party]


def _same(a: fss.DPFKeys, b: fss.DPFKeys) -> None:
    for x, y in [(a.path.roots, b.path.roots), (a.path.cw_seed, b.path.cw_seed), (a.path.cw_tl, b.path.cw_tl),
                 (a.path.cw_tr, b.path.cw_tr), (a.cw_out, b.cw_out)]:
        assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_each_input_lands_in_its_block(ring_bits: int) -> None:
    keys = [_keys(s, ring_bits) for s in range(4)]
    data = [k.to_bytes() for k in keys]
    bad = bytearray(data[2])
    bad[49] ^= 1  # the first key's root control bit: not party 0's
    expect = {"domain_size": M, "party": 0, "count": K, "payload_width": D, "ring_bits": ring_bits}
    into = fss.DPFKeys.empty(keys[0].params, 0, 5 * K)
    into.cw_out[:] = 7  # what a block no input names keeps
    into.path.roots[:] = 7
    # two ranges, as two threads parse them, into blocks out of order; block 4 stays unset
    first = fss.DPFKeys.from_bytes_many([data[3], data[0]], into=into, blocks=[3, 0], **expect)
    second = fss.DPFKeys.from_bytes_many([bytes(bad), data[1]], into=into, blocks=[2, 1], **expect)
    assert isinstance(second[0], InvalidKey) and "root control bit" in str(second[0])
    for got, want, block in [(first[0], keys[3], 3), (first[1], keys[0], 0), (second[1], keys[1], 1)]:
        assert isinstance(got, fss.DPFKeys)
        _same(got, want)
        _same(into[block * K : (block + 1) * K], want)
        assert np.shares_memory(got.cw_out, into.cw_out)  # a view of the batch, not a copy
    assert np.all(into.cw_out[4 * K :] == 7) and np.all(into.path.roots[4 * K :] == 7)  # no input's block
    # the same answers as a new batch
    alone = fss.DPFKeys.from_bytes_many([data[3], data[0], bytes(bad), data[1]], **expect)
    for got, want in zip(alone, [first[0], first[1], second[0], second[1]], strict=True):
        if isinstance(want, InvalidKey):
            assert isinstance(got, InvalidKey) and str(got) == str(want)
        else:
            assert isinstance(got, fss.DPFKeys)
            _same(got, want)
    shared = fss.DPFKeys.from_shared_many([(keys[1].shared_bytes(), _keys(1, ring_bits, 1).path.roots.astype("<u8")
                                            .tobytes())], 1, into=fss.DPFKeys.empty(keys[0].params, 1, K), blocks=[0],
                                          domain_size=M, count=K, payload_width=D, ring_bits=ring_bits)
    assert isinstance(shared[0], fss.DPFKeys)
    _same(shared[0], _keys(1, ring_bits, 1))


def test_into_must_fit_the_inputs() -> None:
    k = _keys(0, 32)
    expect = {"domain_size": M, "party": 0, "count": K, "payload_width": D, "ring_bits": 32}
    with pytest.raises(InvalidParameters, match="one block per input"):
        fss.DPFKeys.from_bytes_many([k.to_bytes()], into=fss.DPFKeys.empty(k.params, 0, K), blocks=[], **expect)
    with pytest.raises(InvalidParameters):
        fss.DPFKeys.from_bytes_many([k.to_bytes()], into=fss.DPFKeys.empty(k.params, 1, K), blocks=[0], **expect)
