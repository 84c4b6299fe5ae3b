"""Issue 37: a server parses a range of requests whose bodies it holds as the rows of one array
(``DPFKeys.from_rows``): full keys, or (server 1 with relay) shared parts with their roots
beside them.  Every row gets what ``from_bytes`` / ``from_shared`` gives it alone -- the same
keys, or an ``InvalidKey`` with the same message -- whether its header is the one the
parameters fix (parsed with the others as one array) or any other (parsed alone), and the
keys land in their blocks of ``into`` as with ``from_bytes_many``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidKey, InvalidParameters
from secemb.randomness import CtrDrbg

M, K, D = 300, 3, 2
HEAD = fss.keys.HEADER_BYTES  # 49


def _keys(seed: int, ring_bits: int, party: int = 0) -> fss.DPFKeys:
    """Party ``party``'s keys of a batch fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    dtype = np.uint32 if ring_bits == 32 else np.uint64
    betas = rng.integers(0, 2**32, (K, D), dtype=np.uint64).astype(dtype)
    return fss.gen(rng.integers(0, M, K), betas, M, ring_bits=ring_bits, _rng=CtrDrbg(seed))[party]


def _expect(ring_bits: int, party: int = 0) -> dict[str, Any]:
    return {"domain_size": M, "party": party, "count": K, "payload_width": D, "ring_bits": ring_bits}


def _flip(data: bytes, at: int, bit: int = 1) -> bytes:
    out = bytearray(data)
    out[at] ^= bit
    return bytes(out)


def _same(got: fss.DPFKeys | InvalidKey, want: fss.DPFKeys | InvalidKey) -> None:
    if isinstance(want, InvalidKey):
        assert isinstance(got, InvalidKey) and str(got) == str(want)
        return
    assert isinstance(got, fss.DPFKeys)
    for x, y in [(got.path.roots, want.path.roots), (got.path.cw_seed, want.path.cw_seed),
                 (got.path.cw_tl, want.path.cw_tl), (got.path.cw_tr, want.path.cw_tr), (got.cw_out, want.cw_out)]:
        assert x.dtype == y.dtype and np.array_equal(x, y)


def _alone(data: bytes, **expect: Any) -> fss.DPFKeys | InvalidKey:
    try:
        return fss.DPFKeys.from_bytes(data, **expect)
    except InvalidKey as exc:
        return exc


def _rows(datas: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(datas), np.uint8).reshape(len(datas), -1).copy()


# a row's bytes changed at one place (offset, xor): each refused, for its own reason
BROKEN = {
    "magic": (0, 1),
    "version": (4, 1),
    "kind": (6, 1),
    "flags": (7, 1),
    "party": (8, 1),
    "peer": (12, 1),
    "round": (16, 1),
    "body-length": (24, 1),
    "ring": (32, 96),  # 32 -> 64 (or 64 -> 32)
    "domain": (33, 1),
    "width": (41, 1),
    "count": (45, 1),
    "root-bit": (HEAD, 1),
    "padding-bits": (HEAD + 16 * K + 16 * K * 9 + 1, 0x80),  # key 0's second cw_tr byte: past depth 9
}


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_every_row_gets_what_from_bytes_gives_it_alone(ring_bits: int) -> None:
    expect = _expect(ring_bits)
    good = [_keys(s, ring_bits).to_bytes() for s in range(3)]
    datas = [good[0], *(_flip(good[1], at, bit) for at, bit in BROKEN.values()), good[2]]
    got = fss.DPFKeys.from_rows(_rows(datas), **expect)
    assert len(got) == len(datas)
    for data, g in zip(datas, got, strict=True):
        _same(g, _alone(data, **expect))
    assert isinstance(got[0], fss.DPFKeys) and isinstance(got[-1], fss.DPFKeys)
    assert all(isinstance(g, InvalidKey) for g in got[1:-1])  # each change above is refused


def test_rows_of_another_length_are_refused_as_from_bytes_refuses_them() -> None:
    expect = _expect(32)
    data = _keys(0, 32).to_bytes()
    longer = _rows([data + b"\0" * 8])
    got = fss.DPFKeys.from_rows(longer, **expect)
    _same(got[0], _alone(data + b"\0" * 8, **expect))
    assert "body length" in str(got[0])


def test_keys_land_in_their_blocks_of_into() -> None:
    expect = _expect(32)
    keys = [_keys(s, 32) for s in range(3)]
    datas = [keys[0].to_bytes(), _flip(keys[1].to_bytes(), 0), keys[2].to_bytes()]
    into = fss.DPFKeys.empty(keys[0].params, 0, 4 * K)
    into.cw_out[:] = 7
    got = fss.DPFKeys.from_rows(_rows(datas), into=into, blocks=[3, 1, 0], **expect)
    _same(got[0], keys[0])
    _same(got[2], keys[2])
    assert isinstance(got[1], InvalidKey) and "magic" in str(got[1])
    _same(into[3 * K : 4 * K], keys[0])
    _same(into[0:K], keys[2])
    assert np.shares_memory(got[0].cw_out, into.cw_out)  # type: ignore[union-attr]
    assert np.all(into.cw_out[2 * K : 3 * K] == 7)  # no row's block


def test_blocks_are_checked_before_any_write() -> None:
    expect = _expect(32)
    datas = [_keys(s, 32).to_bytes() for s in range(2)]
    into = fss.DPFKeys.empty(_keys(0, 32).params, 0, 2 * K)
    into.cw_out[:] = 7
    with pytest.raises(InvalidParameters, match="blocks"):
        fss.DPFKeys.from_rows(_rows(datas), into=into, blocks=[1, 1], **expect)
    assert np.all(into.cw_out == 7)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_shared_rows_with_roots_get_what_from_shared_gives_them(ring_bits: int) -> None:
    expect = _expect(ring_bits, party=1)
    keys = [_keys(s, ring_bits, party=1) for s in range(3)]
    shared = [k.shared_bytes() for k in keys]
    roots = [k.path.roots.astype("<u8").tobytes() for k in keys]
    assert all(s[:HEAD] == fss.DPFKeys.shared_header(M, K, D, ring_bits) for s in shared)
    shared += [_flip(shared[0], 0), _flip(shared[1], 33), shared[2]]
    roots += [roots[0], roots[1], _flip(roots[2], 0)]  # the last: a root bit that is not party 1's
    got = fss.DPFKeys.from_rows(_rows(shared), roots=_rows(roots), **expect)
    for s, r, g in zip(shared, roots, got, strict=True):
        try:
            want: fss.DPFKeys | InvalidKey = fss.DPFKeys.from_shared(s, r, **expect)
        except InvalidKey as exc:
            want = exc
        _same(g, want)
    assert [isinstance(g, InvalidKey) for g in got] == [False, False, False, True, True, True]


def test_arrays_that_are_not_rows_of_bytes_are_refused() -> None:
    expect = _expect(32)
    rows = _rows([_keys(0, 32).to_bytes()])
    with pytest.raises(InvalidParameters, match="rows"):
        fss.DPFKeys.from_rows(rows.view(np.int8), **expect)
    with pytest.raises(InvalidParameters, match="roots"):
        fss.DPFKeys.from_rows(rows, roots=np.zeros((1, 8), np.uint8), **expect)
