"""Session 32 (helper G, issue 34): the servers' check glue done a batch at a time.

* :func:`secemb.fss.hashing.shake128_many`: SHAKE-128 of many messages of one length, on the Keccak
  kernel (:mod:`secemb.fss._keccak`) where the compiled kernels run; every output must be
  :mod:`hashlib`'s, on both paths, across the padding and squeeze boundaries (the rate is 168
  bytes) and for a number of messages that is not a multiple of the kernel's lanes.
* The range proof's and the sketch proof's verifiers draw their coefficients and query points
  through it: their outputs are checked here against the specification computed with hashlib.
* :func:`secemb.fss.rangeproof.own_parts` (a server's own parts from its parsed shares) is
  :func:`~secemb.fss.rangeproof.hint_of` / :func:`~secemb.fss.rangeproof.seed_part` of each device;
  :func:`~secemb.fss.rangeproof.well_formed` takes exactly the messages
  :func:`~secemb.fss.rangeproof.check_message` takes.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.fss import field as F
from secemb.fss import hashing, kernels
from secemb.fss import rangeproof as R
from secemb.fss import sketchproof as S

PARAMS = R.RangeParams(rows=6, bits=8, ring_bits=32)


# ``backend``: tests/fss/conftest.py's (the numpy/hashlib reference, and the compiled kernels where they run)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 20])
@pytest.mark.parametrize("prefix_len", [0, 38, 167])
@pytest.mark.parametrize("length", [0, 16, 32, 130, 135, 136, 200])
def test_shake128_many_is_hashlib(backend: str, n: int, prefix_len: int, length: int) -> None:
    """Messages of 0 to 367 bytes (one to three blocks; a message of 167 bytes pads to exactly one
    block, of 168 to two), outputs of 1 to 800 bytes (up to five squeezed blocks)."""
    rng = np.random.default_rng(n * 10_000 + prefix_len * 100 + length)
    prefix = rng.integers(0, 256, prefix_len, dtype=np.uint8).tobytes()
    rows = rng.integers(0, 256, (n, length), dtype=np.uint8)
    for nbytes in (1, 32, 167, 168, 169, 592, 800):
        got = hashing.shake128_many(prefix, rows, nbytes)
        assert got.shape == (n, nbytes) and got.dtype == np.uint8 and got.flags.c_contiguous
        assert [g.tobytes() for g in got] == [hashlib.shake_128(prefix + r.tobytes()).digest(nbytes) for r in rows]


def test_shake128_many_takes_rows_in_any_layout_and_refuses_what_is_not_rows(backend: str) -> None:
    base = np.arange(9 * 40, dtype=np.uint64).astype(np.uint8).reshape(9, 40)
    for rows in (np.asfortranarray(base), base[:, ::2], base[::-1, 5:]):
        got = hashing.shake128_many(b"pre", rows, 40)
        assert [g.tobytes() for g in got] == [hashlib.shake_128(b"pre" + r.tobytes()).digest(40) for r in rows]
    assert hashing.shake128_many(b"p", base, 0).shape == (9, 0)
    for bad in (np.zeros((3, 4), np.uint32), np.zeros(12, np.uint8), [[1, 2]]):
        with pytest.raises(InvalidParameters, match="uint8 \\(n, L\\)"):
            hashing.shake128_many(b"p", bad, 8)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters, match="non-negative"):
        hashing.shake128_many(b"p", base, -1)


def test_range_proof_coefficients_are_the_specified_shake_words(backend: str) -> None:
    """``(r, r', s, s')``: the top 60 bits of the little-endian words of ``SHAKE-128(domain ||
    "coefficients" || jr)``, in that order (module docstring), for a batch of 11 devices."""
    jrs = [os.urandom(32) for _ in range(11)]
    half, c = PARAMS.half_calls, PARAMS.chunk
    calls, slots = R._coefficients(PARAMS, jrs)
    for i, jr in enumerate(jrs):
        blob = hashlib.shake_128(b"secemb/fss/rangeproof/v1/coefficients" + jr).digest(16 * (half + c))
        words = [int.from_bytes(blob[8 * j : 8 * j + 8], "little") >> 4 for j in range(2 * (half + c))]
        assert calls[i].reshape(-1).tolist() == words[: 2 * half]
        assert slots[i].reshape(-1).tolist() == words[2 * half :]
    np.testing.assert_array_equal(R._coefficients(PARAMS, np.frombuffer(b"".join(jrs), np.uint8).reshape(11, 32))[1],
                                  slots)


def test_sketch_coefficients_and_points_are_the_specified_shake_outputs(backend: str) -> None:
    """``r || s``: 16-byte little-endian integers of ``SHAKE-128(domain || "coefficients" || c_u)``
    reduced mod ``p``; the points from ``SHAKE-128(domain || "query" || q)``'s two 16-byte integers
    (module docstring, Queries), computed here with Python integers for 10 devices."""
    params = S.SketchParams(250)
    m, c, d = params.calls, params.chunk, params.gadget_nodes
    seeds = [os.urandom(16) for _ in range(10)]
    r, s = S._coefficients(params, seeds)
    points = S._points(params, seeds)
    for i, seed in enumerate(seeds):
        blob = hashlib.shake_128(b"secemb/fss/sketchproof/v1/coefficients" + seed).digest(16 * (m + c))
        want = [int.from_bytes(blob[16 * j : 16 * j + 16], "little") % F.P for j in range(m + c)]
        assert r[i].tolist() + s[i].tolist() == want
        q = hashlib.shake_128(b"secemb/fss/sketchproof/v1/query" + seed).digest(32)
        h1 = int.from_bytes(q[:16], "little") % (F.P - d)
        h2 = int.from_bytes(q[16:], "little") % (F.P - d - 1)
        assert points[i].tolist() == [d + h1, d + (h1 + 1 + h2) % (F.P - d)]


def _proofs(n: int) -> list[tuple[bytes, bytes]]:
    gen = np.random.default_rng(n)  # public test values
    values = gen.integers(-100, 100, (n, PARAMS.rows)) % 2**32
    a = gen.integers(0, 2**32, (n, PARAMS.rows), dtype=np.uint64)
    b = (values.astype(np.uint64) - a) % np.uint64(2**32)
    return [R.prove(PARAMS, a[i], b[i], b"ctx%d" % (i % 2)) for i in range(n)]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_own_parts_are_each_servers_hint_and_seed_part(backend: str, n: int) -> None:
    """Server 0's own part of a device is :func:`hint_of` of its message, server 1's
    :func:`seed_part` of its seed -- the part the device wrote into its message to the other
    server -- under contexts of one length or not."""
    proofs = _proofs(n)
    for contexts in ([b"ctx%d" % (i % 2) for i in range(n)], [b"c" * (i % 2) for i in range(n)]):
        got0 = R.own_parts(PARAMS, R.parse(PARAMS, 0, [m0 for m0, _ in proofs]), contexts)
        got1 = R.own_parts(PARAMS, R.parse(PARAMS, 1, [m1 for _, m1 in proofs]), contexts)
        assert got0 == [R.hint_of(PARAMS, c, m0) for c, (m0, _) in zip(contexts, proofs, strict=True)]
        assert got1 == [R.seed_part(c, m1[:16]) for c, (_, m1) in zip(contexts, proofs, strict=True)]
    honest = [b"ctx%d" % (i % 2) for i in range(n)]  # the contexts the devices proved under
    assert R.own_parts(PARAMS, R.parse(PARAMS, 0, [m0 for m0, _ in proofs]), honest) == \
        [m1[16:48] for _, m1 in proofs]  # the device's own part_0, the head of its message to server 1
    assert R.own_parts(PARAMS, R.parse(PARAMS, 1, [m1 for _, m1 in proofs]), honest) == \
        [m0[16:48] for m0, _ in proofs]


def test_own_parts_refuse_shares_of_other_parameters_or_other_counts() -> None:
    shares = R.parse(PARAMS, 0, [m0 for m0, _ in _proofs(2)])
    with pytest.raises(InvalidParameters, match="one context a device"):
        R.own_parts(PARAMS, shares, [b"c"])
    with pytest.raises(InvalidParameters, match="not parsed under"):
        R.own_parts(R.RangeParams(rows=7, bits=8, ring_bits=32), shares, [b"c", b"c"])
    with pytest.raises(InvalidParameters, match="context must be bytes"):
        R.own_parts(PARAMS, shares, [b"c", "c"])  # type: ignore[list-item]


def test_well_formed_takes_what_check_message_takes() -> None:
    """A batch of good messages, a short one, a long one, one with ``p`` as its last element, one
    with ``2^64 - 1`` as its first, one with ``p`` in its head (the part: not an element), a
    memoryview and a non-bytes item: one read gives :func:`check_message`'s verdict for each."""
    good = [m0 for m0, _ in _proofs(3)]
    size = PARAMS.message_bytes(0)
    head = 16 + R.PART_BYTES
    items: list[object] = [
        good[0], good[1][:-8], good[1] + bytes(8), good[2][:-8] + F.P.to_bytes(8, "little"),
        good[2][:head] + bytes([0xFF] * 8) + good[2][head + 8 :], F.P.to_bytes(8, "little") * 2 + good[0][16:],
        memoryview(good[1]), 12345, good[2],
    ]
    assert all(len(m) == size for m in good)
    got = R.well_formed(PARAMS, items)  # type: ignore[arg-type]
    want = []
    for m in items:
        try:
            R.check_message(PARAMS, 0, m)  # type: ignore[arg-type]
            want.append(True)
        except InvalidMessage:
            want.append(False)
    assert got.tolist() == want == [True, False, False, False, False, True, True, False, True]
    assert R.well_formed(PARAMS, []).shape == (0,)


