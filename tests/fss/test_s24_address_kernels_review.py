"""Session 24 review (helper I): the compiled kernels that read arrays by address.

Three compiled paths of session 24 take numpy arrays as raw addresses (integers) that Python checked
beforehand: :func:`secemb.fss.fused.bits_product` -> ``_numba_kernels.bits_accumulate`` (each user's
control bits and correction words, 01b86fa; the SecEmb servers' close over devices' uploads),
:func:`secemb.fss.fused.unmask_slots` -> ``_numba_kernels.unmask_slots`` (each user's row array,
01b86fa; a device reading its servers' answers) and :mod:`secemb.fss._shani` (SHA-NI, rows by address
and stride, 8aee817; row tags and the parties' key digests of device-supplied key parts).  Nothing here
checks bounds: an extent the Python checks get wrong is a read or a write of other memory.

Technique: the arrays a kernel reads or writes are put against a ``PROT_NONE`` guard page (an anonymous
``mmap``, ``mprotect`` through ctypes: the array's last byte the last before the guard, or its first the
first after one), and every attack runs in a child interpreter (forked from the suite's warm template where
it can be), so that a read or write one byte out
of bounds is a SIGSEGV, seen as the child's return code, not pytest's death (checked: each kernel
called directly with an extent one byte, position or row too large dies so).  Each child is bounded
in time.

Held (these pass):

* SHA-NI: prefixes of 0-129 bytes x rows of 0-199 bytes (every 64-byte block boundary of the message,
  and of the row's end) x 1-3 rows, at both guards, rows in order and reversed (negative stride);
  column strides (copied first), a single column with a huge column stride, a single row with a huge
  row stride, overlapping rows (stride below the length), stride-0 rows, Fortran order, zero rows,
  zero-length rows, a 64 KB row, and read-only rows: the digests equal hashlib's and nothing outside
  the rows is read; the same through ``checks.key_digests`` / ``suffix_tags`` and ``relay._digests``.
* ``bits_product``: every user's bits and words at both guards, ``out`` and ``start`` at the end
  guard, zero-size groups / positions / widths, bucket sizes 0..M, bits given as one (U, B, M) array,
  as reversed, strided or broadcast views, as a lazy sequence that makes fresh arrays on each access
  (materialized once: addresses outlive nothing), ``start`` read-only or ``out`` itself: the product
  the test computes from its definition; 19 malformed argument sets refused with ``InvalidParameters``
  (mismatched per-user shapes, dtypes, sizes outside ``[0, M]``, a read-only or non-contiguous
  ``out``, ...).
* ``unmask_slots``: every array at the guard, zero users / slots / widths / tag words / real slots,
  rows of shape (S, 1) with an odd column stride (numpy calls them C-contiguous: the kernel's own
  strides read the same bytes), suffix and tags unaligned and of odd row strides: the definition;
  16 malformed argument sets refused.
* Protocol paths where a message could size something: a retrieval request (server 0 and 1,
  verified uploads: key digests), a relayed key part (server 1: ``relay._digests``), a retrieval reply
  (the device: ``unmask_slots``) and an upload (the close: ``bits_product``), each re-framed with
  bodies of 0, 1, L - 1, L + 1, L + 64 and 2 L bytes (the header's length patched to match), cut short
  under an honest header, or with a header claiming 2^63 bytes: each refused with a protocol error
  before any kernel; the round then completes with the honest messages and its aggregate is the
  plaintext sum.  Call sites (read, not only run): ``bits_product`` materializes ``t`` and ``cw`` into
  lists and holds the contiguous copies in them; ``tasks.bits_task`` passes its per-user views in a
  list argument; ``_shani.sha256_many`` holds the copied rows in a local and passes the prefix array
  as an argument; ``user._verified`` passes rows it holds in a list; the server's ``_requests`` holds
  ``good`` / ``rest`` in locals -- no address outlives its array.

Findings (fixed by the lead from helper I's patch; before, the tests below failed; not reachable
from a message -- every parser fixes the shapes -- but from a caller's arguments in the hazmat
layer, like session 20's G1-G5):

* I1 ``bits_product``: ``cols = np.asarray(sizes, np.int64)`` keeps the caller's int64 ``sizes``
  array itself, and the kernel reads ``cols[g]`` while it writes ``out``.  ``sizes`` sharing memory with
  ``out`` passes the check (0s) and becomes 2^40 when ``start`` is copied into ``out``: the kernel
  walks positions up to 2^40 of every user's bits (reads) and ``out`` (writes): SIGSEGV.
* I2 ``unmask_slots``: Python counts the real slots ``R`` (``items >= 0``) and sizes ``suffix``/``tags``
  by it; the kernel re-reads ``items`` slot by slot after writing rows and suffixes.  A row array (or
  ``suffix``) sharing memory with ``items`` turns empty slots real during the pass: the kernel writes
  suffix rows and tags ``R + k`` (past the end): SIGSEGV (a thread writing ``items`` during the call
  would do the same: the kernel runs without the GIL).
* I3 ``unmask_slots``: ``rows`` (a ``Sequence``) is iterated twice, once to check and once to take
  addresses, and only the addresses are kept: a sequence that makes its arrays on access (a lazy view
  of a store) hands the kernel addresses of arrays freed before it writes (use after free: SIGSEGV).
* I4 (minor, no memory error) ``unmask_slots``: a ``suffix`` whose last axis is strided passes the
  check, then ``suffix[:, :8].view('<u8')`` raises numpy's ``ValueError`` instead of
  ``InvalidParameters`` (the kernel's docstring says "any strides").

Fixes (``secemb/fss/fused.py``): I1 ``np.array(sizes, np.int64)`` (a copy) for
``np.asarray``; I2 ``items = items.copy()`` before ``real`` is counted; I3 ``rows = list(rows)`` before the
check; I4 ``(suffix.size and suffix.strides[1] != 1)`` among the refused layouts (a zero-size array's
strides are 0).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
from _server_template import run_script
from child_verdicts import REFUSED, assert_all_refused

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not (kernels.available() and sys.platform.startswith("linux")),
                                reason="the compiled kernels (numba) and Linux's mprotect")
needs_sha = pytest.mark.skipif(not kernels.sha_compiled(), reason="the SHA-NI kernel needs a CPU with SHA-NI")

#: the start of every child: the compiled backend, arrays against a PROT_NONE guard page, refusals
PRELUDE = """
import ctypes, hashlib, mmap, sys
import numpy as np
from secemb.errors import InvalidParameters, SecembError
from secemb.fss import kernels
kernels.BACKEND = "numba"
assert kernels.compiled()

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

