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

Cost: the file compiles 49 kernel signatures, every one of them also compiled by ``tests/fss`` and the session
28/32/35 kernel review files (measured: the dispatchers' signatures after each run in process), so none cold in
CI; where a case would hand a kernel a new layout (a strided ``acc`` that overlaps ``key_acc``) the kernel is
spied on instead of run.  About 11 s on 2 shared cores with a warm cache.

Findings (hazmat layer: a caller's own arguments, none reachable from bytes off the wire; each was a strict xfail
asserting the safe behaviour; R1, R2 and R3's rows form fixed by the lead in session 36, R3's list form by helper F
in session 40, so those tests now pass):

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
  the kernel runs, numpy's reads them as they are rewritten -- other words on the two backends.  Fixed for one
  array of sources in session 36 (refused where it overlapped the destinations and was not them); in session
  40 (helper F) for every form of ``dst`` and ``src``: each source's byte range against every destination's
  (one sort, two binary searches), refused unless it meets none or exactly its own destination's bytes.
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


def _overlapping_cases() -> dict[str, Callable[[np.ndarray], tuple[object, object]]]:
    """``(dst, src)`` over one square buffer (W, W), each form (one array or a list) of each: every case
    has a source over a destination not its own, or over part of its own."""
    def form(rows: bool, a: np.ndarray) -> object:
        return a if rows else list(a)

    cases: dict[str, Callable[[np.ndarray], tuple[object, object]]] = {}
    for dst_rows in (True, False):
        for src_rows in (True, False):
            name = f"dst {'array' if dst_rows else 'list'}, src {'array' if src_rows else 'list'}"
            # src the transpose of dst: src[i] (column i) over every dst[j]
            cases[f"{name}, transposed"] = lambda b, d=dst_rows, s=src_rows: (form(d, b), form(s, b.T))
            # src[i] is dst[i + 1] (rows rolled): C-contiguous, each over one other destination only
            cases[f"{name}, rolled"] = lambda b, d=dst_rows, s=src_rows: (form(d, b[:-1]), form(s, b[1:]))
    # src[i] half over dst[i], half over dst[i + 1]: contiguous, shifted by half a row
    cases["list, shifted half a row"] = lambda b: (list(b[:-1]), [b.reshape(-1)[W // 2 + i * W:][:W]
                                                                  for i in range(W - 1)])
    # src[i] over part of dst[i] only (the buffer's rows twice as wide: dst the left halves)
    cases["list, shifted within its own"] = lambda b: ([r[: W // 2] for r in b], [r[1 : W // 2 + 1] for r in b])
    return cases


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(_overlapping_cases()))
def test_s36_r3_sources_overlapping_other_destinations_are_refused(backend: str, case: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """S36-R3: sources over destinations not their own (or over part of their own), in every form of ``dst``
    and ``src``: the contract forbids it (``src[i]`` may be ``dst[i]``, not another), and the compiled path
    copied non-contiguous sources first while numpy's read them live -- other words on the two backends.
    Now refused with :class:`InvalidParameters`, nothing written."""
    _backend(monkeypatch, backend)
    buffer = _ring((W, W), np.uint32)
    before = buffer.copy()
    dst, src = _overlapping_cases()[case](buffer)
    with pytest.raises(InvalidParameters, match="convert_add: a source must be its own destination"):
        convert_add(_words(len(dst)), TAG, dst, src)
    assert np.array_equal(buffer, before)


#: sources allowed over the destinations: (dst, src) of a (W, W) buffer, src[i] spanning exactly dst[i]'s bytes
OWN: dict[str, Callable[[np.ndarray], tuple[object, object]]] = {
    "array, list of its rows": lambda b: (b, list(b)),
    "list, the array": lambda b: (list(b), b),
    "array, another view of it": lambda b: (b, b[:]),
    "list, each row reversed": lambda b: (list(b), [r[::-1] for r in b]),
    "array, rows reversed within": lambda b: (b, b[:, ::-1]),
    "list, rows as (W, 1) columns": lambda b: (list(b), [r.reshape(W, 1) for r in b]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(OWN))
@pytest.mark.parametrize("negate", [False, True])
def test_s36_r3_sources_over_their_own_destination_are_read_whole_first(backend: str, case: str, negate: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """What S36-R3's refusal keeps: ``src[i]`` over exactly ``dst[i]``'s bytes, in its order or another, is
    read whole before ``dst[i]`` is written (numpy's ufuncs buffer an overlapping input, the compiled path copies
    a non-contiguous source): each row its source's values, in the source's order, plus the conversion."""
    _backend(monkeypatch, backend)
    buffer, words = _ring((W, W), np.uint32), _words(W)
    dst, src = OWN[case](buffer)
    values = [np.asarray(x).reshape(-1).tolist() for x in src]
    convert_add(words, TAG, dst, src, negate=negate)
    assert buffer.tolist() == _add_ref(words, values, 32, negate)


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


@pytest.mark.parametrize("backend", BACKENDS)
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


@COMPILED
def test_a_strided_acc_over_key_acc_or_key_t_takes_numpys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a strided ``acc`` or ``key_t`` overlaps another output, the compiled kernel is not called: a copy's
    write-back would drop the other's increments (S36-R1's fix), and the caller's strided memory would be a
    signature of its own -- numpy's path sums them (its sums of these cases checked above against Python's).
    Spied on: the kernel must not be reached."""
    from secemb.fss import _numba_kernels

    handed: list = []
    monkeypatch.setattr(_numba_kernels, "convert_accumulate", lambda *args: handed.append(args))
    buf = np.zeros(400, np.uint64)
    acc = buf[: 2 * M * KW].reshape(M, 2 * KW)[:, ::2]
    key_acc = buf[: KEYS * KW].reshape(KEYS, KW)
    convert_accumulate(_words(NW), "aggregation", acc, START, _live(), key_acc=key_acc, period=PERIOD)
    key_t = buf[300 : 300 + 2 * KEYS : 2].view(np.int64)
    convert_accumulate(_words(NW), "aggregation", buf[300 : 300 + M * KW].reshape(M, KW), START, _live(),
                       key_acc=np.zeros((KEYS, KW), np.uint64), period=PERIOD, key_t=key_t)
    assert handed == []
    assert buf.any()  # numpy's path summed them


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


@pytest.mark.parametrize("backend", BACKENDS)
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


# --- 3. canonical_part through project_affine; read_only through the hashing wrappers ------------------------


def _count_layouts(slots: int) -> list[np.ndarray]:
    """Counts of every integer dtype and layout a caller may pass, negatives and values past 2^63 among them."""
    signed = np.frombuffer(os.urandom(8 * slots), np.int64) % 201 - 100
    big = np.frombuffer(os.urandom(8 * slots), np.uint64) | np.uint64(1 << 63)  # past int64's range
    wide = np.zeros(2 * slots, np.int64)
    wide[::2] = signed
    return [signed.astype(np.int8), np.abs(signed).astype(np.uint16), big, signed.astype(">i8"), wide[::2],
            signed.astype(np.int32)[::-1].copy()[::-1], signed]


def _affine_parts(dtype: type, slots: int, width: int, tail: int) -> list[tuple]:
    """One part a count layout, their base, words and tail in Fortran, reversed and strided views (writeable:
    a server's parts are writeable or read-only alike, and read-only ones would compile other signatures)."""
    parts = []
    for i, count in enumerate(_count_layouts(slots)):
        base, words = _ring((slots, width), dtype), _ring((slots, width), dtype)
        t = _ring((2 * tail,), dtype)[::2]
        if i % 3 == 1:
            base, words = np.asfortranarray(base), words[::-1].copy()[::-1]
        elif i % 3 == 2:
            base = np.repeat(base, 2, axis=1)[:, ::2]
        parts.append((base, count, words, t))
    return parts


def _affine_reference(seeds: list[bytes], negate: bool, parts: list[tuple], rows: int, dtype: type,
                      monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """``project_each`` on numpy's path of the vectors formed in Python integers modulo ``2^k``."""
    from secemb.fss.projections import project_each

    mod = 1 << (8 * np.dtype(dtype).itemsize)
    x = []
    for base, count, words, tail in parts:
        v = [(int(base[a, e]) + int(count[a]) * int(words[a, e])) % mod for a in range(base.shape[0])
             for e in range(base.shape[1])]
        x.append([(-w) % mod if negate else w for w in v] + [int(t) for t in tail])
    with monkeypatch.context() as m:
        m.setattr(kernels, "BACKEND", "numpy")
        return project_each(seeds, np.array(x, dtype), rows).tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_project_affine_of_every_count_dtype_and_layout_is_project_each(backend: str, dtype: type,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seven devices whose passes mix every count dtype (int8, uint16, uint64 past 2^63, big-endian int64,
    strided, reversed int32) and part layout, negated and not, one seed and a seed a device: the words of
    ``project_each`` (numpy) of the vectors in Python integers; the callers' arrays keep their elements and
    flags."""
    from secemb.fss.projections import project_affine

    parts = _affine_parts(dtype, 3, 5, 4)
    kept = [[(a.copy(), a.flags.writeable, a.flags.c_contiguous, a.dtype) for a in p] for p in parts]
    for seeds in ([os.urandom(16)] * len(parts), [os.urandom(16) for _ in parts]):
        for negate in (False, True):
            want = _affine_reference(seeds, negate, parts, 6, dtype, monkeypatch)
            _backend(monkeypatch, backend)
            got = project_affine(seeds, negate, parts, rows=6)
            assert got.dtype == dtype and got.tolist() == want
    for part, was in zip(parts, kept, strict=True):
        for a, (copy, writeable, contiguous, dt) in zip(part, was, strict=True):
            assert np.array_equal(a, copy) and a.flags.writeable == writeable
            assert a.flags.c_contiguous == contiguous and a.dtype == dt


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("at", [0, 3, 6])
def test_project_affine_refuses_a_bool_count(backend: str, at: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bool count (``canonical_part`` would cast it to 0/1) stays refused, wherever it is in the batch."""
    from secemb.fss.projections import project_affine

    _backend(monkeypatch, backend)
    parts = _affine_parts(np.uint32, 3, 5, 4)
    base, count, words, tail = parts[at]
    parts[at] = (base, count.astype(bool), words, tail)
    with pytest.raises(InvalidParameters):
        project_affine([os.urandom(16)] * len(parts), False, parts, rows=4)


def _spy(monkeypatch: pytest.MonkeyPatch, module: object, name: str, seen: list) -> None:
    """Replace the kernel ``module.name`` with a recorder of its arguments' numba types (nothing compiled)."""
    numba = pytest.importorskip("numba")

    def record(*args: object) -> None:
        seen.append(tuple(str(numba.typeof(a)) for a in args))

    monkeypatch.setattr(module, name, record)


@COMPILED
def test_the_wrappers_hand_their_kernels_one_type_whatever_the_callers_layout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``shake128_many``, ``hmac_sha256_many`` and ``project_affine`` pass their kernels (spied on: no
    kernel runs, none compiles) has one numba type for rows / keys / parts in every layout and count dtype a
    caller may use (writeable ones: writability is passed on for parts): one signature each, no cold compile a
    layout."""
    from secemb.fss import _keccak, _projection_kernels
    from secemb.fss.hashing import hmac_sha256_many, shake128_many
    from secemb.fss.projections import project_affine

    rows = _ring((6, 40), np.uint8)
    frozen = rows.copy()
    frozen.flags.writeable = False
    layouts = [rows, frozen, np.asfortranarray(rows), np.repeat(rows, 2, axis=1)[:, ::2], rows[::-1].copy()[::-1],
               np.broadcast_to(rows[:1], rows.shape)]
    shake: list = []
    _spy(monkeypatch, _keccak, "_shake_rows", shake)
    for a in layouts:
        shake128_many(b"prefix", a, 32)
    assert len({s[1] for s in shake}) == 1, shake
    if kernels.sha_compiled():
        from secemb.fss import _shani

        hmacs: list = []
        _spy(monkeypatch, _shani, "_hmac_rows", hmacs)
        for a in layouts:
            hmac_sha256_many(a[:, :32], b"head", a)
            hmac_sha256_many(a[:1, :16], b"head", a)
        assert len({(h[0], h[2]) for h in hmacs}) == 1, hmacs
    passes: list = []
    kernel = ("affine_tile_products" if _projection_kernels.tiles() else
              "affine_dot_products" if _projection_kernels.DOTS else "affine_vectors")
    _spy(monkeypatch, _projection_kernels, kernel, passes)
    monkeypatch.setattr(_projection_kernels.Products, "project", lambda *args: None)
    for dtype in (np.uint32, np.uint64):
        parts = _affine_parts(dtype, 3, 5, 4)
        project_affine([os.urandom(16)] * len(parts), False, parts, rows=4)
        assert len({p[0] for p in passes}) == 1, {p[0] for p in passes}
        passes.clear()


@pytest.mark.parametrize("backend", BACKENDS)
def test_hashing_wrappers_leave_the_callers_rows_as_they_were(backend: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``read_only`` makes a read-only view or copy, never the caller's array read-only: after SHAKE-128 and
    HMAC rows (hashlib's bytes) of every layout, each array keeps its elements and its writeability."""
    import hashlib
    import hmac

    from secemb.fss.hashing import hmac_sha256_many, shake128_many

    _backend(monkeypatch, backend)
    rows = _ring((5, 48), np.uint8)
    wide = np.repeat(rows, 2, axis=1)
    layouts = [rows.copy(), np.asfortranarray(rows), wide[:, ::2], rows[::-1].copy()[::-1], rows[:, 3:40]]
    for a in layouts:
        copy, writeable = a.copy(), a.flags.writeable
        assert [bytes(r) for r in shake128_many(b"pre", a, 40)] == [
            hashlib.shake_128(b"pre" + bytes(r)).digest(40) for r in copy]
        keys = a[:, :32]
        assert [bytes(r) for r in hmac_sha256_many(keys, b"hd", a)] == [
            hmac.digest(bytes(k), b"hd" + bytes(r), "sha256") for k, r in zip(keys, copy, strict=True)]
        assert np.array_equal(a, copy) and a.flags.writeable == writeable
        a[0, 0] ^= 1  # still the caller's to write
    from secemb.fss.kernels import read_only

    for a in layouts:
        view = read_only(a)
        assert not view.flags.writeable and view.flags.c_contiguous and np.array_equal(view, a)
        assert a.flags.writeable


# --- 4. PreparedVerifier: blocks, a second and third call, threads; the ring check; the cached RangeParams -----


@pytest.fixture(scope="module")
def provers() -> tuple[R.RangeParams, list[bytes], list]:
    """``_VERIFIER_BLOCK + 1`` honest devices' ring shares and proofs (a small relation: 2 rows of 6 bits)."""
    params = R.RangeParams(2, 6, 32)
    gen = np.random.default_rng(3604)
    contexts = [b"device %03d" % d for d in range(R._VERIFIER_BLOCK + 1)]
    return params, contexts, [honest_device(params, gen, c) for c in contexts]


@COMPILED
@pytest.mark.parametrize("n", [1, R._VERIFIER_BLOCK, R._VERIFIER_BLOCK + 1])
def test_prepared_messages_of_other_ring_shares_are_a_fresh_numpy_verifiers(
        n: int, provers: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """One prepared verifier a server, called with the honest shares, then shares changed at the first, a
    middle and the last device, then the honest ones, then the changed ones: each call is numpy's
    ``verifier_messages`` of those shares (a fresh verifier: nothing of an earlier call carried), and
    ``decide`` rejects exactly the changed devices."""
    params, contexts, devices = provers
    contexts, devices = contexts[:n], devices[:n]
    shares = [R.parse(params, p, [m[p] for _, _, m in devices]) for p in (0, 1)]
    honest = (np.array([a for a, _, _ in devices]), np.array([b for _, b, _ in devices]))
    changed = sorted({0, n // 2, n - 1})
    other = (honest[0].copy(), honest[1])
    other[0][changed, 1] = (other[0][changed, 1] + 5) % (1 << 32)
    query = os.urandom(16)
    want = {}
    with monkeypatch.context() as m:
        m.setattr(kernels, "BACKEND", "numpy")
        for name, ring in (("honest", honest), ("other", other)):
            want[name] = [R.verifier_messages(params, p, shares[p], ring[p], contexts, query) for p in (0, 1)]
    prepared = [R.prepare_verifier(params, p, shares[p], contexts, query) for p in (0, 1)]
    assert prepared[0].blocks is not None and len(prepared[0].blocks) == -(-n // R._VERIFIER_BLOCK)
    calls = [(name, [prepared[p].messages(ring[p]) for p in (0, 1)])
             for name, ring in (("honest", honest), ("other", other), ("honest", honest), ("other", other))]
    for name, got in calls:  # compared after all four calls: no call's answer is a later call's array
        assert all(np.array_equal(g, w) for g, w in zip(got, want[name], strict=True)), name
        accepted = R.decide(params, *got).tolist()
        assert accepted == [name == "honest" or d not in changed for d in range(n)], name


@COMPILED
def test_prepared_messages_from_two_threads_at_once_are_each_calls_own(provers: tuple) -> None:
    """Two threads calling one prepared verifier with different ring shares, 20 times each: every answer is
    the one the same call gives alone (no scratch shared between calls)."""
    params, contexts, devices = provers
    shares = R.parse(params, 0, [m[0] for _, _, m in devices])
    honest = np.array([a for a, _, _ in devices])
    other = (honest + 1) % (1 << 32)
    prepared = R.prepare_verifier(params, 0, shares, contexts, os.urandom(16))
    alone = {0: prepared.messages(honest), 1: prepared.messages(other)}
    wrong: list = []

    def work(which: int) -> None:
        for _ in range(20):
            if not np.array_equal(prepared.messages(other if which else honest), alone[which]):
                wrong.append(which)

    threads = [threading.Thread(target=work, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


_DTYPES = ("u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", ">u2", ">u4", ">u8", ">i4", ">i8")


def test_the_ring_check_refuses_every_value_past_the_ring_for_every_ring_and_dtype() -> None:
    """For every ring of ``RangeParams`` (4..58 bits) and every integer dtype (both byte orders): the dtype's
    largest value, ``2^k`` and ``2^k - 1`` where the dtype holds them, and -1 for signed dtypes -- refused
    exactly where the value is negative or at least ``2^k`` (Python integers say which)."""
    wrong = []
    for k in range(4, 59):
        params = R.RangeParams(1, 2, k)
        for name in _DTYPES:
            dt = np.dtype(name)
            info = np.iinfo(dt)
            for value in {info.max, info.min, 1 << k, (1 << k) - 1, 0}:
                if not info.min <= value <= info.max:
                    continue
                ring = np.array([[value]], dt)
                try:
                    R._checked_ring(params, 1, ring)
                    refused = False
                except InvalidParameters:
                    refused = True
                if refused != (not 0 <= value < 1 << k):
                    wrong.append((k, name, value, refused))
    assert not wrong, wrong[:10]


def test_the_cached_range_params_hold_only_frozen_fields_and_ints() -> None:
    """``bound_params``' instance is shared (``lru_cache``): frozen, its cached sizes ints equal to a fresh
    instance's, another bound another instance -- nothing a round could change for the next."""
    import dataclasses
    from types import SimpleNamespace

    from secemb.protocols.secemb import bounds as B

    config = SimpleNamespace(ring_bits=32, layout="cuckoo")
    first, again = B.bound_params(config, 20), B.bound_params(config, 20)  # type: ignore[arg-type]
    assert first is again
    fresh = R.RangeParams(first.rows, first.bits, first.ring_bits)
    names = [n for n in dir(R.RangeParams) if isinstance(getattr(R.RangeParams, n, None), property)
             or type(getattr(R.RangeParams, n, None)).__name__ == "cached_property"]
    assert {getattr(first, n) for n in names} and all(getattr(first, n) == getattr(fresh, n) for n in names)
    assert all(type(v) is int for v in vars(first).values()), vars(first)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.bits = 2  # type: ignore[misc]
    other = B.bound_params(config, 3)  # type: ignore[arg-type]
    assert other is not first and other.bits != first.bits and other == R.RangeParams(other.rows, other.bits, 32)


# --- 5. protocol level: the bounded round with the relay, both layouts ---------------------------------------

#: ``/tmp/r36/proto_base.py`` on 0a9989e (``git archive`` into /tmp/base36, ``PYTHONPATH`` there): the full
#: layout, bound, 20 users a round, 6 rounds, seed 3, dim 4 -- the same with and without the relay, and main
#: gave the same; the cuckoo layout gave :data:`C6D12E8_RUNS` with and without the relay.
FULL_0A9989E: dict[str, list] = {
    "None": ["6d12d4fd1d21152ead01b6b4381615f87cb92476fcdc8b6f10e9631fda4940c7",
             [[], [], [], [], [], []], [[], [], [], [], [], [1]]],
    "oversized-payload": ["ab0633698eeeb0d9e970d411776131e315ba73e9eaba5ce27e17f1c31c535edd",
                          [[], [], [], [], [], [1]], [[], [], [], [], [], []]],
    "wrapped-dense": ["ab0633698eeeb0d9e970d411776131e315ba73e9eaba5ce27e17f1c31c535edd",
                      [[], [], [], [], [], [1]], [[], [], [], [], [], []]],
    "two-points": ["ab0633698eeeb0d9e970d411776131e315ba73e9eaba5ce27e17f1c31c535edd",
                   [[], [], [], [], [], [1]], [[], [], [], [], [], []]],
    "random-bytes": ["ab0633698eeeb0d9e970d411776131e315ba73e9eaba5ce27e17f1c31c535edd",
                     [[], [], [], [], [], []], [[], [], [], [], [], []]],
}


def _relay_run(attack: str | None, layout: str, monkeypatch: pytest.MonkeyPatch) -> list:
    """Session 35's :func:`_run` with the relay and ``layout``."""
    from secemb import training

    made = training.Experiment

    def relay_experiment(**kw: object) -> object:
        return made(**{**kw, "relay": True, "layout": layout})

    monkeypatch.setattr(training, "Experiment", relay_experiment)
    return _run(attack)


@pytest.mark.parametrize("layout", ["cuckoo", "full"])
@pytest.mark.parametrize("attack", list(C6D12E8_RUNS))
def test_a_bounded_relay_round_with_attackers_is_the_base_commits(layout: str, attack: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With the relay (server 1's answers and each device's reconstruction through ``convert_add``'s rows), the
    same model bit for bit and the same devices rejected as the records without it."""
    record = C6D12E8_RUNS if layout == "cuckoo" else FULL_0A9989E
    assert _relay_run(None if attack == "None" else attack, layout, monkeypatch) == record[attack]
