"""Red team of session 36's changes (task R), tests only: each change against a reference written here --
the numpy backend's conversions summed in Python integers, hashlib, :func:`~secemb.fss.projections.project_each`
on the numpy backend of vectors formed in Python integers, numpy's verifier, or the records of commit 0a9989e
(the session's base) -- never the code under test.

* ``convert.convert_add`` of one array (N, ...) as destinations or sources (helper G3): refused with
  :class:`InvalidParameters`, nothing written, for words, sources or destinations of another count, dtype, byte
  order, size or layout (read-only, rows not contiguous, one axis, objects); every accepted layout (rows
  reversed, strided, 3-D, Fortran or broadcast sources, zero rows, zero width) gives the numpy conversions'
  sums and writes nothing around the destinations; against guard pages in a child, nothing read or written
  outside.
* ``convert.convert_accumulate``'s C-contiguous copies of a strided ``acc`` / ``key_t`` (lead): disjoint
  outputs in reversed, strided, Fortran and (U, G, w) views, ``fresh`` or not, equal to the per-word sums in
  Python integers over the whole buffer; overlapping outputs under ``fresh`` refused, nothing changed.
* ``_projection_kernels.canonical_part`` through ``project_affine`` and ``kernels.read_only`` through the hashing
  wrappers (lead): counts int8 / uint16 / uint64 past 2^63 / big-endian / strided, Fortran and reversed parts,
  equal to ``project_each`` of the vectors on numpy's path; bool counts refused; the caller's arrays keep their
  elements and their writeability.
* ``rangeproof.PreparedVerifier`` (helper B3): at 1, ``_VERIFIER_BLOCK`` and ``_VERIFIER_BLOCK + 1`` devices, a
  second and third ``messages()`` with other ring shares are a fresh numpy verifier's words (and ``decide``
  rejects exactly the devices whose shares changed), also from two threads at once; ``_checked_ring`` over
  every ring of ``RangeParams`` (4..58 bits) and every integer dtype, both byte orders; ``bounds._range_params``'
  shared instance holds only frozen fields and ints.
* Protocol level: session 35's bounded rounds with four attacks, now with the relay (whose masks go through
  the rows path) in both layouts, equal to the records of 0a9989e.

Findings (``xfail(strict)``, hazmat layer: a caller's own arguments, none reachable from bytes off the wire):

* S36-R1 (low, pre-existing, kept by 3501d1b): ``convert_accumulate`` into a ``key_acc`` whose last axis is not
  contiguous and which overlaps ``acc`` or ``key_t`` (``fresh=False``, allowed by the contract): the compiled
  path sums ``key_acc`` in a copy, and ``_contiguous`` checks the other outputs' overlap against that copy, not
  against ``key_acc`` -- so ``acc``/``key_t`` are summed in place or in a copy of their own, and the write-backs
  overwrite each other's increments (numpy's path is right).
* S36-R2 (low): a read-only strided ``acc`` -- both backends sum ``key_acc`` first, then raise numpy's
  ``ValueError`` (0a9989e's compiled path raised numba's ``TypingError`` with nothing written): not
  :class:`InvalidParameters`, and state changed before the refusal.
* S36-R3 (low, pre-existing in the list path): ``convert_add`` with sources that overlap other destinations
  (outside the contract, not refused): the compiled path copies sources whose rows are not contiguous before
  the kernel runs, numpy's reads them as they are rewritten -- other words on the two backends.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from guard_pages import run_guarded

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss import rangeproof as R
from secemb.fss.convert import convert, convert_accumulate, convert_add

sys.path[:0] = [str(Path(__file__).parents[1] / "fss")]  # range_batches: honest proofs
from range_batches import honest_device  # noqa: E402
from test_session35_redteam import C6D12E8_RUNS, _run  # noqa: E402  # session 35's rounds and records

BACKENDS = ["numpy", "numba"] if kernels.available() else ["numpy"]
COMPILED = pytest.mark.skipif(not kernels.compiled(), reason="the compiled kernels need numba and AES-NI")
TAG = "relay"


def _backend(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    monkeypatch.setattr(kernels, "BACKEND", backend)


def _words(n: int) -> np.ndarray:
    return np.frombuffer(os.urandom(16 * n), np.uint64).reshape(n, 2).copy()


def _ring(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return np.frombuffer(os.urandom(int(np.prod(shape)) * np.dtype(dtype).itemsize), dtype).reshape(shape).copy()


def _conv(words: np.ndarray, width: int, bits: int, tag: str) -> list[list[int]]:
    """The numpy backend's conversions (the reference of the compiled kernels), as Python ints."""
    saved, kernels.BACKEND = kernels.BACKEND, "numpy"
    try:
        return convert(words, width, bits, tag).tolist()
    finally:
        kernels.BACKEND = saved


