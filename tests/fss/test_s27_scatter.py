"""Issue 37 (session 27, helper K): the cuckoo layout's scatter, compiled.

:meth:`CuckooLayout.scatter` sums each item's rows of the bucket form straight into its row of the result
(:func:`secemb.fss._scatter_kernels.scatter_rows`) where the compiled kernels are on; the numpy reference
gathers an array a hash and adds them.  Both against the sum formed apart from the layout's public gather
index (each non-padding position added to its item's row, Python-int arithmetic modulo ``2^k``), and the
compiled path against the reference bit for bit: uint32 and uint64 rings, items with one to three
buckets, ranges of items, padding positions holding garbage, widths 1 and odd, into a given ``out``.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import kernels
from secemb.fss.cuckoo import NUM_HASHES, CuckooLayout
from secemb.protocols.secemb.server import SecEmbServer


#: small layouts whose items have one, two and three distinct buckets (checked below), and ML-100K's
LAYOUTS = [CuckooLayout(40, 3, 1), CuckooLayout(300, 12, 5), CuckooLayout(1682, 250, 0)]


def _form(layout: CuckooLayout, dtype: type[np.unsignedinteger], width: int, seed: int) -> np.ndarray:
    """A bucket form of random words, padding positions included (they must be ignored)."""
    gen = np.random.default_rng(seed)
    return gen.integers(0, 2**64, (layout.num_buckets, layout.bucket_size, width), dtype=np.uint64).astype(dtype)


def _expected(layout: CuckooLayout, form: np.ndarray) -> np.ndarray:
    """Every non-padding position of ``form`` added to its item's row, in Python ints modulo ``2^k``."""
    bits = 8 * form.dtype.itemsize
    sums = [[0] * form.shape[2] for _ in range(layout.num_items)]
    index = layout.gather_index.tolist()
    words = form.tolist()
    for b, row in enumerate(index):
        for p, item in enumerate(row):
            if item >= 0:
                sums[item] = [s + v for s, v in zip(sums[item], words[b][p], strict=True)]
    return np.array([[s % 2**bits for s in row] for row in sums], dtype=form.dtype)


def test_the_layouts_have_items_with_each_count_of_buckets() -> None:
    counts = set()
    for layout in LAYOUTS:
        counts |= set((layout.occurrences >= 0).sum(axis=1).tolist())
        assert (layout.gather_index < 0).any()  # padding positions to ignore
    assert counts == set(range(1, NUM_HASHES + 1))


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("width", [1, 3, 65])
@pytest.mark.parametrize("layout", LAYOUTS, ids=["m40", "m300", "m1682"])
def test_the_scatter_is_the_sum_of_each_items_positions(backend: str, dtype: type[np.unsignedinteger], width: int,
                                                        layout: CuckooLayout) -> None:
    form = _form(layout, dtype, width, width + layout.num_items)
    want = _expected(layout, form)
    got = layout.scatter(form)
    assert got.dtype == dtype
    assert np.array_equal(got, want)
    m = layout.num_items
    for lo, hi in ((0, 1), (m - 1, m), (1, m // 3), (m // 3, m), (m // 2, m // 2)):
        assert np.array_equal(layout.scatter(form, slice(lo, hi)), want[lo:hi])
    assert np.array_equal(layout.scatter(form, slice(1, None, 3)), want[1::3])


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_ranges_into_one_out_give_the_whole_scatter(backend: str, dtype: type[np.unsignedinteger]) -> None:
    layout = LAYOUTS[2]
    form = _form(layout, dtype, 5, 7)
    out = np.full((layout.num_items, 5), 0xA5, dtype)
    cuts = [0, 1, 400, 401, 1000, layout.num_items]
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        assert layout.scatter(form, slice(lo, hi), out=out[lo:hi]).base is out
    assert np.array_equal(out, _expected(layout, form))


@pytest.mark.skipif(not kernels.available(), reason="numba kernels are not available")
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("width", [1, 7, 64, 65])
def test_compiled_and_reference_give_the_same_words(monkeypatch: pytest.MonkeyPatch, dtype: type[np.unsignedinteger],
                                                    width: int) -> None:
    layout = CuckooLayout(5000, 700, 3)
    form = _form(layout, dtype, width, width)
    form[layout.gather_index >= 0] |= np.array(1, dtype) << np.array(8 * form.dtype.itemsize - 1, dtype)  # carries
    got = {}
    for name in ("numpy", "numba"):
        monkeypatch.setattr(kernels, "BACKEND", name)
        got[name] = layout.scatter(form, slice(17, 4321))
    assert np.array_equal(got["numba"], got["numpy"])


def test_a_strided_bucket_form_is_read_as_its_values(backend: str) -> None:
    layout = LAYOUTS[1]
    wide = _form(layout, np.uint64, 6, 11)
    form = wide[:, :, ::2]
    assert not form.flags.c_contiguous
    assert np.array_equal(layout.scatter(form), _expected(layout, np.ascontiguousarray(form)))


def test_bad_arguments_are_refused(backend: str) -> None:
    layout = LAYOUTS[1]
    form = _form(layout, np.uint32, 3, 1)
    m = layout.num_items
    with pytest.raises(InvalidParameters, match="bucket form must have shape"):
        layout.scatter(form[:-1])
    with pytest.raises(InvalidParameters, match="bucket form must have shape"):
        layout.scatter(form[:, :, 0])
    bad = [np.empty((m, 4), np.uint32), np.empty((m - 1, 3), np.uint32), np.empty((m, 3), np.uint64),
           np.empty((3, m), np.uint32).T, np.empty((m, 6), np.uint32)[:, ::2]]
    readonly = np.empty((m, 3), np.uint32)
    readonly.flags.writeable = False
    for out in [*bad, readonly, form.reshape(-1)[: m * 3].reshape(m, 3)]:
        before = out.copy()
        with pytest.raises(InvalidParameters, match="out must be"):
            layout.scatter(form, out=out)
        assert np.array_equal(out, before)


@pytest.mark.parametrize("workers", [1, 3])
def test_the_servers_scatter_in_ranges_is_the_whole_scatter(backend: str, workers: int) -> None:
    """``SecEmbServer._scatter`` over one range or a thread backend's ranges: the layout's whole scatter."""
    from secemb.protocols.backends import ThreadBackend

    layout = LAYOUTS[2]
    form = _form(layout, np.uint64, 9, 5)

    class _Cfg:
        def cuckoo(self) -> CuckooLayout:
            return layout

    server = SecEmbServer.__new__(SecEmbServer)
    server.backend = ThreadBackend(workers)
    server._cfg = _Cfg  # type: ignore[method-assign]
    try:
        got = server._scatter(form)
    finally:
        server.backend.close()
    assert np.array_equal(got, _expected(layout, form))
