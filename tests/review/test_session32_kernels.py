"""Red team of session 32's compiled kernels (helper X): memory safety and exactness, tests only.

The kernels that read and write by address this session added -- the AMX projections
(:mod:`secemb.fss._projection_kernels`: ``expand_steps``, ``word_planes``, ``tile_products``,
``Products``), the masked key sums behind ``convert_accumulate``, the sketch's short keys
(``_sketch_short_keys`` / ``_aesni.sketch_rows``), the batched Keccak (``_keccak.shake128_rows``
through ``hashing.shake128_many``) and the verifiers' compiled helpers (``query_points``,
``top_bits``) -- attacked with the inputs a message or a hazmat caller can choose: lengths at block
and tile edges, extreme words (the int32 plane sums' largest magnitude, the 128-bit reduction's
edges), odd but valid array layouts (negative strides, strided and Fortran views), out-of-range
device indices.  Every expected value comes from an independent reference (hashlib, Python
integers, the numpy backend), never from the kernel under test; crashes run in a fresh interpreter
so that a segmentation fault is a return code.

Findings (each was a strict xfail asserting the safe behaviour; all four fixed by the lead in session 32,
so their tests now pass):

* S32-X1: ``Products.project`` checks its device indices only on the AMX path: on the row kernels'
  path (a CPU without AMX, or L above TILE_LENGTH) an ``at`` out of ``x``'s rows reads other memory
  (SIGSEGV here).  Hazmat only: ``project_each`` / ``project_affine`` build ``at`` themselves.
* S32-X2: ``sketch_accumulate`` on an IFMA host (and the short-key path ``_sketch_short_keys`` it
  now takes) reads ``leaves``, ``rks``, ``r`` and ``r2`` by address and silently gives other sums for
  arrays that are not C-contiguous, where the scalar loop gives the right ones.  Hazmat only:
  ``SketchCheck.add`` passes contiguous arrays.
* S32-X3: ``project_each`` / ``project_affine`` accept ``rows = 0`` and ``L = 0``; the numpy backend answers (an
  empty or zero result), the compiled one raises a bare ValueError from the AMX kernels' (and, on a uint32
  ring, ``sign_products``') shape checks: the backends differ, and not with InvalidParameters.  Not reachable
  from a message (rows and L are the round's parameters).
* S32-X4: ``convert_accumulate`` into a width-0 ``acc`` raises ZeroDivisionError on both backends, not
  InvalidParameters (older than this session; not reachable from a message).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import kernels

ROOT = Path(__file__).resolve().parents[2]
compiled = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")
P61 = (1 << 61) - 1


def _child(code: str, timeout: float = 300) -> tuple[int, str, str]:
    """``code`` in a fresh interpreter (the repository on its path): return code (negative: the signal
    that ended it), stdout, stderr's tail."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        got = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                             timeout=timeout, check=False, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child ran past {timeout} s")
    return got.returncode, got.stdout, got.stderr[-3000:]


def _tiles() -> bool:
    if not kernels.available():
        return False
    from secemb.fss._projection_kernels import tiles

    return tiles()


def _ifma() -> bool:
    if not kernels.available():
        return False
    from secemb.fss._aesni import IFMA

    return IFMA


# --- Keccak: shake128_many against hashlib at every block edge -------------------------------------------------


