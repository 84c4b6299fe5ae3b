"""Issue 37 (session 23, helper G): the evaluation walk's data movement folded into the conversion kernel.

:func:`secemb.fss.convert.convert_eval_into` writes the leaves' control bits (``bits``) from the pass that
converts them, and puts each key's shares where the caller's layout wants them (``place``: e.g. bucket-major
(B, U, M) for the retrieval product, so that no copy reorders them).  Both on the compiled kernel and the numpy
reference, bit for bit; the control bits against the leaf words themselves, the placed shares against the
one-after-the-other form rearranged by the test; a place that would write outside ``out`` is refused before the
kernel (which indexes it unchecked) runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.convert import convert_eval_into, kept_leaves

TAG = "secemb/retrieval"


def _words(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, (n, 2), dtype=np.uint64)


def _cw(keys: int, width: int, ring_bits: int, seed: int) -> np.ndarray:
    dtype = np.uint32 if ring_bits == 32 else np.uint64
    return np.random.default_rng(seed).integers(0, 2**ring_bits, (keys, width), dtype=dtype)


@pytest.mark.parametrize("ring_bits", [32, 64])
@pytest.mark.parametrize("width", [1, 3])
@pytest.mark.parametrize(("pos0", "n", "period", "valid"), [(0, 96, 32, 32), (40, 70, 32, 32), (13, 200, 16, 11),
                                                          (0, 2048, 64, 50), (7, 5, 8, 3)])
def test_placed_shares_and_bits_equal_the_flat_form(backend: str, ring_bits: int, width: int, pos0: int, n: int,
                                                    period: int, valid: int) -> None:
    """Key ``u B + i`` placed at ``[i, u]`` of a (B, U, valid) array (the bucket form's layout) holds what the
    one-after-the-other form writes for it, and nothing else is written; ``bits`` are bit 0 of every word."""
    words = _words(n, pos0 + n)
    keys = (pos0 + n - 1) // period + 1
    buckets = 3
    users = -(-keys // buckets)
    cw = _cw(users * buckets, width, ring_bits, n)
    for party in (0, 1):
        flat = np.empty((kept_leaves(pos0 + n, period, valid) - kept_leaves(pos0, period, valid), width), cw.dtype)
        convert_eval_into(words, cw, pos0, period, party, TAG, flat, valid)
        sentinel = np.iinfo(cw.dtype).max
        placed = np.full((buckets, users, valid, width), sentinel, cw.dtype)
        bits = np.full(n, 7, np.uint8)
        convert_eval_into(words, cw, pos0, period, party, TAG, placed.reshape(-1, width), valid,
                          place=(buckets, valid, users * valid), bits=bits)
        assert np.array_equal(bits, (words[:, 0] & np.uint64(1)).astype(np.uint8))
        # the flat rows, key by key: key k's positions p < valid from pos0 on, in order
        want = np.full_like(placed, sentinel)
        o = 0
        for pos in range(pos0, pos0 + n):
            k, p = divmod(pos, period)
            if p < valid:
                want[k % buckets, k // buckets, p] = flat[o]
                o += 1
        assert o == len(flat)
        assert np.array_equal(placed, want)


def test_both_backends_place_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled kernel and the reference give the same placed shares and bits, bit for bit."""
    if not kernels.available():
        pytest.skip("numba or AES-NI missing")
    words, cw = _words(3 * 32 * 89, 5), _cw(3 * 89, 1, 32, 6)
    got = []
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        e, bits = np.zeros((89, 3, 32), np.uint32), np.zeros(len(words), np.uint8)
        convert_eval_into(words, cw, 0, 32, 1, TAG, e.reshape(-1, 1), 32, place=(89, 32, 3 * 32), bits=bits)
        got.append((e, bits))
    assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1])


@pytest.mark.parametrize(("place", "rows"), [
    ((3, 8, 16), 39),  # keys 0..3 start at rows 0, 16, 32, 8: key 2's reach row 39
    ((1, 8, 0), 31),   # one after the other: key 3's reach row 31
    ((2, 8, 24), 39),  # keys 0..3 start at rows 0, 24, 8, 32: key 3's reach row 39
])
def test_a_place_past_out_is_refused(backend: str, place: tuple[int, int, int], rows: int) -> None:
    words, cw = _words(32, 1), _cw(6, 1, 32, 2)
    out = np.zeros((rows, 1), np.uint32)
    with pytest.raises(InvalidParameters, match="row"):
        convert_eval_into(words, cw, 0, 8, 0, TAG, out, 8, place=place)
    assert not out.any()


@pytest.mark.parametrize("place", [(0, 8, 8), (2, -8, 8), (2, 8, -1)])
def test_a_malformed_place_is_refused(backend: str, place: tuple[int, int, int]) -> None:
    with pytest.raises(InvalidParameters, match="place"):
        convert_eval_into(_words(16, 1), _cw(2, 1, 32, 2), 0, 8, 0, TAG, np.zeros((1 << 10, 1), np.uint32), 8,
                          place=place)


