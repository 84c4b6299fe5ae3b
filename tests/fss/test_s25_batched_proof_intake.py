"""Issue 34 (session 25, helper G): server 1 expands a batch's range proof seeds in one
:func:`~secemb.fss.field.expand_many` call, and a server that already holds its own
joint-randomness parts hands them to :func:`~secemb.fss.rangeproof.verifier_messages` instead of
hashing them again.

``expand_many`` is checked against :func:`~secemb.fss.field.expand` (the specification, kept) and,
on streams written here, against values worked out by hand -- among them words whose top 61 bits
are ``p``, which a real stream holds with probability 2^-61 a word.  The verifier messages made
with given parts are checked against those made without."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import field as F
from secemb.fss import rangeproof as R
from secemb.randomness import CtrDrbg

P = F.P
PARAMS = R.RangeParams(rows=6, bits=8, ring_bits=32)
QSEED = b"query seed 0123456789"


def _seeds(n: int, tag: bytes = b"g") -> list[bytes]:
    """``n`` distinct 16-byte seeds (public test data)."""
    return [CtrDrbg(tag + bytes([i]))(16) for i in range(n)]


@pytest.mark.parametrize("count", [0, 1, 7, 833])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_expand_many_is_expand_of_each_seed(n: int, count: int) -> None:
    seeds = _seeds(n)
    got = F.expand_many(seeds, count)
    assert got.shape == (n, count) and got.dtype == np.uint64
    for row, seed in zip(got, seeds, strict=True):
        np.testing.assert_array_equal(row, F.expand(seed, count))


def test_expand_many_takes_seeds_as_any_bytes_like_object() -> None:
    seeds = _seeds(3)
    want = F.expand_many(seeds, 9)
    np.testing.assert_array_equal(F.expand_many([bytearray(s) for s in seeds], 9), want)
    np.testing.assert_array_equal(F.expand_many([memoryview(s) for s in seeds], 9), want)


def _fake_streams(monkeypatch: pytest.MonkeyPatch, streams: dict[bytes, list[int]]) -> list[int]:
    """Replace the AES-CTR streams of the given seeds (``expand_seed`` as :mod:`secemb.fss.field` calls
    it, and ``stream_words``, its batch form) by the given 64-bit words, read from their start; the
    list returned counts the calls, a seed a call."""
    calls: list[int] = []

    def fake(seed: bytes, shape: tuple[int, ...], dtype: object) -> np.ndarray:
        calls.append(shape[0])
        words = streams[bytes(seed)]
        assert shape[0] <= len(words), "the test's stream is too short"
        return np.array(words[: shape[0]], dtype="<u8")

    def fake_batch(seeds: list[bytes], count: int) -> np.ndarray:  # expand_many's streams (session 28)
        return np.array([fake(seed, (count,), None) for seed in seeds], dtype=np.uint64).reshape(len(seeds), count)

    monkeypatch.setattr(F, "expand_seed", fake)
    monkeypatch.setattr(F, "stream_words", fake_batch)
    return calls


def test_expand_many_skips_p_exactly_as_expand_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Words whose top 61 bits are ``p`` (``8 p`` .. ``2^64 - 1``) at the head of a row, at its last
    kept place, twice, and just past the ``count`` words read for the batch (where they change
    nothing); the largest words below them and 0 are kept.  The expected rows are written out by
    hand; only the rows that hold ``p`` in their first ``count`` words are read again."""
    count = 4
    low = [8 * v + (v % 8) for v in range(1, 12)]  # words whose top 61 bits are 1, 2, ..., 11
    streams = {
        b"A" * 16: low,
        b"B" * 16: [8 * P] + low,
        b"C" * 16: low[:3] + [8 * P + 7] + low[3:],
        b"D" * 16: [low[0], 8 * P + 3, low[1], 2**64 - 1] + low[2:],
        b"E" * 16: low[:4] + [8 * P] + low[4:],
        b"F" * 16: [8 * P - 1, 2**64 - 1, 0] + low,
    }
    calls = _fake_streams(monkeypatch, streams)
    seeds = list(streams)
    got = F.expand_many(seeds, count)
    assert got.tolist() == [[1, 2, 3, 4]] * 5 + [[P - 1, 0, 1, 2]]
    assert calls == [count] * 6 + [count + 2] * 4  # the batch, then B, C, D and F again by expand
    for row, seed in zip(got, seeds, strict=True):
        np.testing.assert_array_equal(row, F.expand(seed, count))


