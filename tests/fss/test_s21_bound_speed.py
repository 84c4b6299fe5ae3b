"""Session 21 (issue 34): the bound check's faster paths give the same field and ring elements.

:func:`secemb.fss.projections.project_affine` (each device's vector computed straight into the
compiled loop, no (n, L) array) against plain Python-integer arithmetic modulo ``2^k`` on rows
expanded here from the module docstring's specification with ``cryptography``'s own AES-CTR
mode; the walk's payload sums written straight into a batch's views against sums of every leaf;
on both kernel backends.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from secemb import fss
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels, projections, rangeproof
from secemb.fss.convert import convert, convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG, PayloadSums, retrieve_and_prepare_buckets
from secemb.fss.projections import project_affine, project_each
from secemb.randomness import CtrDrbg

from projection_spec import random_ring, spec_rows

BACKENDS = ["numpy"] + (["numba"] if kernels.available() else [])


def _python_vector(part: tuple[np.ndarray, ...], negate: bool, k: int) -> list[int]:
    base, count, words, tail = part
    sign = -1 if negate else 1
    sparse = [sign * (int(b) + int(c) * int(w)) for brow, c, wrow in zip(base, count, words, strict=True)
              for b, w in zip(brow, wrow, strict=True)]
    return [v % (1 << k) for v in sparse + [int(t) for t in tail]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("negate", [False, True])
@pytest.mark.parametrize(("slots", "width", "dense", "temp"), [(3, 5, 1, 1 << 20), (2, 7, 0, 1 << 20),
                                                                (4, 3, 2, 20)])
def test_project_affine_matches_python_ints(backend: str, dtype: type, negate: bool, slots: int, width: int,
                                            dense: int, temp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    monkeypatch.setattr(projections, "_TEMP_ENTRIES", temp)  # 20: one seed a chunk
    k, rows = 8 * np.dtype(dtype).itemsize, 6
    shared, other = os.urandom(16), os.urandom(16)
    seeds = [shared, other, shared, shared]  # a batch's challenge and one more
    parts = []
    for d in range(len(seeds)):
        base, words, tail = (random_ring((slots, width), dtype), random_ring((slots, width), dtype),
                             random_ring((dense,), dtype))
        if d == 0:
            base[:], words[:] = np.iinfo(dtype).max, np.iinfo(dtype).max  # every product and sum wraps
        parts.append((base, np.array([d + 7, 0, 31, 5][:slots] + [3] * (slots - 4), np.int64), words, tail))
    length = slots * width + dense
    expected = []
    for seed, part in zip(seeds, parts, strict=True):
        x = _python_vector(part, negate, k)
        expected.append([sum(a * v for a, v in zip(row, x, strict=True)) % (1 << k)
                         for row in spec_rows(seed, rows, length)])
    got = project_affine(seeds, negate, parts, rows)
    assert got.dtype == dtype and got.tolist() == expected
    formed = np.array([_python_vector(p, negate, k) for p in parts], dtype)
    assert np.array_equal(project_each(seeds, formed, rows), got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_project_affine_of_no_devices(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    assert project_affine([], False, [], 40).shape == (0, 40)


def test_project_affine_refuses_parts_that_do_not_match() -> None:
    good = (np.zeros((2, 3), np.uint32), np.zeros(2, np.int64), np.zeros((2, 3), np.uint32), np.zeros(1, np.uint32))
    bad = [
        (good[0], good[1], good[2].astype(np.uint64), good[3]),  # words of another ring
        (good[0], np.zeros(3, np.int64), good[2], good[3]),  # a count per slot: 2
        (good[0], good[1], good[2], np.zeros(2, np.uint32)),  # another dense length than the first device's
        (good[0], np.zeros(2, np.float64), good[2], good[3]),  # counts are integers
        (good[0], good[1], good[2]),  # three arrays
    ]
    for part in bad:
        with pytest.raises(InvalidParameters):
            project_affine([bytes(16)] * 2, False, [good, part], 4)  # type: ignore[list-item]
    with pytest.raises(InvalidParameters):
        project_affine([bytes(16)], False, [good, good], 4)  # one seed for two devices
    with pytest.raises(InvalidParameters):
        project_affine([bytes(16)], False, [(good[0].astype(np.int32), good[1], good[2], good[3])], 4)


# --------------------------------------------------- the walk's payload sums written into a batch's view

BIG_M, SIZES = 20, np.array([20, 13, 1, 7])  # bucket domain M, padded buckets and a full one


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ring_bits", [32, 64])
def test_walk_writes_payload_sums_into_a_batch_view(backend: str, ring_bits: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``retrieve_and_prepare_buckets(..., payload_out=)`` writes its sums into views of a batch's
    arrays (buckets 2..5 of 7, as the server's bucket-range tasks do): the sums of every key's live
    leaves (``eval_full_path``, independently), the rest of the batch untouched, the other results
    unchanged."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    users, buckets, width = 3, len(SIZES), 9
    dtype = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
    gen = np.random.default_rng(ring_bits)
    alphas = gen.integers(0, SIZES, (users, buckets)).reshape(-1)
    p0, _, state = fss.gen_path(alphas, BIG_M, _rng=CtrDrbg(ring_bits))
    cw_ret = fss.convert_gen(state, np.ones((len(alphas), 1), dtype), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    tables = random_ring((buckets, BIG_M, 2), dtype)
    key_conv, t_count = random_ring((users, 7, width), dtype), np.full((users, 7), -5, np.int64)  # stale values
    before = key_conv.copy(), t_count.copy()
    into = PayloadSums(key_conv[:, 2:6], t_count[:, 2:6])
    *got, sums = retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, width, sizes=SIZES, payload_sums=True,
                                              payload_out=into)
    plain = retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, width, sizes=SIZES)
    assert all(np.array_equal(a, b) for a, b in zip(got, plain, strict=True))
    assert sums.key_conv is into.key_conv and sums.t_count is into.t_count
    leaves = fss.eval_full_path(p0, 0)  # (U B, M, 2)
    live = np.arange(BIG_M)[None, :] < np.tile(SIZES, users)[:, None]
    conv = convert(leaves, width, ring_bits, AGGREGATION_TAG) * live[..., None].astype(dtype)
    expected_conv = conv.sum(axis=1, dtype=dtype).reshape(users, buckets, width)
    expected_t = ((leaves[..., 0] & np.uint64(1)).astype(np.int64) * live).sum(axis=1).reshape(users, buckets)
    assert np.array_equal(key_conv[:, 2:6], expected_conv) and np.array_equal(t_count[:, 2:6], expected_t)
    for kept, was in zip((key_conv, t_count), before, strict=True):
        assert np.array_equal(kept[:, :2], was[:, :2]) and np.array_equal(kept[:, 6:], was[:, 6:])
    with pytest.raises(InvalidParameters):  # a view of the wrong shape
        retrieve_and_prepare_buckets(p0, 0, cw_ret, tables, width, sizes=SIZES, payload_sums=True,
                                     payload_out=PayloadSums(key_conv[:, 2:5], t_count[:, 2:5]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_key_sums_into_a_three_dimensional_view(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``convert_accumulate``'s ``key_acc`` as a (U, G, w) view (key ``k`` at ``[k // G, k % G]``)
    and ``key_t`` as a (U, G) view against per-word Python sums and counts of control bits; a view
    with fewer than the words' keys, and counts of another shape, are refused."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(3)
    words = gen.integers(0, 2**64, (300, 2), dtype=np.uint64)
    live = np.arange(16) % 8 < 6
    start, period, width = 8, 8, 5
    vals = convert(words, width, 32, AGGREGATION_TAG)
    pos = start + np.arange(len(words))
    expected = [[0] * width for _ in range(39)]
    ones = [0] * 39
    for i, key in enumerate(pos // period):
        if live[pos[i] % 16]:
            expected[key] = [(a + int(v)) % (1 << 32) for a, v in zip(expected[key], vals[i], strict=True)]
            ones[key] += int(words[i, 0]) & 1
    assert 0 < sum(ones) < sum(live[pos % 16])  # both bits occur
    batch, counts = np.zeros((13, 5, width), np.uint32), np.full((13, 5), 7, np.int64)
    view, t_view = batch[:, 1:4], counts[:, 1:4]  # 13 x 3 = 39 keys
    t_view[...] = 0
    convert_accumulate(words, AGGREGATION_TAG, np.zeros((16, width), np.uint32), start, live, key_acc=view,
                       period=period, key_t=t_view)
    assert view.reshape(39, width).tolist() == expected and t_view.reshape(39).tolist() == ones
    assert not batch[:, 0].any() and not batch[:, 4].any() and (counts[:, 0] == 7).all() and (counts[:, 4] == 7).all()
    flat_t = np.zeros(39, np.int64)  # a (K, w) key_acc with (K,) counts, keys only
    convert_accumulate(words, AGGREGATION_TAG, None, start, live, key_acc=np.zeros((39, width), np.uint32),
                       period=period, key_t=flat_t)
    assert flat_t.tolist() == ones
    with pytest.raises(InvalidParameters):
        convert_accumulate(words, AGGREGATION_TAG, None, start, live, key_acc=batch[:, 1:3], period=period)
    for bad_t in (np.zeros((13, 2), np.int64), np.zeros((13, 3), np.int32)):
        with pytest.raises(InvalidParameters):
            convert_accumulate(words, AGGREGATION_TAG, None, start, live, key_acc=view, period=period, key_t=bad_t)


# ------------------------------------------------------------- the range proof's query, compiled


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
@pytest.mark.parametrize(("rows", "bits"), [(40, 26), (40, 25), (3, 5), (1, 2), (7, 30)])
def test_compiled_query_equals_the_numpy_query(rows: int, bits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`rangeproof._query`'s compiled columns equal its numpy code, element for element."""
    params = rangeproof.RangeParams(rows, bits, 32)
    for seed in (bytes(16), os.urandom(16), os.urandom(32)):
        got = {}
        for name in ("numpy", "numba"):
            monkeypatch.setattr(kernels, "BACKEND", name)
            got[name] = rangeproof._query(params, seed)
        for field in ("wire_rows", "pads", "gadget_columns", "delta", "witness_column", "ring_column", "constant"):
            a, b = np.asarray(getattr(got["numpy"], field)), np.asarray(getattr(got["numba"], field))
            assert a.dtype == b.dtype == np.uint64 and a.shape == b.shape and np.array_equal(a, b), field


