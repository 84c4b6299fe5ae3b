"""Server glue done once per batch instead of once per user (issue 37): server 1's dense
shares summed by one conversion pass over a batch's seeds, and a parsed request's shared key
part cut from the bytes it was parsed from instead of serialized again."""

from __future__ import annotations

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.protocols.secemb.relay import relay_prg, relay_prg_sum

BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("size", [1, 3, 5, 130, 1001])
def test_relay_prg_sum_is_the_ring_sum_of_each_seed_s_expansion(monkeypatch: pytest.MonkeyPatch, backend: str,
                                                                 dtype: type, size: int) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [bytes([i]) * 16 for i in range(7)]
    want: np.ndarray = np.zeros(size, dtype)
    for seed in seeds:  # the one-by-one expansion the batch replaces, summed with wraparound
        want += relay_prg(seed, (size,), np.dtype(dtype))
    got = relay_prg_sum(seeds, size, np.dtype(dtype))
    assert got.dtype == dtype and got.shape == (size,)
    assert np.array_equal(got, want)
    assert np.array_equal(relay_prg_sum(seeds[:1], size, np.dtype(dtype)), relay_prg(seeds[0], (size,),
                                                                                        np.dtype(dtype)))
    assert np.array_equal(relay_prg_sum([], size, np.dtype(dtype)), np.zeros(size, dtype))


def test_relay_prg_sum_refuses_a_seed_of_the_wrong_length() -> None:
    with pytest.raises(InvalidParameters):
        relay_prg_sum([bytes(16), bytes(15)], 4, np.dtype(np.uint32))


@pytest.mark.parametrize(("m", "d", "ring_bits"), [(1, 1, 32), (2, 3, 64), (9, 2, 32), (3883, 1, 32), (300, 5, 64)])
def test_shared_of_is_the_shared_bytes_of_what_was_parsed(m: int, d: int, ring_bits: int) -> None:
    """Every field random (the correction words' control bits included; padding bits zero and
    roots of the party, which the parse demands): cutting the bytes gives exactly what
    serializing the parsed keys again gives, for either party and a batch parsed as many."""
    gen = np.random.default_rng(m * d + ring_bits)
    k, n = 5, (m - 1).bit_length()
    for party in (0, 1):
        roots = gen.integers(0, 1 << 63, (k, 2), dtype=np.uint64) * np.uint64(2) + np.uint64(party)
        seeds = gen.integers(0, 1 << 64, (k, n, 2), dtype=np.uint64, endpoint=False)
        tr = gen.integers(0, 2, (k, n), dtype=np.uint8)
        cw = gen.integers(0, 1 << ring_bits, (k, d), dtype=np.uint64, endpoint=False)
        params = fss.DPFParams(m, d, ring_bits)
        cw_seed = seeds.copy()
        cw_seed[..., 0] &= ~np.uint64(1)  # bit 0 of a level's word is its tCW_L
        keys = fss.DPFKeys(fss.PathKeys(params, party, roots, cw_seed, (seeds[..., 0] & np.uint64(1)).astype(np.uint8),
                                        tr),
                           cw.astype(params.dtype), params)
        data = keys.to_bytes()
        parsed = fss.DPFKeys.from_bytes(data, party=party)
        assert fss.DPFKeys.shared_of(data) == parsed.shared_bytes() == keys.shared_bytes()
        many = fss.DPFKeys.from_bytes_many([data, memoryview(data)], domain_size=m, party=party, count=k,
                                           payload_width=d, ring_bits=ring_bits)
        assert fss.DPFKeys.shared_of(memoryview(data)) == many[1].shared_bytes()  # type: ignore[union-attr]
        # and from it, the other party's keys with their own roots
        other = fss.DPFKeys.from_shared(fss.DPFKeys.shared_of(data), bytes(16 * k), 0, domain_size=m)
        assert np.array_equal(other.cw_out, keys.cw_out)
