"""The bounded walk's both sums with masked vector tails (issue 34, session 32, helper S).

``sum_keys1`` / ``sum_keys4`` (:mod:`secemb.fss._aesni`) add 1 to ``SUM_VECTORS`` vectors of each
value a call, the last one masked to its first ``lanes`` lanes, and write (``store``) or add each
key's sums; :func:`secemb.fss._numba_kernels._both_by_class` plans its calls over a value's width
(``_sum_plan``: one call of five 512-bit vectors for 65 uint32), writes a fresh key's first sums
over its stale values (no clearing pass) and counts a group's control bits in locals.

Checked against sums in Python integers (the specification, not the kernel): the intrinsic of both
vector widths (256 and 512 bits, whichever the host uses) for every vector count and several lane
counts, with guard values past the last lane that must stay; ``convert_accumulate`` on both
backends for widths 1, 15, 16, 17, 64, 65, 130 (uint32) and 1, 7, 8, 9, 32, 33, 65 (uint64) into
stale arrays, with and without ``fresh``; the plan's cover of every width; and the refusal of a
``fresh`` call into overlapping arrays.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.convert import convert, convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG
from test_s26_payload_sums import _python_sums  # per-word sums in Python integers (pytest puts tests/fss on sys.path)

BACKENDS = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")),
]
compiled = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")

#: guard words after the lanes an intrinsic call may touch
GUARD = 20


def _caller(size: int, bits: int) -> Callable:
    """A compiled function calling the ``sum_keys`` intrinsic of ``size`` keys and ``bits``-bit vectors."""
    from numba import njit

    from secemb.fss._aesni import _sum_keys

    intrinsic = _sum_keys(size, bits)

    @njit
    def call(vals, acc, rows, keys, count, per, vectors, lanes, store):  # noqa: ANN001, ANN202, PLR0913
        intrinsic(np.int64(vals.ctypes.data), np.int64(vals.strides[0]), np.int64(acc.ctypes.data),
                  np.int64(acc.strides[0]), np.int64(rows.ctypes.data), np.int64(keys.ctypes.data), count, per,
                  vectors, lanes, store, vals[0, 0])

    return call


@compiled
@pytest.mark.parametrize("bits", [256, 512])
@pytest.mark.parametrize("size", [1, 4])
@pytest.mark.parametrize("ring_bits", [32, 64])
def test_sum_keys_adds_or_writes_exactly_the_masked_lanes(bits: int, size: int, ring_bits: int) -> None:
    """For every vector count of the width and 1, half and all lanes of the last vector, ``per``
    words a position (``size`` and ``size + 1``), repeated rows: each row gets the sum of its
    positions' values and each key its values' sum (added to its stale values, or written over
    them), over exactly ``(vectors - 1) L + lanes`` words; the guard words after them stay."""
    from secemb.fss._aesni import _most_vectors

    dtype = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
    lanes_a_vector, mod = bits // ring_bits, 1 << ring_bits
    call = _caller(size, bits)
    gen = np.random.default_rng([bits, size, ring_bits, 32])
    width = _most_vectors(bits) * lanes_a_vector + GUARD
    for per in (size, size + 1):
        for count in (0, 1, 7):
            for vectors in range(1, _most_vectors(bits) + 1):
                for lanes in sorted({1, lanes_a_vector // 2, lanes_a_vector}):
                    for store in (0, 1):
                        n = (vectors - 1) * lanes_a_vector + lanes
                        vals = gen.integers(0, mod, (max(1, count * per), width), dtype=np.uint64).astype(dtype)
                        rows = np.zeros(max(1, count * per), np.int64)
                        rows[::per] = gen.integers(0, 3, len(rows[::per]))  # the position's row at rows[per i]
                        acc = gen.integers(0, mod, (3, width), dtype=np.uint64).astype(dtype)
                        keys = gen.integers(0, mod, (size, width), dtype=np.uint64).astype(dtype)
                        want_acc = [[int(x) for x in r] for r in acc]
                        want_keys = [[0 if store and e < n else int(x) for e, x in enumerate(k)] for k in keys]
                        for i in range(count):
                            for j in range(size):
                                v = vals[per * i + j]
                                for e in range(n):
                                    want_acc[rows[per * i]][e] = (want_acc[rows[per * i]][e] + int(v[e])) % mod
                                    want_keys[j][e] = (want_keys[j][e] + int(v[e])) % mod
                        addresses = keys.ctypes.data + keys.strides[0] * np.arange(size, dtype=np.int64)
                        call(vals, acc, rows, addresses, count, per, vectors, lanes, store)
                        assert acc.tolist() == want_acc, (per, count, vectors, lanes, store)
                        assert keys.tolist() == want_keys, (per, count, vectors, lanes, store)


#: run in a child process: each array's last lane ends a page whose next page is PROT_NONE, so that a
#: load or store past the lanes faults (the masked ones do not: masked-off lanes never fault)
_GUARDED = """
import ctypes, mmap
import numpy as np
from numba import njit
from secemb.fss._aesni import SUM_BITS, _sum_keys

libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
page, keep = mmap.PAGESIZE, []


def at_page_end(values):
    buf = mmap.mmap(-1, 2 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(base + page, page, 0) == 0
    keep.append(buf)
    out = np.frombuffer(buf, values.dtype, values.size, page - values.nbytes).reshape(values.shape)
    out[...] = values
    return out


def caller(intrinsic):
    @njit
    def call(vals, acc, rows, keys, vectors, lanes, store):
        intrinsic(np.int64(vals.ctypes.data), np.int64(vals.strides[0]), np.int64(acc.ctypes.data),
                  np.int64(acc.strides[0]), np.int64(rows.ctypes.data), np.int64(keys.ctypes.data), 1,
                  vals.shape[0], vectors, lanes, store, vals[0, 0])

    return call


for size in (1, 4):
    call = caller(_sum_keys(size))
    for dtype in (np.uint32, np.uint64):
        lanes_a_vector = SUM_BITS // (8 * np.dtype(dtype).itemsize)
        for n in (1, lanes_a_vector - 1, lanes_a_vector + 1, 2 * lanes_a_vector - 3):
            vectors, lanes = -(-n // lanes_a_vector), n - (-(-n // lanes_a_vector) - 1) * lanes_a_vector
            vals = at_page_end(np.arange(1, size * n + 1, dtype=dtype).reshape(size, n))
            acc = at_page_end(np.full((1, n), 5, dtype))
            keys = [at_page_end(np.full(n, 7, dtype)) for _ in range(size)]
            addresses = np.array([k.ctypes.data for k in keys], np.int64)
            for store in (0, 1):
                call(vals, acc, np.zeros(size, np.int64), addresses, vectors, lanes, store)
            assert acc.tolist() == [(5 + 2 * vals.sum(axis=0, dtype=np.uint64)).astype(dtype).tolist()]
            assert all(k.tolist() == vals[j].tolist() for j, k in enumerate(keys))
print("no fault")
"""


@compiled
def test_sum_keys_touches_no_word_past_the_lanes() -> None:
    """Values, a row and keys that end a page followed by an inaccessible one, for lane counts that
    end inside a vector: both calls (add, then write) finish without a fault and with the sums."""
    from _server_template import run_script  # a child forked from the suite's warm template where it can be

    done = run_script(_GUARDED, timeout=600)
    assert done.returncode == 0 and "no fault" in done.stdout, (done.returncode, done.stderr[-2000:])


@compiled
def test_sum_plan_covers_every_width_in_the_fewest_calls() -> None:
    """``_sum_plan(w, size)``: consecutive calls from word 0 to ``w``, each of at most
    ``SUM_VECTORS`` vectors with a last vector of 1 to ``L`` lanes (all ``L`` but in the last
    call), as few calls as ``SUM_VECTORS`` allow, their vector counts within one of each other."""
    from secemb.fss._aesni import SUM_BITS, SUM_VECTORS
    from secemb.fss._numba_kernels import _sum_plan

    for size in (4, 8):
        lanes_a_vector = SUM_BITS // (8 * size)
        for w in range(1, 300):
            plan = _sum_plan(w, size).tolist()
            vectors = -(-w // lanes_a_vector)
            assert len(plan) == -(-vectors // SUM_VECTORS)
            assert max(p[1] for p in plan) - min(p[1] for p in plan) <= 1
            e0 = 0
            for k, (first, nv, lanes) in enumerate(plan):
                assert first == e0 and 1 <= nv <= SUM_VECTORS and 1 <= lanes <= lanes_a_vector
                assert lanes == lanes_a_vector or k == len(plan) - 1
                e0 += (nv - 1) * lanes_a_vector + lanes
            assert e0 == w


# (ring bits, width): around the vector and call sizes of both rings, and the walk's 65 words
WIDTHS = [(32, w) for w in (1, 15, 16, 17, 64, 65, 130)] + [(64, w) for w in (1, 7, 8, 9, 32, 33, 65)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("ring_bits", "width"), WIDTHS)
def test_class_order_both_sums_equal_python_sums_for_every_width(backend: str, ring_bits: int, width: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Class order with both sums (``M = 4 period``, seven keys a class: groups of four and three,
    first and last keys cut, a dead class) into arrays holding stale values: with ``fresh`` the
    keys that start among the words are set to their sums (the dead class's to zero), the one cut at
    ``start`` is added to; without it every key is added to.  Rows are added to either way."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    period, big_m, start = 8, 32, 3
    n = 7 * big_m - start - 2  # 28 keys, seven a class; the first and last cut
    gen = np.random.default_rng([ring_bits, width, 3201])
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = gen.random(big_m) < 0.75
    live[8:16] = False  # a dead class: its keys have no live position
    dtype = np.dtype(np.uint32 if ring_bits == 32 else np.uint64)
    mod, keys = 1 << ring_bits, (start + n - 1) // period + 1
    vals = convert(words, width, ring_bits, AGGREGATION_TAG)
    rows, by_key, ones = _python_sums(words, vals, start, period, live, ring_bits)
    acc0 = gen.integers(0, mod, (big_m, width), dtype=np.uint64).astype(dtype)
    key0 = gen.integers(0, mod, (keys, width), dtype=np.uint64).astype(dtype)
    t0 = gen.integers(0, 1000, keys)
    first = -(-start // period)  # keys from here on start among the words
    want_rows = [[(int(a) + b) % mod for a, b in zip(r0, r, strict=True)] for r0, r in zip(acc0, rows, strict=True)]
    for fresh in (False, True):
        kept = [not fresh or k < first for k in range(keys)]
        want_keys = [[(int(a) * kept[k] + b) % mod for a, b in zip(key0[k], by_key[k], strict=True)]
                     for k in range(keys)]
        want_ones = [int(t0[k]) * kept[k] + ones[k] for k in range(keys)]
        acc, key_acc, key_t = acc0.copy(), key0.copy(), t0.copy()
        convert_accumulate(words, AGGREGATION_TAG, acc, start, live, key_acc=key_acc, period=period, key_t=key_t,
                           fresh=fresh)
        assert acc.tolist() == want_rows
        assert key_acc.tolist() == want_keys and key_t.tolist() == want_ones
        assert all(not any(key_acc[k]) for k in range(first, keys) if fresh and k % 4 == 1)  # the dead class


@pytest.mark.parametrize("backend", BACKENDS)
def test_fresh_sums_into_overlapping_arrays_are_refused(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fresh`` sets the key sums, so ``acc``, ``key_acc`` and ``key_t`` over the same memory are
    refused (nothing written); without ``fresh`` the sums are increments and the same arrays are
    taken (``test_session28_redteam_kernels``)."""
    monkeypatch.setattr(kernels, "BACKEND", backend)
    gen = np.random.default_rng(3202)
    period, big_m, width, n = 8, 32, 9, 256
    words = gen.integers(0, 2**64, (n, 2), dtype=np.uint64)
    live = np.ones(big_m, bool)
    keys = n // period
    buf = gen.integers(0, 2**63, big_m * width + keys * width, dtype=np.uint64)
    before = buf.copy()
    acc, key_acc = buf[: big_m * width].reshape(big_m, width), buf[-keys * width :].reshape(keys, width)
    for kw in ({"key_acc": buf[: keys * width].reshape(keys, width)},
               {"key_acc": key_acc, "key_t": buf[:keys].view(np.int64)},
               {"key_acc": key_acc, "key_t": buf[-keys:].view(np.int64)}):
        with pytest.raises(InvalidParameters, match="must not overlap"):
            convert_accumulate(words, AGGREGATION_TAG, acc, 0, live, period=period, fresh=True, **kw)
        assert np.array_equal(buf, before)
    convert_accumulate(words, AGGREGATION_TAG, acc, 0, live, key_acc=buf[: keys * width].reshape(keys, width),
                       period=period)
    assert not np.array_equal(buf, before)