@pytest.mark.parametrize("bits", [np.zeros(15, np.uint8), np.zeros(16, np.int8), np.zeros((16, 1), np.uint8)])
def test_bits_of_another_shape_are_refused(backend: str, bits: np.ndarray) -> None:
    with pytest.raises(InvalidParameters, match="bits"):
        convert_eval_into(_words(16, 1), _cw(2, 1, 32, 2), 0, 8, 0, TAG, np.zeros((16, 1), np.uint32), bits=bits)


def test_the_exact_fit_is_accepted(backend: str) -> None:
    """Keys 0..3 at (2, 8, 16): rows (k // 2) 8 + (k % 2) 16 + p, the largest 8 + 16 + 7 = 31: 32 rows do."""
    out = np.zeros((32, 1), np.uint32)
    convert_eval_into(_words(32, 1), _cw(4, 1, 32, 2), 0, 8, 0, TAG, out, 8, place=(2, 8, 16))
    assert out.any()


@pytest.mark.parametrize("m", [1, 2, 32, 255, 256, 257, 70000])
def test_rows_parse_as_each_batch_alone(m: int) -> None:
    """``DPFKeys.from_rows`` (the control-bit words read byte-wise) gives every row the keys ``from_bytes``
    gives it alone, for depths 0, 1, 5, 8, 8, 9 and 17 (t^R over one, two and three bytes), and refuses a row
    with a padding bit set past the depth as ``from_bytes`` does."""
    from secemb import fss
    from secemb.errors import InvalidKey
    from secemb.fss.keys import HEADER_BYTES
    from secemb.randomness import CtrDrbg

    users, count = 4, 3
    gen = np.random.default_rng(m)
    keys = fss.gen(gen.integers(0, m, users * count), gen.integers(0, 2**32, (users * count, 2), dtype=np.uint64)
                   .astype(np.uint32), m, _rng=CtrDrbg(m))[1]
    rows = keys.to_rows(users)
    n = keys.params.depth
    if n % 8:  # user 2's key 1: the first padding bit of its last t^R byte
        rows[2, HEADER_BYTES + 16 * count + 16 * count * n + (n + 7) // 8 + (n + 7) // 8 - 1] |= np.uint8(1 << n % 8)
    expect = {"domain_size": m, "party": 1, "count": count, "payload_width": 2, "ring_bits": 32}
    got = fss.DPFKeys.from_rows(rows, **expect)
    for row, parsed in zip(rows, got, strict=True):
        try:
            alone: fss.DPFKeys | InvalidKey = fss.DPFKeys.from_bytes(row.tobytes(), **expect)
        except InvalidKey as exc:
            alone = exc
        if isinstance(alone, InvalidKey):
            assert isinstance(parsed, InvalidKey) and str(parsed) == str(alone)
            continue
        assert isinstance(parsed, fss.DPFKeys)
        for f in ("roots", "cw_seed", "cw_tl", "cw_tr"):
            assert np.array_equal(getattr(parsed.path, f), getattr(alone.path, f)), f
        assert np.array_equal(parsed.cw_out, alone.cw_out)
    assert isinstance(got[2], InvalidKey) == bool(n % 8)


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
@pytest.mark.parametrize("m", [2, 32, 300, 70000])
def test_the_walk_corrections_are_the_seed_words_with_each_side_bit(m: int) -> None:
    """``bgi_corrections`` (what the compiled walk reads, built in one pass) is ``(lo | tCW_L, hi)`` then
    ``(lo | tCW_R, hi)`` per key and level, as the test composes it from the parsed fields."""
    from secemb import fss
    from secemb.fss._numba_kernels import bgi_corrections
    from secemb.randomness import CtrDrbg

    gen = np.random.default_rng(m)
    path = fss.gen(gen.integers(0, m, 9), np.ones((9, 1), np.uint32), m, _rng=CtrDrbg(m))[0].path
    got = np.zeros((9, path.params.depth, 2, 2), np.uint64)
    bgi_corrections(path.cw_seed, path.cw_tl, path.cw_tr, 1, 0, got)
    lo, hi = path.cw_seed[..., 0], path.cw_seed[..., 1]
    assert np.array_equal(got[:, :, 0, 0], lo | path.cw_tl.astype(np.uint64))
    assert np.array_equal(got[:, :, 1, 0], lo | path.cw_tr.astype(np.uint64))
    assert np.array_equal(got[:, :, 0, 1], hi) and np.array_equal(got[:, :, 1, 1], hi)
    assert path.cw_tl.any() and path.cw_tr.any()  # both bits take part