def test_expand_many_refuses_a_seed_of_another_length_before_expanding_any(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_streams(monkeypatch, {})
    for bad in ([b"x" * 16, b"y" * 15], [b"x" * 17], [b""]):
        with pytest.raises(InvalidParameters, match="seed must be 16 bytes"):
            F.expand_many(bad, 3)
    assert calls == []


def _honest(i: int) -> tuple[np.ndarray, np.ndarray, bytes, tuple[bytes, bytes]]:
    """Device ``i``'s ring shares of six small values, its context and its proof."""
    values = [(3 * i + j) % 100 - 50 for j in range(6)]
    a = np.array([(7919 * (i + 1) * (j + 1)) % 2**32 for j in range(6)], dtype=np.uint64)
    b = np.array([(v - int(x)) % 2**32 for v, x in zip(values, a, strict=True)], dtype=np.uint64)
    ctx = b"device %d" % i
    return a, b, ctx, R.prove(PARAMS, a, b, ctx, _rng=CtrDrbg(700 + i))


def test_server_1_parse_is_the_per_seed_expansion_of_its_seeds() -> None:
    msgs = [_honest(i)[3][1] for i in range(4)]
    shares = R.parse(PARAMS, 1, msgs)
    big_n = PARAMS.witness_length
    for i, m in enumerate(msgs):
        want = F.expand(m[:16], big_n + PARAMS.proof_length)
        np.testing.assert_array_equal(shares.inputs[i], want[:big_n])
        np.testing.assert_array_equal(shares.proofs[i], want[big_n:])
        assert shares.keys[i].tobytes() == m[:16] and shares.hints[i].tobytes() == m[16:48]


@pytest.mark.parametrize("block", [64, 2])
def test_verifier_messages_with_the_servers_own_parts_equal_those_it_hashes(block: int,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Five devices, device 3's witness share tampered (it fails either way); in blocks of 2 the
    given parts are sliced with the devices.  Parts given in the wrong order change the messages
    and fail the devices they do not belong to."""
    monkeypatch.setattr(R, "_VERIFIER_BLOCK", block)
    devices = [_honest(i) for i in range(5)]
    a_rows = np.array([d[0] for d in devices])
    b_rows = np.array([d[1] for d in devices])
    contexts = [d[2] for d in devices]
    msg0 = [d[3][0] for d in devices]
    msg0[3] = msg0[3][:48] + ((int.from_bytes(msg0[3][48:56], "little") + 1) % P).to_bytes(8, "little") + msg0[3][56:]
    msg1 = [d[3][1] for d in devices]
    s0, s1 = R.parse(PARAMS, 0, msg0), R.parse(PARAMS, 1, msg1)
    parts0 = [R.hint_of(PARAMS, c, m) for c, m in zip(contexts, msg0, strict=True)]
    parts1 = [R.seed_part(c, m[:16]) for c, m in zip(contexts, msg1, strict=True)]
    v0 = R.verifier_messages(PARAMS, 0, s0, a_rows, contexts, QSEED)
    v1 = R.verifier_messages(PARAMS, 1, s1, b_rows, contexts, QSEED)
    np.testing.assert_array_equal(R.verifier_messages(PARAMS, 0, s0, a_rows, contexts, QSEED, parts=parts0), v0)
    np.testing.assert_array_equal(R.verifier_messages(PARAMS, 1, s1, b_rows, contexts, QSEED, parts=parts1), v1)
    assert R.decide(PARAMS, v0, v1).tolist() == [True, True, True, False, True]
    swapped = [parts0[1], parts0[0]] + parts0[2:]
    w0 = R.verifier_messages(PARAMS, 0, s0, a_rows, contexts, QSEED, parts=swapped)
    assert R.decide(PARAMS, w0, v1).tolist() == [False, False, True, False, True]


def test_verifier_messages_refuse_parts_that_do_not_fit_the_devices() -> None:
    devices = [_honest(i) for i in range(2)]
    s0 = R.parse(PARAMS, 0, [d[3][0] for d in devices])
    a_rows, contexts = np.array([d[0] for d in devices]), [d[2] for d in devices]
    good = [R.hint_of(PARAMS, d[2], d[3][0]) for d in devices]
    for bad in (good[:1], good + good[:1], [good[0], good[1][:31]], [good[0], bytearray(good[1])], [good[0], None]):
        with pytest.raises(InvalidParameters, match="parts must be 2 bytes objects of 32 bytes"):
            R.verifier_messages(PARAMS, 0, s0, a_rows, contexts, QSEED, parts=bad)  # type: ignore[arg-type]
