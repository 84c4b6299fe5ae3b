"""Issue 34 (session 28, helper B): the bound check's intake at the servers with less glue.

* :func:`secemb.fss.field.expand_many` writes each seed's stream straight into its row
  (``field.stream_words``: one compiled AES-NI pass over the batch,
  :func:`secemb.fss._rangeproof_kernels.ctr_streams`, or a ``cryptography`` cipher a seed) instead
  of going through :func:`secemb.randomness.expand_seed`: the words are checked against
  ``expand_seed``'s (the specification of the stream) on both backends, at counts that end inside
  an AES block or a pass and at the range proof's size, and the compiled streams against
  ``cryptography``'s AES-256-CTR; ``ctr_streams`` checks the rows' layout in Python integers
  before its loop stores by address (strides whose bound wraps int64 refused: helper E's S28-E4),
  and ``expand`` / ``expand_many`` refuse a negative count on both backends.
* The checks that a message's field elements are below ``p`` (:func:`~secemb.fss.rangeproof.check_message`,
  ``parse_verifier_messages``, ``decide``) and that ring shares are ring elements
  (``verifier_messages``) take one reduction each: checked at ``p - 1``, ``p`` and beyond, at the
  first, a middle and the last element, and on empty batches.
* The query's ``delta`` and ``rho'`` (``rangeproof._query``) are reduced with Python ints and in
  the compiled ``query_columns``: checked against the 16-byte integers of the seed's SHAKE-128
  output reduced mod ``p`` (written out here) and, at the edges of the reduction, against
  :func:`~secemb.fss.field.from_uniform_bytes`.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import kernels
from secemb.fss import rangeproof as R
from secemb.randomness import expand_seed

P = F.P


BACKENDS = ["numpy", "numba"] if kernels.available() else ["numpy"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("count", [0, 1, 2, 3, 16, 17, 833, 1000])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_stream_words_are_expand_seeds_words(n: int, count: int, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts that end inside an AES block (odd counts), on a pass of the compiled loop (16 words
    = 8 blocks) and just after it, and the range proof's 833: every word, every row."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [os.urandom(16) for _ in range(n)]
    got = F.stream_words(seeds, count)
    assert got.shape == (n, count) and got.dtype == np.uint64 and got.flags.c_contiguous
    for row, seed in zip(got, seeds, strict=True):
        assert row.tolist() == expand_seed(seed, (count,), np.dtype("<u8")).tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_stream_words_take_any_bytes_like_seed(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    seeds = [os.urandom(16) for _ in range(3)]
    want = [expand_seed(s, (5,), np.dtype("<u8")).tolist() for s in seeds]
    for kind in (bytes, bytearray, memoryview):
        assert F.stream_words([kind(s) for s in seeds], 5).tolist() == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 3, 20])
def test_stream_words_take_seed_rows_as_an_array(n: int, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 33: the seeds as rows of uint8 (n, 16) -- here the last 16 columns of wider rows, as
    ``sketch.expand`` passes its ``s_r`` -- give each seed's ``expand_seed`` words (both key paths:
    hashlib below the batch size, one SHA-256 batch from it); rows of another width or dtype are refused."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    wide = np.frombuffer(os.urandom(48 * n), np.uint8).reshape(n, 48)
    want = [expand_seed(row[32:].tobytes(), (7,), np.dtype("<u8")).tolist() for row in wide]
    assert F.stream_words(wide[:, 32:], 7).tolist() == want
    for bad in (wide[:, 31:], wide[:, 32:].astype(np.uint16), wide[0, 32:]):
        with pytest.raises(InvalidParameters, match="seed rows must be uint8"):
            F.stream_words(bad, 7)


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
def test_ctr_streams_is_aes_256_ctr_and_refuses_an_out_too_small() -> None:
    """The compiled streams against ``cryptography``'s AES-256-CTR under the same keys, from
    counter 0, with rows laid out at a stride larger than a row; and the bounds it writes in."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from secemb.fss._rangeproof_kernels import CTR_BLOCKS, ctr_streams

    keys = np.frombuffer(os.urandom(3 * 32), np.uint8).reshape(3, 32)
    nbytes, stride = 300, 320
    span = 16 * CTR_BLOCKS
    need = 2 * stride + span * -(-nbytes // span)
    out = np.zeros(need, np.uint8)
    ctr_streams(keys, out, stride, nbytes)
    for i in range(3):
        want = Cipher(algorithms.AES(keys[i].tobytes()), modes.CTR(bytes(16))).encryptor().update(bytes(nbytes))
        assert out[i * stride : i * stride + nbytes].tobytes() == want
    for bad_out, bad_stride in ((np.zeros(need - 1, np.uint8), stride), (np.zeros(need, np.uint8), nbytes - 1),
                                (np.zeros((2, need), np.uint8)[:, 0], stride)):
        with pytest.raises(ValueError, match="ctr_streams"):
            ctr_streams(keys, bad_out, bad_stride, nbytes)
    with pytest.raises(ValueError, match="ctr_streams"):
        ctr_streams(keys[:, :16], out, stride, nbytes)


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
def test_ctr_streams_refuses_any_layout_beyond_out_without_writing() -> None:
    """The layout is checked in Python integers before the loop stores anything: strides whose
    bound wraps int64 (``2^62``, ``2^61 + 1``, with a ``nbytes`` just below), one row at a stride
    beyond ``out`` or ``2^64``, a negative ``nbytes``, keys or ``out`` of another dtype and a read-only
    ``out`` are refused and ``out`` is left as it was; no keys write nothing at any stride, and a
    row ending exactly at the last pass is accepted (the bound is not off by one).  Helper E's
    S28-E4 (tests/review/test_session28_redteam_kernels.py) runs the wrapping strides in a child
    process, where the unchecked loop's store is a crash rather than pytest's."""
    from secemb.fss._rangeproof_kernels import CTR_BLOCKS, ctr_streams

    span = 16 * CTR_BLOCKS
    out = np.zeros(4096, np.uint8)
    keys = np.frombuffer(os.urandom(5 * 32), np.uint8).reshape(5, 32)
    for n, stride, nbytes in ((3, 1 << 62, 16), (5, (1 << 61) + 1, 16), (3, 1 << 62, (1 << 62) - 1), (1, 4097, 16),
                              (1, 1 << 64, 16), (2, 2**63, 2**63 - 5), (2, 16, -1), (2, -16, -32)):
        with pytest.raises(ValueError, match="ctr_streams"):
            ctr_streams(keys[:n], out, stride, nbytes)
    read_only = np.frombuffer(bytes(4096), np.uint8)
    for bad_keys, bad_out in ((keys.view(np.int8), out), (keys, out.view(np.int8)), (keys, read_only)):
        with pytest.raises(ValueError, match="ctr_streams"):
            ctr_streams(bad_keys, bad_out, 16, 16)
    assert not out.any()
    ctr_streams(keys[:0], out, 1 << 70, 16)
    assert not out.any()
    ctr_streams(keys[:2], out[: 100 + span], 100, 100)  # (n - 1) stride + one pass: exactly out
    assert out[:100].any() and out[100:200].any() and not out[100 + span :].any()
    with pytest.raises(ValueError, match="ctr_streams"):
        ctr_streams(keys[:2], out[: 99 + span], 100, 100)


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_and_expand_many_refuse_a_negative_count(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)
    for seeds in ([], [bytes(16)], [bytes(16)] * 3):
        with pytest.raises(InvalidParameters, match="count must be non-negative"):
            F.expand_many(seeds, -1)
    with pytest.raises(InvalidParameters, match="count must be non-negative"):
        F.expand(bytes(16), -1)


# ------------------------------------------------- the checks of field elements: one reduction


def _message0() -> tuple[R.RangeParams, bytes]:
    params = R.RangeParams(rows=3, bits=6, ring_bits=32)
    a = np.array([5, 2**32 - 7, 0], dtype=np.uint64)
    b = np.array([2**32 - 3, 9, 1], dtype=np.uint64)
    return params, R.prove(params, a, b, b"ctx")[0]


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_check_message_refuses_an_element_of_p_or_more_anywhere_and_keeps_p_minus_1(where: str) -> None:
    params, msg = _message0()
    count = params.witness_length + params.proof_length
    at = 48 + 8 * {"first": 0, "middle": count // 2, "last": count - 1}[where]
    for value, refused in ((P - 1, False), (P, True), (P + 1, True), (2**64 - 1, True), (0, False)):
        bad = msg[:at] + value.to_bytes(8, "little") + msg[at + 8 :]
        if refused:
            with pytest.raises(InvalidMessage, match="not below p"):
                R.check_message(params, 0, bad)
            with pytest.raises(InvalidMessage, match="not below p"):
                R.parse(params, 0, [bad])
        else:
            R.check_message(params, 0, bad)
            assert R.parse(params, 0, [bad]).inputs.shape == (1, params.witness_length)


def test_verifier_message_checks_refuse_p_and_take_empty_batches() -> None:
    params = R.RangeParams(rows=3, bits=6, ring_bits=32)
    width = params.verifier_length
    good = np.full((2, width), P - 1, dtype=np.uint64)
    assert R.decide(params, good[:0], good[:0]).tolist() == []
    assert R.parse_verifier_messages(params, b"", 0).shape == (0, width)
    for col in (0, params.opened_length - 1):
        bad = good.copy()
        bad[1, col] = P
        with pytest.raises(InvalidMessage, match="not below p"):
            R.decide(params, good, bad)
        with pytest.raises(InvalidMessage, match="not below p"):
            R.parse_verifier_messages(params, F.to_bytes(bad), 2)
    jr = good.copy()
    jr[:, params.opened_length :] = 2**64 - 1  # the joint randomness: raw words, any value
    R.parse_verifier_messages(params, F.to_bytes(jr), 2)
    R.decide(params, jr, jr)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.int64])