@compiled
@pytest.mark.parametrize("prefix_len", [0, 5, 160])
def test_shake128_many_is_hashlib_at_rate_edges(monkeypatch: pytest.MonkeyPatch, prefix_len: int) -> None:
    """Messages whose padded length crosses the rate (168 bytes: the ``0x1F`` and ``0x80`` pad bytes in one byte at
    167, a second block at 168), outputs that need a second and third squeeze, batches of 0, 1, 7, 8, 9 and 17
    messages (the kernel's 8 lanes, a short last group repeating its last message): every row equal to hashlib's
    SHAKE-128, on the compiled path, and the same from the numpy path."""
    from secemb.fss import hashing

    monkeypatch.setattr(kernels, "BACKEND", "numba")
    prefix = os.urandom(prefix_len)
    for total in (0, 1, 166, 167, 168, 169, 335, 336, 337):
        length = total - prefix_len
        if length < 0:
            continue
        for n in (0, 1, 7, 8, 9, 17):
            rows = np.frombuffer(os.urandom(n * length), np.uint8).reshape(n, length)
            for nbytes in (0, 1, 8, 9, 167, 168, 169, 337, 505):
                got = hashing.shake128_many(prefix, rows, nbytes)
                want = [hashlib.shake_128(prefix + bytes(row)).digest(nbytes) for row in rows]
                assert got.shape == (n, nbytes) and got.dtype == np.uint8 and got.flags.c_contiguous
                assert [bytes(g) for g in got] == want, (total, n, nbytes)


@compiled
def test_shake128_many_reads_any_layout_as_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Odd but valid ``rows``: reversed rows and columns, a strided view, Fortran order, a read-only view -- each row
    hashed as its own bytes (hashlib), on both backends."""
    from secemb.fss import hashing

    base = np.frombuffer(os.urandom(19 * 90), np.uint8).reshape(19, 90)
    views = {"reversed": base[::-1, ::-1], "strided": base[::2, 1::3], "fortran": np.asfortranarray(base[:, :41]),
             "readonly": base[3:12]}
    for backend in ("numba", "numpy"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        for name, rows in views.items():
            got = hashing.shake128_many(b"pre", rows, 200)
            want = [hashlib.shake_128(b"pre" + row.tobytes()).digest(200) for row in rows]
            assert [bytes(g) for g in got] == want, (backend, name)


@compiled
def test_shake128_many_refuses_other_rows_before_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from secemb.fss import hashing

    monkeypatch.setattr(kernels, "BACKEND", "numba")
    for rows in (np.zeros((2, 3), np.uint16), np.zeros(5, np.uint8), np.zeros((1, 2, 3), np.uint8), b"abc"):
        with pytest.raises(InvalidParameters):
            hashing.shake128_many(b"", rows, 8)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters):
        hashing.shake128_many(b"", np.zeros((2, 3), np.uint8), -1)


# --- the verifiers' compiled helpers: exact against Python integers --------------------------------------------


def _edge_words(gen: np.random.Generator, n: int) -> np.ndarray:
    edges = [0, 1, 2, (1 << 63) - 1, 1 << 63, (1 << 64) - 2, (1 << 64) - 1, P61 - 1, P61, P61 + 1, 2 * P61,
             (P61 << 3), (P61 << 3) + 7, (1 << 32) - 1]
    words = gen.integers(0, 1 << 64, (n, 4), np.uint64, endpoint=False)
    for i, e in enumerate(edges):  # each edge low and high, with the other words at extremes
        words[8 + 2 * i] = [e, (1 << 64) - 1, e, 0]
        words[9 + 2 * i] = [(1 << 64) - 1 - e, e, 0, e]
    return words


@compiled
@pytest.mark.parametrize("nodes", [3, 2 * 32 + 3, 2 * 100_000 + 3, (1 << 32) - 1])
def test_query_points_is_the_python_reduction(nodes: int) -> None:
    """``query_points``' 128-bit reductions (``_mod128``: ``hi mod m`` then ``lo``'s bits shifted in) equal Python's
    ``int % m`` for the extreme words (0, 2^64 - 1, multiples and neighbours of p and of the moduli), and the second
    point never equals the first (``(h1 + 1 + h2) mod m1 != h1``)."""
    from secemb.fss._sketchproof_kernels import query_points

    gen = np.random.default_rng(nodes)
    m1, m2 = P61 - nodes, P61 - nodes - 1
    words = _edge_words(gen, 64)
    words[5] = [m1, 0, m2, 0]
    words[6] = [(m1 * 3) & ((1 << 64) - 1), (m1 * 3) >> 64, m2 - 1, 0]
    hi1 = ((1 << 128) - 1) // m1 * m1  # the largest multiple of m1 below 2^128
    words[7] = [hi1 & ((1 << 64) - 1), hi1 >> 64, (hi1 - 1) & ((1 << 64) - 1), (hi1 - 1) >> 64]
    out = np.zeros((len(words), 2), np.uint64)
    query_points(words, np.uint64(nodes), out)
    for row, got in zip(words.tolist(), out.tolist(), strict=True):
        h1 = (row[1] << 64 | row[0]) % m1
        h2 = (row[3] << 64 | row[2]) % m2
        assert got == [nodes + h1, nodes + (h1 + 1 + h2) % m1], row
        assert got[0] != got[1] and min(got) >= nodes and max(got) < P61


@compiled
def test_top_bits_is_the_shift_and_the_search_for_p() -> None:
    """``top_bits`` shifts every word right by 3 in place and flags exactly the rows holding ``p`` after it (the
    eight words ``p << 3 | k``), wherever in the row, against numpy's shift and comparison."""
    from secemb.fss._rangeproof_kernels import top_bits

    gen = np.random.default_rng(32)
    words = gen.integers(0, 1 << 64, (40, 9), np.uint64, endpoint=False)
    for k in range(8):
        words[k, k] = np.uint64((P61 << 3) | k)  # holds p after the shift
    words[8, -1] = np.uint64(P61 << 3)  # the last word
    words[9, 0] = np.uint64((P61 - 1) << 3 | 7)  # p - 1: not held
    words[10, :] = np.uint64((1 << 64) - 1)  # 2^61 - 1 = p: held (every word)
    words[11, :] = np.uint64((1 << 61) - 8)  # below p << 3 >> 3 ... not held
    want = words >> np.uint64(3)
    held_want = np.any(want == np.uint64(P61), axis=1)
    held = np.zeros(len(words), bool)
    top_bits(words, held)
    np.testing.assert_array_equal(words, want)
    np.testing.assert_array_equal(held, held_want)
    assert held[:9].all() and held[10] and not held[9] and not held[11]


