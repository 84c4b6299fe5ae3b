"""Issue 37 (session 36, helper G3): :func:`secemb.fss.convert.convert_add` of a batch array's rows.

``dst`` (and ``src``) may be one array (N, ...) whose rows are the N arrays: checked once and the rows'
addresses computed from the array's own (a device's reconstruction writes its answers so, server 1's relay
answers add their masks so).  The same bits as the list of the same rows (written apart, computed by the
list path, which the session 27 tests check against ``src + convert(...)``), on both backends, in place and
from other arrays (a list of read-only views, a non-contiguous array); arrays the list path refuses are
refused as arrays too, before anything is written.
"""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.fss import convert
from secemb.fss.convert import convert_add

TAG = "relay"


def _words(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, (n, 2), dtype=np.uint64)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("shape", [(1,), (5,), (2, 3), (267, 69)])
@pytest.mark.parametrize("negate", [False, True])
def test_rows_of_an_array_get_the_bits_of_the_list(backend: str, dtype: type[np.unsignedinteger],
                                                    shape: tuple[int, ...], negate: bool) -> None:
    n = 5
    words = _words(n, shape[-1])
    src = np.random.default_rng(len(shape)).integers(0, 2**63, (n, *shape)).astype(dtype)
    want = np.zeros((n, *shape), dtype)
    convert_add(words, TAG, list(want), list(src), negate=negate)  # the list path
    masks = convert.convert(words, int(np.prod(shape)), 8 * np.dtype(dtype).itemsize, TAG).reshape(n, *shape)
    assert np.array_equal(want, src - masks if negate else src + masks)
    for dst_rows, src_rows in ((True, True), (True, False), (False, True)):
        dst = np.full((n, *shape), 0xA5, dtype)
        convert_add(words, TAG, dst if dst_rows else list(dst), src if src_rows else list(src), negate=negate)
        assert np.array_equal(dst, want)
    inplace = src.copy()
    convert_add(words, TAG, inplace, negate=negate)  # src None: the array's rows themselves
    assert np.array_equal(inplace, want)
    inplace = src.copy()
    convert_add(words, TAG, inplace, inplace, negate=negate)  # src the same array
    assert np.array_equal(inplace, want)


def test_read_only_and_strided_sources_with_an_array_of_destinations(backend: str) -> None:
    words = _words(4, 1)
    wide = np.random.default_rng(2).integers(0, 2**32, (4, 30, 2), dtype=np.uint32)
    strided = wide[:, :, 0]  # (4, 30), rows not contiguous
    views = [np.frombuffer(row.tobytes(), np.uint32) for row in strided]  # read-only, as a reply's bytes are
    want = strided - convert.convert(words, 30, 32, TAG)
    for src in (strided, views):
        dst = np.zeros((6, 30), np.uint32)
        convert_add(words, TAG, dst[1:5], src, negate=True)
        assert np.array_equal(dst[1:5], want)
        assert (dst[[0, 5]] == 0).all()  # only the destinations are written


@pytest.mark.parametrize("case", ["read-only", "strided", "dtype", "words", "sources", "source-dtype", "one-axis"])
def test_arrays_refused_as_rows_are_refused(backend: str, case: str) -> None:
    dst = np.zeros((2, 8), np.uint32)
    words, src = _words(2, 3), None
    target = dst
    if case == "read-only":
        dst.flags.writeable = False
    elif case == "strided":
        target = np.zeros((2, 16), np.uint32)
        dst = target[:, ::2]  # rows not contiguous: the kernel writes each row at its address
    elif case == "dtype":
        target = dst = np.zeros((2, 8), np.int32)
    elif case == "words":
        words = _words(3, 3)
    elif case == "sources":
        src = np.zeros((1, 8), np.uint32)
    elif case == "source-dtype":
        src = np.zeros((2, 8), np.uint64)
    else:  # a 1-d array is no batch of rows (its elements are not arrays): refused as before
        target = dst = np.zeros(2, np.uint32)
    with pytest.raises(InvalidParameters, match="convert_add"):
        convert_add(words, TAG, dst, src)
    assert (target == 0).all()


def test_the_kernel_gets_one_address_type_either_way() -> None:
    """The rows' addresses computed from an array are the kernel argument type the list's give (no new
    numba signature to compile cold), and the same addresses."""
    numba = pytest.importorskip("numba")
    batch = np.zeros((4, 3, 5), np.uint32)
    from_array, from_list = convert._addresses(batch), convert._addresses(list(batch))
    assert str(numba.typeof(from_array)) == str(numba.typeof(from_list)) == "array(int64, 1d, C)"
    assert np.array_equal(from_array, from_list)
