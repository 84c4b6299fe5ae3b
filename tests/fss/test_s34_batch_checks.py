"""Issue 34, session 34 (helper P): the check stage's argument checks run over a batch at once
(C-level maps over the messages', seeds' and contexts' types and lengths,
:func:`~secemb.fss.field.batch_nbytes`) instead of one Python step a device, and
:func:`~secemb.fss.rangeproof.parse` takes a batch's messages as the rows of one array.

The references here are the per-message rules these batch checks stand for: each function's result
on a batch equals its result on the same messages one at a time (or given as another bytes-like
type, which takes the per-message path), and a batch with one bad message is refused with the
error a check of each message in turn gives (the same type, the same text, naming the same index)."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import projections
from secemb.fss import rangeproof as R
from secemb.fss import sketchproof as SP
from secemb.randomness import CtrDrbg

PARAMS = R.RangeParams(rows=6, bits=8, ring_bits=32)
SKETCH = SP.SketchParams(keys=12)


def _bytes(n: int, size: int, tag: bytes) -> list[bytes]:
    """``n`` distinct ``size``-byte strings (public test data)."""
    return [CtrDrbg(tag + bytes([i]))(size) for i in range(n)]


def _messages0(n: int) -> list[bytes]:
    """``n`` well-formed range proof messages to server 0 (head bytes, then field elements)."""
    size = PARAMS.message_bytes(0)
    head = R.SEED_BYTES + R.PART_BYTES
    out = []
    for i, raw in enumerate(_bytes(n, size, b"m0")):
        words = np.frombuffer(raw[head:], "<u8") % np.uint64(F.P - i - 1)  # below p
        out.append(raw[:head] + words.astype("<u8").tobytes())
    return out


def test_batch_nbytes_is_the_one_length_of_bytes_only() -> None:
    assert F.batch_nbytes([b"ab", b"cd", b"ef"]) == 2
    assert F.batch_nbytes([b""]) == 0
    assert F.batch_nbytes([]) is None
    assert F.batch_nbytes([b"ab", b"abc"]) is None
    assert F.batch_nbytes([b"ab", bytearray(b"cd")]) is None  # another type: checked one at a time
    assert F.batch_nbytes([memoryview(b"ab")]) is None
    assert F.batch_nbytes(["ab"]) is None


@pytest.mark.parametrize("party", [0, 1])
def test_parse_of_rows_bytes_and_views_is_one_result(party: int) -> None:
    n = 5
    msgs = _messages0(n) if party == 0 else [s + p for s, p in zip(_bytes(n, 16, b"s"), _bytes(n, 32, b"p"),
                                                                     strict=True)]
    want = R.parse(PARAMS, party, msgs)
    rows = np.frombuffer(b"".join(msgs), np.uint8).reshape(n, -1)
    for other in (rows, rows[::-1][::-1], [memoryview(m) for m in msgs], [bytearray(m) for m in msgs]):
        got = R.parse(PARAMS, party, other)
        for field in ("keys", "hints", "inputs", "proofs"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    mine = rows.copy()
    kept = R.parse(PARAMS, party, mine)
    kept.keys[:], kept.hints[:], kept.inputs[:] = 0, 0, 0  # parse's arrays are its own, not views of the rows
    np.testing.assert_array_equal(mine, rows)
    for party_rows in (rows[:, :-8], rows.astype(np.uint16), rows[0]):
        with pytest.raises(InvalidMessage, match=f"range proof messages for server {party}: expected uint8 rows"):
            R.parse(PARAMS, party, party_rows)


@pytest.mark.parametrize("bad", [0, 3])
def test_parse_names_the_first_bad_message_as_one_at_a_time(bad: int) -> None:
    msgs = _messages0(5)
    size = PARAMS.message_bytes(0)
    for wrong, what in ((msgs[bad][:-1], f"{size - 1} bytes"), (bytes(msgs[bad]) + b"\0", f"{size + 1} bytes"),
                        ("text", "str"), (memoryview(msgs[bad])[::2], "memoryview")):
        batch = list(msgs)
        batch[bad] = wrong  # type: ignore[call-overload]
        with pytest.raises(InvalidMessage) as got:
            R.parse(PARAMS, 0, batch)
        with pytest.raises(InvalidMessage) as alone:
            R._check_size(PARAMS, 0, wrong, bad)  # the per-message rule
        assert str(got.value) == str(alone.value) and what in str(alone.value)
    batch = list(msgs)
    words = bytearray(msgs[bad])
    words[-8:] = F.P.to_bytes(8, "little")  # an element of p: refused after the sizes
    batch[bad] = bytes(words)
    with pytest.raises(InvalidMessage, match=f"range proof message {bad} for server 0: an element is not below p"):
        R.parse(PARAMS, 0, batch)
    assert R.well_formed(PARAMS, batch).tolist() == [i != bad for i in range(5)]


def test_well_formed_of_a_batch_is_check_message_of_each() -> None:
    msgs: list = _messages0(4)
    msgs[1] = msgs[1][:-8]
    msgs[2] = memoryview(msgs[2])
    got = R.well_formed(PARAMS, msgs)
    want = []
    for m in msgs:
        try:
            R.check_message(PARAMS, 0, m)
            want.append(True)
        except InvalidMessage:
            want.append(False)
    assert got.tolist() == want == [True, False, True, True]
    assert R.well_formed(PARAMS, _messages0(3)).tolist() == [True] * 3


def test_seed_parts_and_contexts_of_any_bytes_type_are_one_result() -> None:
    contexts, seeds = _bytes(4, 40, b"c"), _bytes(4, 16, b"s")
    want = R.seed_parts(contexts, seeds)
    assert want == [R.seed_part(c, s) for c, s in zip(contexts, seeds, strict=True)]
    assert R.seed_parts([bytearray(c) for c in contexts], seeds) == want
    for bad in ([*seeds[:3], seeds[3][:15]], [*seeds[:3], bytearray(seeds[3])]):
        with pytest.raises(InvalidParameters, match="need one 16-byte seed_1 a context"):
            R.seed_parts(contexts, bad)
    with pytest.raises(InvalidParameters, match="context must be bytes, got str"):
        R.seed_parts([*contexts[:3], "text"], seeds)  # type: ignore[list-item]


def test_verifier_messages_check_parts_and_contexts_as_before() -> None:
    n = 3
    shares = R.parse(PARAMS, 0, _messages0(n))
    contexts = _bytes(n, 40, b"c")
    ring = np.zeros((n, PARAMS.rows), np.uint32)
    parts = R.own_parts(PARAMS, shares, contexts)
    assert R.own_parts(PARAMS, shares, [bytearray(c) for c in contexts]) == parts
    want = R.verifier_messages(PARAMS, 0, shares, ring, contexts, b"q" * 16)
    np.testing.assert_array_equal(R.verifier_messages(PARAMS, 0, shares, ring, contexts, b"q" * 16, parts=parts), want)
    np.testing.assert_array_equal(
        R.verifier_messages(PARAMS, 0, shares, ring, [bytearray(c) for c in contexts], b"q" * 16), want)
    for bad in ([*parts[:2], parts[2][:31]], [*parts[:2], bytearray(parts[2])], parts[:2]):
        with pytest.raises(InvalidParameters, match=f"parts must be {n} bytes objects of 32 bytes"):
            R.verifier_messages(PARAMS, 0, shares, ring, contexts, b"q" * 16, parts=bad)
    with pytest.raises(InvalidParameters, match=f"contexts must be {n} bytes objects"):
        R.verifier_messages(PARAMS, 0, shares, ring, [*contexts[:2], "text"], b"q" * 16)  # type: ignore[list-item]


def test_sketch_parse_and_seeds_of_a_batch_are_the_per_message_rules() -> None:
    size = SKETCH.proof_bytes
    msgs = [(np.frombuffer(m, "<u8") % np.uint64(F.P)).astype("<u8").tobytes() for m in _bytes(4, size, b"k")]
    want = SP.parse(SKETCH, msgs)
    np.testing.assert_array_equal(SP.parse(SKETCH, [memoryview(m) for m in msgs]), want)
    np.testing.assert_array_equal(SP.parse(SKETCH, [msgs[0], bytearray(msgs[1]), *msgs[2:]]), want)
    for wrong in (msgs[2][:-8], msgs[2] + bytes(8), "text"):
        batch = [*msgs[:2], wrong, msgs[3]]
        with pytest.raises(InvalidMessage) as got:
            SP.parse(SKETCH, batch)  # type: ignore[arg-type]
        with pytest.raises(InvalidMessage) as alone:
            SP.check_message(SKETCH, wrong, 2)
        assert str(got.value) == str(alone.value)
    assert SP.well_formed(SKETCH, [msgs[0], msgs[1][:-8], memoryview(msgs[2])]).tolist() == [True, False, True]
    seeds = _bytes(3, 16, b"q")
    assert SP._seeds("seeds", seeds, 3) == seeds
    assert SP._seeds("seeds", [bytearray(s) for s in seeds], 3) == seeds
    with pytest.raises(InvalidParameters, match=r"seeds\[1\] must be 16 bytes"):
        SP._seeds("seeds", [seeds[0], seeds[1][:15], seeds[2]], 3)


def test_expand_many_of_seed_rows_is_expand_of_each() -> None:
    seeds = _bytes(5, 16, b"e")
    rows = np.frombuffer(b"".join(seeds), np.uint8).reshape(5, 16)
    want = F.expand_many(seeds, 40)
    np.testing.assert_array_equal(F.expand_many(rows, 40), want)
    for row, seed in zip(want, seeds, strict=True):
        np.testing.assert_array_equal(row, F.expand(seed, 40))
    with pytest.raises(InvalidParameters, match="seed must be 16 bytes"):
        F.expand_many([*seeds[:4], seeds[4][:15]], 4)
    with pytest.raises(InvalidParameters, match="seed rows must be uint8"):
        F.expand_many(rows[:, :15], 4)


def test_seed_indices_group_bytes_seeds_as_the_per_device_loop() -> None:
    a, b, c = _bytes(3, 16, b"x")
    seeds = [b, a, b, b, c, a]
    keys, which = projections._seed_indices(seeds, 6)
    assert keys == [projections.row_key(s) for s in (b, a, c)] and which.tolist() == [0, 1, 0, 0, 2, 1]
    keys2, which2 = projections._seed_indices([bytearray(s) for s in seeds], 6)  # the per-device path
    assert keys2 == keys and which2.tolist() == which.tolist()
    for bad in ([b, a, b[:15], c[:3]], [b, a, "text", c]):
        with pytest.raises(InvalidParameters) as got:
            projections._seed_indices(bad, 4)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameters) as alone:
            projections._checked_seed(bad[2])  # the first bad one in device order
        assert str(got.value) == str(alone.value)
    x = np.arange(6 * 9, dtype=np.uint32).reshape(6, 9)
    got_x = projections.project_each(seeds, x, 5)
    for d in range(6):
        np.testing.assert_array_equal(got_x[d], projections.project_reference(seeds[d], x[d : d + 1], 5)[0])