def test_verifier_messages_take_ring_elements_and_refuse_others(dtype: type) -> None:
    params, msg = _message0()
    shares = R.parse(params, 0, [msg])
    top = np.array([[0, 1, 2**32 - 1]], dtype=dtype)
    R.verifier_messages(params, 0, shares, top, [b"ctx"], bytes(16))
    bad_values = [2**32] if dtype != np.uint32 else []
    bad_values += [-1] if dtype == np.int64 else []
    for value in bad_values:
        with pytest.raises(InvalidParameters, match="ring elements"):
            R.verifier_messages(params, 0, shares, np.array([[0, value, 1]], dtype=dtype), [b"ctx"], bytes(16))
    empty = R.parse(params, 0, [])
    assert R.verifier_messages(params, 0, empty, np.zeros((0, 3), dtype), [], bytes(16)).shape == (0,
                                                                                                    params.verifier_length)


# ------------------------------------------------- the query's rho', reduced in the compiled pass


@pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
def test_query_columns_reduce_each_16_byte_integer_as_from_uniform_bytes() -> None:
    from secemb.fss._rangeproof_kernels import query_columns

    edges = [0, 1, 7, 8, P - 1, P, P + 1, 2 * P, 2**61, 2**63, 7 * P + 3] + [2**64 - k for k in range(1, 10)]
    edges += [(top << 61) + P - k for top in (1, 3, 7) for k in (0, 1, 5, 6, 7)]  # the 61-bit sum over p
    high = [P - 2**58 - k for k in range(4)]  # 2^64 hi = -8 k' mod p: lo + 2^64 hi just below 2p before the last step
    words = [(lo, hi) for lo in edges for hi in edges + high] + [tuple(int.from_bytes(os.urandom(8), "little")
                                                               for _ in range(2)) for _ in range(20)]
    rho_words = np.array(words, dtype=np.uint64)
    rows = len(words)
    lag = np.zeros((2, 4), np.uint64)
    pads, witness, ring = np.empty((2, 1), np.uint64), np.empty(rows, np.uint64), np.empty(rows, np.uint64)
    total = query_columns(lag, 1, 1, 1, rho_words, np.ones(1, np.uint64), np.uint64(1), np.uint64(1), pads, witness,
                          ring)
    want = [(lo + (hi << 64)) % P for lo, hi in words]  # the 16 bytes lo || hi as a little-endian integer
    assert ring.tolist() == want
    assert ring.tolist() == F.from_uniform_bytes(rho_words.astype("<u8").tobytes(), rows).tolist()
    assert witness.tolist() == [(P - v) % P for v in want] and int(total) == sum(want) % P


def test_the_query_delta_and_rho_are_the_seeds_shake_reduced() -> None:
    params = R.RangeParams(rows=5, bits=6, ring_bits=32)
    seed = os.urandom(16)
    framed = len(seed).to_bytes(8, "little") + seed
    blob = hashlib.shake_128(b"secemb/fss/rangeproof/v1/query" + framed).digest(16 * (3 + params.rows))
    f = 1 << (2 * params.digits - params.bits)
    rho = [int.from_bytes(blob[48 + 16 * r : 64 + 16 * r], "little") % P for r in range(params.rows)]
    for backend in ("numpy", "numba") if kernels.available() else ("numpy",):
        old = kernels.BACKEND
        kernels.BACKEND = backend
        try:
            q = R._query(params, seed)
        finally:
            kernels.BACKEND = old
        assert int(q.delta) == int.from_bytes(blob[32:48], "little") % P and q.delta.dtype == np.uint64
        assert q.ring_column[:, 0].tolist() == [r * f % P for r in rho]