def _refusal(fn: object) -> type[Exception] | None:
    try:
        fn()  # type: ignore[operator]
    except (InvalidMessage, InvalidParameters) as exc:
        return type(exc)
    return None


def test_check_message_refuses_exactly_what_parse_refuses() -> None:
    """A server's intake check of one proof message (:func:`rangeproof.check_message`) refuses
    the messages :func:`rangeproof.parse` refuses, with the same error class, and no other."""
    params = rangeproof.RangeParams(40, 26, 32)
    msg0, msg1 = rangeproof.prove(params, np.arange(40), np.zeros(40, np.int64), b"ctx")
    head = rangeproof.SEED_BYTES + rangeproof.PART_BYTES
    last = len(msg0) - 8

    def with_word(at: int, value: int) -> bytes:
        return msg0[:at] + value.to_bytes(8, "little") + msg0[at + 8 :]

    cases: list[tuple[int, object]] = [
        (0, msg0), (1, msg1), (0, msg0[:-1]), (0, msg0 + b"\0"), (1, msg1[:-1]), (0, msg1), (1, msg0),
        (0, "text"), (0, bytearray(msg0)), (0, memoryview(msg0)),
        (0, with_word(head, F.P)), (0, with_word(head, F.P - 1)), (0, with_word(last, 2**64 - 1)),
        (0, with_word(last, F.P)), (0, with_word(0, 2**64 - 1)),  # the blind's bytes are no element
    ]
    for party, msg in cases:
        expected = _refusal(lambda: rangeproof.parse(params, party, [msg]))  # noqa: B023
        assert _refusal(lambda: rangeproof.check_message(params, party, msg)) is expected, (party, msg[:4])  # noqa: B023
    assert _refusal(lambda: rangeproof.check_message(params, 0, with_word(head, F.P))) is InvalidMessage
    assert _refusal(lambda: rangeproof.check_message(params, 0, msg0)) is None


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
def test_compiled_decide_equals_the_numpy_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`rangeproof.decide`'s compiled verdicts equal its numpy code's and the verdicts of
    messages built here with Python ints: every device passes as built, and each one changed in
    one place (``z``, a left or right wire at either point, a gadget value, a joint-randomness
    word) fails alone."""
    params = rangeproof.RangeParams(40, 26, 32)
    big_l, width, p = params.wires, params.verifier_length, F.P
    gen = np.random.default_rng(5)

    def gadget(y: list[int]) -> int:
        return sum(y[2 * j] * y[2 * j + 1] * (y[2 * j + 1] - 1) * (y[2 * j + 1] - 2) for j in range(big_l // 2)) % p

    n = 12
    total = np.zeros((n, width), np.uint64)
    for d in range(n):
        for q in range(2):
            y = [int(v) for v in gen.integers(0, p, big_l)]
            base = 1 + q * (big_l + 1)
            total[d, base : base + big_l] = y
            total[d, base + big_l] = gadget(y)
    v0 = gen.integers(0, p, (n, width)).astype(np.uint64)
    v1 = ((total.astype(object) - v0.astype(object)) % p).astype(np.uint64)
    jr = gen.integers(0, 2**63, (n, 4)).astype(np.uint64)
    v0[:, params.opened_length :] = v1[:, params.opened_length :] = jr
    changes = [0, 1, 2, big_l, big_l + 1, big_l + 2, 2 * big_l + 2, params.opened_length, width - 1]
    for d, at in enumerate(changes, start=1):  # device 0 and the last two stay honest
        v1[d, at] = (int(v1[d, at]) + 1) % p if at < params.opened_length else v1[d, at] ^ np.uint64(1)
    expected = [d == 0 or d > len(changes) for d in range(n)]
    got = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        got[name] = rangeproof.decide(params, v0, v1)
    assert got["numba"].dtype == got["numpy"].dtype == bool
    assert got["numpy"].tolist() == expected and got["numba"].tolist() == expected