# --- the projections: the AMX tiles, the row kernels and numpy agree bit for bit -------------------------------


def _python_products(stream: bytes, rows: int, x: np.ndarray) -> np.ndarray:
    """``t x mod 2^k`` in Python integers, ``t`` read from the stream bytes by the module's specification (entry
    ``(i, j)``: ``a - b`` of bits ``2 (j mod 4)`` and ``2 (j mod 4) + 1`` of byte ``i B + j // 4``)."""
    n, length = x.shape
    per = -(-length // 4)
    mod = 1 << (8 * x.itemsize)
    out = np.zeros((n, rows), x.dtype)
    for i in range(rows):
        t = [((stream[i * per + j // 4] >> (2 * (j % 4))) & 1) - ((stream[i * per + j // 4] >> (2 * (j % 4) + 1)) & 1)
             for j in range(length)]
        for d in range(n):
            out[d, i] = sum(e * int(v) for e, v in zip(t, x[d].tolist(), strict=True)) % mod
    return out


@compiled
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize(("rows", "length"), [(1, 1), (47, 63), (48, 64), (49, 65), (40, 257)])
@pytest.mark.parametrize("path", ["tiles", "rows"])
def test_products_extreme_planes_are_exact(monkeypatch: pytest.MonkeyPatch, dtype: type, rows: int, length: int,
                                           path: str) -> None:
    """Every word ``2^k - 1`` (each byte plane 255) against rows of all -1 (stream bytes 0xAA), all +1 (0x55) and
    random ones: the plane sums at their largest magnitude ``255 L``, negative (the sign extension of an int32
    sum into a uint64 word), at the tile edges (47/48/49 rows, 63/64/65 entries); ``Products`` on
    the AMX path and on the row kernels' path equal to Python integers; a device at index 5 of 7 only written."""
    from secemb.fss import _projection_kernels as pk

    if path == "tiles" and not _tiles():
        pytest.skip("no AMX tiles in this process")
    if path == "rows":
        monkeypatch.setattr(pk, "tiles", lambda: False)
    per = -(-length // 4)
    gen = np.random.default_rng(rows * 1000 + length)
    x = np.full((7, length), np.iinfo(dtype).max, dtype)
    x[2] = gen.integers(0, np.iinfo(dtype).max, length, dtype=dtype, endpoint=True)
    x[3, ::2] = 0
    for fill in (0xAA, 0x55, None):
        stream = bytes([fill]) * (rows * per) if fill is not None else os.urandom(rows * per)
        products = pk.Products(np.dtype(dtype), rows, length)
        assert products.tiles == (path == "tiles")
        products.expand(np.frombuffer(stream, np.uint8).reshape(1, -1), 0)
        out = np.full((9, rows), 7, dtype)
        at, to = np.array([0, 2, 3, 5], np.intp), np.array([8, 1, 0, 4], np.intp)
        products.project(x, at, out, to)
        want = _python_products(stream, rows, x[at])
        np.testing.assert_array_equal(out[to], want)
        untouched = np.setdiff1d(np.arange(9), to)
        assert np.all(out[untouched] == 7)


@compiled
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_project_each_compiled_equals_numpy_on_many_seeds(monkeypatch: pytest.MonkeyPatch, dtype: type) -> None:
    """A device on the numpy backend and a server on the compiled one (AMX where it runs) compute the same
    projections: 23 devices (not a multiple of any pass), shared and own seeds, L = 16,251 (the bench's), random
    and extreme words, x given as a reversed non-contiguous view."""
    from secemb.fss.projections import project_each

    gen = np.random.default_rng(3232)
    seeds = [os.urandom(16) for _ in range(5)]
    which = [seeds[i % 5] if i % 3 else seeds[0] for i in range(23)]
    big = gen.integers(0, np.iinfo(dtype).max, (23, 2 * 16251), dtype=dtype, endpoint=True)
    big[::4] = np.iinfo(dtype).max
    x = big[::-1, ::2]
    results = {}
    for backend in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", backend)
        results[backend] = project_each(which, x, 40)
    np.testing.assert_array_equal(results["numba"], results["numpy"])




@compiled
@pytest.mark.parametrize(("path", "dtype"), [
    ("tiles", np.uint32), ("tiles", np.uint64),
    ("rows", np.uint32),  # sign_products (AVX2); else as uint64
    ("rows", np.uint64),  # ternary_products
])
def test_project_each_empty_shapes_agree_between_backends(monkeypatch: pytest.MonkeyPatch, path: str,
                                                          dtype: type) -> None:
    """``rows = 0`` (no projection) and ``L = 0`` (an empty vector: every projection 0), which
    :func:`~secemb.fss.projections.project_each` accepts: the compiled backend's answer is the numpy backend's,
    on the AMX path and on the row kernels' path (or both refuse with InvalidParameters)."""
    from secemb.fss import _projection_kernels as pk
    from secemb.fss.projections import project_each

    if path == "tiles" and not _tiles():
        pytest.skip("no AMX tiles in this process")
    if path == "rows":
        monkeypatch.setattr(pk, "tiles", lambda: False)
    seeds = [os.urandom(16)] * 3
    for rows, length in ((0, 5), (3, 0), (0, 0)):
        x = np.ones((3, length), dtype)
        got = {}
        for backend in ("numpy", "numba"):
            monkeypatch.setattr(kernels, "BACKEND", backend)
            try:
                got[backend] = project_each(seeds, x, rows)
            except InvalidParameters:
                got[backend] = None
        if got["numpy"] is None or got["numba"] is None:
            assert got["numpy"] is None and got["numba"] is None, (rows, length)
        else:
            np.testing.assert_array_equal(got["numba"], got["numpy"])



@compiled
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_project_affine_counts_at_their_extremes_agree_between_backends(monkeypatch: pytest.MonkeyPatch,
                                                                        dtype: type) -> None:
    """``project_affine``'s counts of every integer dtype it accepts at their extremes (``-2^63``, ``-1``,
    ``2^64 - 1``, ``2^32``: the compiled ``affine_vector``'s ``_word`` cast against numpy's ``astype``), either
    sign, base and words as reversed views, 7 devices on 3 seeds: the compiled answer is the numpy one."""
    from secemb.fss.projections import project_affine

    gen = np.random.default_rng(32 + np.dtype(dtype).itemsize)
    top = np.iinfo(dtype).max
    counts = {np.int64: [-(1 << 63), -1, (1 << 63) - 1, 0, 5], np.uint64: [(1 << 64) - 1, 1 << 63, 1 << 32, 0, 3],
              np.int8: [-128, 127, -1, 0, 1], np.uint32: [(1 << 32) - 1, 1 << 31, 1, 0, 7]}
    seeds = [os.urandom(16) for _ in range(3)]
    for count_dtype, values in counts.items():
        parts = [(gen.integers(0, top, (5, 26), dtype=dtype, endpoint=True)[::-1, ::2], np.array(values, count_dtype),
                  gen.integers(0, top, (5, 13), dtype=dtype, endpoint=True), np.full(11, top, dtype))
                 for _ in range(7)]
        for negate in (False, True):
            got = {}
            for backend in ("numpy", "numba"):
                monkeypatch.setattr(kernels, "BACKEND", backend)
                got[backend] = project_affine([seeds[d % 3] for d in range(7)], negate, parts, 40)
            np.testing.assert_array_equal(got["numba"], got["numpy"], err_msg=f"{count_dtype} {negate}")

@compiled
def test_tile_kernels_refuse_every_index_and_shape_outside_their_arrays() -> None:
    """The AMX kernels' own checks, in a fresh process (a read or write outside the arrays could fault):
    negative and too-large device indices in ``at`` (``word_planes``) and ``to`` (``tile_products``), a stream
    index out of range and a scratch of too few steps (``expand_steps``), and a ``t`` of more than
    TILE_LENGTH entries a row (int32 sums no longer exact), each a ValueError; nothing crashes."""
    if not _tiles():
        pytest.skip("no AMX tiles in this process")
    rc, out, err = _child("""
        import numpy as np
        from secemb.fss import _projection_kernels as pk
        assert pk.tiles()
        rows, L = 40, 300
        p = pk.Products(np.dtype(np.uint32), rows, L)
        stream = np.zeros((2, rows * 75), np.uint8)
        x = np.ones((4, L), np.uint32)
        out = np.zeros((4, rows), np.uint32)
        def refused(call):
            try:
                call()
            except ValueError:
                return "refused"
            return "ran"
        good = np.array([0, 1], np.intp)
        print(refused(lambda: p.expand(stream, 0)))
        print(refused(lambda: p.expand(stream, 2)))
        print(refused(lambda: p.expand(stream, -1)))
        print(refused(lambda: pk.expand_steps(stream, 0, rows, p.t[:1], pk.ENTRY_WORDS)))
        for bad in (-1, 4, 1 << 40, -(1 << 40)):
            print(refused(lambda: p.project(x, np.array([0, bad], np.intp), out, good)))
            print(refused(lambda: p.project(x, good, out, np.array([bad, 0], np.intp))))
        print(refused(lambda: p.project(x, good, out, good)))
        steps = pk.TILE_LENGTH // pk.TILE_BYTES + 1  # lazily mapped zeros: refused before any is touched
        t = np.zeros((steps, pk.TILE_COLUMNS, pk.TILE_BYTES), np.int8)
        planes = np.zeros((pk.TILE_ROWS * steps, pk.TILE_ROWS), np.uint32)
        sums = np.zeros((pk.TILE_COLUMNS, pk.TILE_ROWS), np.int32)
        print(refused(lambda: pk.tile_products(t, rows, x, good, out, good, planes, sums, pk.TILE_CONFIG)))
        print("DONE")
    """)
    assert rc == 0, (rc, out, err)
    lines = out.split()
    assert lines == ["ran", "refused", "refused", "refused"] + ["refused"] * 8 + ["ran", "refused", "DONE"], lines


@compiled
def test_products_row_path_refuses_a_device_index_outside_x() -> None:
    """The same ``Products.project`` contract on both of its paths: with the tiles off (a CPU without AMX), a
    device index far outside ``x`` is refused (ValueError), as the AMX path refuses it; not a read of other
    memory (which ends the process with SIGSEGV here)."""
    rc, out, err = _child("""
        import numpy as np
        from secemb.fss import _projection_kernels as pk
        pk.tiles = lambda: False
        rows, L = 40, 1000
        p = pk.Products(np.dtype(np.uint32), rows, L)
        assert not p.tiles
        p.expand(np.zeros((1, rows * 250), np.uint8), 0)
        x = np.ones((4, L), np.uint32)
        out = np.zeros((4, rows), np.uint32)
        try:
            p.project(x, np.array([0, 1 << 40], np.intp), out, np.array([0, 1], np.intp))
            print("ran")
        except ValueError:
            print("refused")
    """)
    assert rc == 0 and out.split() == ["refused"], (rc, out, err)


# --- the sketch's short keys -----------------------------------------------------------------------------------


@pytest.mark.skipif(not _ifma(), reason="no AVX-512 IFMA here")
@pytest.mark.parametrize("layout", ["r_fortran", "rks_fortran", "leaves_fortran", "r_reversed"])
def test_sketch_accumulate_ifma_takes_any_layout_or_refuses_it(layout: str) -> None:
    """``sketch_accumulate_ifma`` on the cuckoo layout's groups (frontier 1, 32-leaf keys: ``_sketch_short_keys``)
    with one argument in another valid layout: the scalar loop's sums (which index, and are right), or a refusal;
    never other sums."""
    from secemb.fss import _sketch_kernels as sk
    from secemb.fss._sketch_kernels import sketch_schedules

    gen = np.random.default_rng(32)
    users, per_user, width = 3, 2, 32
    keys = np.frombuffer(os.urandom(16 * users), np.uint8).reshape(users, 16)
    from secemb.fss._aesni import LANES

    rks = np.empty((users, 11, 2 * LANES), np.uint64)
    sketch_schedules(keys, rks)
    r = gen.integers(0, P61, (users, width), np.uint64)
    r2 = np.array([[v * v % P61 for v in row] for row in r.tolist()], np.uint64)
    leaves = gen.integers(0, 1 << 63, (users * per_user, width, 2), np.uint64)
    want = np.zeros((users * per_user, 3), np.uint64)
    ro = kernels.read_only  # the reference sums from what SketchCheck.add passes (no other compiled signature)
    sk.sketch_accumulate_scalar(ro(leaves), 0, 1, per_user, ro(rks), ro(r), ro(r2), want)
    args = {"leaves": leaves, "rks": rks, "r": r, "r2": r2}
    if layout == "r_fortran":
        args["r"], args["r2"] = np.asfortranarray(r), np.asfortranarray(r2)
    elif layout == "rks_fortran":
        args["rks"] = np.asfortranarray(rks)
    elif layout == "leaves_fortran":
        args["leaves"] = np.asfortranarray(leaves)
    else:
        args["r"] = np.ascontiguousarray(r[:, ::-1])[:, ::-1]
        args["r2"] = np.ascontiguousarray(r2[:, ::-1])[:, ::-1]
    got = np.zeros_like(want)
    try:
        sk.sketch_accumulate_ifma(args["leaves"], 0, 1, per_user, args["rks"], args["r"], args["r2"], got)
    except (ValueError, InvalidParameters):
        return
    np.testing.assert_array_equal(got, want)


# --- the masked key sums: convert_accumulate on odd views ------------------------------------------------------


@compiled
@pytest.mark.parametrize("fresh", [False, True])
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_convert_accumulate_views_agree_between_backends(monkeypatch: pytest.MonkeyPatch, fresh: bool,
                                                         dtype: type) -> None:
    """``acc`` and ``key_acc`` as reversed, strided and reversed-row views of larger arrays (the masked 512-bit sums
    read rows by address), widths 17 and 65 (a masked last vector), a row not live, keys over stale values: the
    compiled kernel writes exactly the words the numpy backend writes, and nothing else of the arrays around."""
    from secemb.fss.convert import convert_accumulate
    from secemb.fss.fused import AGGREGATION_TAG

    m, n, period = 4, 32, 4
    words = np.frombuffer(os.urandom(16 * n), np.uint64).reshape(n, 2).copy()
    live = np.array([True, False, True, True])
    views = {"plain": lambda b, w: b[:, :w], "reversed": lambda b, w: b[:, :w][:, ::-1],
             "strided": lambda b, w: b[:, ::2][:, :w], "rows_reversed": lambda b, w: b[::-1, :w]}
    for width in (17, 65):
        for an, av in views.items():
            for kn, kv in views.items():
                got = {}
                for backend in ("numpy", "numba"):
                    monkeypatch.setattr(kernels, "BACKEND", backend)
                    big = np.full((m, 2 * width + 3), 5, dtype)
                    kbig = np.full((n // period, 2 * width + 3), 7, dtype)
                    t = np.full(n // period, 3, np.int64)
                    convert_accumulate(words, AGGREGATION_TAG, av(big, width), 0, live, key_acc=kv(kbig, width),
                                       period=period, key_t=t, fresh=fresh)
                    got[backend] = (big, kbig, t)
                for a, b in zip(got["numpy"], got["numba"], strict=True):
                    np.testing.assert_array_equal(a, b, err_msg=f"{width} {an} {kn}")


@compiled
def test_convert_accumulate_fresh_refuses_key_t_inside_acc(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fresh`` writes a key's first sums over its values: a ``key_t`` that is a reinterpreting view into
    ``acc``'s own memory, or a ``key_acc`` whose rows interleave with ``acc``'s, is refused before anything is
    summed (both arrays unchanged)."""
    from secemb.fss.convert import convert_accumulate
    from secemb.fss.fused import AGGREGATION_TAG

    monkeypatch.setattr(kernels, "BACKEND", "numba")
    words = np.frombuffer(os.urandom(16 * 8), np.uint64).reshape(8, 2).copy()
    acc = np.zeros((2, 16), np.uint64)
    key_acc = np.zeros((4, 16), np.uint64)
    before = acc.copy(), key_acc.copy()
    with pytest.raises(InvalidParameters):
        convert_accumulate(words, AGGREGATION_TAG, acc, 0, key_acc=key_acc, period=2,
                           key_t=acc.view(np.int64)[1, :4], fresh=True)
    shared = np.zeros((6, 16), np.uint64)
    with pytest.raises(InvalidParameters):
        convert_accumulate(words, AGGREGATION_TAG, shared[::3], 0, key_acc=shared[1:5],
                           period=2, fresh=True)
    np.testing.assert_array_equal(acc, before[0])
    np.testing.assert_array_equal(key_acc, before[1])
    assert not shared.any()


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=compiled)])
def test_convert_accumulate_width_zero_is_refused_or_nothing(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """An ``acc`` of no columns (a ring (M, 0)): nothing to add, or a refusal naming the contract; not an arithmetic
    error from inside the scratch planning."""
    from secemb.fss.convert import convert_accumulate
    from secemb.fss.fused import AGGREGATION_TAG

    monkeypatch.setattr(kernels, "BACKEND", backend)
    words = np.frombuffer(os.urandom(16 * 8), np.uint64).reshape(8, 2).copy()
    acc = np.zeros((3, 0), np.uint32)
    try:
        convert_accumulate(words, AGGREGATION_TAG, acc, 0)
    except InvalidParameters:
        return
    assert acc.shape == (3, 0)