def guarded(nbytes, at="end"):
    # nbytes writeable bytes in a fresh mapping between two PROT_NONE pages: the last byte is the
    # last before the upper guard (at="end"), or the first the first after the lower (at="start");
    # the mapping lives as long as the array (numpy keeps the mmap as its base)
    pages = -(-nbytes // PAGE) + 2
    mm = mmap.mmap(-1, pages * PAGE)
    base = np.frombuffer(mm, np.uint8)
    for off in (0, (pages - 1) * PAGE):
        assert _libc.mprotect(base.ctypes.data + off, PAGE, 0) == 0, ctypes.get_errno()
    lo = PAGE if at == "start" else (pages - 1) * PAGE - nbytes
    return base[lo : lo + nbytes]

def place(a, at="end", dtype=None):
    # a copy of a against a guard
    a = np.asarray(a, dtype)
    g = guarded(a.nbytes, at).view(a.dtype).reshape(a.shape)
    g[...] = a
    return g

""" + REFUSED + """
rng = np.random.default_rng(24)
"""


def _child(body: str, timeout: float = 300) -> tuple[int, list[str], str]:
    """Run ``PRELUDE + body`` in a child interpreter (forked from the suite's warm template where it can be:
    :func:`_server_template.run_script`): its return code (negative: the signal that ended it), its output
    lines and its stderr's tail; a child past ``timeout`` seconds fails."""
    code = PRELUDE + textwrap.dedent(body)  # body: indented by 4 throughout
    try:
        got = run_script(code, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child ran past {timeout} s")
    return got.returncode, got.stdout.splitlines(), got.stderr[-3000:]


def _clean(body: str, timeout: float = 300) -> list[str]:
    """:func:`_child`, which must exit 0 and print ``DONE`` last; its output lines."""
    rc, lines, err = _child(body + '\n    print("DONE")\n', timeout)
    assert rc == 0 and lines[-1:] == ["DONE"], (rc, lines[-5:], err)
    return lines


# -- the technique: the guard catches one byte out of bounds ------------------------------------------

_OVERREADS = {
    # SHA-NI told each row is one byte longer than it is (the last row's last byte at the guard); its prefixes
    # read-only as sha256_many passes them (np.frombuffer of bytes: the signature secemb's runs compile, where a
    # writable prefix was one of its own, 4 s of cold compile in the CI)
    "sha one byte past the end": """
    from secemb.fss import _shani
    a = place(np.ones((3, 64), np.uint8))
    prefix = np.frombuffer(bytes(5), np.uint8)
    _shani._sha_rows(prefix, a.ctypes.data, 64, 3, 65, _shani._H0, np.empty((3, 8), np.uint32))
    """,
    # SHA-NI started one byte before the first row (at the lower guard)
    "sha one byte before the start": """
    from secemb.fss import _shani
    a = place(np.ones((3, 64), np.uint8), "start")
    prefix = np.frombuffer(b"", np.uint8)
    _shani._sha_rows(prefix, a.ctypes.data - 1, 64, 3, 64, _shani._H0, np.empty((3, 8), np.uint32))
    """,
    # bits_accumulate told the bits have one position more than they do
    "bits one position past the end": """
    from secemb.fss._numba_kernels import bits_accumulate
    t, cw = place(np.ones((2, 7), np.uint8)), np.ones((2, 1), np.uint64)
    out = np.zeros((2, 8, 1), np.uint64)
    bits_accumulate(np.array([t.ctypes.data]), np.array([cw.ctypes.data]), out, out, np.array([8, 8]), False)
    """,
    # the device's kernel told a user's rows have one slot more than they do (a write)
    "unmask one row past the end": """
    from secemb.fss._numba_kernels import unmask_slots
    rows = place(np.zeros((3, 2), np.uint64))
    unmask_slots(np.ones((1, 4, 2), np.uint64), np.ones((1, 4), np.uint64), np.full((1, 4), -1, np.int64),
                 np.array([rows.ctypes.data]), np.zeros(0, np.uint64), np.zeros((0, 2), np.uint64),
                 np.zeros((0, 0), np.uint64), np.zeros(1, bool))
    """,
}


@pytest.mark.parametrize("what", sorted(_OVERREADS))
def test_the_guard_catches_one_byte_out_of_bounds(what: str) -> None:
    """The technique's own check: each kernel, called directly with an extent one byte (one
    position, one row) larger than its array, dies with SIGSEGV at the guard page -- so a clean exit
    in the tests above means nothing outside the arrays was touched, not that nothing was checked."""
    if what.startswith("sha") and not kernels.sha_compiled():
        pytest.skip("the SHA-NI kernel needs a CPU with SHA-NI")
    rc, lines, err = _child(_OVERREADS[what] + '\n    print("DONE")\n')
    assert rc == -signal.SIGSEGV, (rc, lines, err)


# -- SHA-NI -------------------------------------------------------------------------------------------

@needs_sha
def test_sha_rows_against_guards_at_every_block_boundary() -> None:
    lines = _clean("""
    from secemb.fss.hashing import sha256_many
    assert kernels.sha_compiled()
    count = 0
    for p in (0, 1, 8, 55, 56, 63, 64, 65, 119, 120, 127, 128, 129):
        prefix = bytes(rng.integers(0, 256, p, dtype=np.uint8))
        for length in range(200):
            for n in (1, 2, 3):
                for at in ("end", "start"):
                    a = place(rng.integers(0, 256, (n, length), dtype=np.uint8), at)
                    for rows in (a, a[::-1]):
                        got = sha256_many(prefix, rows)
                        want = [hashlib.sha256(prefix + bytes(r)).digest() for r in rows]
                        assert [bytes(g) for g in got] == want, (p, length, n, at)
                        count += 1
    print("HASHED", count)
    """)
    assert "HASHED 31200" in lines


@needs_sha
def test_sha_row_layouts_against_guards_and_the_call_sites() -> None:
    lines = _clean("""
    from numpy.lib.stride_tricks import as_strided, sliding_window_view
    from secemb.fss.hashing import sha256_many
    from secemb.protocols.secemb import checks, relay
    assert kernels.sha_compiled()

    def same(what, prefix, rows):
        got = sha256_many(prefix, rows)
        want = [hashlib.sha256(prefix + bytes(np.ascontiguousarray(r))).digest() for r in rows]
        assert got.shape == (len(want), 32) and [bytes(g) for g in got] == want, what
        print("SAME", what)

    raw = place(rng.integers(0, 256, 4096 * 3, dtype=np.uint8))
    same("column stride 2", b"p" * 70, raw[-2 * 5 * 130:].reshape(5, 260)[:, ::2])
    same("column stride -1", b"q", raw[-5 * 130:].reshape(5, 130)[:, ::-1])
    same("fortran order", b"", np.asfortranarray(raw[-4 * 77:].reshape(4, 77)))
    same("rows reversed, columns reversed", b"r" * 64, raw[-3 * 64:].reshape(3, 64)[::-1, ::-1])
    # one column with a huge column stride: only each row's one byte is read, the last at the guard
    same("one column, column stride 10^9", b"s" * 63, as_strided(raw[-5:], (5, 1), (1, 10**9)))
    # one row with a huge row stride (numpy calls it C-contiguous): only row 0 is read, to the guard
    same("one row, row stride 10^12", b"s" * 119, as_strided(raw[-100:], (1, 100), (10**12, 1)))
    same("overlapping rows (stride 1, length 100)", b"t" * 9, sliding_window_view(raw[-130:], 100))
    same("overlapping rows reversed", b"t" * 9, sliding_window_view(raw[-130:], 100)[::-1])
    same("stride-0 rows (read-only)", b"u" * 56, np.broadcast_to(raw[-191:], (5, 191)))
    ro = place(rng.integers(0, 256, (3, 65), dtype=np.uint8)); ro.flags.writeable = False
    same("read-only rows at the guard", b"w" * 120, ro)
    for at in ("end", "start"):
        same(f"zero rows at the {at} guard", b"x" * 70, guarded(0, at).reshape(0, 0))
        same(f"zero rows of 100 bytes at the {at} guard", b"x", guarded(0, at).reshape(0, 100)[:, :100])
        same(f"zero-length rows at the {at} guard", b"y" * 64, as_strided(guarded(0, at), (4, 0), (0, 1)))
        big = place(rng.integers(0, 256, (2, 65543), dtype=np.uint8), at)
        same(f"a 64 KB + 7 row at the {at} guard", b"z" * 3, big)
    # the call sites: the parties' key digests (a shared header + rows), relay's digests, row tags
    rows = place(rng.integers(0, 256, (5, 300), dtype=np.uint8))
    assert checks.key_digests(b"H" * 37, rows) == [hashlib.sha256(b"H" * 37 + bytes(r)).digest() for r in rows]
    assert relay._digests(rows[::-1]) == [hashlib.sha256(bytes(r)).digest() for r in rows[::-1]]
    suffix = place(rng.integers(0, 256, (7, 8 + 5 * 4), dtype=np.uint8))
    tags = checks.suffix_tags(3, suffix, np.dtype(np.uint32))
    assert tags.shape[0] == 7 and tags.dtype == np.uint32
    print("CALL SITES")
    """)
    assert sum(line.startswith("SAME") for line in lines) == 18 and "CALL SITES" in lines


# -- bits_product -------------------------------------------------------------------------------------

_BITS_WANT = textwrap.indent("""
from secemb.fss.fused import bits_product

def want(ts, cws, sizes, start, negate):
    # start +- sum_u t_u[g, i] cw_u[g] for i < sizes[g], from the definition (numpy, wrapping)
    ts = [np.asarray(t) for t in ts]
    out = np.array(start, copy=True)
    buckets, m = ts[0].shape
    cols = np.full(buckets, m) if sizes is None else np.asarray(sizes)
    mask = (np.arange(m)[None, :] < cols[:, None]).astype(out.dtype)
    for t, cw in zip(ts, cws):
        add = (t.astype(out.dtype) * mask)[:, :, None] * np.asarray(cw)[:, None, :]
        out = out - add if negate else out + add
    return out
""", "    ")


def test_bits_product_against_guards() -> None:
    lines = _clean(_BITS_WANT + """
    from collections.abc import Sequence
    count = 0
    for dt in (np.uint32, np.uint64):
        for users, buckets, m, w in ((1, 1, 1, 1), (3, 2, 7, 3), (2, 5, 64, 1), (4, 1, 65, 2), (2, 0, 5, 2),
                                     (2, 3, 0, 2), (2, 3, 5, 0), (1, 2, 4096, 1)):
            for at in ("end", "start"):
                ts = [place(rng.integers(0, 2, (buckets, m), dtype=np.uint8), at) for _ in range(users)]
                cws = [place(rng.integers(0, 2**32, (buckets, w), dtype=dt), at) for _ in range(users)]
                sizes = rng.integers(0, m + 1, buckets)
                start = place(rng.integers(0, 2**32, (buckets, m, w), dtype=dt))
                for negate in (False, True):
                    out = place(np.zeros((buckets, m, w), dt))
                    got = bits_product(ts, cws, sizes, out=out, start=start, negate=negate)
                    assert got is out and np.array_equal(out, want(ts, cws, sizes, start, negate)), (users, m, w)
                    out[...] = start  # start is out
                    bits_product(ts, cws, None, out=out, negate=negate)
                    assert np.array_equal(out, want(ts, cws, None, start, negate))
                    count += 2
    print("PRODUCTS", count)
    # other layouts of the same bits: one (U, B, M) array, reversed, strided, broadcast (read-only) views
    dt = np.uint64
    block = place(rng.integers(0, 2, (3, 4, 2 * 33), dtype=np.uint8))
    cws = [place(rng.integers(0, 2**60, (4, 5), dtype=dt)) for _ in range(3)]
    start = place(rng.integers(0, 2**60, (4, 33, 5), dtype=dt))
    start.flags.writeable = False
    sizes = np.array([33, 0, 17, 1])
    layouts = {"one array": block[:, :, :33], "reversed": [b[::-1, ::-1] for b in block[:, :, :33]],
               "column stride 2": [b[:, ::2] for b in block],
               "broadcast": np.broadcast_to(block[0, :, :33], (3, 4, 33))}
    for name, ts in layouts.items():
        got = bits_product(ts, cws, sizes, start=start)
        assert np.array_equal(got, want(list(ts), cws, sizes, start, False)), name
        print("LAYOUT", name)

    class Fresh(Sequence):
        # each access makes a new array in its own mapping (unmapped when the array goes)
        def __init__(self, arrays): self.arrays = arrays
        def __len__(self): return len(self.arrays)
        def __getitem__(self, i):
            a = self.arrays[i]
            g = np.frombuffer(mmap.mmap(-1, max(a.nbytes, 1)), a.dtype, a.size).reshape(a.shape)
            g[...] = a
            return g
    ts = [np.ascontiguousarray(b[:, :33]) for b in block]
    got = bits_product(Fresh(ts), Fresh(cws), sizes, start=start)
    assert np.array_equal(got, want(ts, cws, sizes, start, False))
    print("LAYOUT fresh arrays on each access")
    """)
    assert "PRODUCTS 128" in lines and sum(line.startswith("LAYOUT") for line in lines) == 5


def test_bits_product_refuses_malformed_arguments() -> None:
    lines = _clean("""
    from secemb.fss.fused import bits_product
    B, M, w = 3, 8, 2
    t = lambda *s: np.ones(s or (B, M), np.uint8)
    c = lambda *s, dt=np.uint64: np.ones(s or (B, w), dt)
    out = np.zeros((B, M, w), np.uint64)
    ro = out.copy(); ro.flags.writeable = False
    cases = {
        "no users": lambda: bits_product([], []),
        "more bits than words": lambda: bits_product([t(), t()], [c()]),
        "a user's bits (B, M + 1)": lambda: bits_product([t(), t(B, M + 1)], [c(), c()]),
        "a user's bits (B + 1, M)": lambda: bits_product([t(), t(B + 1, M)], [c(), c()]),
        "a user's words (B + 1, w)": lambda: bits_product([t(), t()], [c(), c(B + 1, w)]),
        "a user's words (B, w + 1)": lambda: bits_product([t(), t()], [c(), c(B, w + 1)]),
        "a user's words uint32": lambda: bits_product([t(), t()], [c(), c(dt=np.uint32)]),
        "words uint16": lambda: bits_product([t()], [c(dt=np.uint16)]),
        "words big-endian": lambda: bits_product([t()], [c(dt=np.dtype(">u8"))]),
        "bits 3-D in the list": lambda: bits_product([t(1, B, M)], [c()]),
        "bits 1-D (one array (U, M))": lambda: bits_product(t(2, M), c(2, w)),
        "sizes too short": lambda: bits_product([t()], [c()], np.array([M, M])),
        "sizes above M": lambda: bits_product([t()], [c()], np.array([M, M + 1, 0])),
        "sizes negative": lambda: bits_product([t()], [c()], np.array([M, -1, 0])),
        "sizes 2^64 - 1": lambda: bits_product([t()], [c()], np.array([M, 2**64 - 1, 0], np.uint64)),
        "out read-only": lambda: bits_product([t()], [c()], out=ro),
        "out not contiguous": lambda: bits_product([t()], [c()], out=np.zeros((B, M, 2 * w), np.uint64)[:, :, ::2]),
        "out uint32": lambda: bits_product([t()], [c()], out=np.zeros((B, M, w), np.uint32)),
        "start (B, M - 1, w)": lambda: bits_product([t()], [c()], start=np.zeros((B, M - 1, w), np.uint64)),
    }
    for what, fn in cases.items():
        refused(what, fn, InvalidParameters)
    """)
    assert_all_refused(lines, 19, "InvalidParameters")


def test_i1_bits_product_sizes_sharing_out() -> None:
    rc, lines, err = _child(_BITS_WANT + """
    out = np.zeros((2, 1, 1), np.uint64)
    sizes = out.reshape(2).view(np.int64)           # 0, 0 at the check: in [0, M]
    start = np.array([[[0]], [[2**40]]], np.uint64)  # copied into out, it makes sizes[1] 2^40
    t = place(np.ones((2, 1), np.uint8))
    cw = np.ones((2, 1), np.uint64)
    try:
        bits_product([t], [cw], sizes, out=out, start=start)
        print("RESULT", np.array_equal(out, want([t], [cw], np.zeros(2, np.int64), start, False)))
    except InvalidParameters:
        print("RESULT True")
    """)
    assert rc == 0 and "RESULT True" in lines, (rc, lines, err)


# -- unmask_slots -------------------------------------------------------------------------------------

_UNMASK_WANT = textwrap.indent("""
from secemb.fss.fused import unmask_slots

def want(answers, unmask, items, width):
    # rows, suffix, tags and filled from the definition (numpy, wrapping)
    n, slots, d = answers.shape
    x = answers * unmask[:, :, None]
    real = items >= 0
    suffix = [int(j).to_bytes(8, "little") + x[u, s, :width].astype(answers.dtype.newbyteorder("<")).tobytes()
              for (u, s), j in zip(np.argwhere(real), items[real])]
    filled = np.array([bool(np.any(answers[u][~real[u]])) for u in range(n)], bool)
    return x[:, :, :width], suffix, x[real][:, width:], filled

def case(dt, n, slots, d, width, at="end"):
    items = rng.integers(0, 1000, (n, slots), dtype=np.int64)
    items[rng.random((n, slots)) < 0.4] = -1
    answers = rng.integers(0, np.iinfo(dt).max, (n, slots, d), dtype=dt, endpoint=True)
    answers[(items < 0) & (rng.random((n, slots)) < 0.7)] = 0
    unmask = rng.integers(0, np.iinfo(dt).max, (n, slots), dtype=dt, endpoint=True)
    real = int(np.count_nonzero(items >= 0))
    rows = [place(np.full((slots, width), 7, dt)) for _ in range(n)]
    suffix = place(np.full((real, 8 + width * np.dtype(dt).itemsize), 7, np.uint8))
    tags = place(np.full((real, d - width), 7, dt))
    return place(answers, at), place(unmask, at), place(items, at), rows, suffix, tags

def check(answers, unmask, items, rows, suffix, tags):
    width = rows[0].shape[1] if rows else answers.shape[2] - tags.shape[1]
    filled = unmask_slots(answers, unmask, items, rows, suffix, tags)
    w_rows, w_suffix, w_tags, w_filled = want(answers, unmask, items, width)
    assert all(np.array_equal(r, wr) for r, wr in zip(rows, w_rows)) and len(rows) == len(w_rows)
    assert [bytes(s) for s in suffix] == w_suffix and np.array_equal(tags, w_tags)
    assert np.array_equal(filled, w_filled)
""", "    ")


def test_unmask_slots_against_guards() -> None:
    lines = _clean(_UNMASK_WANT + """
    from numpy.lib.stride_tricks import as_strided
    count = 0
    with np.errstate(over="ignore"):
        for dt in (np.uint32, np.uint64):
            for n, slots, d, width in ((1, 1, 1, 1), (3, 9, 8, 5), (2, 15, 9, 0), (2, 15, 5, 5), (0, 4, 3, 1),
                                       (3, 0, 3, 1), (4, 33, 64, 61)):
                for at in ("end", "start"):
                    check(*case(dt, n, slots, d, width, at))
                    count += 1
        print("READ", count)
        # no real slot (R = 0: suffix and tags empty, at the guard), and every slot real
        answers, unmask, items, rows, _, _ = case(np.uint64, 3, 6, 4, 2)
        items[...] = -1
        check(answers, unmask, items, rows, guarded(0).reshape(0, 24), guarded(0).view(np.uint64).reshape(0, 2))
        items[...] = np.arange(18).reshape(3, 6)
        check(answers, unmask, items, rows, place(np.zeros((18, 24), np.uint8)), place(np.zeros((18, 2), np.uint64)))
        # rows (S, 1) with an odd column stride (C-contiguous to numpy) and (1, w) with an odd row stride
        answers, unmask, items, _, suffix, tags = case(np.uint64, 2, 5, 3, 1)
        raw = guarded(8 * 5 * 2 + 8)
        rows = [as_strided(raw[8 * 5 * u :].view(np.uint64), (5, 1), (8, 12345)) for u in range(2)]
        assert all(r.flags.c_contiguous for r in rows)
        check(answers, unmask, items, rows, suffix, tags)
        answers, unmask, items, _, suffix, tags = case(np.uint32, 2, 1, 6, 4)
        raw = guarded(4 * 4 * 2)
        rows = [as_strided(raw[16 * u :].view(np.uint32), (1, 4), (999, 4)) for u in range(2)]
        assert all(r.flags.c_contiguous for r in rows)
        check(answers, unmask, items, rows, suffix, tags)
        # suffix and tags unaligned, of odd row strides, their last bytes at the guard (the kernel takes
        # any strides)
        answers, unmask, items, rows, _, _ = case(np.uint64, 3, 7, 5, 3)
        items[0, 0] = 1
        real = int(np.count_nonzero(items >= 0))
        suffix = as_strided(guarded(real * 33)[1:], (real, 32), (33, 1))
        tags = np.ndarray((real, 2), np.uint64, guarded((real - 1) * 28 + 16), 0, (28, 8))
        assert not suffix[:, 8:].view(np.uint64).flags.aligned and not tags.flags.aligned
        check(answers, unmask, items, rows, suffix, tags)
        print("EDGES")
    """)
    assert "READ 28" in lines and "EDGES" in lines


def test_unmask_slots_refuses_malformed_arguments() -> None:
    lines = _clean(_UNMASK_WANT + """
    def ro(a):
        a = a.copy(); a.flags.writeable = False
        return a

    cases = {
        "answers 2-D": lambda a: {"answers": a["answers"][0]},
        "answers uint16": lambda a: {"answers": a["answers"].astype(np.uint16)},
        "unmask (n, S + 1)": lambda a: {"unmask": np.ones((3, 6), np.uint64)},
        "unmask uint32": lambda a: {"unmask": a["unmask"].astype(np.uint32)},
        "items int32": lambda a: {"items": a["items"].astype(np.int32)},
        "items (n, S - 1)": lambda a: {"items": a["items"][:, :-1]},
        "one user's rows missing": lambda a: {"rows": a["rows"][:-1]},
        "a user's rows (S + 1, w)": lambda a: {"rows": a["rows"][:-1] + [np.zeros((6, 4), np.uint64)]},
        "a user's rows not contiguous": lambda a: {"rows": [np.zeros((5, 8), np.uint64)[:, ::2]] + a["rows"][1:]},
        "a user's rows read-only": lambda a: {"rows": [ro(a["rows"][0])] + a["rows"][1:]},
        "a user's rows uint32": lambda a: {"rows": [np.zeros((5, 4), np.uint32)] + a["rows"][1:]},
        "suffix one row short": lambda a: {"suffix": a["suffix"][:-1]},
        "suffix read-only": lambda a: {"suffix": ro(a["suffix"])},
        "tags one row long": lambda a: {"tags": np.zeros((a["tags"].shape[0] + 1, 2), np.uint64)},
        "tags read-only": lambda a: {"tags": ro(a["tags"])},
        "tags wider than the answers": lambda a: {"tags": np.zeros((a["tags"].shape[0], 7), np.uint64)},
    }
    names = ("answers", "unmask", "items", "rows", "suffix", "tags")
    for what, change in cases.items():
        args = dict(zip(names, case(np.uint64, 3, 5, 6, 4)))
        assert len(args["suffix"]) > 0  # real slots: suffix and tags have rows
        refused(what, lambda: unmask_slots(**{**args, **change(args)}), InvalidParameters)
    """)
    assert_all_refused(lines, 16, "InvalidParameters")


def test_i2_unmask_slots_rows_sharing_items() -> None:
    rc, lines, err = _child(_UNMASK_WANT + """
    slots, d = 4, 2
    items = np.full((1, slots), -1, np.int64)         # every slot empty: R = 0
    at_call = items.copy()
    rows = [items.view(np.uint64).reshape(slots, 1)]  # the user's rows are the items' memory
    answers = place(np.ones((1, slots, d), np.uint64))  # each row unmasked is 1: a real item once written
    unmask = place(np.ones((1, slots), np.uint64))
    suffix = guarded(0).reshape(0, 16)                # R = 0 rows, at the guard
    tags = guarded(0).view(np.uint64).reshape(0, d - 1)
    try:
        filled = unmask_slots(answers, unmask, items, rows, suffix, tags)
        print("RESULT", np.array_equal(filled, want(answers, unmask, at_call, 1)[3]))
    except InvalidParameters:
        print("RESULT True")
    """)
    assert rc == 0 and "RESULT True" in lines, (rc, lines, err)


def test_i3_unmask_slots_rows_made_on_access() -> None:
    rc, lines, err = _child(_UNMASK_WANT + """
    from collections.abc import Sequence
    slots, d = 1, 1024

    class Fresh(Sequence):
        # a user's rows made on each access, in a mapping of their own (unmapped when the array goes)
        def __len__(self): return 1
        def __getitem__(self, i):
            if i != 0:
                raise IndexError(i)
            return np.frombuffer(mmap.mmap(-1, slots * d * 8), np.uint64).reshape(slots, d)

    items = np.full((1, slots), -1, np.int64)
    answers = np.zeros((1, slots, d), np.uint64)
    unmask = np.ones((1, slots), np.uint64)
    # the same call with the arrays held (a list): what the kernel does with rows it may write
    assert not unmask_slots(answers, unmask, items, list(Fresh()), np.empty((0, 8 + 8 * d), np.uint8),
                            np.empty((0, 0), np.uint64)).any()
    try:
        filled = unmask_slots(answers, unmask, items, Fresh(), np.empty((0, 8 + 8 * d), np.uint8),
                              np.empty((0, 0), np.uint64))
        print("RESULT", not filled.any())
    except InvalidParameters:
        print("RESULT True")
    """)
    assert rc == 0 and "RESULT True" in lines, (rc, lines, err)


def test_i4_unmask_slots_strided_suffix_is_refused_or_read() -> None:
    lines = _clean(_UNMASK_WANT + """
    answers, unmask, items, rows, suffix, tags = case(np.uint64, 2, 4, 3, 2)
    items[0, 0] = 5
    real = int(np.count_nonzero(items >= 0))
    strided = np.zeros((real, 2 * 24), np.uint8)[:, ::2]
    try:
        with np.errstate(over="ignore"):
            check(answers, unmask, items, rows, strided, tags)
        print("RESULT read")
    except InvalidParameters:
        print("RESULT refused")
    except ValueError as exc:
        print("RESULT ValueError", exc)
    """)
    assert "RESULT read" in lines or "RESULT refused" in lines, lines


# -- the protocol paths: no message sizes a kernel ----------------------------------------------------

def test_messages_of_every_wrong_length_are_refused_before_the_kernels() -> None:
    lines = _clean("""
    import struct
    from secemb.framing import HEADER_BYTES
    from secemb.protocols.backends import ThreadBackend
    from secemb.protocols.secemb import SecEmbProtocol
    from secemb.randomness import CtrDrbg

    def variants(message):
        # the message's body cut or grown to every length around its own, the header's length field
        # (bytes 24:32) patched to match; cut short under the honest header; a header claiming 2^63
        head, body = message[:HEADER_BYTES], message[HEADER_BYTES:]
        size = len(body)
        for n in (0, 1, size - 1, size + 1, size + 64, 2 * size):
            new = (body * 3)[:n]
            yield f"{n} bytes", head[:24] + struct.pack("<Q", n) + new
        yield "cut short", message[:-1]
        yield "claims 2^63", head[:24] + struct.pack("<Q", 2**63) + body

    def hostile(what, fn, message):
        for name, bad in variants(message):
            try:
                got = fn(bad)
            except SecembError as exc:
                got = exc
            assert isinstance(got, SecembError), (what, name, got)
        print("REFUSED", what)

    first = lambda got: got[0]
    for relay in (False, True):
        backend = ThreadBackend(workers=2)
        proto = SecEmbProtocol(layout="cuckoo", relay=relay, backend=backend, verify=True)
        cfg = proto.round_config(5, 300, 4, 2, 12)
        table = rng.integers(0, 2**32, (300, 4), dtype=np.uint64).astype(np.uint32)
        s0, s1 = proto.make_server(0), proto.make_server(1)
        s0.begin_round(cfg, table); s1.begin_round(cfg, table)
        users = [proto.make_user(cfg, _rng=CtrDrbg(u)) for u in range(3)]
        slots = [cfg.cuckoo().assign(rng.choice(300, 12, replace=False), rng)[0] for _ in users]
        reqs = [u.retrieval_request(s) for u, s in zip(users, slots)]
        hostile(f"request to server 0 (relay {relay})", lambda m: s0.handle_retrieval_many([(0, m)])[0], reqs[0][0])
        hostile(f"request to server 1 (relay {relay})", lambda m: s1.handle_retrieval_many([(0, m)])[0], reqs[0][1])
        a1 = s1.handle_retrieval_many([(u, reqs[u][1]) for u in range(3)])
        a0 = s0.handle_retrieval_many([(u, reqs[u][0]) for u in range(3)])
        assert not any(isinstance(a, Exception) for a in a0 + a1), (a0, a1)
        if relay:
            hostile("relayed key part to server 1", lambda m: s1.relay_retrieval_many([(0, m)])[0], a0[0])
            masked = s1.relay_retrieval_many([(u, a0[u]) for u in range(3)])
            a0 = [s0.complete_retrieval(u, masked[u]) for u in range(3)]
            hostile("reply of server 0", lambda m: users[0].retrieval_result(m, None), a0[0])
        else:
            hostile("reply of server 0", lambda m: users[0].retrieval_result(m, a1[0]), a0[0])
            hostile("reply of server 1", lambda m: users[0].retrieval_result(a0[0], m), a1[0])
        expected = np.zeros((300, 4), np.uint32)
        for u in range(3):
            rows = users[u].retrieval_result(a0[u], a1[u])
            real = slots[u] >= 0
            assert np.array_equal(rows[real], table[slots[u][real]])
            grads = np.zeros((cfg.slots, 4), np.uint32)
            grads[real] = rng.integers(0, 2**32, (int(real.sum()), 4), dtype=np.uint64).astype(np.uint32)
            np.add.at(expected, slots[u][real], grads[real])
            up0, up1 = users[u].upload(grads, np.arange(2, dtype=np.uint32))
            if u == 0:
                hostile(f"upload to server 0 (relay {relay})", lambda m: s0.handle_upload(0, m), up0)
            fwd = s0.handle_upload(u, up0)
            if up1 is not None:
                if u == 0:
                    hostile("upload to server 1", lambda m: s1.handle_upload(0, m), up1)
                s1.handle_upload(u, up1)
            if fwd is not None:
                if u == 0:
                    hostile("relayed upload to server 1", lambda m: s1.relay_upload(0, m), fwd)
                s1.relay_upload(u, fwd)
        sparse, dense = s0.combine(s1.aggregate_share())
        assert np.array_equal(sparse, expected), relay
        backend.close()
        print("ROUND", relay)
    """, timeout=400)
    assert "ROUND False" in lines and "ROUND True" in lines
    refused = {line for line in lines if line.startswith("REFUSED")}
    assert refused == {f"REFUSED {what}" for what in (
        "request to server 0 (relay False)", "request to server 1 (relay False)", "reply of server 0",
        "reply of server 1", "upload to server 0 (relay False)", "upload to server 1",
        "request to server 0 (relay True)", "request to server 1 (relay True)", "relayed key part to server 1",
        "upload to server 0 (relay True)", "relayed upload to server 1")}, lines