# --- 1. convert_add of one array (N, ...) -------------------------------------------------------------------


def _add_ref(words: np.ndarray, src: list[list[int]], bits: int, negate: bool) -> list[list[int]]:
    vals, mod = _conv(words, len(src[0]) if src else 0, bits, TAG), 1 << bits
    return [[(s - v if negate else s + v) % mod for s, v in zip(row, conv, strict=True)]
            for row, conv in zip(src, vals, strict=True)]


N, W = 5, 7


def _refused_cases() -> dict[str, Callable[[], tuple[np.ndarray, np.ndarray, object, object]]]:
    """``(words, dst, src, target)``: ``target`` the arrays that must stay as they are."""
    def dst(dtype: object = np.uint32, shape: tuple[int, ...] = (N, W)) -> np.ndarray:
        return np.zeros(shape, dtype)

    def ro() -> np.ndarray:
        d = dst()
        d.flags.writeable = False
        return d

    wide = np.zeros((N, 2 * W), np.uint32)
    return {
        "words N+1": lambda: (_words(N + 1), dst(), None, None),
        "words N-1": lambda: (_words(N - 1), dst(), None, None),
        "words uint32": lambda: (_words(N).view(np.uint32)[:, :2].copy(), dst(), None, None),
        "words big-endian": lambda: (_words(N).astype(">u8"), dst(), None, None),
        "words (N, 3)": lambda: (np.zeros((N, 3), np.uint64), dst(), None, None),
        "src N+1": lambda: (_words(N), dst(), _ring((N + 1, W), np.uint32), None),
        "src N-1": lambda: (_words(N), dst(), _ring((N - 1, W), np.uint32), None),
        "src wider": lambda: (_words(N), dst(), _ring((N, W + 1), np.uint32), None),
        "src narrower": lambda: (_words(N), dst(), _ring((N, W - 1), np.uint32), None),
        "src uint64": lambda: (_words(N), dst(), _ring((N, W), np.uint64), None),
        "src int32": lambda: (_words(N), dst(), _ring((N, W), np.int32), None),
        "src big-endian": lambda: (_words(N), dst(), _ring((N, W), np.uint32).astype(">u4"), None),
        "src one axis": lambda: (_words(N), dst(), _ring((N * W,), np.uint32), None),
        "src list N-1": lambda: (_words(N), dst(), list(_ring((N - 1, W), np.uint32)), None),
        "dst big-endian": lambda: (_words(N), dst(">u4"), None, None),
        "dst int64": lambda: (_words(N), dst(np.int64), None, None),
        "dst float32": lambda: (_words(N), dst(np.float32), None, None),
        "dst object": lambda: (_words(N), np.zeros((N, W), object), None, None),
        "dst read-only": lambda: (_words(N), ro(), _ring((N, W), np.uint32), None),
        "dst rows strided": lambda: (_words(N), wide[:, ::2], None, wide),
        "dst Fortran": lambda: (_words(N), np.asfortranarray(dst()), None, None),
        "dst one axis": lambda: (_words(N), dst(shape=(N * W,)), None, None),
        "dst no rows, words 1": lambda: (_words(1), dst(shape=(0, W)), None, None),
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(_refused_cases()))
def test_convert_add_refuses_rows_it_cannot_write_and_writes_nothing(backend: str, case: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _backend(monkeypatch, backend)
    words, dst, src, target = _refused_cases()[case]()
    target = dst if target is None else target
    before = target.copy()
    src_before = None if src is None else [np.array(s, copy=True) for s in src]
    with pytest.raises(InvalidParameters, match="convert_add"):
        convert_add(words, TAG, dst, src)
    assert np.array_equal(target, before)
    if src is not None:
        assert all(np.array_equal(a, b) for a, b in zip(src, src_before, strict=True))


#: accepted layouts: (buffer rows, the destinations' view of a buffer-shaped array, the sources (made of the
#: dtype) or None); the buffer has a row before and after the destinations (or between them)
ACCEPTED: dict[str, tuple[int, Callable, Callable | None]] = {
    "C in place": (N + 2, lambda b: b[1 : N + 1], None),
    "3-D rows in place": (N + 2, lambda b: b[1 : N + 1].reshape(N, 1, W), None),
    "reversed rows, Fortran src": (N + 2, lambda b: b[N:0:-1], lambda d: np.asfortranarray(_ring((N, W), d))),
    "strided rows, reversed src": (2 * N + 1, lambda b: b[1 : 2 * N : 2], lambda d: _ring((N, W), d)[::-1]),
    "broadcast src": (N + 2, lambda b: b[1 : N + 1], lambda d: np.broadcast_to(_ring((1, W), d), (N, W))),
    "read-only list src": (N + 2, lambda b: b[1 : N + 1], lambda d: [
        np.frombuffer(os.urandom(W * np.dtype(d).itemsize), d) for _ in range(N)]),
    "src another shape": (N + 2, lambda b: b[1 : N + 1], lambda d: _ring((N, 1, W), d)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("case", list(ACCEPTED))
@pytest.mark.parametrize("negate", [False, True])
def test_convert_add_rows_in_any_accepted_layout_are_the_numpy_sums(backend: str, dtype: type, case: str,
                                                                   negate: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the destinations' elements change, each to its source plus (minus) the numpy conversion."""
    _backend(monkeypatch, backend)
    rows, view, make_src = ACCEPTED[case]
    buffer, words = _ring((rows, W), dtype), _words(N)
    dst, src = view(buffer), None if make_src is None else make_src(dtype)
    before = buffer.copy()
    values = [np.asarray(s).reshape(-1).tolist() for s in (dst if src is None else src)]
    want = _add_ref(words, values, 8 * np.dtype(dtype).itemsize, negate)
    convert_add(words, TAG, dst, src, negate=negate)
    assert dst.reshape(N, -1).tolist() == want
    written = np.zeros(buffer.size, bool)
    written[view(np.arange(buffer.size).reshape(buffer.shape)).reshape(-1)] = True
    assert np.array_equal(buffer.reshape(-1)[~written], before.reshape(-1)[~written])


@pytest.mark.parametrize("backend", BACKENDS)
def test_convert_add_of_no_rows_or_no_width_writes_nothing(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _backend(monkeypatch, backend)
    for dst, words in ((np.zeros((0, W), np.uint32), _words(0)), (np.zeros((N, 0), np.uint64), _words(N)),
                       (np.zeros((N, 3, 0), np.uint32), _words(N))):
        convert_add(words, TAG, dst, np.zeros_like(dst))
        convert_add(words, TAG, dst)
        assert dst.size == 0


_GUARDED_ADD = """
from secemb.fss import kernels
from secemb.fss.convert import convert, convert_add
words = np.frombuffer(os.urandom(16 * 9), np.uint64).reshape(9, 2)
count = 0
for dtype in (np.uint32, np.uint64):
    for width in (1, 7, 33):
        for at in ("end", "start"):
            src = place(np.frombuffer(os.urandom(9 * width * np.dtype(dtype).itemsize), dtype).reshape(9, width), at)
            for n in (9, 1):
                dst = place(np.zeros((n, width), dtype), at)
                convert_add(words[:n], "relay", dst, src[:n])
                kernels.BACKEND = "numpy"
                want = src[:n] + convert(words[:n], width, 8 * np.dtype(dtype).itemsize, "relay")
                kernels.BACKEND = "numba"
                assert np.array_equal(dst, want)
                convert_add(words[:n], "relay", dst, negate=True)
                assert np.array_equal(dst, src[:n])
                count += 1
print("ROWS", count)
"""


@COMPILED
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's mprotect")
def test_convert_add_rows_touch_nothing_outside_against_guard_pages() -> None:
    """Source and destination arrays whose first or last byte touches a ``PROT_NONE`` page: the rows' addresses
    computed from the array's own stay inside it (a SIGSEGV otherwise), and the words are numpy's."""
    assert run_guarded("import os\n" + _GUARDED_ADD) == ["ROWS", str(2 * 3 * 2 * 2)]


@COMPILED
@pytest.mark.xfail(strict=True, reason="S36-R3: sources overlapping other destinations are neither refused nor "
                                       "read as numpy's path reads them")
@pytest.mark.parametrize("rows", [True, False])
def test_s36_r3_sources_overlapping_other_destinations_are_refused_or_numpys(rows: bool) -> None:
    """S36-R3: ``src`` the transpose of ``dst`` (square rows, so the sizes match): ``src[i]`` overlaps every
    ``dst[j]``.  The contract forbids it (``src[i]`` may be ``dst[i]``, not another); it is not refused, and the
    compiled path copies the non-contiguous sources first while numpy's reads them live: expected
    :class:`InvalidParameters` or numpy's words."""
    start, words = _ring((W, W), np.uint32), _words(W)
    got = {}
    for backend in ("numpy", "numba"):
        kernels.BACKEND = backend
        try:
            dst = start.copy()
            convert_add(words, TAG, dst if rows else list(dst), dst.T if rows else list(dst.T))
            got[backend] = dst.tolist()
        except InvalidParameters:
            got[backend] = "refused"
        finally:
            kernels.BACKEND = "numba"
    assert got["numba"] == got["numpy"]


# --- 2. convert_accumulate's copies of strided outputs --------------------------------------------------------

M, KW, PERIOD, START, NW = 12, 3, 4, 5, 41
KEYS = (START + NW - 1) // PERIOD + 1  # 12


def _acc_reference(words: np.ndarray, bits: int, buffer: np.ndarray, views: Callable, live: np.ndarray,
                   fresh: bool) -> list[int]:
    """The buffer after the sums, per word in Python integers: ``views(a)`` gives ``(acc, key_acc, key_t)``
    of an array ``a`` of the buffer's shape -- applied to an index array, each output element's offset in the
    buffer, so that overlapping outputs add into the same words."""
    mem, mod = [int(v) for v in buffer.reshape(-1)], 1 << bits
    acc, key_acc, key_t = views(np.arange(buffer.size).reshape(buffer.shape))
    key_acc = None if key_acc is None else key_acc.reshape(-1, KW)
    key_t = None if key_t is None else key_t.reshape(-1)
    vals = _conv(words, KW, bits, "aggregation")
    if fresh and key_acc is not None:  # the keys whose first position is among the words: set, not added to
        for k in range(-(-START // PERIOD), KEYS):
            for at in key_acc[k]:
                mem[at] = 0
            if key_t is not None:
                mem[key_t[k]] = 0
    for i, conv in enumerate(vals):
        pos = START + i
        if not live[pos % M]:
            continue
        for e, v in enumerate(conv):
            if acc is not None:
                mem[acc[pos % M, e]] = (mem[acc[pos % M, e]] + v) % mod
            if key_acc is not None:
                mem[key_acc[pos // PERIOD, e]] = (mem[key_acc[pos // PERIOD, e]] + v) % mod
        if key_t is not None:
            mem[key_t[pos // PERIOD]] = (mem[key_t[pos // PERIOD]] + (int(words[i, 0]) & 1)) % (1 << 64)
    return mem


def _i64(a: np.ndarray) -> np.ndarray:
    """``a``'s words as int64 (a 64-bit ring buffer's, or the index array's: itself)."""
    return a if a.dtype == np.int64 else a.view(np.int64)


#: (ring bits, buffer words, views of a buffer-shaped array: (acc, key_acc, key_t)), outputs disjoint
DISJOINT: dict[str, tuple[int, int, Callable]] = {
    "reversed acc, key_acc's last axis reversed, strided key_t": (64, 400, lambda a: (
        a[: M * KW].reshape(M, KW)[::-1], a[M * KW : M * KW + KEYS * KW].reshape(KEYS, KW)[:, ::-1],
        _i64(a[100 : 100 + 2 * KEYS : 2]))),
    "Fortran acc, (U, G, w) key_acc reversed, transposed key_t": (64, 400, lambda a: (
        a[: M * KW].reshape(KW, M).T, a[M * KW : M * KW + KEYS * KW].reshape(4, 3, KW)[::-1],
        _i64(a[100 : 100 + KEYS].reshape(3, 4).T))),
    "strided acc, key_acc rows apart (32-bit)": (32, 400, lambda a: (
        a[: 2 * M * KW].reshape(M, 2 * KW)[:, ::2], a[100 : 100 + 2 * KEYS * KW].reshape(KEYS, 2 * KW)[:, :KW],
        None)),
    "no acc, key_acc's last axis strided, key_t reversed": (64, 400, lambda a: (
        None, a[: 2 * KEYS * KW].reshape(KEYS, 2 * KW)[:, 1::2], _i64(a[100 : 100 + KEYS][::-1]))),
}


def _accumulate(case: tuple[int, int, Callable], fresh: bool, seed_words: np.ndarray,
                live: np.ndarray) -> tuple[np.ndarray, list[int]]:
    bits, size, views = case
    dtype = np.uint32 if bits == 32 else np.uint64
    buffer = _ring((size,), dtype)
    want = _acc_reference(seed_words, bits, buffer, views, live, fresh)
    acc, key_acc, key_t = views(buffer)
    convert_accumulate(seed_words, "aggregation", acc, START, live, key_acc=key_acc, period=PERIOD, key_t=key_t,
                       fresh=fresh)
    return buffer, want


def _live() -> np.ndarray:
    live = np.ones(M, bool)
    live[[2, 7]] = False
    return live


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(DISJOINT))
@pytest.mark.parametrize("fresh", [False, True])
def test_accumulate_into_disjoint_views_is_the_python_sums(backend: str, case: str, fresh: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs holding other values (so that ``fresh`` shows): every word of the buffer as the per-word sums say
    -- the strided outputs' copies written back where they came from, and nothing else touched."""
    _backend(monkeypatch, backend)
    buffer, want = _accumulate(DISJOINT[case], fresh, _words(NW), _live())
    assert [int(v) for v in buffer] == want


#: outputs over the same memory (``fresh=False``, which the contract allows): the findings' cases
OVERLAPPING: dict[str, tuple[int, int, Callable]] = {
    "acc and key_acc (last axis reversed) the same words": (32, 200, lambda a: (
        a[: M * KW].reshape(M, KW), a[: KEYS * KW].reshape(KEYS, KW)[:, ::-1], None)),
    "strided acc over key_acc (last axis strided)": (64, 200, lambda a: (
        a[: 2 * M * KW].reshape(M, 2 * KW)[:, ::2], a[: 2 * KEYS * KW].reshape(KEYS, 2 * KW)[:, ::2], None)),
    "key_t over key_acc (last axis strided)": (64, 200, lambda a: (
        None, a[: 2 * KEYS * KW].reshape(KEYS, 2 * KW)[:, ::2], _i64(a[:KEYS]))),
}


@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.xfail(
    strict=True, reason="S36-R1: overlapping outputs' copies overwrite each other's sums")) if b == "numba" else b
    for b in BACKENDS])
@pytest.mark.parametrize("case", list(OVERLAPPING))
def test_s36_r1_overlapping_outputs_with_a_strided_key_acc_are_the_python_sums(
        backend: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """S36-R1: ``key_acc``'s last axis not contiguous, overlapping ``acc`` or ``key_t``.  The compiled path
    sums ``key_acc`` in a copy, and ``_contiguous`` tests the others' overlap against the copy (none), so each
    is written back over the other's increments.  numpy's path (and the contract: ring sums are increments)
    gives the per-word sums."""
    _backend(monkeypatch, backend)
    buffer, want = _accumulate(OVERLAPPING[case], False, _words(NW), _live())
    assert [int(v) for v in buffer] == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(OVERLAPPING))
def test_fresh_sums_into_overlapping_outputs_are_refused_before_anything(backend: str, case: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _backend(monkeypatch, backend)
    bits, size, views = OVERLAPPING[case]
    buffer = _ring((size,), np.uint32 if bits == 32 else np.uint64)
    before = buffer.copy()
    acc, key_acc, key_t = views(buffer)
    with pytest.raises(InvalidParameters, match="overlap"):
        convert_accumulate(_words(NW), "aggregation", acc, START, _live(), key_acc=key_acc, period=PERIOD,
                           key_t=key_t, fresh=True)
    assert np.array_equal(buffer, before)


@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.xfail(
    strict=True, reason="S36-R2: key_acc summed, then numpy's ValueError")) for b in BACKENDS])
def test_s36_r2_a_read_only_acc_is_refused_before_anything_is_summed(backend: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """S36-R2: a read-only strided ``acc`` with a ``key_acc``: expected :class:`InvalidParameters` and
    ``key_acc`` as it was (the compiled path now sums into a writeable copy of ``acc`` and fails writing it
    back, after ``key_acc``'s sums; numpy's sums ``key_acc`` before it reaches ``acc``)."""
    _backend(monkeypatch, backend)
    acc = np.zeros((M, 2 * KW), np.uint32)[:, ::2]
    acc.flags.writeable = False
    key_acc = np.zeros((KEYS, KW), np.uint32)
    with pytest.raises(InvalidParameters):
        convert_accumulate(_words(NW), "aggregation", acc, START, _live(), key_acc=key_acc, period=PERIOD)
    assert not key_acc.any()