def test_sketch_query_points_kernel_reduces_edge_words_as_python_integers() -> None:
    """:func:`secemb.fss._sketchproof_kernels.query_points` (the compiled ``_points``) on 128-bit
    integers at the edges -- 0, ``2^128 - 1``, multiples of the moduli and their neighbours, a high
    word above the moduli -- against Python's ``%`` (the reference's)."""
    if not kernels.available():
        pytest.skip("the compiled kernels do not run here")
    from secemb.fss._sketchproof_kernels import query_points

    d = S.SketchParams(250).gadget_nodes
    m1, m2 = F.P - d, F.P - d - 1
    values = [0, 1, m1 - 1, m1, m1 + 1, m2, 2**64 - 1, 2**64, m1 * 2**64, m1 * (2**67 - 1), 2**128 - 1,
              (2**64 - 1) * 2**64, m2 * m1 * 7 + 3] + [int.from_bytes(os.urandom(16), "little") for _ in range(20)]
    pairs = [(a, b) for a in values for b in values[::3]]
    words = np.array([[a % 2**64, a >> 64, b % 2**64, b >> 64] for a, b in pairs], np.uint64)
    out = np.empty((len(pairs), 2), np.uint64)
    query_points(words, np.uint64(d), out)
    want = [[d + a % m1, d + (a % m1 + 1 + b % m2) % m1] for a, b in pairs]
    assert out.tolist() == want
